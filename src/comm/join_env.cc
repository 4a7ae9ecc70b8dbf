// JoinOptionsFromEnvironment: which launcher started this process and what it told it
// (join.h). Pure parsing over an Os, so every launcher is tested with a fake environment.
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "trainscope/comm/comm.h"
#include "trainscope/comm/join.h"
#include "trainscope/core/env_vars.h"
#include "trainscope/core/status.h"

namespace trainscope::comm {
namespace {

// The fallback rendezvous port (torch's TCPStore default) when nothing names one.
constexpr int kDefaultMasterPort = 29500;

// Reads variables through the Os; an empty value counts as unset (as `export X=` does for
// every launcher we know).
class EnvReader {
 public:
  explicit EnvReader(Os* os) : os_(os) {}
  std::optional<std::string> Str(const char* name) const {
    std::string v;
    if (!os_->GetEnv(name, &v) || v.empty()) return std::nullopt;
    return v;
  }
  bool Has(const char* name) const { return Str(name).has_value(); }
  // Absent leaves *out alone and returns false in *present.
  absl::Status Int(const char* name, int* out, bool* present = nullptr) const {
    std::optional<std::string> v = Str(name);
    if (present != nullptr) *present = v.has_value();
    if (!v) return absl::OkStatus();
    int parsed;
    if (!absl::SimpleAtoi(*v, &parsed)) {
      return absl::InvalidArgumentError(
          absl::StrCat("environment variable ", name, "='", *v, "' is not an integer"));
    }
    *out = parsed;
    return absl::OkStatus();
  }

