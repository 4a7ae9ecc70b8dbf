// Os: the small interface through which analysis code touches the machine (files,
// environment, clock, child processes), so that it can be tested with a fake
// (leveldb's Env). Os::Default() is the real machine; FakeOs (fake_os.h) is for tests.
// Thread-safety: Default() is thread-safe; FakeOs is not.
#ifndef TRAINSCOPE_CORE_OS_H_
#define TRAINSCOPE_CORE_OS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "trainscope/core/subprocess.h"

namespace trainscope {

// What fstat said of an open file (or Os::Stat of a path). `device` and `inode` tell a file
// replaced under the same name (log rotation, a rerun) from the same file grown.
struct FileInfo {
  uint64_t size_bytes = 0;
  uint64_t device = 0;
  uint64_t inode = 0;
  int64_t mtime_ns = 0;       // modification time, ns since the epoch (Os::Stat only)
  bool is_directory = false;  // (Os::Stat only)
  bool is_regular = false;    // (Os::Stat only)
};

// A file read from its start to its end, a chunk at a time (leveldb's SequentialFile), so
// that a file of many GB never has to be held in memory. Owns its descriptor; not
// thread-safe.
class SequentialFile {
 public:
  virtual ~SequentialFile() = default;
  // Replaces *out with the next bytes of the file, at most `n` (fewer only at the end, or
  // from a pipe); empty *out at the end. Errors: Internal / PermissionDenied naming the path.
  virtual absl::Status Read(size_t n, std::string* out) = 0;
};

// A file read at offsets (pread). Owns its descriptor; Read is thread-safe.
class RandomAccessFile {
 public:
  virtual ~RandomAccessFile() = default;
  // As fstat said when the file was opened (a file that grows later keeps the old size).
  virtual const FileInfo& info() const = 0;
  // Replaces *out with up to `n` bytes at `offset`: fewer only where the file ends (a read
  // past the end gives an empty *out). Errors name the path.
  virtual absl::Status Read(uint64_t offset, size_t n, std::string* out) const = 0;
  // Reads exactly `n` bytes at `offset` into `buf`; DataLoss "<path>: byte <B>: the file
  // ends early (truncated?)" when it ends first.
  virtual absl::Status ReadExactly(uint64_t offset, size_t n, char* buf) const = 0;
};

// A whole file's bytes in memory, read-only; data() is valid while the object lives.
class FileBytesView {
 public:
  virtual ~FileBytesView() = default;
  virtual std::string_view data() const = 0;
};

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

  // Streams a file (any kind that read(2) can read: a regular file, a pipe, /proc). Errors as
  // ReadFile's.
  virtual absl::StatusOr<std::unique_ptr<SequentialFile>> NewSequentialFile(
      const std::string& path) = 0;
  // Opens a regular file for positioned reads. Errors as ReadFile's, and InvalidArgument
  // "<path>: not a regular file" for a directory, FIFO or device.
  virtual absl::StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path) = 0;
  // The whole file, without a copy where it can: the real machine maps a regular file of
  // 32 MiB or more (a file that shrinks while mapped is a SIGBUS, as with any mmap reader)
  // and reads anything smaller, or not mappable, into memory. Errors as ReadFile's.
  virtual absl::StatusOr<std::unique_ptr<FileBytesView>> MapFile(const std::string& path) = 0;
  // stat() of any kind of file (symbolic links followed): size, identity, modification time
  // and its kind, from one call. Errors as ReadFile's.
  virtual absl::StatusOr<FileInfo> Stat(const std::string& path) = 0;
  // From Stat: a directory / a regular file (false when it fails), and the size.
  bool IsDirectory(const std::string& path);
  bool IsRegularFile(const std::string& path);
  absl::StatusOr<uint64_t> FileSize(const std::string& path);
  // ListDir's names, or none when the folder cannot be read (a walk that skips it).
  std::vector<std::string> ListNames(const std::string& dir);

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
