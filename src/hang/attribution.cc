// Culprit attribution (see attribution.h for the order of the evidence) and the text of
// the findings.
#include "hang/attribution.h"

#include <algorithm>
#include <limits>
#include <set>
#include <string>

#include "trainscope/core/run_dir.h"

namespace trainscope::hang::internal {
namespace {

// What must agree across ranks. Not the sizes of an all_to_all (any variant): each rank
// splits its own input, so they differ legitimately.
std::string OpsKey(const Slot& s) {
  std::string k;
  for (const Entry* e : s.ops) {
    const bool sized = OpFamily(e->op) != "all_to_all";
    k += e->op + (sized ? ShapesText(e->input_sizes) + ShapesText(e->output_sizes) : "") +
         DtypesText(e->input_dtypes) + DtypesText(e->output_dtypes) + ";";
  }
  return k;
}
// "all_reduce [[512]] Float at 'step 5 grad bucket 1'", for the evidence.
std::string OpsText(const Slot& s) {
  std::string t;
  for (const Entry* e : s.ops) {
    if (!t.empty()) t += " + ";
    t += e->op + " " + ShapesText(e->input_sizes) + " " + DtypesText(e->input_dtypes);
  }
  if (!s.ops.empty() && !s.ops.front()->caller.empty()) t += " at '" + s.ops.front()->caller + "'";
  return t;
}
std::string Caller(const Slot& s) { return s.ops.empty() ? "" : s.ops.front()->caller; }
std::string FullKey(const Slot& s) { return OpsKey(s) + "|" + Caller(s); }
std::string NormKey(const Slot& s) { return OpsKey(s) + "|" + NormalizeCaller(Caller(s)); }

std::string Quoted(const std::string& s) { return "'" + s + "'"; }

// Where the code is: the caller tag, else the recorded frames.
std::string Where(const Slot* s) {
  if (!s || s->ops.empty()) return "";
  if (!s->ops.front()->caller.empty()) return s->ops.front()->caller;
  return s->ops.front()->frames;
}

int64_t Created(const Slot* s) {
  return s && !s->ops.empty() ? s->ops.front()->time_created_ns : 0;
}

const char* KindFix(FindingKind k) {
  switch (k) {
    case FindingKind::kNotJoined:
      return "look for a rank-dependent branch (an if on rank-local data, an early return or "
             "continue, an exception caught on one rank) around the call site; every rank of "
             "the group must issue the same collectives in the same order";
    case FindingKind::kTypeMismatch:
      return "make every rank issue the same collective at the call site: look for a "
             "rank-dependent branch choosing the op";
    case FindingKind::kSizeMismatch:
      return "make the tensor sizes identical on every rank at the call site (pad uneven "
             "batches or buckets, or use the uneven (_v) variant of the collective)";
    case FindingKind::kDtypeMismatch:
      return "make the dtypes identical on every rank at the call site (a cast, autocast or "
             "mixed-precision setting applied on some ranks only)";
    case FindingKind::kStateMismatch:
      return "the rank reached the collective but its backend never started it: its stream "
             "or progress thread is blocked by earlier work (a hung kernel, a collective of "
             "another group); look at what it ran before and at its thread stacks";
    case FindingKind::kMissingDump:
      return "look at that rank's own log and exit status (killed, out of memory, crashed, or "
             "it could not write its dump); with its dump the analysis is complete";
    case FindingKind::kComputeStuck:  // worded by hccl_dump.cc
    case FindingKind::kLongTaskAfterCollective:
    case FindingKind::kCollectiveTimeout:
      return "";
  }
  return "";
}

HangFinding Base(const Group& g, FindingKind kind) {
  HangFinding f;
  f.kind = kind;
  f.pg = g.name;
  f.pg_desc = g.desc;
  f.finding.fix = KindFix(kind);
  return f;
}

}  // namespace

std::string Wait(const std::vector<int>& ranks);

std::string GroupLabel(const Group& g) {
  return "group " + g.name + (g.desc.empty() ? "" : " (" + g.desc + ")");
}

std::string Wait(const std::vector<int>& ranks) {
  return RanksLabel(ranks) + (ranks.size() == 1 ? " waits in it." : " wait in it.");
}

std::string RanksLabel(const std::vector<int>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out;
}

const Slot* GroupWalk::FindSlot(int rank, int64_t seq) const {
  auto r = slots_.find(rank);
  if (r == slots_.end()) return nullptr;
  auto s = r->second.find(seq);
  return s == r->second.end() ? nullptr : &s->second;
}

const Slot& GroupWalk::SlotAt(int rank, int64_t seq) const { return *FindSlot(rank, seq); }

void GroupWalk::Remember(int64_t seq) {
  const Slot* s = FindSlot(g_.with_dump.front(), seq);
  if (!s) return;
  matched_[seq] = NormKey(*s);
  const std::string caller = NormalizeCaller(Caller(*s));
  caller_history_[caller] = OpsKey(*s);
  auto prev = matched_caller_.find(seq - 1);
  if (prev != matched_caller_.end() && !caller.empty() && !prev->second.empty())
    next_caller_[prev->second] = caller;
  matched_caller_[seq] = caller;
  period_ = -2;
}

// The smallest period P of the matched ids just before the mismatch: the last min(3P, n-P)
// keys each equal the key P earlier (at least P of them, so the pattern was seen twice).
int GroupWalk::Period() {
  if (period_ != -2) return period_;
  period_ = -1;
  std::vector<std::string> run;  // the contiguous matched run ending at the last id
  int64_t prev = 0;
  for (auto it = matched_.rbegin(); it != matched_.rend(); ++it) {
    if (!run.empty() && it->first != prev - 1) break;
    run.push_back(it->second);
    prev = it->first;
  }
  std::reverse(run.begin(), run.end());
  const int n = static_cast<int>(run.size());
  for (int p = 1; p <= std::min(n / 2, 512); ++p) {
    int checks = std::min(3 * p, n - p);
    bool ok = true;
    for (int i = n - checks; i < n && ok; ++i) ok = run[i] == run[i - p];
    if (ok) return period_ = p;
  }
  return period_;
}

// How many collectives after call site `from` call site `to` came in the matched history
// (following each site's successor), 0 when it did not within 256.
int GroupWalk::CallerDistance(const std::string& from, const std::string& to) const {
  if (from.empty() || to.empty() || from == to) return 0;
  std::string at = from;
  for (int d = 1; d <= 256; ++d) {
    auto it = next_caller_.find(at);
    if (it == next_caller_.end()) return 0;
    at = it->second;
    if (at == to) return d;
    if (at == from) return 0;
  }
  return 0;
}

std::string GroupWalk::ExpectedAt(int64_t seq) {
  int p = Period();
  if (p <= 0 || matched_.empty()) return "";
  int64_t last = matched_.rbegin()->first;
  int64_t t = seq;
  if (t > last) t -= ((t - last + p - 1) / p) * p;  // the latest matched id in the same phase
  auto it = matched_.find(t);
  return it == matched_.end() ? "" : it->second;
}

std::optional<GroupWalk::Verdict> GroupWalk::Attribute(
    int64_t seq, const std::vector<std::pair<std::string, std::vector<int>>>& parts) {
  const int n = static_cast<int>(g_.with_dump.size());
  auto norm = [&](size_t i) { return NormKey(SlotAt(parts[i].second.front(), seq)); };
  auto next_norm = [&](size_t i) -> std::string {
    const Slot* s = FindSlot(parts[i].second.front(), seq + 1);
    return s ? NormKey(*s) : "";
  };
  Verdict v;
  auto set_ref = [&](size_t ref, const std::string& method) {
    v.ref_ranks = parts[ref].second;
    v.method = method;
    for (size_t i = 0; i < parts.size(); ++i)
      if (i != ref)
        v.culprits.insert(v.culprits.end(), parts[i].second.begin(), parts[i].second.end());
    std::sort(v.culprits.begin(), v.culprits.end());
  };
  size_t largest = 0;
  for (size_t i = 1; i < parts.size(); ++i)
    if (parts[i].second.size() > parts[largest].second.size()) largest = i;
  if (2 * static_cast<int>(parts[largest].second.size()) > n) {
    set_ref(largest, "the majority (" + std::to_string(parts[largest].second.size()) + " of " +
                         std::to_string(n) + " ranks) agree");
  }
  // 1. The caller tag's history.
  if (v.ref_ranks.empty()) {
    int consistent = -1, inconsistent = -1;
    for (size_t i = 0; i < parts.size(); ++i) {
      const Slot& s = SlotAt(parts[i].second.front(), seq);
      if (Caller(s).empty()) continue;
      auto h = caller_history_.find(NormalizeCaller(Caller(s)));
      if (h == caller_history_.end()) continue;
      (h->second == OpsKey(s) ? consistent : inconsistent) = static_cast<int>(i);
    }
    if (consistent >= 0 && inconsistent >= 0)
      set_ref(consistent,
              "the same call site issued the reference's op, sizes and dtypes in "
              "earlier, fully matched steps");
  }
  // 1b. Call-site order: in earlier steps call site A was followed (after d collectives) by
  // the call site B another rank is at now: that rank ran ahead, skipping A.
  if (v.ref_ranks.empty() && parts.size() == 2) {
    const std::string ca = NormalizeCaller(Caller(SlotAt(parts[0].second.front(), seq)));
    const std::string cb = NormalizeCaller(Caller(SlotAt(parts[1].second.front(), seq)));
    int ab = CallerDistance(ca, cb), ba = CallerDistance(cb, ca);
    if (ab > 0 && (ba <= 0 || ab <= ba)) {
      set_ref(0, "in earlier steps '" + ca + "' came before '" + cb + "'");
      v.skip = true;
    } else if (ba > 0) {
      set_ref(1, "in earlier steps '" + cb + "' came before '" + ca + "'");
      v.skip = true;
    }
  }
  // 2. A shift: one side holds at `seq` what the other issues at `seq + 1`.
  if (v.ref_ranks.empty() && parts.size() == 2) {
    for (size_t a = 0; a < 2 && v.ref_ranks.empty(); ++a) {
      size_t b = 1 - a;
      if (!next_norm(b).empty() && norm(a) == next_norm(b)) {
        set_ref(b, "its entry at #" + std::to_string(seq) + " is what the others issue at #" +
                       std::to_string(seq + 1));
        v.skip = true;
      }
    }
  }
  // 3. The per-step pattern.
  if (v.ref_ranks.empty()) {
    std::string expected = ExpectedAt(seq), expected_next = ExpectedAt(seq + 1);
    for (size_t i = 0; i < parts.size() && v.ref_ranks.empty(); ++i)
      if (!expected.empty() && norm(i) == expected)
        set_ref(i, "it matches the repeating pattern of earlier steps (period " +
                       std::to_string(Period()) + " collectives)");
    for (size_t i = 0; i < parts.size() && v.ref_ranks.empty() && parts.size() == 2; ++i) {
      if (!expected_next.empty() && norm(i) == expected_next) {
        set_ref(1 - i, "the other rank's entry is the one the per-step pattern expects next");
        v.skip = true;
      }
    }
  }
  // 4. A guess.
  if (v.ref_ranks.empty()) {
    size_t lowest = 0;
    for (size_t i = 1; i < parts.size(); ++i)
      if (parts[i].second.front() < parts[lowest].second.front()) lowest = i;
    set_ref(lowest, "no majority and no history to decide: rank " +
                        std::to_string(parts[lowest].second.front()) +
                        "'s view was taken as the reference (a guess)");
  }
  // A culprit holding what the reference issues next skipped this one.
  if (!v.skip) {
    const Slot* ref_next = FindSlot(v.ref_ranks.front(), seq + 1);
    std::string culprit_key = NormKey(SlotAt(v.culprits.front(), seq));
    if ((ref_next && NormKey(*ref_next) == culprit_key) || ExpectedAt(seq + 1) == culprit_key)
      v.skip = true;
    const std::string rc = NormalizeCaller(Caller(SlotAt(v.ref_ranks.front(), seq)));
    const std::string cc = NormalizeCaller(Caller(SlotAt(v.culprits.front(), seq)));
    if (CallerDistance(rc, cc) > 0) v.skip = true;
  }
  return v;
}

std::optional<Candidate> GroupWalk::StateMismatch(int64_t seq, const std::vector<int>& ranks) {
  // "Entered but never started while others did": scheduled next to started. A completed
  // collective means every rank took part, so scheduled vs completed is only a late watchdog.
  std::vector<int> scheduled, started;
  bool completed = false;
  for (int r : ranks) {
    const std::string& st = SlotAt(r, seq).ops.back()->state;
    if (st == "scheduled") scheduled.push_back(r);
    if (st == "started") started.push_back(r);
    completed = completed || st == "completed";
  }
  if (scheduled.empty() || started.empty() || completed) return std::nullopt;
  Verdict v;
  v.culprits = scheduled;
  v.ref_ranks = started;
  Candidate c = Build(seq, v);
  c.hang.kind = FindingKind::kStateMismatch;
  c.hang.finding.fix = KindFix(FindingKind::kStateMismatch);
  const std::string op = SlotAt(v.culprits.front(), seq).ops.front()->op;
  c.hang.finding.title = RanksLabel(scheduled) + " entered " + op + " #" + std::to_string(seq) +
                         " of " + GroupLabel(g_) + " but never started it, while " +
                         RanksLabel(started) + " did.";
  c.hang.finding.evidence = "state scheduled on " + RanksLabel(scheduled) + ", started on " +
                            RanksLabel(started) + "; every earlier collective of the group matched";
  return c;
}

std::optional<Candidate> GroupWalk::Compare(int64_t seq) {
  std::vector<int> ranks;
  for (const auto& [rank, s] : slots_)
    if (s.count(seq)) ranks.push_back(rank);
  std::vector<std::pair<std::string, std::vector<int>>> parts;
  for (int r : ranks) {
    std::string k = FullKey(SlotAt(r, seq));
    auto it = std::find_if(parts.begin(), parts.end(), [&](const auto& p) { return p.first == k; });
    if (it == parts.end()) {
      parts.push_back({k, {r}});
    } else {
      it->second.push_back(r);
    }
  }
  if (parts.size() == 1) return StateMismatch(seq, ranks);
  std::optional<Verdict> v = Attribute(seq, parts);
  if (!v) return std::nullopt;
  Candidate c = Build(seq, *v);
  if (c.hang.finding.title.empty()) return std::nullopt;  // only the caller tags differ
  return c;
}

Candidate GroupWalk::Build(int64_t seq, const Verdict& v) {
  Candidate c;
  HangFinding& f = c.hang;
  f = Base(g_, FindingKind::kNotJoined);
  f.collective_seq_id = seq;
  f.culprit_ranks = v.culprits;
  f.waiting_ranks = v.ref_ranks;
  const Slot* cs = v.culprits.empty() ? nullptr : FindSlot(v.culprits.front(), seq);
  const Slot* rs = v.ref_ranks.empty() ? nullptr : FindSlot(v.ref_ranks.front(), seq);
  c.time_ns = std::max(Created(cs), Created(rs));
  if (Created(cs) > 0 && Created(rs) > 0) c.time_ns = std::min(Created(cs), Created(rs));
  f.op = rs ? rs->ops.front()->op : (cs ? cs->ops.front()->op : "");
  f.caller = Where(cs).empty() ? Where(rs) : Where(cs);
  if (!cs || !rs) return c;
  const std::string num = " #" + std::to_string(seq) + " of " + GroupLabel(g_);
  const std::string ref_where = Where(rs).empty() ? "" : " at " + Quoted(Where(rs));
  const std::string culprit_where = Where(cs).empty() ? "" : " (" + Quoted(Where(cs)) + ")";
  const std::string basis = "; reference: " + v.method;
  if (v.skip) {
    f.finding.title = RanksLabel(v.culprits) + " skipped " + f.op + num + ", issued by " +
                      RanksLabel(v.ref_ranks) + ref_where + ", and issued its next collective " +
                      cs->ops.front()->op + culprit_where + " in its place; " + Wait(v.ref_ranks);
    f.finding.evidence = "at #" + std::to_string(seq) + " " + RanksLabel(v.culprits) + " issued " +
                         OpsText(*cs) + " where the others issued " + OpsText(*rs) +
                         ", which matches what comes next" + basis;
    return c;
  }
  std::string why;
  MatchState worst = MatchState::kFullyMatched;
  if (cs->ops.size() != rs->ops.size()) {
    worst = MatchState::kTypeMismatch;
    why = "a coalesced group of " + std::to_string(cs->ops.size()) + " ops vs " +
          std::to_string(rs->ops.size());
  }
  for (size_t i = 0; i < cs->ops.size() && worst == MatchState::kFullyMatched; ++i) {
    MatchState m = MatchOps(*rs->ops[i], *cs->ops[i], static_cast<int>(g_.members.size()), &why);
    if (m != MatchState::kFullyMatched && m != MatchState::kUndecided &&
        m != MatchState::kStateMismatch)
      worst = m;
  }
  const Entry& ce = *cs->ops.front();
  const Entry& re = *rs->ops.front();
  switch (worst) {
    case MatchState::kTypeMismatch:
      f.kind = FindingKind::kTypeMismatch;
      f.finding.title = RanksLabel(v.culprits) + " issued " + ce.op + " as" + num + " where " +
                        RanksLabel(v.ref_ranks) + " issued " + re.op + ref_where + ".";
      break;
    case MatchState::kSizeMismatch:
      f.kind = FindingKind::kSizeMismatch;
      f.finding.title = RanksLabel(v.culprits) + " called " + re.op + num + " with sizes " +
                        ShapesText(ce.input_sizes) + " -> " + ShapesText(ce.output_sizes) +
                        " where " + RanksLabel(v.ref_ranks) + " used " +
                        ShapesText(re.input_sizes) + " -> " + ShapesText(re.output_sizes) +
                        ref_where + ".";
      break;
    case MatchState::kDtypeMismatch:
      f.kind = FindingKind::kDtypeMismatch;
      f.finding.title = RanksLabel(v.culprits) + " called " + re.op + num + " with dtypes " +
                        DtypesText(ce.input_dtypes) + " where " + RanksLabel(v.ref_ranks) +
                        " used " + DtypesText(re.input_dtypes) + ref_where + ".";
      break;
    default:
      return c;  // same ops: only the caller tags differ, nothing proven
  }
  f.finding.fix = KindFix(f.kind);
  f.finding.evidence = why + basis;
  return c;
}

Candidate GroupWalk::NotJoined(int64_t seq, const std::vector<int>& behind,
                               const std::vector<int>& have) {
  Candidate c;
  HangFinding& f = c.hang;
  f = Base(g_, FindingKind::kNotJoined);
  f.collective_seq_id = seq;
  f.culprit_ranks = behind;
  const Slot& rs = SlotAt(have.front(), seq);
  for (int r : have)
    if (SlotAt(r, seq).ops.back()->state != "completed") f.waiting_ranks.push_back(r);
  f.op = rs.ops.front()->op;
  c.time_ns = Created(&rs);
  f.caller = Where(&rs);
  std::string last;
  for (int r : behind) {
    auto it = slots_.find(r);
    std::string l = it->second.empty() ? "none" : "#" + std::to_string(it->second.rbegin()->first);
    last += (last.empty() ? "" : ", ") + std::string("rank ") + std::to_string(r) + ": " + l;
    if (f.caller.empty() && !it->second.empty()) f.caller = Where(&it->second.rbegin()->second);
  }
  f.finding.title = RanksLabel(behind) + " never joined " + f.op + " #" + std::to_string(seq) +
                    " of " + GroupLabel(g_) + ", issued by the others" +
                    (Where(&rs).empty() ? "" : " at " + Quoted(Where(&rs))) + "; " +
                    Wait(f.waiting_ranks.empty() ? have : f.waiting_ranks);
  f.finding.evidence = "last collective of the group issued by " + last + "; " + RanksLabel(have) +
                       " issued #" + std::to_string(seq) + " (state " + rs.ops.back()->state + ")";
  f.finding.fix =
      "the rank was elsewhere when the others entered the collective: look at its thread "
      "stacks (" +
      run_dir::HangStacksPath("", behind.front()) +
      " in the run directory) for where it was (a sleep, a data loader, a deadlock), and "
      "for a rank-dependent branch before the call site";
  return c;
}

Candidate GroupWalk::MissingDump(int64_t seq, const std::vector<int>& waiting,
                                 const std::vector<std::string>& corrupt_names) {
  Candidate c;
  HangFinding& f = c.hang;
  f = Base(g_, FindingKind::kMissingDump);
  f.collective_seq_id = seq;
  f.culprit_ranks = g_.missing;
  const Slot* rs = waiting.empty() ? nullptr : FindSlot(waiting.front(), seq);
  for (int r : waiting)
    if (SlotAt(r, seq).ops.back()->state != "completed") f.waiting_ranks.push_back(r);
  std::string unusable;
  for (const std::string& n : corrupt_names) unusable += (unusable.empty() ? "" : ", ") + n;
  std::string who = RanksLabel(g_.missing);
  if (rs) {
    f.op = rs->ops.front()->op;
    f.caller = Where(rs);
    c.time_ns = Created(rs);
    f.finding.title = who + " left no dump; " + RanksLabel(f.waiting_ranks) +
                      (f.waiting_ranks.size() == 1 ? " waits in " : " wait in ") + f.op + " #" +
                      std::to_string(seq) + " of " + GroupLabel(g_) +
                      (f.caller.empty() ? "" : " at " + Quoted(f.caller)) + ", so what " + who +
                      " did is unknown (the analysis is incomplete).";
  } else {
    f.finding.title = who + " of " + GroupLabel(g_) +
                      " left no dump, so what it did is unknown (the analysis is incomplete).";
  }
  f.finding.evidence = "members of " + GroupLabel(g_) +
                       (g_.from_config ? " per pg_config: " : " known from the dumps: ") +
                       RanksLabel(g_.members).substr(g_.members.size() == 1 ? 5 : 6) +
                       "; dumps found for " +
                       (g_.with_dump.empty() ? std::string("none") : RanksLabel(g_.with_dump)) +
                       (unusable.empty() ? "" : "; unusable dump files: " + unusable);
  return c;
}

Candidate P2pNotJoined(const Group& g, const Entry& e, int never, int waiting) {
  Candidate c;
  HangFinding& f = c.hang;
  f = Base(g, FindingKind::kNotJoined);
  f.p2p_seq_id = e.p2p_seq_id;
  f.op = e.op;
  f.culprit_ranks = {never};
  f.waiting_ranks = {waiting};
  f.caller = !e.caller.empty() ? e.caller : e.frames;
  c.time_ns = e.time_created_ns;
  const char* counter = e.op == "send" ? "recv" : "send";
  f.finding.title = "rank " + std::to_string(never) + " never posted the " + counter +
                    " matching rank " + std::to_string(waiting) + "'s " + e.op + " (p2p #" +
                    std::to_string(e.p2p_seq_id) + " of " + GroupLabel(g) + ")" +
                    (f.caller.empty() ? "" : " at " + Quoted(f.caller)) + "; rank " +
                    std::to_string(waiting) + " waits in it.";
  f.finding.evidence = "no pending " + std::string(counter) + " on rank " + std::to_string(never) +
                       " for the pending " + e.profiling_name + " (state " + e.state + ")";
  f.finding.fix =
      "every send needs the matching recv on its peer, in the same order: look for a "
      "rank-dependent branch around the call site (pipeline schedules: the two stages' "
      "schedules must agree)";
  return c;
}

Candidate P2pMismatch(const Group& g, const Entry& send, const Entry& recv,
                      std::pair<int, int> src_dst, FindingKind kind) {
  Candidate c;
  HangFinding& f = c.hang;
  f = Base(g, kind);
  f.p2p_seq_id = send.p2p_seq_id;
  f.op = "send";
  f.culprit_ranks = {std::min(src_dst.first, src_dst.second),
                     std::max(src_dst.first, src_dst.second)};
  f.caller = !send.caller.empty() ? send.caller : send.frames;
  c.time_ns = send.time_created_ns;
  bool size = kind == FindingKind::kSizeMismatch;
  std::string a = size ? ShapesText(send.input_sizes) : DtypesText(send.input_dtypes);
  std::string b = size ? ShapesText(recv.output_sizes) : DtypesText(recv.output_dtypes);
  f.finding.title = "rank " + std::to_string(src_dst.first) + " sends " + a + " to rank " +
                    std::to_string(src_dst.second) + ", which receives " + b + " (p2p #" +
                    std::to_string(send.p2p_seq_id) + " of " + GroupLabel(g) + ").";
  f.finding.evidence = send.profiling_name + " vs " + recv.profiling_name;
  return c;
}

}  // namespace trainscope::hang::internal
