// Checking the options and planning the ranks: everything Launch() decides before it
// creates the run directory and forks.
#include "launch/plan.h"

#include <netdb.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "trainscope/core/env_vars.h"
#include "trainscope/core/os.h"
#include "trainscope/core/run_dir.h"

extern char** environ;

namespace trainscope::launch {
namespace {

// The same cap as the store's (comm/store.h kMaxJobTokenBytes); launch does not link comm.
constexpr size_t kMaxJobTokenBytes = 512;

std::string HostName() {
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) return "localhost";
  return host;
}

// The devices the local ranks share out: a user-given visible list is honoured, else every
// detected device.
std::vector<std::string> VisibleDevices(const LaunchOptions& o, const HostView& host) {
  std::vector<std::string> visible;
  if (host.devices.visible_var.empty()) return visible;
  std::string given = host.visible_env;
  if (auto it = o.env.find(host.devices.visible_var); it != o.env.end()) given = it->second;
  for (absl::string_view d : absl::StrSplit(given, ',', absl::SkipEmpty())) {
    visible.emplace_back(d);
  }
  if (visible.empty()) {
    for (int d = 0; d < host.devices.count; ++d) visible.push_back(std::to_string(d));
  }
  return visible;
}

// The environment every rank shares: the launcher's, then o.env, the token and the job id.
std::map<std::string, std::string> BaseEnv(const LaunchOptions& o, const HostView& host,
                                           const std::string& token, const std::string& job_id) {
  std::map<std::string, std::string> base = host.environ;
  for (const auto& [k, v] : o.env) base[k] = v;
  base[envvar::kJobToken] = token;
  base[envvar::kJobId] = job_id;
  return base;
}

// One rank's whole environment, "NAME=value" in name order.
std::vector<std::string> RankEnv(std::map<std::string, std::string> env, const JobPlan& job,
                                 const RankPlan& r, int node_rank) {
  env[envvar::kRank] = std::to_string(r.rank);
  env[envvar::kWorldSize] = std::to_string(job.world_size);
  env[envvar::kLocalRank] = std::to_string(r.local_rank);
  env[envvar::kLocalWorldSize] = std::to_string(job.nproc);
  env[envvar::kGroupRank] = std::to_string(node_rank);
  env[envvar::kMasterAddr] = job.master_addr;
  env[envvar::kMasterPort] = std::to_string(job.master_port);
  env[envvar::kRunDir] = job.abs_run_dir;
  if (!job.visible_var.empty()) env[job.visible_var] = r.device;
  // Threads per rank: the CPUs it is bound to, unless the user chose.
  if (!r.cpus.empty() && !env.count(envvar::kOmpNumThreads)) {
    env[envvar::kOmpNumThreads] = std::to_string(r.cpus.size());
  }
  // Live output of Python ranks would otherwise arrive in 4 KiB lumps.
  if (!env.count("PYTHONUNBUFFERED")) env["PYTHONUNBUFFERED"] = "1";
  std::vector<std::string> out;
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

}  // namespace

absl::Status ValidateOptions(const LaunchOptions& o) {
  if (o.argv.empty()) return absl::InvalidArgumentError("no program given to launch");
  if (o.nnodes < 1) return absl::InvalidArgumentError("--nnodes must be >= 1");
  if (o.node_rank < 0 || o.node_rank >= o.nnodes) {
    return absl::InvalidArgumentError(
        absl::StrCat("--node-rank ", o.node_rank, " is out of range for --nnodes ", o.nnodes));
  }
  if (o.nproc_per_node < 0) return absl::InvalidArgumentError("-n must be >= 1");
  if (o.master_port < 0 || o.master_port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--master-port ", o.master_port, " is not a TCP port"));
  }
  if (o.nnodes > 1 && o.master_port == 0) {
    return absl::InvalidArgumentError(
        "--master-port is required with --nnodes > 1 (every node must agree on it)");
  }
  if (o.exit_timeout.count() < 0 || o.job_timeout.count() < 0) {
    return absl::InvalidArgumentError("--timeout and --job-timeout must be >= 0");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ResolveJobToken(const LaunchOptions& o) {
  std::string token = o.job_token;
  if (token.empty()) {
    if (auto it = o.env.find(envvar::kJobToken); it != o.env.end()) {
      token = it->second;
    } else if (const char* v = std::getenv(envvar::kJobToken)) {
      token = v;
    }
  }
  if (token.size() > kMaxJobTokenBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(envvar::kJobToken, " is longer than ", kMaxJobTokenBytes, " bytes"));
  }
  if (!token.empty()) return token;
  if (o.nnodes > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--nnodes > 1 needs the same ", envvar::kJobToken,
                     " on every node (the rendezvous store refuses ranks without it); e.g. "
                     "export ",
                     envvar::kJobToken,
                     "=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \\n') "
                     "and pass that value to every node's launcher"));
  }
  return RandomHexToken();
}

