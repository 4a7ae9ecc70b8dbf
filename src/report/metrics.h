// Private to the report module: one rank's metrics file read into drawable series, and the
// downsampling that keeps a series drawable at any length.
// Thread-safety: pure functions.
#ifndef TRAINSCOPE_REPORT_METRICS_H_
#define TRAINSCOPE_REPORT_METRICS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace trainscope::report {

// The indices of the points to draw of a series of n points (values y, NaN = no value):
// every point when there are at most max_points; else the series is cut into max_points / 2
// buckets of consecutive points and the minimum and the maximum of each are kept (so every
// spike and dip stays visible), plus the first and last point and every index in `keep`
// (sorted). Points with a NaN value are never returned. Sorted ascending, no repeats.
std::vector<size_t> DownsampleMinMax(const std::vector<double>& y, size_t max_points,
                                     const std::vector<size_t>& keep = {});

// {"x": [steps], "y": [values], "n": points before downsampling}; values are the records'
// own (rounded to 8 significant digits), never averages, so tooltips show exact records.
nlohmann::json SeriesToJson(const std::vector<int64_t>& steps, const std::vector<double>& y,
                            size_t max_points, const std::vector<size_t>& keep = {});

// One rank's train/metrics.rank<R>.jsonl (docs/formats.md "Run directory").
struct RankMetrics {
  std::string file;  // as given
  int rank = -1;     // the header's, else the file name's
  int world_size = 0;
  int64_t lines = 0, malformed = 0;
  std::vector<std::string> malformed_examples;  // "file:line: why", the first 5
  bool truncated_last_line = false;             // a last line without newline that did not parse
  std::string end_reason;                       // "" while running or killed
  // Step records, sorted by step, the last record of a repeated step kept.
  std::vector<int64_t> steps;
  std::vector<double> loss, val_loss, lr, grad_norm, step_ms, tokens_per_s, comm_ms;
  std::vector<double> host_rss_bytes, device_mem_bytes;
  std::vector<std::vector<double>> phases;  // per kPhaseNames entry, aligned with steps
  // Records that mark a step: spike, nonfinite, error, checkpoint (anomaly), loss_scale,
  // val/eval records: {"kind", "step", "rank", "text"}; plus "first_nonfinite" when a loss or
  // grad norm was null.
  std::vector<nlohmann::json> events;
  nlohmann::json summary;  // the "summary" record, or null
};

// The phase names of step records' phases_ms, in drawing order.
const std::vector<std::string>& PhaseNames();

// Reads one metrics file. Never fails on content: a line that is not a JSON object or a step
// record without an integer step is counted in `malformed`. ok false when the file cannot be
// opened (then `malformed_examples[0]` says why).
bool ReadRankMetrics(const std::string& path, RankMetrics* out);

// The rank's drawable data: {"rank", "file", "lines", "malformed", "steps", "first_step",
// "last_step", "end_reason", "series": {name: SeriesToJson}, "phases": {"x", name: [...]},
// "means": {"step_ms", "loss", ...}}. Anomaly steps are always kept in the drawn points.
nlohmann::json RankMetricsToJson(const RankMetrics& m, size_t max_points);

}  // namespace trainscope::report

#endif  // TRAINSCOPE_REPORT_METRICS_H_
