// `trainscope report`: a shell around report::CollectReportData, RenderReportHtml and
// ReportSummary (see report_command.h). Prints where the page went, its size, the sections
// drawn and the parts missing; --json prints the same as one JSON object.
#include "cli/report_command.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "cli/exit.h"
#include "trainscope/core/os.h"
#include "trainscope/core/paths.h"
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

// The text form of the summary, for a terminal: one line each for the page, the sections
// (wrapped at 120 columns), the extras drawn, the findings, each missing part.
void PrintSummaryText(const nlohmann::json& summary) {
  const std::string out = summary["output"].get<std::string>();
  const nlohmann::json& counts = summary["findings"];
  std::cout << "report: " << out << " (" << FormatBytes(summary["html_bytes"].get<uint64_t>())
            << ", " << summary["ranks"].get<int64_t>() << " rank(s), "
            << summary["points_drawn"].get<int64_t>() << " points drawn)\n";
  std::vector<std::string> sections;
  for (const auto& s : summary["sections"]) sections.push_back(s.get<std::string>());
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
            << summary["checkpoints"].size() << " checkpoint mark(s), " << summary["traces"].size()
            << " trace analysis(es)\n";
  std::cout << "findings: " << counts["error"].get<int>() << " error(s), "
            << counts["warning"].get<int>() << " warning(s), " << counts["info"].get<int>()
            << " note(s); malformed metrics lines: " << summary["malformed"].get<int64_t>() << "\n";
  for (const auto& m : summary["missing"]) {
    std::cout << "missing: " << m["run"].get<std::string>() << ": " << m["part"].get<std::string>()
              << " (" << m["reason"].get<std::string>() << ")\n";
  }
  std::cout << "open it in a browser: xdg-open " << out << "\n";
}

int RunReport(const ReportArgs& a) {
  report::ReportOptions options;
  options.max_points = a.max_points;
  absl::StatusOr<nlohmann::json> data = report::CollectReportData(a.run_dirs, options);
  if (!data.ok()) return ReportAndExitCode("report", data.status());
  std::string html = report::RenderReportHtml(*data, options);
  std::string out =
      a.output.empty() ? run_dir::Join(a.run_dirs[0], run_dir::kReportHtml) : a.output;
  // A new or regular file is replaced atomically; a device or pipe (-o /dev/stdout) is written.
  const bool special = ::access(out.c_str(), F_OK) == 0 && !IsRegularFile(out);
  bool written = false;
  if (special) {
    std::ofstream f(out, std::ios::binary);
    written = static_cast<bool>(f << html) && static_cast<bool>(f.flush());
  } else {
    written = WriteFileAtomic(out, html).ok();
  }
  if (!written) {
    return ReportAndExitCode("report", absl::PermissionDeniedError(out + ": cannot write"));
  }
  const nlohmann::json summary = report::ReportSummary(*data, out, html.size());
  if (a.json) {
    std::cout << summary.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    PrintSummaryText(summary);
  }
  const int errors = summary["findings"]["error"], warnings = summary["findings"]["warning"];
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
