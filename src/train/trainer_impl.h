// The Trainer class behind Train() (private to the train module; includes libtorch, so only
// trainer.cc, trainer_checkpoint.cc and trainer_eval.cc include it). One object per Train()
// call, used from the training thread only. Its libtorch-free parts are in trainer_world.h
// (World, RunState, stopping, setup decisions) and trainer_summary.h (the loop's sums, the
// result's figures and files).
//
//   Run()  = Init() -> [Restore()] -> for each step: RunStep() -> MaybeCheckpoint()
//            -> Summarize()
//   RunStep(step) = ForwardBackward -> ReduceGradients -> OptimizerStep -> [Evaluate]
//                   -> RecordStep
//
// The seams other features hook into:
//   - step:       StepContext carries what one step produced (losses, grad norm, phases, the
//                 sample indices) from phase to phase; a check that needs "the step's
//                 gradients before the all-reduce" goes between ForwardBackward and
//                 ReduceGradients, one that needs the averaged ones before OptimizerStep.
//   - checkpoint: SaveCheckpoint(step, anomaly, extra) snapshots the state after `step`
//                 (model, AdamW state, scheduler, every rank's RNG state and data position,
//                 every rank's gradient-compressor state: GradSync::SnapshotCompressor);
//                 Restore(path) puts it back. Collective in data-parallel runs.
//   - summarize:  Summarize() turns the loop's sums into the TrainResult and the final files.
#ifndef TRAINSCOPE_SRC_TRAIN_TRAINER_IMPL_H_
#define TRAINSCOPE_SRC_TRAIN_TRAINER_IMPL_H_

#include <torch/torch.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "train/checkpointer.h"
#include "train/dump_tap.h"
#include "train/model.h"
#include "train/nonfinite.h"
#include "train/trainer_summary.h"
#include "train/trainer_world.h"
#include "trainscope/core/os.h"
#include "trainscope/tokenizer/tokenizer.h"
#include "trainscope/train/anomaly.h"
#include "trainscope/train/trainer.h"
#ifdef TS_TRAIN_WITH_COMM
#include "train/comm_seam.h"
#include "train/ddp.h"
#endif

namespace trainscope::train {

// What one optimizer step produced, handed from phase to phase.
struct StepContext {
  int step = 0;
  TrainClock::time_point start;
  PhaseTimes phases;
  double lr = 0;
  double loss = 0;         // mean over micro-batches (over ranks after ReduceGradients)
  double grad_norm = 0;    // global L2 norm before clipping
  double comm_ms = 0;      // gradient all-reduce time on the progress thread
  int64_t comm_bytes = 0;  // gradient collectives' payload (GradSync::Finish)
  double compress_ms = 0;  // compressing the gradients (comm.compression)
  bool stop_for_time = false;
  std::vector<int64_t> sequence_ids;  // this rank's samples (packed sequence ids), in order
  bool norms_now = false;             // per-layer norms recorded this step
  std::vector<LayerNorms> layer_norms;
  double obs_ms = 0;     // time in observability code
  bool skipped = false;  // fp16: a gradient overflow skipped the optimizer step
  bool has_val = false;  // an evaluation followed this step (config "eval")
  double val_loss = 0;
  double eval_ms = 0;
};

class Trainer {
 public:
  // `config`, `options` and `st` must outlive the Trainer.
  Trainer(const TrainConfig& config, const TrainOptions& options, RunState* st);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // The whole run; the errors of Train() (trainer.h). Exceptions escape to Train().
  absl::StatusOr<TrainResult> Run();

 private:
  // ---- setup ----
  // World, config, model, optimizer, comm, resume, metrics file, loader.
  absl::Status Init();
  // The job (world_, the comm watchdog) and the --inject faults it allows.
  absl::Status JoinJob();
  // The validated config, device, tokenizer, memory check, corpus and validation corpus.
  absl::Status LoadInputs();
  absl::Status BuildModelAndOptimizer();
  // Data-parallel runs: the comm seam and GradSync, the parameter broadcast, the restored
  // gradient compressor's state.
  absl::Status StartGradSync();
  // The non-finite guard, the spike rule and the fp16 loss scaler.
  void SetUpAnomalies();
  absl::Status OpenMetrics();

  // ---- step ----
  // One optimizer step: the phases below, then the step record. *stop set when the run ends
  // after this step (train.max_seconds on any rank).
  absl::Status RunStep(int step, bool* stop);
  // Micro-batches: data -> forward -> backward (buckets all-reduce from hooks meanwhile).
  absl::Status ForwardBackward(StepContext* s);
  // Waits for the gradient all-reduces; mean loss and the stop decision over ranks.
  absl::Status ReduceGradients(StepContext* s);
  // Clip (grad norm), per-layer norms when due, AdamW step, zero_grad.
  absl::Status OptimizerStep(StepContext* s);
  // Step record into the metrics file, sums for the summary, on_step.
  absl::Status RecordStep(StepContext* s);
  // ---- validation (trainer_eval.cc) ----
  // When an evaluation is due after s->step (EvalDue; config "eval"): Evaluate, then
  // s->has_val, val_loss, eval_ms and the summary's eval figures.
  absl::Status MaybeEvaluate(StepContext* s);
  // Validation loss of the current weights on the held-out corpus val_: eval mode, no
  // gradients, the same EvalBatchesForRank sequences every time; in a data-parallel run each
  // rank computes its share of the batches and one all-reduce gives every rank the mean.
  // Collective: every rank calls it after the same steps.
  absl::StatusOr<double> Evaluate();

