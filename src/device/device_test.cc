#include "trainscope/device/device.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "device/checks.h"
#include "device/cpu_bench.h"
#include "device/cuda_probe.h"
#include "device/matmul_torch.h"
#include "trainscope/core/fake_os.h"

namespace trainscope::device {
namespace {

using nlohmann::json;

TEST(NvidiaSmi, ParsesRowsUnitsAndThrottleBits) {
  const char* csv =
      "0, NVIDIA H100 80GB HBM3, 00000000:18:00.0, 45, 97, 81559, 70000, 1980, 1980, 650.12, "
      "700.00, 0x0000000000000004, 0, 42\n"
      "1, NVIDIA H100 80GB HBM3, 00000000:2A:00.0, 88, 99, 81559, 70000, 1200, 1980, 500, "
      "700.00, 0x0000000000000060, 0, [N/A]\n"
      "2, NVIDIA H100 80GB HBM3, 00000000:3A:00.0, [N/A], [N/A], 81559, 10, 345, 1980, [N/A], "
      "[N/A], [Not Supported], 3, [N/A]\n";
  absl::StatusOr<std::vector<DeviceStatus>> d = ParseNvidiaSmiCsv(csv);
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_EQ(d->size(), 3u);
  EXPECT_EQ((*d)[0].name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ((*d)[0].memory_total_bytes, int64_t{81559} * 1048576);
  EXPECT_DOUBLE_EQ((*d)[0].temperature_limit_c, 87);
  EXPECT_FALSE((*d)[0].throttled);  // a power cap under load is normal operation
  EXPECT_EQ((*d)[0].throttle_reasons, std::vector<std::string>{"sw_power_cap"});
  EXPECT_TRUE((*d)[1].throttled);
  EXPECT_EQ((*d)[1].throttle_reasons.size(), 2u);
  EXPECT_LT((*d)[2].temperature_c, 0);
  EXPECT_EQ((*d)[2].ecc_uncorrected, 3);
  EXPECT_NE((*d)[2].health, "OK");
}

TEST(NvidiaSmi, ShortRowIsAnErrorNamingTheLine) {
  absl::StatusOr<std::vector<DeviceStatus>> d = ParseNvidiaSmiCsv("\n0, H100, 45\n");
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("line 2"), std::string::npos);
}

TEST(NpuSmi, ParsesTwoLineDeviceRows) {
  const char* text =
      "+-------------------------------------------------------------------------------------------"
      "-----+\n"
      "| npu-smi 24.1.rc1.b030            Version: 24.1.rc1.b030                                   "
      "     |\n"
      "+---------------------------+---------------+-----------------------------------------------"
      "-----+\n"
      "| NPU   Name                | Health        | Power(W)    Temp(C)           "
      "Hugepages-Usage(page)|\n"
      "| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)   "
      "     |\n"
      "+===========================+===============+==============================================="
      "=====+\n"
      "| 0     910B3               | OK            | 101.8       43                0    / 0        "
      "     |\n"
      "| 0                         | 0000:C1:00.0  | 0           0    / 0          3318 / 65536    "
      "     |\n"
      "+===========================+===============+==============================================="
      "=====+\n"
      "| 1     910B3               | Warning       | 99.0        91                0    / 0        "
      "     |\n"
      "| 0                         | 0000:C2:00.0  | 12          0    / 0          100  / 65536    "
      "     |\n"
      "+===========================+===============+==============================================="
      "=====+\n"
      "| NPU     Chip              | Process id    | Process name             | Process memory(MB) "
      "     |\n"
      "| 0       0                 | 1234          | python                   | 3000               "
      "     |\n";
  absl::StatusOr<std::vector<DeviceStatus>> d = ParseNpuSmiInfo(text);
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_EQ(d->size(), 2u);
  EXPECT_EQ((*d)[0].name, "910B3");
  EXPECT_EQ((*d)[0].health, "OK");
  EXPECT_DOUBLE_EQ((*d)[0].temperature_c, 43);
  EXPECT_EQ((*d)[0].bus_id, "0000:C1:00.0");
  EXPECT_EQ((*d)[0].memory_total_bytes, int64_t{65536} * 1048576);
  EXPECT_EQ((*d)[0].memory_used_bytes, int64_t{3318} * 1048576);
  EXPECT_EQ((*d)[1].health, "Warning");
  EXPECT_DOUBLE_EQ((*d)[1].utilization_pct, 12);
  EXPECT_FALSE(ParseNpuSmiInfo("npu-smi: command failed\n").ok());
}

TEST(NpuSmi, A3LayoutHasTwoChipsPerNpuWithPhysicalIds) {
  const char* text =
      "| NPU   Name                | Health        | Power(W)    Temp(C)           "
      "Hugepages-Usage(page)|\n"
      "| Chip  Phy-ID              | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)   "
      "     |\n"
      "+===========================+===============+==============================================="
      "=====+\n"
      "| 0     Ascend910           | OK            | 166.4       40                0    / 0        "
      "     |\n"
      "| 0     0                   | 0000:9D:00.0  | 0           0    / 0          3402 / 65536    "
      "     |\n"
      "+---------------------------+---------------+-----------------------------------------------"
      "-----+\n"
      "| 0     Ascend910           | OK            | -           41                0    / 0        "
      "     |\n"
      "| 1     1                   | 0000:9F:00.0  | 0           0    / 0          3390 / 65536    "
      "     |\n";
  absl::StatusOr<std::vector<DeviceStatus>> d = ParseNpuSmiInfo(text);
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_EQ(d->size(), 2u);
  EXPECT_EQ((*d)[0].index, 0);
  EXPECT_EQ((*d)[1].index, 1);
  EXPECT_LT((*d)[1].power_w, 0);  // "-" on the second chip
  EXPECT_DOUBLE_EQ((*d)[1].temperature_c, 41);
  EXPECT_EQ((*d)[1].bus_id, "0000:9F:00.0");
}

TEST(CpuInfo, ReadsProcAndSysThroughOs) {
  FakeOs os;
  os.AddFile("/proc/cpuinfo",
             "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel name\t: Xeon\n"
             "cpu MHz\t\t: 2000.0\nflags\t\t: fpu avx avx2 fma avx512f amx_bf16\n\n"
             "processor\t: 1\ncpu MHz\t\t: 2100.0\nflags\t\t: fpu avx avx2 fma avx512f\n");
  os.AddFile("/sys/devices/system/cpu/online", "0-1\n");
  os.AddFile("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq", "3500000\n");
  os.AddFile("/sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq", "1200000\n");
  os.AddFile("/sys/devices/system/cpu/cpu1/thermal_throttle/core_throttle_count", "7\n");
  os.AddFile("/sys/devices/system/cpu/cpu0/cache/index3/size", "32768K\n");
  os.AddFile("/sys/class/thermal/thermal_zone0/temp", "71000\n");
  os.AddFile("/sys/class/thermal/thermal_zone0/trip_point_0_type", "critical\n");
  os.AddFile("/sys/class/thermal/thermal_zone0/trip_point_0_temp", "100000\n");
  os.AddFile("/proc/meminfo", "MemTotal:       16000000 kB\nMemAvailable:    8000000 kB\n");
  os.AddFile("/proc/loadavg", "1.50 1.00 0.50 2/100 1234\n");
  os.AddFile("/sys/fs/cgroup/cpu.stat", "usage_usec 10\nnr_periods 5\nnr_throttled 3\n");
  os.AddFile("/sys/fs/cgroup/cpu.max", "150000 100000\n");
  CpuInfo c = ReadCpuInfo(os);
  EXPECT_EQ(c.model, "Xeon");
  EXPECT_EQ(c.logical_cpus, 2);
  EXPECT_TRUE(c.avx512f);
  EXPECT_TRUE(c.amx_bf16);
  EXPECT_DOUBLE_EQ(c.nominal_mhz, 3500);
  EXPECT_DOUBLE_EQ(c.cur_mhz[0], 1200);
  EXPECT_DOUBLE_EQ(c.cur_mhz[1], 2100);  // no cpufreq: /proc/cpuinfo
  EXPECT_EQ(c.throttle_count[1], 7);
  EXPECT_EQ(c.l3_bytes, 32 << 20);
  EXPECT_DOUBLE_EQ(c.temperature_c, 71);
  EXPECT_DOUBLE_EQ(c.temperature_crit_c, 100);
  EXPECT_EQ(c.mem_available_bytes, int64_t{8000000} * 1024);
  EXPECT_DOUBLE_EQ(c.loadavg_1m, 1.5);
  EXPECT_EQ(c.cgroup_nr_throttled, 3);
  EXPECT_DOUBLE_EQ(c.cgroup_cpu_limit, 1.5);
}

TEST(CpuInfo, ProcStatBusyExcludesIdleAndIowait) {
  CpuTimes t = ParseProcStat("cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 1 1 1 1\n");
  EXPECT_EQ(t.total, 1000);
  EXPECT_EQ(t.busy, 150);
}

TEST(Peak, FlopsPerCycleFromFlags) {
  CpuInfo c;
  c.vendor = "GenuineIntel";
  c.family = 6;
  c.avx2 = c.fma = c.avx512f = true;
  double fpc = 0;
  EXPECT_DOUBLE_EQ(EstimateCpuPeakGflops(c, "fp32", 4, 2.0, &fpc), 4 * 2.0 * 64);
  EXPECT_EQ(fpc, 64);
  c.amx_bf16 = true;
  EXPECT_DOUBLE_EQ(EstimateCpuPeakGflops(c, "bf16", 1, 1.0), 1024);
  CpuInfo zen4 = c;
  zen4.vendor = "AuthenticAMD";
  zen4.family = 25;
  zen4.amx_bf16 = false;
  zen4.avx512_bf16 = true;
  EXPECT_DOUBLE_EQ(EstimateCpuPeakGflops(zen4, "fp32", 2, 1.0), 64);
  EXPECT_DOUBLE_EQ(EstimateCpuPeakGflops(zen4, "bf16", 2, 1.0), 128);
  CpuInfo plain;
  EXPECT_DOUBLE_EQ(EstimateCpuPeakGflops(plain, "fp32", 2, 1.0), 0);  // unknown CPU
}

json BaseReport() {
  return json::parse(R"({
    "devices": [{"kind": "cpu", "index": 0, "name": "EPYC", "online": true, "health": "OK",
                 "temperature_c": null, "temperature_limit_c": null,
                 "memory_total_bytes": 1000, "memory_used_bytes": 500,
                 "throttle_reasons": [], "throttled": false}],
    "tools": {"nvidia": {"status": "absent"}, "ascend": {"status": "absent"}},
    "cpu": {"busy_pct_before": 5, "loadavg_1m": 0.2, "allowed_cpus": [0, 1],
            "effective_ghz": 3.6, "nominal_mhz": 2600, "flags": {"avx512_bf16": true},
            "math_libraries": "/usr/lib/x86_64-linux-gnu/blas/libblas.so.3"},
    "benchmarks": [
      {"name": "matmul_fp32", "device": "cpu", "value": 6.0, "peak": 230.4, "fraction": 0.026},
      {"name": "matmul_bf16", "device": "cpu", "value": 400.0, "peak": 460.8, "fraction": 0.87},
      {"name": "triad", "device": "cpu", "value": 20.0, "reference_value": 25.0, "fraction": 0.8}],
    "cores": [{"cpu": 0, "clock_ghz": 3.6, "matmul_fp32_gflops": 3.0},
              {"cpu": 1, "clock_ghz": 3.6, "matmul_fp32_gflops": 3.1}]
  })");
}

const Check* Find(const std::vector<Check>& checks, const std::string& name) {
  for (const Check& c : checks)
    if (c.name == name) return &c;
  return nullptr;
}

TEST(Checks, CpuOnlyMachine) {
  std::vector<Check> checks = EvaluateDeviceReport(BaseReport(), SelftestOptions{});
  ASSERT_NE(Find(checks, "device.accelerators"), nullptr);
  EXPECT_EQ(Find(checks, "device.accelerators")->verdict, "skip");
  EXPECT_EQ(Find(checks, "device.cpu.temperature")->verdict, "skip");
  // The reference BLAS gives fp32 matmul a warning with a concrete fix.
  const Check* fp32 = Find(checks, "device.cpu.matmul_fp32");
  ASSERT_NE(fp32, nullptr);
  EXPECT_EQ(fp32->verdict, "warn");
  EXPECT_NE(fp32->advice.find("libopenblas"), std::string::npos);
  EXPECT_EQ(Find(checks, "device.cpu.matmul_bf16")->verdict, "pass");
  EXPECT_EQ(Find(checks, "device.cpu.triad")->verdict, "pass");
  EXPECT_EQ(Find(checks, "device.cpu.cores_clock")->verdict, "pass");
  EXPECT_EQ(Find(checks, "device.cpu.throttling")->verdict, "pass");
  for (const Check& c : checks) EXPECT_NE(c.verdict, "fail") << c.name;
}

TEST(Checks, SlowCoreHotAndBrokenAcceleratorsAreFlagged) {
  json r = BaseReport();
  r["cores"][1]["clock_ghz"] = 1.2;  // a core at a third of its sibling
  r["cpu"]["cgroup_cpu_limit"] = 1.0;
  r["devices"][0]["throttle_reasons"] = {"cgroup_quota"};
  r["devices"].push_back({{"kind", "nvidia"},
                          {"index", 0},
                          {"name", "H100"},
                          {"online", true},
                          {"health", "OK"},
                          {"temperature_c", 86},
                          {"clock_mhz", 1980},
                          {"max_clock_mhz", 1980}});
  r["devices"].push_back({{"kind", "nvidia"},
                          {"index", 1},
                          {"name", "H100"},
                          {"online", true},
                          {"health", "2 uncorrected ECC errors"},
                          {"temperature_c", 40},
                          {"clock_mhz", 900},
                          {"max_clock_mhz", 1980}});
  r["devices"].push_back({{"kind", "nvidia"},
                          {"index", 2},
                          {"name", "H100"},
                          {"online", true},
                          {"health", "OK"},
                          {"temperature_c", 40},
                          {"clock_mhz", 1970},
                          {"max_clock_mhz", 1980}});
  std::vector<Check> checks = EvaluateDeviceReport(r, SelftestOptions{});
  EXPECT_EQ(Find(checks, "device.cpu.cores_clock")->verdict, "warn");
  EXPECT_NE(Find(checks, "device.cpu.cores_clock")->value.find("cpu1"), std::string::npos);
  EXPECT_EQ(Find(checks, "device.cpu.quota")->verdict, "warn");
  EXPECT_EQ(Find(checks, "device.cpu.throttling")->verdict, "warn");
  EXPECT_EQ(Find(checks, "device.nvidia0")->verdict, "warn");  // 86 C, limit 87
  EXPECT_EQ(Find(checks, "device.nvidia1")->verdict, "fail");
  EXPECT_FALSE(Find(checks, "device.nvidia1")->advice.empty());
  EXPECT_EQ(Find(checks, "device.siblings")->verdict, "warn");
  EXPECT_NE(Find(checks, "device.siblings")->value.find("nvidia1"), std::string::npos);
  EXPECT_EQ(Find(checks, "device.accelerators"), nullptr);
}

TEST(Checks, HungManagementToolFails) {
  json r = BaseReport();
  r["tools"]["nvidia"] = {{"status", "timed_out"}, {"detail", "nvidia-smi did not answer"}};
  std::vector<Check> checks = EvaluateDeviceReport(r, SelftestOptions{});
  ASSERT_NE(Find(checks, "device.nvidia"), nullptr);
  EXPECT_EQ(Find(checks, "device.nvidia")->verdict, "fail");
}

TEST(Selftest, NvidiaSmiThroughOsAndQuickCpuRun) {
  // The real CPU benchmarks on this machine, with a fake nvidia-smi: small and quick.
  FakeOs os;
  os.AddFile("/proc/cpuinfo",
             "vendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel name\t: X\n"
             "cpu MHz\t\t: 2600.0\nflags\t\t: avx avx2 fma\n");
  RunResult smi;
  smi.exited = true;
  smi.exit_code = 0;
  smi.out = "0, NVIDIA A100, 0000:01:00.0, 40, 0, 40960, 1, 1410, 1410, 50, 400, 0x1, 0, 45\n";
  os.AddProgram("nvidia-smi", smi);
  SelftestOptions opt;
  opt.quick = true;
  opt.min_bench_s = 0.05;
  opt.triad_bytes = 4 << 20;
  absl::StatusOr<json> r = RunDeviceSelftest(os, opt);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)["format"], "trainscope.selftest.device");
  EXPECT_EQ((*r)["devices"].size(), 2u);
  EXPECT_EQ((*r)["devices"][1]["kind"], "nvidia");
  EXPECT_EQ((*r)["tools"]["ascend"]["status"], "absent");
  ASSERT_EQ((*r)["benchmarks"].size(), 3u);
  for (const json& b : (*r)["benchmarks"]) {
    ASSERT_TRUE(b["value"].is_number()) << b.dump();
    EXPECT_GT(b["value"].get<double>(), 0) << b.dump();
  }
  EXPECT_FALSE((*r)["cores"].empty());
  // The cuBLAS probe ran or said why not (no toolkit, no driver, no device).
  ASSERT_TRUE(r->contains("gpu_bench"));
  if ((*r)["gpu_bench"]["status"] != "ok") {
    EXPECT_FALSE((*r)["gpu_bench"]["detail"].get<std::string>().empty());
  }
  EXPECT_TRUE((*r)["passed"].get<bool>()) << (*r)["reason"];
  std::string text = RenderDeviceReport(*r);
  EXPECT_NE(text.find("NVIDIA A100"), std::string::npos);
  EXPECT_NE(text.find("device.cpu.triad"), std::string::npos);
}

