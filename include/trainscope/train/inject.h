// Fault injection for tests (`trainscope train --inject KIND:key=value,...`), a testing aid
// never needed in real runs. libtorch-free. Two families:
//
// Comm faults (docs/formats.md, "Comm watchdog and fault injection"): one rank misbehaves at
// the first collective of one step, the way a rank-local branch would in real code, so that
// the comm watchdog, the launcher's dump request and `trainscope hang analyze` can be tested
// end to end. Kinds and keys (rank and step are required; steps count from 1):
//   skip_collective:rank=R,step=S        rank R does not call the collective at all
//   wrong_op:rank=R,step=S               it calls a broadcast of the same buffer instead
//   wrong_size:rank=R,step=S             it calls it with half the element count
//   wrong_dtype:rank=R,step=S            it calls it with the same count as float16 (half the
//                                        bytes: never past the buffer)
//   sleep:rank=R,step=S,seconds=X        it sleeps X s first (a stop request cuts it short)
//   exit:rank=R,step=S[,code=C]          it _exit()s with code C (default 1) first
// The trainer applies them at its comm seam, so the flight recorder sees exactly what was
// called.
//
// Numeric faults (docs/formats.md, "Non-finite localisation"), for the non-finite checks and
// their localisation (train/anomaly.h); single-rank runs accept them too. Layers count from 0,
// a missing rank means every rank:
//   nan_forward:layer=L,step=S[,rank=R]   a NaN in the output of blocks.L.fc (forward)
//   nan_backward:layer=L,step=S[,rank=R]  a NaN in the gradient arriving at blocks.L.fc_proj's
//                                         output (backward)
//   inf_weight:layer=L,step=S             blocks.L.fc.weight[0][0] = +inf before step S
//   lr_spike:factor=F,step=S              step S's learning rate times F (F > 0)
//   nan_data:step=S[,rank=R]              a NaN in step S's input embeddings (wte output)
// They fire in the trainer's replays of the step too (a fixed-step cause, reproducible).
// Errors: InvalidArgument naming the bad part (the CLI exits 2).
#ifndef TRAINSCOPE_TRAIN_INJECT_H_
#define TRAINSCOPE_TRAIN_INJECT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace trainscope::train {

enum class InjectKind {
  kSkipCollective,
  kWrongOp,
  kWrongSize,
  kWrongDtype,
  kSleep,
  kExit,
  kNanForward,
  kNanBackward,
  kInfWeight,
  kLrSpike,
  kNanData,
};
const char* InjectKindName(InjectKind kind);  // "skip_collective", ...
// The comm faults (applied at the comm seam; need a data-parallel run).
bool IsCommFault(InjectKind kind);

struct Injection {
  InjectKind kind = InjectKind::kSkipCollective;
  int rank = -1;  // -1: every rank (numeric faults without rank=)
  int step = -1;
  double seconds = 0;  // sleep
  int code = 1;        // exit
  int layer = -1;      // nan_forward, nan_backward, inf_weight
  double factor = 1;   // lr_spike
  std::string text;    // as given, for messages
};

// One --inject value.
absl::StatusOr<Injection> ParseInjection(const std::string& text);
// Every --inject value; also refuses two injections for the same rank and step (an
// every-rank one clashes with any).
absl::StatusOr<std::vector<Injection>> ParseInjections(const std::vector<std::string>& texts);
// Checks injections against the run: rank < world_size, step <= steps, layer < layers (when
// layers > 0). InvalidArgument.
absl::Status CheckInjections(const std::vector<Injection>& injections, int world_size, int steps,
                             int layers = 0);
// True when `i` applies to `rank` (its rank, or every rank).
inline bool InjectionHits(const Injection& i, int rank) { return i.rank < 0 || i.rank == rank; }

}  // namespace trainscope::train

#endif  // TRAINSCOPE_TRAIN_INJECT_H_