  // ---- checkpoint ----
  // Periodic save after `step` when checkpoint.every_steps divides it.
  absl::Status MaybeCheckpoint(int step);
  // Saves the state after `step` (call between steps, every rank at the same step: the
  // ranks' small states are gathered to rank 0, which writes). Periodic saves go through
  // the background writer when checkpoint.async; anomaly ones are written before this
  // returns, flagged in meta.json (never pruned), `extra` under meta.json "extra".
  // Returns the checkpoint's path on rank 0, "" on the others.
  absl::StatusOr<std::string> SaveCheckpoint(int step, bool anomaly, const nlohmann::json& extra);
  // Every rank's RankState(step) serialised, in rank order, on every rank (an all-gather in
  // data-parallel runs; collective).
  absl::StatusOr<std::vector<std::string>> GatherRankStates(int step);
  // Loads model, optimizer, step, this rank's RNG state and data position from `path`.
  absl::Status Restore(const std::string& path);
  // This rank's small state (RNG, data position) as JSON, and its inverse.
  nlohmann::json RankState(int step) const;
  absl::Status SetRankState(const nlohmann::json& j, const std::string& file);
  std::string CheckpointDir() const;
  std::string ConfigHash() const;

  // ---- anomalies (nonfinite.h, anomaly.h) ----
  // Some rank flagged step s->step (`ranks`, ascending): the flagged ranks replay it (the
  // optimizer phase needs no replay), the findings are exchanged so every rank holds the
  // same record; writes the "nonfinite" record and an anomaly checkpoint, and returns
  // Aborted with the one-sentence verdict (the record as payload kNonfinitePayload).
  absl::Status OnNonfinite(StepContext* s, const std::vector<int>& ranks, bool optimizer_phase);
  // fp16: unscale (through half) and let the loss scaler decide; s->skipped on an overflow.
  absl::Status Fp16Unscale(StepContext* s);
  // The loss-spike rule on the step's mean loss: "spike" record, warning, anomaly checkpoint.
  absl::Status CheckSpike(const StepContext& s);

  // ---- summarize ----
  // Waits for a save in flight, fills result_ (SummarizeLoop, device memory, weights
  // checksum), writes the run's files (WriteRunFiles); a final barrier in data-parallel runs.
  absl::StatusOr<TrainResult> Summarize();

  // Constant after construction.
  const TrainConfig& config_in_;
  const TrainOptions& options_;
  RunState* st_;

  // Set up by Init().
  World world_;
  TrainConfig config_;  // validated copy
  std::unique_ptr<tokenizer::Tokenizer> tok_;
  PackedCorpus corpus_;
  PackedCorpus val_;  // the validation corpus (config "eval"); no sequences without it
  int vocab_ = 0;
  int threads_ = 1;
  bool bf16_ = false;
  at::ScalarType autocast_dtype_ = at::kFloat;  // bf16, fp16 on CUDA, or kFloat (none)
  torch::Device device_{torch::kCPU};           // train.device (model.h OpenDevice)
  std::string device_name_ = "cpu";             // DeviceName(device_)
  Gpt model_{nullptr};
  std::vector<std::pair<std::string, torch::Tensor>> named_;
  std::vector<torch::Tensor> all_params_;
  std::unique_ptr<torch::optim::AdamW> optimizer_;
#ifdef TS_TRAIN_WITH_COMM
  std::unique_ptr<CommSeam> seam_;
  std::unique_ptr<GradSync> sync_;
#endif
  std::string train_dir_;
  std::unique_ptr<BatchLoader> loader_;
  std::unique_ptr<Checkpointer> checkpointer_;
  int start_step_ = 0;  // the step restored from a checkpoint; 0 on a fresh start
  // The restored checkpoint's meta.json extra.compression (null when none): the gradient
  // compressor's state is restored once GradSync exists.
  nlohmann::json resumed_compression_;
  // Anomalies: the non-finite guard (checks, fp16 emulation, numeric --inject faults; null
  // when none of these is on), the spike rule, and the fp16 loss scaler (fp16 only).
  std::unique_ptr<NonfiniteGuard> guard_;
  // --dump (train/dump.h): wraps the guard's tap during the dumped steps; declared after the
  // guard, so destroyed before it.
  std::unique_ptr<DumpTap> dump_;
  std::unique_ptr<SpikeDetector> spike_;
  std::unique_ptr<LossScaler> scaler_;
  bool fp16_ = false;
  bool underflow_warned_ = false;

  // The loop's running sums.
  TrainResult result_;
  TrainClock::time_point loop_start_;
  LoopSums sums_;
};

}  // namespace trainscope::train

#endif  // TRAINSCOPE_SRC_TRAIN_TRAINER_IMPL_H_
