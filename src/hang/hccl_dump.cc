// torch_npu's HCCL flight recorder dumps, and the three timeout classes of Ascend's
// analysis_flight.py (Ascend/pytorch, branch v2.7.1-7.2.0, tools/flight_recorder/).
//
// Ascend's rules, on the last entry of every rank's dump, grouped by pg_id:
//  1. some ranks' last entry completed and its record id is one below the pending entry of
//     the others: those ranks were still computing while the others waited in the next
//     collective ("rank X's computational task took too long, causing the other ranks' HCCL
//     task to time out");
//  2. every last entry completed: the non-communication work after the last collective took
//     too long (the heartbeat monitor dumped because no collective came);
//  3. every last entry pending with the same record id and name: that collective itself
//     executed too slowly and timed out.
//  Anything else is "the situation cannot be recognized".
// Ascend's tool only counts "scheduled" as pending (torch_npu never records "started" without
// TORCH_HCCL_ENABLE_TIMING); "started" counts as pending here too. Record ids count every op
// of a rank's recorder, across groups, so a rank that is one behind is also recognised by its
// collective_seq_id in the same group. Ascend's tool prints the pg_id where it means the rank;
// the ranks are named here.
#include "hang/hccl_dump.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace trainscope::hang::internal {
namespace {

using nlohmann::json;

// The torch.distributed functions that call a ProcessGroup collective (distributed_c10d.py).
const std::set<std::string>& C10dCollectives() {
  static const std::set<std::string>* k = new std::set<std::string>{
      "all_reduce",
      "all_reduce_coalesced",
      "broadcast",
      "reduce",
      "all_gather",
      "all_gather_into_tensor",
      "_all_gather_base",
      "all_gather_coalesced",
      "all_gather_object",
      "reduce_scatter",
      "reduce_scatter_tensor",
      "_reduce_scatter_base",
      "all_to_all",
      "all_to_all_single",
      "gather",
      "scatter",
      "barrier",
      "monitored_barrier",
      "broadcast_object_list",
      "send",
      "recv",
      "isend",
      "irecv",
      "batch_isend_irecv",
  };
  return *k;
}

std::string Ranks(const std::vector<int>& ranks) {
  return absl::StrCat(ranks.size() == 1 ? "rank " : "ranks ", absl::StrJoin(ranks, ", "));
}

// The first frame outside torch's own files ("train_step (train.py:61)"), from Entry::frames
// ("f (file:line) <- ..."); "" when none.
std::string UserFrame(const Entry& e) {
  for (absl::string_view f : absl::StrSplit(e.frames, " <- "))
    if (!absl::StrContains(f, "/torch/") && !absl::StrContains(f, "/torch_npu/"))
      return std::string(f);
  return "";
}

std::string OpName(const Entry& e) { return e.op.empty() ? std::string("the collective") : e.op; }

std::string OpLabel(const Entry& e) {
  return absl::StrCat(OpName(e), " #", e.collective_seq_id, " of group ", e.pg_name,
                      e.pg_desc.empty() ? "" : " (" + e.pg_desc + ")");
}

struct Last {
  int rank = -1;
  const Entry* e = nullptr;
};

struct Verdict {
  std::string cls;  // "compute_stuck" | "long_task_after_collective" | "collective_timeout" |
                    // "unrecognized"
  std::vector<int> ranks, culprits, waiting;
  const Entry* ref = nullptr;  // the pending collective (1, 3) or the last completed one (2)
  const Entry* culprit_last = nullptr;
  std::string reason;
};

bool Pending(const Entry& e) { return e.state != "completed"; }

// Ascend's case analysis of one group's last entries (see the file comment).
Verdict Classify(const std::vector<Last>& group) {
  Verdict v;
  std::vector<Last> pending, done;
  for (const Last& l : group) {
    v.ranks.push_back(l.rank);
    (Pending(*l.e) ? pending : done).push_back(l);
  }
  if (done.empty()) {
    const Entry& a = *pending.front().e;
    bool same = std::all_of(pending.begin(), pending.end(), [&](const Last& l) {
      return l.e->record_id == a.record_id && l.e->op == a.op;
    });
    v.cls = same ? "collective_timeout" : "unrecognized";
    v.ref = &a;
    v.waiting = v.ranks;
    if (!same) v.reason = "every rank is pending, but not in the same record id and op";
    return v;
  }
  if (!pending.empty()) {
    const Entry& a = *pending.front().e;
    for (const Last& l : done)
      if (l.e->record_id == a.record_id - 1 ||
          (l.e->pg_name == a.pg_name && l.e->collective_seq_id == a.collective_seq_id - 1)) {
        v.culprits.push_back(l.rank);
        v.culprit_last = l.e;
      }
    for (const Last& l : pending) v.waiting.push_back(l.rank);
    v.ref = &a;
    v.cls = v.culprits.empty() ? "unrecognized" : "compute_stuck";
    if (v.culprits.empty())
      v.reason = "the completed ranks are not one collective behind the pending ones";
    return v;
  }
  v.cls = "long_task_after_collective";
  v.ref = std::max_element(done.begin(), done.end(), [](const Last& x, const Last& y) {
            return x.e->time_completed_ns < y.e->time_completed_ns;
          })->e;
  return v;
}

// Ends a fix: "... raise " + kTimeouts.
const char* kTimeouts =
    "HCCL_EXEC_TIMEOUT (default 1836 s: how long ranks wait for each other inside a "
    "collective) and TORCH_HCCL_HEARTBEAT_TIMEOUT_SEC (default 10 min: how long the monitor "
    "waits for a new collective before it dumps), keeping the heartbeat and "
    "HCCL_CONNECT_TIMEOUT below HCCL_EXEC_TIMEOUT, or HCCL reports its own timeout first";

// The fields every HCCL timeout finding takes from the group's reference entry.
HangFinding FromRef(FindingKind kind, const Verdict& v, std::vector<int> waiting) {
  HangFinding f;
  f.kind = kind;
  f.pg = v.ref->pg_name;
  f.pg_desc = v.ref->pg_desc;
  f.collective_seq_id = v.ref->collective_seq_id;
  f.op = v.ref->op;
  f.waiting_ranks = std::move(waiting);
  f.caller = UserFrame(*v.ref);
  return f;
}

HangFinding ComputeStuck(const Verdict& v, const std::string& prefix) {
  HangFinding f = FromRef(FindingKind::kComputeStuck, v, v.waiting);
  f.culprit_ranks = v.culprits;
  const std::string& where = f.caller;
  const std::string after = v.culprit_last ? OpName(*v.culprit_last) : "its last collective";
  f.finding.title = absl::StrCat(Ranks(v.culprits), " was still computing after ", after, " while ",
                                 Ranks(v.waiting), " waited in ", OpLabel(*v.ref),
                                 where.empty() ? "" : " (called at " + where + ")",
                                 ": its computation took too long and the others' HCCL task timed "
                                 "out (Ascend flight recorder class 1).");
  f.finding.evidence = absl::StrCat(
      "last entry of ", Ranks(v.culprits), ": ", after, " #",
      v.culprit_last ? v.culprit_last->collective_seq_id : -1, " completed (record id ",
      v.culprit_last ? v.culprit_last->record_id : -1, "); last entry of ", Ranks(v.waiting), ": ",
      OpLabel(*v.ref), " ", v.ref->state, " (record id ", v.ref->record_id, ")");
  f.finding.fix = absl::StrCat(
      "see where ", Ranks(v.culprits), " was: the Python stacks torch_npu wrote next to its dump (",
      prefix, v.culprits.front(),
      "_py_traceback) and its plog (~/ascend/log/debug/plog) for an operator that never "
      "returned (ASCEND_LAUNCH_BLOCKING=1 makes its stack exact); look for a rank-dependent "
      "branch before the call site (only one rank saving a checkpoint or evaluating, uneven "
      "data). If that work is legitimately long, let the others wait at a barrier after it or "
      "raise ",
      kTimeouts);
  return f;
}

HangFinding LongTask(const Verdict& v) {
  HangFinding f = FromRef(FindingKind::kLongTaskAfterCollective, v, v.ranks);
  const std::string& where = f.caller;
  f.finding.title = absl::StrCat(
      "every rank of group ", v.ref->pg_name, " completed its last collective, the latest being ",
      OpName(*v.ref), " #", v.ref->collective_seq_id,
      where.empty() ? "" : " (called at " + where + ")",
      ", and none issued another: the non-communication work after it took too long (Ascend "
      "flight recorder class 2).");
  f.finding.evidence =
      absl::StrCat("last entries of ", Ranks(v.ranks), ": completed; the latest completion is ",
                   OpLabel(*v.ref), " (record id ", v.ref->record_id, ")");
  f.finding.fix = absl::StrCat(
      "look at what every rank runs after ", OpName(*v.ref), where.empty() ? "" : " at " + where,
      ": a device operator that does not finish (plog: EZ9999 AI Core / AI CPU exception; "
      "npu-smi info shows AICore(%) stuck), host work (data loading, a checkpoint save, "
      "evaluation) or a Python deadlock (the <prefix><rank>_py_traceback stacks next to the "
      "dumps); ASCEND_LAUNCH_BLOCKING=1 names the operator. If that work is legitimately long, "
      "raise ",
      kTimeouts);
  return f;
}

HangFinding CollectiveTimeout(const Verdict& v) {
  HangFinding f = FromRef(FindingKind::kCollectiveTimeout, v, v.ranks);
  const std::string& where = f.caller;
  f.finding.title =
      absl::StrCat("every rank of group ", v.ref->pg_name, " entered ", OpName(*v.ref), " #",
                   v.ref->collective_seq_id, where.empty() ? "" : " (called at " + where + ")",
                   " and none saw it complete: the collective itself executed too "
                   "slowly and timed out (Ascend flight recorder class 3).");
  f.finding.evidence = absl::StrCat("last entries of ", Ranks(v.ranks), ": ", OpName(*v.ref),
                                    ", record id ", v.ref->record_id, ", state ", v.ref->state,
                                    " on every rank; the ranks agree, so the wait is inside HCCL");
  f.finding.fix = absl::StrCat(
      "the ranks agree on the collective, so look at the links and the device: the plog of "
      "every rank for EI0002 (notify wait timeout), EI0013 (RoCE ERROR CQE: network or a peer "
      "gone) and its 'Cluster Exception Location'; the NICs with hccn_tool -i <device> -link "
      "-g and npu-smi info (Health); rerun with HCCL_ENTRY_LOG_ENABLE=1 to log each "
      "collective's entry. If it is only slow (a huge tensor, a congested network), raise ",
      kTimeouts);
  return f;
}

std::string Prefix(const std::vector<Dump>& dumps) {
  for (const Dump& d : dumps) {
    std::string base = d.file.substr(d.file.rfind('/') + 1);
    std::string r = std::to_string(d.rank);
    if (base.size() > r.size() && base.compare(base.size() - r.size(), r.size(), r) == 0)
      return base.substr(0, base.size() - r.size());
  }
  return "hccl_trace_rank_";
}

}  // namespace

