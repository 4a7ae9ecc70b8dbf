// Metric series read from training logs, for the loss-curve classifier (curve.h).
//
// Readers (docs/formats.md "Diagnose inputs"):
//   - trainscope train's train/metrics.rank<R>.jsonl (trainscope.train_metrics v1): "step"
//     records; a null loss is a non-finite one (NaN here);
//   - any metrics JSONL: one object per line, top-level keys with common names (below);
//     Python's bare NaN / Infinity / -Infinity tokens are read as numbers;
//   - CSV (or TSV) with a header row naming the columns;
//   - HuggingFace Trainer trainer_state.json (log_history; NaN written as NaN);
//   - TensorBoard event files (a name containing "tfevents"): TFRecord-framed Event protos
//     (proto/tensorboard), scalars as simple_value or as a one-element float/double/half/int
//     tensor, the tag mapped like a column name; one series per file;
//   - Megatron-LM text logs (*.log, *.txt, *.out, *.err): "iteration N/ M | key: value |"
//     lines and "validation loss at iteration N | lm loss value: V |" lines; other lines
//     (arguments, timers, warnings) are not records.
// Column / key / tag names, compared after lower-casing and turning ' ', '-', '/' and '.'
// into '_':
//   step:     step, iteration, iter, global_step, steps, trainer_global_step
//   loss:     loss, train_loss, lm_loss, training_loss, train_lm_loss, loss_train
//   val_loss: val_loss, eval_loss, valid_loss, validation_loss, val_lm_loss, loss_val,
//             test_loss, lm_loss_validation
//   lr:       lr, learning_rate, train_learning_rate, train_lr
//   grad_norm: grad_norm, gradient_norm, grad_norm_total, global_grad_norm, train_grad_norm
// A step that appears more than once keeps its last record (a resumed run rewrites it); the
// repeats are counted. Records without a step number take the next number after the last.
// Bad records (a line that is not a JSON object, a CSV row with a bad number, an event
// record whose CRC does not match, an event file's last record cut short) are counted and
// skipped; the first one is named with its line or byte offset.
// Thread-safety: pure functions.
#ifndef TRAINSCOPE_DIAGNOSE_SERIES_H_
#define TRAINSCOPE_DIAGNOSE_SERIES_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "trainscope/core/os.h"

namespace trainscope::diagnose {

struct Point {
  int64_t step = 0;
  double value = 0;  // NaN or +-Inf for a non-finite value
};

// The metrics of one run (or one rank of a run).
struct Series {
  std::string path;    // the file read
  std::string format;  // FileKindName(): "trainscope_metrics", "jsonl", "csv", ...
  int rank = -1;       // trainscope metrics: the header's rank
  std::vector<Point> loss, val_loss, lr, grad_norm;  // sorted by step, one point per step
  int64_t records = 0;         // records read (lines, log_history entries, event records)
  int64_t bad_records = 0;     // skipped
  std::string first_bad;       // "line 12: not a JSON object", "" when none
  int64_t repeated_steps = 0;  // records replaced by a later record of the same step
  std::string end_reason;      // trainscope metrics: the "end" record's reason, else ""
  // Megatron-LM logs: the sums of "number of skipped iterations" (loss scale overflow) and
  // "number of nan iterations" over the log (an interval with a NaN iteration gives its
  // step a NaN loss); 0 for other formats.
  int64_t skipped_iterations = 0, nan_iterations = 0;
};

enum class FileKind {
  kUnknown,
  kTrainscopeMetrics,
  kJsonl,
  kCsv,
  kTrainerState,
  kTensorBoard,
  kMegatronLog
};
const char* FileKindName(FileKind kind);  // "unknown", "trainscope_metrics", ...

// The kind of a file from its name and first bytes (`head`, up to a few KB): an event file
// by its name alone, a Megatron-LM log by an iteration line or the arguments banner in its
// head. kUnknown for anything else (including trainscope's other JSON documents).
FileKind DetectKind(const std::string& path, const std::string& head);

// Parses `text` (the whole file's bytes) as `kind`. `path` names the file in messages and in
// Series::path. InvalidArgument naming the file (and line) when nothing usable is in it:
// no loss or validation loss column/key/tag, not one good record, or a malformed
// trainer_state.json.
absl::StatusOr<Series> ParseSeries(std::string_view path, FileKind kind, std::string_view text);

// Reads (through `os`) and parses a file. NotFound / InvalidArgument naming the file;
// InvalidArgument "not a metrics file" for a file of an unknown kind.
absl::StatusOr<Series> ReadSeries(const std::string& path, Os* os = Os::Default());

// Reads a whole file into *out. False when it cannot be opened or read.
bool ReadWholeFile(const std::string& path, std::string* out, Os* os = Os::Default());

// A file's bytes, as Os::MapFile gives them: on the real machine a regular file of 32 MB or
// more (a long run's metrics log is hundreds of MB) is mapped read-only, so it is parsed
// where the page cache holds it, with no copy; anything smaller is read into a string. A
// file that shrinks while mapped is a SIGBUS, as with any mmap reader (logs are read after
// the run, or while it appends, which is safe). Not copyable; view() is valid while the
// object lives.
class FileBytes {
 public:
  FileBytes() = default;
  FileBytes(const FileBytes&) = delete;
  FileBytes& operator=(const FileBytes&) = delete;
  // False when the file cannot be opened or read.
  bool Open(const std::string& path, Os* os = Os::Default());
  std::string_view view() const { return bytes_ ? bytes_->data() : std::string_view(); }

 private:
  std::unique_ptr<FileBytesView> bytes_;
};

// A metric name normalised as described above, then mapped: "step", "loss", "val_loss",
// "lr", "grad_norm", or "" for any other.
std::string CanonicalMetric(const std::string& name);

}  // namespace trainscope::diagnose

#endif  // TRAINSCOPE_DIAGNOSE_SERIES_H_