TEST(CpuBench, ClockIsPlausibleAndTriadMovesBytes) {
  double ghz = MeasureClockGhz(0.05);
#if defined(__x86_64__) || defined(__aarch64__)
  EXPECT_GT(ghz, 0.3);
  EXPECT_LT(ghz, 8.0);
#endif
  absl::StatusOr<BandwidthResult> bw = MeasureBandwidth(AllowedCpus(), 1 << 20, 0.02);
  ASSERT_TRUE(bw.ok());
  EXPECT_GT(bw->triad_gbps, 0);
  EXPECT_GT(bw->memcpy_gbps, 0);
}

TEST(Cuda, NominalPeakTableMatchesSpecificNamesFirst) {
  EXPECT_EQ(NominalBf16Tflops("NVIDIA H100 80GB HBM3"), 989);
  EXPECT_EQ(NominalBf16Tflops("NVIDIA H100 PCIe"), 756);
  EXPECT_EQ(NominalBf16Tflops("NVIDIA H200"), 989);
  EXPECT_EQ(NominalBf16Tflops("NVIDIA H20"), 148);
  EXPECT_EQ(NominalBf16Tflops("NVIDIA A100-SXM4-80GB"), 312);
  EXPECT_EQ(NominalBf16Tflops("NVIDIA A10"), 125);
  EXPECT_EQ(NominalBf16Tflops("NVIDIA L40S"), 362);
  EXPECT_EQ(NominalBf16Tflops("Tesla V100-SXM2-32GB"), 0);
}

