// Telemetry parsers: nvidia-smi CSV, npu-smi tables, and the CPU picture from /proc and
// /sys. Everything here is libtorch-free and goes through Os so tests use FakeOs.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "trainscope/device/device.h"

namespace trainscope::device {
namespace {

// nvidia-smi prints "[N/A]", "[Not Supported]", "N/A" for missing values.
double NumOr(absl::string_view s, double fallback = -1) {
  s = absl::StripAsciiWhitespace(s);
  double v;
  if (absl::SimpleAtod(s, &v) && std::isfinite(v)) return v;
  return fallback;
}

int64_t IntOr(absl::string_view s, int64_t fallback = -1) {
  s = absl::StripAsciiWhitespace(s);
  int64_t v;
  if (absl::SimpleAtoi(s, &v)) return v;
  return fallback;
}

// Clock-event (throttle) reason bits of NVML, as nvidia-smi prints them in hex.
struct ReasonBit {
  uint64_t bit;
  const char* name;
  bool slows;  // true: a real slowdown worth flagging, not an idle or a user setting
};
constexpr ReasonBit kNvReasons[] = {
    {0x1, "gpu_idle", false},
    {0x2, "applications_clocks_setting", false},
    {0x4, "sw_power_cap", true},
    {0x8, "hw_slowdown", true},
    {0x10, "sync_boost", false},
    {0x20, "sw_thermal_slowdown", true},
    {0x40, "hw_thermal_slowdown", true},
    {0x80, "hw_power_brake_slowdown", true},
    {0x100, "display_clock_setting", false},
};

}  // namespace

absl::StatusOr<std::vector<DeviceStatus>> ParseNvidiaSmiCsv(absl::string_view csv) {
  std::vector<DeviceStatus> out;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(csv, '\n')) {
    ++line_no;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) continue;
    std::vector<absl::string_view> f = absl::StrSplit(line, ',');
    if (f.size() < 13) {
      return absl::InvalidArgumentError(
          absl::StrCat("nvidia-smi output line ", line_no, ": ", f.size(), " fields, expected 14"));
    }
    DeviceStatus d;
    d.kind = "nvidia";
    d.index = static_cast<int>(IntOr(f[0], out.size()));
    d.name = std::string(absl::StripAsciiWhitespace(f[1]));
    d.bus_id = std::string(absl::StripAsciiWhitespace(f[2]));
    d.temperature_c = NumOr(f[3]);
    d.utilization_pct = NumOr(f[4]);
    double mem_total_mib = NumOr(f[5]), mem_used_mib = NumOr(f[6]);
    if (mem_total_mib >= 0) d.memory_total_bytes = static_cast<int64_t>(mem_total_mib * 1048576);
    if (mem_used_mib >= 0) d.memory_used_bytes = static_cast<int64_t>(mem_used_mib * 1048576);
    d.clock_mhz = NumOr(f[7]);
    d.max_clock_mhz = NumOr(f[8]);
    d.power_w = NumOr(f[9]);
    d.power_limit_w = NumOr(f[10]);
    std::string reasons(absl::StripAsciiWhitespace(f[11]));
    uint64_t bits = 0;
    if (absl::StartsWith(reasons, "0x")) bits = std::strtoull(reasons.c_str() + 2, nullptr, 16);
    for (const ReasonBit& r : kNvReasons) {
      if (!(bits & r.bit)) continue;
      d.throttle_reasons.push_back(r.name);
      // A power cap under full load is normal operation; only thermal/hardware
      // slowdowns count as "throttled".
      if (r.slows && r.bit != 0x4) d.throttled = true;
    }
    d.ecc_uncorrected = IntOr(f[12]);
    // temperature.gpu.tlimit: degrees left before slowdown (newer drivers).
    if (f.size() > 13) {
      double margin = NumOr(f[13]);
      if (margin >= 0 && d.temperature_c >= 0) d.temperature_limit_c = d.temperature_c + margin;
    }
    if (d.ecc_uncorrected > 0)
      d.health = absl::StrCat(d.ecc_uncorrected, " uncorrected ECC errors");
    for (absl::string_view field : f) {
      if (absl::StrContains(field, "Unknown Error") ||
          absl::StrContains(field, "GPU requires reset")) {
        d.health = std::string(absl::StripAsciiWhitespace(field));
        d.online = false;
      }
    }
    out.push_back(std::move(d));
  }
  return out;
}

