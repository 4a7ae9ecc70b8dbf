// Per-rank training metrics: the JSONL file each rank writes in the run directory
// (docs/formats.md, "Run directory"), the phase breakdown of a step, the LR schedule, and
// the data-loader verdict. libtorch-free.
#ifndef TRAINSCOPE_TRAIN_METRICS_H_
#define TRAINSCOPE_TRAIN_METRICS_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "trainscope/core/formats.h"
#include "trainscope/train/config.h"

namespace trainscope::tb {
class EventWriter;
}

namespace trainscope::train {

inline constexpr const char* kMetricsFormat = formats::kTrainMetrics;
inline constexpr int kMetricsVersion = 1;

// Wall time of one optimizer step, split into phases (milliseconds). On a CPU device
// "h2d" is the copy of the host batch into the tensors the model reads.
struct PhaseTimes {
  double data_wait_ms = 0;  // blocked on the batch loader
  double h2d_ms = 0;
  double forward_ms = 0;
  double backward_ms = 0;   // includes launching gradient all-reduces from hooks
  double comm_wait_ms = 0;  // waiting for all-reduces after backward (not overlapped part)
  double optimizer_ms = 0;  // clip + AdamW step + zero_grad
  double Sum() const {
    return data_wait_ms + h2d_ms + forward_ms + backward_ms + comm_wait_ms + optimizer_ms;
  }
  void Add(const PhaseTimes& o, double scale = 1.0);
};
nlohmann::json PhaseTimesToJson(const PhaseTimes& p);

struct StepRecord {
  int step = 0;     // from 1
  double loss = 0;  // mean over this rank's micro-batches (all-reduced mean when distributed)
  double lr = 0;
  double grad_norm = 0;  // global L2 norm before clipping
  int64_t tokens = 0;    // tokens of this step over all ranks
  double step_ms = 0;
  double tokens_per_s = 0;  // tokens / step time
  PhaseTimes phases;
  // Time the gradient all-reduces of this step ran on the communicator's progress thread
  // (sum of op durations; overlaps backward). 0 on a single rank.
  double comm_ms = 0;
  // Payload of this step's gradient collectives on this rank (count x dtype size summed;
  // comm.compression shrinks it) and the time spent compressing and decompressing the
  // gradients (part of backward and comm_wait). 0 on a single rank.
  int64_t comm_bytes = 0;
  double compress_ms = 0;
  int64_t host_rss_bytes = 0;
  int64_t device_mem_allocated_bytes = -1;  // -1: the device does not report it (CPU)
  int64_t device_mem_peak_bytes = -1;
  // Validation (config "eval"): set on the steps an evaluation followed. val_loss is the mean
  // loss over the evaluation's sequences (over all ranks); eval_ms its time, not in step_ms.
  bool has_val = false;
  double val_loss = 0;
  double eval_ms = 0;
};
// The step record; "val_loss" and "eval_ms" only when has_val.
nlohmann::json StepRecordToJson(const StepRecord& r);
// The TensorBoard scalars of a step (docs/formats.md "TensorBoard scalars"): train/loss,
// train/lr, train/grad_norm, train/tokens_per_s, train/step_ms, phase/<name>_ms, comm/ms,
// memory/rss_bytes and, when the device reports them, memory/device_bytes and
// memory/device_peak_bytes; val/loss on the steps with a validation loss.
std::vector<std::pair<std::string, double>> StepScalars(const StepRecord& r);

struct LayerNorms {
  std::string name;  // parameter name, e.g. "blocks.0.attn.qkv.weight"
  double weight_norm = 0;
  double grad_norm = 0;
};

// Linear warm-up from 0 to lr over warmup_steps, then cosine decay to min_lr at
// total_steps. `step` counts from 1.
double LearningRate(const OptimConfig& optim, int step, int total_steps);

// Resident set size of this process (from /proc/self/statm), 0 if unknown.
int64_t HostRssBytes();

// The data-loader verdict: data-wait over 30% of step time means the input pipeline is
// the bottleneck.
inline constexpr double kDataBoundFraction = 0.30;
struct LoaderVerdict {
  bool data_bound = false;
  double data_wait_fraction = 0;  // sum(data_wait) / sum(step time)
  int num_workers = 0;
  int suggested_workers = 0;  // when data_bound
  std::string message;        // one sentence
};
LoaderVerdict JudgeDataLoader(double data_wait_ms, double step_ms, int num_workers);

// The last line of a metrics file (docs/formats.md, "Run directory"): how the run ended.
// A file without one belongs to a run that is still going or was killed (SIGKILL, a crash,
// a lost machine) before it could write it.
struct EndRecord {
  std::string reason;  // "done" | "interrupted" | "error"
  int step = 0;        // optimizer steps completed
  int rank = 0;
  std::string signal;  // "SIGINT", "SIGTERM", ... when a signal asked for the stop
  std::string error;   // the error, one line, when there was one
  int64_t time_unix_us = 0;
  double elapsed_s = 0;  // since the trainer started (Train() was called)
};
inline constexpr char kEndDone[] = "done";
inline constexpr char kEndInterrupted[] = "interrupted";
inline constexpr char kEndError[] = "error";

// Writes one JSONL file: a header line, then one object per line ("step", "layer_norms",
// "event", "error", "summary"), then the "end" record. Each line is flushed, so a crashed run
// keeps every step it finished. Thread-safe (a watchdog thread may write the end record
// while the training thread still runs); after the end record every further write is
// dropped and returns OK, so the end record stays the last line.
class MetricsWriter {
 public:
  // Creates parent directories. Internal naming the path on failure. `append`: continue an
  // existing file (a resumed run): a last line cut short by a kill is dropped first, then
  // the new header follows what is there (docs/formats.md: readers take the last record of
  // a step). Without `append` the file is rewritten.
  static absl::StatusOr<std::unique_ptr<MetricsWriter>> Open(const std::string& path,
                                                             nlohmann::json header,
                                                             bool append = false);
  ~MetricsWriter();
  // From now on every step record is also written as TensorBoard scalars (StepScalars) to a
  // new event file in `dir` (tb/event_writer.h; flushed every 2 s and by WriteEnd). Internal
  // naming the path when the file cannot be created.
  absl::Status AttachTensorBoard(const std::string& dir);
  absl::Status WriteStep(const StepRecord& r);
  absl::Status WriteLayerNorms(int step, const std::vector<LayerNorms>& layers);
  // {"type": type, ...fields}
  absl::Status WriteRecord(const std::string& type, nlohmann::json fields);
  // Writes the end record unless one was written already (then returns OK: the first wins).
  absl::Status WriteEnd(const EndRecord& end);
  bool ended() const;
  const std::string& path() const { return path_; }