 private:
  Os* os_;
};

Launcher DetectLauncher(const EnvReader& env) {
  const bool torch_style = env.Has(envvar::kRank) && env.Has(envvar::kWorldSize);
  if (torch_style && env.Has(envvar::kTorchelasticRunId)) return Launcher::kTorchrun;
  if (env.Has(envvar::kRank)) return Launcher::kTrainscope;
  if (env.Has(envvar::kOmpiRank)) return Launcher::kOpenMpi;
  if (env.Has(envvar::kPmiRank) && env.Has(envvar::kPmiSize)) return Launcher::kPmi;
  const bool in_step = env.Has(envvar::kSlurmStepId) || env.Has(envvar::kSlurmStepIdOld) ||
                       env.Has(envvar::kSlurmStepNodelist);
  if (env.Has(envvar::kSlurmProcId) && env.Has(envvar::kSlurmNtasks) && in_step) {
    // A one-task step (srun -n 1, salloc's shell) is no job of several ranks: what runs in it
    // may start its own (`selftest comm -n 2`, doctor). A malformed count is ReadSlurm's.
    std::optional<std::string> n = env.Str(envvar::kSlurmStepNumTasks);
    if (!n) n = env.Str(envvar::kSlurmNtasks);
    return *n == "1" ? Launcher::kNone : Launcher::kSlurm;
  }
  return Launcher::kNone;
}

// FNV-1a: a stable hash (std::hash may differ between builds of the ranks).
uint64_t Fnv1a(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (char c : s) {
    h ^= static_cast<uint8_t>(c);
    h *= 1099511628211ull;
  }
  return h;
}

int DerivedPort(const std::string& job_id) {
  return kDerivedPortBase + static_cast<int>(Fnv1a(job_id) % kDerivedPortSpan);
}

// ---- torchrun and trainscope launch: the torchrun conventions.
absl::Status ReadTorchStyle(const EnvReader& env, JoinOptions& jo) {
  CommOptions& o = jo.comm;
  TS_RETURN_IF_ERROR(env.Int(envvar::kRank, &o.rank));
  TS_RETURN_IF_ERROR(env.Int(envvar::kWorldSize, &o.world_size));
  TS_RETURN_IF_ERROR(env.Int(envvar::kLocalRank, &o.local_rank));
  TS_RETURN_IF_ERROR(env.Int(envvar::kLocalWorldSize, &o.local_world_size));
  jo.rendezvous = Rendezvous::kStore;
  if (jo.launcher == Launcher::kTorchrun) {
    const std::string run_id = env.Str(envvar::kTorchelasticRunId).value_or("none");
    const std::string restart = env.Str(envvar::kTorchelasticRestartCount).value_or("0");
    jo.job_id = run_id;
    // A restarted attempt gets a key of its own: the agent's store outlives attempts.
    jo.agent_store_key = absl::StrCat("trainscope/", run_id, "/", restart, "/store");
    // torch compares with str(True).
    if (env.Str(envvar::kTorchelasticUseAgentStore).value_or("") == "True") {
      jo.rendezvous = Rendezvous::kAgentStore;
    }
  }
  return absl::OkStatus();
}

// ---- mpirun (Open MPI) and PMI (MPICH / Intel MPI hydra, srun --mpi=pmi2).
absl::Status ReadMpi(const EnvReader& env, JoinOptions& jo, bool* single_node) {
  CommOptions& o = jo.comm;
  const bool ompi = jo.launcher == Launcher::kOpenMpi;
  const char* rank = ompi ? envvar::kOmpiRank : envvar::kPmiRank;
  const char* size = ompi ? envvar::kOmpiSize : envvar::kPmiSize;
  const char* local_rank = ompi ? envvar::kOmpiLocalRank : envvar::kMpiLocalRankId;
  const char* local_size = ompi ? envvar::kOmpiLocalSize : envvar::kMpiLocalNranks;
  jo.rank_var = rank;
  jo.world_size_var = size;
  bool have_local_size = false;
  TS_RETURN_IF_ERROR(env.Int(rank, &o.rank));
  TS_RETURN_IF_ERROR(env.Int(size, &o.world_size));
  TS_RETURN_IF_ERROR(env.Int(local_rank, &o.local_rank));
  TS_RETURN_IF_ERROR(env.Int(local_size, &o.local_world_size, &have_local_size));
  *single_node = o.world_size <= 1 || (have_local_size && o.local_world_size >= o.world_size);
  if (ompi) {
    jo.job_id = env.Str(envvar::kPmixNamespace).value_or(env.Str(envvar::kOmpiJobId).value_or(""));
  } else {
    jo.job_id = env.Str(envvar::kPmiJobId).value_or("");
  }
  jo.rendezvous = Rendezvous::kStore;
  return absl::OkStatus();
}

// Tasks on node `node_id` of a Slurm step, 0 when the variables do not say.
absl::StatusOr<int> SlurmLocalTasks(const EnvReader& env, int node_id) {
  int per_node = 0;
  TS_RETURN_IF_ERROR(env.Int(envvar::kSlurmNtasksPerNode, &per_node));
  if (per_node > 0) return per_node;
  for (const char* name : {envvar::kSlurmStepTasksPerNode, envvar::kSlurmTasksPerNode}) {
    std::optional<std::string> spec = env.Str(name);
    if (!spec) continue;
    auto tasks = ExpandSlurmTasksPerNode(*spec);
    if (!tasks.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("environment variable ", name, ": ", tasks.status().message()));
    }
    if (node_id >= 0 && static_cast<size_t>(node_id) < tasks->size()) return (*tasks)[node_id];
    return 0;
  }
  return 0;
}

// ---- srun: SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID, rank 0 on the step's first node.
absl::Status ReadSlurm(const EnvReader& env, JoinOptions& jo) {
  CommOptions& o = jo.comm;
  jo.rank_var = envvar::kSlurmProcId;
  TS_RETURN_IF_ERROR(env.Int(envvar::kSlurmProcId, &o.rank));
  bool step_tasks = false;
  TS_RETURN_IF_ERROR(env.Int(envvar::kSlurmStepNumTasks, &o.world_size, &step_tasks));
  if (!step_tasks) TS_RETURN_IF_ERROR(env.Int(envvar::kSlurmNtasks, &o.world_size));
  jo.world_size_var = step_tasks ? envvar::kSlurmStepNumTasks : envvar::kSlurmNtasks;
  TS_RETURN_IF_ERROR(env.Int(envvar::kSlurmLocalId, &o.local_rank));
  int node_id = 0;
  TS_RETURN_IF_ERROR(env.Int(envvar::kSlurmNodeId, &node_id));
  auto local = SlurmLocalTasks(env, node_id);
  if (!local.ok()) return local.status();
  o.local_world_size = *local > 0 ? *local : 1;
  // The job id names the step: two steps of one job on one node get different ports.
  std::string job = env.Str(envvar::kSlurmJobId).value_or("");
  std::string step =
      env.Str(envvar::kSlurmStepId).value_or(env.Str(envvar::kSlurmStepIdOld).value_or(""));
  jo.job_id = job.empty() ? "" : (step.empty() ? job : absl::StrCat(job, ".", step));
  if (!env.Has(envvar::kMasterAddr)) {
    for (const char* name :
         {envvar::kSlurmStepNodelist, envvar::kSlurmJobNodelist, envvar::kSlurmNodelist}) {
      std::optional<std::string> list = env.Str(name);
      if (!list) continue;
      auto hosts = ExpandSlurmNodelist(*list, 1);
      if (!hosts.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("environment variable ", name, "='", *list,
                                                       "': ", hosts.status().message()));
      }
      if (hosts->empty()) continue;
      o.master_addr = hosts->front();
      jo.master_addr_from = absl::StrCat(name, " (first host)");
      break;
    }
  }
  jo.rendezvous = Rendezvous::kStore;
  return absl::OkStatus();
}

