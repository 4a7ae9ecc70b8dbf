// RunDeviceSelftest: telemetry of every device, then the CPU micro-benchmarks, then the
// verdicts (checks.cc). The report is JSON ("trainscope.selftest.device", version 1,
// docs/formats.md) so that doctor can read it from a child process.
#include <algorithm>
#include <cmath>
#include <set>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "device/checks.h"
#include "device/cpu_bench.h"
#include "device/cuda_probe.h"
#include "device/matmul_torch.h"
#include "trainscope/core/formats.h"
#include "trainscope/core/stats.h"
#include "trainscope/core/status.h"
#include "trainscope/device/device.h"

namespace trainscope::device {
namespace {

using nlohmann::json;

json NumOrNull(double v) { return v < 0 ? json(nullptr) : json(v); }
json IntOrNull(int64_t v) { return v < 0 ? json(nullptr) : json(v); }

json ClockToJson(const CpuClock& c) {
  auto ghz = [](double v) { return v > 0 ? json(v) : json(nullptr); };
  return json{{"ghz", ghz(c.ghz)},        {"source", c.source},
              {"reason", c.reason},       {"os_ghz", ghz(c.os_ghz)},
              {"os_source", c.os_source}, {"measured_ghz", ghz(c.measured_ghz)}};
}

json DeviceToJson(const DeviceStatus& d) {
  return json{{"kind", d.kind},
              {"index", d.index},
              {"name", d.name},
              {"bus_id", d.bus_id},
              {"online", d.online},
              {"health", d.health},
              {"temperature_c", NumOrNull(d.temperature_c)},
              {"temperature_limit_c", NumOrNull(d.temperature_limit_c)},
              {"memory_total_bytes", IntOrNull(d.memory_total_bytes)},
              {"memory_used_bytes", IntOrNull(d.memory_used_bytes)},
              {"utilization_pct", NumOrNull(d.utilization_pct)},
              {"clock_mhz", NumOrNull(d.clock_mhz)},
              {"max_clock_mhz", NumOrNull(d.max_clock_mhz)},
              {"power_w", NumOrNull(d.power_w)},
              {"power_limit_w", NumOrNull(d.power_limit_w)},
              {"throttled", d.throttled},
              {"throttle_reasons", d.throttle_reasons},
              {"ecc_uncorrected", IntOrNull(d.ecc_uncorrected)}};
}

// Runs a vendor tool; returns its devices, or records why there are none in `tool`.
void ProbeTool(Os& os, const std::string& kind, const std::vector<std::string>& argv,
               const std::string& device_node, std::chrono::milliseconds timeout,
               std::vector<DeviceStatus>* devices, json* tool) {
  RunOptions ro;
  ro.timeout = timeout;
  (*tool)["command"] = argv;
  absl::StatusOr<RunResult> r = os.Run(argv, ro);
  if (!r.ok()) {
    (*tool)["status"] = "absent";
    (*tool)["detail"] = std::string(r.status().message());
    // A device node without its tool: the devices exist but cannot be inspected.
    if (!device_node.empty() && os.FileExists(device_node)) {
      (*tool)["status"] = "missing_tool";
    }
    return;
  }
  if (r->timed_out) {
    (*tool)["status"] = "timed_out";
    (*tool)["detail"] =
        absl::StrCat(argv[0], " did not answer within ", timeout.count() / 1000.0, " s");
    return;
  }
  if (!r->ok()) {
    (*tool)["status"] = "failed";
    std::string msg = r->err.empty() ? r->out : r->err;
    msg = std::string(absl::StripAsciiWhitespace(msg.substr(0, msg.find('\n'))));
    (*tool)["detail"] = absl::StrCat(argv[0], " exited ", r->exit_code, ": ", msg);
    return;
  }
  auto parsed = kind == "nvidia" ? ParseNvidiaSmiCsv(r->out) : ParseNpuSmiInfo(r->out);
  if (!parsed.ok()) {
    (*tool)["status"] = "unparsed";
    (*tool)["detail"] = std::string(parsed.status().message());
    return;
  }
  (*tool)["status"] = "ok";
  for (auto& d : *parsed) devices->push_back(std::move(d));
}

// Whole-CPU matmul in fp32 and bf16, all allowed CPUs as threads, each against the
// estimated peak of `isa` at `clock` (EstimateCpuPeak: the one peak doctor's MFU uses too).
json CpuMatmulBenchmarks(const CpuInfo& cpu, const CpuClock& clock, const CpuIsa& isa, int n,
                         double window) {
  json out = json::array();
  const int threads = static_cast<int>(cpu.allowed_cpus.size());
  const int cores_for_peak = cpu.physical_cores > 0 ? cpu.physical_cores : threads;
  for (const char* dtype : {"fp32", "bf16"}) {
    json b{{"name", absl::StrCat("matmul_", dtype)}, {"device", "cpu"}, {"unit", "GFLOP/s"}};
    const CpuPeak p = EstimateCpuPeak(isa, dtype, cores_for_peak, clock);
    b["peak"] = p.gflops > 0 ? json(p.gflops) : json(nullptr);
    b["peak_estimated"] = true;
    b["peak_formula"] = p.formula;
    b["peak_clock_source"] = clock.source;
    b["peak_isa"] = isa.name;
    b["size"] = absl::StrCat(n, "x", n, "x", n);
    b["threads"] = threads;
    absl::StatusOr<MatmulResult> mm = TorchMatmul(dtype, n, threads, window);
    if (mm.ok()) {
      b["value"] = mm->gflops;
      b["fraction"] = p.gflops > 0 ? json(mm->gflops / p.gflops) : json(nullptr);
    } else {
      b["value"] = nullptr;
      b["fraction"] = nullptr;
      b["error"] = std::string(mm.status().message());
    }
    out.push_back(std::move(b));
  }
  return out;
}

// Physical cores among `cpus`: distinct (package, core_id) pairs from sysfs topology.
int CountPhysicalCores(Os& os, const std::vector<int>& cpus) {
  std::set<std::pair<std::string, std::string>> cores;
  for (int c : cpus) {
    std::string base = absl::StrCat("/sys/devices/system/cpu/cpu", c, "/topology/");
    auto pkg = os.ReadFile(base + "physical_package_id");
    auto core = os.ReadFile(base + "core_id");
    if (!pkg.ok() || !core.ok()) return static_cast<int>(cpus.size());
    cores.insert({std::string(absl::StripAsciiWhitespace(*pkg)),
                  std::string(absl::StripAsciiWhitespace(*core))});
  }
  return static_cast<int>(cores.size());
}

// "00000000:18:00.0" (nvidia-smi) and "0000:18:00.0" (CUDA) name the same device.
bool SameBus(const std::string& a, const std::string& b) {
  auto tail = [](const std::string& s) {
    std::string t = s.substr(s.find(':') == std::string::npos ? 0 : s.find(':') + 1);
    return absl::AsciiStrToLower(t);
  };
  return !a.empty() && !b.empty() && tail(a) == tail(b);
}

// 1. Accelerators through their management tools: their rows go to `devices`; returns the
// report's "tools" object (how each tool answered).
json ProbeAccelerators(Os& os, const SelftestOptions& opt, std::vector<DeviceStatus>* devices) {
  json tools = json::object();
  ProbeTool(os, "nvidia",
            {"nvidia-smi", absl::StrCat("--query-gpu=", kNvidiaSmiQuery),
             "--format=csv,noheader,nounits"},
            "/dev/nvidia0", opt.tool_timeout, devices, &tools["nvidia"]);
  ProbeTool(os, "ascend", {"npu-smi", "info"}, "/dev/davinci0", opt.tool_timeout, devices,
            &tools["ascend"]);
  return tools;
}

// How busy the machine is before we load it: percent of CPU time busy over a 200 ms sample
// of /proc/stat, -1 when unknown.
double SampleBusyPct(Os& os) {
  CpuTimes t0 = ParseProcStat(os.ReadFile("/proc/stat").value_or(""));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  CpuTimes t1 = ParseProcStat(os.ReadFile("/proc/stat").value_or(""));
  return t1.total > t0.total
             ? 100.0 * (t1.busy - t0.busy) / static_cast<double>(t1.total - t0.total)
             : -1;
}

// The CPU's telemetry row (devices[0] of the report).
DeviceStatus CpuDevice(const CpuInfo& cpu, double busy_pct) {
  DeviceStatus cpu_dev;
  cpu_dev.kind = "cpu";
  cpu_dev.name = cpu.model;
  cpu_dev.temperature_c = cpu.temperature_c;
  cpu_dev.temperature_limit_c = cpu.temperature_crit_c;
  cpu_dev.memory_total_bytes = cpu.mem_total_bytes;
  if (cpu.mem_total_bytes >= 0 && cpu.mem_available_bytes >= 0) {
    cpu_dev.memory_used_bytes = cpu.mem_total_bytes - cpu.mem_available_bytes;
  }
  cpu_dev.utilization_pct = busy_pct;
  cpu_dev.max_clock_mhz = cpu.nominal_mhz;
  return cpu_dev;
}

// The report's "cpu" object before the benchmarks add their figures.
json CpuToJson(const CpuInfo& cpu, double busy_pct) {
  return json{{"model", cpu.model},
              {"vendor", cpu.vendor},
              {"family", cpu.family},
              {"logical_cpus", cpu.logical_cpus},
              {"allowed_cpus", cpu.allowed_cpus},
              {"physical_cores", cpu.physical_cores},
              {"flags",
               {{"fma", cpu.fma},
                {"avx2", cpu.avx2},
                {"avx512f", cpu.avx512f},
                {"avx512_bf16", cpu.avx512_bf16},
                {"amx_bf16", cpu.amx_bf16},
                {"neon", cpu.neon}}},
              {"hypervisor", cpu.hypervisor},
              {"smt", cpu.smt},
              {"nominal_mhz", NumOrNull(cpu.nominal_mhz)},
              {"busy_pct_before", NumOrNull(busy_pct)},
              {"loadavg_1m", NumOrNull(cpu.loadavg_1m)},
              {"cgroup_cpu_limit", NumOrNull(cpu.cgroup_cpu_limit)},
              {"l3_bytes", IntOrNull(cpu.l3_bytes)}};
}

// Per core: clock and a single-threaded matmul, one core at a time, pinned. A cap keeps
// many-core machines within the time budget. Returns the report's "cores" array; the clocks
// measured go to `core_clock`.
json PerCoreBenchmarks(const CpuInfo& cpu, const SelftestOptions& opt, double window,
                       std::vector<double>* core_clock) {
  json cores = json::array();
  size_t max_cores = opt.quick ? 16 : 64;
  double per = std::max(0.05, std::min(window / 2, 4.0 / cpu.allowed_cpus.size()));
  for (size_t i = 0; i < cpu.allowed_cpus.size() && i < max_cores; ++i) {
    int c = cpu.allowed_cpus[i];
    double ghz = 0;
    absl::StatusOr<MatmulResult> mm = absl::UnknownError("not run");
    std::thread th([&] {
      if (!PinCurrentThread(c)) return;
      ghz = MeasureClockGhz(per);
      mm = TorchMatmul("fp32", 256, 1, per);
    });
    th.join();
    json core{{"cpu", c},
              {"clock_ghz", ghz > 0 ? json(ghz) : json(nullptr)},
              {"matmul_fp32_gflops", mm.ok() ? json(mm->gflops) : json(nullptr)},
              {"cur_mhz", c < static_cast<int>(cpu.cur_mhz.size()) ? NumOrNull(cpu.cur_mhz[c])
                                                                   : json(nullptr)},
              {"max_mhz", c < static_cast<int>(cpu.max_mhz.size()) ? NumOrNull(cpu.max_mhz[c])
                                                                   : json(nullptr)}};
    cores.push_back(core);
    if (ghz > 0) core_clock->push_back(ghz);
  }
  return cores;
}

// Memory bandwidth: triad against memcpy, same arrays, same threads, same run.
json TriadBenchmark(const CpuInfo& cpu, const SelftestOptions& opt, double window) {
  int64_t array_bytes = opt.triad_bytes;
  if (array_bytes <= 0) {
    array_bytes = std::max<int64_t>(4 * std::max<int64_t>(cpu.l3_bytes, 0),
                                    opt.quick ? (32 << 20) : (64 << 20));
    array_bytes = std::min<int64_t>(array_bytes, int64_t{256} << 20);
    if (cpu.mem_available_bytes > 0) {
      array_bytes = std::min<int64_t>(array_bytes, cpu.mem_available_bytes / 8);
    }
  }
  json bw{{"name", "triad"}, {"device", "cpu"}, {"unit", "GB/s"}, {"reference", "memcpy"}};
  absl::StatusOr<BandwidthResult> r = MeasureBandwidth(cpu.allowed_cpus, array_bytes, window);
  if (r.ok()) {
    bw["value"] = r->triad_gbps;
    bw["reference_value"] = r->memcpy_gbps;
    bw["fraction"] = r->memcpy_gbps > 0 ? json(r->triad_gbps / r->memcpy_gbps) : json(nullptr);
    bw["array_bytes"] = r->array_bytes;
    bw["threads"] = r->threads;
  } else {
    bw["value"] = nullptr;
    bw["fraction"] = nullptr;
    bw["error"] = std::string(r.status().message());
  }
  return bw;
}

// Throttling seen while the benchmarks ran, against `before` (read before them): thermal
// counters and the cgroup quota.
void RecordThrottling(Os& os, const CpuInfo& before, json* cpu_json, DeviceStatus* cpu_dev) {
  CpuInfo after = ReadCpuInfo(os);
  const int64_t cg_before = before.cgroup_nr_throttled;
  int64_t thermal_events = 0;
  for (size_t i = 0; i < after.throttle_count.size() && i < before.throttle_count.size(); ++i) {
    if (after.throttle_count[i] >= 0 && before.throttle_count[i] >= 0) {
      thermal_events += after.throttle_count[i] - before.throttle_count[i];
    }
  }
  (*cpu_json)["thermal_throttle_events"] = thermal_events;
  (*cpu_json)["cgroup_throttled_periods"] = (cg_before >= 0 && after.cgroup_nr_throttled >= 0)
                                                ? json(after.cgroup_nr_throttled - cg_before)
                                                : json(nullptr);
  (*cpu_json)["temperature_after_c"] = NumOrNull(after.temperature_c);
  cpu_dev->temperature_c = std::max(before.temperature_c, after.temperature_c);
  cpu_dev->throttled =
      thermal_events > 0 || (cg_before >= 0 && after.cgroup_nr_throttled > cg_before);
  if (thermal_events > 0) cpu_dev->throttle_reasons.push_back("thermal");
  if (cg_before >= 0 && after.cgroup_nr_throttled > cg_before) {
    cpu_dev->throttle_reasons.push_back("cgroup_quota");
  }
}

// 3. CPU micro-benchmarks: per core, whole-CPU matmul, triad, and the throttling seen
// meanwhile. Figures go to `cpu_json` and `cpu_dev` (the CPU's telemetry row), rows to
// `bench` and `cores`.
void RunCpuBenchmarks(Os& os, const SelftestOptions& opt, const CpuInfo& cpu, DeviceStatus* cpu_dev,
                      json* cpu_json, json* bench, json* cores) {
  const double window = opt.quick ? std::min(opt.min_bench_s, 0.2) : opt.min_bench_s;
  std::vector<double> core_clock;
  if (opt.per_core) *cores = PerCoreBenchmarks(cpu, opt, window, &core_clock);
  const double measured_ghz = trainscope::Median(core_clock);
  (*cpu_json)["effective_ghz"] = measured_ghz > 0 ? json(measured_ghz) : json(nullptr);

  // Whole-CPU matmul in fp32 and bf16 against the estimated peak (peak.cc): the clock is
  // the OS's figure or the timing loop (ChooseCpuClock), the FLOP/cycle those of the ISA
  // libtorch runs. Both are in the report with their sources.
  const CpuClock clock = ChooseCpuClock(cpu, measured_ghz);
  const CpuIsa isa = CpuIsaFor(cpu, TorchCpuCapability());
  (*cpu_json)["clock"] = ClockToJson(clock);
  (*cpu_json)["isa"] = {{"name", isa.name},
                        {"detail", isa.detail},
                        {"torch_capability", isa.torch_capability},
                        {"fp32_flops_per_cycle", isa.fp32_flops_per_cycle},
                        {"bf16_flops_per_cycle", isa.bf16_flops_per_cycle}};
  cpu_dev->clock_mhz = clock.ghz > 0 ? clock.ghz * 1000 : -1;
  for (json& b : CpuMatmulBenchmarks(cpu, clock, isa, opt.quick ? 512 : 1024, window)) {
    bench->push_back(std::move(b));
  }
  (*cpu_json)["math_libraries"] = LoadedMathLibraries();
  (*cpu_json)["torch_version"] = TorchVersion();
  bench->push_back(TriadBenchmark(cpu, opt, window));
  RecordThrottling(os, cpu, cpu_json, cpu_dev);
}

// One card's cuBLAS bf16 GEMM and triad rows, labelled by its nvidia-smi row (same PCI bus
// id) when there is one.
void AddGpuBenchRows(const GpuBench& g, const std::vector<DeviceStatus>& devices, json* bench) {
  std::string label = absl::StrCat("cuda", g.index), name;
  for (const DeviceStatus& d : devices) {
    if (d.kind == "nvidia" && SameBus(d.bus_id, g.bus_id)) {
      label = absl::StrCat("nvidia", d.index);
      name = d.name;
    }
  }
  double peak = NominalBf16Tflops(name);
  json mm{{"name", "matmul_bf16"},
          {"device", label},
          {"unit", "TFLOP/s"},
          {"peak", peak > 0 ? json(peak) : json(nullptr)},
          {"peak_estimated", false},
          {"size", absl::StrCat(g.matmul_n, "x", g.matmul_n, "x", g.matmul_n)}};
  json bw{{"name", "triad"}, {"device", label}, {"unit", "GB/s"}, {"reference", "memcpy"}};
  if (!g.error.empty()) {
    mm["value"] = nullptr;
    mm["error"] = g.error;
    bw["value"] = nullptr;
    bw["error"] = g.error;
  } else {
    mm["value"] = g.matmul_bf16_tflops;
    mm["fraction"] = peak > 0 ? json(g.matmul_bf16_tflops / peak) : json(nullptr);
    bw["value"] = g.triad_gbps;
    bw["reference_value"] = g.memcpy_gbps;
    bw["fraction"] = g.memcpy_gbps > 0 ? json(g.triad_gbps / g.memcpy_gbps) : json(nullptr);
  }
  bench->push_back(mm);
  bench->push_back(bw);
}

// 4. NVIDIA: cuBLAS bf16 GEMM and triad per card, tied to nvidia-smi rows by PCI bus id.
void RunGpuBenchmarks(const SelftestOptions& opt, const std::vector<DeviceStatus>& devices,
                      json* report, json* bench) {
  bool any_nvidia = false;
  for (const DeviceStatus& d : devices) any_nvidia |= d.kind == "nvidia" && d.online;
  if (!any_nvidia || !opt.gpu) return;
  absl::StatusOr<std::vector<GpuBench>> gpus = RunCudaBenchmarks(opt.quick, opt.quick ? 0.5 : 2.0);
  if (!gpus.ok()) {
    (*report)["gpu_bench"] = {{"status", "unavailable"},
                              {"detail", std::string(gpus.status().message())}};
    return;
  }
  (*report)["gpu_bench"] = {{"status", "ok"}, {"detail", ""}};
  for (const GpuBench& g : *gpus) AddGpuBenchRows(g, devices, bench);
}

// 5. The verdicts: "checks", and "passed" with the first failure as its "reason".
void AddVerdicts(const SelftestOptions& opt, json* report) {
  std::vector<Check> checks = EvaluateDeviceReport(*report, opt);
  json cj = json::array();
  bool passed = true;
  std::string reason;
  for (const Check& c : checks) {
    cj.push_back(CheckToJson(c));
    if (c.verdict == "fail") {
      if (passed) reason = absl::StrCat(c.name, ": ", c.value);
      passed = false;
    }
  }
  (*report)["checks"] = cj;
  (*report)["passed"] = passed;
  (*report)["reason"] = reason;
}

}  // namespace

absl::StatusOr<json> RunDeviceSelftest(Os& os, const SelftestOptions& opt) {
  json report;
  report["format"] = formats::kSelftestDevice;
  report["version"] = 1;
  report["quick"] = opt.quick;

  std::vector<DeviceStatus> devices;
  report["tools"] = ProbeAccelerators(os, opt, &devices);

  // 2. The CPU picture, and how busy the machine is before we load it.
  CpuInfo cpu = ReadCpuInfo(os);
  cpu.allowed_cpus = AllowedCpus();
  cpu.physical_cores = CountPhysicalCores(os, cpu.allowed_cpus);
  const double busy_pct = SampleBusyPct(os);
  devices.insert(devices.begin(), CpuDevice(cpu, busy_pct));
  json cpu_json = CpuToJson(cpu, busy_pct);

  json bench = json::array();
  json cores = json::array();
  if (opt.cpu) RunCpuBenchmarks(os, opt, cpu, &devices.front(), &cpu_json, &bench, &cores);
  RunGpuBenchmarks(opt, devices, &report, &bench);

  json devs = json::array();
  for (const DeviceStatus& d : devices) devs.push_back(DeviceToJson(d));
  report["devices"] = devs;
  report["cpu"] = cpu_json;
  report["benchmarks"] = bench;
  report["cores"] = cores;
  AddVerdicts(opt, &report);
  return report;
}

}  // namespace trainscope::device
