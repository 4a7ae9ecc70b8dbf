// GPT-style decoder LM (private to the train module; includes libtorch).
//   tokens (B, T) -> wte + wpe -> L x [x + attn(ln1(x)); x + mlp(ln2(x))] -> ln_f -> head
// Pre-LN blocks, causal multi-head self-attention, GELU MLP, tied or untied head.
// Mixed precision: under bf16 autocast the matmuls run in bf16 while parameters (the
// master weights), embeddings, LayerNorm inputs and the loss stay fp32.
#ifndef TRAINSCOPE_SRC_TRAIN_MODEL_H_
#define TRAINSCOPE_SRC_TRAIN_MODEL_H_

#include <torch/torch.h>

#include <string>
#include <utility>
#include <vector>

#include "trainscope/train/config.h"

namespace trainscope::train {

// A hook on every module output, in execution order (nonfinite.cc: the non-finite checks'
// replay probes, fp16 emulation, --inject faults). Out() gets site `site` (an index into
// GptImpl::SiteNames()) and returns the tensor the model continues with. Called on the
// training thread during forward.
class ModelTap {
 public:
  virtual ~ModelTap() = default;
  virtual torch::Tensor Out(int site, torch::Tensor y) = 0;
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
  ModelTap* tap_ = nullptr;
  ModelConfig config_;
  int vocab_;
  torch::nn::Embedding wte_{nullptr}, wpe_{nullptr};
  torch::nn::ModuleList blocks_{nullptr};
  torch::nn::LayerNorm ln_f_{nullptr};
  torch::nn::Linear head_{nullptr};  // null when tied to wte
  torch::Tensor causal_mask_;        // (T, T) bool, true above the diagonal
};
TORCH_MODULE(Gpt);

}  // namespace trainscope::train

#endif  // TRAINSCOPE_SRC_TRAIN_MODEL_H_
