// Private to the report module: one rank's metrics file read (incrementally) into drawable
// series, and the downsampling that keeps a series drawable at any length.
// Thread-safety: pure functions; RankMetricsReader is thread-compatible.
#ifndef TRAINSCOPE_REPORT_METRICS_H_
#define TRAINSCOPE_REPORT_METRICS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "nlohmann/json.hpp"
#include "trainscope/core/os.h"

namespace simdjson::dom {
class parser;
}  // namespace simdjson::dom

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

// The most user-logged scalar names drawn per rank.
inline constexpr size_t kMaxUserScalars = 64;

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
  // The scalars a user logged beside the columns above (trainscope.watch's mon.log): a step
  // record's "scalars" object and "scalars" records (an evaluation logged after or between
  // steps). Per name, sorted by step, the last value logged for a step kept (NaN: logged
  // non-finite, written as null). At most kMaxUserScalars names; values of more are counted
  // in scalars_dropped.
  struct UserScalar {
    std::vector<int64_t> steps;
    std::vector<double> values;
  };
  std::map<std::string, UserScalar, std::less<>> scalars;
  int64_t scalars_dropped = 0;

  // Running totals over the step columns in step order, so that drawing a rank after a few
  // appended steps does not walk every step again (UpdateTotals). Sums are added in step
  // order, as a walk over all steps would: the same doubles.
  struct Totals {
    size_t upto = 0;        // steps [0, upto) are counted
    size_t valid[9] = {};   // per series column (ReportSeriesColumns order): non-NaN
    size_t finite[9] = {};  // finite values, and their sum
    double sum[9] = {};
    std::vector<double> phase_total;  // per step: the phases' sum, NaN when it has none
    std::vector<double> phase_sum;    // per phase: sum over steps, a non-finite value as 0
    double busy_sum = 0;              // step_ms - comm_wait where both are finite
    size_t busy_n = 0;
  };
  Totals totals;
};

// Extends m->totals over the steps appended since (all of them after m->totals was reset).
void UpdateTotals(RankMetrics* m);

// The phase names of step records' phases_ms, in drawing order.
const std::vector<std::string>& PhaseNames();

// One metrics file, read incrementally: each Update() parses only the lines appended since
// the previous one, so a live run's file of millions of lines costs what was appended, and
// metrics() is always what reading the whole file at once gives (report_test's
// CollectorTest.* compare the two).
//
// Never fails on content: a line that is not a JSON object or a step record without an
// integer step is counted in `malformed`; a last line without a newline that does not parse
// (a writer mid-line) is counted in `lines` and flagged `truncated_last_line`, and read again
// once its newline arrives. The file is read from the start again when it is another file
// (device or inode changed), shrank, or the bytes already read changed (the first and last
// 64 of them are compared: a file rewritten in place with the same inode).
// Thread-compatible: one thread at a time.
class RankMetricsReader {
 public:
  // The file is read through `os` (not owned; outlives the reader).
  explicit RankMetricsReader(std::string path, Os* os = Os::Default());

  // Brings metrics() up to the file's current content. Returns false when the file cannot
  // be opened or read (then metrics() is empty but for `malformed_examples[0]`, which says
  // why; the next Update() reads it from the start). Blocking file reads, no timeout.
  bool Update();
  // Brings metrics() to what Update() on a fresh reader gives, from the whole file's bytes
  // that another reader holds (diagnose, in the same collection: the file is then read once).
  // `dev` and `ino` identify the file for the next Update() (0, 0: unknown; it then reads the
  // file from the start). False as Update() when the parser cannot be set up.
  bool UpdateFromBytes(std::string_view bytes, uint64_t dev, uint64_t ino);
  const RankMetrics& metrics() const { return m_; }
  // Incremented by each Update() that read bytes or failed: metrics() may have changed.
  int64_t version() const { return version_; }
  // Bytes parsed over the reader's life, and how many times the file was read from the start.
  int64_t bytes_parsed() const { return bytes_parsed_; }
  int64_t full_reads() const { return full_reads_; }

 private:
  struct Row;
  void Reset();
  // Parses the bytes from offset_ up to `size` that read(offset, n) gives (Update: pread of
  // the file; UpdateFromBytes: the bytes given).
  bool ReadOn(uint64_t dev, uint64_t ino, uint64_t size,
              const std::function<std::string(uint64_t offset, size_t n)>& read);
  bool SameFileAsBefore(const RandomAccessFile& f, uint64_t dev, uint64_t ino, uint64_t size);
  // One line (without its newline) of the file: counted, and its record applied (step
  // records into *rows). An unterminated line that is not a JSON object is not taken:
  // false, nothing changed.
  bool ParseLine(simdjson::dom::parser* parser, std::string_view line, bool unterminated,
                 std::vector<Row>* rows);
  void MergeRows(std::vector<Row>* rows);
  // A nonfinite record: its step as a row with a non-finite loss when it has none.
  void NonfiniteStepRow(const nlohmann::json& j, std::vector<Row>* rows);

  const std::string path_;
  Os* const os_;
  RankMetrics m_;  // lines / truncated_last_line include the pending tail
  int64_t version_ = 0, bytes_parsed_ = 0, full_reads_ = 0;
  // Of the bytes read so far: [0, offset_) is in m_, and ends at a newline unless
  // open_line_ (a last line without newline that parsed as a record, so it was taken).
  uint64_t dev_ = 0, ino_ = 0, offset_ = 0;
  bool open_line_ = false;
  int64_t lines_done_ = 0;     // lines in [0, offset_)
  bool tail_pending_ = false;  // bytes after offset_ without a newline that did not parse
  uint64_t tail_size_ = 0;     // how many
  std::string head_, last_;    // the first and the last (up to) 64 bytes of [0, offset_)
  bool first_nonfinite_seen_ = false;
  bool opened_ = false;  // the last Update() could open the file
};

// The rank's drawable data: {"rank", "file", "lines", "malformed", "steps", "first_step",
// "last_step", "end_reason", "series": {name: SeriesToJson}, "phases": {"x", name: [...]},
// "means": {"step_ms", "loss", ...}, "scalars": {name: SeriesToJson} (RankMetrics::scalars),
// "scalars_dropped"}. A user's "val_loss" is also series "val_loss" when the step records
// have none. Anomaly steps are always kept in the drawn points.
nlohmann::json RankMetricsToJson(const RankMetrics& m, size_t max_points);

}  // namespace trainscope::report

#endif  // TRAINSCOPE_REPORT_METRICS_H_