TEST(Checks, GpuBenchmarksAgainstPeakAndSiblings) {
  json r = BaseReport();
  for (int i = 0; i < 3; ++i) {
    r["devices"].push_back({{"kind", "nvidia"},
                            {"index", i},
                            {"name", "H100"},
                            {"online", true},
                            {"health", "OK"},
                            {"temperature_c", 40}});
    double tflops = i == 2 ? 300 : 700;
    r["benchmarks"].push_back({{"name", "matmul_bf16"},
                               {"device", "nvidia" + std::to_string(i)},
                               {"unit", "TFLOP/s"},
                               {"value", tflops},
                               {"peak", 989},
                               {"peak_estimated", false},
                               {"fraction", tflops / 989}});
  }
  std::vector<Check> checks = EvaluateDeviceReport(r, SelftestOptions{});
  EXPECT_EQ(Find(checks, "device.nvidia0.matmul_bf16")->verdict, "pass");
  EXPECT_NE(Find(checks, "device.nvidia0.matmul_bf16")->value.find("71% of nominal peak 989"),
            std::string::npos)
      << Find(checks, "device.nvidia0.matmul_bf16")->value;
  EXPECT_EQ(Find(checks, "device.nvidia2.matmul_bf16")->verdict, "pass");  // 30% is the bar
  EXPECT_EQ(Find(checks, "device.gpu_matmul_siblings")->verdict, "warn");
  EXPECT_NE(Find(checks, "device.gpu_matmul_siblings")->value.find("slow: nvidia2"),
            std::string::npos);
  r["gpu_bench"] = {{"status", "unavailable"}, {"detail", "no CUDA device visible"}};
  checks = EvaluateDeviceReport(r, SelftestOptions{});
  EXPECT_EQ(Find(checks, "device.gpu_bench")->verdict, "skip");
}

TEST(Matmul, UnknownDtypeIsInvalidArgument) {
  EXPECT_EQ(TorchMatmul("fp8", 16, 1, 0.01).status().code(), absl::StatusCode::kInvalidArgument);
  absl::StatusOr<MatmulResult> r = TorchMatmul("bf16", 64, 1, 0.01);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GT(r->gflops, 0);
}

}  // namespace
}  // namespace trainscope::device
