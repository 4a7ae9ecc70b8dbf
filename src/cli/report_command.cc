// `trainscope report`: a shell around report::CollectReportData and RenderReportHtml (see
// report_command.h). Prints where the page went, its size, the sections drawn and the parts
// missing; --json prints the same as one JSON object.
#include "cli/report_command.h"

#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "trainscope/core/exit.h"
#include "trainscope/core/run_dir.h"
#include "trainscope/core/table.h"
#include "trainscope/report/report.h"

namespace trainscope::cli {
namespace {

struct ReportArgs {
  std::vector<std::string> run_dirs;
  std::string output;
  bool json = false;
  std::string fail_on = "none";
  int max_points = 4000;
};

// The counts of findings by severity over every run.
nlohmann::json ReportFindingCounts(const nlohmann::json& data) {
  nlohmann::json c = {{"error", 0}, {"warning", 0}, {"info", 0}};
  for (const auto& run : data["runs"]) {
    for (const auto& f : run["findings"]) {
      std::string sev = f.value("severity", "info");
      if (c.contains(sev)) c[sev] = c[sev].get<int>() + 1;
    }
  }
  return c;
}

// What the page draws beyond the fixed charts, for --json: the scalars users logged (names
// over every rank), the checkpoint marks, the trace analyses (with their source) and the
// compare reports.
nlohmann::json ReportDrawnExtras(const nlohmann::json& data) {
  std::set<std::string> scalars;
  nlohmann::json checkpoints = nlohmann::json::array(), traces = nlohmann::json::array();
  nlohmann::json compares = nlohmann::json::array();
  for (const auto& run : data["runs"]) {
    const std::string name = run.value("name", "");
    for (const auto& r : run["ranks"]) {
      const nlohmann::json logged = r.value("scalars", nlohmann::json::object());
      for (const auto& [n, s] : logged.items()) scalars.insert(n);
    }
    for (const auto& c : run.value("checkpoints", nlohmann::json::array())) {
      checkpoints.push_back({{"run", name},
                             {"step", c["step"]},
                             {"anomaly", c["anomaly"]},
                             {"complete", c["complete"]}});
    }
    for (const auto& t : run.value("traces", nlohmann::json::array())) {
      traces.push_back({{"run", name},
                        {"file", t["file"]},
                        {"source", t["source"]},
                        {"ranks", t["ranks"].size()},
                        {"trace_files", t.value("trace_files", nlohmann::json::array()).size()}});
    }
    for (const auto& c : run.value("compares", nlohmann::json::array())) {
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

int RunReport(const ReportArgs& a) {
  report::ReportOptions options;
  options.max_points = a.max_points;
  absl::StatusOr<nlohmann::json> data = report::CollectReportData(a.run_dirs, options);
  if (!data.ok()) return ReportAndExitCode("report", data.status());
  std::string html = report::RenderReportHtml(*data, options);
  std::string out = a.output.empty() ? run_dir::Join(a.run_dirs[0], "report.html") : a.output;
  {
    std::ofstream f(out, std::ios::binary | std::ios::trunc);
    f << html;
    f.close();
    if (!f) {
      return ReportAndExitCode("report", absl::PermissionDeniedError(out + ": cannot write"));
    }
  }
  nlohmann::json counts = ReportFindingCounts(*data);
  int64_t points = 0, ranks = 0;
  for (const auto& run : (*data)["runs"]) {
    for (const auto& r : run["ranks"]) {
      ++ranks;
      for (const auto& [name, s] : r["series"].items()) points += s["x"].size();
      const nlohmann::json logged = r.value("scalars", nlohmann::json::object());
      for (const auto& [name, s] : logged.items()) {
        if (!r["series"].contains(name)) points += s["x"].size();  // drawn on its own chart
      }
    }
  }
  nlohmann::json summary = {{"format", "trainscope.report"},
                            {"version", 1},
                            {"output", out},
                            {"html_bytes", html.size()},
                            {"runs", (*data)["runs"].size()},
                            {"ranks", ranks},
                            {"points_drawn", points},
                            {"sections", (*data)["sections"]},
                            {"missing", (*data)["missing"]},
                            {"malformed", (*data)["malformed"]},
                            {"findings", counts}};
  summary.update(ReportDrawnExtras(*data));
  if (a.json) {
    std::cout << summary.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    std::cout << "report: " << out << " (" << FormatBytes(html.size()) << ", " << ranks
              << " rank(s), " << points << " points drawn)\n";
    std::vector<std::string> sections;
    for (const auto& s : (*data)["sections"]) sections.push_back(s.get<std::string>());
    // Wrapped at 120 columns.
    std::string line = "sections:";
    for (size_t i = 0; i < sections.size(); ++i) {
      std::string item = " " + sections[i] + (i + 1 < sections.size() ? "," : "");
      if (line.size() + item.size() > 120) {
        std::cout << line << "\n";
        line = "         ";
      }
      line += item;
    }
    std::cout << line << "\n";
    std::string scalars;
    for (const auto& n : summary["scalars"])
      scalars += (scalars.empty() ? "" : ", ") + n.get<std::string>();
    std::cout << "also drawn: " << summary["scalars"].size() << " logged scalar(s)"
              << (scalars.empty() ? "" : " (" + scalars + ")") << ", "
              << summary["checkpoints"].size() << " checkpoint mark(s), "
              << summary["traces"].size() << " trace analysis(es)\n";
    std::cout << "findings: " << counts["error"].get<int>() << " error(s), "
              << counts["warning"].get<int>() << " warning(s), " << counts["info"].get<int>()
              << " note(s); malformed metrics lines: " << (*data)["malformed"].get<int64_t>()
              << "\n";
    for (const auto& m : (*data)["missing"]) {
      std::cout << "missing: " << m["run"].get<std::string>() << ": "
                << m["part"].get<std::string>() << " (" << m["reason"].get<std::string>() << ")\n";
    }
    std::cout << "open it in a browser: xdg-open " << out << "\n";
  }
  const int errors = counts["error"], warnings = counts["warning"];
  if (a.fail_on == "error" && errors > 0) return kExitProblems;
  if (a.fail_on == "warn" && errors + warnings > 0) return kExitProblems;
  return kExitOk;
}

}  // namespace

void RegisterReportCommand(CLI::App& root, CommandContext& ctx) {
  auto args = std::make_shared<ReportArgs>();
  CLI::App* cmd = root.add_subcommand(
      "report",
      "one self-contained HTML page of a run: curves with anomalies and findings marked, "
      "step phases, per-rank comparison, memory, flight recorder, data scan, trace, doctor");
  cmd->add_option("run_dirs", args->run_dirs,
                  "run directories (several: their curves are overlaid)")
      ->required();
  cmd->add_option("-o,--output", args->output, "the HTML file (default RUN_DIR/report.html)");
  cmd->add_flag("--json", args->json, "print the summary as JSON");
  cmd->add_option("--fail-on", args->fail_on,
                  "exit 1 when diagnose finds a problem of this severity or worse (default none)")
      ->check(CLI::IsMember({"warn", "error", "none"}));
  cmd->add_option("--max-points", args->max_points,
                  "points drawn per series (min/max per bucket; default 4000)")
      ->check(kPositiveNumber);
  cmd->callback([&ctx, args] { ctx.exit_code = RunReport(*args); });
}

}  // namespace trainscope::cli
