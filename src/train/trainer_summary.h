// The Trainer's summary without libtorch (private to the train module): the training loop's
// running sums, the TrainResult figures computed from them, and the files a finished run
// writes (weights.rank<R>.json, the metrics file's "summary" record, train/summary.json).
// Trainer::Summarize (trainer.cc) adds what needs the tensors: device memory and the weights'
// checksums.
#ifndef TRAINSCOPE_SRC_TRAIN_TRAINER_SUMMARY_H_
#define TRAINSCOPE_SRC_TRAIN_TRAINER_SUMMARY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "trainscope/train/metrics.h"
#include "trainscope/train/trainer.h"

namespace trainscope::train {

// Sums over the timed steps of a run: every step of this process but its first (warm-up),
// or that first step when it is the only one.
struct LoopSums {
  PhaseTimes phases;
  double step_ms = 0;
  double tokens = 0;
  double comm_ms = 0;
  int timed_steps = 0;
  std::vector<double> step_ms_each;  // per timed step, in order
  // Time spent in observability code (norms, RSS, metrics lines), every step.
  double obs_ms = 0;

  // Adds one timed step's record.
  void AddTimed(const StepRecord& rec);
};

// Fills r's figures from the loop: observability_fraction, loss_start and loss_end (from
// r->losses), the mean phases, mean and median step time, comm time and its overlap,
// tokens/s; then the known peak FLOP/s and MFU (r->params, r->device_name) and the data
// loader's verdict. `seconds` is the loop's wall time (r->seconds).
void SummarizeLoop(const LoopSums& sums, double seconds, const TrainConfig& config, int world_size,
                   TrainResult* r);

// One parameter's checksum line of weights.rank<R>.json.
struct ParamDigest {
  std::string name;
  int64_t numel = 0;
  uint64_t xxh3_64 = 0;  // of its bytes
  double norm = 0;       // L2 norm
};

// A finished run's files: weights.rank<R>.json (options.write_weights; `params` in name
// order, r.weights_checksum over all of them), the "summary" record of `metrics` (may be
// null) and, on rank 0, <run_dir>/train/summary.json. Returns the first write error.
absl::Status WriteRunFiles(const TrainResult& r, const std::vector<ParamDigest>& params,
                           const TrainOptions& options, MetricsWriter* metrics);

}  // namespace trainscope::train

#endif  // TRAINSCOPE_SRC_TRAIN_TRAINER_SUMMARY_H_
