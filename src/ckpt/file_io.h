// Small file helpers for the ckpt module: positioned reads (through core/os.h's Os, so that
// tests can use a FakeOs), directory fsync and xxh3-64 of a file. Errors name the path and
// the errno text.
#ifndef TRAINSCOPE_SRC_CKPT_FILE_IO_H_
#define TRAINSCOPE_SRC_CKPT_FILE_IO_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "trainscope/core/os.h"

namespace trainscope::ckpt {

// A read-only regular file of `os`. Not copyable.
class File {
 public:
  // Errors: NotFound / PermissionDenied / InvalidArgument "<path>: cannot open: <why>",
  // InvalidArgument "<path>: not a regular file".
  static absl::StatusOr<File> Open(const std::string& path, Os* os = Os::Default());
  uint64_t size() const { return file_->info().size_bytes; }
  // Reads exactly `n` bytes at `offset`; DataLoss when the file ends first.
  absl::Status ReadAt(uint64_t offset, uint64_t n, char* out) const {
    return file_->ReadExactly(offset, n, out);
  }

 private:
  explicit File(std::unique_ptr<RandomAccessFile> file) : file_(std::move(file)) {}
  std::unique_ptr<RandomAccessFile> file_;
};

absl::Status ErrnoStatus(const std::string& path, const char* what);

// xxh3-64 of the file, as 16 lowercase hex digits; `on_bytes` (may be empty) is told how
// many bytes were read after each chunk.
absl::StatusOr<std::string> HashFile(const std::string& path,
                                     const std::function<void(uint64_t)>& on_bytes = {},
                                     Os* os = Os::Default());
std::string HashHex(uint64_t h);
// xxh3-64 of bytes [begin, begin + n) of `f` as HashHex; DataLoss when the file ends first.
absl::StatusOr<std::string> HashRange(const File& f, uint64_t begin, uint64_t n,
                                      const std::function<void(uint64_t)>& on_bytes = {});

absl::Status FsyncDir(const std::string& dir);

// The whole file parsed as JSON. NotFound ("<path>: cannot open"), InvalidArgument
// ("<path>: not valid JSON at byte <B>: ..." or "<path>: JSON nested deeper than ...").
absl::StatusOr<nlohmann::json> ReadJsonFile(const std::string& path, Os* os = Os::Default());

}  // namespace trainscope::ckpt

#endif  // TRAINSCOPE_SRC_CKPT_FILE_IO_H_
