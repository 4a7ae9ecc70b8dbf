#include "trainscope/device/device.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
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
  c.model = "Intel(R) Xeon(R) Platinum 8480+ @ 2.10GHz";
  c.avx2 = c.fma = c.avx512f = true;
  CpuClock two_ghz;
  two_ghz.ghz = 2.0;
  CpuIsa isa = CpuIsaFor(c, "AVX512");
  EXPECT_EQ(isa.name, "avx512");
  EXPECT_EQ(isa.fp32_flops_per_cycle, 64);
  EXPECT_DOUBLE_EQ(EstimateCpuPeak(isa, "fp32", 4, two_ghz).gflops, 4 * 2.0 * 64);
  EXPECT_EQ(EstimateCpuPeak(isa, "fp32", 4, two_ghz).formula, "4 cores x 2.00 GHz x 64 FLOP/cycle");
  // AMX is for bf16 only: the fp32 figure does not move.
  c.amx_bf16 = true;
  isa = CpuIsaFor(c, "avx512");
  EXPECT_EQ(isa.fp32_flops_per_cycle, 64);
  EXPECT_EQ(isa.bf16_flops_per_cycle, 1024);
  // A Xeon Silver has one 512-bit FMA unit.
  CpuInfo silver = c;
  silver.model = "Intel(R) Xeon(R) Silver 4214 CPU @ 2.20GHz";
  EXPECT_EQ(CpuIsaFor(silver, "avx512").fp32_flops_per_cycle, 32);
  CpuInfo zen4 = c;
  zen4.vendor = "AuthenticAMD";
  zen4.family = 25;
  zen4.model = "AMD EPYC";
  zen4.amx_bf16 = false;
  zen4.avx512_bf16 = true;
  isa = CpuIsaFor(zen4, "avx512");
  EXPECT_EQ(isa.fp32_flops_per_cycle, 32);
  EXPECT_EQ(isa.bf16_flops_per_cycle, 64);
  CpuInfo zen5 = zen4;
  zen5.family = 26;
  EXPECT_EQ(CpuIsaFor(zen5, "avx512").fp32_flops_per_cycle, 64);
  CpuInfo plain;
  EXPECT_DOUBLE_EQ(EstimateCpuPeak(CpuIsaFor(plain, ""), "fp32", 2, two_ghz).gflops, 0);
  CpuClock none;
  EXPECT_DOUBLE_EQ(EstimateCpuPeak(CpuIsaFor(c, ""), "fp32", 2, none).gflops, 0);
}

TEST(Peak, TorchCapabilityCapsTheIsa) {
  // ATEN_CPU_CAPABILITY=avx2 on an AVX-512 Xeon: libtorch's kernels run AVX2.
  CpuInfo c;
  c.vendor = "GenuineIntel";
  c.family = 6;
  c.model = "Intel(R) Xeon(R) Platinum 8480+ @ 2.10GHz";
  c.avx = c.avx2 = c.fma = c.avx512f = c.amx_bf16 = true;
  CpuIsa isa = CpuIsaFor(c, "avx2");
  EXPECT_EQ(isa.name, "avx2");
  EXPECT_EQ(isa.torch_capability, "avx2");
  EXPECT_EQ(isa.fp32_flops_per_cycle, 32);
  EXPECT_EQ(isa.bf16_flops_per_cycle, 32);  // no AMX below avx512
  EXPECT_EQ(CpuIsaFor(c, "default").name, "sse");
  EXPECT_EQ(CpuIsaFor(c, "NO AVX").fp32_flops_per_cycle, 8);
  // A capability above the CPU's best caps nothing.
  CpuInfo haswell;
  haswell.vendor = "GenuineIntel";
  haswell.avx = haswell.avx2 = haswell.fma = true;
  EXPECT_EQ(CpuIsaFor(haswell, "avx512").name, "avx2");
  EXPECT_EQ(CpuIsaFor(haswell, "").fp32_flops_per_cycle, 32);
}

