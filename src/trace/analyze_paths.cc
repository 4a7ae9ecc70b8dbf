// `trace analyze` over paths, shared by the CLI and the Python module: check and expand the
// paths, read and analyse one rank at a time, number the unranked traces, combine.
#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "trace/chrome_reader.h"
#include "trainscope/core/paths.h"
#include "trainscope/core/status.h"
#include "trainscope/trace/analysis.h"
#include "trainscope/trace/trace.h"

namespace trainscope::trace {
namespace {

// A profiler with a repeating schedule (torch.profiler.schedule(repeat=N) with
// tensorboard_trace_handler) writes one file per window and rank, but a rank is one process
// and one timeline: of the files that name the same rank, the latest window (the one whose
// events start last; the later path on a tie) is analysed and the others are listed as
// skipped. `start_ns` is each result's first event time (INT64_MAX without events).
void KeepLatestWindowPerRank(const std::vector<int64_t>& start_ns, std::vector<RankResult>* results,
                             std::vector<SkippedFile>* skipped) {
  std::map<int, size_t> latest;  // rank -> index in *results
  for (size_t i = 0; i < results->size(); ++i) {
    auto [it, inserted] = latest.try_emplace((*results)[i].rank, i);
    if (!inserted && start_ns[i] >= start_ns[it->second]) it->second = i;
  }
  if (latest.size() == results->size()) return;
  std::vector<RankResult> kept;
  for (size_t i = 0; i < results->size(); ++i) {
    RankResult& r = (*results)[i];
    const size_t keep = latest[r.rank];
    if (keep == i) {
      kept.push_back(std::move(r));
      continue;
    }
    skipped->push_back(
        {r.path, absl::StrCat(r.path, ": an earlier profiler window of rank ", r.rank, " (",
                              (*results)[keep].path, " is analysed)")});
  }
  *results = std::move(kept);
}

}  // namespace

absl::Status CheckTracePaths(const std::vector<std::string>& paths) {
  // A trace is a regular file or a directory; anything else (/dev/zero, a FIFO, a socket) is
  // refused from its stat() alone, so a FIFO without a writer cannot block us.
  for (const std::string& p : paths) {
    struct stat st;
    if (::stat(p.c_str(), &st) != 0 || S_ISDIR(st.st_mode)) continue;  // expansion says
    TS_RETURN_IF_ERROR(CheckRegularFile(
        p, "traces are read from regular files (.json, .json.gz, .jsonl) or directories"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Report> AnalyzePaths(const std::vector<std::string>& paths,
                                    const AnalyzePathsOptions& options) {
  TS_RETURN_IF_ERROR(CheckTracePaths(paths));
  TS_ASSIGN_OR_RETURN(std::vector<std::string> files, ExpandTracePaths(paths));
  // One rank at a time: read, analyse, keep the result, free the events (memory stays at one
  // rank's event table however many ranks are given).
  std::vector<RankResult> results;
  std::vector<int64_t> start_ns;  // per result: its first event
  std::set<int> used_ranks;
  std::vector<size_t> unranked;
  std::vector<std::string> warnings;
  // A file that was named must be a trace; one found in a directory that turns out not to be
  // one (HTA's folders hold execution traces and notes too) is skipped and listed, as HTA
  // skips it.
  const std::set<std::string> named(paths.begin(), paths.end());
  std::vector<SkippedFile> skipped;
  for (const std::string& p : files) {
    // Named or found, an execution trace is HTA's companion file, not a mistake: listed.
    if (std::string schema = internal::ExecutionTraceSchema(p); !schema.empty()) {
      skipped.push_back({p, absl::StrCat(p, ": a PyTorch execution trace (schema ", schema,
                                         "), not a profiler trace")});
      continue;
    }
    auto t = ReadRankTrace(p);
    const bool from_dir = !named.count(p);
    if (!t.ok() && from_dir && absl::IsInvalidArgument(t.status())) {
      skipped.push_back({p, std::string(t.status().message())});
      continue;
    }
    if (t.ok() && from_dir && t->events.empty() && t->ascend_steps.empty() &&
        t->phase_steps.empty()) {
      skipped.push_back({p, p + ": no usable events in the trace"});
      continue;
    }
    if (!t.ok()) return t.status();
    const ParseStats& s = t->stats;
    if (HasBadRecords(s)) {
      std::vector<std::string> lines = {absl::StrCat(p, ": ", DescribeBadRecords(s))};
      for (const std::string& w : s.warnings) lines.push_back(absl::StrCat(p, ": ", w));
      if (options.strict) {
        return absl::InvalidArgumentError(
            absl::StrCat(absl::StrJoin(lines, "; "), "; ", p, ": bad records (--strict)"));
      }
      warnings.insert(warnings.end(), lines.begin(), lines.end());
    }
    if (t->events.empty() && t->ascend_steps.empty() && t->phase_steps.empty()) {
      return absl::InvalidArgumentError(p + ": no usable events in the trace");
    }
    if (t->rank >= 0) used_ranks.insert(t->rank);
    const bool has_rank = t->rank >= 0;
    int64_t first_ns = INT64_MAX;
    for (const Event& e : t->events) first_ns = std::min(first_ns, e.ts_ns);
    start_ns.push_back(first_ns);
    results.push_back(AnalyzeRank(&*t, options.analyze));
    if (!has_rank) unranked.push_back(results.size() - 1);
  }
  // Traces without a rank (no distributedInfo, no number in the name): next free numbers.
  int next = 0;
  for (size_t i : unranked) {
    while (used_ranks.count(next)) ++next;
    RankResult& r = results[i];
    r.rank = next++;
    r.rank_source = "order";
    for (Finding& f : r.findings) {
      f.rank = r.rank;
      if (f.title.rfind("rank -1", 0) == 0)
        f.title = "rank " + std::to_string(r.rank) + f.title.substr(7);
    }
  }
  KeepLatestWindowPerRank(start_ns, &results, &skipped);
  if (results.empty()) {
    // The first reason names a file: an execution trace given alone says what it is.
    return absl::InvalidArgumentError(
        absl::StrCat("no traces among the files given (", skipped.size(), " skipped: not a trace",
                     skipped.empty() ? "" : absl::StrCat("; first: ", skipped[0].reason), ")"));
  }
  Report rep = CombineRanks(std::move(results), options.analyze);
  rep.skipped = std::move(skipped);
  rep.warnings = std::move(warnings);
  return rep;
}

bool HasErrorFinding(const Report& report) {
  for (const auto& f : report.findings)
    if (f.severity == Severity::kError) return true;
  for (const auto& r : report.ranks)
    for (const auto& f : r.findings)
      if (f.severity == Severity::kError) return true;
  return false;
}

}  // namespace trainscope::trace
