// Path checks that keep a verb from destroying its own input, and a registry of temporary
// paths that a signal handler can remove.
//
// Outputs. Every verb that writes a file (data clean -o, data scan --verdicts, data pack -o,
// trace analyze --export) writes a temporary file next to the output and renames it over
// the output. Before anything is read or written, CheckOutputNotInput refuses an output
// that would replace an input:
//   - the same file: both exist and have the same st_dev and st_ino after following
//     symlinks (so "./IN", "dir/../IN", a symlink to IN and a hard link of IN all match);
//   - below a directory given as input: the output's resolved path (ResolveOutputPath)
//     lies anywhere under the directory's realpath, whether or not the output exists yet
//     and whatever its name. Every non-hidden file below an input directory is read as
//     input, so a first run would write a file that the next run reads and overwrites.
// A verb that writes several files (data pack: PREFIX.bin and PREFIX.idx) passes each.
//
// Symlinks. An output path that is a symlink is written through: ResolveOutputPath gives
// the final target (a dangling link: the path it points at), the temporary file is made
// next to the target and renamed over it, and the link itself stays.
//
// Thread-safety: the functions are thread-safe (they only read the file system);
// RemoveRegisteredTempPaths is also async-signal-safe.
#ifndef TRAINSCOPE_CORE_PATHS_H_
#define TRAINSCOPE_CORE_PATHS_H_

#include <sys/types.h>

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace trainscope {

// stat() says a directory / a regular file (symbolic links followed); false when it fails.
bool IsDirectory(const std::string& path);
bool IsRegularFile(const std::string& path);
// The names in a directory, sorted, without "." and ".."; empty when it cannot be read.
std::vector<std::string> ListNames(const std::string& dir);
// The last component of a path, trailing slashes ignored ("a/b/" -> "b", "/" -> "/").
std::string BaseName(std::string_view path);

// "a directory", "a FIFO", "a character device", "a block device", "a socket",
// "a regular file", "a symbolic link" for a st_mode.
std::string_view FileTypeName(mode_t mode);

// Opens `path` read-only and close-on-exec without blocking (O_NONBLOCK: opening a FIFO
// that has no writer returns at once; clear the flag with fcntl before blocking reads).
// Returns the descriptor, which the caller closes. Errors, one line naming the path:
// NotFound, PermissionDenied, or InvalidArgument "<path>: <strerror>".
absl::StatusOr<int> OpenNonBlocking(const std::string& path);

// OK when `path` (symlinks followed) is a regular file. Errors, each one line naming the
// path: NotFound "<path>: no such file"; InvalidArgument "<path> is a directory, not a
// file"; InvalidArgument "<path> is not a regular file (a FIFO): <why>" for FIFOs,
// devices and sockets (`why` says what needs a regular file, e.g. "the index is read with
// random access"; empty: nothing is appended). Never opens the file, so a FIFO without a
// writer cannot block it.
absl::Status CheckRegularFile(const std::string& path, std::string_view why = {});

// The file that writing `path` replaces: symlinks followed to the final target, then
// made absolute and canonical (realpath of the nearest existing ancestor directory, the
// rest of the path normalised lexically: what does not exist yet holds no symlink).
// Errors: InvalidArgument for an empty path or a symlink loop (over 40 links).
absl::StatusOr<std::string> ResolveOutputPath(const std::string& path);

// OK when `output` can be replaced by a new regular file: it does not exist, or it
// (symlinks followed) is a regular file. InvalidArgument "<output> is a directory" or
// "<output> is not a regular file (a character device)": renaming a file over it would
// fail or, run as root, replace a device node.
absl::Status CheckOutputFile(const std::string& output);

// Refuses (InvalidArgument, one line naming both paths) an output that is an input or
// lies below an input directory, as described at the top of this file. `inputs` holds
// files and directories as the user may spell them; paths that do not exist are skipped
// (reading them fails later with its own error). An output whose location cannot be
// resolved (a parent that cannot be searched) is not refused here: writing it fails.
absl::Status CheckOutputNotInput(const std::vector<std::string>& outputs,
                                 const std::vector<std::string>& inputs);

// ---- Temporary paths removed on a signal.
//
// The library never installs signal handlers; the executable does (src/cli). A verb that
// may be interrupted installs a handler that calls RemoveRegisteredTempPaths() and then
// re-raises the signal with its default action. Library code registers every temporary
// path it creates for as long as the path exists (TempPathRegistration, RAII), and still
// removes the path itself on every normal, error and exception path.
//
// At most kMaxTempPaths paths (of up to 4095 bytes) are registered at a time; beyond that
// a registration is inert (the path is then only removed by its owner).
inline constexpr int kMaxTempPaths = 64;

enum class TempPathKind {
  kFile,        // unlink(path)
  kPrivateDir,  // a directory of ours (mkdtemp): its entries (one level) and itself
};

class TempPathRegistration {
 public:
  TempPathRegistration() = default;
  TempPathRegistration(const std::string& path, TempPathKind kind);
  ~TempPathRegistration() { Release(); }
  TempPathRegistration(TempPathRegistration&& o) noexcept : slot_(o.slot_) { o.slot_ = -1; }
  TempPathRegistration& operator=(TempPathRegistration&& o) noexcept;
  TempPathRegistration(const TempPathRegistration&) = delete;
  TempPathRegistration& operator=(const TempPathRegistration&) = delete;
  // Unregisters (the path itself is left alone: its owner removed or committed it).
  void Release();
  bool registered() const { return slot_ >= 0; }

 private:
  int slot_ = -1;
};

// Removes every registered path: files first, then private directories with their
// entries. Async-signal-safe (only atomics and the unlink/rmdir/open/getdents64/close
// system calls). Returns how many paths were registered.
int RemoveRegisteredTempPaths();

}  // namespace trainscope

#endif  // TRAINSCOPE_CORE_PATHS_H_