// MASTER_ADDR / MASTER_PORT over whatever the launcher derived; a port from the job id when
// a launcher without the torchrun conventions gave none.
absl::Status ReadMaster(const EnvReader& env, JoinOptions& jo) {
  CommOptions& o = jo.comm;
  if (std::optional<std::string> a = env.Str(envvar::kMasterAddr)) {
    o.master_addr = *a;
    jo.master_addr_from = envvar::kMasterAddr;
  }
  bool have_port = false;
  TS_RETURN_IF_ERROR(env.Int(envvar::kMasterPort, &o.master_port, &have_port));
  if (have_port) {
    jo.master_port_from = envvar::kMasterPort;
  } else if (jo.launcher == Launcher::kOpenMpi || jo.launcher == Launcher::kPmi ||
             jo.launcher == Launcher::kSlurm) {
    if (!jo.job_id.empty()) {
      o.master_port = DerivedPort(jo.job_id);
      jo.master_port_from = absl::StrCat("derived from the job id ", jo.job_id);
    } else {
      o.master_port = kDefaultMasterPort;
    }
  }
  if (o.master_port < 0 || o.master_port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("MASTER_PORT=", o.master_port, " is not a TCP port"));
  }
  return absl::OkStatus();
}

// GLOO_SOCKET_IFNAME and TRAINSCOPE_COMM_TIMEOUT_S, for every launcher.
absl::Status ReadTuning(const EnvReader& env, CommOptions& o) {
  // PyTorch opens one gloo device per listed interface; trainscope uses the first.
  if (std::optional<std::string> i = env.Str(envvar::kGlooSocketIfname); i && o.iface.empty()) {
    o.iface = i->substr(0, i->find(','));
  }
  if (std::optional<std::string> t = env.Str(envvar::kCommTimeoutS)) {
    double s;
    if (!absl::SimpleAtod(*t, &s) || !(s > 0)) {
      return absl::InvalidArgumentError(absl::StrCat("environment variable ", envvar::kCommTimeoutS,
                                                     "='", *t, "' is not a positive number"));
    }
    o.timeout = std::chrono::milliseconds(static_cast<int64_t>(s * 1000));
  }
  return absl::OkStatus();
}

absl::Status Validate(const JoinOptions& jo) {
  const CommOptions& o = jo.comm;
  if (o.world_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(jo.world_size_var, "=", o.world_size, " must be >= 1"));
  }
  if (o.rank < 0 || o.rank >= o.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        jo.rank_var, "=", o.rank, " is out of range for ", jo.world_size_var, "=", o.world_size));
  }
  if (o.local_rank < 0) {
    return absl::InvalidArgumentError(absl::StrCat("local rank ", o.local_rank, " is negative"));
  }
  return absl::OkStatus();
}

}  // namespace

