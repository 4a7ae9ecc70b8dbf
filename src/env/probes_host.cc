// Host-side probes: OS, CPU, memory, limits, /dev/shm, network interfaces, environment
// variables.
#include <algorithm>
#include <cctype>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "env/parsers.h"
#include "env/probes.h"
#include "trainscope/core/env_vars.h"

namespace trainscope::env {

using nlohmann::json;

std::string ProbeError(const std::string& why) {
  std::string w = why;
  // One line, bounded: the fingerprint is for reading.
  size_t nl = w.find('\n');
  if (nl != std::string::npos) w = w.substr(0, nl);
  if (w.size() > 200) w = w.substr(0, 197) + "...";
  return "error: " + w;
}

bool RunTool(Os* os, const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
             std::string* out, json* failure) {
  RunOptions ro;
  ro.timeout = timeout;
  ro.kill_grace = std::chrono::milliseconds(200);
  absl::StatusOr<RunResult> r = os->Run(argv, ro);
  if (!r.ok()) {
    *failure = absl::IsNotFound(r.status()) ? json(kAbsent)
                                            : json(ProbeError(std::string(r.status().message())));
    return false;
  }
  if (r->timed_out) {
    *failure = ProbeError(absl::StrCat(argv[0], " timed out after ", timeout.count(), " ms"));
    return false;
  }
  if (!r->ok()) {
    std::string msg = std::string(absl::StripAsciiWhitespace(r->err.empty() ? r->out : r->err));
    *failure =
        ProbeError(absl::StrCat(argv[0],
                                r->exited ? absl::StrCat(" exited ", r->exit_code)
                                          : absl::StrCat(" killed by signal ", r->term_signal),
                                msg.empty() ? "" : ": ", msg));
    return false;
  }
  *out = std::move(r->out);
  return true;
}

namespace {

// First line of a file, trimmed; "absent" when the file does not exist.
json FileLine(Os* os, const std::string& path) {
  absl::StatusOr<std::string> s = os->ReadFile(path);
  if (!s.ok()) {
    return absl::IsNotFound(s.status()) ? json(kAbsent)
                                        : json(ProbeError(std::string(s.status().message())));
  }
  absl::string_view v = *s;
  v = v.substr(0, v.find('\n'));
  return std::string(absl::StripAsciiWhitespace(v));
}

const char* CompiledArch() {
#if defined(__x86_64__)
  return "x86_64";
#elif defined(__aarch64__)
  return "aarch64";
#elif defined(__powerpc64__)
  return "ppc64le";
#else
  return "unknown";
#endif
}

}  // namespace

json ProbeHost(Os* os) {
  json host;
  absl::StatusOr<std::string> osr = os->ReadFile("/etc/os-release");
  if (osr.ok()) {
    auto kv = ParseKeyValues(*osr);
    host["os"] = kv.count("pretty_name") ? json(kv["pretty_name"]) : json(kAbsent);
  } else {
    host["os"] = kAbsent;
  }
  host["kernel"] = FileLine(os, "/proc/sys/kernel/osrelease");
  host["arch"] = CompiledArch();
  absl::StatusOr<std::string> cpu = os->ReadFile("/proc/cpuinfo");
  if (cpu.ok()) {
    json c = ParseCpuinfo(*cpu);
    host["cpu_model"] = c["cpu_model"];
    host["logical_cpus"] = c["logical_cpus"];
  } else {
    host["cpu_model"] = ProbeError(std::string(cpu.status().message()));
    host["logical_cpus"] = kAbsent;
  }
  json online = FileLine(os, "/sys/devices/system/cpu/online");
  int n = online.is_string() && !absl::StartsWith(online.get<std::string>(), "error")
              ? CountCpuList(online.get<std::string>())
              : -1;
  host["online_cpus"] = n > 0 ? json(n) : json(kAbsent);
  absl::StatusOr<std::vector<std::string>> nodes = os->ListDir("/sys/devices/system/node");
  if (nodes.ok()) {
    int numa = 0;
    for (const std::string& e : *nodes) {
      if (e.size() > 4 && absl::StartsWith(e, "node") &&
          std::all_of(e.begin() + 4, e.end(), [](char c) { return std::isdigit(c); })) {
        ++numa;
      }
    }
    host["numa_nodes"] = numa;
  } else {
    host["numa_nodes"] = kAbsent;
  }
  absl::StatusOr<std::string> mem = os->ReadFile("/proc/meminfo");
  absl::StatusOr<json> m = mem.ok() ? ParseMeminfo(*mem) : absl::StatusOr<json>(mem.status());
  for (const char* k : {"mem_total_bytes", "mem_available_bytes", "swap_total_bytes",
                        "hugepages_total", "hugepages_free", "hugepage_size_bytes"}) {
    host[k] = m.ok() ? (*m)[k] : json(ProbeError(std::string(m.status().message())));
  }
  // "always [madvise] never" -> "madvise"
  json thp = FileLine(os, "/sys/kernel/mm/transparent_hugepage/enabled");
  if (thp.is_string()) {
    std::string s = thp.get<std::string>();
    size_t a = s.find('['), b = s.find(']');
    if (a != std::string::npos && b != std::string::npos && b > a) thp = s.substr(a + 1, b - a - 1);
  }
  host["transparent_hugepages"] = thp;
  return host;
}

json ProbeLimits(Os* os) {
  json limits;
  absl::StatusOr<std::string> text = os->ReadFile("/proc/self/limits");
  absl::StatusOr<json> l = text.ok() ? ParseProcLimits(*text) : absl::StatusOr<json>(text.status());
  for (const char* k : {"memlock_soft_bytes", "memlock_hard_bytes", "nofile_soft", "nofile_hard",
                        "nproc_soft", "stack_soft_bytes"}) {
    if (!l.ok()) {
      limits[k] = ProbeError(std::string(l.status().message()));
    } else {
      limits[k] = l->contains(k) ? (*l)[k] : json(kAbsent);
    }
  }
  return limits;
}

json ProbeShm(Os* os, std::chrono::milliseconds timeout) {
  json shm;
  if (!os->FileExists("/dev/shm")) {
    shm["shm_size_bytes"] = kAbsent;
    shm["shm_available_bytes"] = kAbsent;
    return shm;
  }
  std::string out;
  json failure;
  if (!RunTool(os, {"df", "-P", "-B1", "/dev/shm"}, timeout, &out, &failure)) {
    shm["shm_size_bytes"] = failure;
    shm["shm_available_bytes"] = failure;
    return shm;
  }
  absl::StatusOr<json> df = ParseDf(out);
  if (!df.ok()) {
    shm["shm_size_bytes"] = ProbeError(std::string(df.status().message()));
    shm["shm_available_bytes"] = shm["shm_size_bytes"];
    return shm;
  }
  shm["shm_size_bytes"] = (*df)["size_bytes"];
  shm["shm_available_bytes"] = (*df)["available_bytes"];
  return shm;
}

bool IsTrainingEnvVar(const std::string& name) {
  static const char* kPrefixes[] = {
      "NCCL_",     "HCCL_",   "GLOO_",         "TORCH_NCCL_", "TORCH_HCCL_", "TORCH_DISTRIBUTED_",
      "TORCH_FR_", "ASCEND_", "TORCHELASTIC_", "UCX_",        "NVSHMEM_"};
  static const char* kExact[] = {envvar::kMasterAddr,
                                 envvar::kMasterPort,
                                 envvar::kWorldSize,
                                 envvar::kRank,
                                 envvar::kLocalRank,
                                 envvar::kLocalWorldSize,
                                 envvar::kGroupRank,
                                 envvar::kOmpNumThreads,
                                 envvar::kCudaVisibleDevices,
                                 envvar::kAscendVisibleDevices,
                                 "NVIDIA_VISIBLE_DEVICES",
                                 "ASCEND_VISIBLE_DEVICES",
                                 "CUDA_LAUNCH_BLOCKING",
                                 "CUDA_DEVICE_MAX_CONNECTIONS",
                                 "CUDA_MODULE_LOADING",
                                 envvar::kCublasWorkspaceConfig,
                                 "CUDA_HOME",
                                 "PYTORCH_CUDA_ALLOC_CONF",
                                 "PYTORCH_NPU_ALLOC_CONF",
                                 "PYTORCH_HIP_ALLOC_CONF",
                                 "TASK_QUEUE_ENABLE",
                                 "CPU_AFFINITY_CONF",
                                 "INF_NAN_MODE_ENABLE",
                                 "P2P_HCCL_BUFFSIZE",
                                 "ACL_DEVICE_SYNC_TIMEOUT",
                                 "NNODES",
                                 "NODE_RANK",
                                 "LD_LIBRARY_PATH",
                                 envvar::kPython};
  for (const char* p : kPrefixes) {
    if (absl::StartsWith(name, p)) return true;
  }
  for (const char* e : kExact) {
    if (name == e) return true;
  }
  return false;
}

// Network interfaces and RDMA devices from sysfs, for the interface-selection rules
// (NCCL_SOCKET_IFNAME, NCCL_IB_HCA, ...): /sys/class/net/<name>/{operstate,type} (type 1
// Ethernet, 32 InfiniBand, 772 loopback) and the names under /sys/class/infiniband.
json ProbeNetwork(Os* os) {
  json net;
  auto list = [os](const std::string& dir) -> json {
    absl::StatusOr<std::vector<std::string>> names = os->ListDir(dir);
    if (!names.ok()) {
      return absl::IsNotFound(names.status())
                 ? json(kAbsent)
                 : json(ProbeError(std::string(names.status().message())));
    }
    std::vector<std::string> sorted = *names;
    std::sort(sorted.begin(), sorted.end());
    return json(sorted);
  };
  json names = list("/sys/class/net");
  if (names.is_array()) {
    json ifaces = json::array();
    for (const json& n : names) {
      const std::string name = n.get<std::string>();
      json i = {{"name", name}};
      absl::StatusOr<std::string> state = os->ReadFile("/sys/class/net/" + name + "/operstate");
      i["operstate"] =
          state.ok() ? json(std::string(absl::StripAsciiWhitespace(*state))) : json(kAbsent);
      absl::StatusOr<std::string> type = os->ReadFile("/sys/class/net/" + name + "/type");
      int t;
      i["type"] = type.ok() && absl::SimpleAtoi(absl::StripAsciiWhitespace(*type), &t)
                      ? json(t)
                      : json(kAbsent);
      ifaces.push_back(std::move(i));
    }
    net["interfaces"] = std::move(ifaces);
  } else {
    net["interfaces"] = names;
  }
  net["ib_devices"] = list("/sys/class/infiniband");
  return net;
}

json ProbeEnvVars(Os* os) {
  json env = json::object();
  for (const auto& [k, v] : os->Environment()) {
    if (IsTrainingEnvVar(k)) env[k] = v;
  }
  return env;
}

std::vector<std::string> DefaultPythons(Os* os) {
  std::string forced;
  if (os->GetEnv(envvar::kPython, &forced) && !forced.empty()) return {forced};
  std::vector<std::string> out = {"/usr/bin/python3"};
  std::string path;
  if (os->GetEnv(envvar::kPath, &path)) {
    for (absl::string_view dir : absl::StrSplit(path, ':', absl::SkipEmpty())) {
      std::string p = absl::StrCat(dir, "/python3");
      if (os->FileExists(p)) {
        if (p != out[0]) out.push_back(p);
        break;
      }
    }
  }
  return out;
}

}  // namespace trainscope::env