// npu-smi prints two table lines per device:
//   | 0     910B3               | OK            | 101.8       43                0    / 0 | | 0 |
//   0000:C1:00.0  | 0           0    / 0          3318 / 65536         |
// The first has NPU id, name, health, power, temperature; the second chip id, bus id,
// AICore %, memory and HBM usage (used / total MB). Process tables below are ignored.
absl::StatusOr<std::vector<DeviceStatus>> ParseNpuSmiInfo(absl::string_view text) {
  std::vector<DeviceStatus> out;
  DeviceStatus* pending = nullptr;
  bool in_processes = false;
  for (absl::string_view raw : absl::StrSplit(text, '\n')) {
    absl::string_view line = absl::StripAsciiWhitespace(raw);
    if (!absl::StartsWith(line, "|")) {
      pending = nullptr;
      continue;
    }
    if (absl::StrContains(line, "Process id") || absl::StrContains(line, "Process name")) {
      in_processes = true;
    }
    if (in_processes) continue;
    std::vector<absl::string_view> cells = absl::StrSplit(line, '|', absl::SkipWhitespace());
    if (cells.size() < 3) continue;
    std::vector<absl::string_view> c0 = absl::StrSplit(cells[0], ' ', absl::SkipWhitespace());
    std::vector<absl::string_view> c2 =
        absl::StrSplit(cells[2], absl::ByAnyChar(" /"), absl::SkipWhitespace());
    int64_t id = c0.empty() ? -1 : IntOr(c0[0]);
    if (id < 0) {
      pending = nullptr;
      continue;  // header lines
    }
    std::string mid(absl::StripAsciiWhitespace(cells[1]));
    bool bus_line = absl::StrContains(mid, ":") && absl::StrContains(mid, ".");
    if (!bus_line) {
      DeviceStatus d;
      d.kind = "ascend";
      d.index = static_cast<int>(id);
      d.name = c0.size() > 1 ? std::string(c0[1]) : "Ascend";
      d.health = mid;
      d.online = mid != "Offline" && mid != "-";
      if (c2.size() >= 2) {
        d.power_w = NumOr(c2[0]);
        d.temperature_c = NumOr(c2[1]);
      }
      out.push_back(std::move(d));
      pending = &out.back();
    } else if (pending != nullptr) {
      pending->bus_id = mid;
      // A3 ("Chip Phy-ID") and 310P ("Chip Device") layouts: the second number is the
      // logical device id that ASCEND_RT_VISIBLE_DEVICES uses; two chips share an NPU id.
      if (c0.size() >= 2) {
        int64_t phy = IntOr(c0[1]);
        if (phy >= 0) pending->index = static_cast<int>(phy);
      }
      // AICore% then used/total pairs; the last pair is HBM when present.
      if (!c2.empty()) pending->utilization_pct = NumOr(c2[0]);
      if (c2.size() >= 5) {
        double used = NumOr(c2[c2.size() - 2]), total = NumOr(c2[c2.size() - 1]);
        if (total > 0) {
          pending->memory_used_bytes = static_cast<int64_t>(used * 1048576);
          pending->memory_total_bytes = static_cast<int64_t>(total * 1048576);
        }
      }
      pending = nullptr;
    }
  }
  if (out.empty()) return absl::InvalidArgumentError("npu-smi info: no device rows found");
  return out;
}

