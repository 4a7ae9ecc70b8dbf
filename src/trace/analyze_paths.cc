// `trace analyze` over paths, shared by the CLI and the Python module: check and expand the
// paths, read and analyse one rank at a time, number the unranked traces, combine. Every file
// is looked at and read through AnalyzePathsOptions::os.
#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "trace/analysis_internal.h"
#include "trace/ascend_cluster.h"
#include "trace/chrome_reader.h"
#include "trace/windows.h"
#include "trainscope/core/paths.h"
#include "trainscope/core/status.h"
#include "trainscope/trace/analysis.h"
#include "trainscope/trace/trace.h"

namespace trainscope::trace {
namespace {

// What the first pass keeps of one file: its own analysis, its process and time range.
struct FileResult {
  RankResult result;
  std::string key;  // internal::ProcessKey
  int64_t first_ns = INT64_MAX, last_ns = INT64_MIN;
};

// The windows of one rank (the files of one process, sorted by time) as one rank: the files
// are read again one by one, each window's last step dropped as HTA does, their events analysed
// together (the figures are over all the windows' steps), the temporal breakdown the sum of
// the windows' (the time between windows is no one's idle time).
absl::StatusOr<RankResult> AnalyzeWindows(const std::vector<FileResult*>& files,
                                          const AnalyzeOptions& opt, const ReadOptions& read) {
  RankTrace merged;
  std::vector<RankResult> per_window;
  for (const FileResult* f : files) {
    TS_ASSIGN_OR_RETURN(RankTrace t, ReadRankTrace(f->result.path, read));
    internal::DropLastStepLikeHta(opt, &t);
    internal::AppendWindow(std::move(t), &merged);
    per_window.push_back(f->result);
  }
  AnalyzeOptions all = opt;
  all.include_last_step = true;  // each window's last step is already out (or kept)
  RankResult r = AnalyzeRank(&merged, all);
  internal::SumWindowBreakdowns(per_window, &r);
  r.findings.clear();
  internal::RankFindings(opt, &r);
  return r;
}

// Groups the files by process (internal::ProcessKey), in order of first appearance, and makes
// each group one rank with its windows listed.
absl::StatusOr<std::vector<RankResult>> GroupWindows(std::vector<FileResult> files,
                                                     const AnalyzeOptions& opt,
                                                     const ReadOptions& read) {
  std::vector<std::vector<FileResult*>> groups;
  std::map<std::string, size_t> group_of;
  for (FileResult& f : files) {
    auto [it, inserted] = group_of.try_emplace(f.key, groups.size());
    if (inserted) groups.emplace_back();
    groups[it->second].push_back(&f);
  }
  std::vector<RankResult> ranks;
  for (std::vector<FileResult*>& g : groups) {
    std::stable_sort(g.begin(), g.end(), [](const FileResult* a, const FileResult* b) {
      return a->first_ns < b->first_ns;
    });
    const int64_t t0 = g[0]->first_ns == INT64_MAX ? 0 : g[0]->first_ns;
    std::vector<WindowResult> windows;
    for (const FileResult* f : g) {
      WindowResult w{f->result.path, {}, 0, 0, f->result.MeanStepUs()};
      for (const StepResult& s : f->result.steps) w.steps.push_back(s.step);
      if (f->first_ns <= f->last_ns) {
        w.start_us = (f->first_ns - t0) / 1e3;
        w.end_us = (f->last_ns - t0) / 1e3;
      }
      windows.push_back(std::move(w));
    }
    if (g.size() == 1) {
      ranks.push_back(std::move(g[0]->result));
    } else {
      TS_ASSIGN_OR_RETURN(RankResult r, AnalyzeWindows(g, opt, read));
      ranks.push_back(std::move(r));
    }
    ranks.back().windows = std::move(windows);
  }
  return ranks;
}

}  // namespace

absl::Status CheckTracePaths(const std::vector<std::string>& paths, Os* os) {
  // A trace is a regular file or a directory; anything else (/dev/zero, a FIFO, a socket) is
  // refused from its stat() alone, so a FIFO without a writer cannot block us.
  for (const std::string& p : paths) {
    // A missing path: expansion says.
    if (!os->FileExists(p) || os->IsDirectory(p) || os->IsRegularFile(p)) continue;
    // Neither (only the real machine has those): core/paths.h names the kind of file.
    TS_RETURN_IF_ERROR(CheckRegularFile(
        p, "traces are read from regular files (.json, .json.gz, .jsonl) or directories"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Report> AnalyzePaths(const std::vector<std::string>& paths,
                                    const AnalyzePathsOptions& options) {
  Os* os = options.os;
  ReadOptions read;
  read.os = os;
  TS_RETURN_IF_ERROR(CheckTracePaths(paths, os));
  // An Ascend cluster (ascend_cluster.h) is read apart; its rank folders stay per-rank input.
  const internal::ClusterPaths cluster_paths = internal::SplitClusterPaths(paths, os);
  TS_ASSIGN_OR_RETURN(std::optional<internal::ClusterInput> cluster,
                      internal::ReadClusterPaths(cluster_paths, os));
  std::vector<std::string> files;
  if (!cluster_paths.rest.empty()) {
    TS_ASSIGN_OR_RETURN(files, ExpandTracePaths(cluster_paths.rest, os));
  }
  // One rank at a time: read, analyse, keep the result, free the events (memory stays at one
  // rank's event table however many ranks are given).
  std::vector<FileResult> results;
  std::set<int> used_ranks;
  std::vector<std::string> warnings;
  // A file that was named must be a trace; one found in a directory that turns out not to be
  // one (HTA's folders hold execution traces and notes too) is skipped and listed, as HTA
  // skips it.
  const std::set<std::string> named(paths.begin(), paths.end());
  std::vector<SkippedFile> skipped;
  for (const std::string& p : files) {
    // Named or found, an execution trace is HTA's companion file, not a mistake: listed.
    if (std::string schema = internal::ExecutionTraceSchema(p, os); !schema.empty()) {
      skipped.push_back({p, absl::StrCat(p, ": a PyTorch execution trace (schema ", schema,
                                         "), not a profiler trace")});
      continue;
    }
    auto t = ReadRankTrace(p, read);
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
    FileResult f;
    f.key = internal::ProcessKey(*t);
    for (const Event& e : t->events) {
      f.first_ns = std::min(f.first_ns, e.ts_ns);
      f.last_ns = std::max(f.last_ns, e.end_ns());
    }
    f.result = AnalyzeRank(&*t, options.analyze);
    results.push_back(std::move(f));
  }
  if (cluster && !cluster->ranks_from_folders) {
    for (RankTrace& t : internal::ClusterRankTraces(*cluster)) {
      used_ranks.insert(t.rank);
      FileResult f;
      f.key = absl::StrCat("cluster rank ", t.rank);  // one file, a rank per row group
      f.result = AnalyzeRank(&t, options.analyze);
      results.push_back(std::move(f));
    }
  }
  TS_ASSIGN_OR_RETURN(std::vector<RankResult> ranks,
                      GroupWindows(std::move(results), options.analyze, read));
  // Traces without a rank (no distributedInfo, no number in the name): next free numbers.
  int next = 0;
  for (RankResult& r : ranks) {
    if (r.rank >= 0) continue;
    while (used_ranks.count(next)) ++next;
    r.rank = next++;
    r.rank_source = "order";
    for (Finding& f : r.findings) {
      f.rank = r.rank;
      if (f.title.rfind("rank -1", 0) == 0)
        f.title = "rank " + std::to_string(r.rank) + f.title.substr(7);
    }
  }
  if (ranks.empty() && !cluster) {
    // The first reason names a file: an execution trace given alone says what it is.
    return absl::InvalidArgumentError(
        absl::StrCat("no traces among the files given (", skipped.size(), " skipped: not a trace",
                     skipped.empty() ? "" : absl::StrCat("; first: ", skipped[0].reason), ")"));
  }
  Report rep = CombineRanks(std::move(ranks), options.analyze);
  rep.skipped = std::move(skipped);
  rep.warnings = std::move(warnings);
  if (cluster) {
    internal::AnalyzeCluster(*cluster, options.analyze, &rep);
    if (options.strict) {
      for (const internal::ClusterFile& f : cluster->files)
        if (f.bad_records > 0)
          return absl::InvalidArgumentError(
              absl::StrCat(f.problems.empty() ? f.path : f.problems[0], "; ", f.path,
                           ": bad records (--strict)"));
    }
  }
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
