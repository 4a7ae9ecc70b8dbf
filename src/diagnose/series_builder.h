// What the metrics readers (readers.cc, tensorboard.cc, megatron_log.cc) share: the
// collector of (step, metric, value) records that turns them into a Series, and the readers'
// entry points, dispatched by ParseSeries (series.h).
// Thread-safety: a SeriesBuilder is used by one thread.
#ifndef TRAINSCOPE_SRC_DIAGNOSE_SERIES_BUILDER_H_
#define TRAINSCOPE_SRC_DIAGNOSE_SERIES_BUILDER_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "trainscope/diagnose/series.h"

namespace trainscope::diagnose::internal {

enum Metric { kLoss, kVal, kLr, kGrad, kNumMetrics };

// The Metric of a CanonicalMetric() name; kNumMetrics for "step", "" and anything else.
Metric MetricIndex(std::string_view canonical);

// Collects points in file order; Finish sorts them by step and keeps the last one of each.
class SeriesBuilder {
 public:
  SeriesBuilder(std::string_view path, const char* format);
  Series& series() { return s_; }

  // The step of the next record: the given one, or one past the last.
  int64_t NextStep(bool has_step, double step);
  void Add(Metric m, int64_t step, double v) { pts_[m].push_back({step, v}); }
  void Reserve(size_t n);
  // A bad record at `where` ("line 12", "byte 345"): counted, the first one named.
  void Bad(std::string_view where, std::string_view why);
  void BadLine(int64_t line, std::string_view why);

  // The series; InvalidArgument naming the file when it holds no loss and no validation loss
  // (`what_names` says what was looked for: "column/key", "tag").
  absl::StatusOr<Series> Finish(const char* what_names = "column/key");

 private:
  Series s_;
  std::vector<Point> pts_[kNumMetrics];
  int64_t last_step_ = 0;
};

// Metrics JSONL parsed as `chunks` pieces of whole lines on as many threads (ParseSeries
// picks the count from the size and the machine); for tests.
absl::StatusOr<Series> ParseJsonlInChunks(std::string_view path, std::string_view text,
                                          bool trainscope, int chunks);
// TensorBoard event file bytes (tensorboard.cc).
absl::StatusOr<Series> ParseTensorBoard(std::string_view path, std::string_view file);
// Megatron-LM style text log (megatron_log.cc).
absl::StatusOr<Series> ParseMegatronLog(std::string_view path, std::string_view text);
// True when `head` (the first few KB of a text file) looks like a Megatron-LM log.
bool LooksLikeMegatronLog(std::string_view head);

}  // namespace trainscope::diagnose::internal

#endif  // TRAINSCOPE_SRC_DIAGNOSE_SERIES_BUILDER_H_
