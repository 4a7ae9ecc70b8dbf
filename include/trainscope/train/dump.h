// `trainscope train --dump STEPS`: the trainer's own op dumps in msprobe's layout (the one
// `trainscope.dump` writes from Python and msprobe's compare reads; docs/formats.md "msprobe
// dumps"), so that two runs (fp32 against bf16, GPU against CPU, before against after a
// change) are compared op by op with `trainscope compare RUN_A/dump RUN_B/dump`.
//
//   <run_dir>/dump/step<N>/rank<R>/dump.json, stack.json, construct.json
//                                   dump_tensor_data/<entry>.<state>.<i>.pt   (mode "tensor")
//
// Entries, in execution order (level L0): every module of the GPT (`Module.<path>.<Class>.
// forward.<i>` with input_args, output and parameters; `.backward.<i>` with the gradients of
// its outputs as "input" and of its inputs as "output"; `.parameters_grad.<i>` with each
// parameter's local gradient, before any all-reduce); one forward/backward pair per
// micro-batch. Level mix adds the model's functional calls (`Functional.gelu.<i>.forward`,
// the tied head's `Functional.linear.<i>.forward`). The attention core (q k^T, mask, softmax,
// times v) is not an entry: its output is the projection's input.
// This header is libtorch-free; the tap that writes the dumps is private (src/train/dump_tap.h).
#ifndef TRAINSCOPE_TRAIN_DUMP_H_
#define TRAINSCOPE_TRAIN_DUMP_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace trainscope::train {

struct DumpOptions {
  std::vector<int> steps;           // optimizer steps to dump (1-based, sorted); empty: none
  std::string mode = "statistics";  // "statistics" | "tensor" | "md5" (msprobe's tasks)
  std::string level = "L0";         // "L0" (modules) | "mix" (modules and functional calls)
  bool enabled() const { return !steps.empty(); }
};

// "3", "1,4", "2-5", "1,3-4" -> sorted unique steps. InvalidArgument naming the bad part
// ("--dump: \"x\" is not a step or a range A-B of steps"); steps are >= 1.
absl::StatusOr<std::vector<int>> ParseDumpSteps(std::string_view text);

// mode and level are among the values above; the steps are within 1..total_steps (0: any).
absl::Status ValidateDumpOptions(const DumpOptions& options, int total_steps);

// `--dump STEPS --dump-mode M --dump-level L` for a run of total_steps: `mode_and_level`
// with the steps parsed from `steps` ("" : no dump), validated as above.
absl::StatusOr<DumpOptions> ResolveDumpOptions(std::string_view steps, DumpOptions mode_and_level,
                                               int total_steps);

}  // namespace trainscope::train

#endif  // TRAINSCOPE_TRAIN_DUMP_H_
