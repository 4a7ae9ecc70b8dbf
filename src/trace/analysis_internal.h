// Private helpers shared by the analysis files: intervals, host-thread nesting, name rules.
#ifndef TRAINSCOPE_SRC_TRACE_ANALYSIS_INTERNAL_H_
#define TRAINSCOPE_SRC_TRACE_ANALYSIS_INTERNAL_H_

#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "trainscope/trace/analysis.h"
#include "trainscope/trace/trace.h"

namespace trainscope::trace::internal {

using Interval = std::pair<int64_t, int64_t>;  // [begin, end) in ns

// Sorts and merges overlapping intervals (in place); returns the merged list.
std::vector<Interval> Union(std::vector<Interval> v);
int64_t Length(const std::vector<Interval>& merged);
// |a n b| of two merged lists.
int64_t IntersectLength(const std::vector<Interval>& a, const std::vector<Interval>& b);
// |merged n [lo, hi)|.
int64_t LengthIn(const std::vector<Interval>& merged, int64_t lo, int64_t hi);
// [lo, hi) minus merged, as a merged list.
std::vector<Interval> Complement(const std::vector<Interval>& merged, int64_t lo, int64_t hi);

// Host phase of an operator or annotation, from its name.
enum class Phase : uint8_t { kUnknown, kData, kForward, kBackward, kOptimizer, kComm };
Phase PhaseOfName(std::string_view name);
const char* PhaseName(Phase p);

// Name rules, evaluated once per distinct event name.
struct NameInfo {
  Phase phase = Phase::kUnknown;
  bool sync = false, launch = false, gather = false, fusible = false, aten = false;
  bool heavy = false, step = false;
  // A record_function annotation rather than an operator: ProfilerStep#N, "## forward ##",
  // Optimizer.step#AdamW.step, Optimizer.zero_grad#... (any category).
  bool annotation = false;
};

// The host side of one rank, prepared once: events in nesting order per thread.
struct HostView {
  std::vector<NameInfo> names;  // by string id (only ids used as event names are filled)
  std::vector<uint32_t> order;  // host event indices sorted by (thread, ts, -dur)
  std::vector<int32_t> parent;  // per event index: enclosing host event, -1 none
  std::vector<uint32_t> steps;  // ProfilerStep#N events, by time
  std::vector<int64_t> step_numbers;
  uint64_t main_thread = 0;    // (pid << 32 | tid) of the steps
  bool has_device = false;     // device events on the timeline
  std::vector<bool> timeline;  // per event: on the analysed timeline (not CSV-only, not
                               // torch_npu "Overlap Analysis" summary tracks)
  // Per event: device activity counted by the breakdowns (filled by AnalyzeRank): on a stream
  // (kFlagOnStream; kFlagDevice when no event names a stream), on the timeline, and kept by
  // HTA's step filter.
  std::vector<bool> breakdown;
  // Per event: kept by HTA's step filter (HtaKeptEvents; filled by AnalyzeRank, which also
  // removes the host events it drops from `order`). Empty: all kept.
  std::vector<bool> kept;
};
inline uint64_t ThreadKey(const Event& e) { return (uint64_t{e.pid} << 32) | e.tid; }
HostView PrepareHost(const RankTrace& t);

// RankResult::device of a prepared trace.
std::string DeviceOf(const RankTrace& t, const HostView& hv);

// Operator- and kernel-level sections of RankResult::details (operators.cc).
void AnalyzeOperators(const RankTrace& t, const HostView& hv, const AnalyzeOptions& opt,
                      RankResult* out);
// Findings for one rank from its result (findings.cc).
void RankFindings(const AnalyzeOptions& opt, RankResult* r);
// Stragglers and cross-rank findings (findings.cc).
void CrossRankFindings(const AnalyzeOptions& opt, Report* report);

// --- HTA's rules (hta_rules.cc). ---
// Rounds every event's ts up and its end down to whole microseconds, as HTA does for traces
// with fractional timestamps (durations under 1 us can become -1 us, as in HTA). Idempotent.
void RoundTimesLikeHta(RankTrace* t);
// Distinct ProfilerStep#N names in the trace (any thread or category).
int CountStepNames(const RankTrace& t);
// Per event: kept by HTA's step filter (with 2+ step names: host events that start before the
// last step, or up to its end with include_last_step; device events whose correlation id one of
// those host events carries). All true with fewer than 2 step names.
std::vector<bool> HtaKeptEvents(const RankTrace& t, bool include_last_step);
// Applies HTA's step filter to a prepared host view: fills hv->kept, drops the last step from
// hv->steps (unless include_last_step, and only with 2+ step names), removes dropped host
// events from hv->order, and fills hv->breakdown (and has_device) with the device activity.
void ApplyHtaStepFilter(const RankTrace& t, bool include_last_step, HostView* hv);
// The device activity of hv->breakdown: merged unions per class and HTA's figures.
struct DeviceTimeline {
  std::vector<Interval> all, compute, comm;                        // Union()-merged
  int64_t hta_kernel_ns = 0, hta_busy_ns = 0, hta_compute_ns = 0;  // MergeLikeHta figures
  nlohmann::json kernel_types;  // KernelTypeBreakdown, null without device activity
};
DeviceTimeline CollectDeviceTimeline(const RankTrace& t, const HostView& hv);
// HTA's interval merge (keeps empty and inverted intervals, see hta_rules.cc).
std::vector<Interval> MergeLikeHta(std::vector<Interval> v);
// The kernel_types section: HTA's kernel-type table over the device intervals of each class
// (exclusive time per set of overlapping types, % of their total), plus OTHER's union time.
nlohmann::json KernelTypeBreakdown(const std::vector<Interval>& compute,
                                   const std::vector<Interval>& comm,
                                   const std::vector<Interval>& memory,
                                   const std::vector<Interval>& other, int64_t kernel_time_ns);

bool IsSyncName(std::string_view name);
bool IsLaunchName(std::string_view name);
bool IsGatherScatter(std::string_view n);
bool IsFusible(std::string_view n);
bool IsHeavyComputeOp(std::string_view n);
bool IsAnnotationName(std::string_view n);

}  // namespace trainscope::trace::internal

#endif  // TRAINSCOPE_SRC_TRACE_ANALYSIS_INTERNAL_H_