absl::Status CheckMasterAddressIsLocal(const std::string& addr) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int gai = ::getaddrinfo(addr.c_str(), "0", &hints, &res);
  if (gai != 0 || res == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot resolve --master-addr '", addr, "': ", ::gai_strerror(gai)));
  }
  const addrinfo* pick = res;
  for (const addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    if (ai->ai_family == AF_INET) {
      pick = ai;
      break;
    }
  }
  int fd = ::socket(pick->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int err = 0;
  if (fd < 0 || ::bind(fd, pick->ai_addr, pick->ai_addrlen) != 0) err = errno;
  if (fd >= 0) ::close(fd);
  ::freeaddrinfo(res);
  if (err == EADDRNOTAVAIL) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--master-addr ", addr,
        " is not an address of this host, but node 0 hosts rank 0's rendezvous store there; "
        "give node 0's own address (the store listens on it only)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<HostView> ReadHost(const LaunchOptions& o) {
  HostView host;
  host.devices = DetectLocalDevices(o.dev_root);
  if (o.master_port == 0) {
    absl::StatusOr<int> port = PickFreePort();
    if (!port.ok()) return port.status();
    host.free_port = *port;
  }
  if (!host.devices.visible_var.empty()) {
    if (const char* v = std::getenv(host.devices.visible_var.c_str())) host.visible_env = v;
  }
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv(*e);
    size_t eq = kv.find('=');
    if (eq != std::string::npos) host.environ[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  // CPU affinity over the CPUs this launcher may use.
  cpu_set_t set;
  CPU_ZERO(&set);
  if (o.bind_cpus && ::sched_getaffinity(0, sizeof(set), &set) == 0) {
    std::vector<int> allowed;
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) allowed.push_back(c);
    host.numa_nodes = ReadNumaNodes(o.sysfs_root, allowed);
  }
  if (o.run_dir.empty()) host.default_run_dir = run_dir::DefaultRunDir("launch");
  std::error_code ec;
  host.cwd = std::filesystem::current_path(ec).string();
  host.host_name = HostName();
  host.pid = static_cast<int>(::getpid());
  return host;
}

absl::StatusOr<JobPlan> PlanJob(const LaunchOptions& o, const HostView& host,
                                const std::string& token) {
  JobPlan job;
  job.nproc = o.nproc_per_node > 0 ? o.nproc_per_node : std::max(host.devices.count, 1);
  job.world_size = job.nproc * o.nnodes;
  // One node: the store listens on loopback only, whatever --master-addr says.
  job.master_addr = o.nnodes == 1 ? std::string("127.0.0.1") : o.master_addr;
  job.master_port = o.master_port > 0 ? o.master_port : host.free_port;
  job.run_dir = o.run_dir.empty() ? host.default_run_dir : o.run_dir;
  job.abs_run_dir = (std::filesystem::path(host.cwd) / job.run_dir).string();
  // With several nodes the job id is the rendezvous endpoint, the same on every node (one
  // shared run directory is one job; core/run_dir_lock.h).
  job.job_id = o.nnodes > 1 ? absl::StrCat("launch/", job.master_addr, ":", job.master_port)
                            : absl::StrCat("launch/", host.host_name, "/", host.pid);
  job.visible_var = host.devices.visible_var;
  // A placement (launch --placement topo) names each rank's device itself.
  if (!o.rank_devices.empty()) {
    if (static_cast<int>(o.rank_devices.size()) < job.nproc) {
      return absl::InvalidArgumentError(absl::StrCat("the placement names ", o.rank_devices.size(),
                                                     " devices for ", job.nproc, " local ranks"));
    }
    if (!o.rank_devices_var.empty()) job.visible_var = o.rank_devices_var;
    if (job.visible_var.empty()) {
      return absl::InvalidArgumentError(
          "a device placement needs the visible-devices variable (no devices detected)");
    }
  }
  const std::vector<std::string> devices =
      PlanRankDevices(VisibleDevices(o, host), o.rank_devices, job.nproc);
  const std::vector<std::vector<int>> cpus = PlanAffinity(host.numa_nodes, job.nproc);
  const std::map<std::string, std::string> base = BaseEnv(o, host, token, job.job_id);
  for (int lr = 0; lr < job.nproc; ++lr) {
    RankPlan r;
    r.local_rank = lr;
    r.rank = o.node_rank * job.nproc + lr;
    r.cpus = cpus[lr];
    if (!devices.empty()) r.device = devices[lr];  // exactly when visible_var is set
    r.log_dir = run_dir::RankLogDir(job.run_dir, r.rank);
    r.stdout_log = r.log_dir + "/" + run_dir::kRankStdoutLog;
    r.stderr_log = r.log_dir + "/" + run_dir::kRankStderrLog;
    r.env = RankEnv(base, job, r, o.node_rank);
    job.ranks.push_back(std::move(r));
  }
  return job;
}

}  // namespace trainscope::launch
