// `trainscope hang analyze`: a shell around hang::AnalyzePaths (see hang_command.h).
#include "cli/hang_command.h"

#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cli/exit.h"

namespace trainscope::cli {
namespace {

struct HangArgs {
  std::vector<std::string> paths;
  bool json = false;
  int mismatch_cap = 10;
};

int RunAnalyze(const HangArgs& a) {
  hang::AnalyzeOptions options;
  options.mismatch_cap = a.mismatch_cap;
  auto report = hang::AnalyzePaths(a.paths, options);
  if (!report.ok()) return ReportAndExitCode("hang analyze", report.status());
  if (a.json) {
    std::cout << hang::ReportToJson(*report).dump(2, ' ', false,
                                                  nlohmann::json::error_handler_t::replace)
              << "\n";
  } else {
    std::cout << hang::FormatReportText(*report);
  }
  return report->problem ? kExitProblems : kExitOk;
}

}  // namespace

void RegisterHangCommand(CLI::App& root, CommandContext& ctx) {
  CLI::App* cmd = root.add_subcommand("hang", "hang diagnosis from flight recorder dumps");
  cmd->require_subcommand(1);
  auto args = std::make_shared<HangArgs>();
  CLI::App* an = cmd->add_subcommand(
      "analyze",
      "which rank skipped, reordered or mis-sized which collective: matches every process "
      "group's collectives across ranks in trainscope's and PyTorch's flight recorder dumps "
      "(JSON or pickle, any file name)");
  an->add_option("paths", args->paths,
                 "run directories (their hang/ folder), folders of dumps, or dump files")
      ->required();
  an->add_flag("--json", args->json, "print the report as JSON (docs/formats.md)");
  an->add_option("--mismatch-cap", args->mismatch_cap,
                 "report at most N findings, earliest first (default 10)")
      ->check(kNonNegativeNumber);
  an->callback([&ctx, args] { ctx.exit_code = RunAnalyze(*args); });
}

}  // namespace trainscope::cli
