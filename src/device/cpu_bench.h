// CPU micro-benchmarks without libtorch: effective clock, STREAM triad and memcpy
// bandwidth, and thread pinning. Private to src/device.
#ifndef TRAINSCOPE_SRC_DEVICE_CPU_BENCH_H_
#define TRAINSCOPE_SRC_DEVICE_CPU_BENCH_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace trainscope::device {

// CPUs this process may run on (sched_getaffinity), sorted.
std::vector<int> AllowedCpus();

// Pins the calling thread to one CPU; false when the kernel refuses.
bool PinCurrentThread(int cpu);
// Restores the calling thread's affinity to `cpus`.
void PinCurrentThreadTo(const std::vector<int>& cpus);

// Effective clock of the calling thread's core in GHz, measured by timing a chain of
// dependent integer adds (one per cycle on every x86-64 and AArch64 core) for about
// `seconds`. 0 when the architecture has no measurement.
double MeasureClockGhz(double seconds);

struct BandwidthResult {
  double triad_gbps = 0;   // best of the repetitions, 24 bytes per element (STREAM)
  double memcpy_gbps = 0;  // best of the repetitions, 16 bytes per element (read + write)
  int64_t array_bytes = 0;
  int threads = 0;
};

// STREAM triad a[i] = b[i] + s * c[i] and memcpy(a, b) over arrays of `array_bytes`
// doubles, split across one thread pinned per CPU of `cpus`, each timed for about
// `seconds`. ResourceExhausted when the arrays cannot be allocated.
absl::StatusOr<BandwidthResult> MeasureBandwidth(const std::vector<int>& cpus, int64_t array_bytes,
                                                 double seconds);

}  // namespace trainscope::device

#endif  // TRAINSCOPE_SRC_DEVICE_CPU_BENCH_H_
