// Training anomalies, the libtorch-free half (docs/metrics.md, "Loss spikes", "Non-finite
// localisation", "fp16 loss scaling"):
//   - SpikeDetector: is this step's loss a spike (robust window rule or Megatron's 10x rule)?
//   - the non-finite record's JSON and one-sentence forms, from what the trainer's replay of
//     a non-finite step found and ClassifyNonfinite's verdict (diagnose/nonfinite.h).
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
#include "trainscope/diagnose/nonfinite.h"

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

// The evidence, its phase and the classification rules live in diagnose/nonfinite.h (one
// copy, shared with the Python tracer); the trainer uses them under these names and
// classifies with NonfiniteWording::Trainer() (fixes name its config keys: optim.lr, ...).
using diagnose::ClassifyNonfinite;
using diagnose::FindLrJump;
using diagnose::GradNormJump;
using diagnose::NonfiniteEvidence;
using diagnose::NonfinitePhase;
using diagnose::NonfinitePhaseName;
using diagnose::NonfiniteVerdict;

// The metrics record / `train --json` object: {"type": "nonfinite", "step", "rank", "ranks",
// "phase", "module", "parameter", "class", "reproducible" (null when not replayed), "fix",
// "samples", "max_abs_activation", "lr", "grad_norms"}.
nlohmann::json NonfiniteToJson(const NonfiniteEvidence& e, const NonfiniteVerdict& v);
// One sentence naming step, rank, module and phase, then the class and fix.
std::string NonfiniteSentence(const NonfiniteEvidence& e, const NonfiniteVerdict& v);

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
