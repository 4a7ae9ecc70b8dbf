// HolisticTraceAnalysis' definitions, reproduced from its documented behaviour (HTA's
// trace_parser.round_down_time_stamps, Trace._filter_irrelevant_gpu_kernels,
// BreakdownAnalysis.get_temporal_breakdown and get_gpu_kernel_breakdown); docs/metrics.md
// "HTA agreement" lists each rule and the cases where we knowingly differ.
#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "trace/analysis_internal.h"

namespace trainscope::trace::internal {
namespace {

// HTA's profiler step names: ^ProfilerStep#(\d+).
bool IsStepName(std::string_view n) {
  constexpr std::string_view kPrefix = "ProfilerStep#";
  return n.substr(0, kPrefix.size()) == kPrefix && n.size() > kPrefix.size() &&
         n[kPrefix.size()] >= '0' && n[kPrefix.size()] <= '9';
}

// A time in us as the double HTA's JSON parser reads from the decimal text: ns / 1000 in long
// double is within 2^-13 us of the exact value, and the exact value is at least 0.001 us from
// any point where rounding to double could go the other way, so this is the correctly rounded
// double of the text.
double UsAsDouble(int64_t ns) {
  return static_cast<double>(static_cast<long double>(ns) / 1000.0L);
}

}  // namespace

void RoundTimesLikeHta(RankTrace* t) {
  // HTA, on a trace whose ts column is float: end = ts + dur (in double), ts = ceil(ts),
  // end = floor(end), dur = end - ts. A sub-microsecond event can end up with dur -1 us; HTA
  // keeps it so, and so do we (MergeLikeHta handles such intervals as HTA does).
  for (Event& e : t->events) {
    double ts = UsAsDouble(e.ts_ns), end = ts + UsAsDouble(e.dur_ns);
    int64_t ts_us = static_cast<int64_t>(std::ceil(ts));
    int64_t end_us = static_cast<int64_t>(std::floor(end));
    e.ts_ns = ts_us * 1000;
    e.dur_ns = (end_us - ts_us) * 1000;
  }
}

int CountStepNames(const RankTrace& t) {
  std::vector<bool> seen(t.strings.size(), false);
  int n = 0;
  for (const Event& e : t.events) {
    if (seen[e.name]) continue;
    seen[e.name] = true;
    if (IsStepName(t.strings.Get(e.name))) ++n;
  }
  return n;
}

std::vector<bool> HtaKeptEvents(const RankTrace& t, bool include_last_step) {
  const auto& ev = t.events;
  std::vector<bool> kept(ev.size(), true);
  // HTA filters only when the trace has two or more ProfilerStep#N names.
  if (CountStepNames(t) < 2) return kept;
  // "Device" side of the filter: events on a stream >= 0 with a correlation id, plus the
  // device-wide syncs (Event Sync, Context Sync, which sit on stream -1). The rest is "host".
  std::vector<int8_t> name_kind(t.strings.size(), -1);  // 0 other, 1 step, 2 device sync
  auto kind_of = [&](uint32_t name) {
    if (name_kind[name] < 0) {
      const std::string& n = t.strings.Get(name);
      name_kind[name] = IsStepName(n) ? 1 : (n == "Event Sync" || n == "Context Sync") ? 2 : 0;
    }
    return name_kind[name];
  };
  auto device_side = [&](const Event& e) {
    return (e.stream >= 0 && (e.flags & kFlagHasCorrelation)) || kind_of(e.name) == 2;
  };
  int64_t last_start = INT64_MIN, last_end = INT64_MIN;
  for (const Event& e : ev) {
    if (device_side(e) || kind_of(e.name) != 1 || e.cat == Category::kNone) continue;
    last_start = std::max(last_start, e.ts_ns);
    last_end = std::max(last_end, e.end_ns());
  }
  if (last_start == INT64_MIN) return kept;  // the step names are all on the device side
  // Host events of the analysed steps: everything that starts before the last step (or, with
  // include_last_step, no later than its end); device events only when a kept host event
  // launched them (same correlation id; a missing id matches a missing id, as HTA's -1 does).
  absl::flat_hash_set<uint64_t> launched;
  bool launched_missing = false;
  for (size_t i = 0; i < ev.size(); ++i) {
    const Event& e = ev[i];
    if (device_side(e)) continue;
    kept[i] = include_last_step ? e.ts_ns <= last_end : e.ts_ns < last_start;
    if (!kept[i]) continue;
    if (e.flags & kFlagHasCorrelation) {
      launched.insert(e.correlation);
    } else {
      launched_missing = true;
    }
  }
  for (size_t i = 0; i < ev.size(); ++i) {
    const Event& e = ev[i];
    if (!device_side(e)) continue;
    kept[i] =
        (e.flags & kFlagHasCorrelation) ? launched.count(e.correlation) > 0 : launched_missing;
  }
  return kept;
}

std::vector<Interval> MergeLikeHta(std::vector<Interval> v) {
  // HTA's merge_kernel_intervals: sort by start; an interval opens a new group when it starts
  // after every end seen so far; a group spans [first start, largest end in it]. Unlike
  // Union(), empty and inverted intervals are kept (they still bound the kernel time, and a
  // lone inverted one counts negative, as in HTA).
  std::sort(v.begin(), v.end());
  std::vector<Interval> out;
  int64_t max_end = INT64_MIN;
  for (const Interval& i : v) {
    if (out.empty() || i.first > max_end) {
      out.push_back(i);
    } else {
      out.back().second = std::max(out.back().second, i.second);
    }
    max_end = std::max(max_end, i.second);
  }
  return out;
}

nlohmann::json KernelTypeBreakdown(const std::vector<Interval>& compute,
                                   const std::vector<Interval>& comm,
                                   const std::vector<Interval>& memory,
                                   const std::vector<Interval>& other, int64_t kernel_time_ns) {
  // HTA's get_gpu_kernel_breakdown(include_memory_kernels=True) kernel-type table: the merged
  // intervals of each type are swept together; each stretch of time is labelled by the set of
  // types running then ("COMPUTATION overlapping COMMUNICATION", ...), in HTA's type order.
  static constexpr const char* kNames[] = {"COMPUTATION", "COMMUNICATION", "MEMORY"};
  std::vector<std::pair<int64_t, int>> edges;  // (time, +-bit)
  const std::vector<Interval>* types[] = {&compute, &comm, &memory};
  for (int k = 0; k < 3; ++k)
    for (const Interval& i : MergeLikeHta(*types[k]))
      edges.push_back({i.first, 1 << k}), edges.push_back({i.second, -(1 << k)});
  std::sort(edges.begin(), edges.end());
  std::map<int, int64_t> by_mask;
  int running = 0;
  for (size_t k = 0; k + 1 < edges.size(); ++k) {
    running += edges[k].second;
    if (running > 0) by_mask[running] += edges[k + 1].first - edges[k].first;
  }
  int64_t total = 0;
  for (const auto& [mask, ns] : by_mask) total += ns;
  std::vector<std::pair<std::string, int64_t>> rows;
  for (const auto& [mask, ns] : by_mask) {
    std::string label;
    for (int k = 0; k < 3; ++k)
      if (mask & (1 << k)) absl::StrAppend(&label, label.empty() ? "" : " overlapping ", kNames[k]);
    rows.push_back({label, ns});
  }
  std::stable_sort(rows.begin(), rows.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  nlohmann::json types_json = nlohmann::json::array();
  auto r2 = [](double v) { return std::round(v * 100.0) / 100.0; };
  for (const auto& [label, ns] : rows)
    types_json.push_back({{"kernel_type", label},
                          {"time_us", r2(ns / 1e3)},
                          {"pct", total ? std::round(1000.0 * ns / total) / 10.0 : 0.0}});
  std::vector<Interval> o = Union(other);
  return {{"definition", "HTA get_gpu_kernel_breakdown (include_memory_kernels=True)"},
          {"types", types_json},
          {"total_us", r2(total / 1e3)},
          {"other_us", r2(Length(o) / 1e3)},
          {"other_pct_of_kernel_time",
           kernel_time_ns > 0 ? r2(100.0 * Length(o) / kernel_time_ns) : 0.0}};
}

void ApplyHtaStepFilter(const RankTrace& t, bool include_last_step, HostView* hv) {
  const auto& ev = t.events;
  hv->kept = HtaKeptEvents(t, include_last_step);
  const std::vector<bool>& kept = hv->kept;
  if (!include_last_step && CountStepNames(t) >= 2 && !hv->steps.empty()) {
    hv->steps.pop_back();
    hv->step_numbers.pop_back();
  }
  hv->order.erase(
      std::remove_if(hv->order.begin(), hv->order.end(), [&](uint32_t i) { return !kept[i]; }),
      hv->order.end());
  // Device activity: HTA's stream test; a trace in which nothing names a stream falls back to
  // the device categories (and torch_npu's device processes).
  const uint8_t want = t.on_stream_events > 0 ? kFlagOnStream : kFlagDevice;
  hv->breakdown.assign(ev.size(), false);
  for (size_t i = 0; i < ev.size(); ++i) {
    hv->breakdown[i] = (ev[i].flags & want) && hv->timeline[i] && kept[i];
    if (hv->breakdown[i]) hv->has_device = true;
  }
}

DeviceTimeline CollectDeviceTimeline(const RankTrace& t, const HostView& hv) {
  DeviceTimeline d;
  std::vector<Interval> mem, other;
  for (size_t i = 0; i < t.events.size(); ++i) {
    if (!hv.breakdown[i]) continue;
    const Event& e = t.events[i];
    Interval iv{e.ts_ns, e.end_ns()};
    d.all.push_back(iv);
    if (e.kind == DeviceKind::kCompute) d.compute.push_back(iv);
    if (e.kind == DeviceKind::kComm) d.comm.push_back(iv);
    if (e.kind == DeviceKind::kMemory) mem.push_back(iv);
    if (e.kind == DeviceKind::kOther || e.kind == DeviceKind::kNone) other.push_back(iv);
  }
  // HTA's figures come from its own merge (empty and inverted intervals kept).
  std::vector<Interval> m = MergeLikeHta(d.all);
  if (!m.empty()) d.hta_kernel_ns = m.back().second - m.front().first;
  for (const Interval& i : m) d.hta_busy_ns += i.second - i.first;
  for (const Interval& i : MergeLikeHta(d.compute)) d.hta_compute_ns += i.second - i.first;
  if (!d.all.empty())
    d.kernel_types = KernelTypeBreakdown(d.compute, d.comm, mem, other, d.hta_kernel_ns);
  d.all = Union(std::move(d.all));
  d.compute = Union(std::move(d.compute));
  d.comm = Union(std::move(d.comm));
  return d;
}

}  // namespace trainscope::trace::internal
