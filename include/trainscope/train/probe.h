// Batch-size probe (`trainscope train --probe-batch`, issue 19): find the micro-batch by
// running a few steps at each candidate and watching memory and throughput, growing from a
// safe guess and stopping before the memory limit, never by jumping to the device's limit.
// Then recommend the micro-batch and the gradient accumulation (at most 16: past that the
// per-token cost rises) for the configured global batch.
//
// Two layers, so the decisions are testable without a trainer:
//   RunProbe    the pure loop: candidates, memory prediction, stop rules, recommendation;
//               it asks a CandidateRunner for each measurement (tests pass a synthetic one).
//   ProbeBatch  the real thing: each candidate is a child `trainscope train` process (a copy
//               of the config with the candidate's micro-batch, a few steps, no checkpoints,
//               in its own folder), measured from the child's peak RSS (or the device peak
//               its metrics report) and its per-step metrics.
// libtorch-free. Not thread-safe; blocking (one child at a time, each with a time limit).
// Format of the report: docs/formats.md, "Batch-size probe".
#ifndef TRAINSCOPE_TRAIN_PROBE_H_
#define TRAINSCOPE_TRAIN_PROBE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json_fwd.hpp"
#include "trainscope/core/formats.h"
#include "trainscope/train/config.h"

namespace trainscope {
class Os;
}

namespace trainscope::train {

inline constexpr const char* kProbeFormat = formats::kTrainProbe;
inline constexpr int kProbeVersion = 1;

struct ProbeOptions {
  int steps = 5;         // optimizer steps per candidate (accumulation 1)
  int warmup_steps = 2;  // first steps left out of the time figures (must be < steps)
  int ranks = 1;         // data-parallel ranks of the real run (accumulation arithmetic)
  int global_batch = 0;  // sequences per optimizer step, all ranks; 0: the config's
                         // micro_batch x grad_accum x ranks
  // Memory one rank may use, bytes; -1: detect (train.device cuda: the device's free memory
  // from nvidia-smi; cpu: min(MemAvailable, cgroup limit - usage) / ranks).
  int64_t memory_limit_bytes = -1;
  double safe_fraction = 0.90;  // a candidate must stay under this share of the limit
  double min_gain = 0.05;       // stop when projected tokens/s improves by less than this
  int max_accum = 16;           // accumulation cap of the recommendation
  int max_candidates = 12;
  double candidate_timeout_s = 600;  // per child run
  // Progress lines ("probe: micro-batch 4 ... "); may be empty.
  std::function<void(const std::string&)> on_progress;

