// `trainscope trace analyze PATH... [--json] [--export FILE]`: per-rank and per-step breakdown of
// profiler traces, stragglers across ranks, and findings (src/trace).
#include <sys/stat.h>

#include <cstdio>
#include <iostream>
#include <set>
#include <string>
#include <vector>

#include "cli/command.h"
#include "trainscope/core/exit.h"
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

// A trace is a regular file or a directory; anything else (/dev/zero, a FIFO, a socket) is
// refused from its stat() alone, so a FIFO without a writer cannot block us.
absl::Status CheckTraceArgs(const std::vector<std::string>& paths) {
  for (const std::string& p : paths) {
    struct stat st;
    if (::stat(p.c_str(), &st) != 0 || S_ISDIR(st.st_mode)) continue;  // expansion says
    TS_RETURN_IF_ERROR(CheckRegularFile(
        p, "traces are read from regular files (.json, .json.gz, .jsonl) or directories"));
  }
  return absl::OkStatus();
}

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
  if (auto st = CheckTraceArgs(a.paths); !st.ok()) return ReportAndExitCode("trace analyze", st);
  auto paths = trace::ExpandTracePaths(a.paths);
  if (!paths.ok()) return ReportAndExitCode("trace analyze", paths.status());
  std::string export_target;
  if (!a.export_path.empty()) {
    auto t = ExportTarget(a.export_path, *paths);
    if (!t.ok()) return ReportAndExitCode("trace analyze", t.status());
    export_target = *t;
  }
  // One rank at a time: read, analyse, keep the result, free the events (memory stays at one
  // rank's event table however many ranks are given).
  std::vector<trace::RankResult> results;
  std::set<int> used_ranks;
  std::vector<size_t> unranked;
  // A file that was named on the command line must be a trace; one found in a directory that
  // turns out not to be one (HTA's folders hold execution traces and notes too) is skipped and
  // listed, as HTA skips it.
  std::set<std::string> named(a.paths.begin(), a.paths.end());
  std::vector<trace::SkippedFile> skipped;
  for (const std::string& p : *paths) {
    auto t = trace::ReadRankTrace(p);
    bool from_dir = !named.count(p);
    if (!t.ok() && from_dir && absl::IsInvalidArgument(t.status())) {
      skipped.push_back({p, std::string(t.status().message())});
      continue;
    }
    if (t.ok() && from_dir && t->events.empty() && t->ascend_steps.empty() &&
        t->phase_steps.empty()) {
      skipped.push_back({p, p + ": no usable events in the trace"});
      continue;
    }
    if (!t.ok()) return ReportAndExitCode("trace analyze", t.status());
    const auto& s = t->stats;
    if (trace::HasBadRecords(s)) {
      std::fprintf(stderr, "trainscope trace analyze: warning: %s: %s\n", p.c_str(),
                   trace::DescribeBadRecords(s).c_str());
      for (const std::string& w : s.warnings)
        std::fprintf(stderr, "trainscope trace analyze: warning: %s: %s\n", p.c_str(), w.c_str());
      if (a.strict) {
        std::fprintf(stderr, "trainscope trace analyze: error: %s: bad records (--strict)\n",
                     p.c_str());
        return kExitUsage;
      }
    }
    if (t->events.empty() && t->ascend_steps.empty() && t->phase_steps.empty()) {
      return ReportAndExitCode("trace analyze",
                               absl::InvalidArgumentError(p + ": no usable events in the trace"));
    }
    if (t->rank >= 0) used_ranks.insert(t->rank);
    bool has_rank = t->rank >= 0;
    results.push_back(trace::AnalyzeRank(&*t, a.analyze));
    if (!has_rank) unranked.push_back(results.size() - 1);
  }
  // Traces without a rank (no distributedInfo, no number in the name): next free numbers.
  int next = 0;
  for (size_t i : unranked) {
    while (used_ranks.count(next)) ++next;
    trace::RankResult& r = results[i];
    r.rank = next++;
    r.rank_source = "order";
    for (trace::Finding& f : r.findings) {
      f.rank = r.rank;
      if (f.title.rfind("rank -1", 0) == 0)
        f.title = "rank " + std::to_string(r.rank) + f.title.substr(7);
    }
  }
  for (const trace::SkippedFile& f : skipped)
    std::fprintf(stderr, "trainscope trace analyze: warning: skipped %s\n", f.reason.c_str());
  if (results.empty()) {
    return ReportAndExitCode(
        "trace analyze",
        absl::InvalidArgumentError("no traces among the files given (" +
                                   std::to_string(skipped.size()) + " skipped: not a trace)"));
  }
  trace::Report rep = trace::CombineRanks(std::move(results), a.analyze);
  rep.skipped = std::move(skipped);
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
  for (const auto& f : rep.findings)
    if (f.severity == Severity::kError) return kExitProblems;
  for (const auto& r : rep.ranks)
    for (const auto& f : r.findings)
      if (f.severity == Severity::kError) return kExitProblems;
  return kExitOk;
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
      "phase logs (.jsonl); one file or directory per rank");
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
