// Training anomalies, the libtorch-free half (docs/metrics.md, "Loss spikes", "Non-finite
// localisation", "fp16 loss scaling"):
//   - SpikeDetector: is this step's loss a spike (robust window rule or Megatron's 10x rule)?
//   - ClassifyNonfinite: from what the trainer's replay of a non-finite step found, the
//     likely cause and its fix; NonfiniteRecord's JSON and one-sentence forms.
//   - LossScaler: the dynamic loss scale of fp16 training (grow after a run of clean steps,
//     back off and skip the step on an overflow).
// The trainer (trainer.cc, nonfinite.cc) gathers the evidence; everything here is plain
// arithmetic on it, unit-tested without libtorch. None of these classes is thread-safe: the
// training thread owns them.
#ifndef TRAINSCOPE_TRAIN_ANOMALY_H_
#define TRAINSCOPE_TRAIN_ANOMALY_H_

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "nlohmann/json_fwd.hpp"

namespace trainscope::train {

// ---- Loss spikes ----

struct SpikeOptions {
  // "mad": loss > median + k x 1.4826 x MAD of the last `window` step losses (1.4826 x MAD
  //        estimates the standard deviation of normal noise; with k = 7 this is OLMo 2's
  //        "7 sigma" spike, made robust to the outliers it looks for). The sigma estimate is
  //        floored at 1% of |median| so a flat curve does not flag every wiggle. No verdict
  //        before `min_samples` losses. Spikes are not added to the window.
  // "megatron": Megatron-LM's is_unexpectedly_large: the first `min_samples` losses only set
  //        a running max of |loss|; afterwards a loss >= factor x that max is a spike.
  // "off": never a spike.
  std::string rule = "mad";
  int window = 100;
  int min_samples = 20;
  double k = 7;
  double factor = 10;
};
// InvalidArgument naming the bad field ("anomaly.spike_rule", ...).
absl::Status ValidateSpikeOptions(const SpikeOptions& o);

struct SpikeVerdict {
  bool spike = false;
  double threshold = 0;  // the loss above which this step would be (or was) a spike; 0 = none yet
  double median = 0;     // mad: the window's median; megatron: the frozen max
  double sigma = 0;      // mad: 1.4826 x MAD (floored); megatron: 0
  int samples = 0;       // losses the verdict was based on
};

class SpikeDetector {
 public:
  explicit SpikeDetector(SpikeOptions options) : options_(std::move(options)) {}
  // Judges `loss` against the history, then (unless it is a spike, or not finite) adds it.
  // Non-finite losses are never spikes: the non-finite check handles them.
  SpikeVerdict Observe(double loss);
  const SpikeOptions& options() const { return options_; }

