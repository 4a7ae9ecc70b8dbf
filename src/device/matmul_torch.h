// The one libtorch translation unit of src/device: matmul throughput through libtorch.
// Private to src/device; libtorch types never leave matmul_torch.cc.
#ifndef TRAINSCOPE_SRC_DEVICE_MATMUL_TORCH_H_
#define TRAINSCOPE_SRC_DEVICE_MATMUL_TORCH_H_

#include <string>

#include "absl/status/statusor.h"

namespace trainscope::device {

struct MatmulResult {
  double gflops = 0;  // 2 n^3 x iterations / seconds, best window
  int n = 0;          // square matrices (n, n) x (n, n)
  long iterations = 0;
  double seconds = 0;
};

// Multiplies two random (n, n) CPU tensors of `dtype` ("fp32" or "bf16") repeatedly for
// about `seconds` with `threads` intra-op threads (0: leave libtorch's setting) and
// returns the throughput. Runs on the calling thread (pin it first for per-core
// figures). Internal error when libtorch throws; InvalidArgument for an unknown dtype.
absl::StatusOr<MatmulResult> TorchMatmul(const std::string& dtype, int n, int threads,
                                         double seconds);

// libtorch's version ("1.13.1") and the BLAS / oneDNN libraries mapped into this process
// after a matmul (from /proc/self/maps), e.g. "libblas.so.3, libdnnl.so.2"; "" unknown.
std::string TorchVersion();
// libtorch's CPU capability as it dispatches its kernels ("avx512", "avx2", "default" on
// x86-64; "sve256", ... elsewhere), lower case; it honours ATEN_CPU_CAPABILITY.
std::string TorchCpuCapability();
std::string LoadedMathLibraries();

}  // namespace trainscope::device

#endif  // TRAINSCOPE_SRC_DEVICE_MATMUL_TORCH_H_
