// Which checkpoint a run resumes from (`trainscope train --resume latest|PATH`, and any
// writer of trainscope checkpoints): the choice, made from the checkpoint folder alone.
// Thread-safety: pure functions of the file system.
#ifndef TRAINSCOPE_CKPT_RESUME_H_
#define TRAINSCOPE_CKPT_RESUME_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "trainscope/core/os.h"

namespace trainscope::ckpt {

// Where a run resumes: `spec` is "latest" (the newest complete checkpoint in `dir`, the
// checkpoints folder) or the path of one checkpoint. path "" means a fresh start. `notice` is
// the one line to tell the user either way. Errors: a PATH that is missing (NotFound), not a
// checkpoint, or not complete and intact (InvalidArgument naming the file, the problem and
// the newest good checkpoint next to it).
struct ResumePlan {
  std::string path;
  int64_t step = 0;
  std::string notice;
};
// The checkpoints are read through `os`.
absl::StatusOr<ResumePlan> PlanResume(const std::string& spec, const std::string& dir,
                                      Os* os = Os::Default());

}  // namespace trainscope::ckpt

#endif  // TRAINSCOPE_CKPT_RESUME_H_
