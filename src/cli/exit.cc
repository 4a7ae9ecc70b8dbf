// ReportAndExitCode: a Status to the exit code and the line on stderr (exit.h).
#include "cli/exit.h"

#include <cstdio>
#include <string>

#include "trainscope/core/run_dir_lock.h"

namespace trainscope::cli {

int ReportAndExitCode(std::string_view verb, const absl::Status& status) {
  if (status.ok()) return kExitOk;
  std::string msg(status.message());
  std::fprintf(stderr, "trainscope %.*s: error: %s\n", static_cast<int>(verb.size()), verb.data(),
               msg.c_str());
  // Another writer holds the run directory: the line above names it, which is the hint.
  if (run_dir::IsRunDirInUse(status)) return kExitUsage;
  switch (status.code()) {
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kInternal:
      return kExitProblems;
    case absl::StatusCode::kNotFound:
      std::fprintf(stderr, "hint: check the path; `trainscope %.*s --help` lists the options\n",
                   static_cast<int>(verb.size()), verb.data());
      return kExitUsage;
    default:
      std::fprintf(stderr, "hint: `trainscope %.*s --help` lists the options\n",
                   static_cast<int>(verb.size()), verb.data());
      return kExitUsage;
  }
}

}  // namespace trainscope::cli