const char* LauncherName(Launcher launcher) {
  switch (launcher) {
    case Launcher::kNone:
      return "none";
    case Launcher::kTorchrun:
      return "torchrun";
    case Launcher::kTrainscope:
      return "trainscope";
    case Launcher::kOpenMpi:
      return "openmpi";
    case Launcher::kPmi:
      return "pmi";
    case Launcher::kSlurm:
      return "slurm";
  }
  return "?";
}

const char* RendezvousName(Rendezvous rendezvous) {
  switch (rendezvous) {
    case Rendezvous::kNone:
      return "none";
    case Rendezvous::kStore:
      return "store";
    case Rendezvous::kAgentStore:
      return "agent_store";
    case Rendezvous::kMpi:
      return "mpi";
  }
  return "?";
}

absl::StatusOr<JoinOptions> JoinOptionsFromEnvironment(const CommOptions& defaults, Os* os) {
  EnvReader env(os);
  JoinOptions jo;
  jo.comm = defaults;
  jo.launcher = DetectLauncher(env);
  bool mpi_single_node = true;
  switch (jo.launcher) {
    case Launcher::kNone:
      break;
    case Launcher::kTorchrun:
    case Launcher::kTrainscope:
      TS_RETURN_IF_ERROR(ReadTorchStyle(env, jo));
      break;
    case Launcher::kOpenMpi:
    case Launcher::kPmi:
      TS_RETURN_IF_ERROR(ReadMpi(env, jo, &mpi_single_node));
      break;
    case Launcher::kSlurm:
      TS_RETURN_IF_ERROR(ReadSlurm(env, jo));
      break;
  }
  TS_RETURN_IF_ERROR(ReadMaster(env, jo));
  TS_RETURN_IF_ERROR(ReadTuning(env, jo.comm));
  TS_RETURN_IF_ERROR(Validate(jo));
  if (jo.comm.world_size == 1) {
    jo.rendezvous = Rendezvous::kNone;
  } else if (jo.comm.backend == "mpi") {
    jo.rendezvous = Rendezvous::kMpi;
  } else if ((jo.launcher == Launcher::kOpenMpi || jo.launcher == Launcher::kPmi) &&
             jo.master_addr_from == "default") {
    if (!mpi_single_node) {
      return absl::InvalidArgumentError(absl::StrCat(
          "this ", jo.comm.world_size, "-rank ", LauncherName(jo.launcher),
          " job spans several nodes and the ", jo.comm.backend,
          " backend meets at rank 0's rendezvous store: set MASTER_ADDR to an address of rank "
          "0's node (and MASTER_PORT to a free port) for every rank, e.g. mpirun -x "
          "MASTER_ADDR=<node 0> -x MASTER_PORT=29500, or use --backend mpi"));
    }
    jo.comm.master_addr = "127.0.0.1";
    jo.master_addr_from = "127.0.0.1 (every rank on this node)";
  }
  return jo;
}

absl::StatusOr<CommOptions> OptionsFromEnvironment(CommOptions defaults) {
  auto jo = JoinOptionsFromEnvironment(defaults);
  if (!jo.ok()) return jo.status();
  return std::move(jo->comm);
}

// ---------------------------------------------------------------------------------------
// Slurm's compact lists.

