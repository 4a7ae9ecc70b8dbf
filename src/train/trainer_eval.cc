// Trainer::Evaluate: the validation loss after a step (config "eval"; docs/metrics.md,
// "Validation loss"). The held-out corpus and its batches are validation.h's; this is the
// libtorch part.
#include <chrono>
#include <cmath>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "train/trainer_impl.h"
#include "train/validation.h"
#include "trainscope/core/status.h"

namespace trainscope::train {
namespace {

// Eval mode and no tap for its lifetime, then back to training as they were, also when a
// libtorch exception leaves the evaluation. The tap (the non-finite guard: its checks, fp16
// emulation and --inject faults) is about training steps, so an evaluation runs without it:
// under train.precision fp16 on the CPU the validation loss is computed in fp32.
class EvalModeScope {
 public:
  EvalModeScope(Gpt& model, ModelTap* tap) : model_(model), tap_(tap) {
    model_->eval();
    model_->SetTap(nullptr);
  }
  ~EvalModeScope() {
    model_->SetTap(tap_);
    model_->train();
  }
  EvalModeScope(const EvalModeScope&) = delete;
  EvalModeScope& operator=(const EvalModeScope&) = delete;

 private:
  Gpt& model_;
  ModelTap* const tap_;
};

}  // namespace

absl::Status Trainer::MaybeEvaluate(StepContext* s) {
  if (val_.num_sequences == 0 ||
      !EvalDue(config_.eval, s->step, config_.train.steps, s->stop_for_time)) {
    return absl::OkStatus();
  }
  const auto t0 = TrainClock::now();
  TS_ASSIGN_OR_RETURN(s->val_loss, Evaluate());
  s->eval_ms = std::chrono::duration<double, std::milli>(TrainClock::now() - t0).count();
  s->has_val = true;
  ++result_.evaluations;
  result_.val_loss_last = s->val_loss;
  if (result_.evaluations == 1 || s->val_loss < result_.val_loss_min) {
    result_.val_loss_min = s->val_loss;
    result_.val_loss_min_step = s->step;
  }
  return absl::OkStatus();
}

absl::StatusOr<double> Trainer::Evaluate() {
  // Sum of per-sequence losses and the number of sequences, this rank's batches: every
  // sequence has seq_len targets, so the mean over sequences is the mean over tokens.
  double sum = 0;
  int64_t rows = 0;
  {
    torch::NoGradGuard no_grad;
    EvalModeScope mode(model_, guard_.get());
    const std::vector<EvalBatch> mine =
        EvalBatchesForRank(val_.num_sequences, config_.eval.batches, config_.train.micro_batch,
                           world_.rank, world_.world_size);
    for (const EvalBatch& eb : mine) {
      Batch b = BuildEvalBatch(val_, eb);
      auto upload = [this](std::vector<int64_t>& v, int64_t r, int64_t c) {
        torch::Tensor t = torch::from_blob(v.data(), {r, c}, torch::kLong);
        return device_.is_cpu() ? t.clone() : t.to(device_);
      };
      torch::Tensor inputs = upload(b.inputs, b.rows, b.cols);    // (B, T)
      torch::Tensor targets = upload(b.targets, b.rows, b.cols);  // (B, T)
      AutocastScope autocast(autocast_dtype_, device_);
      sum += model_->Loss(inputs, targets).item<double>() * eb.rows;
      rows += eb.rows;
    }
  }
#ifdef TS_TRAIN_WITH_COMM
  if (seam_) {
    float v[2] = {static_cast<float>(sum), static_cast<float>(rows)};
    TS_RETURN_IF_ERROR(seam_->AllReduce(
        v, 2, absl::StrCat("step ", st_->steps_done.load() + 1, " eval all_reduce")));
    sum = v[0];
    rows = static_cast<int64_t>(std::llround(v[1]));
  }
#endif
  if (rows == 0) return std::numeric_limits<double>::quiet_NaN();
  return sum / static_cast<double>(rows);
}

}  // namespace trainscope::train
