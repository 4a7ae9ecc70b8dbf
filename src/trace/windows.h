// Profiler windows of one process (windows.cc): grouping key and merging. Private to the module.
#ifndef TRAINSCOPE_SRC_TRACE_WINDOWS_H_
#define TRAINSCOPE_SRC_TRACE_WINDOWS_H_

#include <string>
#include <vector>

#include "trainscope/trace/analysis.h"
#include "trainscope/trace/trace.h"

namespace trainscope::trace::internal {

// Which process wrote a trace: "rank N" when the trace names its rank, else
// "process <host>/<pid>" (the pid of its ProfilerStep, or of its first operator), else
// "file <path>" (never grouped; also torch_npu folders and phase logs). Files with the same key
// are windows of one rank.
std::string ProcessKey(const RankTrace& t);

// HTA's step rule applied to one window before merging (each window's last ProfilerStep left
// out unless opt.include_last_step; whole-us times unless opt.ns_precision): drops the events
// the rule drops, so that the merged windows can be analysed with include_last_step.
void DropLastStepLikeHta(const AnalyzeOptions& opt, RankTrace* t);

// Appends a window's events to `rank` (strings re-interned, counts summed); the first window
// appended gives path, format and rank.
void AppendWindow(RankTrace window, RankTrace* rank);

// The rank's temporal breakdown as the sum of its windows' (the time between windows is no
// one's idle time), percentages recomputed.
void SumWindowBreakdowns(const std::vector<RankResult>& windows, RankResult* r);

}  // namespace trainscope::trace::internal

#endif  // TRAINSCOPE_SRC_TRACE_WINDOWS_H_
