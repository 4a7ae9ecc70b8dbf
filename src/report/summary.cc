// The summary of a written report (`trainscope report`, its --json and its text lines): counts
// over the data model and what the page draws beyond its fixed charts.
#include <cstdint>
#include <set>
#include <string>

#include "trainscope/core/formats.h"
#include "trainscope/report/report.h"

namespace trainscope::report {
namespace {

using nlohmann::json;

// The counts of findings by severity over every run.
json FindingCounts(const json& data) {
  json c = {{"error", 0}, {"warning", 0}, {"info", 0}};
  for (const auto& run : data["runs"]) {
    for (const auto& f : run["findings"]) {
      std::string sev = f.value("severity", "info");
      if (c.contains(sev)) c[sev] = c[sev].get<int>() + 1;
    }
  }
  return c;
}

// What the page draws beyond the fixed charts: the scalars users logged (names over every
// rank), the checkpoint marks, the trace analyses (with their source) and the compare
// reports.
json DrawnExtras(const json& data) {
  std::set<std::string> scalars;
  json checkpoints = json::array(), traces = json::array();
  json compares = json::array();
  for (const auto& run : data["runs"]) {
    const std::string name = run.value("name", "");
    for (const auto& r : run["ranks"]) {
      const json logged = r.value("scalars", json::object());
      for (const auto& [n, s] : logged.items()) scalars.insert(n);
    }
    for (const auto& c : run.value("checkpoints", json::array())) {
      checkpoints.push_back({{"run", name},
                             {"step", c["step"]},
                             {"anomaly", c["anomaly"]},
                             {"complete", c["complete"]}});
    }
    for (const auto& t : run.value("traces", json::array())) {
      traces.push_back({{"run", name},
                        {"file", t["file"]},
                        {"source", t["source"]},
                        {"ranks", t["ranks"].size()},
                        {"trace_files", t.value("trace_files", json::array()).size()}});
    }
    for (const auto& c : run.value("compares", json::array())) {
      compares.push_back({{"run", name},
                          {"file", c["file"]},
                          {"kind", c["kind"]},
                          {"diverged", c["diverged"]},
                          {"first_divergence", c["first_divergence"]}});
    }
  }
  return {{"scalars", scalars},
          {"checkpoints", checkpoints},
          {"traces", traces},
          {"compares", compares}};
}

}  // namespace

json ReportSummary(const json& data, const std::string& output, size_t html_bytes) {
  int64_t points = 0, ranks = 0;
  for (const auto& run : data["runs"]) {
    for (const auto& r : run["ranks"]) {
      ++ranks;
      for (const auto& [name, s] : r["series"].items()) points += s["x"].size();
      const json logged = r.value("scalars", json::object());
      for (const auto& [name, s] : logged.items()) {
        if (!r["series"].contains(name)) points += s["x"].size();  // drawn on its own chart
      }
    }
  }
  json summary = {{"format", formats::kReport},
                  {"version", 1},
                  {"output", output},
                  {"html_bytes", html_bytes},
                  {"runs", data["runs"].size()},
                  {"ranks", ranks},
                  {"points_drawn", points},
                  {"sections", data["sections"]},
                  {"missing", data["missing"]},
                  {"malformed", data["malformed"]},
                  {"findings", FindingCounts(data)}};
  summary.update(DrawnExtras(data));
  return summary;
}

}  // namespace trainscope::report
