// The trainer's non-finite guard (private to the train module; libtorch). One object per run,
// used from the training thread only. It is the model's tap (model.h) and holds a hook on
// every parameter's gradient, which gives it one place for:
//   - the per-step checks: this rank's loss and its gradients before the all-reduce (each
//     gradient as backward produces it), and the weights after the optimizer step; fp32 CPU
//     tensors by one exact pass over their words (an exponent of all ones is NaN or Inf);
//   - the localisation of a flagged step: replay its micro-batches from the unchanged state
//     (the optimizer has not stepped) with probes on every module output and every parameter
//     gradient: the first module whose output is non-finite (forward), else the first
//     parameter gradient that is (backward), in execution order; a second replay tells a
//     fixed-step cause (same place again: reproducible) from a random one;
//   - fp16 emulation: libtorch 1.13 on CPU has no fp16 matmul worth using, so under
//     train.precision "fp16" each module output except the embeddings and LayerNorms is
//     rounded through half (overflow beyond 65504 becomes inf, small values flush to zero,
//     and so do the gradients flowing back through the same casts); the loss scaler then
//     works on exactly those overflows and underflows;
//   - the numeric --inject faults (inject.h), which also fire during replays.
#ifndef TRAINSCOPE_SRC_TRAIN_NONFINITE_H_
#define TRAINSCOPE_SRC_TRAIN_NONFINITE_H_

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "train/model.h"
#include "trainscope/train/anomaly.h"
#include "trainscope/train/inject.h"

namespace trainscope::train {

struct NonfiniteGuardOptions {
  int rank = 0;
  bool checks = true;             // the per-step checks (anomaly.nonfinite_checks)
  bool fp16 = false;              // round module outputs through half (see above)
  std::vector<Injection> inject;  // every rank's; the numeric ones for this rank are used
};

class NonfiniteGuard : public ModelTap {
 public:
  // Installs itself as `model`'s tap and hooks `named` (the model's parameters, in
  // registration order). Both must outlive the guard, which removes its hooks and tap.
  NonfiniteGuard(Gpt model, std::vector<std::pair<std::string, torch::Tensor>> named,
                 NonfiniteGuardOptions options);
  ~NonfiniteGuard() override;
  NonfiniteGuard(const NonfiniteGuard&) = delete;
  NonfiniteGuard& operator=(const NonfiniteGuard&) = delete;

  // Start of step `step` (before any forward): resets the flags, applies inf_weight; returns
  // the factor for the step's learning rate (lr_spike; 1 otherwise).
  double BeginStep(int step);
  // Keeps a micro-batch of this step for a replay (references; no copy).
  void KeepBatch(const torch::Tensor& inputs, const torch::Tensor& targets,
                 const std::vector<int64_t>& sample_ids);
  // This rank's loss of a micro-batch was not finite.
  void FlagLoss() { loss_flag_ = true; }
  bool loss_flag() const { return loss_flag_; }
  // A local gradient of this step (before the all-reduce) was not finite.
  bool grad_flag() const;
  // After an optimizer step that went through: the history ClassifyNonfinite uses.
  void EndStep(double lr, double grad_norm);
  // After the optimizer step: every weight finite? (one pass over the parameters)
  bool WeightsFinite() const;

  // Localises this rank's non-finite step (call on the ranks that flagged it): replays it
  // twice through `loss_fn` (inputs, targets -> loss) with `grad_accum` micro-batches per
  // step, keeping what it found for Encode. Leaves the gradients undefined.
  using LossFn = std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&)>;
  void Replay(const LossFn& loss_fn, int grad_accum);
  // The optimizer phase: the first parameter (registration order) whose values are not
  // finite, kept for Encode (no replay: the state before the update is gone).
  void LocaliseWeights();
  // lr (this step's), the previous step's and the recent grad norms into the evidence.
  void FillHistory(double lr, NonfiniteEvidence* e) const;

  // Rank-to-rank exchange of what a rank found, as floats (the comm seam's fp32 all-reduce:
  // each rank fills its own slot, zeros elsewhere; single-rank runs decode their own).
  static constexpr int kMaxSamples = 64;
  static constexpr int kSlotFloats = 10 + 2 * kMaxSamples;
  void Encode(float* slot) const;  // slot[0] = 1 marks a rank that found something
  // Fills phase, module, parameter, the replay flags, max_abs_activation and sample_ids.
  void Decode(const float* slot, NonfiniteEvidence* e) const;

  // fp16: each gradient through half (an fp16 gradient's range), divided by `scale`; returns
  // true when one was not finite (an overflow), and sets *zero_fraction to the share of
  // exactly-zero elements of the Linear weights' gradients (the underflow signal).
  bool UnscaleFp16Grads(double scale, double* zero_fraction);

  torch::Tensor Out(int site, torch::Tensor y) override;

  // Time spent in the per-step checks so far (gradient sums, weight sums), for the overhead
  // figure (docs/PERFORMANCE.md).
  double check_ms() const { return check_ns_ / 1e6; }

 private:
  struct Found {
    NonfinitePhase phase = NonfinitePhase::kForward;
    int site = -1;      // forward: the first non-finite module output
    int param = -1;     // backward / optimizer: the first non-finite gradient / weight; forward:
                        // a non-finite weight of the module
    bool loss = false;  // loss phase: finite logits, non-finite loss
    bool any() const { return site >= 0 || param >= 0 || loss; }
    bool operator==(const Found& o) const {
      return phase == o.phase && site == o.site && param == o.param && loss == o.loss;
    }
  };
  Found ReplayOnce(const LossFn& loss_fn, int grad_accum);
  void OnGrad(int index, const torch::Tensor& grad);
  std::string ModuleOfParam(int index) const;
  // The first parameter of module `module` (named "module.x") holding a non-finite value; -1.
  int NonfiniteParamOf(const std::string& module) const;

  // Constant after construction.
  Gpt model_;
  std::vector<std::pair<std::string, torch::Tensor>> named_;
  NonfiniteGuardOptions options_;
  std::vector<std::string> sites_;
  std::vector<bool> fp32_site_;  // embeddings and LayerNorms stay fp32 under fp16
  std::vector<unsigned> hooks_;  // hook handles, one per parameter
  std::vector<bool> linear_weight_;

  // Per step.
  int step_ = 0;
  int nan_site_ = -1;       // forward NaN injected at this site's output
  int nan_grad_site_ = -1;  // backward NaN injected at this site's output gradient
  bool loss_flag_ = false;
  mutable int64_t check_ns_ = 0;
  bool grad_bad_ = false;  // a local gradient of this step held a NaN/Inf
  std::vector<torch::Tensor> inputs_, targets_;
  std::vector<int64_t> sample_ids_;

  // Replay probes, and what this rank found.
  bool probing_ = false;
  Found found_;  // in the replay running
  Found local_;  // the result kept for Encode
  bool has_local_ = false, replayed_ = false, reproducible_ = false;
  double local_max_abs_ = 0;
  double prev_max_abs_ = 0;  // largest finite |x| of the outputs before the first bad one
  double site_max_abs_ = 0;  // largest finite |x| at the first bad site (before fp16 rounding)

  // History.
  double last_lr_ = 0;
  std::vector<std::pair<int, double>> lrs_;  // (step, lr) of the last 3 steps that went through
  std::vector<double> grad_norms_;           // last 20 finite global grad norms
};

}  // namespace trainscope::train

#endif  // TRAINSCOPE_SRC_TRAIN_NONFINITE_H_
