// The library side of a `trainscope train` invocation around Train(), so that the CLI only
// parses flags, calls these and prints (and the Python binding can do the same): the
// batch-size probe's options, the worker sweep's values, choice and report, a finished run's
// JSON and text, a failed run's diagnosis. libtorch-free; no function here writes to the
// terminal: the caller prints what they return. Thread-compatible (no shared state).
#ifndef TRAINSCOPE_TRAIN_TRAIN_RUN_H_
#define TRAINSCOPE_TRAIN_TRAIN_RUN_H_

#include <cstddef>
#include <exception>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json_fwd.hpp"
#include "trainscope/core/finding.h"
#include "trainscope/train/metrics.h"
#include "trainscope/train/probe.h"
#include "trainscope/train/trainer.h"

namespace trainscope::train {

// The run directory when none is given: $TRAINSCOPE_RUN_DIR when set and not empty, else
// run_dir::DefaultRunDir("train"): runs/train-<UTC %Y%m%d-%H%M%S>-<pid> (relative to the
// working directory), as doctor and launch name theirs. InvalidArgument for a rank of a job
// of several processes (run_dir::CurrentJobId() not empty: torchrun, srun, mpirun) with
// neither: each rank would name a directory of its own (`trainscope launch` sets
// TRAINSCOPE_RUN_DIR for its ranks).
absl::StatusOr<std::string> DefaultRunDir();

// ---- --probe-batch ----
struct ProbeRequest {
  int steps = 5;               // steps per candidate
  double memory_limit_gb = 0;  // GB = 1e9 bytes; 0: detect (ProbeOptions::memory_limit_bytes)
  int ranks = 1;               // data-parallel ranks of the real run
  int global_batch = 0;        // 0: the config's
};
// The probe's options: the first 2 steps of each candidate are warm-up (1 under 4 steps),
// the candidates run `binary` in <run_dir>/train/probe. on_progress is left empty.
ProbeOptions ProbeOptionsFor(const ProbeRequest& request, const std::string& binary,
                             const std::string& run_dir);
// ProbeReportToJson with the config file and the run directory.
nlohmann::json ProbeRunJson(const ProbeReport& report, const std::string& config_path,
                            const std::string& run_dir);

// ---- --sweep-workers ----
// "0,1,2,4" (empty items skipped). InvalidArgument for a value that is not 0..64
// ("--sweep-values: \"x\" is not 0..64").
absl::StatusOr<std::vector<int>> ParseSweepValues(const std::string& text);
// The row to recommend: the fastest by tokens/s, a later row winning only by more than 2%
// (noise). `rows` must not be empty.
size_t BestSweepRow(const std::vector<WorkerSweepRow>& rows);
// {"sweep": [{num_workers, step_ms, data_wait_fraction, tokens_per_s}...],
//  "best_num_workers"}. `rows` must not be empty.
nlohmann::json SweepToJson(const std::vector<WorkerSweepRow>& rows);
// The table and the "best: data.num_workers = N (...)" line; `steps` per value. `rows` must
// not be empty.
std::string RenderSweep(const std::vector<WorkerSweepRow>& rows, int steps);

// ---- A finished run ----
// Train()'s --json: TrainResultToJson plus run_dir, config and this process's peak RSS
// (peak_rss_bytes, what wait4 reports; the batch-size probe reads it from its child runs).
nlohmann::json TrainRunJson(const TrainResult& r, const std::string& run_dir,
                            const std::string& config_path);
// Rank 0's text: counts, losses, tokens/s, validation, the phase table, the loader's
// verdict, corpus problems, where the files are, the weights checksum. The other ranks'
// is one line: "train: rank R done, N steps, weights xxh3_64 X".
std::string RenderTrainResult(const TrainResult& r, const std::string& run_dir);
// The progress line of step record `s` of a `total_steps` run ("step 5/20  loss ..."), or ""
// when the step is not shown: every log_every-th step (none when log_every <= 0), the first,
// the last, and every step an evaluation followed.
std::string StepProgressLine(const StepRecord& s, int total_steps, int log_every);

// ---- A failed run ----
// For a std::terminate handler: the exception `e` (may be null) escaped a thread the trainer
// does not own (gloo's network thread); DumpOnFatalError with "an engine thread threw:
// <what>" (or "an exception escaped an engine thread"). Returns DumpOnFatalError's message.
std::string DumpOnFatalException(std::exception_ptr e);
// diagnose's findings on the metrics a failed run left in <run_dir>/train: on rank 0 of the
// launcher's job only (RANK, SLURM_PROCID, ...; any rank when unknown), not for a run
// stopped by a signal (Cancelled), none when the folder does not exist or diagnose fails.
std::vector<Finding> DiagnoseFailedRun(const absl::Status& status, const std::string& run_dir);
// --json of a run stopped at a non-finite step: {"error", "run_dir", "nonfinite": the
// localisation record (kNonfinitePayload; null when unreadable), "findings"}. Null when
// `status` carries no such record.
nlohmann::json FailedRunJson(const absl::Status& status, const std::string& run_dir,
                             const std::vector<Finding>& findings);
// The findings above info, for stderr: "diagnose (<run_dir>):" then "  <severity>: <title>
// (<id>)" and "    fix: <fix>" lines; "" when there are none.
std::string RenderFailureFindings(const std::vector<Finding>& findings, const std::string& run_dir);

}  // namespace trainscope::train

#endif  // TRAINSCOPE_TRAIN_TRAIN_RUN_H_