CpuTimes ParseProcStat(absl::string_view text) {
  CpuTimes t;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::StartsWith(line, "cpu ")) continue;
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipWhitespace());
    // user nice system idle iowait irq softirq steal ...
    for (size_t i = 1; i < f.size() && i <= 8; ++i) {
      int64_t v = IntOr(f[i], 0);
      t.total += v;
      if (i != 4 && i != 5) t.busy += v;
    }
    break;
  }
  return t;
}

namespace {

std::vector<int> ParseCpuList(absl::string_view s) {
  std::vector<int> out;
  for (absl::string_view part :
       absl::StrSplit(absl::StripAsciiWhitespace(s), ',', absl::SkipWhitespace())) {
    std::pair<absl::string_view, absl::string_view> r = absl::StrSplit(part, '-');
    int lo, hi;
    if (!absl::SimpleAtoi(r.first, &lo)) continue;
    hi = lo;
    if (!r.second.empty() && !absl::SimpleAtoi(r.second, &hi)) continue;
    for (int i = lo; i <= hi && i - lo < 65536; ++i) out.push_back(i);
  }
  return out;
}

double ReadNumber(Os& os, const std::string& path, double fallback = -1) {
  auto s = os.ReadFile(path);
  return s.ok() ? NumOr(*s, fallback) : fallback;
}

// "Intel(R) Xeon(R) Platinum 8480+ @ 2.10GHz" -> 2100; -1 without one. Intel states its
// rated base clock this way; AMD's model names carry none.
double ModelNameMhz(absl::string_view model) {
  size_t at = model.rfind('@');
  if (at == absl::string_view::npos) return -1;
  absl::string_view rest = absl::StripAsciiWhitespace(model.substr(at + 1));
  double scale = 0;
  if (absl::ConsumeSuffix(&rest, "GHz")) {
    scale = 1000;
  } else if (absl::ConsumeSuffix(&rest, "MHz")) {
    scale = 1;
  }
  double v = NumOr(rest);
  return scale > 0 && v > 0 ? v * scale : -1;
}

int64_t ParseSizeWithUnit(absl::string_view s) {  // "32768K", "32M"
  s = absl::StripAsciiWhitespace(s);
  int64_t mult = 1;
  if (absl::ConsumeSuffix(&s, "K"))
    mult = 1024;
  else if (absl::ConsumeSuffix(&s, "M"))
    mult = 1024 * 1024;
  int64_t v;
  return absl::SimpleAtoi(s, &v) ? v * mult : -1;
}

// Temperatures: thermal zones (millidegrees) and hwmon sensors (k10temp, coretemp).
void ReadTemperatures(Os& os, CpuInfo* cpu) {
  if (auto zones = os.ListDir("/sys/class/thermal"); zones.ok()) {
    for (const std::string& z : *zones) {
      if (!absl::StartsWith(z, "thermal_zone")) continue;
      std::string base = "/sys/class/thermal/" + z;
      double t = ReadNumber(os, base + "/temp");
      if (t > 0) cpu->temperature_c = std::max(cpu->temperature_c, t / 1000);
      for (int trip = 0; trip < 16; ++trip) {
        auto type = os.ReadFile(absl::StrCat(base, "/trip_point_", trip, "_type"));
        if (!type.ok()) break;
        if (absl::StripAsciiWhitespace(*type) != "critical") continue;
        double crit = ReadNumber(os, absl::StrCat(base, "/trip_point_", trip, "_temp"));
        if (crit > 0 && (cpu->temperature_crit_c < 0 || crit / 1000 < cpu->temperature_crit_c)) {
          cpu->temperature_crit_c = crit / 1000;
        }
      }
    }
  }
  if (auto mons = os.ListDir("/sys/class/hwmon"); mons.ok()) {
    for (const std::string& m : *mons) {
      std::string base = "/sys/class/hwmon/" + m;
      for (int i = 1; i <= 16; ++i) {
        double t = ReadNumber(os, absl::StrCat(base, "/temp", i, "_input"));
        if (t < 0) continue;
        if (t > 0) cpu->temperature_c = std::max(cpu->temperature_c, t / 1000);
        double crit = ReadNumber(os, absl::StrCat(base, "/temp", i, "_crit"));
        if (crit > 0 && (cpu->temperature_crit_c < 0 || crit / 1000 < cpu->temperature_crit_c)) {
          cpu->temperature_crit_c = crit / 1000;
        }
      }
    }
  }
}

// cgroup v2 (/sys/fs/cgroup/cpu.stat, cpu.max) or v1 (/sys/fs/cgroup/cpu/...): throttled
// periods and the quota in CPUs.
void ReadCgroupCpu(Os& os, CpuInfo* cpu) {
  for (const char* stat : {"/sys/fs/cgroup/cpu.stat", "/sys/fs/cgroup/cpu/cpu.stat",
                           "/sys/fs/cgroup/cpu,cpuacct/cpu.stat"}) {
    auto s = os.ReadFile(stat);
    if (!s.ok()) continue;
    for (absl::string_view line : absl::StrSplit(*s, '\n')) {
      std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipWhitespace());
      if (f.size() == 2 && f[0] == "nr_throttled") cpu->cgroup_nr_throttled = IntOr(f[1]);
    }
    break;
  }
  if (auto s = os.ReadFile("/sys/fs/cgroup/cpu.max"); s.ok()) {
    std::vector<absl::string_view> f = absl::StrSplit(*s, ' ', absl::SkipWhitespace());
    if (f.size() == 2 && f[0] != "max") {
      double quota = NumOr(f[0]), period = NumOr(f[1]);
      if (quota > 0 && period > 0) cpu->cgroup_cpu_limit = quota / period;
    }
  } else {
    double quota = ReadNumber(os, "/sys/fs/cgroup/cpu/cpu.cfs_quota_us");
    double period = ReadNumber(os, "/sys/fs/cgroup/cpu/cpu.cfs_period_us");
    if (quota > 0 && period > 0) cpu->cgroup_cpu_limit = quota / period;
  }
}

}  // namespace

