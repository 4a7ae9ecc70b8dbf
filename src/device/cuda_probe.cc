#include "device/cuda_probe.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

#ifdef TS_HAVE_CUDA
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#endif

namespace trainscope::device {

// Dense (no sparsity) bf16 tensor-core peaks from NVIDIA's data sheets. More specific
// names first: "H20" is a prefix of "H200", "A10" of "A100", "L4" of "L40".
double NominalBf16Tflops(const std::string& name) {
  static const std::pair<const char*, double> kTable[] = {
      {"GH200", 989}, {"H200 NVL", 835}, {"H200", 989}, {"H100 PCIe", 756}, {"H100 NVL", 835},
      {"H100", 989},  {"H800", 989},     {"H20", 148},  {"B200", 2250},     {"B100", 1750},
      {"A100", 312},  {"A800", 312},     {"L40S", 362}, {"L40", 181},       {"L4", 121},
      {"A10G", 70},   {"A10", 125},      {"A30", 165},  {"A40", 150},       {"RTX 4090", 165},
  };
  for (const auto& [key, tflops] : kTable) {
    if (absl::StrContains(name, key)) return tflops;
  }
  return 0;
}

#ifndef TS_HAVE_CUDA

absl::StatusOr<std::vector<GpuBench>> RunCudaBenchmarks(bool, double) {
  return absl::UnimplementedError("built without a CUDA toolkit: no cuBLAS probe");
}

#else

namespace {

// The entry points we use, typed from the CUDA headers, resolved with dlsym so that
// nothing links against libcudart / libcublas.
struct Api {
  decltype(&cudaGetDeviceCount) GetDeviceCount = nullptr;
  decltype(&cudaSetDevice) SetDevice = nullptr;
  decltype(&cudaDeviceGetAttribute) DeviceGetAttribute = nullptr;
  decltype(&cudaMalloc) Malloc = nullptr;
  decltype(&cudaFree) Free = nullptr;
  decltype(&cudaMemset) Memset = nullptr;
  decltype(&cudaMemcpy) Memcpy = nullptr;
  decltype(&cudaDeviceSynchronize) Synchronize = nullptr;
  decltype(&cudaGetErrorString) GetErrorString = nullptr;
  decltype(&cudaDeviceGetPCIBusId) GetPciBusId = nullptr;
  decltype(&cublasCreate_v2) BlasCreate = nullptr;
  decltype(&cublasDestroy_v2) BlasDestroy = nullptr;
  // cublasGemmEx is overloaded in C++ (an inline wrapper for old callers): spell the C one.
  cublasStatus_t (*GemmEx)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                           const void*, const void*, cudaDataType, int, const void*, cudaDataType,
                           int, const void*, void*, cudaDataType, int, cublasComputeType_t,
                           cublasGemmAlgo_t) = nullptr;
  decltype(&cublasSgeam) Sgeam = nullptr;
};

void* OpenFirst(std::initializer_list<const char*> names) {
  for (const char* n : names) {
    if (void* h = dlopen(n, RTLD_NOW | RTLD_LOCAL)) return h;
  }
  return nullptr;
}

absl::StatusOr<Api> LoadApi() {
  void* rt = OpenFirst({"libcudart.so", "libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0"});
  if (!rt) return absl::UnavailableError("CUDA runtime (libcudart.so) not found");
  void* blas = OpenFirst({"libcublas.so", "libcublas.so.13", "libcublas.so.12", "libcublas.so.11"});
  if (!blas) return absl::UnavailableError("cuBLAS (libcublas.so) not found");
  Api api;
  bool ok = true;
  auto get = [&](void* lib, const char* sym, auto* fn) {
    *fn = reinterpret_cast<std::remove_pointer_t<decltype(fn)>>(dlsym(lib, sym));
    if (*fn == nullptr) ok = false;
  };
  get(rt, "cudaGetDeviceCount", &api.GetDeviceCount);
  get(rt, "cudaSetDevice", &api.SetDevice);
  get(rt, "cudaDeviceGetAttribute", &api.DeviceGetAttribute);
  get(rt, "cudaMalloc", &api.Malloc);
  get(rt, "cudaFree", &api.Free);
  get(rt, "cudaMemset", &api.Memset);
  get(rt, "cudaMemcpy", &api.Memcpy);
  get(rt, "cudaDeviceSynchronize", &api.Synchronize);
  get(rt, "cudaGetErrorString", &api.GetErrorString);
  get(rt, "cudaDeviceGetPCIBusId", &api.GetPciBusId);
  get(blas, "cublasCreate_v2", &api.BlasCreate);
  get(blas, "cublasDestroy_v2", &api.BlasDestroy);
  get(blas, "cublasGemmEx", &api.GemmEx);
  get(blas, "cublasSgeam", &api.Sgeam);
  if (!ok) return absl::UnavailableError("CUDA runtime / cuBLAS lacks an expected symbol");
  return api;
}

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Times `op` (which enqueues work) in batches of `batch` followed by a synchronize, for
// about `seconds`; returns the best batch's seconds per op, or < 0 on a CUDA error.
template <typename Op>
double BestPerOp(const Api& api, Op op, int batch, double seconds) {
  if (!op() || api.Synchronize() != cudaSuccess) return -1;  // warm-up
  double best = 1e30, end = Now() + seconds;
  do {
    double t0 = Now();
    for (int i = 0; i < batch; ++i)
      if (!op()) return -1;
    if (api.Synchronize() != cudaSuccess) return -1;
    best = std::min(best, (Now() - t0) / batch);
  } while (Now() < end);
  return best;
}

// One device: bf16 GEMM (n, n) x (n, n) with fp32 accumulation, FLOPs = 2 n^3; then
// 3 float arrays of `elems` for the triad (C = A + s B through cublasSgeam, 12 bytes per
// element) and the device-to-device memcpy (8 bytes per element).
GpuBench BenchOne(const Api& api, int dev, bool quick, double seconds) {
  GpuBench r;
  r.index = dev;
  // The PCI bus id ties the CUDA ordinal to nvidia-smi's row (their orders can differ).
  char bus[32] = {0};
  if (api.SetDevice(dev) != cudaSuccess || api.GetPciBusId(bus, sizeof(bus), dev) != cudaSuccess) {
    r.error = "cannot select the device";
    return r;
  }
  r.bus_id = bus;
  cublasHandle_t h = nullptr;
  if (api.BlasCreate(&h) != CUBLAS_STATUS_SUCCESS) {
    r.error = "cublasCreate failed";
    return r;
  }
  const int n = quick ? 4096 : 8192;
  const size_t mat_bytes = size_t{2} * n * n;
  void *a = nullptr, *b = nullptr, *c = nullptr;
  if (api.Malloc(&a, mat_bytes) == cudaSuccess && api.Malloc(&b, mat_bytes) == cudaSuccess &&
      api.Malloc(&c, mat_bytes) == cudaSuccess) {
    // 0x3c3c is the bf16 0.0115: small non-zero values, so the tensor cores do real work.
    api.Memset(a, 0x3c, mat_bytes);
    api.Memset(b, 0x3c, mat_bytes);
    const float alpha = 1, beta = 0;
    double t = BestPerOp(
        api,
        [&] {
          return api.GemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a, CUDA_R_16BF, n, b,
                            CUDA_R_16BF, n, &beta, c, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS;
        },
        quick ? 5 : 10, seconds);
    if (t > 0) {
      r.matmul_n = n;
      r.matmul_bf16_tflops = 2.0 * n * n * n / t / 1e12;
    } else {
      r.error = "cublasGemmEx bf16 failed";
    }
  } else {
    r.error = "cannot allocate the GEMM matrices";
  }
  for (void* p : {a, b, c})
    if (p) api.Free(p);
  a = b = c = nullptr;
  const size_t elems = static_cast<size_t>(quick ? 32 : 64) << 20;  // 128 / 256 MiB per array
  if (r.error.empty() && api.Malloc(&a, elems * 4) == cudaSuccess &&
      api.Malloc(&b, elems * 4) == cudaSuccess && api.Malloc(&c, elems * 4) == cudaSuccess) {
    api.Memset(a, 0, elems * 4);
    api.Memset(b, 0, elems * 4);
    const float one = 1, s = 3;
    const int m = static_cast<int>(elems);
    double t_triad = BestPerOp(
        api,
        [&] {
          return api.Sgeam(h, CUBLAS_OP_N, CUBLAS_OP_N, m, 1, &one, static_cast<float*>(a), m, &s,
                           static_cast<float*>(b), m, static_cast<float*>(c),
                           m) == CUBLAS_STATUS_SUCCESS;
        },
        10, seconds / 2);
    double t_copy = BestPerOp(
        api, [&] { return api.Memcpy(c, a, elems * 4, cudaMemcpyDeviceToDevice) == cudaSuccess; },
        10, seconds / 2);
    if (t_triad > 0) r.triad_gbps = 12.0 * elems / t_triad / 1e9;
    if (t_copy > 0) r.memcpy_gbps = 8.0 * elems / t_copy / 1e9;
    if (t_triad <= 0 || t_copy <= 0) r.error = "triad / memcpy failed";
  } else if (r.error.empty()) {
    r.error = "cannot allocate the triad arrays";
  }
  for (void* p : {a, b, c})
    if (p) api.Free(p);
  api.BlasDestroy(h);
  return r;
}

}  // namespace

absl::StatusOr<std::vector<GpuBench>> RunCudaBenchmarks(bool quick, double seconds) {
  absl::StatusOr<Api> api = LoadApi();
  if (!api.ok()) return api.status();
  int count = 0;
  cudaError_t e = api->GetDeviceCount(&count);
  if (e != cudaSuccess) {
    return absl::UnavailableError(absl::StrCat("cudaGetDeviceCount: ", api->GetErrorString(e)));
  }
  if (count == 0) return absl::UnavailableError("no CUDA device visible");
  std::vector<GpuBench> out;
  for (int d = 0; d < count; ++d) out.push_back(BenchOne(*api, d, quick, seconds));
  return out;
}

#endif  // TS_HAVE_CUDA

}  // namespace trainscope::device
