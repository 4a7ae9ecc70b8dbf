// Collective-library settings checked on a fingerprint's "env" (NCCL_*, HCCL_*, GLOO_*,
// TORCH_NCCL_*, ...) and "network" (interfaces, RDMA devices). Most rules are rows of the
// tables below — deprecated names, values a variable accepts, integer ranges, values known to
// hurt — so that adding a fact is adding a row; the few that compare several facts
// (buffer sizes, timeouts against the job's size, interface lists against the interfaces
// present) are functions after the tables. Facts and defaults: docs/errors.md
// ("env check: collective settings"), from NCCL's and HCCL's environment-variable references
// and PyTorch's ProcessGroupNCCL.
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "env/rules.h"
#include "trainscope/core/table.h"

namespace trainscope::env {

using nlohmann::json;

namespace {

// --- The tables -------------------------------------------------------------------------

// Old names PyTorch still reads with a deprecation warning (torch >= 2.2 renamed them with
// a TORCH_ prefix) or that torch_npu keeps as an alias.
struct CollDeprecatedName {
  const char* old_name;
  const char* new_name;
  bool deprecated;  // false: an alias still documented, only the newer name is preferred
};
constexpr CollDeprecatedName kCollDeprecatedNames[] = {
    {"NCCL_ASYNC_ERROR_HANDLING", "TORCH_NCCL_ASYNC_ERROR_HANDLING", true},
    {"NCCL_BLOCKING_WAIT", "TORCH_NCCL_BLOCKING_WAIT", true},
    {"NCCL_DESYNC_DEBUG", "TORCH_NCCL_DESYNC_DEBUG", true},
    {"NCCL_ENABLE_TIMING", "TORCH_NCCL_ENABLE_TIMING", true},
    {"HCCL_ASYNC_ERROR_HANDLING", "TORCH_HCCL_ASYNC_ERROR_HANDLING", false},
};

// Variables with a closed set of values ('|'-separated, compared without case; "X*" is a
// prefix). `list`: NCCL's list syntax — comma-separated, an optional leading '^' (exclude),
// and per-collective groups "allreduce:ring,tree;broadcast:ring" (NCCL >= 2.24).
struct CollChoice {
  const char* var;
  const char* values;
  bool list;
  Severity severity;
  const char* consequence;  // what an unknown value does
};
constexpr CollChoice kCollChoices[] = {
    {"NCCL_ALGO", "Ring|Tree|CollnetDirect|CollnetChain|NVLS|NVLSTree|PAT", true, Severity::kError,
     "NCCL rejects the setting at initialisation"},
    {"NCCL_PROTO", "LL|LL128|Simple", true, Severity::kError,
     "NCCL rejects the setting at initialisation"},
    {"NCCL_DEBUG", "VERSION|WARN|INFO|TRACE|ABORT", false, Severity::kWarning, "NCCL ignores it"},
    {"NCCL_LAUNCH_MODE", "PARALLEL|GROUP", false, Severity::kWarning, "NCCL ignores it"},
    {"NCCL_P2P_LEVEL", "LOC|NVL|PIX|PXB|PHB|SYS|0|1|2|3|4|5", false, Severity::kWarning,
     "NCCL falls back to its automatic choice"},
    {"NCCL_NET_GDR_LEVEL", "LOC|PIX|PXB|PHB|SYS|0|1|2|3|4|5", false, Severity::kWarning,
     "NCCL falls back to its automatic choice"},
    {"NCCL_NTHREADS", "64|128|256|512", false, Severity::kWarning,
     "NCCL falls back to its default thread count"},
    {"HCCL_DETERMINISTIC", "true|false|strict", false, Severity::kWarning,
     "HCCL keeps its default (non-deterministic reductions)"},
    {"HCCL_OP_EXPANSION_MODE", "AI_CPU|AICPU_TS|AIV|HOST|HOST_TS|CCU_*", false, Severity::kError,
     "HCCL fails to initialise the communicator"},
    {"HCCL_SOCKET_FAMILY", "AF_INET|AF_INET6", false, Severity::kError,
     "HCCL fails to initialise the communicator"},
    {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "0|1|2|3", false, Severity::kWarning,
     "PyTorch falls back to its default (3)"},
    {"TORCH_DISTRIBUTED_DEBUG", "OFF|INFO|DETAIL", false, Severity::kError,
     "torch.distributed raises at import of the process group"},
    // torch.use_deterministic_algorithms(True) accepts exactly these two on CUDA >= 10.2.
    {"CUBLAS_WORKSPACE_CONFIG", ":4096:8|:16:8", false, Severity::kWarning,
     "torch.use_deterministic_algorithms(True) still raises on cuBLAS calls"},
};

// Integer variables and their accepted range (inclusive). A value that is not an integer,
// or outside the range, is a finding of `severity`.
struct CollIntRange {
  const char* var;
  long long min;
  long long max;
  Severity severity;
  const char* unit;
};
constexpr long long kCollNoMax = std::numeric_limits<long long>::max();
constexpr CollIntRange kCollIntRanges[] = {
    {"NCCL_BUFFSIZE", 1, kCollNoMax, Severity::kError, "bytes"},
    {"NCCL_IB_TIMEOUT", 1, 31, Severity::kError, "4.096 us x 2^value"},
    {"NCCL_IB_RETRY_CNT", 0, 7, Severity::kError, "retries"},
    {"HCCL_BUFFSIZE", 1, kCollNoMax, Severity::kError, "MB"},
    {"HCCL_EXEC_TIMEOUT", 0, 2147483647, Severity::kError, "s"},
    {"HCCL_CONNECT_TIMEOUT", 0, kCollNoMax, Severity::kError, "s"},  // range: rules.cc
    {"HCCL_EVENT_TIMEOUT", 0, kCollNoMax, Severity::kError, "s"},
    {"HCCL_RDMA_TIMEOUT", 5, 24, Severity::kError, "4.096 us x 2^value"},
    {"HCCL_RDMA_RETRY_CNT", 1, 7, Severity::kError, "retries"},
    {"HCCL_IF_BASE_PORT", 1024, 65520, Severity::kError, "port"},
    {"TORCH_NCCL_TRACE_BUFFER_SIZE", 0, kCollNoMax, Severity::kWarning, "entries"},
    {"TORCH_FR_BUFFER_SIZE", 0, kCollNoMax, Severity::kWarning, "entries"},
    {"TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC", 1, kCollNoMax, Severity::kWarning, "s"},
};

// When a hurting value matters.
enum class CollWhen {
  kAlways,
  kNvlink,    // the GPUs have NVLink between them (topology captured)
  kNoNvlink,  // no NVLink seen (or no topology)
  kRdma,      // InfiniBand / RoCE devices present (/sys/class/infiniband)
};

// Values known to hurt. `value` is compared without case; "*" is any value (the variable
// being set at all is the finding).
struct CollHurt {
  const char* var;
  const char* value;
  CollWhen when;
  FindingText finding;  // the evidence is filled in per match
};
constexpr CollHurt kCollHurts[] = {
    {"NCCL_P2P_DISABLE",
     "1",
     CollWhen::kNvlink,
     {Severity::kError, "nccl.p2p_disabled",
      "NCCL_P2P_DISABLE=1 on a machine whose GPUs have NVLink: GPU-to-GPU traffic is staged "
      "through host memory, several times slower",
      "Unset NCCL_P2P_DISABLE. If it works around a PCIe ACS/IOMMU hang, disable ACS on the "
      "PCIe switches (BIOS or setpci) instead."}},
    {"NCCL_P2P_DISABLE",
     "1",
     CollWhen::kNoNvlink,
     {Severity::kWarning, "nccl.p2p_disabled",
      "NCCL_P2P_DISABLE=1: direct GPU-to-GPU copies are off, traffic is staged through host "
      "memory",
      "Unset it unless it works around a known ACS/IOMMU hang here; compare with `trainscope "
      "selftest comm --sweep-env NCCL_P2P_DISABLE=0,1`."}},
    {"NCCL_SHM_DISABLE",
     "1",
     CollWhen::kAlways,
     {Severity::kWarning, "nccl.shm_disabled",
      "NCCL_SHM_DISABLE=1: traffic between GPUs without P2P goes over the network instead of "
      "shared memory",
      "Unset NCCL_SHM_DISABLE (give the container a large /dev/shm if that is why it was set)."}},
    {"NCCL_IB_DISABLE",
     "1",
     CollWhen::kRdma,
     {Severity::kError, "nccl.ib_disabled",
      "NCCL_IB_DISABLE=1 although InfiniBand/RoCE devices are present: inter-node traffic falls "
      "back to TCP sockets",
      "Unset NCCL_IB_DISABLE; pick the HCAs with NCCL_IB_HCA if some must be avoided."}},
    {"NCCL_DEBUG",
     "TRACE",
     CollWhen::kAlways,
     {Severity::kWarning, "nccl.debug_trace",
      "NCCL_DEBUG=TRACE logs every collective call: a debugging setting that slows training and "
      "fills the disk",
      "Unset NCCL_DEBUG or set NCCL_DEBUG=WARN for production runs."}},
    {"NCCL_DEBUG",
     "INFO",
     CollWhen::kAlways,
     {Severity::kInfo, "nccl.debug_info",
      "NCCL_DEBUG=INFO left on: verbose start-up logs on every rank",
      "Use NCCL_DEBUG=WARN in production; INFO (with NCCL_DEBUG_FILE) while bringing a job up."}},
    {"NCCL_ALGO",
     "*",
     CollWhen::kAlways,
     {Severity::kWarning, "nccl.algo_pinned",
      "NCCL_ALGO pins the algorithm: NCCL's per-size tuning is off (NCCL documents it as a "
      "debugging setting); was it measured?",
      "Unset it unless a measurement on this machine shows a gain: `trainscope selftest comm "
      "--sweep-env NCCL_ALGO=Ring,Tree` compares them."}},
    {"NCCL_PROTO",
     "*",
     CollWhen::kAlways,
     {Severity::kWarning, "nccl.proto_pinned",
      "NCCL_PROTO pins the protocol: NCCL's per-size choice of LL/LL128/Simple is off; was it "
      "measured?",
      "Unset it unless measured: `trainscope selftest comm --sweep-env NCCL_PROTO=LL,LL128,"
      "Simple`. To avoid only LL128, NCCL_PROTO=^LL128."}},
    {"NCCL_PROTO",
     "LL128",
     CollWhen::kAlways,
     {Severity::kWarning, "nccl.proto_ll128",
      "NCCL_PROTO=LL128 forces LL128 even on paths where NCCL would not enable it; on such "
      "paths it can corrupt data (NCCL 2.18.1 on HGX H100)",
      "Unset NCCL_PROTO; NCCL enables LL128 where the platform supports it."}},
    {"HCCL_ALGO",
     "*",
     CollWhen::kAlways,
     {Severity::kWarning, "hccl.algo_pinned",
      "HCCL_ALGO disables HCCL's adaptive algorithm selection; was it measured?",
      "unset HCCL_ALGO unless a measurement on this cluster shows a gain."}},
    {"NCCL_TIMEOUT",
     "*",
     CollWhen::kAlways,
     {Severity::kWarning, "nccl.timeout_not_a_variable",
      "NCCL_TIMEOUT is not read by NCCL or PyTorch: NCCL has no collective timeout, the job keeps "
      "the process group's default (10 min for NCCL since torch 2.2, 30 min before)",
      "Pass timeout=datetime.timedelta(...) to torch.distributed.init_process_group and unset "
      "NCCL_TIMEOUT."}},
    {"TORCH_NCCL_BLOCKING_WAIT",
     "1",
     CollWhen::kAlways,
     {Severity::kWarning, "torch.nccl_blocking_wait",
      "TORCH_NCCL_BLOCKING_WAIT=1 makes every wait() block the host: communication no longer "
      "overlaps with the next kernels",
      "Unset it; TORCH_NCCL_ASYNC_ERROR_HANDLING=3 already ends the job on a timeout."}},
    {"NCCL_BLOCKING_WAIT",
     "1",
     CollWhen::kAlways,
     {Severity::kWarning, "torch.nccl_blocking_wait",
      "NCCL_BLOCKING_WAIT=1 makes every wait() block the host: communication no longer overlaps "
      "with the next kernels",
      "Unset it; TORCH_NCCL_ASYNC_ERROR_HANDLING=3 already ends the job on a timeout."}},
    {"TORCH_NCCL_ASYNC_ERROR_HANDLING",
     "0",
     CollWhen::kAlways,
     {Severity::kWarning, "torch.nccl_async_error_handling_off",
      "TORCH_NCCL_ASYNC_ERROR_HANDLING=0: a failed or timed-out collective is never torn down, "
      "the job hangs instead of failing",
      "export TORCH_NCCL_ASYNC_ERROR_HANDLING=3 (PyTorch's default)."}},
    {"NCCL_ASYNC_ERROR_HANDLING",
     "0",
     CollWhen::kAlways,
     {Severity::kWarning, "torch.nccl_async_error_handling_off",
      "NCCL_ASYNC_ERROR_HANDLING=0: a failed or timed-out collective is never torn down, the job "
      "hangs instead of failing",
      "export TORCH_NCCL_ASYNC_ERROR_HANDLING=3 and unset the old name."}},
    {"TORCH_DISTRIBUTED_DEBUG",
     "DETAIL",
     CollWhen::kAlways,
     {Severity::kWarning, "torch.distributed_debug_detail",
      "TORCH_DISTRIBUTED_DEBUG=DETAIL checks every collective with extra collectives: a "
      "debugging setting that slows training",
      "Unset it (or OFF) for real runs."}},
    {"TORCH_NCCL_DESYNC_DEBUG",
     "1",
     CollWhen::kAlways,
     {Severity::kInfo, "torch.desync_debug",
      "TORCH_NCCL_DESYNC_DEBUG=1 adds desync analysis to every timeout",
      "Unset it for real runs."}},
    {"TORCH_HCCL_DESYNC_DEBUG",
     "1",
     CollWhen::kAlways,
     {Severity::kWarning, "torch.desync_debug",
      "TORCH_HCCL_DESYNC_DEBUG=1 can hang very large clusters (torch_npu documents it)",
      "Unset it for real runs."}},
    {"HCCL_DETERMINISTIC",
     "true",
     CollWhen::kAlways,
     {Severity::kInfo, "hccl.deterministic",
      "HCCL_DETERMINISTIC=true: reductions run in a fixed order, reproducible but slower",
      "Keep it for reproducibility runs; unset it when throughput matters."}},
    {"HCCL_DETERMINISTIC",
     "strict",
     CollWhen::kAlways,
     {Severity::kInfo, "hccl.deterministic",
      "HCCL_DETERMINISTIC=strict: reductions run in a fixed order, reproducible but slower",
      "Keep it for reproducibility runs; unset it when throughput matters."}},
    {"HCCL_ENTRY_LOG_ENABLE",
     "1",
     CollWhen::kAlways,
     {Severity::kInfo, "hccl.entry_log",
      "HCCL_ENTRY_LOG_ENABLE=1 logs every collective call: right for chasing a hang, a cost "
      "otherwise",
      "Unset it once the hang is found."}},
    {"INF_NAN_MODE_ENABLE",
     "0",
     CollWhen::kAlways,
     {Severity::kWarning, "ascend.saturation_mode",
      "INF_NAN_MODE_ENABLE=0 (saturation mode) turns Inf into +-max and NaN into 0: overflow "
      "is hidden from NaN checks and loss scalers",
      "Unset it (INF/NaN mode is the default on Atlas A2/A3)."}},
};

// --- Helpers ----------------------------------------------------------------------------

std::optional<std::string> CollEnv(const json& fp, const std::string& name) {
  auto env = fp.find("env");
  if (env == fp.end() || !env->is_object()) return std::nullopt;
  auto it = env->find(name);
  if (it == env->end() || !it->is_string()) return std::nullopt;
  return it->get<std::string>();
}

bool CollHasNvlink(const json& fp) {
  const json* pairs = Value(fp, "accelerators.nvidia.topology.summary.pairs_by_class");
  if (pairs == nullptr || !pairs->is_object()) return false;
  for (auto it = pairs->begin(); it != pairs->end(); ++it) {
    if (absl::StartsWith(it.key(), "NV")) return true;
  }
  return false;
}

std::vector<std::string> CollIbDevices(const json& fp) {
  std::vector<std::string> out;
  const json* ib = Value(fp, "network.ib_devices");
  if (ib != nullptr && ib->is_array()) {
    for (const json& d : *ib) {
      if (d.is_string()) out.push_back(d.get<std::string>());
    }
  }
  return out;
}

bool CollWhenHolds(const json& fp, CollWhen when) {
  switch (when) {
    case CollWhen::kAlways:
      return true;
    case CollWhen::kNvlink:
      return CollHasNvlink(fp);
    case CollWhen::kNoNvlink:
      return !CollHasNvlink(fp);
    case CollWhen::kRdma:
      return !CollIbDevices(fp).empty();
  }
  return false;
}

bool CollValueMatches(absl::string_view value, absl::string_view pattern) {
  if (absl::EndsWith(pattern, "*")) {
    return absl::StartsWithIgnoreCase(value, pattern.substr(0, pattern.size() - 1));
  }
  return absl::EqualsIgnoreCase(value, pattern);
}

// The entries of a value in NCCL's list syntax, without '^' and "op:" prefixes.
std::vector<std::string> CollListEntries(const std::string& value) {
  std::vector<std::string> out;
  for (absl::string_view group : absl::StrSplit(value, ';', absl::SkipWhitespace())) {
    group = absl::StripAsciiWhitespace(group);
    size_t colon = group.find(':');
    if (colon != absl::string_view::npos) group = group.substr(colon + 1);
    group = absl::StripAsciiWhitespace(group);
    if (absl::StartsWith(group, "^")) group.remove_prefix(1);
    for (absl::string_view e : absl::StrSplit(group, ',', absl::SkipWhitespace())) {
      out.emplace_back(absl::StripAsciiWhitespace(e));
    }
  }
  return out;
}

std::string CollLower(const char* var) { return absl::AsciiStrToLower(var); }

// --- Table-driven rules -----------------------------------------------------------------

void CollDeprecatedRules(const json& fp, std::vector<Finding>* out) {
  for (const CollDeprecatedName& d : kCollDeprecatedNames) {
    std::optional<std::string> old_value = CollEnv(fp, d.old_name);
    if (!old_value) continue;
    std::optional<std::string> new_value = CollEnv(fp, d.new_name);
    if (new_value && *new_value != *old_value) {
      out->push_back({Severity::kError, "env.deprecated_conflict",
                      absl::StrCat(d.old_name, " (deprecated) and ", d.new_name,
                                   " disagree: which one wins depends on the version"),
                      absl::StrCat(d.old_name, "=", *old_value, ", ", d.new_name, "=", *new_value),
                      absl::StrCat("Unset ", d.old_name, " and keep ", d.new_name, ".")});
      continue;
    }
    out->push_back({d.deprecated ? Severity::kWarning : Severity::kInfo,
                    d.deprecated ? "env.deprecated_name" : "env.old_alias",
                    d.deprecated
                        ? absl::StrCat(d.old_name, " is the deprecated name of ", d.new_name,
                                       ": newer releases warn about it and may stop reading it")
                        : absl::StrCat(d.old_name, " is the older alias of ", d.new_name,
                                       ", the name current documentation uses"),
                    absl::StrCat(d.old_name, "=", *old_value),
                    absl::StrCat("Rename it: export ", d.new_name, "=", *old_value, "; unset ",
                                 d.old_name, ".")});
  }
}

void CollChoiceRules(const json& fp, std::vector<Finding>* out) {
  for (const CollChoice& c : kCollChoices) {
    std::optional<std::string> v = CollEnv(fp, c.var);
    if (!v) continue;
    std::vector<std::string> entries;
    if (c.list) {
      entries = CollListEntries(*v);
    } else {
      entries.emplace_back(absl::StripAsciiWhitespace(*v));
    }
    std::vector<absl::string_view> allowed = absl::StrSplit(c.values, '|');
    std::vector<std::string> unknown;
    for (const std::string& e : entries) {
      bool ok = false;
      for (absl::string_view a : allowed) ok = ok || CollValueMatches(e, a);
      if (!ok) unknown.push_back(e);
    }
    if (entries.empty()) unknown.push_back(*v);
    if (unknown.empty()) continue;
    out->push_back(
        {c.severity, absl::StrCat(CollLower(c.var), ".unknown_value"),
         absl::StrCat(c.var, " has ", unknown.size() == 1 ? "a value" : "values",
                      " it does not know (\"", absl::StrJoin(unknown, "\", \""),
                      "\"): ", c.consequence),
         absl::StrCat(c.var, "=", *v),
         absl::StrCat("Use one of ", absl::StrJoin(allowed, ", "),
                      c.list ? " (a comma list; ^ excludes)" : "", ", or unset ", c.var, ".")});
  }
}

void CollIntRules(const json& fp, std::vector<Finding>* out) {
  for (const CollIntRange& r : kCollIntRanges) {
    std::optional<std::string> v = CollEnv(fp, r.var);
    if (!v) continue;
    long long n;
    std::string id = absl::StrCat(CollLower(r.var), ".invalid");
    if (!absl::SimpleAtoi(*v, &n)) {
      out->push_back(
          {r.severity, id,
           absl::StrCat(r.var, "=\"", *v, "\" is not an integer (", r.unit,
                        "): the library ignores it or fails to start"),
           absl::StrCat(r.var, "=", *v),
           absl::StrCat("Set ", r.var, " to a whole number of ", r.unit, ", or unset it.")});
      continue;
    }
    if (n < r.min || n > r.max) {
      std::string range = r.max == kCollNoMax ? absl::StrCat(">= ", r.min)
                                              : absl::StrCat("[", r.min, ", ", r.max, "]");
      out->push_back(
          {r.severity, id,
           absl::StrCat(r.var, "=", n, " is outside its range ", range, " (", r.unit, ")"),
           absl::StrCat(r.var, "=", *v),
           absl::StrCat("Set ", r.var, " within ", range, ", or unset it.")});
    }
  }
}

void CollHurtRules(const json& fp, std::vector<Finding>* out) {
  for (const CollHurt& h : kCollHurts) {
    std::optional<std::string> v = CollEnv(fp, h.var);
    if (!v) continue;
    std::string trimmed(absl::StripAsciiWhitespace(*v));
    if (std::string(h.value) != "*" && !absl::EqualsIgnoreCase(trimmed, h.value)) continue;
    if (!CollWhenHolds(fp, h.when)) continue;
    std::string evidence = absl::StrCat(h.var, "=", *v);
    if (h.when == CollWhen::kNvlink) absl::StrAppend(&evidence, "; NVLink between GPUs");
    if (h.when == CollWhen::kRdma) {
      absl::StrAppend(&evidence, "; RDMA devices: ", absl::StrJoin(CollIbDevices(fp), ", "));
    }
    out->push_back(ToFinding(h.finding, std::move(evidence)));
  }
}

// --- Rules that compare several facts ---------------------------------------------------

// NCCL_BUFFSIZE (bytes, default 4 MiB): NCCL cuts it into equal slices per step, so a size
// that is not a power of two wastes the remainder and misaligns slices; below 1 MiB the
// per-step overhead dominates large messages.
void CollBufferRules(const json& fp, std::vector<Finding>* out) {
  long long n;
  if (std::optional<std::string> v = CollEnv(fp, "NCCL_BUFFSIZE");
      v && absl::SimpleAtoi(*v, &n) && n >= 1) {
    if (n < (1 << 20)) {
      out->push_back({Severity::kWarning, "nccl.buffsize_small",
                      absl::StrCat("NCCL_BUFFSIZE=", n, " (", FormatBytes(n),
                                   ") is far below NCCL's default 4 MiB: large collectives "
                                   "run in many small steps at a fraction of the bandwidth"),
                      absl::StrCat("NCCL_BUFFSIZE=", *v),
                      "Unset NCCL_BUFFSIZE (4 MiB), or measure: `trainscope selftest comm "
                      "--sweep-env NCCL_BUFFSIZE=4194304,8388608`."});
    }
    if ((n & (n - 1)) != 0) {
      out->push_back({Severity::kWarning, "nccl.buffsize_not_pow2",
                      absl::StrCat("NCCL_BUFFSIZE=", n,
                                   " is not a power of two: NCCL's protocol slices no longer "
                                   "divide the buffer evenly"),
                      absl::StrCat("NCCL_BUFFSIZE=", *v),
                      "Use a power of two (4194304 is the default)."});
    }
  }
  // HCCL_BUFFSIZE (MB, default 200): messages larger than it are split; each communicator
  // takes twice it from device memory.
  if (std::optional<std::string> v = CollEnv(fp, "HCCL_BUFFSIZE");
      v && absl::SimpleAtoi(*v, &n) && n >= 1) {
    if (n < 200) {
      out->push_back({Severity::kInfo, "hccl.buffsize_small",
                      absl::StrCat("HCCL_BUFFSIZE=", n,
                                   " MB is below HCCL's default 200 MB: collectives larger "
                                   "than it are split and slower"),
                      absl::StrCat("HCCL_BUFFSIZE=", *v),
                      "Size it to at least micro_batch x seq_len x hidden x dtype bytes / 1 MiB, "
                      "or unset it."});
    } else if (n > 2048) {
      out->push_back({Severity::kInfo, "hccl.buffsize_large",
                      absl::StrCat("HCCL_BUFFSIZE=", n, " MB: every communicator reserves ",
                                   FormatDouble(2.0 * static_cast<double>(n), 0),
                                   " MB of device memory (send and receive)"),
                      absl::StrCat("HCCL_BUFFSIZE=", *v),
                      "With many parallel groups this adds up to an out-of-memory; keep it near "
                      "the largest message size."});
    }
  }
}

// HCCL timeouts against the job: a short execution timeout kills a job whose ranks pause
// unevenly (rank 0 saving a checkpoint); in AIV expansion mode HCCL caps it at 1091 s; a
// big job needs more than the minimum connect time.
void CollTimeoutRules(const json& fp, std::vector<Finding>* out) {
  long long exec = -1, connect = -1, world = -1;
  std::optional<std::string> e = CollEnv(fp, "HCCL_EXEC_TIMEOUT");
  if (e && absl::SimpleAtoi(*e, &exec) && exec > 0 && exec < 300) {
    out->push_back({Severity::kWarning, "hccl.exec_timeout_short",
                    absl::StrCat("HCCL_EXEC_TIMEOUT=", exec,
                                 " s: a rank that works alone longer (checkpoint saving, "
                                 "evaluation on rank 0) makes every other rank time out"),
                    absl::StrCat("HCCL_EXEC_TIMEOUT=", *e),
                    "Set it above the longest rank-asymmetric pause (default 1836 s), and keep "
                    "HCCL_CONNECT_TIMEOUT below it."});
  }
  std::optional<std::string> mode = CollEnv(fp, "HCCL_OP_EXPANSION_MODE");
  if (e && exec >= 0 && mode && absl::EqualsIgnoreCase(*mode, "AIV") &&
      (exec == 0 || exec > 1091)) {
    out->push_back({Severity::kInfo, "hccl.exec_timeout_aiv_cap",
                    absl::StrCat("HCCL_EXEC_TIMEOUT=", exec,
                                 " has no effect beyond 1091 s in AIV expansion mode: HCCL "
                                 "clamps it to 1091 s"),
                    absl::StrCat("HCCL_EXEC_TIMEOUT=", *e, ", HCCL_OP_EXPANSION_MODE=", *mode),
                    "Plan for 1091 s, or use another expansion mode for longer pauses."});
  }
  std::optional<std::string> c = CollEnv(fp, "HCCL_CONNECT_TIMEOUT");
  std::optional<std::string> w = CollEnv(fp, "WORLD_SIZE");
  if (c && w && absl::SimpleAtoi(*c, &connect) && absl::SimpleAtoi(*w, &world) && world >= 64 &&
      connect >= 120 && connect < 600) {
    out->push_back({Severity::kWarning, "hccl.connect_timeout_big_job",
                    absl::StrCat("HCCL_CONNECT_TIMEOUT=", connect, " s for ", world,
                                 " ranks: link setup across many nodes often takes longer, and "
                                 "one slow node fails it everywhere (EI0006)"),
                    absl::StrCat("HCCL_CONNECT_TIMEOUT=", *c, ", WORLD_SIZE=", *w),
                    "export HCCL_CONNECT_TIMEOUT=1200 (HCCL's recommendation for training)."});
  }
}

struct CollIface {
  std::string name;
  std::string operstate;
  int type = -1;
};

// The interfaces captured in the fingerprint; nullopt when they were not captured.
std::optional<std::vector<CollIface>> CollInterfaces(const json& fp) {
  const json* list = Value(fp, "network.interfaces");
  if (list == nullptr || !list->is_array()) return std::nullopt;
  std::vector<CollIface> out;
  for (const json& i : *list) {
    if (!i.is_object() || !i.value("name", json()).is_string()) continue;
    CollIface f;
    f.name = i["name"].get<std::string>();
    if (i.value("operstate", json()).is_string()) f.operstate = i["operstate"].get<std::string>();
    if (i.value("type", json()).is_number_integer()) f.type = i["type"].get<int>();
    out.push_back(std::move(f));
  }
  return out;
}

// An interface-selection variable against the names present. `nccl_syntax`: NCCL's (and
// HCCL's) "eth" = prefix, "=eth0" = exact, "^..." = exclude; otherwise (gloo) a comma list
// of exact names. Exclude lists are not judged (what remains is the library's choice).
void CollCheckSelection(const json& fp, const char* var, bool nccl_syntax,
                        const std::vector<std::string>& present, const char* what_kind,
                        const std::vector<CollIface>* ifaces, std::vector<Finding>* out) {
  std::optional<std::string> v = CollEnv(fp, var);
  if (!v) return;
  std::string spec(absl::StripAsciiWhitespace(*v));
  if (nccl_syntax && absl::StartsWith(spec, "^")) return;
  bool exact = !nccl_syntax;
  if (nccl_syntax && absl::StartsWith(spec, "=")) {
    exact = true;
    spec = spec.substr(1);
  }
  std::vector<std::string> entries;
  for (absl::string_view e : absl::StrSplit(spec, ',', absl::SkipWhitespace())) {
    std::string entry(absl::StripAsciiWhitespace(e));
    entry = entry.substr(0, entry.find(':'));  // NCCL_IB_HCA: "mlx5_0:1" names port 1
    if (!entry.empty()) entries.push_back(entry);
  }
  const std::string id = CollLower(var);
  auto matches = [exact](const std::string& entry, const std::string& name) {
    return exact ? name == entry : absl::StartsWith(name, entry);
  };
  // Loopback only, on a job that spans nodes: the other nodes cannot connect.
  std::string why;
  if (ifaces != nullptr && !entries.empty() && IsMultiNode(fp, &why)) {
    bool all_loopback = true;
    for (const std::string& e : entries) {
      bool loop = e == "lo";
      for (const CollIface& i : *ifaces) {
        if (matches(e, i.name)) loop = loop && (i.type == 772 || i.name == "lo");
      }
      all_loopback = all_loopback && loop;
    }
    if (all_loopback) {
      out->push_back({Severity::kError, id + ".loopback",
                      absl::StrCat(var,
                                   " selects only the loopback interface on a job that "
                                   "spans nodes: the other nodes cannot connect"),
                      absl::StrCat(var, "=", *v, "; ", why),
                      absl::StrCat("Set ", var, " to the NIC that reaches the other nodes.")});
      return;
    }
  }
  if (present.empty() && ifaces == nullptr) return;  // not captured: nothing to compare with
  std::vector<std::string> missing;
  std::vector<std::string> down;
  for (const std::string& e : entries) {
    bool found = false;
    for (const std::string& name : present) {
      if (!matches(e, name)) continue;
      found = true;
      if (ifaces != nullptr) {
        for (const CollIface& i : *ifaces) {
          if (i.name == name && i.operstate == "down") down.push_back(name);
        }
      }
    }
    if (!found) missing.push_back(e);
  }
  const std::string listed = present.empty() ? std::string("none") : absl::StrJoin(present, ", ");
  if (!missing.empty()) {
    const bool none = missing.size() == entries.size();
    out->push_back(
        {none ? Severity::kError : Severity::kWarning, id + ".missing",
         absl::StrCat(var, none ? " matches no " : " names ", none ? what_kind : "",
                      none ? " on this machine: the library fails to find one and initialisation "
                             "fails"
                           : absl::StrCat(what_kind, " that do not exist here (",
                                          absl::StrJoin(missing, ", "), ")")),
         absl::StrCat(var, "=", *v, "; present: ", listed),
         absl::StrCat("Set ", var, " to ", what_kind, " present on every node (here: ", listed,
                      "), or unset it.")});
    return;
  }
  if (!down.empty() && ifaces != nullptr) {
    out->push_back({Severity::kWarning, id + ".down",
                    absl::StrCat(var, " selects ", absl::StrJoin(down, ", "), ", which is down"),
                    absl::StrCat(var, "=", *v, "; operstate down: ", absl::StrJoin(down, ", ")),
                    absl::StrCat("Bring the interface up or point ", var, " at one that is.")});
  }
}

void CollInterfaceRules(const json& fp, std::vector<Finding>* out) {
  std::optional<std::vector<CollIface>> ifaces = CollInterfaces(fp);
  std::vector<std::string> names;
  if (ifaces) {
    for (const CollIface& i : *ifaces) names.push_back(i.name);
  }
  const std::vector<CollIface>* list = ifaces ? &*ifaces : nullptr;
  CollCheckSelection(fp, "NCCL_SOCKET_IFNAME", true, names, "network interfaces", list, out);
  CollCheckSelection(fp, "HCCL_SOCKET_IFNAME", true, names, "network interfaces", list, out);
  CollCheckSelection(fp, "GLOO_SOCKET_IFNAME", false, names, "network interfaces", list, out);
  // RDMA devices: judged only when /sys/class/infiniband was captured.
  const json* ib = Value(fp, "network.ib_devices");
  if (ib != nullptr && ib->is_array()) {
    CollCheckSelection(fp, "NCCL_IB_HCA", true, CollIbDevices(fp), "RDMA devices", nullptr, out);
  } else if (const json* raw = fp.contains("network") ? &fp["network"] : nullptr;
             raw != nullptr && raw->is_object() && raw->value("ib_devices", json()) == "absent" &&
             CollEnv(fp, "NCCL_IB_HCA") && !CollEnv(fp, "NCCL_IB_DISABLE")) {
    out->push_back(
        {Severity::kWarning, "nccl_ib_hca.missing",
         "NCCL_IB_HCA is set but this machine has no RDMA devices "
         "(/sys/class/infiniband is missing): NCCL uses TCP sockets",
         absl::StrCat("NCCL_IB_HCA=", *CollEnv(fp, "NCCL_IB_HCA"), "; network.ib_devices = absent"),
         "Check the HCA driver (ibv_devices), or unset NCCL_IB_HCA here."});
  }
}

}  // namespace

void ApplyCollectiveRules(const json& fp, std::vector<Finding>* findings) {
  CollDeprecatedRules(fp, findings);
  CollChoiceRules(fp, findings);
  CollIntRules(fp, findings);
  CollHurtRules(fp, findings);
  CollBufferRules(fp, findings);
  CollTimeoutRules(fp, findings);
  CollInterfaceRules(fp, findings);
}

}  // namespace trainscope::env