// This machine's kind: a 2-vCPU AMD EPYC (Zen 4) KVM guest, no cpufreq.
void AddKvmEpycGuest(FakeOs* os) {
  std::string text;
  for (int i = 0; i < 2; ++i) {
    text += absl::StrCat(
        "processor\t: ", i,
        "\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\n"
        "model name\t: AMD EPYC\ncpu MHz\t\t: 2596.146\nsiblings\t: 2\ncpu cores\t: 2\n"
        "flags\t\t: fpu sse sse2 ht fma avx hypervisor avx2 avx512f avx512_bf16\n\n");
  }
  os->AddFile("/proc/cpuinfo", text);
  os->AddFile("/sys/devices/system/cpu/online", "0-1\n");
}

TEST(Clock, KvmGuestUsesTheOsFigure) {
  FakeOs os;
  AddKvmEpycGuest(&os);
  CpuInfo cpu = ReadCpuInfo(os);
  EXPECT_TRUE(cpu.hypervisor);
  EXPECT_FALSE(cpu.smt);  // the "ht" flag alone is not SMT
  EXPECT_DOUBLE_EQ(cpu.cpuinfo_mhz, 2596.146);
  EXPECT_LT(cpu.cpufreq_max_mhz, 0);
  EXPECT_LT(cpu.model_mhz, 0);
  // The imul chain reads the host's boost, 3.69 GHz: within 30%? No (1.42 x), and a guest.
  CpuClock clock = ChooseCpuClock(cpu, 3.69);
  EXPECT_DOUBLE_EQ(clock.ghz, 2.596146);
  EXPECT_EQ(clock.source, "/proc/cpuinfo cpu MHz");
  EXPECT_NE(clock.reason.find("VM guest"), std::string::npos) << clock.reason;
  EXPECT_DOUBLE_EQ(clock.measured_ghz, 3.69);
  // A guest's loop is not trusted even when it agrees.
  EXPECT_EQ(ChooseCpuClock(cpu, 2.6).source, "/proc/cpuinfo cpu MHz");
  CpuIsa isa = CpuIsaFor(cpu, "avx512");
  EXPECT_EQ(isa.fp32_flops_per_cycle, 32);
  EXPECT_NEAR(EstimateCpuPeak(isa, "fp32", 2, clock).gflops, 2 * 2.596146 * 32, 1e-9);
}

TEST(Clock, IntelBareMetalWithCpufreq) {
  FakeOs os;
  os.AddFile("/proc/cpuinfo",
             "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\n"
             "model name\t: Intel(R) Xeon(R) Gold 6348 CPU @ 2.60GHz\ncpu MHz\t\t: 800.000\n"
             "siblings\t: 2\ncpu cores\t: 1\nflags\t\t: fpu avx avx2 fma avx512f\n\n"
             "processor\t: 1\ncpu MHz\t\t: 3400.000\n");
  os.AddFile("/sys/devices/system/cpu/online", "0-1\n");
  for (int i = 0; i < 2; ++i) {
    std::string base = absl::StrCat("/sys/devices/system/cpu/cpu", i, "/");
    os.AddFile(base + "cpufreq/cpuinfo_max_freq", "3500000\n");
    os.AddFile(base + "cpufreq/scaling_max_freq", "3500000\n");
    os.AddFile(base + "cpufreq/base_frequency", "2600000\n");
    os.AddFile(base + "topology/thread_siblings_list", "0-1\n");
  }
  CpuInfo cpu = ReadCpuInfo(os);
  EXPECT_FALSE(cpu.hypervisor);
  EXPECT_TRUE(cpu.smt);
  EXPECT_DOUBLE_EQ(cpu.cpufreq_max_mhz, 3500);
  EXPECT_DOUBLE_EQ(cpu.base_mhz, 2600);
  EXPECT_DOUBLE_EQ(cpu.model_mhz, 2600);
  // The loop agrees with cpufreq max within 30%: it is used (it sees turbo).
  CpuClock clock = ChooseCpuClock(cpu, 3.3);
  EXPECT_EQ(clock.source, "timing loop");
  EXPECT_DOUBLE_EQ(clock.ghz, 3.3);
  EXPECT_DOUBLE_EQ(clock.os_ghz, 3.5);
  EXPECT_EQ(clock.os_source, "cpufreq cpuinfo_max_freq");
  // A policy cap below the hardware's max is the OS's figure.
  os.AddFile("/sys/devices/system/cpu/cpu0/cpufreq/scaling_max_freq", "2000000\n");
  os.AddFile("/sys/devices/system/cpu/cpu1/cpufreq/scaling_max_freq", "2000000\n");
  clock = ChooseCpuClock(ReadCpuInfo(os), 0);
  EXPECT_EQ(clock.source, "cpufreq scaling_max_freq");
  EXPECT_DOUBLE_EQ(clock.ghz, 2.0);
}

