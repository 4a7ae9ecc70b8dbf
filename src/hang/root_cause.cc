// The root cause across process groups: who waits for whom, followed to the ranks that
// block others and wait for no one.
//
// Every finding of every group says "these ranks wait for those" (a collective not joined: the
// ranks in it wait for the members that never came; a missing dump: they wait for the rank
// without one; a mismatch: the reference ranks wait for the culprit). Put together, the waits
// form a graph over global ranks. A rank that others wait for but that waits for no one is a
// root: it is asleep, stuck in its own code, dead or done, and everything else follows from it.
// A rank the others wait for that itself waits in another group is a consequence, not a
// cause. Where the waits form a cycle (A waits for B in one group, B for A in another: a
// deadlock of two orders), the ranks of a cycle nothing leads out of are the roots together.
// The graph is small (one node per rank), so each rank's reach is a plain breadth-first search.
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "hang/analysis_internal.h"
#include "hang/attribution.h"

namespace trainscope::hang::internal {
namespace {

using Graph = std::map<int, std::set<int>>;  // waiter -> the ranks it waits for

// The ranks `from` waits for, directly or through others (without `from` unless in a cycle).
std::set<int> Reach(const Graph& g, int from) {
  std::set<int> seen;
  std::vector<int> todo = {from};
  while (!todo.empty()) {
    int v = todo.back();
    todo.pop_back();
    auto it = g.find(v);
    if (it == g.end()) continue;
    for (int u : it->second)
      if (seen.insert(u).second) todo.push_back(u);
  }
  return seen;
}

bool Subset(const std::vector<int>& a, const std::set<int>& b) {
  for (int x : a)
    if (!b.count(x)) return false;
  return true;
}

std::string Verb(const std::vector<int>& ranks, const char* one, const char* many) {
  return ranks.size() == 1 ? one : many;
}

// "ranks 0, 5 wait in all_reduce #3 of group 1 because of rank 4."
std::string ConsequenceText(const HangFinding& f, const std::vector<int>& roots) {
  std::string where = f.op.empty() ? "" : " in " + f.op;
  if (f.collective_seq_id >= 0) where += " #" + std::to_string(f.collective_seq_id);
  if (f.p2p_seq_id >= 0 && f.collective_seq_id < 0)
    where += " (p2p #" + std::to_string(f.p2p_seq_id) + ")";
  where += " of group " + f.pg + (f.pg_desc.empty() ? "" : " (" + f.pg_desc + ")");
  const std::vector<int>& who = f.waiting_ranks.empty() ? f.culprit_ranks : f.waiting_ranks;
  std::string verb =
      f.waiting_ranks.empty() ? Verb(who, " is stuck", " are stuck") : Verb(who, " waits", " wait");
  return RanksLabel(who) + verb + where + " because of " + RanksLabel(roots) + ".";
}

}  // namespace

void OrderByRootCause(const std::vector<WaitFor>& waits, Report* report) {
  std::vector<HangFinding>& findings = report->findings;
  Graph graph;
  std::set<int> candidates;  // ranks someone waits for, and culprits of proven problems
  for (const WaitFor& w : waits) {
    graph[w.waiter].insert(w.blocker);
    candidates.insert(w.blocker);
  }
  std::set<int> no_dump;
  for (const HangFinding& f : findings) {
    if (f.kind == FindingKind::kMissingDump) {
      no_dump.insert(f.culprit_ranks.begin(), f.culprit_ranks.end());
      continue;
    }
    candidates.insert(f.culprit_ranks.begin(), f.culprit_ranks.end());
  }
  std::map<int, std::set<int>> reach;
  for (const auto& [waiter, blockers] : graph) reach[waiter] = Reach(graph, waiter);
  auto reach_of = [&](int r) -> const std::set<int>& {
    static const std::set<int> kNone;
    auto it = reach.find(r);
    return it == reach.end() ? kNone : it->second;
  };
  // A root: every rank it waits for (transitively) waits for it too (none, or a cycle).
  std::set<int> roots;
  bool cycle = false;
  for (int v : candidates) {
    bool terminal = true;
    for (int u : reach_of(v)) terminal = terminal && (u == v || reach_of(u).count(v));
    if (!terminal) continue;
    roots.insert(v);
    cycle = cycle || !reach_of(v).empty();
  }
  report->root_ranks.assign(roots.begin(), roots.end());
  report->root_cause.clear();
  if (roots.empty()) return;
  // Each finding leads to the roots its culprits are or wait for.
  for (HangFinding& f : findings) {
    std::set<int> led;
    for (int c : f.culprit_ranks) {
      if (roots.count(c)) led.insert(c);
      for (int u : reach_of(c))
        if (roots.count(u)) led.insert(u);
    }
    f.root = !f.culprit_ranks.empty() && Subset(f.culprit_ranks, roots);
    f.consequence_of.assign(led.begin(), led.end());
    f.consequence = f.root || led.empty() ? "" : ConsequenceText(f, f.consequence_of);
  }
  // No finding names roots alone (ranks behind in one collective, some stuck, some waiting
  // elsewhere): the one naming the most roots keeps only them as culprits.
  if (std::none_of(findings.begin(), findings.end(), [](const HangFinding& f) { return f.root; })) {
    HangFinding* best = nullptr;
    for (HangFinding& f : findings) {
      int n = 0;
      for (int c : f.culprit_ranks) n += roots.count(c) ? 1 : 0;
      int best_n = 0;
      if (best)
        for (int c : best->culprit_ranks) best_n += roots.count(c) ? 1 : 0;
      if (n > best_n) best = &f;
    }
    if (best) {
      std::vector<int> kept, others;
      for (int c : best->culprit_ranks) (roots.count(c) ? kept : others).push_back(c);
      best->finding.title += " (" + RanksLabel(others) + Verb(others, " waits", " wait") +
                             " elsewhere: a consequence.)";
      best->culprit_ranks = kept;
      best->root = true;
      best->consequence_of.clear();
      best->consequence.clear();
    }
  }
  // Root findings first (those naming the most roots, then the most waiting ranks, first), then
  // the consequences in their order (earliest first).
  std::stable_sort(findings.begin(), findings.end(),
                   [](const HangFinding& a, const HangFinding& b) {
                     if (a.root != b.root) return a.root;
                     if (!a.root) return false;
                     if (a.culprit_ranks.size() != b.culprit_ranks.size())
                       return a.culprit_ranks.size() > b.culprit_ranks.size();
                     return a.waiting_ranks.size() > b.waiting_ranks.size();
                   });
  std::set<int> blocked;
  for (const auto& [waiter, r] : reach)
    for (int u : r)
      if (roots.count(u) && !roots.count(waiter)) blocked.insert(waiter);
  std::vector<int> root_list(roots.begin(), roots.end());
  std::vector<int> blocked_list(blocked.begin(), blocked.end());
  bool all_missing = true;
  for (int r : roots) all_missing = all_missing && no_dump.count(r);
  std::string why = all_missing ? "left no dump"
                    : cycle     ? "wait for one another only"
                            : Verb(root_list, "waits for no other rank", "wait for no other rank");
  std::string blocks =
      blocked_list.empty() ? "" : Verb(root_list, " blocks ", " block ") + RanksLabel(blocked_list);
  const HangFinding& first = findings.front();
  report->root_cause = "Root cause: " + RanksLabel(root_list) + " (" + why + ")" + blocks +
                       (first.root ? "; " + first.finding.title : ".");
}

}  // namespace trainscope::hang::internal