std::string HcclOpFromFrames(const json& frames) {
  if (!frames.is_array() || frames.empty() || !frames[0].is_object()) return "";
  auto it = frames[0].find("name");
  if (it == frames[0].end() || !it->is_string()) return "";
  const std::string& name = it->get_ref<const std::string&>();
  return C10dCollectives().count(name) ? name : "";
}

bool LooksLikeHcclDump(const json& doc, const Dump& d) {
  if (doc.contains("hccl_comm_state")) return true;
  std::string base = d.file.substr(d.file.rfind('/') + 1);
  if (base.rfind("hccl_trace_rank_", 0) == 0) return true;
  return std::any_of(d.entries.begin(), d.entries.end(),
                     [](const Entry& e) { return e.backend == "hccl"; });
}

void AddHcclTimeoutClasses(const std::vector<Dump>& dumps, Report* report) {
  if (std::none_of(dumps.begin(), dumps.end(), [](const Dump& d) { return d.hccl; })) return;
  std::map<int64_t, std::vector<Last>> by_pg;
  for (const Dump& d : dumps)
    if (!d.entries.empty()) by_pg[d.entries.back().pg_id].push_back({d.rank, &d.entries.back()});
  const std::string prefix = Prefix(dumps);
  json classes = json::array();
  for (const auto& [pg_id, group] : by_pg) {
    Verdict v = Classify(group);
    json c = {
        {"pg_id", pg_id},   {"pg", v.ref ? v.ref->pg_name : ""}, {"class", v.cls},
        {"ranks", v.ranks}, {"culprit_ranks", v.culprits},       {"waiting_ranks", v.waiting}};
    if (v.ref) c["collective_seq_id"] = v.ref->collective_seq_id, c["op"] = v.ref->op;
    if (!v.reason.empty()) c["reason"] = v.reason;
    classes.push_back(c);
    if (v.cls == "unrecognized") continue;
    std::vector<HangFinding>& fs = report->findings;
    if (v.cls == "compute_stuck") {
      HangFinding n = ComputeStuck(v, prefix);
      auto same = std::find_if(fs.begin(), fs.end(), [&](const HangFinding& f) {
        std::vector<int> c = f.culprit_ranks;
        std::sort(c.begin(), c.end());
        return f.kind == FindingKind::kNotJoined && f.pg == n.pg && c == n.culprit_ranks;
      });
      if (same == fs.end()) {
        fs.push_back(std::move(n));
        continue;
      }
      // The matching not_joined finding says the same, with the cross-group root: it keeps
      // its place and root fields, in Ascend's words.
      size_t at = report->root_cause.find(same->finding.title);
      if (at != std::string::npos)
        report->root_cause.replace(at, same->finding.title.size(), n.finding.title);
      n.finding.evidence += "; " + same->finding.evidence;
      n.root = same->root;
      n.consequence_of = same->consequence_of;
      n.consequence = same->consequence;
      *same = std::move(n);
      continue;
    }
    // Classes 2 and 3 are verdicts when nothing else is found in the group.
    const std::string pg = v.ref->pg_name;
    if (std::any_of(fs.begin(), fs.end(), [&](const HangFinding& f) { return f.pg == pg; }))
      continue;
    fs.push_back(v.cls == "collective_timeout" ? CollectiveTimeout(v) : LongTask(v));
  }
  report->problem = !report->findings.empty();
  report->details["hccl_timeout"] = classes;
}

}  // namespace trainscope::hang::internal
