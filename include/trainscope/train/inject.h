// Fault injection for hang-diagnosis tests (`trainscope train --inject KIND:key=value,...`):
// one rank misbehaves at the first collective of one step, the way a rank-local branch would
// in real code, so that the comm watchdog, the launcher's dump request and `trainscope hang
// analyze` can be tested end to end (docs/formats.md, "Comm watchdog and fault injection").
// A testing aid, never needed in real runs. libtorch-free.
//
// Kinds and keys (rank and step are required; steps count from 1):
//   skip_collective:rank=R,step=S        rank R does not call the collective at all
//   wrong_op:rank=R,step=S               it calls a broadcast of the same buffer instead
//   wrong_size:rank=R,step=S             it calls it with half the element count
//   wrong_dtype:rank=R,step=S            it calls it with the same count as float16 (half the
//                                        bytes: never past the buffer)
//   sleep:rank=R,step=S,seconds=X        it sleeps X s first (a stop request cuts it short)
//   exit:rank=R,step=S[,code=C]          it _exit()s with code C (default 1) first
// The trainer applies them at its comm seam, so the flight recorder sees exactly what was
// called. Errors: InvalidArgument naming the bad part (the CLI exits 2).
#ifndef TRAINSCOPE_TRAIN_INJECT_H_
#define TRAINSCOPE_TRAIN_INJECT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace trainscope::train {

enum class InjectKind { kSkipCollective, kWrongOp, kWrongSize, kWrongDtype, kSleep, kExit };
const char* InjectKindName(InjectKind kind);  // "skip_collective", ...

struct Injection {
  InjectKind kind = InjectKind::kSkipCollective;
  int rank = -1;
  int step = -1;
  double seconds = 0;  // sleep
  int code = 1;        // exit
  std::string text;    // as given, for messages
};

// One --inject value.
absl::StatusOr<Injection> ParseInjection(const std::string& text);
// Every --inject value; also refuses two injections for the same rank and step.
absl::StatusOr<std::vector<Injection>> ParseInjections(const std::vector<std::string>& texts);
// Checks injections against the run: rank < world_size, step <= steps. InvalidArgument.
absl::Status CheckInjections(const std::vector<Injection>& injections, int world_size, int steps);

}  // namespace trainscope::train

#endif  // TRAINSCOPE_TRAIN_INJECT_H_
