// Os: the small interface through which analysis code touches the machine (files,
// environment, clock, child processes), so that it can be tested with a fake
// (leveldb's Env). Os::Default() is the real machine; FakeOs (fake_os.h) is for tests.
// Thread-safety: Default() is thread-safe; FakeOs is not.
#ifndef TRAINSCOPE_CORE_OS_H_
#define TRAINSCOPE_CORE_OS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainscope/core/subprocess.h"

namespace trainscope {

class Os {
 public:
  virtual ~Os() = default;

  // The real machine. Never null; lives for the whole process.
  static Os* Default();

  // Whole file. NotFound when it does not exist, PermissionDenied / Internal otherwise.
  virtual absl::StatusOr<std::string> ReadFile(const std::string& path) = 0;
  virtual bool FileExists(const std::string& path) = 0;
  // Names (not paths) of the entries of a directory, sorted.
  virtual absl::StatusOr<std::vector<std::string>> ListDir(const std::string& path) = 0;
  // Empty optional-like: returns false when unset.
  virtual bool GetEnv(const std::string& name, std::string* value) = 0;
  virtual std::map<std::string, std::string> Environment() = 0;
  // Runs a child program (see subprocess.h for the semantics).
  virtual absl::StatusOr<RunResult> Run(const std::vector<std::string>& argv,
                                        const RunOptions& options) = 0;
  // Monotonic nanoseconds and wall-clock Unix microseconds.
  virtual int64_t MonotonicNs() = 0;
  virtual int64_t WallUs() = 0;
};

// Writes `data` to `path` atomically (temporary file in the same directory, fsync,
// rename), so that a crash never leaves a half-written file. Creates parent dirs.
absl::Status WriteFileAtomic(const std::string& path, const std::string& data);

// mkdir -p.
absl::Status MakeDirs(const std::string& path);

// `bytes` random bytes from the kernel (getrandom), as lowercase hex: a job token. Internal
// when the kernel has no entropy to give.
absl::StatusOr<std::string> RandomHexToken(size_t bytes = 16);

}  // namespace trainscope

#endif  // TRAINSCOPE_CORE_OS_H_
