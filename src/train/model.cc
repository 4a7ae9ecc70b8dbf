// GPT model and the libtorch helpers of the trainer that need no training state.
#include "train/model.h"

#include <ATen/autocast_mode.h>
#include <torch/cuda.h>
#include <torch/version.h>

#include <chrono>
#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "trainscope/core/os.h"
#include "trainscope/train/trainer.h"

// The CUDA allocator's statistics and the device properties: only against a CUDA libtorch
// (TS_TORCH_CUDA, set by CMake when it found one). Debian's CPU-only libtorch also installs
// the c10/cuda headers, so __has_include alone cannot tell; they then need the CUDA toolkit's.
#if defined(TS_TORCH_CUDA) && __has_include(<c10/cuda/CUDACachingAllocator.h>)
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#define TS_TRAIN_CUDA_STATS 1
#endif

namespace trainscope::train {

namespace F = torch::nn::functional;

BlockImpl::BlockImpl(const ModelConfig& c, int layers) : heads_(c.heads) {
  const int64_t w = c.width;
  ln1_ = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({w})));
  qkv_ = register_module("qkv", torch::nn::Linear(w, 3 * w));
  proj_ = register_module("proj", torch::nn::Linear(w, w));
  ln2_ = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({w})));
  fc_ = register_module("fc", torch::nn::Linear(w, int64_t{c.mlp_ratio} * w));
  fc_proj_ = register_module("fc_proj", torch::nn::Linear(int64_t{c.mlp_ratio} * w, w));
  // GPT-2 initialisation: N(0, 0.02), residual projections scaled by 1/sqrt(2 L).
  torch::NoGradGuard no_grad;
  for (torch::nn::Linear* l : {&qkv_, &proj_, &fc_, &fc_proj_}) {
    (*l)->weight.normal_(0.0, 0.02);
    (*l)->bias.zero_();
  }
  const double resid_std = 0.02 / std::sqrt(2.0 * layers);
  proj_->weight.normal_(0.0, resid_std);
  fc_proj_->weight.normal_(0.0, resid_std);
}

torch::Tensor BlockImpl::forward(const torch::Tensor& x, const torch::Tensor& causal_mask) {
  const int64_t b = x.size(0), t = x.size(1), c = x.size(2);
  const int64_t d = c / heads_;
  // Attention. LayerNorm runs on fp32 input even under autocast.
  torch::Tensor h = Tap(0, ln1_(In(0, x.to(torch::kFloat))));
  torch::Tensor qkv = Tap(1, qkv_(In(1, h)));  // (B, T, 3C)
  std::vector<torch::Tensor> parts = qkv.split(c, /*dim=*/2);
  auto heads = [&](const torch::Tensor& z) { return z.view({b, t, heads_, d}).transpose(1, 2); };
  torch::Tensor q = heads(parts[0]), k = heads(parts[1]), v = heads(parts[2]);  // (B, H, T, D)
  torch::Tensor att = torch::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(double(d)));
  att = att.masked_fill(causal_mask.slice(0, 0, t).slice(1, 0, t),
                        -std::numeric_limits<float>::infinity());
  att = torch::softmax(att, -1);            // (B, H, T, T)
  torch::Tensor y = torch::matmul(att, v);  // (B, H, T, D)
  y = Tap(2, y.transpose(1, 2).contiguous().view({b, t, c}));
  torch::Tensor out = x + Tap(3, proj_(In(3, y)));
  // MLP.
  torch::Tensor f = Tap(5, fc_(In(5, Tap(4, ln2_(In(4, out.to(torch::kFloat)))))));
  torch::Tensor m = Tap(7, fc_proj_(In(7, Tap(6, F::gelu(In(6, f))))));
  return out + m;
}

GptImpl::GptImpl(const ModelConfig& c, int vocab) : config_(c), vocab_(vocab) {
  wte_ = register_module("wte", torch::nn::Embedding(vocab, c.width));
  wpe_ = register_module("wpe", torch::nn::Embedding(c.seq_len, c.width));
  blocks_ = register_module("blocks", torch::nn::ModuleList());
  for (int i = 0; i < c.layers; ++i) blocks_->push_back(Block(c, c.layers));
  ln_f_ = register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.width})));
  torch::NoGradGuard no_grad;
  wte_->weight.normal_(0.0, 0.02);
  wpe_->weight.normal_(0.0, 0.01);
  if (!c.tied_head) {
    head_ = register_module(
        "head", torch::nn::Linear(torch::nn::LinearOptions(c.width, vocab).bias(false)));
    head_->weight.normal_(0.0, 0.02);
  }
  // A buffer, so that to(device) moves it with the parameters.
  causal_mask_ =
      register_buffer("causal_mask", torch::ones({c.seq_len, c.seq_len}, torch::kBool).triu(1));
}

