// trainscope::hang — which rank skipped, reordered or mis-sized which collective, from the
// flight recorder dumps every rank left (ours: comm/flight_recorder.h; PyTorch's and
// torch_npu's Flight Recorder: JSON and pickle).
//
// Contract:
//  - Inputs: run directories (a folder with a hang/ folder, see kDumpDir: that folder is
//    read, without its stacks.rank<R>.txt and analysis.json), folders of dumps (not
//    recursive), or dump files, by any name: the content is sniffed (JSON object with
//    "entries" / pickle protocol header), not the extension. Files that are not dumps are listed as
//    skipped; a dump that is truncated or corrupt, of another version, or disagrees with the others
//    on a group's membership is counted and named in Report::inputs, never fatal.
//  - Errors (StatusOr): NotFound / InvalidArgument naming the path when an input does not
//    exist, or when no dump at all was found (a folder with no dumps).
//  - Pickle dumps (PyTorch's writer, or Python's pickle at any protocol) are read with
//    core/pickle.h, which never executes anything; a malformed one is counted as corrupt
//    with the byte offset and opcode.
//  - Matching follows PyTorch's fr_trace: buffers that wrapped by different amounts are
//    aligned, each process group's collectives are matched by collective_seq_id across its
//    member ranks (p2p by p2p_seq_id), and the earliest mismatches are reported. Then the
//    waits are followed across groups to the root ranks (Report::root_ranks): their finding
//    comes first, the others are listed as its consequences. all_to_all sizes (all variants)
//    differ legitimately between ranks and are never a size mismatch by themselves.
//  - Pure computation on the inputs; thread-compatible; no process-wide state touched.
#ifndef TRAINSCOPE_HANG_ANALYZE_H_
#define TRAINSCOPE_HANG_ANALYZE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "trainscope/core/finding.h"
#include "trainscope/core/run_dir.h"

namespace trainscope::hang {

// Where a rank's dump and thread stacks go inside a run directory:
// <run_dir>/hang/flight_recorder.rank<R>.json and <run_dir>/hang/stacks.rank<R>.txt.
inline constexpr const char* kDumpDir = run_dir::kHang;
std::string DumpPath(const std::string& run_dir, int rank);
std::string StacksPath(const std::string& run_dir, int rank);

enum class FindingKind {
  kNotJoined,      // member ranks never entered a collective the others are in
  kTypeMismatch,   // same sequence id, different op
  kSizeMismatch,   // same op, sizes that do not fit together
  kDtypeMismatch,  // same op, different dtypes
  kStateMismatch,  // entered but never started while others did
  kMissingDump,    // a member rank left no dump
  // torch_npu's HCCL dumps only: Ascend's three timeout classes (src/hang/hccl_dump.h)
  kComputeStuck,             // ranks still computing while the others wait in the next one
  kLongTaskAfterCollective,  // all completed the last collective; the work after it hangs
  kCollectiveTimeout,        // all in the same collective, which timed out executing
};
const char* FindingKindName(FindingKind kind);  // "not_joined", "type_mismatch", ...

struct HangFinding {
  FindingKind kind = FindingKind::kNotJoined;
  std::string pg;                  // the group's name as in pg_config
  std::string pg_desc;             // its desc
  int64_t collective_seq_id = -1;  // collectives; -1 for p2p
  int64_t p2p_seq_id = -1;         // p2p; -1 for collectives
  std::string op;                  // "all_reduce", "send", ...
  std::vector<int> culprit_ranks;  // global ranks
  std::vector<int> waiting_ranks;
  std::string caller;  // the culprit's caller tag, or its frames, when recorded
  // What is wrong, the evidence and what to do: title is the one-sentence verdict printed
  // first ("sentence" in the JSON); id "hang.<kind>"; where the group and sequence number;
  // rank the culprit when there is one; an error, except missing_dump and
  // long_task_after_collective, which are warnings.
  Finding finding;
  // Across process groups (see Report::root_ranks): true for the finding that names the root;
  // the others are its consequences: the root ranks their waiting ranks wait for, in the end,
  // and a sentence ("ranks 0, 5 wait in all_reduce #3 of group 1 because of rank 4").
  bool root = false;
  std::vector<int> consequence_of;
  std::string consequence;
};

struct AnalyzeOptions {
  int mismatch_cap = 10;  // findings reported at most (earliest first), as fr_trace
};

struct Report {
  // True iff `findings` is not empty. Bad inputs alone (skipped, corrupt, other versions,
  // membership disagreements) are listed in details["inputs"] and do not set it; a member
  // rank whose dump is unusable is a missing_dump finding, which does.
  bool problem = false;
  std::vector<HangFinding> findings;  // the root's finding first, then its consequences
  // Who waits for whom across every process group: a rank pending in a group waits for the
  // members that never arrived (or left no dump); those may wait in another group in turn.
  // The roots are the ranks that others wait for and that wait for no one (or for one another
  // only: a cycle), or that left no dump while others wait for them. Sorted; empty when
  // nobody waits. `root_cause` is one sentence naming them ("" when none).
  std::vector<int> root_ranks;
  std::string root_cause;
  // Everything else the text and JSON outputs show (the per-rank table of the last
  // collectives, the input counts); see docs/formats.md "Hang analysis".
  nlohmann::json details;
};

absl::StatusOr<Report> AnalyzePaths(const std::vector<std::string>& paths,
                                    const AnalyzeOptions& options = {});

// {"problem", "findings": [...], ...}: the JSON contract (docs/formats.md).
nlohmann::json ReportToJson(const Report& report);
// Every finding's HangFinding::finding, in order (most likely root cause first).
std::vector<Finding> FindingsFrom(const Report& report);

// One sentence per finding, then a per-rank table of the last collectives; fits 120 columns.
std::string FormatReportText(const Report& report);

}  // namespace trainscope::hang

#endif  // TRAINSCOPE_HANG_ANALYZE_H_
