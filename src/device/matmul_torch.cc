// libtorch matmul probe. Kept to this single TU: including <torch/torch.h> costs ~15 s of
// compile time, so only the smallest ATen header is used.
#include "device/matmul_torch.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/Version.h>
#include <torch/version.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <fstream>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace trainscope::device {
namespace {

double SteadySeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

// Timing: one warm-up product (first-call allocations, oneDNN kernel generation), then
// back-to-back products in windows of ~50 ms; the best window counts, so that another
// process taking the core for a moment lowers no result. FLOPs = 2 n^3 per product.
absl::StatusOr<MatmulResult> TorchMatmul(const std::string& dtype, int n, int threads,
                                         double seconds) {
  at::ScalarType st;
  if (dtype == "fp32") {
    st = at::kFloat;
  } else if (dtype == "bf16") {
    st = at::kBFloat16;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("matmul: unknown dtype ", dtype));
  }
  try {
    if (threads > 0) at::set_num_threads(threads);
    at::manual_seed(1234);
    at::Tensor a = at::randn({n, n}, at::TensorOptions().dtype(st));
    at::Tensor b = at::randn({n, n}, at::TensorOptions().dtype(st));
    at::Tensor c = at::empty({n, n}, at::TensorOptions().dtype(st));
    at::matmul_out(c, a, b);
    MatmulResult r;
    r.n = n;
    const double flops = 2.0 * n * n * n;
    double end = SteadySeconds() + std::max(seconds, 0.01);
    double best = 0;
    do {
      double t0 = SteadySeconds();
      long k = 0;
      do {
        at::matmul_out(c, a, b);
        ++k;
      } while (SteadySeconds() - t0 < 0.05);
      double dt = SteadySeconds() - t0;
      r.iterations += k;
      r.seconds += dt;
      best = std::max(best, flops * k / dt / 1e9);
    } while (SteadySeconds() < end);
    // A product of random matrices is finite; NaN or inf means a broken kernel.
    if (!c.isfinite().all().item<bool>()) {
      return absl::InternalError(absl::StrCat("matmul ", dtype, " produced non-finite values"));
    }
    r.gflops = best;
    return r;
  } catch (const std::exception& e) {
    std::string what = e.what();
    return absl::InternalError(
        absl::StrCat("libtorch matmul ", dtype, ": ", what.substr(0, what.find('\n'))));
  }
}

std::string TorchVersion() { return TORCH_VERSION; }

std::string TorchCpuCapability() {
  std::string c = absl::AsciiStrToLower(at::get_cpu_capability());
  return c == "no avx" ? "default" : c;
}

std::string LoadedMathLibraries() {
  std::ifstream maps("/proc/self/maps");
  std::set<std::string> libs;
  std::string line;
  while (std::getline(maps, line)) {
    size_t slash = line.rfind('/');
    if (slash == std::string::npos) continue;
    // Full path: Debian's alternatives put OpenBLAS and the reference BLAS under the same
    // file name (libblas.so.3), in different directories.
    std::string path = line.substr(line.find('/'));
    std::string name = line.substr(slash + 1);
    for (const char* key : {"blas", "mkl", "dnnl", "blis"}) {
      if (absl::StrContains(name, key)) libs.insert(path);
    }
  }
  return absl::StrJoin(libs, ", ");
}

}  // namespace trainscope::device