 private:
  MetricsWriter(std::string path, std::FILE* f);
  absl::Status WriteLineLocked(const nlohmann::json& j);
  absl::Status WriteLine(const nlohmann::json& j);
  const std::string path_;
  mutable std::mutex mu_;
  std::FILE* f_;                         // guarded by mu_
  bool ended_ = false;                   // guarded by mu_
  std::unique_ptr<tb::EventWriter> tb_;  // guarded by mu_; null without AttachTensorBoard
};
nlohmann::json EndRecordToJson(const EndRecord& end);

// What a metrics file says about its run.
struct MetricsFileInfo {
  int64_t steps = 0;  // distinct steps (a step a resumed run repeated counts once)
  int segments = 0;   // headers: 1 + the resumed runs that appended to the file
  // false: no end record, the run is still going or was killed before it could write one.
  bool ended = false;
  EndRecord end;  // when ended
  // The last line was cut short (no newline, not JSON): the writer was killed while writing
  // it. It is not counted; the file is otherwise valid.
  bool truncated_last_line = false;
  // "done", "interrupted", "error", or "running_or_killed" (no end record).
  std::string state;
};

// Checks a metrics file against the documented format: header first with format/version,
// every line a JSON object of a known type with the documented keys and types, steps
// increasing within a segment, nothing but a resumed run's header (with resumed_from_step,
// after which steps restart above it) after an end record. InvalidArgument naming the file and
// line.
absl::StatusOr<MetricsFileInfo> ValidateMetricsFile(const std::string& path);

}  // namespace trainscope::train

#endif  // TRAINSCOPE_TRAIN_METRICS_H_
