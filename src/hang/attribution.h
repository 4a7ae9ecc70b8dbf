// Deciding, at the first sequence id where a group's ranks differ, which rank is the
// culprit and what kind of problem it is; and writing the finding's sentence, evidence and
// fix. Private to src/hang (analysis.cc walks, this decides).
//
// With three or more ranks the majority view is the reference. With two ranks (or a tie)
// there is no majority, so the reference comes from the ranks' own history, in this order:
//  1. the caller tag: the same call site in an earlier, fully matched step ("step 4 grad
//     bucket 0" for "step 5 grad bucket 0") issued a given op/size/dtype; a rank that now
//     issues something else there is the culprit;
//  2. the call-site order: a rank at a call site that came after the others' one in earlier
//     steps ran ahead (skipped); a shift: a rank whose entry at id k is what the others
//     issue at k + 1 skipped k;
//  3. the repeating per-step pattern of matched ids (period P): the entry expected at k is
//     the one at k - P; a rank holding what is expected at k + 1 skipped k;
//  4. otherwise the lowest rank's view is taken, and the evidence says it was a guess.
#ifndef TRAINSCOPE_HANG_INTERNAL_ATTRIBUTION_H_
#define TRAINSCOPE_HANG_INTERNAL_ATTRIBUTION_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "hang/analysis_internal.h"

namespace trainscope::hang::internal {

// One rank's entries of one collective sequence id of one group.
struct Slot {
  std::vector<const Entry*> all;  // as recorded
  std::vector<const Entry*> ops;  // without the closing marker of a coalesced group
};

struct Candidate {
  HangFinding hang;
  int64_t time_ns = 0;  // when the first involved entry was created (0: unknown)
};

class GroupWalk {
 public:
  GroupWalk(const Group& group, const std::map<int, std::map<int64_t, Slot>>& slots)
      : g_(group), slots_(slots) {}

  // The finding at `seq` where every rank with a dump has the id, or none when they agree.
  std::optional<Candidate> Compare(int64_t seq);
  // Records `seq` as fully matched (history for attribution).
  void Remember(int64_t seq);
  // `behind` never issued `seq`, which `have` issued.
  Candidate NotJoined(int64_t seq, const std::vector<int>& behind, const std::vector<int>& have);
  // The group's members without a dump; `waiting` are in `seq` (-1: nobody waits).
  Candidate MissingDump(int64_t seq, const std::vector<int>& waiting,
                        const std::vector<std::string>& corrupt_names);

 private:
  struct Verdict {
    std::vector<int> ref_ranks, culprits;
    bool skip = false;
    std::string method;  // how the reference was chosen, for the evidence
  };
  const Slot& SlotAt(int rank, int64_t seq) const;
  const Slot* FindSlot(int rank, int64_t seq) const;
  std::optional<Verdict> Attribute(
      int64_t seq, const std::vector<std::pair<std::string, std::vector<int>>>& parts);
  // The normalised key the per-step pattern predicts at `seq`, "" when unknown.
  std::string ExpectedAt(int64_t seq);
  int Period();
  int CallerDistance(const std::string& from, const std::string& to) const;
  Candidate Build(int64_t seq, const Verdict& v);
  std::optional<Candidate> StateMismatch(int64_t seq, const std::vector<int>& ranks);

  const Group& g_;
  const std::map<int, std::map<int64_t, Slot>>& slots_;
  std::map<int64_t, std::string> matched_;             // seq -> normalised key
  std::map<std::string, std::string> caller_history_;  // normalised caller -> ops key
  std::map<int64_t, std::string> matched_caller_;      // seq -> normalised caller
  std::map<std::string, std::string> next_caller_;     // normalised caller -> the next one
  int period_ = -2;                                    // -2: not computed yet
};

// p2p: `never` did not post the op that matches `e` (issued by `waiting`).
Candidate P2pNotJoined(const Group& g, const Entry& e, int never, int waiting);
Candidate P2pMismatch(const Group& g, const Entry& send, const Entry& recv,
                      std::pair<int, int> src_dst, FindingKind kind);

// "group 0 (default_pg)"; "ranks 0, 2" / "rank 1".
std::string GroupLabel(const Group& g);
std::string RanksLabel(const std::vector<int>& ranks);

}  // namespace trainscope::hang::internal

#endif  // TRAINSCOPE_HANG_INTERNAL_ATTRIBUTION_H_
