// The cause of a non-finite (NaN/Inf) training step, from the evidence a NaN tracer gathered
// (docs/metrics.md, "Loss spikes and non-finite localisation"): the one copy of the
// classification rules, shared by the reference trainer (train/nonfinite.cc gathers the
// evidence, train/anomaly.h writes the record) and the Python tracer of `import trainscope`
// (python/trainscope/nonfinite.py, through trainscope._core.classify_nonfinite).
// Pure functions on plain values: no libtorch, no I/O; thread-safe.
#ifndef TRAINSCOPE_DIAGNOSE_NONFINITE_H_
#define TRAINSCOPE_DIAGNOSE_NONFINITE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "trainscope/core/finding.h"

namespace trainscope::diagnose {

// Thresholds of the rules (ClassifyNonfinite).
inline constexpr double kFp16Max = 65504;    // largest finite fp16 value
inline constexpr double kLrJump = 5;         // step-to-step LR ratio that is a jump, not a schedule
inline constexpr double kGradNormJump = 10;  // last grad norm over the recent median
// fp32 activations this large are no single operation's overflow: the weights diverged.
inline constexpr double kDivergedActivation = 1e10;

enum class NonfinitePhase { kForward, kBackward, kLoss, kOptimizer };
const char* NonfinitePhaseName(NonfinitePhase p);  // "forward", "backward", "loss", "optimizer"
// The inverse of NonfinitePhaseName; InvalidArgument naming `name` for anything else.
absl::StatusOr<NonfinitePhase> ParseNonfinitePhase(std::string_view name);

// What a tracer found about a step whose loss, gradients or updated weights were not finite.
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
  bool input_nonfinite = false;    // the model's input (the batch itself) was non-finite
  bool weights_nonfinite = false;  // the module's parameters were already non-finite
  bool fp16 = false;               // the model computes in fp16
  double max_abs_activation = 0;   // largest finite |x| at the module's input/output (replay)
  double lr = 0;                   // this step's learning rate
  double prev_lr = 0;              // the previous step's (0 at step 1)
  // The largest step-to-step LR ratio over this step and the two before it, and the step it
  // happened at (a jump shows one or two steps later, once the update reaches the weights).
  // FindLrJump computes both from the LR history.
  double lr_jump = 0;
  int lr_jump_step = 0;
  std::vector<double> grad_norms;   // recent global grad norms, oldest first (non-finite
                                    // ones are ignored)
  std::vector<int64_t> sample_ids;  // the step's samples on `rank` (packed sequence ids)
};

struct NonfiniteVerdict {
  // "bad_data", "fp16_overflow", "exploding_gradients", "lr_too_high", "nonfinite_weight",
  // "operator" (a specific operation turns finite input non-finite, reproducibly),
  // "transient" (not reproducible with the same state and batch).
  std::string cls;
  // What is wrong and what to change: id "nonfinite.<cls>", an error; title NonfiniteTitle,
  // evidence NonfiniteEvidenceText; fix one sentence: what to change (in the wording's
  // names); where the module ("" when unknown), rank the evidence's rank.
  Finding finding;
};

// How a fix names the settings it tells the user to change: the reference trainer's config
// keys, or plain words for a user's own training loop (the Python tracer). Only the wording
// differs; the class never does.
struct NonfiniteWording {
  std::string lr;             // "optim.lr" | "the learning rate"
  std::string warmup;         // "optim.warmup_steps" | "the warm-up"
  std::string eps;            // "optim.eps" | "the optimizer's eps"
  std::string grad_clip;      // "optim.grad_clip" | "" (the fix says "clip harder" alone)
  std::string precision;      // "train.precision" | "" (the fix says "train in bf16" alone)
  std::string output_finite;  // "the logits are finite" | "the model's output is finite"

  static NonfiniteWording Trainer();
  static NonfiniteWording UserLoop();
};

// The rules, first match wins: not reproducible -> transient; weights already non-finite
// (before an optimizer step) -> nonfinite_weight; forward at the input embeddings -> bad_data;
// fp16 and |activation| beyond kFp16Max -> fp16_overflow; an LR jump >= kLrJump from one step
// to the next within the last three steps (lr_jump) -> lr_too_high; grad norm >=
// kGradNormJump x the median of the recent ones -> exploding_gradients; fp32 activations >=
// kDivergedActivation before the overflow (the weights diverged) -> lr_too_high; optimizer
// phase -> lr_too_high; loss phase or else operator.
NonfiniteVerdict ClassifyNonfinite(const NonfiniteEvidence& e,
                                   const NonfiniteWording& wording = NonfiniteWording::Trainer());

// What turned non-finite, where: "non-finite values at step 7 on rank 1: the backward
// gradient of module blocks.1.fc (parameter blocks.1.fc.bias) turned non-finite".
std::string NonfiniteTitle(const NonfiniteEvidence& e);
// The phase and what the replay showed: "phase backward, reproducible" (or "not replayed",
// "not reproducible").
std::string NonfiniteEvidenceText(const NonfiniteEvidence& e);

// The grad-norm trend rule on its own: the last finite norm over the median of the finite ones
// before it (0 when fewer than 3 finite norms, or when that median is not positive).
double GradNormJump(const std::vector<double>& norms);

struct LrJump {
  double ratio = 0;  // 0 when no pair has a positive earlier LR
  int step = 0;      // the step whose LR is `ratio` x the previous one's
};
// The largest step-to-step LR ratio among the last three entries of `history` ((step, lr),
// oldest first, ending with the non-finite step's own); pairs whose earlier LR is not
// positive are skipped. For NonfiniteEvidence::lr_jump / lr_jump_step.
LrJump FindLrJump(const std::vector<std::pair<int, double>>& history);

}  // namespace trainscope::diagnose

#endif  // TRAINSCOPE_DIAGNOSE_NONFINITE_H_
