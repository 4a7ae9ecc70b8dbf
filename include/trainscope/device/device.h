// Device self-test: the health and speed of every device of this machine, measured
// against the device's own limits (`trainscope selftest device`).
//
// Telemetry (this header, libtorch-free parsers in src/device/telemetry.cc):
//   NVIDIA  `nvidia-smi --query-gpu=... --format=csv,noheader,nounits`
//   Ascend  `npu-smi info` (two table lines per NPU)
//   CPU     /proc/cpuinfo, /proc/stat, /proc/meminfo, /proc/loadavg, /sys cpufreq,
//           thermal zones, hwmon, thermal_throttle counters and the cgroup cpu.stat.
// Micro-benchmarks (src/device/selftest.cc): matmul through libtorch in fp32 and bf16 as a
// fraction of the estimated nominal peak; a STREAM triad as a fraction of memcpy measured
// in the same run; per-core clock and matmul, each pinned to its core, to find a core far
// below its siblings.
// Thread-safety: free functions, no shared state.
#ifndef TRAINSCOPE_DEVICE_DEVICE_H_
#define TRAINSCOPE_DEVICE_DEVICE_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"
#include "trainscope/core/check.h"
#include "trainscope/core/os.h"

namespace trainscope::device {

// One device as its management tool (or /proc) reports it. Unknown numbers are < 0.
struct DeviceStatus {
  std::string kind;  // "cpu", "nvidia", "ascend"
  int index = 0;
  std::string name;
  std::string bus_id;
  bool online = true;
  std::string health = "OK";  // "OK" or what is wrong
  double temperature_c = -1;
  double temperature_limit_c = -1;  // slowdown / critical point when known
  int64_t memory_total_bytes = -1;
  int64_t memory_used_bytes = -1;
  double utilization_pct = -1;
  double clock_mhz = -1;
  double max_clock_mhz = -1;
  double power_w = -1;
  double power_limit_w = -1;
  bool throttled = false;
  std::vector<std::string> throttle_reasons;  // why clocks are held down
  int64_t ecc_uncorrected = -1;
};

// What /proc and /sys say about the CPUs this process may run on.
struct CpuInfo {
  std::string model;
  std::string vendor;  // "GenuineIntel", "AuthenticAMD", ...
  int family = 0;
  int logical_cpus = 0;           // online CPUs of the machine
  std::vector<int> allowed_cpus;  // sched_getaffinity (filled by the caller)
  int physical_cores = 0;         // distinct (package, core) among allowed CPUs; 0 unknown
  bool fma = false, avx = false, avx2 = false, avx512f = false, avx512_bf16 = false,
       amx_bf16 = false, neon = false;
  bool hypervisor = false;  // the "hypervisor" flag: a virtual machine's guest
  bool smt = false;         // more hardware threads than cores (siblings > cpu cores)
  double nominal_mhz = -1;  // cpufreq max, else the largest "cpu MHz" in /proc/cpuinfo
  // The OS's frequency figures, each -1 when absent (clock sources of ChooseCpuClock).
  double cpufreq_max_mhz = -1;          // largest cpufreq/cpuinfo_max_freq
  double scaling_max_mhz = -1;          // largest cpufreq/scaling_max_freq (the policy's cap)
  double base_mhz = -1;                 // cpufreq/base_frequency (intel_pstate, amd-pstate)
  double cpuinfo_mhz = -1;              // largest "cpu MHz" of /proc/cpuinfo
  double model_mhz = -1;                // the model name's "@ 2.10GHz" (Intel's rated base clock)
  std::vector<double> cur_mhz;          // per logical CPU (index = cpu id), -1 unknown
  std::vector<double> max_mhz;          // per logical CPU, -1 unknown
  std::vector<int64_t> throttle_count;  // thermal_throttle/core_throttle_count, -1 unknown
  double temperature_c = -1;            // hottest thermal zone / hwmon sensor
  double temperature_crit_c = -1;       // lowest critical trip point
  int64_t mem_total_bytes = -1, mem_available_bytes = -1;
  double loadavg_1m = -1;
  int64_t cgroup_nr_throttled = -1;  // cgroup cpu.stat nr_throttled (v1 or v2)
  double cgroup_cpu_limit = -1;      // CPUs allowed by the cgroup quota, -1 none
  int64_t l3_bytes = -1;
};

// Parses `nvidia-smi --query-gpu=<kNvidiaSmiQuery> --format=csv,noheader,nounits`.
// InvalidArgument naming the line when a row has the wrong number of fields.
inline constexpr char kNvidiaSmiQuery[] =
    "index,name,pci.bus_id,temperature.gpu,utilization.gpu,memory.total,memory.used,"
    "clocks.sm,clocks.max.sm,power.draw,power.limit,clocks_throttle_reasons.active,"
    "ecc.errors.uncorrected.volatile.total,temperature.gpu.tlimit";
absl::StatusOr<std::vector<DeviceStatus>> ParseNvidiaSmiCsv(absl::string_view csv);

// Parses the device table of `npu-smi info` (910B and A3 layouts). InvalidArgument when
// the text has no device rows.
absl::StatusOr<std::vector<DeviceStatus>> ParseNpuSmiInfo(absl::string_view text);

// Reads the CPU picture through `os` (every file is optional; missing ones leave -1).
CpuInfo ReadCpuInfo(Os& os);

// Busy and total jiffies of the whole machine from /proc/stat text ("cpu " line).
struct CpuTimes {
  int64_t busy = 0, total = 0;
};
CpuTimes ParseProcStat(absl::string_view text);

// The clock a CPU peak is computed with, where it came from and why (docs/metrics.md,
// "Estimated CPU peak").
struct CpuClock {
  double ghz = 0;         // the figure used; 0 unknown
  std::string source;     // "timing loop", "cpufreq cpuinfo_max_freq", "/proc/cpuinfo cpu MHz", ...
  std::string reason;     // why that source, one phrase
  double os_ghz = 0;      // the OS's figure; 0 when the OS gives none
  std::string os_source;  // where os_ghz came from
  double measured_ghz = 0;  // the timing loop (MeasureClockGhz, median over cores); 0 not run
};

// Picks the clock: the OS's figure (cpufreq max, capped by scaling_max_freq; else
// base_frequency; else the model name's "@ x.xxGHz"; else /proc/cpuinfo "cpu MHz") whenever
// the timing loop is not trustworthy: in a virtual machine (the hypervisor flag), or when the
// loop and the OS's figure disagree by more than 30%. Otherwise the loop (it sees turbo). With
// no OS figure, the loop; with neither, ghz 0. Pure.
CpuClock ChooseCpuClock(const CpuInfo& cpu, double measured_ghz);

// The vector instruction set the FLOP/cycle figure is taken for, and the figures.
struct CpuIsa {
  std::string name;                 // "avx512", "avx2", "avx", "sse", "neon"; "" unknown CPU
  std::string detail;               // why this many FLOP/cycle, e.g. "Zen 4, 2 x 256-bit FMA"
  std::string torch_capability;     // as given ("avx512", "avx2", "default", "" unknown)
  double fp32_flops_per_cycle = 0;  // per physical core
  double bf16_flops_per_cycle = 0;  // per physical core (AMX, AVX512_BF16, else = fp32)
};

// The ISA libtorch runs on this CPU: the CPU's best (from its flags) capped by
// `torch_capability` (libtorch's detected capability, which honours ATEN_CPU_CAPABILITY:
// "default", "avx2", "avx512", any case; "" = no cap). Table and sources in peak.cc. Pure.
CpuIsa CpuIsaFor(const CpuInfo& cpu, absl::string_view torch_capability);

// A CPU peak and the figures it is made of.
struct CpuPeak {
  double gflops = 0;  // cores x clock.ghz x flops_per_cycle; 0 when any is unknown
  int cores = 0;
  double flops_per_cycle = 0;  // per core, for the dtype
  std::string formula;         // "2 cores x 2.60 GHz x 32 FLOP/cycle"
};

// THE CPU peak: the one function behind the matmul checks of `selftest device` and, through
// their "peak" field, doctor's MFU. `dtype` "fp32" or "bf16" (anything else: fp32). Pure.
CpuPeak EstimateCpuPeak(const CpuIsa& isa, absl::string_view dtype, int cores,
                        const CpuClock& clock);

struct SelftestOptions {
  bool quick = false;        // smaller sizes, shorter timings (about 5 s on 2 cores)
  bool cpu = true;           // benchmark the CPU
  bool per_core = true;      // per-core pinned clock + matmul
  bool gpu = true;           // cuBLAS benchmarks on NVIDIA devices (CUDA toolkit builds)
  double min_bench_s = 0.5;  // timing window per measurement (quick: 0.2)
  int64_t triad_bytes = 0;   // bytes per triad array; 0: max(4 x L3, 64 MiB)
  std::chrono::milliseconds tool_timeout{10000};  // nvidia-smi / npu-smi
  // Thresholds (documented in docs/metrics.md).
  double slow_sibling_ratio = 0.7;   // below this x median of siblings: flagged
  double low_matmul_fraction = 0.3;  // below this fraction of peak: warning
  double low_triad_fraction = 0.5;   // triad below this x memcpy: warning
  double hot_margin_c = 5;           // within this of the limit: hot
};

// One entry of the summary: the shape doctor reports (trainscope/core/check.h).
using Check = ::trainscope::Check;

// Runs the whole self-test on this machine. Errors only for failures of the test itself
// (it cannot allocate, libtorch throws); device faults are checks with verdict "fail".
// Blocks for about 10 s (quick: 3-5 s) plus the tool timeouts.
absl::StatusOr<nlohmann::json> RunDeviceSelftest(Os& os, const SelftestOptions& options);

// The summary checks of a report produced by RunDeviceSelftest (its "checks" array).
std::vector<Check> ChecksFromReport(const nlohmann::json& report);

// The failed (error) and warned (warning) checks of such a report as core Findings: each
// check's own (core/check.h: id the check's name, "device.cpu.load"), in the report's order.
std::vector<Finding> FindingsFrom(const nlohmann::json& report);

// Text rendering of a report: the device table, the benchmark table, the checks.
std::string RenderDeviceReport(const nlohmann::json& report);

}  // namespace trainscope::device

#endif  // TRAINSCOPE_DEVICE_DEVICE_H_
