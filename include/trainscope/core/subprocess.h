// Running a child program with a time limit, without a shell: argv is passed as is.
#ifndef TRAINSCOPE_CORE_SUBPROCESS_H_
#define TRAINSCOPE_CORE_SUBPROCESS_H_

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace trainscope {

struct RunOptions {
  // Wall-clock limit; on expiry the child's process group gets SIGTERM, then SIGKILL
  // after `kill_grace`.
  std::chrono::milliseconds timeout{5000};
  std::chrono::milliseconds kill_grace{500};
  // Extra variables set in the child (on top of the parent's environment).
  std::map<std::string, std::string> env;
  // Text written to the child's stdin (closed afterwards). Empty: /dev/null.
  std::string stdin_data;
  // Output beyond this many bytes per stream is dropped (and `truncated` set).
  size_t max_output_bytes = 16 << 20;
  std::string working_dir;  // empty: inherit
};

struct RunResult {
  int exit_code = -1;   // valid when exited
  int term_signal = 0;  // non-zero when killed by a signal
  bool exited = false;
  bool timed_out = false;
  bool truncated = false;
  std::string out;
  std::string err;
  double wall_s = 0;
  bool ok() const { return exited && exit_code == 0 && !timed_out; }
};

// Runs argv[0] (looked up in PATH) with argv. Blocks at most timeout + kill_grace.
// Returns NotFound when the program does not exist or cannot be executed; every other
// outcome (non-zero exit, signal, time-out) is a RunResult, not an error.
absl::StatusOr<RunResult> RunProcess(const std::vector<std::string>& argv,
                                     const RunOptions& options = {});

// Looks `name` up in PATH. Empty when absent.
std::string FindInPath(const std::string& name);

// Absolute path of the running executable (/proc/self/exe).
std::string SelfExecutablePath();

}  // namespace trainscope

#endif  // TRAINSCOPE_CORE_SUBPROCESS_H_