CpuInfo ReadCpuInfo(Os& os) {
  CpuInfo cpu;
  double max_cpuinfo_mhz = -1;
  int64_t siblings = 0, cores_per_package = 0;  // per package, /proc/cpuinfo (x86)
  std::vector<double> cpuinfo_mhz;
  if (auto text = os.ReadFile("/proc/cpuinfo"); text.ok()) {
    for (absl::string_view line : absl::StrSplit(*text, '\n')) {
      std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(line, ':');
      absl::string_view key = absl::StripAsciiWhitespace(kv.first);
      absl::string_view val = absl::StripAsciiWhitespace(kv.second);
      if (key == "model name" && cpu.model.empty()) cpu.model = std::string(val);
      if (key == "vendor_id" && cpu.vendor.empty()) cpu.vendor = std::string(val);
      if (key == "cpu family" && cpu.family == 0) cpu.family = static_cast<int>(IntOr(val, 0));
      if (key == "siblings") siblings = std::max<int64_t>(siblings, IntOr(val, 0));
      if (key == "cpu cores")
        cores_per_package = std::max<int64_t>(cores_per_package, IntOr(val, 0));
      if (key == "cpu MHz") {
        double mhz = NumOr(val);
        cpuinfo_mhz.push_back(mhz);
        max_cpuinfo_mhz = std::max(max_cpuinfo_mhz, mhz);
      }
      if ((key == "flags" || key == "Features") && !cpu.fma && !cpu.neon) {
        std::set<absl::string_view> flags = absl::StrSplit(val, ' ', absl::SkipWhitespace());
        cpu.fma = flags.count("fma") || flags.count("asimd");
        cpu.avx = flags.count("avx");
        cpu.avx2 = flags.count("avx2");
        cpu.avx512f = flags.count("avx512f");
        cpu.avx512_bf16 = flags.count("avx512_bf16");
        cpu.amx_bf16 = flags.count("amx_bf16");
        cpu.neon = flags.count("asimd");
        cpu.hypervisor = flags.count("hypervisor");
      }
      if (key == "CPU implementer" && cpu.vendor.empty()) cpu.vendor = "ARM";
    }
  }
  cpu.cpuinfo_mhz = max_cpuinfo_mhz;
  cpu.model_mhz = ModelNameMhz(cpu.model);
  cpu.smt = siblings > 0 && cores_per_package > 0 && siblings > cores_per_package;
  const std::string sys = "/sys/devices/system/cpu";
  std::vector<int> online;
  if (auto s = os.ReadFile(sys + "/online"); s.ok()) online = ParseCpuList(*s);
  if (online.empty()) {
    for (size_t i = 0; i < cpuinfo_mhz.size(); ++i) online.push_back(static_cast<int>(i));
  }
  cpu.logical_cpus = static_cast<int>(online.size());
  int max_id = online.empty() ? -1 : *std::max_element(online.begin(), online.end());
  cpu.cur_mhz.assign(max_id + 1, -1);
  cpu.max_mhz.assign(max_id + 1, -1);
  cpu.throttle_count.assign(max_id + 1, -1);
  double max_freq = -1;
  for (int id : online) {
    std::string base = absl::StrCat(sys, "/cpu", id);
    double cur = ReadNumber(os, base + "/cpufreq/scaling_cur_freq");
    double mx = ReadNumber(os, base + "/cpufreq/cpuinfo_max_freq");
    cpu.cur_mhz[id] =
        cur > 0 ? cur / 1000 : (id < static_cast<int>(cpuinfo_mhz.size()) ? cpuinfo_mhz[id] : -1);
    cpu.max_mhz[id] = mx > 0 ? mx / 1000 : -1;
    max_freq = std::max(max_freq, cpu.max_mhz[id]);
    double scaling_max = ReadNumber(os, base + "/cpufreq/scaling_max_freq");
    if (scaling_max > 0) cpu.scaling_max_mhz = std::max(cpu.scaling_max_mhz, scaling_max / 1000);
    double base_freq = ReadNumber(os, base + "/cpufreq/base_frequency");
    if (base_freq > 0) cpu.base_mhz = std::max(cpu.base_mhz, base_freq / 1000);
    // SMT from the topology when /proc/cpuinfo has no siblings (AArch64).
    if (!cpu.smt) {
      if (auto ts = os.ReadFile(base + "/topology/thread_siblings_list"); ts.ok()) {
        cpu.smt = ParseCpuList(*ts).size() > 1;
      }
    }
    double tc = ReadNumber(os, base + "/thermal_throttle/core_throttle_count");
    cpu.throttle_count[id] = tc >= 0 ? static_cast<int64_t>(tc) : -1;
  }
  cpu.cpufreq_max_mhz = max_freq;
  cpu.nominal_mhz = max_freq > 0 ? max_freq : max_cpuinfo_mhz;
  if (auto s = os.ReadFile(sys + "/cpu0/cache/index3/size"); s.ok()) {
    cpu.l3_bytes = ParseSizeWithUnit(*s);
  }
  ReadTemperatures(os, &cpu);
  if (auto mem = os.ReadFile("/proc/meminfo"); mem.ok()) {
    for (absl::string_view line : absl::StrSplit(*mem, '\n')) {
      std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipWhitespace());
      if (f.size() < 2) continue;
      if (f[0] == "MemTotal:") cpu.mem_total_bytes = IntOr(f[1]) * 1024;
      if (f[0] == "MemAvailable:") cpu.mem_available_bytes = IntOr(f[1]) * 1024;
    }
  }
  if (auto la = os.ReadFile("/proc/loadavg"); la.ok()) {
    std::vector<absl::string_view> f = absl::StrSplit(*la, ' ', absl::SkipWhitespace());
    if (!f.empty()) cpu.loadavg_1m = NumOr(f[0]);
  }
  ReadCgroupCpu(os, &cpu);
  return cpu;
}

}  // namespace trainscope::device