torch::Tensor GptImpl::forward(const torch::Tensor& tokens) {
  const int64_t t = tokens.size(1);
  torch::Tensor pos = torch::arange(t, tokens.options().dtype(torch::kLong));
  // Two statements: the taps see wte before wpe (an operator's operands have no order).
  torch::Tensor x = Tap(0, wte_(In(0, tokens)));
  x = x + Tap(1, wpe_(In(1, pos)));  // (B, T, C), fp32
  for (const auto& m : *blocks_) x = m->as<Block>()->forward(x, causal_mask_);
  const int n = static_cast<int>(blocks_->size());
  x = Tap(2 + n * kSitesPerBlock, ln_f_(In(2 + n * kSitesPerBlock, x.to(torch::kFloat))));
  x = In(3 + n * kSitesPerBlock, x);
  torch::Tensor logits = head_ ? head_(x) : F::linear(x, wte_->weight);  // (B, T, V)
  return Tap(3 + n * kSitesPerBlock, logits.to(torch::kFloat));
}

torch::Tensor GptImpl::Loss(const torch::Tensor& tokens, const torch::Tensor& targets) {
  torch::Tensor logits = forward(tokens);
  return F::cross_entropy(logits.view({-1, vocab_}), targets.view({-1}));
}

std::vector<std::pair<std::string, torch::Tensor>> GptImpl::NamedParams() const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& item : named_parameters(/*recurse=*/true)) {
    out.emplace_back(item.key(), item.value());
  }
  return out;
}

std::vector<std::string> GptImpl::SiteNames() const {
  std::vector<std::string> out = {"wte", "wpe"};
  for (size_t l = 0; l < blocks_->size(); ++l) {
    for (const char* s : kBlockSites) out.push_back("blocks." + std::to_string(l) + "." + s);
  }
  out.push_back("ln_f");
  out.push_back("head");
  return out;
}

void GptImpl::SetTap(ModelTap* tap) {
  tap_ = tap;
  for (size_t l = 0; l < blocks_->size(); ++l) {
    (*blocks_)[l]->as<Block>()->SetTap(tap, 2 + static_cast<int>(l) * kSitesPerBlock);
  }
}

bool GptImpl::Decays(const std::string& name) const {
  // Matrices of Linear layers decay; biases, LayerNorm, embeddings (and the tied head) do not.
  auto ends = [&](const std::string& s) {
    return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
  };
  if (!ends(".weight")) return false;
  return name.find("ln") == std::string::npos && name.rfind("wte", 0) != 0 &&
         name.rfind("wpe", 0) != 0;
}

// CountParams is in config.cc (libtorch-free: the memory estimate uses it).

namespace {

double MeasurePeak(const torch::Device& device, int threads, const std::string& precision,
                   double seconds) {
  at::set_num_threads(std::max(1, threads));
  torch::NoGradGuard no_grad;
  // A GPU needs a far larger matmul than a CPU to reach its peak.
  const int64_t n = device.is_cuda() ? 8192 : 512;
  auto dtype = precision == "bf16" ? torch::kBFloat16 : torch::kFloat;
  // Drawn on the device itself (a GPU's 8192^2 inputs would take seconds on the host).
  torch::Tensor a = torch::randn({n, n}, torch::device(device)).to(dtype);
  torch::Tensor b = torch::randn({n, n}, torch::device(device)).to(dtype);
  torch::Tensor c = torch::mm(a, b);  // warm-up
  SynchronizeDevice(device);
  double best = 0;
  auto start = std::chrono::steady_clock::now();
  int reps = 4;
  while (true) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) c = torch::mm(a, b);
    SynchronizeDevice(device);
    double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, 2.0 * n * n * n * reps / dt);
    if (dt < 0.05) reps *= 2;
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() >= seconds)
      break;
  }
  return best;
}

}  // namespace

double MeasureMatmulPeakFlops(int threads, const std::string& precision, double seconds,
                              const std::string& device) {
  absl::StatusOr<torch::Device> d = OpenDevice(device);
  return d.ok() ? MeasureDeviceMatmulPeakFlops(*d, threads, precision, seconds) : 0;
}

double MeasureDeviceMatmulPeakFlops(const torch::Device& device, int threads,
                                    const std::string& precision, double seconds) {
  // A square matmul large enough to reach the BLAS (cuBLAS) peak but small enough to run many
  // times within the budget; the best of several timed repetitions is the peak. libtorch
  // errors (an unsupported dtype) stay inside: the peak is then unknown, 0.
  try {
    return MeasurePeak(device, threads, precision, seconds);
  } catch (const std::exception&) {
    return 0;
  }
}

