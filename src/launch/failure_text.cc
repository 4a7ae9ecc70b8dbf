// What `trainscope launch` says about a failed job: the first failure, what became of the
// other ranks, and where to look next. The other ranks fall in three sets, each said only
// when it is not empty: failed on their own (a non-zero exit or a signal the launcher did
// not send), stopped by the launcher, finished OK. Every rank failing on its own with the
// same outcome is the common case of a broken script or input, and is said so.
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "trainscope/core/run_dir.h"
#include "trainscope/launch/launch.h"

namespace trainscope::launch {
namespace {

std::string Ranks(int n) { return absl::StrCat(n, n == 1 ? " rank" : " ranks"); }

// "exit code 3" / "SIGSEGV" (the signal by number when it has no name here).
std::string Outcome(const RankStatus& s) {
  if (s.exited) return absl::StrCat("exit code ", s.exit_code);
  switch (s.term_signal) {
    case 6:
      return "SIGABRT";
    case 9:
      return "SIGKILL";
    case 11:
      return "SIGSEGV";
    case 15:
      return "SIGTERM";
    default:
      return absl::StrCat("signal ", s.term_signal);
  }
}

Finding DescribeRanks(const LaunchResult& r);

}  // namespace

// When the ranks' flight recorder dumps show a mismatched collective, that verdict (printed
// after this text) is the cause: the ranks' own errors (gloo's size check, a peer's closed
// connection, a watchdog's timeout) follow from it, so the fix points there first.
Finding DescribeFailure(const LaunchResult& r) {
  Finding t = DescribeRanks(r);
  if (r.hang.analyzed && r.hang.problem) {
    t.fix = absl::StrCat(
        "the hang analysis below names where the ranks' collectives parted (flight recorder "
        "dumps and stacks in ",
        run_dir::Join(r.run_dir, run_dir::kHang), "/); the ranks' errors above follow from it");
  }
  return t;
}

const RankStatus* FindRank(const LaunchResult& result, int rank) {
  const RankStatus* found = nullptr;
  for (const RankStatus& s : result.ranks) {
    if (s.rank == rank) found = &s;
  }
  return found;
}

namespace {

Finding DescribeRanks(const LaunchResult& r) {
  Finding t;
  t.severity = Severity::kError;
  t.id = r.timed_out_ranks.empty() ? "launch.rank_failed" : "launch.rank_timed_out";
  t.rank = r.first_failed_rank;
  t.title = r.failure;
  if (!r.timed_out_ranks.empty()) {
    t.fix =
        "the rank above did not exit in time (stuck in a collective, a final barrier or "
        "shutdown?); its log shows where it was";
    return t;
  }
  std::vector<int> own;  // the other ranks that failed on their own
  std::set<std::string> outcomes;
  int stopped = 0, ok = 0;
  for (const RankStatus& s : r.ranks) {
    if (s.stopped_by_us) {
      ++stopped;
    } else if (s.failed()) {
      outcomes.insert(Outcome(s));
      if (s.rank != r.first_failed_rank) own.push_back(s.rank);
    } else {
      ++ok;
    }
  }
  const int others = static_cast<int>(r.ranks.size()) - 1;
  if (others <= 0) {
    t.fix = "read the rank's log above";
    return t;
  }
  if (static_cast<int>(own.size()) == others) {
    absl::StrAppend(&t.title, "; ", others == 1 ? "the other rank" : "the other ",
                    others == 1 ? "" : Ranks(others), " failed on ", others == 1 ? "its" : "their",
                    " own too");
    t.fix =
        outcomes.size() == 1
            ? absl::StrCat("all ", others + 1, " ranks failed on their own (", *outcomes.begin(),
                           "): the same error on every rank points at the script or its "
                           "inputs; read the log above")
            : absl::StrCat("all ", others + 1,
                           " ranks failed on their own, not all alike: read each rank's "
                           "log, starting with the one above");
    return t;
  }
  std::vector<std::string> parts;
  if (!own.empty()) {
    parts.push_back(absl::StrCat(own.size() == 1 ? "rank " : "ranks ", absl::StrJoin(own, ", "),
                                 " failed on ", own.size() == 1 ? "its" : "their", " own too"));
  }
  if (stopped > 0) {
    parts.push_back(absl::StrCat("stopped the other ", Ranks(stopped)));
  }
  if (ok > 0) parts.push_back(absl::StrCat(Ranks(ok), " finished OK"));
  absl::StrAppend(&t.title, "; ", absl::StrJoin(parts, "; "));
  if (own.empty()) {
    t.fix = stopped == 0 ? "read the failing rank's log above; the other ranks finished OK"
                         : "read the failing rank's log above; the others were stopped by the "
                           "launcher, not by their own error";
    return t;
  }
  t.fix = "read the failing ranks' logs, starting with the one above";
  if (outcomes.size() == 1) {
    absl::StrAppend(&t.fix, "; the same ", *outcomes.begin(), " on ", own.size() + 1,
                    " ranks points at the script or its inputs");
  }
  if (stopped > 0) {
    absl::StrAppend(&t.fix, "; ", Ranks(stopped), stopped == 1 ? " was" : " were",
                    " stopped by the launcher, not by ", stopped == 1 ? "its" : "their",
                    " own error");
  }
  return t;
}

}  // namespace
}  // namespace trainscope::launch