namespace {

// This absl predates std::string_view interoperability.
absl::string_view AbslView(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// Expands one name that may carry several bracket groups ("rack[1-2]-gpu[01,03]"),
// appending to `out` until it holds `max_hosts`.
absl::Status ExpandSlurmName(std::string_view name, std::string prefix, size_t max_hosts,
                             std::vector<std::string>& out) {
  const size_t open = name.find('[');
  if (open == std::string_view::npos) {
    if (name.find(']') != std::string_view::npos) {
      return absl::InvalidArgumentError("unbalanced ']'");
    }
    out.push_back(prefix + std::string(name));
    return absl::OkStatus();
  }
  const size_t close = name.find(']', open);
  if (close == std::string_view::npos) return absl::InvalidArgumentError("unbalanced '['");
  prefix += std::string(name.substr(0, open));
  if (prefix.find(']') != std::string::npos) return absl::InvalidArgumentError("unbalanced ']'");
  std::string_view ranges = name.substr(open + 1, close - open - 1);
  std::string_view rest = name.substr(close + 1);
  size_t pos = 0;
  while (pos <= ranges.size() && out.size() < max_hosts) {
    size_t comma = ranges.find(',', pos);
    if (comma == std::string_view::npos) comma = ranges.size();
    std::string_view r = ranges.substr(pos, comma - pos);
    pos = comma + 1;
    const size_t dash = r.find('-');
    std::string_view lo_s = r.substr(0, dash);
    std::string_view hi_s = dash == std::string_view::npos ? lo_s : r.substr(dash + 1);
    uint64_t lo, hi;
    if (lo_s.empty() || hi_s.empty() || !absl::SimpleAtoi(AbslView(lo_s), &lo) ||
        !absl::SimpleAtoi(AbslView(hi_s), &hi) || lo > hi || !absl::ascii_isdigit(lo_s[0]) ||
        !absl::ascii_isdigit(hi_s[0])) {
      return absl::InvalidArgumentError(absl::StrCat("bad range '", AbslView(r), "'"));
    }
    const size_t width = lo_s.size();  // "01-04" keeps two digits
    for (uint64_t i = lo; i <= hi && out.size() < max_hosts; ++i) {
      std::string n = std::to_string(i);
      if (n.size() < width) n.insert(0, width - n.size(), '0');
      TS_RETURN_IF_ERROR(ExpandSlurmName(rest, prefix + n, max_hosts, out));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ExpandSlurmNodelist(std::string_view list,
                                                             size_t max_hosts) {
  std::vector<std::string> out;
  size_t start = 0;
  int depth = 0;
  for (size_t i = 0; i <= list.size() && out.size() < max_hosts; ++i) {
    const char c = i < list.size() ? list[i] : ',';
    if (c == '[') ++depth;
    if (c == ']' && --depth < 0) return absl::InvalidArgumentError("unbalanced ']'");
    if (c != ',' || depth > 0) continue;
    absl::string_view name = absl::StripAsciiWhitespace(AbslView(list.substr(start, i - start)));
    start = i + 1;
    if (name.empty()) return absl::InvalidArgumentError("empty host name");
    TS_RETURN_IF_ERROR(
        ExpandSlurmName(std::string_view(name.data(), name.size()), "", max_hosts, out));
  }
  if (depth > 0) return absl::InvalidArgumentError("unbalanced '['");
  return out;
}

absl::StatusOr<std::vector<int>> ExpandSlurmTasksPerNode(std::string_view spec) {
  std::vector<int> out;
  size_t pos = 0;
  while (pos <= spec.size()) {
    size_t comma = spec.find(',', pos);
    if (comma == std::string_view::npos) comma = spec.size();
    std::string_view item = spec.substr(pos, comma - pos);
    pos = comma + 1;
    int tasks = 0, repeat = 1;
    const size_t paren = item.find("(x");
    std::string_view count = item.substr(0, paren);
    bool ok = absl::SimpleAtoi(AbslView(count), &tasks) && tasks >= 0;
    if (ok && paren != std::string_view::npos) {
      ok = item.back() == ')' &&
           absl::SimpleAtoi(AbslView(item.substr(paren + 2, item.size() - paren - 3)), &repeat) &&
           repeat >= 1 && repeat <= (1 << 20);
    }
    if (!ok)
      return absl::InvalidArgumentError(
          absl::StrCat("bad tasks-per-node item '", AbslView(item), "'"));
    out.insert(out.end(), static_cast<size_t>(repeat), tasks);
    if (out.size() > (1u << 20)) return absl::InvalidArgumentError("too many nodes");
  }
  return out;
}

}  // namespace trainscope::comm
