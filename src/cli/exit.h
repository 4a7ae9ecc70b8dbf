// Exit codes of every trainscope command, and the one place that maps a Status to one. Only
// the executables turn a Status into an exit code (STYLE.md): the library returns Status.
//   0  ok
//   1  the check ran and found problems (a failed self-test, an error-level finding,
//      a version difference)
//   2  bad usage or unreadable / malformed input
//   3  internal error: an exception escaped a verb (a bug; the message names the verb and
//      the command line so it can be reported)
#ifndef TRAINSCOPE_CLI_EXIT_H_
#define TRAINSCOPE_CLI_EXIT_H_

#include <string_view>

#include "absl/status/status.h"

namespace trainscope::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitProblems = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitInternal = 3;

// Prints "trainscope <verb>: error: <message>" (one line) to stderr, plus a hint line when
// one is known for the status code, and returns the exit code for `status`:
// ok -> 0, FailedPrecondition/Aborted/DeadlineExceeded/Unavailable/Internal -> 1
// (the check could not pass), everything else (InvalidArgument, NotFound, DataLoss,
// OutOfRange, ...) -> 2; a run directory another writer holds (run_dir::IsRunDirInUse) -> 2
// with no hint line (the message names the holder).
int ReportAndExitCode(std::string_view verb, const absl::Status& status);

}  // namespace trainscope::cli

#endif  // TRAINSCOPE_CLI_EXIT_H_