// ---------------------------------------------------------------------------------------
// Devices
// ---------------------------------------------------------------------------------------

bool BuiltWithCuda() {
#ifdef TS_TORCH_CUDA
  return true;
#else
  return false;
#endif
}

absl::StatusOr<torch::Device> OpenDevice(const std::string& device) {
  absl::StatusOr<DeviceSpec> spec = ParseDevice(device);
  if (!spec.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("train.device: ", spec.status().message()));
  }
  if (!spec->cuda) return torch::Device(torch::kCPU);
  const std::string what = absl::StrCat("train.device \"", device, "\": ");
  if (!BuiltWithCuda()) {
    return absl::InvalidArgumentError(absl::StrCat(
        what,
        "this trainscope was built against a CPU-only libtorch; build it against the venv's "
        "CUDA libtorch (scripts/setup && scripts/build) or use --device cpu"));
  }
  const size_t count = torch::cuda::device_count();
  if (count == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what,
                     "no CUDA device is visible (check nvidia-smi and CUDA_VISIBLE_DEVICES), or "
                     "use --device cpu"));
  }
  if (static_cast<size_t>(spec->index) >= count) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, "only ", count, " CUDA device(s) visible (cuda:0..cuda:", count - 1, ")"));
  }
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(spec->index));
}

std::string DeviceName(const torch::Device& device) {
  if (!device.is_cuda()) return "cpu";
#ifdef TS_TRAIN_CUDA_STATS
  if (const cudaDeviceProp* p = at::cuda::getDeviceProperties(device.index())) return p->name;
#endif
  return device.str();
}

void SynchronizeDevice(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

namespace {

// A "VmRSS:  1234 kB" line of /proc/self/status, in bytes; -1 when absent.
int64_t StatusKb(const std::string& status, absl::string_view key) {
  for (absl::string_view line : absl::StrSplit(status, '\n')) {
    if (!absl::ConsumePrefix(&line, key) || !absl::ConsumePrefix(&line, ":")) continue;
    line = absl::StripAsciiWhitespace(line);
    absl::ConsumeSuffix(&line, "kB");
    int64_t kb = 0;
    if (absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &kb)) return kb * 1024;
  }
  return -1;
}

}  // namespace

DeviceMemory ReadDeviceMemory(const torch::Device& device) {
  DeviceMemory m;
  if (device.is_cuda()) {
    m.source = "cuda_caching_allocator";
#ifdef TS_TRAIN_CUDA_STATS
    // Index 0 of each StatArray is StatType::AGGREGATE (all pools), in every libtorch since
    // 1.x; the index is spelled out because the enum's namespace moved in 2.x.
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    m.allocated_bytes = stats.allocated_bytes[0].current;
    m.reserved_bytes = stats.reserved_bytes[0].current;
    m.peak_bytes = stats.allocated_bytes[0].peak;
#endif
    return m;
  }
  m.source = "host_rss";
  absl::StatusOr<std::string> status = Os::Default()->ReadFile("/proc/self/status");
  if (status.ok()) {
    m.allocated_bytes = StatusKb(*status, "VmRSS");
    m.peak_bytes = StatusKb(*status, "VmHWM");
  }
  return m;
}

// Autocast: libtorch 2.4 replaced the per-device setters by ones taking the device type.
AutocastScope::AutocastScope(at::ScalarType dtype, const torch::Device& device)
    : enabled_(dtype != at::kFloat), cuda_(device.is_cuda()) {
  if (!enabled_) return;
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  const c10::DeviceType type = cuda_ ? c10::DeviceType::CUDA : c10::DeviceType::CPU;
  at::autocast::set_autocast_enabled(type, true);
  at::autocast::set_autocast_dtype(type, dtype);
#else
  if (cuda_) {
    at::autocast::set_enabled(true);
    at::autocast::set_autocast_gpu_dtype(dtype);
  } else {
    at::autocast::set_cpu_enabled(true);
    at::autocast::set_autocast_cpu_dtype(dtype);
  }
#endif
  at::autocast::increment_nesting();
}

AutocastScope::~AutocastScope() {
  if (!enabled_) return;
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  at::autocast::set_autocast_enabled(cuda_ ? c10::DeviceType::CUDA : c10::DeviceType::CPU, false);
#else
  if (cuda_) {
    at::autocast::set_enabled(false);
  } else {
    at::autocast::set_cpu_enabled(false);
  }
#endif
}

}  // namespace trainscope::train
