// Per-rank training metrics: the JSONL file each rank writes in the run directory
// (docs/formats.md, "Run directory"), the phase breakdown of a step, the LR schedule, and
// the data-loader verdict. libtorch-free.
#ifndef TRAINSCOPE_TRAIN_METRICS_H_
#define TRAINSCOPE_TRAIN_METRICS_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "trainscope/train/config.h"

namespace trainscope::train {

inline constexpr char kMetricsFormat[] = "trainscope.train_metrics";
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
  int64_t host_rss_bytes = 0;
  int64_t device_mem_allocated_bytes = -1;  // -1: the device does not report it (CPU)
  int64_t device_mem_peak_bytes = -1;
};
nlohmann::json StepRecordToJson(const StepRecord& r);

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

// Writes one JSONL file: a header line, then one object per line ("step", "layer_norms",
// "event", "summary"). Each line is flushed, so a crashed run keeps every step it finished.
// Not thread-safe.
class MetricsWriter {
 public:
  // Creates parent directories. Internal naming the path on failure.
  static absl::StatusOr<std::unique_ptr<MetricsWriter>> Open(const std::string& path,
                                                             nlohmann::json header);
  ~MetricsWriter();
  absl::Status WriteStep(const StepRecord& r);
  absl::Status WriteLayerNorms(int step, const std::vector<LayerNorms>& layers);
  // {"type": type, ...fields}
  absl::Status WriteRecord(const std::string& type, nlohmann::json fields);
  const std::string& path() const { return path_; }

 private:
  MetricsWriter(std::string path, std::FILE* f) : path_(std::move(path)), f_(f) {}
  absl::Status WriteLine(const nlohmann::json& j);
  std::string path_;
  std::FILE* f_;
};

// Checks a metrics file against the documented format: header first with format/version,
// every line a JSON object of a known type with the documented keys and types, steps
// increasing. InvalidArgument naming the file and line. Returns the number of step lines.
absl::StatusOr<int64_t> ValidateMetricsFile(const std::string& path);

}  // namespace trainscope::train

#endif  // TRAINSCOPE_TRAIN_METRICS_H_
