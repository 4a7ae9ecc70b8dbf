// Per-rank timeline analysis: steps, HTA temporal breakdown, comm/compute overlap, iteration
// gap, host phases. Operator-level sections are in operators.cc, findings in findings.cc.
#include <algorithm>
#include <cctype>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "trace/analysis_internal.h"
#include "trace/ascend_rules.h"

namespace trainscope::trace {
namespace internal {

std::vector<Interval> Union(std::vector<Interval> v) {
  if (!std::is_sorted(v.begin(), v.end())) std::sort(v.begin(), v.end());
  std::vector<Interval> out;
  for (const Interval& i : v) {
    if (i.second <= i.first) continue;
    if (!out.empty() && i.first <= out.back().second) {
      out.back().second = std::max(out.back().second, i.second);
    } else {
      out.push_back(i);
    }
  }
  return out;
}

int64_t Length(const std::vector<Interval>& m) {
  int64_t s = 0;
  for (const auto& i : m) s += i.second - i.first;
  return s;
}

int64_t IntersectLength(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  size_t i = 0, j = 0;
  int64_t s = 0;
  while (i < a.size() && j < b.size()) {
    int64_t lo = std::max(a[i].first, b[j].first), hi = std::min(a[i].second, b[j].second);
    if (hi > lo) s += hi - lo;
    if (a[i].second < b[j].second) {
      ++i;
    } else {
      ++j;
    }
  }
  return s;
}

int64_t LengthIn(const std::vector<Interval>& m, int64_t lo, int64_t hi) {
  auto it =
      std::lower_bound(m.begin(), m.end(), Interval{lo, lo},
                       [](const Interval& a, const Interval& b) { return a.second < b.first; });
  int64_t s = 0;
  for (; it != m.end() && it->first < hi; ++it) {
    int64_t a = std::max(it->first, lo), b = std::min(it->second, hi);
    if (b > a) s += b - a;
  }
  return s;
}

std::vector<Interval> Complement(const std::vector<Interval>& m, int64_t lo, int64_t hi) {
  std::vector<Interval> out;
  int64_t cur = lo;
  for (const auto& i : m) {
    if (i.second <= cur) continue;
    if (i.first >= hi) break;
    if (i.first > cur) out.push_back({cur, std::min(i.first, hi)});
    cur = std::max(cur, i.second);
    if (cur >= hi) break;
  }
  if (cur < hi) out.push_back({cur, hi});
  return out;
}

namespace {
bool Has(std::string_view s, std::string_view sub) { return s.find(sub) != std::string_view::npos; }
bool Starts(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
std::string Lower(std::string_view s) {
  std::string o(s);
  for (char& c : o) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return o;
}
}  // namespace

Phase PhaseOfName(std::string_view name) {
  std::string l = Lower(name);
  if (Has(l, "dataloader") || Has(l, "data_loader") || Has(l, "data_wait")) return Phase::kData;
  if (Starts(name, "Optimizer.") || Has(l, "optimizer")) return Phase::kOptimizer;
  if (Starts(l, "gloo:") || Starts(l, "nccl:") || Starts(l, "c10d::") || Starts(l, "hccl") ||
      Starts(l, "hcom") || Starts(l, "record_param_comms") || Has(l, "allreduce") ||
      Has(l, "all_reduce") || Has(l, "allgather") || Has(l, "all_gather") ||
      Has(l, "reduce_scatter") || Has(l, "reducescatter") || Has(l, "alltoall") ||
      Has(l, "broadcast") || Has(l, "ddp.reducer") || Has(l, "barrier"))
    return Phase::kComm;
  if (Has(l, "backward") || Starts(l, "autograd::engine")) return Phase::kBackward;
  if (Has(l, ".forward") || Has(l, "## forward") || Starts(l, "nn.module")) return Phase::kForward;
  return Phase::kUnknown;
}

const char* PhaseName(Phase p) {
  switch (p) {
    case Phase::kData:
      return "data_loading";
    case Phase::kForward:
      return "forward";
    case Phase::kBackward:
      return "backward";
    case Phase::kOptimizer:
      return "optimizer";
    case Phase::kComm:
      return "communication";
    default:
      return "other";
  }
}

bool IsAnnotationName(std::string_view n) {
  return Starts(n, "ProfilerStep#") || Starts(n, "##") || Starts(n, "Optimizer.step#") ||
         Starts(n, "Optimizer.zero_grad#");
}

bool IsSyncName(std::string_view n) {
  return Has(n, "Synchronize") || n == "aten::item" || n == "aten::_local_scalar_dense" ||
         n == "Stream Sync" || n == "Device Sync" || n == "Event Sync" ||
         Has(n, "aclrtSynchronize");
}

bool IsLaunchName(std::string_view n) {
  return Has(n, "LaunchKernel") || Has(n, "LaunchCooperativeKernel") || Has(n, "cuLaunch") ||
         Has(n, "MemcpyAsync") || Has(n, "MemsetAsync");
}

// torch_npu output (its own format, or a Kineto-style trace whose processes or runtime calls
// name the NPU / AscendCL) is "npu"; device kernels or CUDA runtime calls are "cuda"; a Chrome
// trace with neither ran on the CPU alone.
std::string DeviceOf(const RankTrace& t, const HostView& hv) {
  if (t.format == "phase-log") return "";
  if (t.format == "ascend" || !t.ascend_steps.empty()) return "npu";
  for (const auto& [pid, name] : t.process_names)
    if (Has(name, "NPU") || Has(name, "Ascend")) return "npu";
  bool cuda_runtime = false;
  std::vector<bool> seen(t.strings.size(), false);
  for (const Event& e : t.events) {
    if (e.cat != Category::kRuntime || seen[e.name]) continue;
    seen[e.name] = true;
    const std::string& n = t.strings.Get(e.name);
    if (Starts(n, "AscendCL@") || Starts(n, "acl")) return "npu";
    if (Starts(n, "cuda") || Starts(n, "cu")) cuda_runtime = true;
  }
  return hv.has_device || cuda_runtime ? "cuda" : "cpu";
}

namespace {
// The name rules of one distinct event name.
NameInfo InfoOfName(const std::string& n) {
  NameInfo ni;
  ni.phase = PhaseOfName(n);
  ni.sync = IsSyncName(n);
  ni.launch = IsLaunchName(n);
  ni.gather = IsGatherScatter(n);
  ni.fusible = IsFusible(n);
  ni.aten = n.rfind("aten::", 0) == 0;
  ni.heavy = IsHeavyComputeOp(n);
  ni.step = n.rfind("ProfilerStep", 0) == 0;
  ni.annotation = IsAnnotationName(n);
  return ni;
}

// Which events are on the analysed timeline (not CSV-only, not torch_npu's "Overlap Analysis"
// summary tracks), whether any device event is, and the host events in file order.
void MarkTimeline(const RankTrace& t, HostView* hv) {
  const size_t n = t.events.size();
  std::vector<uint32_t> summary_pids;
  for (const auto& [pid, name] : t.process_names)
    if (name == "Overlap Analysis") summary_pids.push_back(pid);
  for (size_t i = 0; i < n; ++i) {
    const Event& e = t.events[i];
    if (e.flags & kFlagFromCsv) hv->timeline[i] = false;
    if (!summary_pids.empty() &&
        std::find(summary_pids.begin(), summary_pids.end(), e.pid) != summary_pids.end())
      hv->timeline[i] = false;
    if ((e.flags & kFlagDevice) && hv->timeline[i]) hv->has_device = true;
    if (!(e.flags & kFlagDevice) && hv->timeline[i]) hv->order.push_back(static_cast<uint32_t>(i));
  }
}

// The name rules of every distinct event name, by string id.
void NameRules(const RankTrace& t, HostView* hv) {
  hv->names.resize(t.strings.size());
  std::vector<bool> named(t.strings.size(), false);
  for (const Event& e : t.events) {
    if (named[e.name]) continue;
    named[e.name] = true;
    const std::string& n = t.strings.Get(e.name);
    hv->names[e.name] = InfoOfName(n);
  }
}

// Group by thread keeping file order (a stable counting sort), then sort each thread's run
// by (ts, -dur) only when it is not already in that order (profilers mostly write in order).
void GroupByThread(const std::vector<Event>& ev, HostView* hv) {
  absl::flat_hash_map<uint64_t, uint32_t> thread_ix;
  std::vector<uint64_t> keys;
  std::vector<uint32_t> tix(hv->order.size());
  for (size_t k = 0; k < hv->order.size(); ++k) {
    uint64_t key = ThreadKey(ev[hv->order[k]]);
    auto [it, ins] = thread_ix.try_emplace(key, static_cast<uint32_t>(keys.size()));
    if (ins) keys.push_back(key);
    tix[k] = it->second;
  }
  // Threads in key order, so that results do not depend on file order.
  std::vector<uint32_t> rank_of(keys.size());
  {
    std::vector<uint32_t> by_key(keys.size());
    for (uint32_t k = 0; k < keys.size(); ++k) by_key[k] = k;
    std::sort(by_key.begin(), by_key.end(),
              [&](uint32_t a, uint32_t b) { return keys[a] < keys[b]; });
    for (uint32_t r = 0; r < by_key.size(); ++r) rank_of[by_key[r]] = r;
  }
  std::vector<size_t> start(keys.size() + 1, 0);
  for (uint32_t x : tix) ++start[rank_of[x] + 1];
  for (size_t k = 1; k < start.size(); ++k) start[k] += start[k - 1];
  std::vector<uint32_t> grouped(hv->order.size());
  std::vector<size_t> pos(start.begin(), start.end() - 1);
  for (size_t k = 0; k < hv->order.size(); ++k) grouped[pos[rank_of[tix[k]]]++] = hv->order[k];
  auto less = [&](uint32_t a, uint32_t b) {
    if (ev[a].ts_ns != ev[b].ts_ns) return ev[a].ts_ns < ev[b].ts_ns;
    if (ev[a].dur_ns != ev[b].dur_ns) return ev[a].dur_ns > ev[b].dur_ns;
    return a < b;
  };
  for (size_t k = 0; k + 1 < start.size(); ++k) {
    auto b = grouped.begin() + start[k], e = grouped.begin() + start[k + 1];
    if (!std::is_sorted(b, e, less)) std::sort(b, e, less);
  }
  hv->order = std::move(grouped);
}

// Nesting per thread with a stack: an event is the child of the innermost open event that
// contains it; partial overlaps (bad nesting) are treated as siblings.
void Nest(const std::vector<Event>& ev, HostView* hv) {
  std::vector<uint32_t> stack;
  uint64_t cur = ~uint64_t{0};
  for (uint32_t i : hv->order) {
    const Event& e = ev[i];
    if (ThreadKey(e) != cur) {
      stack.clear();
      cur = ThreadKey(e);
    }
    while (!stack.empty() &&
           (ev[stack.back()].end_ns() <= e.ts_ns || ev[stack.back()].end_ns() < e.end_ns()))
      stack.pop_back();
    if (!stack.empty()) hv->parent[i] = static_cast<int32_t>(stack.back());
    stack.push_back(i);
  }
}

// The digits after the first '#' of a step name, concatenated ("" when none).
std::string StepDigits(const std::string& name, size_t hash) {
  std::string digits;
  for (size_t k = hash + 1; k < name.size(); ++k)
    if (std::isdigit(static_cast<unsigned char>(name[k]))) digits += name[k];
  return digits;
}

// Steps: ProfilerStep#N (HTA's regex ProfilerStep\s*#\s*(\d+)) on the thread that has the
// most of them, by time.
void FindSteps(const RankTrace& t, HostView* hv) {
  const auto& ev = t.events;
  absl::flat_hash_map<uint64_t, int> step_threads;
  for (uint32_t i : hv->order) {
    if (!hv->names[ev[i].name].step) continue;
    const std::string& name = t.strings.Get(ev[i].name);
    size_t h = name.find('#');
    int64_t num = 0;
    if (h == std::string::npos) continue;
    std::string digits = StepDigits(name, h);
    if (digits.empty() || !absl::SimpleAtoi(digits, &num)) continue;
    hv->steps.push_back(i);
    ++step_threads[ThreadKey(ev[i])];
  }
  int best = 0;
  for (const auto& [k, c] : step_threads)
    if (c > best) {
      best = c;
      hv->main_thread = k;
    }
  hv->steps.erase(std::remove_if(hv->steps.begin(), hv->steps.end(),
                                 [&](uint32_t i) { return ThreadKey(ev[i]) != hv->main_thread; }),
                  hv->steps.end());
  std::sort(hv->steps.begin(), hv->steps.end(),
            [&](uint32_t a, uint32_t b) { return ev[a].ts_ns < ev[b].ts_ns; });
  for (uint32_t i : hv->steps) {
    const std::string& name = t.strings.Get(ev[i].name);
    int64_t num = 0;
    (void)absl::SimpleAtoi(StepDigits(name, name.find('#')), &num);
    hv->step_numbers.push_back(num);
  }
}
}  // namespace

HostView PrepareHost(const RankTrace& t) {
  HostView hv;
  const size_t n = t.events.size();
  hv.parent.assign(n, -1);
  hv.timeline.assign(n, true);
  MarkTimeline(t, &hv);
  NameRules(t, &hv);
  GroupByThread(t.events, &hv);
  Nest(t.events, &hv);
  FindSteps(t, &hv);
  return hv;
}

namespace {

// Host phases of one step on the main thread: its direct children classified by name, then
// by position (before the first backward op: forward; until the optimizer: backward); the
// gaps between children split into waiting for communication (overlapping collective work
// on other threads) and plain host idle time.
void HostPhases(const RankTrace& t, const HostView& hv, uint32_t step_idx,
                const std::vector<uint32_t>& children, const std::vector<Interval>& comm_union,
                StepResult* s) {
  const Event& st = t.events[step_idx];
  std::vector<Interval> busy;
  bool seen_backward = false, seen_optimizer_after_backward = false;
  for (uint32_t c : children) {
    const Event& e = t.events[c];
    Phase p = hv.names[e.name].phase;
    if (p == Phase::kBackward) seen_backward = true;
    if (p == Phase::kOptimizer && seen_backward) seen_optimizer_after_backward = true;
    if (p == Phase::kUnknown) {
      p = !seen_backward ? Phase::kForward
                         : (seen_optimizer_after_backward ? Phase::kUnknown : Phase::kBackward);
    }
    s->host_us[PhaseName(p)] += e.dur_ns / 1e3;
    busy.push_back({e.ts_ns, e.end_ns()});
  }
  std::vector<Interval> gaps = Complement(Union(std::move(busy)), st.ts_ns, st.end_ns());
  int64_t wait = IntersectLength(gaps, comm_union);
  s->host_us["comm_wait"] += wait / 1e3;
  s->host_us["host_idle"] += (Length(gaps) - wait) / 1e3;
}

double Pct(double part, double whole) { return whole > 0 ? 100.0 * part / whole : 0.0; }

void FromAscendSteps(const RankTrace& t, RankResult* r) {
  double e2e_total = 0, comp = 0, cno = 0, fr = 0, ov = 0, comm = 0;
  double start = 0;
  for (const AscendStepRow& a : t.ascend_steps) {
    StepResult s;
    s.step = a.step;
    s.step_us = a.computing_us + a.comm_not_overlapped_us + a.free_us;
    s.start_us = start;
    start += s.step_us;
    s.gap_us = a.free_us;
    s.gap_pct = Pct(a.free_us, s.step_us);
    s.device_busy_us = a.computing_us + a.comm_not_overlapped_us;
    s.comm_us = a.comm_us;
    s.host_us["computing"] = a.computing_us;
    s.host_us["communication_not_overlapped"] = a.comm_not_overlapped_us;
    s.host_us["overlapped"] = a.overlapped_us;
    s.host_us["free"] = a.free_us;
    s.host_us["bubble"] = a.bubble_us;
    s.host_us["preparing"] = a.preparing_us;
    r->steps.push_back(s);
    e2e_total += s.step_us;
    comp += a.computing_us;
    cno += a.comm_not_overlapped_us;
    fr += a.free_us;
    ov += a.overlapped_us;
    comm += a.comm_us;
  }
  r->basis = "ascend";
  r->kernel_time_us = e2e_total;
  r->compute_us = comp;
  r->non_compute_us = cno;
  r->idle_us = fr;
  if (comm > 0) r->comm_comp_overlap_pct = Pct(ov, comm);
}

void FromPhaseLog(const RankTrace& t, RankResult* r) {
  double start = 0, total = 0, comp = 0, comm = 0;
  for (const PhaseStep& p : t.phase_steps) {
    StepResult s;
    s.step = p.step;
    double sum = 0, step_total = -1;
    for (const auto& [k, ms] : p.phases_ms) {
      if (k == "step" || k == "total" || k == "step_time" || k == "iteration") {
        step_total = ms * 1e3;
        continue;
      }
      std::string key = k == "data_wait" ? "data_loading" : k;
      s.host_us[key] += ms * 1e3;
      sum += ms * 1e3;
    }
    s.step_us = step_total > 0 ? step_total : sum;
    s.start_us = start;
    start += s.step_us;
    double c = s.host_us["forward"] + s.host_us["backward"] + s.host_us["optimizer"];
    double w = s.host_us["comm_wait"] + s.host_us["communication"];
    s.comm_us = w;
    s.device_busy_us = c;
    s.gap_us = std::max(0.0, s.step_us - c);
    s.gap_pct = Pct(s.gap_us, s.step_us);
    r->steps.push_back(s);
    total += s.step_us;
    comp += c;
    comm += w;
  }
  r->basis = "phase-log";
  r->kernel_time_us = total;
  r->compute_us = comp;
  r->non_compute_us = comm;
  r->idle_us = std::max(0.0, total - comp - comm);
}

// The last of the breakdown: torch_npu's own figures (Overlap Analysis) and the advisor's
// evidence, the flagged steps, the shares of kernel time.
void FinishBreakdown(const RankTrace& t, const HostView& hv, const AnalyzeOptions& opt,
                     RankResult* r) {
  AscendDetails(t, hv, opt, r);
  for (StepResult& s : r->steps) s.gap_flagged = s.gap_pct > opt.iteration_gap_threshold_pct;
  r->idle_pct = Pct(r->idle_us, r->kernel_time_us);
  r->compute_pct = Pct(r->compute_us, r->kernel_time_us);
  r->non_compute_pct = Pct(r->non_compute_us, r->kernel_time_us);
}

nlohmann::json StatsJson(const ParseStats& s) {
  nlohmann::json j = {{"bytes", s.bytes},
                      {"events_seen", s.events_seen},
                      {"events_kept", s.events_kept},
                      {"flow_events", s.flow_events},
                      {"metadata_events", s.metadata_events},
                      {"python_functions_skipped", s.python_functions_skipped},
                      {"other_phases", s.other_phases},
                      {"truncated", s.truncated},
                      {"truncated_at_byte", s.truncated_at_byte},
                      {"unknown_categories", s.unknown_categories},
                      {"warnings", s.warnings}};
  for (const auto& [name, n] : BadRecordCounts(s)) j[name] = n;
  return j;
}

// Host collective work on any thread (gloo/c10d ops, for host-only traces), merged, and the
// direct children of each step annotation, in time order.
std::vector<Interval> StepChildren(const RankTrace& t, const HostView& hv,
                                   std::vector<std::vector<uint32_t>>* children) {
  const auto& ev = t.events;
  std::vector<Interval> host_comm;
  std::vector<int32_t> step_of(ev.size(), -1);
  for (size_t k = 0; k < hv.steps.size(); ++k) step_of[hv.steps[k]] = static_cast<int32_t>(k);
  children->assign(hv.steps.size(), {});
  for (uint32_t i : hv.order) {
    if (hv.parent[i] >= 0 && step_of[hv.parent[i]] >= 0)
      (*children)[step_of[hv.parent[i]]].push_back(i);
    if (hv.names[ev[i].name].phase == Phase::kComm)
      host_comm.push_back({ev[i].ts_ns, ev[i].end_ns()});
  }
  return Union(std::move(host_comm));
}

// The analysed windows, (step number, [lo, hi)): each step annotation, or without any the
// whole timeline as step -1.
std::vector<std::pair<int64_t, Interval>> StepWindows(const RankTrace& t, const HostView& hv) {
  const auto& ev = t.events;
  std::vector<std::pair<int64_t, Interval>> windows;
  for (size_t k = 0; k < hv.steps.size(); ++k) {
    const Event& s = ev[hv.steps[k]];
    windows.push_back({hv.step_numbers[k], {s.ts_ns, s.end_ns()}});
  }
  if (windows.empty()) {
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (size_t i = 0; i < ev.size(); ++i) {
      if (!hv.timeline[i]) continue;
      lo = std::min(lo, ev[i].ts_ns);
      hi = std::max(hi, ev[i].end_ns());
    }
    if (lo < hi) windows.push_back({-1, {lo, hi}});
  }
  return windows;
}

// Sums over the steps of a timeline, for the host-only breakdown.
struct HostTotals {
  double compute = 0, comm = 0, total = 0;
};

// One StepResult per window: host phases, device busy time (or host compute) and the gap.
HostTotals TimelineSteps(const RankTrace& t, const HostView& hv, const DeviceTimeline& dev,
                         const std::vector<std::vector<uint32_t>>& children,
                         const std::vector<Interval>& host_comm, RankResult* r) {
  std::vector<std::pair<int64_t, Interval>> windows = StepWindows(t, hv);
  int64_t t0 = windows.empty() ? 0 : windows[0].second.first;
  HostTotals sum;
  for (size_t k = 0; k < windows.size(); ++k) {
    StepResult s;
    s.step = windows[k].first;
    auto [lo, hi] = windows[k].second;
    s.start_us = (lo - t0) / 1e3;
    s.step_us = (hi - lo) / 1e3;
    if (k < hv.steps.size()) HostPhases(t, hv, hv.steps[k], children[k], host_comm, &s);
    double host_compute = s.host_us["forward"] + s.host_us["backward"] + s.host_us["optimizer"];
    if (hv.has_device) {
      s.device_busy_us = LengthIn(dev.all, lo, hi) / 1e3;
      s.comm_us = LengthIn(dev.comm, lo, hi) / 1e3;
      s.gap_us = s.step_us - s.device_busy_us;
    } else {
      s.comm_us = LengthIn(host_comm, lo, hi) / 1e3;
      s.gap_us = std::max(0.0, s.step_us - host_compute);
    }
    s.gap_pct = Pct(s.gap_us, s.step_us);
    sum.compute += host_compute;
    sum.comm += s.host_us["communication"] + s.host_us["comm_wait"];
    sum.total += s.step_us;
    r->steps.push_back(std::move(s));
  }
  return sum;
}

// Overlap on the host: collective time on other threads while the main thread computes.
double HostOverlapPct(const RankTrace& t, const HostView& hv,
                      const std::vector<Interval>& host_comm) {
  const auto& ev = t.events;
  std::vector<Interval> main_compute;
  std::vector<bool> is_step(ev.size(), false);
  for (uint32_t i : hv.steps) is_step[i] = true;
  for (uint32_t i : hv.order) {
    if (ThreadKey(ev[i]) != hv.main_thread || hv.parent[i] < 0) continue;
    if (!is_step[hv.parent[i]]) continue;
    Phase ph = hv.names[ev[i].name].phase;
    if (ph == Phase::kForward || ph == Phase::kBackward || ph == Phase::kOptimizer)
      main_compute.push_back({ev[i].ts_ns, ev[i].end_ns()});
  }
  main_compute = Union(std::move(main_compute));
  return Pct(IntersectLength(host_comm, main_compute), Length(host_comm));
}

// The breakdown from the timeline itself: HTA's device figures, or on host-only traces the
// host phases of the steps.
void FromTimeline(const RankTrace& t, const HostView& hv, const DeviceTimeline& dev,
                  RankResult* r) {
  std::vector<std::vector<uint32_t>> children;
  std::vector<Interval> host_comm = StepChildren(t, hv, &children);
  r->basis = hv.has_device ? "device" : "host";
  HostTotals host = TimelineSteps(t, hv, dev, children, host_comm, r);
  if (hv.has_device) {
    if (dev.hta_kernel_ns > 0) {
      int64_t kt = dev.hta_kernel_ns, idle = kt - dev.hta_busy_ns, c = dev.hta_compute_ns;
      r->kernel_time_us = kt / 1e3;
      r->idle_us = idle / 1e3;
      r->compute_us = c / 1e3;
      r->non_compute_us = (kt - c - idle) / 1e3;
    }
    if (!dev.comm.empty())
      r->comm_comp_overlap_pct = Pct(IntersectLength(dev.comm, dev.compute), Length(dev.comm));
  } else {
    r->kernel_time_us = host.total;
    r->compute_us = std::min(host.compute, host.total);
    r->non_compute_us = std::min(host.comm, host.total - r->compute_us);
    r->idle_us = std::max(0.0, host.total - r->compute_us - r->non_compute_us);
    if (!host_comm.empty() && hv.main_thread)
      r->comm_comp_overlap_pct = HostOverlapPct(t, hv, host_comm);
  }
}

// torch_npu's own step breakdown, shown beside the timeline analysis.
nlohmann::json AscendStepTrace(const RankTrace& t) {
  nlohmann::json rows = nlohmann::json::array();
  for (const AscendStepRow& a : t.ascend_steps)
    rows.push_back({{"step", a.step},
                    {"computing_us", a.computing_us},
                    {"communication_not_overlapped_us", a.comm_not_overlapped_us},
                    {"overlapped_us", a.overlapped_us},
                    {"communication_us", a.comm_us},
                    {"free_us", a.free_us},
                    {"stage_us", a.stage_us},
                    {"bubble_us", a.bubble_us},
                    {"preparing_us", a.preparing_us}});
  return rows;
}

}  // namespace
}  // namespace internal

using namespace internal;  // NOLINT: this file implements them

double RankResult::MeanStepUs() const {
  double s = 0;
  for (const auto& x : steps) s += x.step_us;
  return steps.empty() ? 0 : s / steps.size();
}
double RankResult::MeanHostUs(const std::string& phase) const {
  double s = 0;
  for (const auto& x : steps) {
    auto it = x.host_us.find(phase);
    if (it != x.host_us.end()) s += it->second;
  }
  return steps.empty() ? 0 : s / steps.size();
}
double RankResult::MeanCommUs() const {
  double s = 0;
  for (const auto& x : steps) s += x.comm_us;
  return steps.empty() ? 0 : s / steps.size();
}

RankResult AnalyzeRank(RankTrace* trace, const AnalyzeOptions& opt) {
  RankTrace& t = *trace;
  RankResult r;
  r.rank = t.rank;
  r.path = t.path;
  r.format = t.format;
  r.rank_source = t.rank_source;
  r.stats = t.stats;
  // HTA's definitions first: whole-us times on ns traces, the last step (and its work) out.
  if (t.fractional_ts && !opt.ns_precision) RoundTimesLikeHta(&t);
  HostView hv = PrepareHost(t);
  ApplyHtaStepFilter(t, opt.include_last_step, &hv);
  r.device = DeviceOf(t, hv);
  DeviceTimeline dev = CollectDeviceTimeline(t, hv);
  if (!t.ascend_steps.empty() && hv.steps.empty()) {
    FromAscendSteps(t, &r);
  } else if (!t.phase_steps.empty()) {
    FromPhaseLog(t, &r);
  } else {
    FromTimeline(t, hv, dev, &r);
  }
  if (!t.ascend_steps.empty() && r.basis != "ascend")
    r.details["ascend_step_trace"] = AscendStepTrace(t);
  FinishBreakdown(t, hv, opt, &r);
  AnalyzeOperators(t, hv, opt, &r);
  r.details["kernel_types"] = dev.kernel_types;
  t.stats.negative_launch_delay = r.stats.negative_launch_delay;
  r.parse = StatsJson(r.stats);
  RankFindings(opt, &r);
  return r;
}

Report AnalyzeRanks(std::vector<RankTrace>* traces, const AnalyzeOptions& opt) {
  // Ranks without one get the next free number, in path order.
  std::vector<bool> used;
  for (auto& t : *traces)
    if (t.rank >= 0) {
      if (used.size() <= static_cast<size_t>(t.rank)) used.resize(t.rank + 1);
      used[t.rank] = true;
    }
  int next = 0;
  for (auto& t : *traces) {
    if (t.rank >= 0) continue;
    while (next < static_cast<int>(used.size()) && used[next]) ++next;
    t.rank = next++;
    t.rank_source = "order";
  }
  std::vector<RankResult> results;
  for (auto& t : *traces) results.push_back(AnalyzeRank(&t, opt));
  return CombineRanks(std::move(results), opt);
}

Report CombineRanks(std::vector<RankResult> ranks, const AnalyzeOptions& opt) {
  Report rep;
  rep.ranks = std::move(ranks);
  std::stable_sort(rep.ranks.begin(), rep.ranks.end(),
                   [](const RankResult& a, const RankResult& b) { return a.rank < b.rank; });
  CrossRankFindings(opt, &rep);
  return rep;
}

}  // namespace trainscope::trace
