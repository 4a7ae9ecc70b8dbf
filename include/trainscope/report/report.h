// `trainscope report RUN_DIR...`: one self-contained HTML page that draws what a run directory
// holds (loss / validation loss / LR / grad-norm curves with anomalies and findings marked,
// per-step phase breakdown, per-rank comparison, memory, the flight recorder's collectives,
// data scan histograms, trace breakdown, doctor table and environment fingerprint).
//
// Two steps, so `trainscope serve` can reuse them: CollectReportData reads the run directories
// into a JSON data model (docs/formats.md "Report"), RenderReportHtml embeds that model, the
// chart library (dygraphs, Debian's libjs-dygraphs, compiled in at build time) and the page
// script into one HTML file.
// Thread-safety: pure functions of the files read and their arguments.
#ifndef TRAINSCOPE_REPORT_REPORT_H_
#define TRAINSCOPE_REPORT_REPORT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "trainscope/core/os.h"

namespace trainscope::report {

struct ReportOptions {
  bool live = false;      // page polls "data.json" (relative URL) every 2 s and redraws (serve)
  int max_points = 4000;  // per series, for drawing (min/max per bucket); tooltip data exact
  std::string title;      // empty: derived from the run directories
  // The file system the run directories are listed and read in (a FakeOs in tests; not
  // owned). Writes (the page itself) are the caller's.
  Os* os = Os::Default();
};

// Reads what exists in each run directory (metrics.rank*.jsonl under <run>/train/ per
// core/run_dir.h, diagnose findings, hang dumps/analysis, data scan reports, trace analysis,
// doctor report, env fingerprint) into the report's data model. Missing parts are listed in
// data["missing"]; malformed metrics lines counted in data["malformed"].
// Errors: NotFound for a run directory that does not exist (the CLI exits 2); a part that
// cannot be parsed is listed as missing with the reason, never an error.
absl::StatusOr<nlohmann::json> CollectReportData(const std::vector<std::string>& run_dirs,
                                                 const ReportOptions& options);

struct CollectorOptions {
  // Diagnose reads every file of a run whole (about a second per million metrics lines), so
  // when the only change since the last collection is appended metrics lines (or TensorBoard
  // events under train/tb), the findings are kept until this many times the last diagnose's
  // duration has passed since it ran: 10 keeps it under ~10% of a core on a live run. Any
  // other file of the run that changes (a report, a dump, a new rank file) has them diagnosed
  // again at once. 0: every collection diagnoses (the output is then CollectReportData's).
  double findings_backoff = 10;
};

// CollectReportData again and again on the same run directories, for `trainscope serve`:
// each Collect() parses only the metrics lines appended since the previous one (per file:
// the byte offset read so far and the file's identity; a file that shrank or was replaced is
// read from the start) and reads the other parts again only when their files changed size,
// modification time or inode. Collect() gives what CollectReportData gives on the same
// files (findings: see CollectorOptions::findings_backoff).
// Memory: the full-resolution step columns of every rank (~130 bytes per step).
// Thread-compatible: one thread calls Collect() at a time.
class ReportCollector {
 public:
  ReportCollector(std::vector<std::string> run_dirs, ReportOptions options,
                  CollectorOptions collector_options = {});
  ~ReportCollector();
  ReportCollector(const ReportCollector&) = delete;
  ReportCollector& operator=(const ReportCollector&) = delete;

  // The data model now. Errors: as CollectReportData (a run directory that disappeared is
  // NotFound). Blocking file reads; no timeout.
  absl::StatusOr<nlohmann::json> Collect();

  struct Stats {
    int64_t collections = 0;
    int64_t metrics_bytes_parsed = 0;  // over all collections
    int64_t metrics_full_reads = 0;    // metrics files read from their start
    int64_t diagnoses = 0;             // times diagnose ran
    int64_t parts_read = 0;            // other parts read (first, or because their files changed)
    // Files diagnose read that the parts took from it instead of reading them again (metrics
    // files included), and files the parts read themselves (diagnose did not run in that
    // collection, or did not read or parse them).
    int64_t files_from_diagnose = 0;
    int64_t files_read = 0;
  };
  Stats stats() const;
  // True when the last Collect() kept findings older than the metrics (the backoff): call
  // Collect() again later even if no file changes, or they stay behind.
  bool findings_pending() const;

  struct State;  // collector.cc

 private:
  std::unique_ptr<State> state_;
};

// A self-contained HTML page (chart library, CSS, page script and `data` embedded; no network
// request). In live mode the page fetches "data.json" every 2 s and redraws with it.
std::string RenderReportHtml(const nlohmann::json& data, const ReportOptions& options);

// The summary `trainscope report` prints of a written page (format "trainscope.report",
// version 1; docs/formats.md "Report"): `output` and `html_bytes` as given, the counts of runs,
// ranks and points drawn, the sections, missing parts and malformed lines of `data`
// (CollectReportData's model), the findings by severity, and what the page draws beyond the
// fixed charts (logged scalars, checkpoint marks, trace analyses, compare reports). Pure.
nlohmann::json ReportSummary(const nlohmann::json& data, const std::string& output,
                             size_t html_bytes);

}  // namespace trainscope::report

#endif  // TRAINSCOPE_REPORT_REPORT_H_
