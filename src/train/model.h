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

class BlockImpl : public torch::nn::Module {
 public:
  BlockImpl(const ModelConfig& c, int layers);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& causal_mask);  // (B,T,C)

 private:
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

 private:
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
