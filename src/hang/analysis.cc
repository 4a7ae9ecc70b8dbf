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
    c.finding.evidence +=
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
  c.finding.waiting_ranks = {d.rank};
  c.finding.sentence = who + " left no dump; rank " + std::to_string(d.rank) +
                       "'s last collective, " + last->op + " #" +
                       std::to_string(last->collective_seq_id) + " of " + GroupLabel(g) +
                       ", has no other member with a dump, so rank " + std::to_string(d.rank) +
                       " stopped there because of " + who + " (a peer that is gone ends it).";
  c.finding.evidence +=
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

}  // namespace

std::vector<HangFinding> FindProblems(const std::vector<Dump>& dumps,
                                      const std::vector<Group>& groups,
                                      const std::vector<std::string>& corrupt_names,
                                      std::vector<WaitFor>* waits) {
  std::vector<Candidate> all;
  const std::vector<int> absent = AbsentRanks(dumps, groups);
  for (const Group& g : groups) {
    WalkGroup(dumps, g, absent, corrupt_names, &all);
    WalkP2p(dumps, g, &all);
  }
  // The waits before duplicates are merged: each waiting rank waits for each culprit.
  for (const Candidate& c : all) {
    if (waits == nullptr) break;
    for (int w : c.finding.waiting_ranks)
      for (int b : c.finding.culprit_ranks)
        if (w != b) waits->push_back({w, b});
  }
  // One missing_dump finding per set of missing ranks: the one where others wait, in the
  // largest group.
  std::vector<Candidate> kept;
  for (Candidate& c : all) {
    if (c.finding.kind != FindingKind::kMissingDump) {
      kept.push_back(std::move(c));
      continue;
    }
    auto same = std::find_if(kept.begin(), kept.end(), [&](const Candidate& k) {
      return k.finding.kind == FindingKind::kMissingDump &&
             k.finding.culprit_ranks == c.finding.culprit_ranks;
    });
    if (same == kept.end()) {
      kept.push_back(std::move(c));
    } else if ((same->finding.collective_seq_id < 0 && c.finding.collective_seq_id >= 0) ||
               (c.finding.collective_seq_id >= 0 &&
                c.finding.waiting_ranks.size() > same->finding.waiting_ranks.size())) {
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
  for (Candidate& c : kept) findings.push_back(std::move(c.finding));
  return findings;
}

}  // namespace trainscope::hang::internal
