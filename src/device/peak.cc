// The CPU peak of `selftest device` (and, through its report, of doctor's MFU): which clock,
// which instruction set, how many FLOP per cycle. Pure functions of CpuInfo and libtorch's
// capability string, so every figure is testable on a fake machine.
#include <algorithm>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "trainscope/core/table.h"
#include "trainscope/device/device.h"

namespace trainscope::device {
namespace {

// The loop and the OS's figure agree when within this fraction of each other.
constexpr double kClockAgreement = 0.3;

struct OsClock {
  double mhz = 0;
  const char* source = "";
};

// The OS's clock figure, the most telling first. cpuinfo_max_freq is the highest clock the
// driver reports (turbo included), capped by the policy's scaling_max_freq when that is lower;
// base_frequency is the sustained clock (intel_pstate, amd-pstate); Intel puts its rated base
// clock in the model name; last, /proc/cpuinfo "cpu MHz" (in a KVM guest without cpufreq,
// the host's TSC rate, i.e. the rated base clock; on bare metal the current clock).
OsClock OsClockFigure(const CpuInfo& cpu) {
  if (cpu.cpufreq_max_mhz > 0) {
    if (cpu.scaling_max_mhz > 0 && cpu.scaling_max_mhz < cpu.cpufreq_max_mhz) {
      return {cpu.scaling_max_mhz, "cpufreq scaling_max_freq"};
    }
    return {cpu.cpufreq_max_mhz, "cpufreq cpuinfo_max_freq"};
  }
  if (cpu.base_mhz > 0) return {cpu.base_mhz, "cpufreq base_frequency"};
  if (cpu.model_mhz > 0) return {cpu.model_mhz, "model name"};
  if (cpu.cpuinfo_mhz > 0) return {cpu.cpuinfo_mhz, "/proc/cpuinfo cpu MHz"};
  return {};
}

// Instruction-set levels, in order, so that a capability caps the CPU's best.
enum Level { kNone = 0, kSse, kAvx, kAvx2, kAvx512 };

Level CpuBest(const CpuInfo& cpu) {
  if (cpu.avx512f) return kAvx512;
  if (cpu.avx2 && cpu.fma) return kAvx2;
  if (cpu.avx) return kAvx;
  return cpu.vendor.empty() ? kNone : kSse;
}

// libtorch's names (at::get_cpu_capability: "NO AVX", "AVX2", "AVX512"; ATEN_CPU_CAPABILITY:
// "default", "avx2", "avx512"). Anything else (VSX, ZVECTOR, SVE) or "" caps nothing.
Level TorchCap(absl::string_view capability) {
  std::string c = absl::AsciiStrToLower(absl::StripAsciiWhitespace(capability));
  if (c == "avx512") return kAvx512;
  if (c == "avx2") return kAvx2;
  if (c == "default" || c == "no avx") return kSse;
  return kAvx512;
}

}  // namespace

// Clock choice. The timing loop (cpu_bench.cc) is right on an idle bare-metal core, but a
// guest's clock is virtual (a 2.1 GHz Sapphire Rapids KVM guest measured 10.97 GHz with an
// add chain; a 2.6 GHz EPYC guest measures its host's 3.7 GHz boost with the imul chain), and
// a loop far from every figure the OS states is more likely wrong than the OS. So: in a
// guest, or when the two disagree by more than 30%, the OS's figure; else the loop, which
// sees the turbo clock the cores really run at. SMT does not change a core's clock; it
// changes the number of cores that share the FMA units (physical cores are counted apart).
CpuClock ChooseCpuClock(const CpuInfo& cpu, double measured_ghz) {
  CpuClock c;
  c.measured_ghz = measured_ghz > 0 ? measured_ghz : 0;
  OsClock os = OsClockFigure(cpu);
  c.os_ghz = os.mhz / 1000;
  c.os_source = os.source;
  auto use_os = [&](std::string reason) {
    c.ghz = c.os_ghz;
    c.source = c.os_source;
    c.reason = std::move(reason);
    return c;
  };
  if (c.os_ghz <= 0) {
    c.ghz = c.measured_ghz;
    c.source = c.measured_ghz > 0 ? "timing loop" : "";
    c.reason = c.measured_ghz > 0 ? "the OS states no clock" : "no OS figure, no timing loop";
    return c;
  }
  if (c.measured_ghz <= 0) return use_os("timing loop not run");
  if (cpu.hypervisor) return use_os("VM guest: loop not trusted");
  const double ratio = c.measured_ghz / c.os_ghz;
  if (ratio > 1 + kClockAgreement || ratio < 1 - kClockAgreement) {
    return use_os(absl::StrCat("loop reads ", FormatDouble(ratio, 2), " x the OS: not trusted"));
  }
  c.ghz = c.measured_ghz;
  c.source = "timing loop";
  c.reason = absl::StrCat("within 30% of ", c.os_source, " ", FormatDouble(c.os_ghz, 2), " GHz");
  return c;
}

// FLOP per cycle per physical core = 2 (an FMA is a multiply and an add) x fp32 lanes per
// vector x FMA pipes; sources: Intel's optimisation reference manual (port tables), AMD's
// Zen 4 / Zen 5 software optimisation guides, Arm's Neoverse N1 guide.
//   avx512, Intel Xeon (Skylake-SP and later Gold/Platinum, Sapphire Rapids): 2 x 512-bit  64
//   avx512, Intel Core and Xeon Bronze/Silver (one 512-bit FMA unit)                      32
//   avx512, AMD Zen 4 (family 25): 512-bit ops issued on 2 x 256-bit pipes               32
//   avx512, AMD Zen 5 (family 26): 2 x 512-bit                                            64
//   avx2 + FMA (Haswell and later, Zen 1-3): 2 x 256-bit FMA                              32
//   avx (Sandy/Ivy Bridge): 256-bit multiply + 256-bit add, no FMA                        16
//   sse (x86-64 baseline, libtorch's "default"): 128-bit multiply + add                     8
//   neon (AArch64, Neoverse N1 class): 2 x 128-bit FMA                                     16
// bf16 (libtorch runs bf16 matmul through oneDNN): AMX-BF16 tiles 1024 per cycle (Sapphire
// Rapids: TDPBF16PS); AVX512_BF16 (VDPBF16PS, two products per fp32 lane) 2 x the fp32 figure;
// otherwise bf16 is converted and multiplied in fp32, the fp32 figure. AMX does nothing for an
// fp32 matmul. The ISA is libtorch's: the CPU's best capped by its capability (which honours
// ATEN_CPU_CAPABILITY); libtorch's BLAS (MKL, OpenBLAS) picks kernels by itself and may run
// above such a cap, so a capped peak errs low, never into a false warning.
CpuIsa CpuIsaFor(const CpuInfo& cpu, absl::string_view torch_capability) {
  CpuIsa isa;
  isa.torch_capability = std::string(absl::StripAsciiWhitespace(torch_capability));
  if (cpu.neon && !cpu.avx) {
    isa.name = "neon";
    isa.detail = "2 x 128-bit FMA";
    isa.fp32_flops_per_cycle = isa.bf16_flops_per_cycle = 16;
    return isa;
  }
  const Level level = std::min(CpuBest(cpu), TorchCap(torch_capability));
  const bool amd = cpu.vendor == "AuthenticAMD";
  switch (level) {
    case kAvx512:
      isa.name = "avx512";
      if (amd && cpu.family <= 25) {
        isa.detail = "Zen 4, 2 x 256-bit FMA";
        isa.fp32_flops_per_cycle = 32;
      } else if (!amd &&
                 (absl::StrContains(cpu.model, "Core") || absl::StrContains(cpu.model, "Silver") ||
                  absl::StrContains(cpu.model, "Bronze"))) {
        isa.detail = "1 x 512-bit FMA";
        isa.fp32_flops_per_cycle = 32;
      } else {
        isa.detail = "2 x 512-bit FMA";
        isa.fp32_flops_per_cycle = 64;
      }
      break;
    case kAvx2:
      isa.name = "avx2";
      isa.detail = "2 x 256-bit FMA";
      isa.fp32_flops_per_cycle = 32;
      break;
    case kAvx:
      isa.name = "avx";
      isa.detail = "256-bit mul + add, no FMA";
      isa.fp32_flops_per_cycle = 16;
      break;
    case kSse:
      isa.name = "sse";
      isa.detail = "128-bit mul + add";
      isa.fp32_flops_per_cycle = 8;
      break;
    case kNone:
      return isa;
  }
  isa.bf16_flops_per_cycle = isa.fp32_flops_per_cycle;
  if (level == kAvx512 && cpu.amx_bf16) {
    isa.bf16_flops_per_cycle = 1024;
    absl::StrAppend(&isa.detail, "; bf16 AMX");
  } else if (level == kAvx512 && cpu.avx512_bf16) {
    isa.bf16_flops_per_cycle = 2 * isa.fp32_flops_per_cycle;
    absl::StrAppend(&isa.detail, "; bf16 AVX512_BF16");
  }
  return isa;
}

CpuPeak EstimateCpuPeak(const CpuIsa& isa, absl::string_view dtype, int cores,
                        const CpuClock& clock) {
  CpuPeak p;
  p.cores = cores;
  p.flops_per_cycle = dtype == "bf16" ? isa.bf16_flops_per_cycle : isa.fp32_flops_per_cycle;
  p.formula = absl::StrCat(cores, " cores x ", FormatDouble(clock.ghz, 2), " GHz x ",
                           p.flops_per_cycle, " FLOP/cycle");
  if (cores > 0 && clock.ghz > 0) p.gflops = cores * clock.ghz * p.flops_per_cycle;
  return p;
}

}  // namespace trainscope::device
