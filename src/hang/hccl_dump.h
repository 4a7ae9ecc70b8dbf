// torch_npu's HCCL flight recorder (TORCH_HCCL_TRACE_BUFFER_SIZE, TORCH_HCCL_DUMP_ON_TIMEOUT):
// what its dumps differ in from PyTorch's, and Ascend's three timeout classes
// (tools/flight_recorder/analysis_flight.py of Ascend/pytorch).
//
// Its dumps are PyTorch's layout at version "2.4" (torch_npu/csrc/distributed/TraceUtils.h),
// written to TORCH_HCCL_DEBUG_INFO_TEMP_FILE + rank (default /tmp/hccl_trace_rank_<R>), with
// an optional "hccl_comm_state" map, and profiling_name left "" ("profiling is not supported"):
// the op is named by the innermost Python frame, the c10d function that called the backend.
// Pure functions; thread-safe.
#ifndef TRAINSCOPE_HANG_HCCL_DUMP_H_
#define TRAINSCOPE_HANG_HCCL_DUMP_H_

#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "trainscope/hang/dump.h"

namespace trainscope::hang::internal {

// The c10d collective an entry's frames name (frames[0]["name"], as Ascend's tool reads it):
// "all_reduce", "all_gather_into_tensor", "barrier", ...; "" when frames[0] is not a c10d
// collective (a direct ProcessGroup call names the caller instead) or there are no frames.
std::string HcclOpFromFrames(const nlohmann::json& frames);

// Whether a parsed dump came from torch_npu's recorder: an "hccl_comm_state" key, "hccl:"
// profiling names, or the file's base name starting with "hccl_trace_rank_".
bool LooksLikeHcclDump(const nlohmann::json& doc, const Dump& d);

// Ascend's three classes on the last entry of every rank, grouped by pg_id (only when some
// dump is an HCCL one): all pending in the same collective (same record id and op): it timed
// out executing; some completed one record before the pending ones: those ranks were still
// computing; all completed: non-communication work after the last collective took too long.
// Turns the matching not_joined finding into compute_stuck, adds the other two where no
// finding covers the group, and lists every group's class in report->details["hccl_timeout"].
void AddHcclTimeoutClasses(const std::vector<Dump>& dumps, Report* report);

}  // namespace trainscope::hang::internal

#endif  // TRAINSCOPE_HANG_HCCL_DUMP_H_
