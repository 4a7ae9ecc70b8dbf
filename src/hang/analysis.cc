// Matching every process group's collectives across its member ranks.
//
// Per group: each member's entries of the group, by collective_seq_id (ops of one coalesced
// group share an id: they form one "slot", compared op by op). Buffers that wrapped by
// different amounts are aligned: only sequence ids that every member still holds (from the
// largest first id on) are compared. Then, from the oldest id on:
//  - every member has the id: compare the slots (fr_trace's rules, match.cc). The first
//    difference is a finding; who is the culprit is decided by attribution.cc.
//  - some members lack it: if a member completed it, the others took part (a collective
//    cannot complete alone) and their record is merely gone; otherwise members whose last
//    id is below it never joined (not_joined), and members without a dump are missing_dump.
// After a difference the group's later ids are consequences (a skipped collective shifts
// everything after it), so the walk only reports again once the ranks agree again.
#include <algorithm>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "hang/analysis_internal.h"
#include "hang/attribution.h"

namespace trainscope::hang::internal {
namespace {

bool Completed(const Slot& s) { return !s.ops.empty() && s.ops.back()->state == "completed"; }

// Whether the rank is past the slot: its entry says completed, or its dump's pg_status
// counts the id as completed. torch's gloo recorder never moves an entry past "scheduled",
// so its pg_status is the only progress it reports. That is no proof the rank took part
// (gloo also counts a collective that ended in a timeout), so it only places where ranks
// wait, never excuses a rank that lacks the id.
bool Past(const Slot& s, const Dump& d, int64_t seq) {
  if (Completed(s)) return true;
  if (s.ops.empty()) return false;
  auto st = d.pg_status.find(s.ops.back()->pg_id);
  return st != d.pg_status.end() && seq <= st->second.last_completed;
}

// Slots of one rank in one group: collective_seq_id -> its ops.
std::map<int64_t, Slot> SlotsOf(const Dump& d, const Group& g) {
  std::map<int64_t, Slot> out;
  for (const Entry& e : d.entries) {
    if (e.is_p2p || e.pg_name != g.name || e.collective_seq_id < 0) continue;
    out[e.collective_seq_id].all.push_back(&e);
  }
  for (auto& [seq, slot] : out) {
    for (const Entry* e : slot.all)
      if (slot.all.size() == 1 || !IsCoalescedMarker(*e)) slot.ops.push_back(e);
    if (slot.ops.empty()) slot.ops.push_back(slot.all.back());
  }
  return out;
}

// The first sequence id every member with a dump still holds (alignment of wrapped rings).
int64_t AlignedStart(const std::map<int, std::map<int64_t, Slot>>& slots,
                     const std::map<int, const Dump*>& by_rank, const Group& g) {
  int64_t start = std::numeric_limits<int64_t>::min();
  for (const auto& [rank, s] : slots) {
    if (!s.empty()) {
      start = std::max(start, s.begin()->first);
      continue;
    }
    // No entry of this group left: if its status says it enqueued some, they were overwritten.
    const Dump* d = by_rank.at(rank);
    for (const Entry& e : d->entries) {
      if (e.pg_name != g.name) continue;
      auto st = d->pg_status.find(e.pg_id);
      if (st != d->pg_status.end() && st->second.last_enqueued < (int64_t{1} << 48))
        start = std::max(start, st->second.last_enqueued + 1);
      break;
    }
  }
  return start;
}

void WalkGroup(const std::vector<Dump>& dumps, const Group& g, const std::vector<int>& absent,
               const std::vector<std::string>& corrupt_names, std::vector<Candidate>* out) {
  std::map<int, const Dump*> by_rank;
  for (const Dump& d : dumps)
    if (std::binary_search(g.with_dump.begin(), g.with_dump.end(), d.rank)) by_rank[d.rank] = &d;
  std::map<int, std::map<int64_t, Slot>> slots;
  for (const auto& [rank, d] : by_rank) slots[rank] = SlotsOf(*d, g);
  int64_t start = AlignedStart(slots, by_rank, g);
  // The ids any member holds, from the aligned start on (ids held by none say nothing).
  std::set<int64_t> ids;
  for (const auto& [rank, s] : slots)
    for (auto it = s.lower_bound(start); it != s.end(); ++it) ids.insert(it->first);
  GroupWalk walk(g, slots);
  bool desynced = false;
  bool missing_reported = false;
  const size_t found_before = out->size();
  int64_t all_wait_seq = -1;  // the last id every member with a dump holds and waits in
  std::vector<int> all_waiting;
  for (int64_t seq : ids) {
    std::vector<int> have, lack, waiting;
    bool any_completed = false;
    for (const auto& [rank, s] : slots) {
      auto it = s.find(seq);
      if (it == s.end()) {
        lack.push_back(rank);
        continue;
      }
      have.push_back(rank);
      any_completed = any_completed || Completed(it->second);
      if (!Past(it->second, *by_rank.at(rank), seq)) waiting.push_back(rank);
    }
    if (have.empty()) continue;
    if (!lack.empty()) {
      if (any_completed) continue;  // the others' records are gone, not their part
      std::vector<int> behind;
      for (int r : lack)
        if (slots[r].empty() || slots[r].rbegin()->first < seq) behind.push_back(r);
      if (behind.empty()) continue;
      if (!desynced) out->push_back(walk.NotJoined(seq, behind, have));
      break;  // everything later is missing on them too
    }
    if (!g.missing.empty() && !waiting.empty() && !missing_reported) {
      out->push_back(walk.MissingDump(seq, waiting, corrupt_names));
      missing_reported = true;
    }
    if (waiting.size() == have.size()) {
      all_wait_seq = seq;
      all_waiting = waiting;
    }
    std::optional<Candidate> c = walk.Compare(seq);
    if (!c) {
      desynced = false;
      walk.Remember(seq);
      continue;
    }
    if (!desynced) out->push_back(*c);
    desynced = true;
  }
  if (!g.missing.empty() && !missing_reported) {
    std::vector<int> none;
    out->push_back(walk.MissingDump(-1, none, corrupt_names));
  }
  // Every member with a dump waits in the same collective and nothing else explains it: when
  // the membership only comes from the entries (torch's gloo dumps name no group in
  // pg_config), the member they wait for is one that left no dump: a rank of the world absent
  // from the dumps.
  if (g.from_config || out->size() != found_before || absent.empty()) return;
  Group hidden = g;
  hidden.missing = absent;
  GroupWalk hidden_walk(hidden, slots);
  if (all_wait_seq >= 0) {
    Candidate c = hidden_walk.MissingDump(all_wait_seq, all_waiting, corrupt_names);
    c.hang.finding.evidence +=
        "; every member with a dump waits in it, so the member they wait for is among the "
        "ranks without a dump (this dump format names no group's members)";
    out->push_back(std::move(c));
    return;
  }
  // A group only one dumped rank knows, holding that rank's last collective: its other
  // members left no dump. gloo ends a collective whose peer is gone with an error (and counts
  // it as completed), so the rank stopped there because of them, not on its own.
  if (g.with_dump.size() != 1) return;
  const Dump& d = *by_rank.at(g.with_dump[0]);
  const Entry* last = d.entries.empty() ? nullptr : &d.entries.back();
  if (last == nullptr || last->is_p2p || last->pg_name != g.name || last->collective_seq_id < 0)
    return;
  Candidate c = hidden_walk.MissingDump(last->collective_seq_id, {d.rank}, corrupt_names);
  const std::string who = RanksLabel(absent);
  c.hang.waiting_ranks = {d.rank};
  c.hang.finding.title = who + " left no dump; rank " + std::to_string(d.rank) +
                         "'s last collective, " + last->op + " #" +
                         std::to_string(last->collective_seq_id) + " of " + GroupLabel(g) +
                         ", has no other member with a dump, so rank " + std::to_string(d.rank) +
                         " stopped there because of " + who + " (a peer that is gone ends it).";
  c.hang.finding.evidence +=
      "; no other dump holds the group, so its other members are among the ranks without a "
      "dump (this dump format names no group's members)";
  out->push_back(std::move(c));
}

// The ranks of the world (every rank below the largest rank, world size or group member
// seen) without a usable dump.
std::vector<int> AbsentRanks(const std::vector<Dump>& dumps, const std::vector<Group>& groups) {
  int world = 0;
  std::set<int> have;
  for (const Dump& d : dumps) {
    have.insert(d.rank);
    world = std::max({world, d.world_size, d.rank + 1});
  }
  for (const Group& g : groups)
    if (!g.members.empty()) world = std::max(world, g.members.back() + 1);
  std::vector<int> absent;
  if (world > (1 << 16)) return absent;  // a corrupt rank number
  for (int r = 0; r < world; ++r)
    if (!have.count(r)) absent.push_back(r);
  return absent;
}

// Point-to-point: each pending send must meet a pending receive on its peer (and the
// reverse), with the same sizes and dtypes. Matched in order per (src, dst) pair.
void WalkP2p(const std::vector<Dump>& dumps, const Group& g, std::vector<Candidate>* out) {
  auto global = [&](int group_rank) {
    return group_rank >= 0 && group_rank < static_cast<int>(g.members.size())
               ? g.members[group_rank]
               : group_rank;
  };
  // (src, dst) global -> pending sends on src / pending receives on dst, in order.
  std::map<std::pair<int, int>, std::vector<std::pair<int, const Entry*>>> sends, recvs;
  std::set<int> dumped(g.with_dump.begin(), g.with_dump.end());
  for (const Dump& d : dumps) {
    if (!dumped.count(d.rank)) continue;
    for (const Entry& e : d.entries) {
      if (!e.is_p2p || e.pg_name != g.name || e.state == "completed") continue;
      std::pair<int, int> key{global(e.src), global(e.dst)};
      (e.op == "send" ? sends : recvs)[key].push_back({d.rank, &e});
    }
  }
  for (const auto& [key, list] : sends) {
    auto r = recvs.find(key);
    const Entry& s = *list.front().second;
    if (r == recvs.end()) {
      if (dumped.count(key.second)) out->push_back(P2pNotJoined(g, s, key.second, key.first));
      continue;
    }
    const Entry& v = *r->second.front().second;
    if (s.input_sizes != v.output_sizes && !v.output_sizes.empty())
      out->push_back(P2pMismatch(g, s, v, key, FindingKind::kSizeMismatch));
    else if (!s.input_dtypes.empty() && !v.output_dtypes.empty() &&
             s.input_dtypes != v.output_dtypes)
      out->push_back(P2pMismatch(g, s, v, key, FindingKind::kDtypeMismatch));
  }
  for (const auto& [key, list] : recvs) {
    if (sends.count(key) || !dumped.count(key.first)) continue;
    out->push_back(P2pNotJoined(g, *list.front().second, key.first, key.second));
  }
}

// ---- The first divergence, by training step (dumps whose entries carry `step`) ----
// Where a group's ranks first issue different collectives (sequence id k), each rank's
// collectives of its step at k so far are compared with the complete steps before, which
// every rank issued alike (they all agree before k). A rank whose step so far begins like one
// of those steps carried on as before; a rank whose step does not left the pattern there (it
// skipped a collective, or called another one). This is the ranks' own history deciding, so it
// holds with two ranks, where there is no majority, and it names the step. What follows in
// that group (gloo's size error, a timeout in a later barrier) is a consequence.

std::string StepKey(const Entry& e) {
  return e.op + " " + ShapesText(e.input_sizes) + " " + DtypesText(e.input_dtypes) + " " +
         NormalizeCaller(e.caller);
}

std::string Site(const Entry& e) { return e.caller.empty() ? "" : " ('" + e.caller + "')"; }

// Each rank's collectives of group g (the first op of each sequence id), by sequence id.
std::map<int, std::map<int64_t, const Entry*>> SequencesOf(const std::vector<Dump>& dumps,
                                                           const Group& g) {
  std::map<int, std::map<int64_t, const Entry*>> by_rank;
  for (const Dump& d : dumps) {
    if (!std::binary_search(g.with_dump.begin(), g.with_dump.end(), d.rank)) continue;
    auto& m = by_rank[d.rank];
    for (const Entry& e : d.entries)
      if (!e.is_p2p && e.pg_name == g.name && e.collective_seq_id >= 0 && !IsCoalescedMarker(e))
        m.emplace(e.collective_seq_id, &e);
  }
  return by_rank;
}

// The keys of rank m's collectives in step `step`, from sequence id `from` up to `to`.
std::vector<std::string> StepPrefix(const std::map<int64_t, const Entry*>& m, int64_t step,
                                    int64_t to) {
  std::vector<std::string> keys;
  for (auto it = m.begin(); it != m.end() && it->first <= to; ++it)
    if (it->second->step == step) keys.push_back(StepKey(*it->second));
  return keys;
}

std::optional<Candidate> StepDivergence(const std::vector<Dump>& dumps, const Group& g) {
  const auto by_rank = SequencesOf(dumps, g);
  if (by_rank.size() < 2) return std::nullopt;
  int64_t start = std::numeric_limits<int64_t>::min();
  for (const auto& [r, m] : by_rank) {
    if (m.empty()) return std::nullopt;
    start = std::max(start, m.begin()->first);
  }
  const auto& first = by_rank.begin()->second;
  int64_t k = -1;
  for (auto it = first.lower_bound(start); it != first.end() && k < 0; ++it) {
    for (const auto& [r, m] : by_rank) {
      auto e = m.find(it->first);
      if (e == m.end()) return std::nullopt;  // a rank not that far: no divergence to name
      if (e->second->step < 0) return std::nullopt;
      if (StepKey(*e->second) != StepKey(*it->second)) k = it->first;
    }
  }
  if (k < 0) return std::nullopt;
  std::set<int64_t> current;
  for (const auto& [r, m] : by_rank) current.insert(m.at(k)->step);
  // The complete steps before k (all ranks alike there), without the first one held when the
  // ring wrapped (it may have lost its beginning).
  std::map<int64_t, std::vector<std::string>> history;
  for (auto it = first.lower_bound(start); it != first.end() && it->first < k; ++it)
    if (!current.count(it->second->step)) history[it->second->step].push_back(StepKey(*it->second));
  if (start > 1 && !history.empty()) history.erase(history.begin());
  if (history.empty()) return std::nullopt;
  std::vector<int> ref, culprits;
  for (const auto& [r, m] : by_rank) {
    const std::vector<std::string> prefix = StepPrefix(m, m.at(k)->step, k);
    const std::vector<std::string>* like = nullptr;
    for (const auto& [step, keys] : history)
      if (prefix.size() <= keys.size() && std::equal(prefix.begin(), prefix.end(), keys.begin()))
        like = &keys;
    if (like == nullptr) {
      culprits.push_back(r);
    } else {
      ref.push_back(r);
    }
  }
  if (ref.empty() || culprits.empty()) return std::nullopt;
  const Entry& re = *by_rank.at(ref.front()).at(k);
  const Entry& ce = *by_rank.at(culprits.front()).at(k);
  // Skipped: in an earlier step that began like the reference's step so far, the culprit's
  // collective at k came later.
  const std::vector<std::string> ref_prefix = StepPrefix(by_rank.at(ref.front()), re.step, k);
  bool skip = false;
  for (const auto& [step, keys] : history)
    skip = skip || (ref_prefix.size() < keys.size() &&
                    std::equal(ref_prefix.begin(), ref_prefix.end(), keys.begin()) &&
                    std::find(keys.begin() + static_cast<long>(ref_prefix.size()), keys.end(),
                              StepKey(ce)) != keys.end());
  Candidate c;
  HangFinding& f = c.hang;
  f.pg = g.name;
  f.pg_desc = g.desc;
  f.collective_seq_id = k;
  f.op = re.op;
  f.culprit_ranks = culprits;
  f.waiting_ranks = ref;
  f.caller = re.caller;
  c.time_ns = std::min(re.time_created_ns > 0 ? re.time_created_ns : ce.time_created_ns,
                       ce.time_created_ns > 0 ? ce.time_created_ns : re.time_created_ns);
  const std::string at =
      " #" + std::to_string(k) + " of " + GroupLabel(g) + " at step " + std::to_string(ce.step);
  const std::string waits = RanksLabel(ref) + (ref.size() == 1 ? " waits" : " wait");
  std::string why;
  const MatchState m = MatchOps(re, ce, static_cast<int>(g.members.size()), &why);
  f.kind = skip || m == MatchState::kTypeMismatch
               ? (skip ? FindingKind::kNotJoined : FindingKind::kTypeMismatch)
           : m == MatchState::kDtypeMismatch ? FindingKind::kDtypeMismatch
                                             : FindingKind::kSizeMismatch;
  if (skip) {
    f.finding.title = RanksLabel(culprits) + " skipped " + re.op + at + Site(re) + ", which " +
                      RanksLabel(ref) + " issued, and went on with its next collective " + ce.op +
                      Site(ce) + "; " + waits +
                      " for it there. This is where the ranks' collectives "
                      "first part; the errors and timeouts after it follow from it.";
  } else {
    f.finding.title = RanksLabel(culprits) + " issued " + ce.op + " " + ShapesText(ce.input_sizes) +
                      Site(ce) + " as" + at + " where " + RanksLabel(ref) + " issued " + re.op +
                      " " + ShapesText(re.input_sizes) + Site(re) +
                      ", as in the steps before. This is "
                      "where the ranks' collectives first part.";
  }
  f.finding.evidence = "steps " + std::to_string(history.begin()->first) + "-" +
                       std::to_string(history.rbegin()->first) +
                       " issued the same collectives on every "
                       "rank; at step " +
                       std::to_string(ce.step) + " the collectives of " + RanksLabel(ref) +
                       " so far begin like an earlier step's, those of " + RanksLabel(culprits) +
                       " (up to #" + std::to_string(k) + " " + ce.op + " " +
                       ShapesText(ce.input_sizes) + ") like none";
  f.finding.fix =
      "look at the code path of " + RanksLabel(culprits) + " in step " + std::to_string(ce.step) +
      (re.caller.empty() ? "" : " around " + re.caller) +
      ": a rank-dependent or data-dependent branch (an early continue, an `if rank ...`) "
      "left the collective out or called another; every rank must issue the same "
      "collectives in the same order";
  return c;
}

// The group's finding at the divergence (or the group's first) is replaced by the step
// verdict, which comes first among the group's findings.
void LeadWithStepDivergence(const std::vector<Dump>& dumps, const Group& g, size_t first,
                            std::vector<Candidate>* out) {
  std::optional<Candidate> c = StepDivergence(dumps, g);
  if (!c) return;
  for (size_t i = first; i < out->size(); ++i) {
    HangFinding& f = (*out)[i].hang;
    if (f.kind == FindingKind::kMissingDump || f.collective_seq_id != c->hang.collective_seq_id)
      continue;
    if (c->time_ns <= 0) c->time_ns = (*out)[i].time_ns;
    (*out)[i] = std::move(*c);
    return;
  }
  out->insert(out->begin() + static_cast<long>(first), std::move(*c));
}

}  // namespace

std::vector<HangFinding> FindProblems(const std::vector<Dump>& dumps,
                                      const std::vector<Group>& groups,
                                      const std::vector<std::string>& corrupt_names,
                                      std::vector<WaitFor>* waits) {
  std::vector<Candidate> all;
  const std::vector<int> absent = AbsentRanks(dumps, groups);
  for (const Group& g : groups) {
    const size_t first = all.size();
    WalkGroup(dumps, g, absent, corrupt_names, &all);
    LeadWithStepDivergence(dumps, g, first, &all);
    WalkP2p(dumps, g, &all);
  }
  // The waits before duplicates are merged: each waiting rank waits for each culprit.
  for (const Candidate& c : all) {
    if (waits == nullptr) break;
    for (int w : c.hang.waiting_ranks)
      for (int b : c.hang.culprit_ranks)
        if (w != b) waits->push_back({w, b});
  }
  // One missing_dump finding per set of missing ranks: the one where others wait, in the
  // largest group.
  std::vector<Candidate> kept;
  for (Candidate& c : all) {
    if (c.hang.kind != FindingKind::kMissingDump) {
      kept.push_back(std::move(c));
      continue;
    }
    auto same = std::find_if(kept.begin(), kept.end(), [&](const Candidate& k) {
      return k.hang.kind == FindingKind::kMissingDump &&
             k.hang.culprit_ranks == c.hang.culprit_ranks;
    });
    if (same == kept.end()) {
      kept.push_back(std::move(c));
    } else if ((same->hang.collective_seq_id < 0 && c.hang.collective_seq_id >= 0) ||
               (c.hang.collective_seq_id >= 0 &&
                c.hang.waiting_ranks.size() > same->hang.waiting_ranks.size())) {
      *same = std::move(c);
    }
  }
  // Root cause first: the earliest in time (times are comparable across ranks); findings
  // without times keep the group and sequence order.
  std::stable_sort(kept.begin(), kept.end(), [](const Candidate& a, const Candidate& b) {
    int64_t ta = a.time_ns > 0 ? a.time_ns : std::numeric_limits<int64_t>::max();
    int64_t tb = b.time_ns > 0 ? b.time_ns : std::numeric_limits<int64_t>::max();
    return ta < tb;
  });
  std::vector<HangFinding> findings;
  for (Candidate& c : kept) findings.push_back(std::move(c.hang));
  return findings;
}

}  // namespace trainscope::hang::internal