 private:
  SpikeOptions options_;
  std::deque<double> window_;  // mad: the last `window` non-spike losses
  int seen_ = 0;               // megatron: losses seen
  double max_abs_ = 0;         // megatron: max |loss| over the first min_samples
};

// ---- Non-finite localisation ----

// The absl::Status payload (type URL) under which Train() returns the "nonfinite" record's
// JSON text with its Aborted status (the CLI prints it under "nonfinite" in --json).
inline constexpr char kNonfinitePayload[] = "trainscope/train/nonfinite";

enum class NonfinitePhase { kForward, kBackward, kLoss, kOptimizer };
const char* NonfinitePhaseName(NonfinitePhase p);  // "forward", "backward", "loss", "optimizer"

// What the trainer found about a step whose loss, gradients or updated weights were not
// finite (nonfinite.cc fills it in from the step's replays).
struct NonfiniteEvidence {
  int step = 0;
  int rank = 0;            // the rank whose local values first went non-finite (lowest)
  std::vector<int> ranks;  // every rank that flagged this step
  NonfinitePhase phase = NonfinitePhase::kForward;
  std::string module;              // "blocks.1.fc"; "" when the replay did not reproduce it
  std::string parameter;           // backward / optimizer: the first parameter hit; forward: a
                                   // non-finite parameter of the module, if any
  bool replayed = false;           // the step was replayed (false for the optimizer phase)
  bool reproducible = false;       // both replays turned non-finite at the same place
  bool embedding_output = false;   // the first non-finite output was the input embeddings
  bool weights_nonfinite = false;  // the module's parameters were already non-finite
  bool fp16 = false;               // train.precision fp16
  double max_abs_activation = 0;   // largest finite |x| at the module's input/output (replay)
  double lr = 0;                   // this step's learning rate
  double prev_lr = 0;              // the previous step's (0 at step 1)
  // The largest step-to-step LR ratio over this step and the two before it, and the step it
  // happened at (a jump shows one or two steps later, once the update reaches the weights).
  double lr_jump = 0;
  int lr_jump_step = 0;
  std::vector<double> grad_norms;   // recent finite global grad norms, oldest first
  std::vector<int64_t> sample_ids;  // the step's samples on `rank` (packed sequence ids)
};

struct NonfiniteVerdict {
  // "bad_data", "fp16_overflow", "exploding_gradients", "lr_too_high", "nonfinite_weight",
  // "operator" (a specific operation turns finite input non-finite, reproducibly),
  // "transient" (not reproducible with the same state and batch).
  std::string cls;
  std::string fix;  // one sentence: what to change
};
// The rules, first match wins: not reproducible -> transient; weights already non-finite
// (before an optimizer step) -> nonfinite_weight; forward at the input embeddings -> bad_data;
// fp16 and |activation| beyond 65504 -> fp16_overflow; an LR jump >= 5x from one step to the
// next within the last three steps (lr_jump) -> lr_too_high; grad norm >= 10x the median of
// the recent ones -> exploding_gradients; fp32 activations >= 1e10 before the overflow (the
// weights diverged) -> lr_too_high; optimizer phase -> lr_too_high; loss phase or else
// operator.
NonfiniteVerdict ClassifyNonfinite(const NonfiniteEvidence& e);

// The metrics record / `train --json` object: {"type": "nonfinite", "step", "rank", "ranks",
// "phase", "module", "parameter", "class", "reproducible" (null when not replayed), "fix",
// "samples", "max_abs_activation", "lr", "grad_norms"}.
nlohmann::json NonfiniteToJson(const NonfiniteEvidence& e, const NonfiniteVerdict& v);
// One sentence naming step, rank, module and phase, then the class and fix.
std::string NonfiniteSentence(const NonfiniteEvidence& e, const NonfiniteVerdict& v);

// The grad-norm trend rule on its own: the last norm over the median of the ones before it
// (0 when fewer than 3 norms).
double GradNormJump(const std::vector<double>& norms);

// ---- fp16 dynamic loss scaling ----

struct LossScalerOptions {
  // Defaults as PyTorch's GradScaler (pytorch_nvidia.md 5.5): 2^16, x2 every 2000 clean
  // steps, x0.5 on an overflow, no hysteresis. Megatron: 2^32, 1000, hysteresis 2, min 1.
  double initial_scale = 65536;
  double growth_factor = 2;
  double backoff_factor = 0.5;
  int growth_interval = 2000;
  // Overflows tolerated before backing off (1 = back off on every overflow). Refilled after
  // growth_interval clean steps, as Megatron's DynamicGradScaler.
  int hysteresis = 1;
  double min_scale = 1;
};
// InvalidArgument naming the bad field ("fp16.initial_scale", ...).
absl::Status ValidateLossScalerOptions(const LossScalerOptions& o);

class LossScaler {
 public:
  explicit LossScaler(LossScalerOptions options);
  double scale() const { return scale_; }
  // After the step's gradients were unscaled and checked: `overflow` = some gradient was
  // inf/NaN. Returns true when the optimizer step must be skipped (an overflow); the scale
  // backs off (when hysteresis is used up) or grows after growth_interval clean steps.
  bool Update(bool overflow);
  int64_t skipped_steps() const { return skipped_; }
  int64_t backoffs() const { return backoffs_; }
  int64_t growths() const { return growths_; }
  // True when the scale sits at min_scale and the last step still overflowed: scaling cannot
  // help any more (the trainer reports it as a non-finite gradient).
  bool stuck_at_min() const { return stuck_; }

 private:
  LossScalerOptions options_;
  double scale_;
  int clean_ = 0;  // clean steps since the last overflow or growth
  int hysteresis_left_;
  int64_t skipped_ = 0, backoffs_ = 0, growths_ = 0;
  bool stuck_ = false;
};

// Share of gradient elements that are exactly zero (fp16 underflow signal) above which the
// trainer warns that the initial loss scale is too small. Measured on Linear weights only
// (in fp32 their gradients are practically never exactly 0; embedding rows of tokens absent
// from the batch are).
inline constexpr double kUnderflowWarnFraction = 0.05;

}  // namespace trainscope::train

#endif  // TRAINSCOPE_TRAIN_ANOMALY_H_
