// GPT-style decoder LM (private to the train module; includes libtorch).
//   tokens (B, T) -> wte + wpe -> L x [x + attn(ln1(x)); x + mlp(ln2(x))] -> ln_f -> head
// Pre-LN blocks, causal multi-head self-attention, GELU MLP, tied or untied head.
// Mixed precision: under bf16 autocast the matmuls run in bf16 while parameters (the
// master weights), embeddings, LayerNorm inputs and the loss stay fp32.
#ifndef TRAINSCOPE_SRC_TRAIN_MODEL_H_
#define TRAINSCOPE_SRC_TRAIN_MODEL_H_

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "trainscope/train/config.h"

namespace trainscope::train {

// A hook on every module output, in execution order (nonfinite.cc: the non-finite checks'
// replay probes, fp16 emulation, --inject faults; dump_tap.cc: --dump). Out() gets site
// `site` (an index into GptImpl::SiteNames()) and returns the tensor the model continues
// with; In() gets the site's input before it runs (every site but the attention core) and
// returns what the site gets. Called on the training thread during forward.
class ModelTap {
 public:
  virtual ~ModelTap() = default;
  virtual torch::Tensor Out(int site, torch::Tensor y) = 0;
  virtual torch::Tensor In(int site, torch::Tensor x) {
    (void)site;
    return x;
  }
};

// Sites per block, in execution order: blocks.<L>.<name>.
inline constexpr const char* kBlockSites[] = {"ln1", "qkv", "attn", "proj",
                                              "ln2", "fc",  "gelu", "fc_proj"};
inline constexpr int kSitesPerBlock = 8;
inline constexpr int kBlockSiteFc = 5;      // blocks.<L>.fc
inline constexpr int kBlockSiteFcProj = 7;  // blocks.<L>.fc_proj

class BlockImpl : public torch::nn::Module {
 public:
  BlockImpl(const ModelConfig& c, int layers);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& causal_mask);  // (B,T,C)
  void SetTap(ModelTap* tap, int first_site) {
    tap_ = tap;
    first_site_ = first_site;
  }

 private:
  torch::Tensor Tap(int k, torch::Tensor y) {
    return tap_ != nullptr ? tap_->Out(first_site_ + k, std::move(y)) : y;
  }
  torch::Tensor In(int k, torch::Tensor x) {
    return tap_ != nullptr ? tap_->In(first_site_ + k, std::move(x)) : x;
  }
  ModelTap* tap_ = nullptr;  // not owned
  int first_site_ = 0;
  int heads_;
  torch::nn::LayerNorm ln1_{nullptr}, ln2_{nullptr};
  torch::nn::Linear qkv_{nullptr}, proj_{nullptr}, fc_{nullptr}, fc_proj_{nullptr};
};
TORCH_MODULE(Block);

class GptImpl : public torch::nn::Module {
 public:
  GptImpl(const ModelConfig& c, int vocab);
  // tokens (B, T) int64 -> logits (B, T, V) fp32.
  torch::Tensor forward(const torch::Tensor& tokens);
  // Mean next-token cross-entropy of `tokens` against `targets` (both (B, T)).
  torch::Tensor Loss(const torch::Tensor& tokens, const torch::Tensor& targets);

  // Parameters in registration order with their names; the parameters that get weight
  // decay (matrices of Linear layers) are flagged.
  std::vector<std::pair<std::string, torch::Tensor>> NamedParams() const;
  bool Decays(const std::string& name) const;

  // Module output sites in execution order: "wte", "wpe", "blocks.0.ln1" ... (kBlockSites
  // per block), "ln_f", "head". Site of blocks.L.<kBlockSites[k]>: 2 + L * kSitesPerBlock + k.
  std::vector<std::string> SiteNames() const;
  // Routes every module output through `tap` (not owned, must outlive its use; null: none).
  void SetTap(ModelTap* tap);

 private:
  torch::Tensor Tap(int site, torch::Tensor y) {
    return tap_ != nullptr ? tap_->Out(site, std::move(y)) : y;
  }
  torch::Tensor In(int site, torch::Tensor x) {
    return tap_ != nullptr ? tap_->In(site, std::move(x)) : x;
  }
  ModelTap* tap_ = nullptr;
  ModelConfig config_;
  int vocab_;
  torch::nn::Embedding wte_{nullptr}, wpe_{nullptr};
  torch::nn::ModuleList blocks_{nullptr};
  torch::nn::LayerNorm ln_f_{nullptr};
  torch::nn::Linear head_{nullptr};  // null when tied to wte
  torch::Tensor causal_mask_;        // (T, T) bool, true above the diagonal (a buffer)
};
TORCH_MODULE(Gpt);

// ---- Devices (train.device) ----
// Only device-agnostic libtorch calls, so this compiles against any libtorch; the CUDA
// allocator's statistics and the device's name need a CUDA libtorch's headers and are
// compiled only when CMake found one (TS_TORCH_CUDA; src/train/CMakeLists.txt).

// True when this trainscope was built against a libtorch with CUDA.
bool BuiltWithCuda();
// The torch::Device for a train.device string (config.h ParseDevice). InvalidArgument with a
// one-line reason when it cannot be used: a CUDA device with a CPU-only libtorch, with no
// visible GPU, or an index past torch::cuda::device_count().
absl::StatusOr<torch::Device> OpenDevice(const std::string& device);
// "cpu", or the GPU's name as the driver reports it ("NVIDIA H200"; "cuda:N" when unknown).
std::string DeviceName(const torch::Device& device);
// Waits for the device's queued work (no-op on the CPU): phase timers stop after it.
void SynchronizeDevice(const torch::Device& device);

// Memory of the training process on its device. CUDA: the caching allocator's statistics
// (allocated = live tensors, reserved = held from the driver, peak = peak allocated); CPU:
// the process's resident set (VmRSS, and VmHWM as the peak; reserved unknown). -1 = unknown.
struct DeviceMemory {
  std::string source;  // "cuda_caching_allocator" | "host_rss"
  int64_t allocated_bytes = -1;
  int64_t reserved_bytes = -1;
  int64_t peak_bytes = -1;
};
DeviceMemory ReadDeviceMemory(const torch::Device& device);

// Autocast for its lifetime on `device`'s type (CPU or CUDA): matmuls in `dtype` (bf16, or
// fp16 on CUDA, where train.precision fp16 is real half-precision autocast with the loss
// scaler; on the CPU fp16 is emulated by the non-finite guard instead), fp32 master weights
// untouched. dtype kFloat (fp32 training): does nothing.
class AutocastScope {
 public:
  AutocastScope(at::ScalarType dtype, const torch::Device& device);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  bool enabled_;
  bool cuda_;
};

// Peak FLOP/s of a square matmul on `device` in `precision` with `threads` CPU threads,
// measured for about `seconds` (0 on a libtorch error).
double MeasureDeviceMatmulPeakFlops(const torch::Device& device, int threads,
                                    const std::string& precision, double seconds);

}  // namespace trainscope::train

#endif  // TRAINSCOPE_SRC_TRAIN_MODEL_H_
