// `trainscope compare`: a shell around compare::CompareDumps (see compare_command.h).
#include "cli/compare_command.h"

#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>

#include "cli/exit.h"
#include "trainscope/compare/compare.h"
#include "trainscope/compare/runs.h"

namespace trainscope::cli {
namespace {

struct CompareArgs {
  std::string a, b, csv, mapping, fail_on = "divergence";
  bool json = false;
  compare::Options options;
};

// Two run directories or metric logs: the loss curves and the per-layer norms.
int RunCompareRuns(const CompareArgs& a) {
  compare::RunsOptions o;
  o.top = a.options.top;
  auto report = compare::CompareRuns(a.a, a.b, o);
  if (!report.ok()) return ReportAndExitCode("compare", report.status());
  if (a.json) {
    std::cout << compare::RunsReportToJson(*report).dump(2, ' ', false,
                                                         nlohmann::json::error_handler_t::replace)
              << "\n";
  } else {
    std::cout << compare::FormatRunsText(*report, o.top);
  }
  return a.fail_on != "none" && report->diverged ? kExitProblems : kExitOk;
}

int RunCompare(CompareArgs& a) {
  if (compare::LooksLikeRun(a.a) && compare::LooksLikeRun(a.b)) return RunCompareRuns(a);
  if (!a.mapping.empty()) {
    auto m = compare::ReadMapping(a.mapping);
    if (!m.ok()) return ReportAndExitCode("compare", m.status());
    a.options.mapping = *m;
  }
  auto report = compare::CompareDumps(a.a, a.b, a.options);
  if (!report.ok()) return ReportAndExitCode("compare", report.status());
  if (!a.csv.empty()) {
    std::ofstream out(a.csv, std::ios::binary);
    out << compare::ReportToCsv(*report);
    if (!out.flush()) {
      std::fprintf(stderr, "trainscope compare: error: %s: cannot write\n", a.csv.c_str());
      return kExitUsage;
    }
  }
  if (a.json) {
    std::cout << compare::ReportToJson(*report).dump(2, ' ', false,
                                                     nlohmann::json::error_handler_t::replace)
              << "\n";
  } else {
    std::cout << compare::FormatReportText(*report, a.options.top);
  }
  if (a.fail_on == "none") return kExitOk;
  if (report->diverged) return kExitProblems;
  for (const compare::PairReport& p : report->pairs) {
    for (const compare::EntryCompare& e : p.entries) {
      if (e.result == "error" && a.fail_on != "divergence") return kExitProblems;
      if (e.result == "warning" && a.fail_on == "warning") return kExitProblems;
    }
  }
  return kExitOk;
}

}  // namespace

void RegisterCompareCommand(CLI::App& root, CommandContext& ctx) {
  auto args = std::make_shared<CompareArgs>();
  CLI::App* cmd = root.add_subcommand(
      "compare",
      "precision alignment of two msprobe dumps (GPU vs NPU, before vs after): msprobe's "
      "metrics per tensor and the first op whose inputs agree and outputs do not; on two run "
      "directories or metric logs, the first step where the loss curves part beyond their "
      "noise and the first per-layer norm that differs");
  cmd->add_option("a", args->a,
                  "dump of the run under test (NPU side): a dump root, step or "
                  "rank folder; or a run directory / metrics log")
      ->required();
  cmd->add_option("b", args->b, "the bench dump (same levels)")->required();
  cmd->add_flag("--json", args->json, "print the report as JSON (docs/formats.md)");
  cmd->add_option("--csv", args->csv, "also write msprobe's compare_result csv to FILE");
  cmd->add_option("--mapping", args->mapping,
                  "renames of A's names: JSON {\"a\": \"b\"} or YAML lines `a: b`");
  cmd->add_option("--top", args->options.top, "worst entries listed (default 10)")
      ->check(kPositiveNumber);
  cmd->add_option("--rtol", args->options.rtol,
                  "a tensor differs above this relative error (default 1e-3)")
      ->check(kNonNegativeNumber);
  cmd->add_option("--fail-on", args->fail_on,
                  "exit 1 on: divergence (default), error (also msprobe errors), warning, none")
      ->check(CLI::IsMember({"divergence", "error", "warning", "none"}));
  cmd->footer(
      "examples: trainscope compare npu_dump/step0 gpu_dump/step0 --csv compare_result.csv\n"
      "          trainscope compare runs/npu-run runs/gpu-run   (loss curves and layer norms)");
  cmd->callback([&ctx, args] { ctx.exit_code = RunCompare(*args); });
}

}  // namespace trainscope::cli
