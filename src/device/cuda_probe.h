// NVIDIA micro-benchmarks through cuBLAS: bf16 GEMM throughput against the card's nominal
// dense bf16 peak, and a triad (cublasSgeam: C = A + s * B) against a device-to-device
// memcpy. Compiled with the CUDA headers only when CMake finds a CUDA toolkit
// (TS_HAVE_CUDA); libcudart and libcublas are loaded with dlopen() at run time, so the
// binary runs unchanged on machines without a driver. Private to src/device.
#ifndef TRAINSCOPE_SRC_DEVICE_CUDA_PROBE_H_
#define TRAINSCOPE_SRC_DEVICE_CUDA_PROBE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace trainscope::device {

struct GpuBench {
  int index = 0;       // CUDA device ordinal (after CUDA_VISIBLE_DEVICES)
  std::string bus_id;  // cudaDeviceGetPCIBusId, e.g. "0000:18:00.0"
  std::string error;   // non-empty: this device's benchmark failed
  double matmul_bf16_tflops = 0;
  int matmul_n = 0;
  double triad_gbps = 0;   // 12 bytes per float element (read A, read B, write C)
  double memcpy_gbps = 0;  // 8 bytes per float element (read + write)
};

// Runs both benchmarks on every visible CUDA device, one after the other, each timed for
// about `seconds`. Unimplemented when built without a CUDA toolkit; Unavailable when the
// CUDA runtime or cuBLAS cannot be loaded or no device is visible.
absl::StatusOr<std::vector<GpuBench>> RunCudaBenchmarks(bool quick, double seconds);

// Nominal dense bf16 peak in TFLOP/s for a device name ("NVIDIA H100 80GB HBM3"), from
// the vendors' data sheets; 0 when the model is not in the table.
double NominalBf16Tflops(const std::string& name);

}  // namespace trainscope::device

#endif  // TRAINSCOPE_SRC_DEVICE_CUDA_PROBE_H_
