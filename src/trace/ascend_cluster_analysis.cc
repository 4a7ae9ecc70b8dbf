// msprof-analyze's cluster rules over the Ascend cluster view (ascend_cluster.h): slow rank,
// slow link, pipeline bubble, communication wait; the "cluster" JSON section and its text.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "trace/ascend_cluster.h"
#include "trainscope/core/table.h"

namespace trainscope::trace::internal {
namespace {

constexpr double kRatio = 0.05;         // advisor RATIO_THRESHOLD (slow rank, slow link)
constexpr double kBubbleWarnPct = 10;   // a stage idle this share of its step: a warning
constexpr double kWaitRatioNote = 0.5;  // communication mostly waiting on a rank
constexpr size_t kMaxLinksInJson = 64;  // slowest first
// Links that moved less are latency-bound, not bandwidth-bound: not compared (the advisor's
// small-packet bound for RDMA).
constexpr double kMinLinkMb = 1.0;

double R4(double v) { return std::round(v * 1e4) / 1e4; }
std::string Ms(double us) { return absl::StrFormat("%.1f ms", us / 1e3); }
std::string Pc(double ratio) { return absl::StrFormat("%.1f%%", 100 * ratio); }
std::string RankSet(const std::vector<int>& r) {
  return absl::StrCat("(", absl::StrJoin(r, ", "), ")");
}

// The advisor's figures of one dimension over (step, rank) rows.
struct Dimension {
  std::string name;
  double spread_us = 0, spread_ratio = 0;  // (max - min), / mean(step total)
  bool flagged = false;                    // spread_ratio > 5% (SlowRankAnalyzer.process)
  bool named = false;                      // (max - min) / mean(dimension) >= 5%
  int max_rank = -1, min_rank = -1;
  int64_t max_step = -1, min_step = -1;
  double max_us = 0, min_us = 0;
};

double Of(const ClusterRow& r, int d) {
  return d == 0 ? r.computing_us : (d == 1 ? r.comm_not_overlapped_us : r.free_us);
}
const char* const kDimNames[] = {"computing", "communication_not_overlapped", "free"};

// Max and min of dimension d over `rows` (first of equals in (step, rank) order), named when
// the spread reaches 5% of the dimension's own mean (get_global_step_rank / get_stage_step_rank).
void MaxMin(const std::vector<const ClusterRow*>& rows, int d, Dimension* out) {
  double sum = 0;
  const ClusterRow *mx = nullptr, *mn = nullptr;
  for (const ClusterRow* r : rows) {
    sum += Of(*r, d);
    if (!mx || Of(*r, d) > Of(*mx, d)) mx = r;
    if (!mn || Of(*r, d) < Of(*mn, d)) mn = r;
  }
  if (!mx) return;
  out->max_us = Of(*mx, d);
  out->min_us = Of(*mn, d);
  out->spread_us = out->max_us - out->min_us;
  const double mean = sum / rows.size();
  out->named = mean != 0 && out->spread_us / mean >= kRatio;
  out->max_rank = mx->rank;
  out->max_step = mx->step;
  out->min_rank = mn->rank;
  out->min_step = mn->step;
}

nlohmann::json DimJson(const Dimension& d) {
  return {{"dimension", d.name},
          {"spread_us", R4(d.spread_us)},
          {"spread_ratio", R4(d.spread_ratio)},
          {"flagged", d.flagged},
          {"named", d.named},
          {"max_rank", d.named ? d.max_rank : -1},
          {"max_step", d.max_step},
          {"max_us", R4(d.max_us)},
          {"min_rank", d.named ? d.min_rank : -1},
          {"min_step", d.min_step},
          {"min_us", R4(d.min_us)}};
}

struct SlowRank {
  std::vector<Dimension> global;
  std::vector<std::pair<std::vector<int>, std::vector<Dimension>>> per_stage;
  double mean_total_us = 0;
  int rank = -1;
  std::string cause;  // the dimension that names it
};

// The slow rank: the one the others wait for (least communication), else the one that computes
// longest, else the one idle longest; per flagged dimension the advisor's max/min ranks.
SlowRank FindSlowRank(const ClusterInput& in, const std::vector<std::vector<int>>& stages) {
  SlowRank s;
  // Over the steps every rank has (all rows when the ranks agree, as msprof-analyze takes them).
  std::map<int64_t, std::set<int>> ranks_of_step;
  std::set<int> ranks;
  for (const ClusterRow& r : in.rows) {
    ranks_of_step[r.step].insert(r.rank);
    ranks.insert(r.rank);
  }
  std::vector<const ClusterRow*> all;
  double total = 0;
  for (const ClusterRow& r : in.rows) {
    if (ranks_of_step[r.step].size() != ranks.size()) continue;
    all.push_back(&r);
    total += r.computing_us + r.comm_not_overlapped_us + r.free_us;
  }
  if (all.empty()) return s;
  s.mean_total_us = total / all.size();
  for (int d = 0; d < 3; ++d) {
    Dimension dim;
    dim.name = kDimNames[d];
    MaxMin(all, d, &dim);
    dim.spread_ratio = s.mean_total_us > 0 ? dim.spread_us / s.mean_total_us : 0;
    dim.flagged = dim.spread_ratio > kRatio;
    s.global.push_back(dim);
  }
  for (const std::vector<int>& st : stages) {
    std::vector<const ClusterRow*> rows;
    for (const ClusterRow* r : all)
      if (std::binary_search(st.begin(), st.end(), r->rank)) rows.push_back(r);
    std::vector<Dimension> dims;
    for (int d = 0; d < 3; ++d) {
      Dimension dim;
      dim.name = kDimNames[d];
      MaxMin(rows, d, &dim);
      dims.push_back(dim);
    }
    s.per_stage.push_back({st, dims});
  }
  const Dimension &comp = s.global[0], &comm = s.global[1], &fr = s.global[2];
  if (comm.flagged && comm.named) {
    s.rank = comm.min_rank;
    s.cause = fr.named && fr.max_rank == s.rank       ? "free"
              : comp.named && comp.max_rank == s.rank ? "computing"
                                                      : "communication";
  } else if (comp.flagged && comp.named) {
    s.rank = comp.max_rank;
    s.cause = "computing";
  } else if (fr.flagged && fr.named) {
    s.rank = fr.max_rank;
    s.cause = "free";
  }
  return s;
}

// The stages: the stage rows' rank sets, sorted and distinct.
std::vector<std::vector<int>> StageSets(const ClusterInput& in) {
  std::set<std::vector<int>> sets;
  for (const ClusterStage& s : in.stages) sets.insert(s.ranks);
  return std::vector<std::vector<int>>(sets.begin(), sets.end());
}

struct RankBandwidth {
  int64_t step = -1;
  int rank = -1;
  double sdma_mb = 0, sdma_ms = 0, rdma_mb = 0, rdma_ms = 0;
  double Sdma() const { return sdma_ms > 1e-15 ? sdma_mb / sdma_ms : 0; }
  double Rdma() const { return rdma_ms > 1e-15 ? rdma_mb / rdma_ms : 0; }
};

std::vector<RankBandwidth> Bandwidths(const ClusterInput& in) {
  std::map<std::pair<int64_t, int>, RankBandwidth> m;
  for (const ClusterCommRecord& c : in.comm) {
    if (c.total) continue;
    RankBandwidth& b = m[{c.step, c.rank}];
    b.step = c.step;
    b.rank = c.rank;
    if (auto it = c.transport.find("SDMA"); it != c.transport.end()) {
      b.sdma_mb += it->second.first;
      b.sdma_ms += it->second.second;
    }
    if (auto it = c.transport.find("RDMA"); it != c.transport.end()) {
      b.rdma_mb += it->second.first;
      b.rdma_ms += it->second.second;
    }
  }
  std::vector<RankBandwidth> out;
  for (auto& [k, b] : m) out.push_back(b);
  return out;
}

// The advisor's slow-link rank of one transport: the least bandwidth when the spread reaches 5%
// of the mean (get_global_step_rank); null otherwise.
nlohmann::json SlowLinkRank(const std::vector<RankBandwidth>& bw, bool sdma) {
  if (bw.empty()) return nullptr;
  double sum = 0;
  const RankBandwidth *mx = nullptr, *mn = nullptr;
  for (const RankBandwidth& b : bw) {
    const double v = sdma ? b.Sdma() : b.Rdma();
    sum += v;
    if (!mx || v > (sdma ? mx->Sdma() : mx->Rdma())) mx = &b;
    if (!mn || v < (sdma ? mn->Sdma() : mn->Rdma())) mn = &b;
  }
  const double mean = sum / bw.size(), hi = sdma ? mx->Sdma() : mx->Rdma(),
               lo = sdma ? mn->Sdma() : mn->Rdma();
  nlohmann::json j = {{"transport", sdma ? "SDMA" : "RDMA"},
                      {"mean_gbps", R4(mean)},
                      {"max_gbps", R4(hi)},
                      {"min_gbps", R4(lo)},
                      {"max_rank", mx->rank},
                      {"min_rank", mn->rank},
                      {"min_step", mn->step},
                      {"spread_ratio", R4(mean > 0 ? (hi - lo) / mean : 0)}};
  j["slow"] = mean > 0 && (hi - lo) / mean >= kRatio;
  return j;
}

struct LinkSum {
  int src = -1, dst = -1;
  std::string transport;
  double size_mb = 0, time_ms = 0;
  double Gbps() const { return time_ms > 1e-15 ? size_mb / time_ms : 0; }
};

std::vector<LinkSum> SumLinks(const ClusterInput& in) {
  std::map<std::tuple<std::string, int, int>, LinkSum> m;
  for (const ClusterLink& l : in.links) {
    LinkSum& s = m[{l.transport, l.src, l.dst}];
    s.src = l.src;
    s.dst = l.dst;
    s.transport = l.transport;
    s.size_mb += l.size_mb;
    s.time_ms += l.time_ms;
  }
  std::vector<LinkSum> out;
  for (auto& [k, s] : m) out.push_back(s);
  return out;
}

struct RankWait {
  int rank = -1;
  double wait_ms = 0, transit_ms = 0, sync_ms = 0, elapse_ms = 0;
  double Ratio() const { return wait_ms + transit_ms > 0 ? wait_ms / (wait_ms + transit_ms) : 0; }
  double SyncRatio() const {
    return sync_ms + transit_ms > 0 ? sync_ms / (sync_ms + transit_ms) : 0;
  }
};

// Per rank over its op records (not msprof's "Total Op Info" aggregates): Wait Time Ratio =
// Wait / (Wait + Transit), as msprof-analyze defines it per op.
std::vector<RankWait> Waits(const ClusterInput& in) {
  std::map<int, RankWait> m;
  for (const ClusterCommRecord& c : in.comm) {
    if (c.total) continue;
    RankWait& w = m[c.rank];
    w.rank = c.rank;
    w.wait_ms += c.wait_ms;
    w.transit_ms += c.transit_ms;
    w.sync_ms += c.sync_ms;
    w.elapse_ms += c.elapse_ms;
  }
  std::vector<RankWait> out;
  for (auto& [r, w] : m) out.push_back(w);
  return out;
}

// Ranks whose steps differ from the most common set: "rank 3: steps 1,2 (others 1,2,3)".
std::vector<std::string> StepMismatches(const ClusterInput& in) {
  std::map<int, std::set<int64_t>> steps;
  for (const ClusterRow& r : in.rows) steps[r.rank].insert(r.step);
  std::map<std::set<int64_t>, int> count;
  for (const auto& [r, s] : steps) ++count[s];
  if (count.size() < 2) return {};
  auto common = std::max_element(count.begin(), count.end(), [](const auto& a, const auto& b) {
                  return a.second < b.second;
                })->first;
  std::vector<std::string> out;
  for (const auto& [r, s] : steps)
    if (s != common)
      out.push_back(absl::StrCat("rank ", r, ": steps ", absl::StrJoin(s, ","), " (the others ",
                                 absl::StrJoin(common, ","), ")"));
  return out;
}

std::string CauseFix(const std::string& cause) {
  if (cause == "computing")
    return "look at that rank's kernels (its kernel_details.csv / op_statistic.csv): AI_CPU "
           "operators, dynamic shapes (torch_npu.npu.set_compile_mode(jit_compile=False)), a "
           "down-clocked or unhealthy card (npu-smi info -t health / -t freq); balance the load "
           "(sequence lengths, MoE experts) across ranks";
  if (cause == "free")
    return "that rank is host-bound: more DataLoader workers and pin_memory, the task queue "
           "(TASK_QUEUE_ENABLE=2), core binding (CPU_AFFINITY_CONF=1), no .item()/.cpu() or "
           "stream synchronisation in the step; then trace analyze its *_ascend_pt folder";
  return "the other ranks wait for it in HCCL collectives: trace analyze that rank's *_ascend_pt "
         "folder to see what delays it before the collectives";
}

void SlowRankFinding(const SlowRank& s, bool staged, Report* rep) {
  std::vector<std::string> ev;
  for (const Dimension& d : s.global) {
    if (!d.flagged) continue;
    absl::StrAppend(&ev.emplace_back(), d.name, " differs by ", Ms(d.spread_us), " (",
                    Pc(d.spread_ratio), " of the mean step ", Ms(s.mean_total_us), ")");
    if (d.named)
      absl::StrAppend(&ev.back(), ": max rank ", d.max_rank, " ", Ms(d.max_us), ", min rank ",
                      d.min_rank, " ", Ms(d.min_us));
  }
  if (ev.empty()) return;
  if (staged) {
    for (size_t i = 0; i < s.per_stage.size(); ++i) {
      const Dimension& c = s.per_stage[i].second[1];
      if (c.named)
        ev.push_back(absl::StrCat("stage ", RankSet(s.per_stage[i].first),
                                  ": least communication rank ", c.min_rank, " ", Ms(c.min_us)));
    }
  }
  Finding f;
  f.severity = s.rank >= 0 ? Severity::kError : Severity::kWarning;
  f.id = "slow_rank";
  f.rank = s.rank;
  f.evidence = absl::StrJoin(ev, "; ");
  if (s.rank >= 0) {
    const char* what = s.cause == "free"        ? "free (host-bound)"
                       : s.cause == "computing" ? "computing"
                                                : "what precedes its collectives";
    f.title = absl::StrCat("rank ", s.rank, " is the slow rank (msprof-analyze's rule): ", what);
    f.fix = CauseFix(s.cause);
  } else {
    f.title = "the ranks' step breakdown differs by more than 5% of the step (msprof-analyze)";
    f.fix = "compare the ranks' Computing, Communication and Free side by side";
  }
  rep->findings.push_back(std::move(f));
}

// The stage that waits most: Bubble / (Stage + Bubble) of its stage rows, mean over steps.
void BubbleFinding(const ClusterInput& in, nlohmann::json* stages_json, Report* rep) {
  std::map<std::vector<int>, std::pair<double, double>> sums;  // bubble, stage + bubble
  std::map<std::vector<int>, std::pair<double, int>> computing;
  for (const ClusterStage& s : in.stages) {
    auto& p = sums[s.ranks];
    p.first += s.max.bubble_us;
    p.second += s.max.stage_us + s.max.bubble_us;
    computing[s.ranks].first += s.max.computing_us;
    ++computing[s.ranks].second;
  }
  const std::vector<int>* worst = nullptr;
  double worst_pct = 0;
  for (const auto& [ranks, p] : sums) {
    const double pct = p.second > 0 ? 100 * p.first / p.second : 0;
    stages_json->push_back(
        {{"ranks", ranks},
         {"bubble_us", R4(p.first / computing[ranks].second)},
         {"bubble_pct", R4(pct)},
         {"computing_us", R4(computing[ranks].first / computing[ranks].second)}});
    if (pct > worst_pct) {
      worst_pct = pct;
      worst = &ranks;
    }
  }
  if (!worst) return;
  const int n = computing[*worst].second;
  std::vector<std::string> others;
  for (const auto& [ranks, c] : computing)
    if (ranks != *worst)
      others.push_back(absl::StrCat(RankSet(ranks), " ", Ms(c.first / c.second)));
  Finding f;
  f.severity = worst_pct > kBubbleWarnPct ? Severity::kWarning : Severity::kInfo;
  f.id = "pipeline_bubble";
  f.title = absl::StrCat("pipeline stage ", RankSet(*worst), " waits: bubble ",
                         Ms(sums[*worst].first / n), " per step (",
                         absl::StrFormat("%.0f", worst_pct), "% of its step)");
  f.evidence = absl::StrCat(
      "stage ", RankSet(*worst), " computes ", Ms(computing[*worst].first / n), " per step",
      others.empty() ? "" : absl::StrCat("; the others: ", absl::StrJoin(others, ", ")),
      " (Bubble = receive waits of the stage, step_trace_time)");
  f.fix =
      "more micro-batches per step (at least 4x the pipeline stages: a larger global batch "
      "or a smaller micro batch), the interleaved schedule (virtual pipeline stages, "
      "--num-layers-per-virtual-pipeline-stage in Megatron/MindSpeed), and layers balanced so "
      "that no stage computes longer than the others";
  rep->findings.push_back(std::move(f));
}

void LinkFinding(const std::vector<LinkSum>& links, nlohmann::json* slow_link, Report* rep) {
  // Per transport (LOCAL copies on one chip aside), the slowest link against the mean of its kind.
  std::map<std::string, std::vector<const LinkSum*>> kinds;
  for (const LinkSum& l : links)
    if (l.transport != "LOCAL" && l.src != l.dst && l.time_ms > 0 && l.size_mb >= kMinLinkMb)
      kinds[l.transport].push_back(&l);
  const LinkSum* worst = nullptr;
  double worst_gap = 0, worst_mean = 0;
  for (const auto& [t, v] : kinds) {
    if (v.size() < 2) continue;
    double sum = 0, hi = 0;
    const LinkSum* lo = nullptr;
    for (const LinkSum* l : v) {
      sum += l->Gbps();
      hi = std::max(hi, l->Gbps());
      if (!lo || l->Gbps() < lo->Gbps()) lo = l;
    }
    const double mean = sum / v.size(), gap = mean > 0 ? (hi - lo->Gbps()) / mean : 0;
    if (gap >= kRatio && gap > worst_gap) {
      worst = lo;
      worst_gap = gap;
      worst_mean = mean;
    }
  }
  if (!worst) return;
  *slow_link = {{"src", worst->src},
                {"dst", worst->dst},
                {"transport", worst->transport},
                {"bandwidth_gbps", R4(worst->Gbps())},
                {"mean_gbps", R4(worst_mean)},
                {"spread_ratio", R4(worst_gap)}};
  Finding f;
  f.severity = Severity::kWarning;
  f.id = "slow_link";
  f.rank = worst->src;
  f.title = absl::StrCat("link ", worst->src, " -> ", worst->dst, " (", worst->transport,
                         ") is the slowest of its kind: ", absl::StrFormat("%.2f", worst->Gbps()),
                         " GB/s vs a mean of ", absl::StrFormat("%.2f", worst_mean), " GB/s");
  f.evidence = absl::StrCat(absl::StrFormat("%.1f MB in %.3f ms", worst->size_mb, worst->time_ms),
                            "; the ", worst->transport, " links spread by ", Pc(worst_gap),
                            " of their mean (cluster_communication_matrix.json)");
  f.fix = worst->transport == "RDMA"
              ? "check that NIC and its switch port (hccn_tool -i <dev> -link_stat -g, "
                "-optical -g), the traffic class (HCCL_RDMA_TC / HCCL_RDMA_SL against the "
                "switch's PFC priority) and congestion from other jobs"
              : "check the card pair's links (npu-smi info -t topo, npu-smi info -t health) and "
                "other traffic on them; small packets lower the figure too (larger buckets)";
  rep->findings.push_back(std::move(f));
}

void WaitFinding(const std::vector<RankWait>& waits, int slow_rank, Report* rep) {
  const RankWait* hi = nullptr;
  const RankWait* lo = nullptr;
  for (const RankWait& w : waits) {
    if (!hi || w.Ratio() > hi->Ratio()) hi = &w;
    if (!lo || w.Ratio() < lo->Ratio()) lo = &w;
  }
  if (!hi || hi->Ratio() < kWaitRatioNote || waits.size() < 2) return;
  Finding f;
  f.severity = Severity::kInfo;
  f.id = "comm_wait";
  f.rank = hi->rank;
  f.title = absl::StrCat("rank ", hi->rank, "'s communication is ", Pc(hi->Ratio()),
                         " waiting (Wait / (Wait + Transit))");
  f.evidence = absl::StrCat(
      absl::StrFormat("%.1f ms waiting, %.1f ms transmitting", hi->wait_ms, hi->transit_ms),
      "; least waiting: rank ", lo->rank, " ", Pc(lo->Ratio()));
  f.fix = slow_rank >= 0 ? absl::StrCat("the wait is for a late peer: fix rank ", slow_rank,
                                        " first (slow_rank)")
                         : "the wait is for a late peer: compare what the ranks do before "
                           "their collectives; transfers themselves are not the cost";
  rep->findings.push_back(std::move(f));
}

// RDMA retransmission (advisor communication_retransmission_checker.py, rdma_analysis.yaml
// min_retransmission_time 4000 ms): per (group, op, step) over the ranks' records, the op
// retransmitted when its shortest Elapse Time is at least 4000 ms (shorter: the ranks were out
// of step, not a lost packet) and its longest RDMA Transit Time is over 4000 ms. The ranks
// named are those with RDMA traffic whose transit is over 4000 ms.
struct Retransmission {
  std::string group, op;
  int64_t step = -1;
  double min_elapse_ms = 0, max_transit_ms = 0;
  std::vector<int> ranks;
};

std::vector<Retransmission> Retransmissions(const ClusterInput& in) {
  constexpr double kMinMs = 4000;
  std::map<std::tuple<std::string, std::string, int64_t>, std::vector<const ClusterCommRecord*>>
      ops;
  for (const ClusterCommRecord& c : in.comm)
    if (!c.total) ops[{c.group, c.op, c.step}].push_back(&c);
  std::vector<Retransmission> out;
  for (const auto& [key, recs] : ops) {
    Retransmission x{std::get<0>(key), std::get<1>(key), std::get<2>(key), recs[0]->elapse_ms, 0};
    for (const ClusterCommRecord* c : recs) {
      x.min_elapse_ms = std::min(x.min_elapse_ms, c->elapse_ms);
      auto it = c->transport.find("RDMA");
      if (it == c->transport.end()) continue;
      x.max_transit_ms = std::max(x.max_transit_ms, it->second.second);
      if (it->second.first > 0 && it->second.second > kMinMs) x.ranks.push_back(c->rank);
    }
    if (x.min_elapse_ms < kMinMs || x.max_transit_ms <= kMinMs) continue;
    std::sort(x.ranks.begin(), x.ranks.end());
    out.push_back(std::move(x));
  }
  return out;
}

// The cross-rank rule replaces the per-rank one (ascend_rules_findings.cc, which sees one
// rank's elapse only) for the ranks the communication records cover.
void RetransmissionFinding(const ClusterInput& in, Report* rep) {
  std::set<int> covered;
  for (const ClusterCommRecord& c : in.comm) covered.insert(c.rank);
  for (RankResult& r : rep->ranks) {
    if (!covered.count(r.rank)) continue;
    r.findings.erase(std::remove_if(r.findings.begin(), r.findings.end(),
                                    [](const Finding& f) { return f.id == "rdma_retransmission"; }),
                     r.findings.end());
  }
  const std::vector<Retransmission> found = Retransmissions(in);
  if (found.empty()) return;
  const Retransmission* worst = &found[0];
  std::set<int> ranks;
  for (const Retransmission& x : found) {
    if (x.max_transit_ms > worst->max_transit_ms) worst = &x;
    ranks.insert(x.ranks.begin(), x.ranks.end());
  }
  Finding f;
  f.severity = Severity::kError;
  f.id = "rdma_retransmission";
  if (!worst->ranks.empty()) f.rank = worst->ranks[0];
  f.title =
      absl::StrCat(found.size(), found.size() == 1 ? " communication op" : " communication ops",
                   " retransmitted over RDMA (ranks ", absl::StrJoin(ranks, ", "), ")");
  f.evidence = absl::StrCat(
      "longest: ", worst->op, " of group ", worst->group,
      worst->step >= 0 ? absl::StrCat(", step ", worst->step) : "",
      absl::StrFormat(": RDMA transit %.1f ms, shortest elapse over its ranks %.1f ms",
                      worst->max_transit_ms, worst->min_elapse_ms),
      "; advisor rdma_analysis.yaml: shortest elapse at least 4000 ms and a transit over 4000 ms");
  f.fix =
      "check the RoCE network: switch PFC/ECN settings against HCCL_RDMA_TC/HCCL_RDMA_SL, link "
      "errors with hccn_tool -i <dev> -stat -g; HCCL_RDMA_TIMEOUT and HCCL_RDMA_RETRY_CNT set "
      "how long and how often a lost packet is retried";
  rep->findings.push_back(std::move(f));
}

nlohmann::json RowJson(const ClusterRow& r) {
  nlohmann::json j = {
      {"step", r.step},
      {"computing_us", r.computing_us},
      {"communication_not_overlapped_us", r.comm_not_overlapped_us},
      {"overlapped_us", r.overlapped_us},
      {"communication_us", r.comm_us},
      {"free_us", r.free_us},
      {"stage_us", r.stage_us},
      {"bubble_us", r.bubble_us},
      {"communication_not_overlapped_exclude_receive_us", r.comm_not_overlapped_excl_receive_us},
      {"preparing_us", r.preparing_us}};
  if (r.rank >= 0) j["rank"] = r.rank;
  if (r.pp_index >= 0) j["pp_index"] = r.pp_index;
  if (r.dp_index >= 0) j["dp_index"] = r.dp_index;
  if (r.tp_index >= 0) j["tp_index"] = r.tp_index;
  return j;
}

}  // namespace

void AnalyzeCluster(const ClusterInput& in, const AnalyzeOptions& opt, Report* rep) {
  (void)opt;
  nlohmann::json j;
  j["source"] = in.source;
  j["path"] = in.path;
  j["files"] = nlohmann::json::array();
  for (const ClusterFile& f : in.files) {
    j["files"].push_back(
        {{"file", f.path.substr(in.path.size() + (f.path.size() > in.path.size()))},
         {"records", f.records},
         {"bad_records", f.bad_records},
         {"problems", f.problems}});
    if (f.bad_records > 0)
      rep->warnings.push_back(absl::StrCat(f.path, ": ", f.bad_records, " bad records (first: ",
                                           f.problems.empty() ? "" : f.problems[0], ")"));
  }
  std::set<int> ranks;
  std::set<int64_t> steps;
  j["rows"] = nlohmann::json::array();
  for (const ClusterRow& r : in.rows) {
    ranks.insert(r.rank);
    steps.insert(r.step);
    j["rows"].push_back(RowJson(r));
  }
  j["ranks"] = ranks;
  j["steps"] = steps;
  j["stage_rows"] = nlohmann::json::array();
  for (const ClusterStage& s : in.stages) {
    nlohmann::json row = RowJson(s.max);
    row["ranks"] = s.ranks;
    j["stage_rows"].push_back(std::move(row));
  }
  const std::vector<std::string> mismatched = StepMismatches(in);
  j["step_mismatches"] = mismatched;
  for (const std::string& m : mismatched)
    rep->warnings.push_back(absl::StrCat(in.path, ": ranks of different steps: ", m));
  if (!mismatched.empty())
    rep->findings.push_back(
        {Severity::kWarning, "cluster_input",
         absl::StrCat(mismatched.size(), " ranks have other steps than the rest"),
         absl::StrJoin(mismatched, "; "),
         "profile every rank with the same schedule (skip_first, wait, "
         "active, repeat); figures are compared over the steps each has"});
  // Slow rank.
  const std::vector<std::vector<int>> stage_sets = StageSets(in);
  const SlowRank slow = FindSlowRank(in, stage_sets);
  nlohmann::json sr = {{"rank", slow.rank},
                       {"cause", slow.cause},
                       {"mean_step_us", R4(slow.mean_total_us)},
                       {"dimensions", nlohmann::json::array()},
                       {"stages", nlohmann::json::array()}};
  for (const Dimension& d : slow.global) sr["dimensions"].push_back(DimJson(d));
  for (const auto& [st, dims] : slow.per_stage) {
    nlohmann::json s = {{"ranks", st}, {"dimensions", nlohmann::json::array()}};
    for (const Dimension& d : dims) s["dimensions"].push_back(DimJson(d));
    sr["stages"].push_back(std::move(s));
  }
  j["slow_rank"] = sr;
  SlowRankFinding(slow, stage_sets.size() > 1, rep);
  // Pipeline stages and their bubble.
  j["stages"] = nlohmann::json::array();
  BubbleFinding(in, &j["stages"], rep);
  // Bandwidth per rank and the slow link.
  const std::vector<RankBandwidth> bw = Bandwidths(in);
  j["bandwidth"] = nlohmann::json::array();
  for (const RankBandwidth& b : bw)
    j["bandwidth"].push_back({{"step", b.step},
                              {"rank", b.rank},
                              {"sdma_size_mb", R4(b.sdma_mb)},
                              {"sdma_time_ms", R4(b.sdma_ms)},
                              {"sdma_gbps", R4(b.Sdma())},
                              {"rdma_size_mb", R4(b.rdma_mb)},
                              {"rdma_time_ms", R4(b.rdma_ms)},
                              {"rdma_gbps", R4(b.Rdma())}});
  j["slow_link_rank"] = {{"SDMA", SlowLinkRank(bw, true)}, {"RDMA", SlowLinkRank(bw, false)}};
  std::vector<LinkSum> links = SumLinks(in);
  std::sort(links.begin(), links.end(), [](const LinkSum& a, const LinkSum& b) {
    return std::tie(a.transport, a.src, a.dst) < std::tie(b.transport, b.src, b.dst);
  });
  j["links"] = nlohmann::json::array();
  j["links_total"] = links.size();
  std::vector<const LinkSum*> by_bw;
  for (const LinkSum& l : links) by_bw.push_back(&l);
  std::stable_sort(by_bw.begin(), by_bw.end(),
                   [](const LinkSum* a, const LinkSum* b) { return a->Gbps() < b->Gbps(); });
  for (size_t i = 0; i < by_bw.size() && i < kMaxLinksInJson; ++i)
    j["links"].push_back({{"src", by_bw[i]->src},
                          {"dst", by_bw[i]->dst},
                          {"transport", by_bw[i]->transport},
                          {"size_mb", R4(by_bw[i]->size_mb)},
                          {"time_ms", R4(by_bw[i]->time_ms)},
                          {"bandwidth_gbps", R4(by_bw[i]->Gbps())}});
  j["slow_link"] = nullptr;
  LinkFinding(links, &j["slow_link"], rep);
  // Communication wait.
  const std::vector<RankWait> waits = Waits(in);
  j["wait"] = nlohmann::json::array();
  for (const RankWait& w : waits)
    j["wait"].push_back({{"rank", w.rank},
                         {"elapse_ms", R4(w.elapse_ms)},
                         {"wait_ms", R4(w.wait_ms)},
                         {"transit_ms", R4(w.transit_ms)},
                         {"synchronization_ms", R4(w.sync_ms)},
                         {"wait_ratio", R4(w.Ratio())},
                         {"synchronization_ratio", R4(w.SyncRatio())}});
  WaitFinding(waits, slow.rank, rep);
  RetransmissionFinding(in, rep);
  rep->cluster = std::move(j);
}

namespace {
// A stage for a table cell: "(8-15)" when its ranks are consecutive, else the first ones.
std::string ShortRankSet(const std::vector<int>& r) {
  if (r.size() > 4 && r.back() - r.front() + 1 == static_cast<int>(r.size()))
    return absl::StrCat("(", r.front(), "-", r.back(), ")");
  if (r.size() > 8)
    return absl::StrCat("(", absl::StrJoin(r.begin(), r.begin() + 6, ", "), ", ... ", r.size(),
                        " ranks)");
  return RankSet(r);
}
}  // namespace

std::string ClusterToText(const nlohmann::json& c) {
  if (c.is_null()) return "";
  auto ms = [](const nlohmann::json& v) { return absl::StrFormat("%.2f", v.get<double>() / 1e3); };
  std::string out =
      absl::StrCat("\nAscend cluster (", c["source"].get<std::string>(), ", ",
                   c["path"].get<std::string>(), "): ", c["ranks"].size(), " ranks, ",
                   c["steps"].size(), " steps, ", c["stages"].size(), " pipeline stages\n");
  Table t({"rank", "step", "computing ms", "comm not ovl ms", "overlapped ms", "free ms",
           "stage ms", "bubble ms"});
  for (const auto& r : c["rows"])
    t.AddRow({std::to_string(r["rank"].get<int>()), std::to_string(r["step"].get<int64_t>()),
              ms(r["computing_us"]), ms(r["communication_not_overlapped_us"]),
              ms(r["overlapped_us"]), ms(r["free_us"]), ms(r["stage_us"]), ms(r["bubble_us"])});
  out += t.Render();
  if (!c["stages"].empty()) {
    Table s({"stage ranks", "computing ms", "bubble ms", "bubble %"});
    for (const auto& st : c["stages"])
      s.AddRow({ShortRankSet(st["ranks"].get<std::vector<int>>()), ms(st["computing_us"]),
                ms(st["bubble_us"]), absl::StrFormat("%.1f", st["bubble_pct"].get<double>())});
    out += s.Render();
  }
  if (!c["wait"].empty()) {
    Table w({"rank", "comm wait ms", "transit ms", "wait ratio", "sync ratio"});
    for (const auto& r : c["wait"])
      w.AddRow({std::to_string(r["rank"].get<int>()),
                absl::StrFormat("%.2f", r["wait_ms"].get<double>()),
                absl::StrFormat("%.2f", r["transit_ms"].get<double>()),
                absl::StrFormat("%.4f", r["wait_ratio"].get<double>()),
                absl::StrFormat("%.4f", r["synchronization_ratio"].get<double>())});
    out += w.Render();
  }
  return out;
}

}  // namespace trainscope::trace::internal