TEST(Clock, LoopFarFromTheOsIsNotTrusted) {
  CpuInfo cpu;
  cpu.vendor = "GenuineIntel";
  cpu.model = "Intel(R) Xeon(R) Platinum 8480+ @ 2.10GHz";
  cpu.model_mhz = 2100;
  // An add chain folded by the core: 3 x the OS's figure (the issue's 10.97 GHz is 5.2 x).
  CpuClock clock = ChooseCpuClock(cpu, 6.3);
  EXPECT_DOUBLE_EQ(clock.ghz, 2.1);
  EXPECT_EQ(clock.source, "model name");
  EXPECT_NE(clock.reason.find("3.00 x"), std::string::npos) << clock.reason;
  EXPECT_EQ(ChooseCpuClock(cpu, 10.97).source, "model name");
  // No OS figure at all: the loop, whatever it says.
  CpuInfo bare;
  EXPECT_EQ(ChooseCpuClock(bare, 2.9).source, "timing loop");
  EXPECT_DOUBLE_EQ(ChooseCpuClock(bare, 0).ghz, 0);
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
  EXPECT_NE(fp32->finding.fix.find("libopenblas"), std::string::npos);
  EXPECT_EQ(Find(checks, "device.cpu.matmul_bf16")->verdict, "pass");
  EXPECT_EQ(Find(checks, "device.cpu.triad")->verdict, "pass");
  EXPECT_EQ(Find(checks, "device.cpu.cores_clock")->verdict, "pass");
  EXPECT_EQ(Find(checks, "device.cpu.throttling")->verdict, "pass");
  for (const Check& c : checks) EXPECT_NE(c.verdict, "fail") << c.name;
}

