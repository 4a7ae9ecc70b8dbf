// `trainscope report RUN_DIR...`: one self-contained HTML page that draws what a run directory
// holds (loss / validation loss / LR / grad-norm curves with anomalies and findings marked,
// per-step phase breakdown, per-rank comparison, memory, the flight recorder's collectives,
// data scan histograms, trace breakdown, doctor table and environment fingerprint).
//
// Two steps, so `trainscope serve` can reuse them: CollectReportData reads the run directories
// into a JSON data model (docs/formats.md "Report"), RenderReportHtml embeds that model, the
// chart library (uPlot, compiled in at build time) and the page script into one HTML file.
// Thread-safety: pure functions of the files read and their arguments.
#ifndef TRAINSCOPE_REPORT_REPORT_H_
#define TRAINSCOPE_REPORT_REPORT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace trainscope::report {

struct ReportOptions {
  bool live = false;      // page polls "data.json" (relative URL) every 2 s and redraws (serve)
  int max_points = 4000;  // per series, for drawing (min/max per bucket); tooltip data exact
  std::string title;      // empty: derived from the run directories
};

// Reads what exists in each run directory (metrics.rank*.jsonl under <run>/train/ per
// core/run_dir.h, diagnose findings, hang dumps/analysis, data scan reports, trace analysis,
// doctor report, env fingerprint) into the report's data model. Missing parts are listed in
// data["missing"]; malformed metrics lines counted in data["malformed"].
// Errors: NotFound for a run directory that does not exist (the CLI exits 2); a part that
// cannot be parsed is listed as missing with the reason, never an error.
absl::StatusOr<nlohmann::json> CollectReportData(const std::vector<std::string>& run_dirs,
                                                 const ReportOptions& options);

// A self-contained HTML page (chart library, CSS, page script and `data` embedded; no network
// request). In live mode the page fetches "data.json" every 2 s and redraws with it.
std::string RenderReportHtml(const nlohmann::json& data, const ReportOptions& options);

}  // namespace trainscope::report

#endif  // TRAINSCOPE_REPORT_REPORT_H_