  // ProbeBatch only: the trainscope executable to run (`BINARY train --config ...`) and the
  // folder under which each candidate gets mb<B>/ (its config and run directory; kept).
  std::string binary;
  std::string work_dir;
};

// What one candidate's run measured.
struct ProbeMeasurement {
  bool ok = false;               // the run finished; else `failure` says how it ended
  std::string failure;           // "killed by signal 9 (SIGKILL): out of memory?", "exit 1: ..."
  int steps = 0;                 // steps completed
  double peak_memory_bytes = 0;  // peak RSS of the process, or the device's peak
  std::string memory_source;     // "host_rss" or "device"
  double step_ms = 0;            // median over the steps after the warm-up
  double optimizer_ms = 0;       // median optimizer phase over the same steps
  double tokens_per_s = 0;       // this rank's tokens / median step time
};
using CandidateRunner = std::function<ProbeMeasurement(int micro_batch)>;

struct ProbeRow {
  int micro_batch = 0;
  int accum = 0;                      // per_rank_batch / micro_batch
  bool ran = false;                   // false: skipped, predicted over the safe limit
  ProbeMeasurement m;                 // when ran
  double predicted_memory_bytes = 0;  // the prediction made before running it (0 for the first)
  double memory_share = 0;            // of the limit (measured, else predicted)
  // This rank's tokens/s of the real run at this micro-batch and its accumulation:
  // accum x micro_batch x seq_len / (accum x (step_ms - optimizer_ms) + optimizer_ms).
  double projected_tokens_per_s = 0;
  double relative = 0;  // projected / the best projected
  std::string verdict;  // "recommended", "fits", "over the safe limit", "skipped: ...", ...
};

struct ProbeReport {
  std::vector<ProbeRow> rows;
  int global_batch = 0;
  int ranks = 1;
  int per_rank_batch = 0;  // global_batch / ranks
  int seq_len = 0;
  int64_t memory_limit_bytes = 0;
  std::string memory_limit_source;  // "MemAvailable", "cgroup", "--probe-memory-limit"
  double safe_fraction = 0;
  int steps = 0, warmup_steps = 0;  // per candidate (ProbeOptions)
  double min_gain = 0;
  int max_accum = 0;
  std::string stop_reason;  // why probing stopped, one sentence
  int recommended = -1;     // index into rows; -1 when nothing fits
  int micro_batch = 0;      // recommended (0 when none)
  int accum = 0;
  bool accum_over_cap = false;  // the recommendation needs more than max_accum
  std::string verdict;          // one sentence
};

// ---- The pure decisions (exposed for tests) ----
// Next candidate after `current`: the largest divisor d of per_rank_batch with current < d <=
// 2 current, else the smallest divisor above current; 0 when current is per_rank_batch.
int NextCandidate(int per_rank_batch, int current);
// The first candidate: the smallest divisor whose accumulation is at most max_accum, lowered
// (to smaller divisors) while `estimate_bytes(d)` is over half the safe limit.
int FirstCandidate(int per_rank_batch, int max_accum, double safe_limit_bytes,
                   const std::function<double(int)>& estimate_bytes);
// Memory of candidate `next` from the rows run so far (ok ones, at least one): the last
// measurement plus slope x (next - its micro-batch), the slope being the last two measurements'
// but never under half the estimate's slope (RSS noise can flatten a measured slope); with one
// measurement, the estimate's slope.
double PredictMemory(const std::vector<ProbeRow>& rows, int next,
                     const std::function<double(int)>& estimate_bytes);

// Runs the loop: candidates from FirstCandidate, each predicted first and skipped (stop) when
// over safe_fraction x limit; stops after a failed run, a run over the safe limit, a projected
// gain under min_gain, the per-rank batch, or max_candidates. InvalidArgument when the global
// batch is not a multiple of ranks, or options are out of range.
absl::StatusOr<ProbeReport> RunProbe(const TrainConfig& config, const ProbeOptions& options,
                                     int64_t memory_limit_bytes,
                                     const std::string& memory_limit_source,
                                     const std::function<double(int)>& estimate_bytes,
                                     const CandidateRunner& run);

// ---- The real probe ----
// Memory one rank may use on this host: min(MemAvailable, cgroup v2 memory.max -
// memory.current or v1 limit - usage); `source` names the smaller. -1 when unknown.
int64_t HostMemoryLimitBytes(Os* os, std::string* source);

// Free memory of CUDA device `cuda_index` (counted in CUDA_VISIBLE_DEVICES when set):
// nvidia-smi's memory.total - memory.used; `source` says so. -1 when nvidia-smi does not answer.
int64_t DeviceMemoryLimitBytes(Os* os, int cuda_index, std::string* source);

// Runs each candidate as a child `options.binary train` (see the header comment), through
// `os`. The memory limit: options.memory_limit_bytes, else on train.device cuda[:N]
// DeviceMemoryLimitBytes (compared with the device peak the trainer's metrics report), else
// HostMemoryLimitBytes / ranks (compared with the child's peak RSS).
// Errors: InvalidArgument for options out of range or a config the trainer refuses as bad
// input (the first child's exit 2, with its message); FailedPrecondition when no limit is
// known (no MemAvailable; nvidia-smi silent for a cuda device), or the trainer reports device
// memory on a device other than cuda and no limit was given.
absl::StatusOr<ProbeReport> ProbeBatch(const TrainConfig& config, const ProbeOptions& options,
                                       Os* os);

// docs/formats.md "Batch-size probe".
nlohmann::json ProbeReportToJson(const ProbeReport& r);
// The table (fits 120 columns), the stop reason and the verdict.
std::string RenderProbeReport(const ProbeReport& r);

}  // namespace trainscope::train

#endif  // TRAINSCOPE_TRAIN_PROBE_H_
