// `trainscope trace analyze PATH... [--json] [--export FILE]`: per-rank and per-step breakdown of
// profiler traces, stragglers across ranks, and findings (src/trace).
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/exit.h"
#include "trainscope/core/os.h"
#include "trainscope/core/paths.h"
#include "trainscope/core/status.h"
#include "trainscope/trace/analysis.h"
#include "trainscope/trace/trace.h"

namespace trainscope::cli {
namespace {

struct TraceArgs {
  std::vector<std::string> paths;
  bool json = false;
  std::string export_path;
  trace::AnalyzeOptions analyze;
  bool strict = false;
};

// --export: a file path that is none of the traces read (nor inside an Ascend output
// directory that is read whole), checked before anything is read; a symlink is written
// through (its target is replaced, the link stays).
absl::StatusOr<std::string> ExportTarget(const std::string& path,
                                         const std::vector<std::string>& inputs) {
  TS_RETURN_IF_ERROR(CheckOutputFile(path));
  TS_RETURN_IF_ERROR(CheckOutputNotInput({path}, inputs));
  return ResolveOutputPath(path);
}

int RunAnalyze(const TraceArgs& a) {
  std::string export_target;
  if (!a.export_path.empty()) {  // checked before anything is read
    if (auto st = trace::CheckTracePaths(a.paths); !st.ok()) {
      return ReportAndExitCode("trace analyze", st);
    }
    auto paths = trace::ExpandTracePaths(a.paths);
    if (!paths.ok()) return ReportAndExitCode("trace analyze", paths.status());
    auto t = ExportTarget(a.export_path, *paths);
    if (!t.ok()) return ReportAndExitCode("trace analyze", t.status());
    export_target = *t;
  }
  trace::AnalyzePathsOptions options;
  options.analyze = a.analyze;
  options.strict = a.strict;
  auto report = trace::AnalyzePaths(a.paths, options);
  if (!report.ok()) return ReportAndExitCode("trace analyze", report.status());
  const trace::Report& rep = *report;
  for (const std::string& w : rep.warnings)
    std::fprintf(stderr, "trainscope trace analyze: warning: %s\n", w.c_str());
  for (const trace::SkippedFile& f : rep.skipped)
    std::fprintf(stderr, "trainscope trace analyze: warning: skipped %s\n", f.reason.c_str());
  if (!a.export_path.empty()) {
    absl::Status s = WriteFileAtomic(export_target, trace::ExportChromeTrace(rep).dump() + "\n");
    if (!s.ok()) return ReportAndExitCode("trace analyze", s);
  }
  if (a.json) {
    std::cout << trace::ReportToJson(rep).dump(2) << "\n";
  } else {
    std::cout << trace::ReportToText(rep);
    if (!a.export_path.empty())
      std::cout << "\nexported the per-step summary to " << a.export_path
                << " (open it in https://ui.perfetto.dev)\n";
  }
  return trace::HasErrorFinding(rep) ? kExitProblems : kExitOk;
}

}  // namespace

void RegisterTraceCommand(CLI::App& parent, CommandContext& ctx) {
  CLI::App* cmd = parent.add_subcommand("trace", "profiler trace analysis");
  cmd->require_subcommand(1);
  auto args = std::make_shared<TraceArgs>();
  CLI::App* an = cmd->add_subcommand(
      "analyze",
      "per-rank, per-step time breakdown, iteration gap, top operators, stragglers and findings "
      "from PyTorch/Kineto Chrome traces (.json, .json.gz), torch_npu output, or trainscope "
      "phase logs (.jsonl); one file or directory per rank, or one Ascend cluster "
      "(msprof-analyze's cluster_analysis_output, or a folder of *_ascend_pt rank folders)");
  an->add_option("paths", args->paths, "trace files or directories (one per rank)")->required();
  an->add_flag("--json", args->json, "print the analysis as JSON");
  an->add_option("--export", args->export_path,
                 "write a Chrome trace of the per-step summary (opens in Perfetto); refused "
                 "(exit 2) when it is one of the traces read; a symlink is written through "
                 "(its target is replaced, the link stays)");
  an->add_option("--gap-threshold", args->analyze.iteration_gap_threshold_pct,
                 "flag steps whose iteration gap exceeds this percentage (default 20)");
  an->add_option("--top", args->analyze.top_k, "rows in the top operator/kernel tables (10)");
  an->add_flag("--strict", args->strict, "bad records in a trace are an error (exit 2)");
  an->add_flag("--include-last-step", args->analyze.include_last_step,
               "keep the last ProfilerStep and the device work it launched (HTA drops them: "
               "include_last_profiler_step=False)");
  an->add_flag("--ns-precision", args->analyze.ns_precision,
               "keep fractional-us times to the ns (HTA rounds ts up and end down to whole us)");
  an->callback([&ctx, args] { ctx.exit_code = RunAnalyze(*args); });
}

}  // namespace trainscope::cli
