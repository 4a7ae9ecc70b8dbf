// Device verdicts and the text rendering of a device report. Thresholds come from
// SelftestOptions and are documented in docs/metrics.md ("Device self-test").
#include "device/checks.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "trainscope/core/table.h"

namespace trainscope::device {
namespace {

using nlohmann::json;

double Num(const json& j, const char* key, double fallback = -1) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return fallback;
  return it->get<double>();
}

std::string Str(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

std::string Pct(double fraction) { return absl::StrCat(FormatDouble(100 * fraction, 0), "%"); }

Check Make(std::string name, std::string verdict, std::string value, std::string expected,
           std::string advice = "") {
  return MakeCheck(std::move(name), std::move(verdict), std::move(value), std::move(expected),
                   std::move(advice));
}

// Health of one accelerator from its telemetry row.
Check AcceleratorCheck(const json& d, const SelftestOptions& opt) {
  std::string kind = Str(d, "kind");
  std::string name = absl::StrCat("device.", kind, static_cast<int>(Num(d, "index", 0)));
  double temp = Num(d, "temperature_c");
  double limit = Num(d, "temperature_limit_c");
  if (limit < 0) limit = kind == "nvidia" ? 87 : 85;  // common slowdown points
  std::vector<std::string> parts = {Str(d, "name")};
  if (temp >= 0) parts.push_back(absl::StrCat(FormatDouble(temp, 0), " C"));
  if (Num(d, "utilization_pct") >= 0) {
    parts.push_back(absl::StrCat(FormatDouble(Num(d, "utilization_pct"), 0), "% busy"));
  }
  if (Num(d, "memory_total_bytes") > 0) {
    parts.push_back(absl::StrCat(FormatBytes(std::max(0.0, Num(d, "memory_used_bytes"))), " / ",
                                 FormatBytes(Num(d, "memory_total_bytes"))));
  }
  if (Num(d, "clock_mhz") >= 0) {
    parts.push_back(absl::StrCat(FormatDouble(Num(d, "clock_mhz"), 0), "/",
                                 FormatDouble(Num(d, "max_clock_mhz"), 0), " MHz"));
  }
  std::string value = absl::StrJoin(parts, ", ");
  std::string expected =
      absl::StrCat("online, health OK, < ", FormatDouble(limit, 0), " C, not throttled");
  std::string tool = kind == "nvidia" ? "nvidia-smi -q" : "npu-smi info -t health -i N";
  if (!d.value("online", true) || Str(d, "health") != "OK") {
    return Make(name, "fail", absl::StrCat(value, "; health: ", Str(d, "health")), expected,
                absl::StrCat("take this device out of the job and check it with `", tool,
                             "`; a reset or a replacement is usually needed"));
  }
  if (temp >= 0 && temp >= limit - opt.hot_margin_c) {
    return Make(name, "warn", value, expected,
                "running hot: check airflow and fans; a hot device slows the whole job");
  }
  if (d.value("throttled", false)) {
    std::string reasons =
        absl::StrJoin(d.value("throttle_reasons", std::vector<std::string>{}), ", ");
    return Make(name, "warn", absl::StrCat(value, "; throttled: ", reasons), expected,
                "clocks are held down (thermal or power); one slow card makes the whole job "
                "slow: check cooling and power limits");
  }
  return Make(name, "pass", value, expected);
}

// BLAS advice: the reference BLAS (netlib libblas.so.3) is 10-50x slower than OpenBLAS.
std::string MatmulAdvice(const json& cpu, const std::string& dtype) {
  std::string libs = Str(cpu, "math_libraries");
  bool reference_blas = absl::StrContains(libs, "libblas.so") &&
                        !absl::StrContains(libs, "openblas") && !absl::StrContains(libs, "mkl") &&
                        !absl::StrContains(libs, "blis") && !absl::StrContains(libs, "atlas");
  if (dtype == "fp32" && reference_blas) {
    return "libtorch runs fp32 matmul on the reference BLAS (libblas.so.3): install an "
           "optimised one (Debian: apt-get install libopenblas0-openmp; update-alternatives "
           "picks it for libblas.so.3)";
  }
  if (dtype == "bf16" && !cpu["flags"].value("avx512_bf16", false) &&
      !cpu["flags"].value("amx_bf16", false)) {
    return "this CPU has no bf16 instructions (avx512_bf16 / amx_bf16): train in fp32 here";
  }
  return "other processes may be using the cores (see device.cpu.load); rerun on an idle "
         "machine, and check that libtorch uses all allowed cores (OMP_NUM_THREADS)";
}

// The figures the CPU peak is made of (peak.cc), shown so that a reader can check them: the
// clock and where it came from, and the FLOP/cycle of the ISA libtorch runs. Values stay
// within doctor's 80-column cell.
std::vector<Check> CpuPeakChecks(const json& cpu, const json& benchmarks) {
  std::vector<Check> out;
  if (!cpu.contains("clock") || !cpu["clock"].is_object()) return out;  // an older report
  const json& clock = cpu["clock"];
  const double ghz = Num(clock, "ghz");
  const double measured = Num(clock, "measured_ghz");
  std::string value = ghz > 0 ? absl::StrCat(FormatGhz(ghz), " GHz from ", Str(clock, "source"),
                                             " (", Str(clock, "reason"), ")")
                              : absl::StrCat("unknown (", Str(clock, "reason"), ")");
  if (Str(clock, "source") != "timing loop" && measured > 0) {
    absl::StrAppend(&value, "; loop ", FormatGhz(measured), " GHz");
  }
  out.push_back(Make("device.cpu.clock", ghz > 0 ? "pass" : "skip", value,
                     "the OS's figure, or a timing loop within 30% of it on bare metal",
                     ghz > 0 ? "" : "no clock: the CPU peak is unknown, matmul not judged"));
  const json isa = cpu.value("isa", json::object());
  double peaks[2] = {-1, -1};  // fp32, bf16
  std::string formula;
  for (const json& b : benchmarks) {
    if (Str(b, "device") != "cpu") continue;
    if (Str(b, "name") == "matmul_fp32") {
      peaks[0] = Num(b, "peak");
      formula = Str(b, "peak_formula");
    }
    if (Str(b, "name") == "matmul_bf16") peaks[1] = Num(b, "peak");
  }
  if (formula.empty()) return out;
  std::string name = Str(isa, "name").empty() ? "ISA unknown" : Str(isa, "name");
  std::string pv = absl::StrCat(formula, " (", name, ")");
  if (peaks[0] > 0) absl::StrAppend(&pv, " = ", FormatDouble(peaks[0], 0), " GFLOP/s fp32");
  if (peaks[1] > 0) absl::StrAppend(&pv, ", bf16 ", FormatDouble(peaks[1], 0));
  std::string expected = "cores x clock x FLOP/cycle of the ISA libtorch runs";
  if (!Str(isa, "torch_capability").empty() || !Str(isa, "detail").empty()) {
    absl::StrAppend(&expected, " (libtorch ", Str(isa, "torch_capability"), "; ",
                    Str(isa, "detail"), ")");
  }
  out.push_back(Make("device.cpu.peak", peaks[0] > 0 ? "pass" : "skip", pv, expected,
                     peaks[0] > 0 ? "" : "peak unknown: the matmul checks are not judged"));
  return out;
}

// ---- The rules: each adds the checks of one topic, in the order the report lists them.

// What every rule reads: the report, its "cpu" object ({} in an older report), and the
// "devices" and "benchmarks" arrays ([] when absent).
struct RuleInput {
  const json& report;
  json cpu, devices, benchmarks;
  const SelftestOptions& opt;
};

// device.<kind><index>: the health of each accelerator.
void AcceleratorRule(const RuleInput& in, std::vector<Check>* out) {
  for (const json& d : in.devices) {
    if (Str(d, "kind") != "cpu") out->push_back(AcceleratorCheck(d, in.opt));
  }
}

// device.<tool kind> and device.accelerators: with no accelerator, why the management tools
// found none.
void NoAcceleratorRule(const RuleInput& in, std::vector<Check>* out) {
  for (const json& d : in.devices) {
    if (Str(d, "kind") != "cpu") return;
  }
  std::vector<std::string> why;
  const json tools = in.report.value("tools", json::object());
  for (const auto& [kind, tool] : tools.items()) {
    std::string status = Str(tool, "status");
    if (status == "missing_tool" || status == "timed_out" || status == "failed" ||
        status == "unparsed") {
      out->push_back(Make(
          absl::StrCat("device.", kind), "fail", absl::StrCat(status, ": ", Str(tool, "detail")),
          "the management tool answers",
          status == "missing_tool" ? "the device node exists but its tool is missing: install the "
                                     "driver utilities (nvidia-smi / npu-smi)"
                                   : "the driver does not answer: check `dmesg` for Xid / device "
                                     "errors, then reload the driver or reboot"));
    }
    why.push_back(absl::StrCat(kind, ": ", status));
  }
  out->push_back(Make("device.accelerators", "skip",
                      absl::StrCat("none found (", absl::StrJoin(why, ", "), ")"),
                      "NVIDIA or Ascend devices", "CPU-only machine: the CPU checks below apply"));
}

// A check of devices against their siblings: `value` is the spread, then the slow ones;
// a warning with `advice` when there are any.
Check SiblingCheck(std::string name, const std::vector<std::string>& slow, std::string value,
                   std::string expected, const char* advice) {
  if (!slow.empty()) absl::StrAppend(&value, "; slow: ", absl::StrJoin(slow, ", "));
  return Make(std::move(name), slow.empty() ? "pass" : "warn", std::move(value),
              std::move(expected), slow.empty() ? "" : advice);
}

// device.siblings: the same model should run at the same clock; a card far below the median
// of its siblings drags every synchronous step. Idle devices drop their clocks on purpose:
// compare only the busy ones.
void ClockSiblingRule(const RuleInput& in, std::vector<Check>* out) {
  auto busy_accelerator = [](const json& d) {
    auto r = d.value("throttle_reasons", std::vector<std::string>{});
    return Str(d, "kind") != "cpu" && std::find(r.begin(), r.end(), "gpu_idle") == r.end();
  };
  std::vector<double> sorted;
  for (const json& d : in.devices)
    if (busy_accelerator(d) && Num(d, "clock_mhz") > 0) sorted.push_back(Num(d, "clock_mhz"));
  if (sorted.size() < 2) return;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[sorted.size() / 2];
  std::vector<std::string> slow;
  for (const json& d : in.devices) {
    if (!busy_accelerator(d)) continue;
    double c = Num(d, "clock_mhz");
    if (c > 0 && c < in.opt.slow_sibling_ratio * median) {
      slow.push_back(absl::StrCat(Str(d, "kind"), static_cast<int>(Num(d, "index", 0))));
    }
  }
  out->push_back(SiblingCheck(
      "device.siblings", slow,
      absl::StrCat("SM clock ", FormatDouble(sorted.front(), 0), "-",
                   FormatDouble(sorted.back(), 0), " MHz"),
      absl::StrCat(">= ", FormatDouble(in.opt.slow_sibling_ratio, 1), " x median of siblings"),
      "one slow card makes the whole job slow: check its cooling and clocks, or leave it out"));
}

// device.cpu.load: how busy the CPU was before the test.
void CpuLoadRule(const RuleInput& in, std::vector<Check>* out) {
  double busy = Num(in.cpu, "busy_pct_before");
  if (busy < 0) return;
  out->push_back(Make("device.cpu.load", busy > 50 ? "warn" : "pass",
                      absl::StrCat(FormatDouble(busy, 0), "% busy before the test, load ",
                                   FormatDouble(Num(in.cpu, "loadavg_1m", 0), 2)),
                      "< 50% busy",
                      busy > 50 ? "other processes share these cores: the figures below read "
                                  "low; rerun on an idle machine"
                                : ""));
}

// device.cpu.quota: a cgroup quota below the CPUs the process sees.
void CpuQuotaRule(const RuleInput& in, std::vector<Check>* out) {
  double allowed = in.cpu.value("allowed_cpus", json::array()).size();
  double limit = Num(in.cpu, "cgroup_cpu_limit");
  if (limit <= 0 || limit + 0.5 >= allowed) return;
  out->push_back(Make(
      "device.cpu.quota", "warn",
      absl::StrCat("cgroup quota ", FormatDouble(limit, 1), " CPUs, ", allowed, " CPUs visible"),
      "quota >= visible CPUs",
      absl::StrCat("set OMP_NUM_THREADS (and data-loader workers) to ", static_cast<int>(limit),
                   " or raise the container's CPU "
                   "limit: more threads than quota get throttled")));
}

Check CpuTemperatureCheck(const json& d, const SelftestOptions& opt) {
  double temp = Num(d, "temperature_c");
  double crit = Num(d, "temperature_limit_c");
  if (temp < 0) {
    return Make("device.cpu.temperature", "skip", "no sensor visible", "< critical - 5 C",
                "virtual machines and containers often hide sensors");
  }
  double lim = crit > 0 ? crit : 95;
  bool hot = temp >= lim - opt.hot_margin_c;
  return Make("device.cpu.temperature", hot ? "warn" : "pass",
              absl::StrCat(FormatDouble(temp, 0), " C"),
              absl::StrCat("< ", FormatDouble(lim - opt.hot_margin_c, 0), " C"),
              hot ? "CPU near its critical temperature: check cooling" : "");
}

// The timing loop's clock against the OS's, and the throttle events seen during the test.
Check CpuThrottlingCheck(const json& d, const json& cpu) {
  double ghz = Num(cpu, "effective_ghz");
  double nominal = Num(cpu, "nominal_mhz") / 1000;
  if (cpu.contains("clock") && Num(cpu["clock"], "os_ghz") > 0) {
    nominal = Num(cpu["clock"], "os_ghz");
  }
  std::vector<std::string> reasons = d.value("throttle_reasons", std::vector<std::string>{});
  std::string value =
      ghz > 0 ? absl::StrCat("timing loop ", FormatGhz(ghz), " GHz") : "timing loop not run";
  if (nominal > 0) absl::StrAppend(&value, ", OS figure ", FormatGhz(nominal), " GHz");
  if (!reasons.empty()) absl::StrAppend(&value, "; throttled: ", absl::StrJoin(reasons, ", "));
  // A measured clock far below the nominal one is a throttled (or power-capped) core.
  bool slow_clock = ghz > 0 && nominal > 0 && ghz < 0.8 * nominal;
  std::string advice;
  if (std::find(reasons.begin(), reasons.end(), "cgroup_quota") != reasons.end()) {
    advice =
        "the container's CPU quota throttled the test: use fewer threads or raise the "
        "limit";
  } else if (!reasons.empty()) {
    advice = "thermal throttling during the test: check cooling";
  } else if (slow_clock && Num(cpu, "busy_pct_before") > 50) {
    advice =
        "the cores are shared with other processes (see device.cpu.load), so the clock "
        "reads low: rerun on an idle machine";
  } else if (slow_clock) {
    advice =
        "cores run far below their nominal clock: check the power profile "
        "(cpupower frequency-set -g performance) and cooling";
  }
  return Make("device.cpu.throttling", (!reasons.empty() || slow_clock) ? "warn" : "pass", value,
              "timing loop >= 0.8 x the OS's clock, no throttle events", advice);
}

// device.cpu.temperature, .memory and .throttling of the CPU's telemetry row.
void CpuDeviceRule(const RuleInput& in, std::vector<Check>* out) {
  for (const json& d : in.devices) {
    if (Str(d, "kind") != "cpu") continue;
    out->push_back(CpuTemperatureCheck(d, in.opt));
    double total = Num(d, "memory_total_bytes"), used = Num(d, "memory_used_bytes");
    if (total > 0 && used >= 0) {
      double avail = total - used;
      bool low = avail < 0.1 * total;
      out->push_back(Make("device.cpu.memory", low ? "warn" : "pass",
                          absl::StrCat(FormatBytes(avail), " available of ", FormatBytes(total)),
                          ">= 10% available",
                          low ? "little host memory left: data loaders and pinned buffers will "
                                "swap or be killed; stop other jobs"
                              : ""));
    }
    out->push_back(CpuThrottlingCheck(d, in.cpu));
  }
}

// device.cpu.clock and device.cpu.peak.
void CpuPeakRule(const RuleInput& in, std::vector<Check>* out) {
  for (Check& c : CpuPeakChecks(in.cpu, in.benchmarks)) out->push_back(std::move(c));
}

Check MatmulCheck(const json& b, const std::string& name, const json& cpu,
                  const SelftestOptions& opt) {
  double v = Num(b, "value");
  double frac = Num(b, "fraction");
  std::string dtype = Str(b, "name").substr(7);
  double peak = Num(b, "peak");
  const bool estimated = b.value("peak_estimated", true);
  const std::string est = estimated ? "est. " : "nominal ";
  std::string value = absl::StrCat(FormatDouble(v, 1), " ", Str(b, "unit"));
  if (peak > 0) {
    absl::StrAppend(&value, " = ", Pct(frac), " of ", est, "peak ", FormatDouble(peak, 0));
    // Above an estimate: the cores run faster than the clock it used (turbo in a guest).
    if (estimated && frac > 1) absl::StrAppend(&value, " (cores above the clock used)");
  }
  bool low = frac >= 0 && frac < opt.low_matmul_fraction;
  return Make(name, low ? "warn" : (peak > 0 ? "pass" : "skip"), value,
              peak > 0 ? absl::StrCat(">= ", Pct(opt.low_matmul_fraction), " of ", est, "peak")
                       : "peak unknown for this model",
              !low ? ""
              : Str(b, "device") == "cpu"
                  ? MatmulAdvice(cpu, dtype)
                  : "far below the card's data-sheet peak: check clocks and throttling "
                    "(nvidia-smi -q -d PERFORMANCE), power limit, and other processes "
                    "on the GPU");
}

Check TriadCheck(const json& b, const std::string& name, const SelftestOptions& opt) {
  double v = Num(b, "value");
  double frac = Num(b, "fraction");
  bool low = frac >= 0 && frac < opt.low_triad_fraction;
  return Make(name, low ? "warn" : "pass",
              absl::StrCat(FormatDouble(v, 1), " GB/s = ", FormatDouble(frac, 2), " x memcpy ",
                           FormatDouble(Num(b, "reference_value"), 1), " GB/s"),
              absl::StrCat(">= ", FormatDouble(opt.low_triad_fraction, 1), " x memcpy"),
              low ? "arithmetic streams reach far less than a plain copy: check that the threads "
                    "are spread over all memory channels (NUMA binding, numactl -H)"
                  : "");
}

// device.<device>.<benchmark>: every benchmark that failed, every matmul and triad.
void BenchmarkRule(const RuleInput& in, std::vector<Check>* out) {
  for (const json& b : in.benchmarks) {
    std::string bname = Str(b, "name");
    std::string name = absl::StrCat("device.", Str(b, "device"), ".", bname);
    if (Num(b, "value") < 0) {
      out->push_back(Make(name, "fail", absl::StrCat("error: ", Str(b, "error")), "runs",
                          "the benchmark itself failed: see the error"));
    } else if (absl::StartsWith(bname, "matmul_")) {
      out->push_back(MatmulCheck(b, name, in.cpu, in.opt));
    } else if (bname == "triad") {
      out->push_back(TriadCheck(b, name, in.opt));
    }
  }
}

// device.gpu_matmul_siblings: GPUs against their siblings, one slow card makes every
// synchronous step slow.
void GpuMatmulSiblingRule(const RuleInput& in, std::vector<Check>* out) {
  std::vector<std::pair<std::string, double>> gpu_mm;
  for (const json& b : in.benchmarks) {
    if (Str(b, "name") == "matmul_bf16" && Str(b, "device") != "cpu" && Num(b, "value") > 0) {
      gpu_mm.push_back({Str(b, "device"), Num(b, "value")});
    }
  }
  if (gpu_mm.size() < 2) return;
  std::vector<double> v;
  for (const auto& [d, x] : gpu_mm) v.push_back(x);
  std::sort(v.begin(), v.end());
  double median = v[v.size() / 2];
  std::vector<std::string> slow;
  for (const auto& [d, x] : gpu_mm)
    if (x < in.opt.slow_sibling_ratio * median) slow.push_back(d);
  out->push_back(SiblingCheck(
      "device.gpu_matmul_siblings", slow,
      absl::StrCat(gpu_mm.size(), " GPUs: ", FormatDouble(v.front(), 0), "-",
                   FormatDouble(v.back(), 0), " TFLOP/s"),
      absl::StrCat("each >= ", FormatDouble(in.opt.slow_sibling_ratio, 1), " x median"),
      "one slow card makes the whole job slow: check its clocks, cooling and PCIe link, or "
      "leave it out"));
}

// device.gpu_bench: why the GPU benchmarks did not run.
void GpuBenchRule(const RuleInput& in, std::vector<Check>* out) {
  if (!in.report.contains("gpu_bench") || Str(in.report["gpu_bench"], "status") == "ok") return;
  std::string detail = Str(in.report["gpu_bench"], "detail");
  std::string advice =
      absl::StrContains(detail, "driver")
          ? "the NVIDIA driver is missing or older than the CUDA runtime: install a driver "
            "that supports it (nvidia-smi shows the highest CUDA version it supports)"
      : absl::StrContains(detail, "without a CUDA toolkit")
          ? "rebuild trainscope on a machine with the CUDA toolkit for the GPU benchmarks"
          : "install the CUDA runtime and cuBLAS (libcudart, libcublas) where the loader "
            "finds them (ldconfig or LD_LIBRARY_PATH)";
  out->push_back(
      Make("device.gpu_bench", "skip", detail, "cuBLAS bf16 GEMM and triad per GPU", advice));
}

// device.cpu.cores_clock and .cores_matmul: cores against their siblings, clock and
// single-core matmul.
void CoreSiblingRule(const RuleInput& in, std::vector<Check>* out) {
  const json& cores = in.report.value("cores", json::array());
  if (cores.size() < 2) return;
  for (const char* key : {"clock_ghz", "matmul_fp32_gflops"}) {
    std::vector<double> vals;
    for (const json& c : cores)
      if (Num(c, key) > 0) vals.push_back(Num(c, key));
    if (vals.size() < 2) continue;
    std::vector<double> sorted = vals;
    std::sort(sorted.begin(), sorted.end());
    double median = sorted[sorted.size() / 2];
    if (sorted.size() % 2 == 0) median = (sorted[sorted.size() / 2 - 1] + median) / 2;
    std::vector<std::string> slow;
    for (const json& c : cores) {
      double v = Num(c, key);
      if (v > 0 && v < in.opt.slow_sibling_ratio * median) {
        slow.push_back(absl::StrCat("cpu", static_cast<int>(Num(c, "cpu", 0))));
      }
    }
    bool is_clock = std::string(key) == "clock_ghz";
    std::string unit = is_clock ? " GHz" : " GFLOP/s";
    out->push_back(SiblingCheck(
        is_clock ? "device.cpu.cores_clock" : "device.cpu.cores_matmul", slow,
        absl::StrCat(vals.size(), " cores: ", FormatDouble(sorted.front(), 2), "-",
                     FormatDouble(sorted.back(), 2), unit),
        absl::StrCat("each >= ", FormatDouble(in.opt.slow_sibling_ratio, 1), " x median"),
        "a core far below its siblings: another process is pinned there, or it is throttled; "
        "one slow rank makes the whole job slow"));
  }
}

// The rule table, in report order: the checks each rule may add, and the rule.
struct DeviceRule {
  const char* checks;
  void (*add)(const RuleInput&, std::vector<Check>*);
};
constexpr DeviceRule kDeviceRules[] = {
    {"device.<kind><index>", AcceleratorRule},
    {"device.<tool kind>, device.accelerators", NoAcceleratorRule},
    {"device.siblings", ClockSiblingRule},
    {"device.cpu.load", CpuLoadRule},
    {"device.cpu.quota", CpuQuotaRule},
    {"device.cpu.temperature, .memory, .throttling", CpuDeviceRule},
    {"device.cpu.clock, device.cpu.peak", CpuPeakRule},
    {"device.<device>.<benchmark>", BenchmarkRule},
    {"device.gpu_matmul_siblings", GpuMatmulSiblingRule},
    {"device.gpu_bench", GpuBenchRule},
    {"device.cpu.cores_clock, device.cpu.cores_matmul", CoreSiblingRule},
};

}  // namespace

std::string FormatGhz(double ghz) { return FormatDouble(ghz, 2); }

std::vector<Check> EvaluateDeviceReport(const json& report, const SelftestOptions& opt) {
  const RuleInput in{report, report.contains("cpu") ? report["cpu"] : json::object(),
                     report.value("devices", json::array()),
                     report.value("benchmarks", json::array()), opt};
  std::vector<Check> out;
  for (const DeviceRule& rule : kDeviceRules) rule.add(in, &out);
  return out;
}

std::vector<Check> ChecksFromReport(const json& report) {
  std::vector<Check> out;
  for (const json& c : report.value("checks", json::array())) out.push_back(CheckFromJson(c));
  return out;
}

std::vector<Finding> FindingsFrom(const json& report) {
  std::vector<Finding> out;
  for (Check& c : ChecksFromReport(report)) {
    if (c.verdict == "fail" || c.verdict == "warn") out.push_back(std::move(c.finding));
  }
  return out;
}

std::string RenderDeviceReport(const json& report) {
  std::string out;
  Table devices({"device", "name", "online", "health", "temp C", "busy %", "memory used",
                 "clock MHz", "throttled"});
  for (const json& d : report.value("devices", json::array())) {
    auto num = [&](const char* k, int p) {
      double v = Num(d, k);
      return v < 0 ? std::string("-") : FormatDouble(v, p);
    };
    std::string mem = Num(d, "memory_total_bytes") > 0
                          ? absl::StrCat(FormatBytes(std::max(0.0, Num(d, "memory_used_bytes"))),
                                         " / ", FormatBytes(Num(d, "memory_total_bytes")))
                          : "-";
    devices.AddRow({absl::StrCat(Str(d, "kind"), static_cast<int>(Num(d, "index", 0))),
                    Str(d, "name"), d.value("online", true) ? "yes" : "NO", Str(d, "health"),
                    num("temperature_c", 0), num("utilization_pct", 0), mem,
                    absl::StrCat(num("clock_mhz", 0), " / ", num("max_clock_mhz", 0)),
                    d.value("throttled", false) ? "YES" : "no"});
  }
  out += devices.Render();
  out += "\n";
  Table checks({"check", "verdict", "value", "expected", "advice"});
  for (const Check& c : ChecksFromReport(report)) {
    checks.AddRow({c.name, c.verdict, c.value, c.expected, c.finding.fix});
  }
  out += checks.Render(90);
  out += absl::StrCat("\nselftest device: ", report.value("passed", false) ? "PASSED" : "FAILED",
                      report.value("reason", std::string()).empty()
                          ? ""
                          : " (" + report.value("reason", std::string()) + ")",
                      "\n");
  return out;
}

}  // namespace trainscope::device