TEST(Checks, ClockAndPeakFiguresAreShown) {
  // A KVM guest as selftest.cc reports it: the OS's clock used, the loop shown beside it.
  json r = BaseReport();
  r["cpu"]["effective_ghz"] = 3.69;
  r["cpu"]["clock"] = {{"ghz", 2.596},
                       {"source", "/proc/cpuinfo cpu MHz"},
                       {"reason", "VM guest: loop not trusted"},
                       {"os_ghz", 2.596},
                       {"os_source", "/proc/cpuinfo cpu MHz"},
                       {"measured_ghz", 3.69}};
  r["cpu"]["isa"] = {
      {"name", "avx512"}, {"torch_capability", "avx512"}, {"detail", "Zen 4, 2 x 256-bit FMA"}};
  r["cpu"]["math_libraries"] = "libmkl";
  r["benchmarks"][0] = {
      {"name", "matmul_fp32"},  {"device", "cpu"},
      {"unit", "GFLOP/s"},      {"value", 170.0},
      {"peak", 166.15},         {"fraction", 170.0 / 166.15},
      {"peak_estimated", true}, {"peak_formula", "2 cores x 2.60 GHz x 32 FLOP/cycle"}};
  std::vector<Check> checks = EvaluateDeviceReport(r, SelftestOptions{});
  const Check* clock = Find(checks, "device.cpu.clock");
  ASSERT_NE(clock, nullptr);
  EXPECT_EQ(clock->verdict, "pass");
  EXPECT_NE(clock->value.find("2.60 GHz from /proc/cpuinfo cpu MHz"), std::string::npos)
      << clock->value;
  EXPECT_NE(clock->value.find("; loop 3.69 GHz"), std::string::npos) << clock->value;
  EXPECT_LE(clock->value.size(), 80u) << clock->value;  // doctor's cell
  const Check* peak = Find(checks, "device.cpu.peak");
  ASSERT_NE(peak, nullptr);
  EXPECT_EQ(peak->value,
            "2 cores x 2.60 GHz x 32 FLOP/cycle (avx512) = 166 GFLOP/s fp32, bf16 461");
  EXPECT_NE(peak->expected.find("(libtorch avx512; Zen 4, 2 x 256-bit FMA)"), std::string::npos)
      << peak->expected;
  const Check* fp32 = Find(checks, "device.cpu.matmul_fp32");
  EXPECT_EQ(fp32->verdict, "pass");
  EXPECT_NE(fp32->value.find("102% of est. peak 166 (cores above the clock used)"),
            std::string::npos)
      << fp32->value;
  // The throttling check compares the loop with the OS's figure: 3.69 >= 0.8 x 2.60.
  EXPECT_EQ(Find(checks, "device.cpu.throttling")->verdict, "pass");
  EXPECT_NE(Find(checks, "device.cpu.throttling")->value.find("OS figure 2.60 GHz"),
            std::string::npos);
  // No clock: shown as unknown, the peak skipped.
  r["cpu"]["clock"]["ghz"] = nullptr;
  r["benchmarks"][0]["peak"] = nullptr;
  checks = EvaluateDeviceReport(r, SelftestOptions{});
  EXPECT_EQ(Find(checks, "device.cpu.clock")->verdict, "skip");
  EXPECT_EQ(Find(checks, "device.cpu.peak")->verdict, "skip");
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
  EXPECT_FALSE(Find(checks, "device.nvidia1")->finding.fix.empty());
  EXPECT_EQ(Find(checks, "device.siblings")->verdict, "warn");
  EXPECT_NE(Find(checks, "device.siblings")->value.find("nvidia1"), std::string::npos);
  EXPECT_EQ(Find(checks, "device.accelerators"), nullptr);
}

TEST(Checks, FailedAndWarnedChecksAreFindings) {
  json r = BaseReport();
  r["checks"] = json::array();
  for (const Check& c : {MakeCheck("device.cpu.load", "pass", "5% busy", "< 50% busy"),
                         MakeCheck("device.nvidia1", "fail", "ECC errors", "health OK", "reset it"),
                         MakeCheck("device.cpu.quota", "warn", "1 CPU", "no quota", "lift it"),
                         MakeCheck("device.gpu_bench", "skip", "no CUDA", "cuBLAS")}) {
    r["checks"].push_back(CheckToJson(c));
  }
  json found = json::array();
  for (const Finding& f : FindingsFrom(r)) found.push_back(FindingToJson(f));
  EXPECT_EQ(found, json::parse(R"js([
    {"severity": "error", "id": "device.nvidia1", "title": "device.nvidia1 failed: ECC errors",
     "evidence": "ECC errors (expected health OK)", "fix": "reset it"},
    {"severity": "warning", "id": "device.cpu.quota", "title": "device.cpu.quota warned: 1 CPU",
     "evidence": "1 CPU (expected no quota)", "fix": "lift it"}])js"));
  EXPECT_TRUE(FindingsFrom(BaseReport()).empty());  // no checks array
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
