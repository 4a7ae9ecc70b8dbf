// Internals of the hang analysis shared by its .cc files and the unit tests.
#ifndef TRAINSCOPE_HANG_INTERNAL_ANALYSIS_INTERNAL_H_
#define TRAINSCOPE_HANG_INTERNAL_ANALYSIS_INTERNAL_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "trainscope/hang/dump.h"

namespace trainscope::hang::internal {

// fr_trace's MatchState, for one pair of entries of the same group and sequence id.
enum class MatchState {
  kFullyMatched,
  kTypeMismatch,  // different op
  kSizeMismatch,  // fr_trace's SIZE_OR_SYNTAX_MISMATCH
  kDtypeMismatch,
  kStateMismatch,  // "scheduled" vs "completed", ...
  kUndecided,      // all_to_all: only the total over all ranks can be checked
};
const char* MatchStateName(MatchState s);

// "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce",
// "gather", "scatter", "barrier", "send", "recv" or "" for an op's name as any backend
// spells it ("_all_gather_base", "ALLGATHER_coalesced", "allreduce_coalesced", ...).
std::string OpFamily(const std::string& op);

// The entry that closes a coalesced group ("nccl:coalesced", "ALLGATHER_coalesced" with
// empty sizes); compared by name only.
bool IsCoalescedMarker(const Entry& e);

int64_t Numel(const std::vector<int64_t>& shape);  // 1 for a scalar shape []

// Compares two entries the way fr_trace's Op.match does, in its order: type, sizes
// (with its per-op rules; all_gather / reduce_scatter against `group_size`), dtypes, state.
// `why` (may be null) gets a short description of the first difference.
MatchState MatchOps(const Entry& a, const Entry& b, int group_size, std::string* why);

// "step 5 grad bucket 2" -> "step # grad bucket 2": the same call site in another step.
std::string NormalizeCaller(const std::string& caller);

// "[[3, 4]]" / "[Float]".
std::string ShapesText(const std::vector<std::vector<int64_t>>& shapes);
std::string DtypesText(const std::vector<std::string>& dtypes);

// A process group as the analysis sees it: membership agreed by the dumps.
struct Group {
  std::string name, desc;
  std::vector<int> members;  // global ranks, sorted
  std::vector<int> with_dump, missing;
  bool from_config = false;  // members from pg_config (else from the entries that use it)
  int order = 0;             // position in the report (sorted by name, numeric names first)
};

struct MembershipDisagreement {
  std::string pg;
  std::vector<int> ranks;  // ranks whose pg_config view differs from the one taken
  std::string taken, other;
};

// Groups of all dumps: one per (name, member set); overlapping different views are
// disagreements (the view of most ranks is taken). `dumps` sorted by rank.
std::vector<Group> BuildGroups(const std::vector<Dump>& dumps,
                               std::vector<MembershipDisagreement>* disagreements);

// "rank `waiter` waits for rank `blocker`", from one finding (before duplicates are merged).
struct WaitFor {
  int waiter = -1, blocker = -1;
};

// The findings of all groups, earliest first (not yet capped); `waits` (may be null) gets
// every wait the findings show.
std::vector<HangFinding> FindProblems(const std::vector<Dump>& dumps,
                                      const std::vector<Group>& groups,
                                      const std::vector<std::string>& corrupt_names,
                                      std::vector<WaitFor>* waits = nullptr);

// Follows `waits` to the root ranks (root_cause.cc): sets root_ranks and root_cause, puts the
// finding naming the roots first (marked root) and fills the others' consequence fields.
void OrderByRootCause(const std::vector<WaitFor>& waits, Report* report);

// Report::details (see docs/formats.md "Hang analysis").
nlohmann::json BuildDetails(const std::vector<Dump>& dumps, const std::vector<Group>& groups,
                            const InputCounts& counts,
                            const std::vector<MembershipDisagreement>& disagreements);

}  // namespace trainscope::hang::internal

#endif  // TRAINSCOPE_HANG_INTERNAL_ANALYSIS_INTERNAL_H_
