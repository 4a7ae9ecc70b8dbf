// Known traps that break or slow training, checked on a fingerprint. Thresholds and
// defaults come from the vendors' documentation (see docs/formats.md, "Compatibility
// matrix", and the reference notes for HCCL/NCCL variables).
#include "env/rules.h"

#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "trainscope/core/table.h"

namespace trainscope::env {

using nlohmann::json;

namespace {

constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kGiB = 1024.0 * kMiB;

std::optional<std::string> Env(const json& fp, const std::string& name) {
  if (!fp.contains("env") || !fp["env"].is_object()) return std::nullopt;
  auto it = fp["env"].find(name);
  if (it == fp["env"].end() || !it->is_string()) return std::nullopt;
  return it->get<std::string>();
}

std::optional<long long> EnvInt(const json& fp, const std::string& name) {
  std::optional<std::string> v = Env(fp, name);
  long long n;
  if (v && absl::SimpleAtoi(*v, &n)) return n;
  return std::nullopt;
}

bool HasNvidia(const json& fp) {
  return Value(fp, "accelerators.nvidia") && fp["accelerators"]["nvidia"].is_object();
}
bool HasAscend(const json& fp) {
  return Value(fp, "accelerators.ascend") && fp["accelerators"]["ascend"].is_object();
}
bool HasAccelerator(const json& fp) { return HasNvidia(fp) || HasAscend(fp); }

bool UsesAscend(const json& fp) {
  if (HasAscend(fp) || Value(fp, "toolkits.cann")) return true;
  if (fp.contains("env") && fp["env"].is_object()) {
    for (auto it = fp["env"].begin(); it != fp["env"].end(); ++it) {
      if (absl::StartsWith(it.key(), "HCCL_")) return true;
    }
  }
  return false;
}

}  // namespace

bool IsMultiNode(const json& fp, std::string* why) {
  std::optional<long long> world = EnvInt(fp, "WORLD_SIZE");
  std::optional<long long> local = EnvInt(fp, "LOCAL_WORLD_SIZE");
  if (world && local && *world > *local) {
    *why = absl::StrCat("WORLD_SIZE=", *world, " > LOCAL_WORLD_SIZE=", *local);
    return true;
  }
  if (std::optional<long long> nnodes = EnvInt(fp, "NNODES"); nnodes && *nnodes > 1) {
    *why = absl::StrCat("NNODES=", *nnodes);
    return true;
  }
  std::optional<std::string> addr = Env(fp, "MASTER_ADDR");
  if (addr && !addr->empty() && *addr != "localhost" && !absl::StartsWith(*addr, "127.") &&
      *addr != "::1" && *addr != fp.value("hostname", "")) {
    *why = absl::StrCat("MASTER_ADDR=", *addr, " is another host");
    return true;
  }
  return false;
}

namespace {

void LimitRules(const json& fp, std::vector<Finding>* out) {
  const bool accel = HasAccelerator(fp);
  // memlock: RDMA (InfiniBand/RoCE, used by NCCL and HCCL across nodes) and pinned host
  // memory register pages; a small limit fails registration or falls back to slow paths.
  const json* memlock = Value(fp, "limits.memlock_soft_bytes");
  if (memlock && memlock->is_number()) {
    double v = memlock->get<double>();
    if (v < 64 * kMiB) {
      out->push_back({accel ? Severity::kError : Severity::kWarning, "limits.memlock",
                      absl::StrCat("locked-memory limit (ulimit -l) is only ", FormatBytes(v),
                                   ": RDMA memory registration and pinned buffers fail or "
                                   "fall back to slow paths"),
                      absl::StrCat("limits.memlock_soft_bytes = ", static_cast<long long>(v), " (",
                                   FormatBytes(v), ")"),
                      "Set it to unlimited: `ulimit -l unlimited`, '* - memlock unlimited' in "
                      "/etc/security/limits.conf, or `docker run --ulimit memlock=-1:-1`."});
    } else {
      out->push_back({Severity::kInfo, "limits.memlock",
                      absl::StrCat("locked-memory limit is ", FormatBytes(v), ", not unlimited"),
                      absl::StrCat("limits.memlock_soft_bytes = ", static_cast<long long>(v)),
                      "For multi-node RDMA jobs set `ulimit -l unlimited`."});
    }
  }
  // /dev/shm: DataLoader workers pass batches through it and NCCL's SHM transport uses
  // it; Docker's default 64 MB gives "Bus error" / "unable to write to file </torch_...>".
  const json* shm = Value(fp, "limits.shm_size_bytes");
  if (fp.contains("limits") && fp["limits"].value("shm_size_bytes", json()) == "absent") {
    out->push_back({Severity::kError, "limits.shm",
                    "/dev/shm does not exist: DataLoader workers and NCCL's shared-memory "
                    "transport need it",
                    "limits.shm_size_bytes = absent",
                    "Mount a tmpfs on /dev/shm (docker: --shm-size=16g or --ipc=host)."});
  } else if (shm && shm->is_number()) {
    double v = shm->get<double>();
    if (v < 1 * kGiB) {
      out->push_back({accel ? Severity::kError : Severity::kWarning, "limits.shm",
                      absl::StrCat("/dev/shm is only ", FormatBytes(v),
                                   ": DataLoader workers die with \"Bus error\" and NCCL's "
                                   "shared-memory transport fails"),
                      absl::StrCat("limits.shm_size_bytes = ", static_cast<long long>(v)),
                      "Give it several GiB: docker --shm-size=16g (or --ipc=host), or "
                      "`mount -o remount,size=16G /dev/shm`."});
    } else if (std::optional<double> avail = NumberValue(fp, "limits.shm_available_bytes");
               avail && *avail < 0.1 * v) {
      out->push_back(
          {Severity::kWarning, "limits.shm_full",
           absl::StrCat("/dev/shm is ", FormatDouble(100 - 100 * *avail / v, 0),
                        "% full: leftover segments from crashed runs?"),
           absl::StrCat("limits.shm_available_bytes = ", static_cast<long long>(*avail), " of ",
                        static_cast<long long>(v)),
           "Remove stale files in /dev/shm (torch_*, nccl-*, sem.*) left by dead jobs."});
    }
  }
  std::optional<double> nofile = NumberValue(fp, "limits.nofile_soft");
  if (nofile && *nofile < 65536) {
    out->push_back(
        {Severity::kWarning, "limits.nofile",
         absl::StrCat("open-files limit (ulimit -n) is ", static_cast<long long>(*nofile),
                      ": many ranks, DataLoader workers and shards hit \"Too many open "
                      "files\""),
         absl::StrCat("limits.nofile_soft = ", static_cast<long long>(*nofile),
                      ", hard = ", fp["limits"].value("nofile_hard", json()).dump()),
         NumberValue(fp, "limits.nofile_hard").value_or(0) >= 65536
             ? absl::StrCat("Raise it up to the hard limit: `ulimit -n ",
                            static_cast<long long>(*NumberValue(fp, "limits.nofile_hard")), "`.")
             : std::string("Raise the hard limit too: nofile in /etc/security/limits.conf, or "
                           "docker --ulimit nofile=1048576:1048576.")});
  }
  std::optional<double> total = NumberValue(fp, "host.mem_total_bytes");
  std::optional<double> avail = NumberValue(fp, "host.mem_available_bytes");
  if (total && avail && *total > 0 && *avail < 0.1 * *total) {
    out->push_back({Severity::kWarning, "host.memory_low",
                    absl::StrCat("only ", FormatBytes(*avail), " of ", FormatBytes(*total),
                                 " host memory is available: the job can be OOM-killed while "
                                 "device memory is free"),
                    absl::StrCat("host.mem_available_bytes = ", static_cast<long long>(*avail)),
                    "Stop leftover processes, reduce DataLoader workers / prefetch, or load "
                    "checkpoints shard by shard."});
  }
}

// Timeouts: left at their defaults, multi-node jobs die at the first slow rendezvous
// (HCCL_CONNECT_TIMEOUT 120 s) or leave nothing to diagnose a hang with.
void TimeoutRules(const json& fp, std::vector<Finding>* out) {
  std::optional<long long> connect = EnvInt(fp, "HCCL_CONNECT_TIMEOUT");
  std::optional<long long> exec = EnvInt(fp, "HCCL_EXEC_TIMEOUT");
  std::optional<long long> event = EnvInt(fp, "HCCL_EVENT_TIMEOUT");
  if (connect && (*connect < 120 || *connect > 7200)) {
    out->push_back(
        {Severity::kWarning, "hccl.connect_timeout_range",
         absl::StrCat("HCCL_CONNECT_TIMEOUT=", *connect, " is outside HCCL's range [120, 7200]"),
         absl::StrCat("env.HCCL_CONNECT_TIMEOUT = ", *connect),
         "Use a value in [120, 7200]; 1200 is HCCL's recommendation for training."});
  }
  if (connect && exec && *exec != 0 && *connect >= *exec) {
    out->push_back({Severity::kWarning, "hccl.connect_ge_exec",
                    "HCCL_CONNECT_TIMEOUT is not below HCCL_EXEC_TIMEOUT: the first error "
                    "reported will be the wrong one",
                    absl::StrCat("HCCL_CONNECT_TIMEOUT=", *connect, ", HCCL_EXEC_TIMEOUT=", *exec),
                    "Keep HCCL_CONNECT_TIMEOUT < HCCL_EXEC_TIMEOUT."});
  }
  if (event && *event <= exec.value_or(1836)) {
    out->push_back({Severity::kWarning, "hccl.event_le_exec",
                    "HCCL_EVENT_TIMEOUT must be greater than HCCL_EXEC_TIMEOUT",
                    absl::StrCat("HCCL_EVENT_TIMEOUT=", *event, ", HCCL_EXEC_TIMEOUT=",
                                 exec ? absl::StrCat(*exec) : "1836 (default)"),
                    "Raise HCCL_EVENT_TIMEOUT above HCCL_EXEC_TIMEOUT (default 1868 > 1836)."});
  }
  std::string why;
  if (!IsMultiNode(fp, &why)) return;
  if (UsesAscend(fp)) {
    if (!connect) {
      out->push_back({Severity::kWarning, "hccl.connect_timeout_default",
                      "multi-node job with HCCL_CONNECT_TIMEOUT at its default (120 s): slow "
                      "initialisation on one node fails link setup everywhere (EI0006)",
                      absl::StrCat(why, "; HCCL_CONNECT_TIMEOUT unset"),
                      "export HCCL_CONNECT_TIMEOUT=1200 (HCCL's recommendation for training)."});
    }
    if (!exec) {
      out->push_back({Severity::kInfo, "hccl.exec_timeout_default",
                      "multi-node job with HCCL_EXEC_TIMEOUT at its default (1836 s): a rank "
                      "that works alone longer (e.g. rank 0 saving a checkpoint) kills the job",
                      absl::StrCat(why, "; HCCL_EXEC_TIMEOUT unset"),
                      "Set HCCL_EXEC_TIMEOUT above your longest rank-asymmetric pause, and "
                      "HCCL_CONNECT_TIMEOUT below it."});
    }
    if (!Env(fp, "HCCL_SOCKET_IFNAME") && !Env(fp, "HCCL_IF_IP")) {
      out->push_back({Severity::kInfo, "hccl.ifname_unset",
                      "multi-node job without HCCL_SOCKET_IFNAME / HCCL_IF_IP: HCCL picks the "
                      "first non-docker, non-lo NIC in lexical order",
                      why, "export HCCL_SOCKET_IFNAME=<the NIC that reaches the other nodes>."});
    }
  }
  if (HasNvidia(fp) || !UsesAscend(fp)) {
    std::optional<long long> fr = EnvInt(fp, "TORCH_NCCL_TRACE_BUFFER_SIZE");
    if (!fr) fr = EnvInt(fp, "TORCH_FR_BUFFER_SIZE");
    if (!fr || *fr <= 0) {
      out->push_back({Severity::kWarning, "nccl.flight_recorder_off",
                      "multi-node job with NCCL timeouts at their defaults and the flight "
                      "recorder off: a hang ends in a watchdog timeout with nothing to say "
                      "which rank or collective stalled",
                      absl::StrCat(why, "; TORCH_NCCL_TRACE_BUFFER_SIZE unset"),
                      "export TORCH_NCCL_TRACE_BUFFER_SIZE=20000 TORCH_NCCL_DUMP_ON_TIMEOUT=1 "
                      "TORCH_NCCL_ASYNC_ERROR_HANDLING=3, and pass a timeout to "
                      "init_process_group."});
    } else if (std::optional<long long> aeh = EnvInt(fp, "TORCH_NCCL_ASYNC_ERROR_HANDLING");
               aeh && *aeh == 1) {
      out->push_back({Severity::kWarning, "nccl.async_error_handling",
                      "TORCH_NCCL_ASYNC_ERROR_HANDLING=1 aborts the process before the flight "
                      "recorder can dump",
                      "TORCH_NCCL_ASYNC_ERROR_HANDLING=1 with a trace buffer set",
                      "export TORCH_NCCL_ASYNC_ERROR_HANDLING=3."});
    }
    if (!Env(fp, "NCCL_SOCKET_IFNAME")) {
      out->push_back({Severity::kInfo, "nccl.ifname_unset",
                      "multi-node job without NCCL_SOCKET_IFNAME: NCCL may bootstrap over a "
                      "docker or virtual interface that other nodes cannot reach",
                      why, "export NCCL_SOCKET_IFNAME=<the NIC that reaches the other nodes>."});
    }
  }
}

// A visible-devices list against the devices present: CUDA semantics (indices or
// GPU-UUID prefixes; "" hides every device).
void VisibleDevices(const json& fp, const char* var, const char* kind, int count,
                    const std::vector<std::string>& uuids, std::vector<Finding>* out) {
  std::optional<std::string> v = Env(fp, var);
  if (!v) return;
  std::string id = absl::StrCat("devices.", absl::AsciiStrToLower(var));
  if (count < 0) {
    out->push_back({Severity::kInfo, id,
                    absl::StrCat(var, " is set but no ", kind, " device was found"),
                    absl::StrCat(var, "=", *v),
                    absl::StrCat("Unset ", var,
                                 " on this machine, or "
                                 "check why no ",
                                 kind, " device shows.")});
    return;
  }
  std::string trimmed(absl::StripAsciiWhitespace(*v));
  if (trimmed.empty()) {
    out->push_back({Severity::kError, id,
                    absl::StrCat(var, " is empty: it hides every ", kind, " device"),
                    absl::StrCat(var, "=\"\"; ", count, " device(s) present"),
                    absl::StrCat("Unset ", var, " or list the devices to use.")});
    return;
  }
  std::set<std::string> seen;
  for (absl::string_view raw : absl::StrSplit(trimmed, ',')) {
    std::string e(absl::StripAsciiWhitespace(raw));
    std::string problem;
    long long idx;
    if (seen.count(e)) {
      problem = absl::StrCat("lists ", e, " twice");
    } else if (absl::SimpleAtoi(e, &idx)) {
      if (idx < 0 || idx >= count) {
        problem = absl::StrCat("names device ", e, " but only ", count, " are present (0..",
                               count - 1, ")");
      }
    } else if (absl::StartsWith(e, "GPU-") && !uuids.empty()) {
      bool found = false;
      for (const std::string& u : uuids) found = found || absl::StartsWith(u, e);
      if (!found) problem = absl::StrCat("names ", e, ", which matches no GPU UUID here");
    } else if (!absl::StartsWith(e, "MIG-") && !absl::StartsWith(e, "GPU-")) {
      problem = absl::StrCat("has an entry \"", e, "\" that is not a device index");
    }
    seen.insert(e);
    if (!problem.empty()) {
      out->push_back({Severity::kError, id,
                      absl::StrCat(var, " ", problem,
                                   ": the devices after it are silently dropped or the job "
                                   "fails to find its device"),
                      absl::StrCat(var, "=", *v, "; ", count, " ", kind, " device(s) present"),
                      absl::StrCat("Set ", var, " to indices in 0..", count - 1,
                                   " (one per local rank), or unset it.")});
      return;
    }
  }
}

void DeviceRules(const json& fp, std::vector<Finding>* out) {
  const json* nv = Value(fp, "accelerators.nvidia");
  int gpus = -1;
  std::vector<std::string> uuids;
  if (nv && nv->is_object()) {
    if (std::optional<double> c = NumberValue(fp, "accelerators.nvidia.gpu_count")) gpus = *c;
    const json& list = nv->value("gpus", json());
    if (list.is_array()) {
      for (const json& g : list) {
        std::string name = absl::StrCat(
            "GPU ", g.value("index", json()).dump(), " (",
            g.value("pci_bus_id", json()).is_string() ? g["pci_bus_id"].get<std::string>() : "?",
            ")");
        if (g.value("uuid", json()).is_string()) uuids.push_back(g["uuid"]);
        const json& unc = g.value("ecc_uncorrected_volatile", json());
        if (unc.is_number() && unc.get<long long>() > 0) {
          out->push_back({Severity::kError, "nvidia.ecc_uncorrected",
                          absl::StrCat(name, " has ", unc.get<long long>(),
                                       " uncorrected ECC errors since the last reset"),
                          absl::StrCat("ecc_uncorrected_volatile = ", unc.get<long long>()),
                          "Drain the node, reset the GPU (nvidia-smi -r) and run dcgmi diag -r 3; "
                          "replace it if errors return."});
        }
        if (g.value("pending_page_retirement", "") == "Yes" ||
            g.value("remapped_rows_pending", "") == "Yes") {
          out->push_back({Severity::kWarning, "nvidia.pending_retirement",
                          absl::StrCat(name, " has memory pages/rows pending retirement"),
                          "pending_page_retirement or remapped_rows_pending = Yes",
                          "Reset the GPU (or reboot) so the retirement takes effect."});
        }
        if (g.value("persistence_mode", "") == "Disabled") {
          out->push_back({Severity::kInfo, "nvidia.persistence_mode",
                          absl::StrCat(name,
                                       ": persistence mode is off (slow first CUDA "
                                       "context, driver state lost between jobs)"),
                          "persistence_mode = Disabled",
                          "nvidia-smi -pm 1 (or enable nvidia-persistenced)."});
        }
      }
    }
  } else if (const json& raw = fp.value("accelerators", json::object()).value("nvidia", json());
             raw.is_string() && absl::StartsWith(raw.get<std::string>(), "error")) {
    out->push_back({Severity::kError, "nvidia.driver",
                    "nvidia-smi is installed but cannot talk to the NVIDIA driver",
                    absl::StrCat("accelerators.nvidia = ", raw.get<std::string>()),
                    "Load the driver (matching the kernel: dkms status), or in a container run "
                    "with --gpus all / the NVIDIA container toolkit."});
  }
  VisibleDevices(fp, "CUDA_VISIBLE_DEVICES", "NVIDIA", gpus, uuids, out);

  const json* as = Value(fp, "accelerators.ascend");
  int npus = -1;
  if (as && as->is_object() && as->value("npus", json()).is_array()) {
    npus = static_cast<int>((*as)["npus"].size());
    for (const json& d : (*as)["npus"]) {
      std::string health = d.value("health", "");
      if (health.empty() || absl::EqualsIgnoreCase(health, "OK")) continue;
      bool warn = absl::EqualsIgnoreCase(health, "Warning");
      out->push_back(
          {warn ? Severity::kWarning : Severity::kError, "ascend.health",
           absl::StrCat("NPU ", d.value("npu", json()).dump(), " chip ",
                        d.value("chip", json()).dump(), " health is ", health),
           absl::StrCat("npu-smi info: Health = ", health, ", bus ", d.value("bus_id", "?")),
           "Check `npu-smi info -t health -i <npu>` and the device log; reset or "
           "replace the card before training on it."});
    }
  }
  VisibleDevices(fp, "ASCEND_RT_VISIBLE_DEVICES", "Ascend", npus, {}, out);
}

void SettingRules(const json& fp, std::vector<Finding>* out) {
  if (fp.contains("frameworks") && fp["frameworks"].is_array()) {
    for (const json& py : fp["frameworks"]) {
      const json& t = py.value("torch", json());
      if (!t.is_string() || !absl::StartsWith(t.get<std::string>(), "error: ") ||
          absl::StrContains(t.get<std::string>(), "took longer than")) {
        continue;
      }
      std::string where = py.value("python", "python");
      out->push_back({Severity::kWarning, "framework.torch_import",
                      absl::StrCat("torch is installed for ", where, " but fails to import"),
                      absl::StrCat(where, ": ", t.get<std::string>()),
                      "Reinstall torch for this interpreter (pip install --force-reinstall torch) "
                      "or check LD_LIBRARY_PATH for a conflicting libtorch / CUDA library."});
    }
  }
  for (const char* var : {"CUDA_LAUNCH_BLOCKING", "ASCEND_LAUNCH_BLOCKING"}) {
    if (Env(fp, var).value_or("") == "1") {
      out->push_back({Severity::kWarning, absl::StrCat("env.", absl::AsciiStrToLower(var)),
                      absl::StrCat(var,
                                   "=1 makes every kernel launch synchronous: a debugging "
                                   "setting that slows training several-fold"),
                      absl::StrCat(var, "=1"), absl::StrCat("Unset ", var, " for real runs.")});
    }
  }
  if (std::optional<long long> lvl = EnvInt(fp, "ASCEND_GLOBAL_LOG_LEVEL"); lvl && *lvl < 2) {
    out->push_back({Severity::kWarning, "env.ascend_log_level",
                    "ASCEND_GLOBAL_LOG_LEVEL at debug/info slows training",
                    absl::StrCat("ASCEND_GLOBAL_LOG_LEVEL=", *lvl),
                    "export ASCEND_GLOBAL_LOG_LEVEL=3 (error)."});
  }
  if (Env(fp, "HCCL_INTRA_PCIE_ENABLE").value_or("") == "1" &&
      Env(fp, "HCCL_INTRA_ROCE_ENABLE").value_or("") == "1") {
    out->push_back({Severity::kError, "hccl.intra_links",
                    "HCCL_INTRA_PCIE_ENABLE=1 and HCCL_INTRA_ROCE_ENABLE=1 together are not "
                    "supported",
                    "both set to 1", "Enable one of the two (default: PCIe)."});
  }
  for (const char* var : {"PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_NPU_ALLOC_CONF"}) {
    std::string v = absl::AsciiStrToLower(Env(fp, var).value_or(""));
    if (absl::StrContains(v, "expandable_segments:true") &&
        (absl::StrContains(v, "max_split_size_mb") ||
         absl::StrContains(v, "garbage_collection_threshold"))) {
      out->push_back({Severity::kWarning, absl::StrCat("env.", absl::AsciiStrToLower(var)),
                      absl::StrCat(var,
                                   " combines expandable_segments with max_split_size_mb / "
                                   "garbage_collection_threshold, which conflict"),
                      absl::StrCat(var, "=", *Env(fp, var)),
                      "Keep expandable_segments:True alone."});
    }
  }
}

// Probes that ended in "error: ...", collected into one note so nothing fails silently.
void CollectErrors(const json& v, const std::string& path, std::vector<std::string>* errs) {
  if (v.is_object()) {
    for (auto it = v.begin(); it != v.end(); ++it) {
      CollectErrors(it.value(), path.empty() ? it.key() : path + "." + it.key(), errs);
    }
  } else if (v.is_array()) {
    for (size_t i = 0; i < v.size(); ++i)
      CollectErrors(v[i], absl::StrCat(path, "[", i, "]"), errs);
  } else if (v.is_string() && absl::StartsWith(v.get<std::string>(), "error")) {
    errs->push_back(absl::StrCat(path, " = ", v.get<std::string>()));
  }
}

}  // namespace

void ApplyTrapRules(const json& fp, std::vector<Finding>* findings) {
  LimitRules(fp, findings);
  TimeoutRules(fp, findings);
  DeviceRules(fp, findings);
  SettingRules(fp, findings);
  ApplyCollectiveRules(fp, findings);
  std::vector<std::string> errs;
  CollectErrors(fp, "", &errs);
  if (!errs.empty()) {
    std::vector<std::string> shown(errs.begin(), errs.begin() + std::min<size_t>(errs.size(), 3));
    findings->push_back({Severity::kInfo, "probe.errors",
                         absl::StrCat(errs.size(), " probe(s) failed; their facts are unknown"),
                         absl::StrJoin(shown, "; ") + (errs.size() > 3 ? "; ..." : ""),
                         "See the fingerprint (trainscope env fingerprint --json) for each "
                         "error; rerun with a longer time limit if one timed out."});
  }
}

}  // namespace trainscope::env
