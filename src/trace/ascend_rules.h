// The msprof-analyze advisor's per-rank rules over torch_npu data, as trace findings with
// Ascend advice: AI CPU operators, online operator compilation, dynamic shapes, small
// communication packets, SDMA bandwidth under the advisor's baseline, RDMA retransmission,
// stream synchronisation, slow dataloader, AI Core frequency drops. Thresholds are the
// advisor's (msprof_analyze/advisor/rules/en/*.yaml, prof_common/constant.py); each rule names
// its source in ascend_rules.cc. docs/metrics.md "Ascend rules".
#ifndef TRAINSCOPE_SRC_TRACE_ASCEND_RULES_H_
#define TRAINSCOPE_SRC_TRACE_ASCEND_RULES_H_

#include "trace/analysis_internal.h"

namespace trainscope::trace::internal {

// The evidence of one torch_npu rank into r->details["ascend"] (files read and skipped, the
// Overlap Analysis breakdown, op compile, synchronisation, dataloader, AI CPU, shapes,
// communication, memory, frequency). With the Overlap Analysis lanes, the rank's breakdown
// (compute/non-compute/idle, overlap) becomes msprof's own. No-op for other traces.
void AscendDetails(const RankTrace& t, const HostView& hv, const AnalyzeOptions& opt,
                   RankResult* r);
// The findings of r->details["ascend"] (appended to r->findings). No-op without it.
void AscendFindings(const AnalyzeOptions& opt, RankResult* r);

}  // namespace trainscope::trace::internal

#endif  // TRAINSCOPE_SRC_TRACE_ASCEND_RULES_H_
