// Small POSIX file helpers for the ckpt module: positioned reads, durable writes, directory
// fsync and xxh3-64 of a file. Errors name the path and the errno text.
#ifndef TRAINSCOPE_SRC_CKPT_FILE_IO_H_
#define TRAINSCOPE_SRC_CKPT_FILE_IO_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace trainscope::ckpt {

// A read-only file; owns its descriptor. Not copyable.
class File {
 public:
  static absl::StatusOr<File> Open(const std::string& path);
  File(File&& o) noexcept : path_(std::move(o.path_)), fd_(o.fd_), size_(o.size_) { o.fd_ = -1; }
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  ~File();
  uint64_t size() const { return size_; }
  // Reads exactly `n` bytes at `offset`; DataLoss when the file ends first.
  absl::Status ReadAt(uint64_t offset, uint64_t n, char* out) const;

 private:
  File(std::string path, int fd, uint64_t size) : path_(std::move(path)), fd_(fd), size_(size) {}
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

absl::Status ErrnoStatus(const std::string& path, const char* what);

// xxh3-64 of the file, as 16 lowercase hex digits; `on_bytes` (may be empty) is told how
// many bytes were read after each chunk.
absl::StatusOr<std::string> HashFile(const std::string& path,
                                     const std::function<void(uint64_t)>& on_bytes = {});
std::string HashHex(uint64_t h);
// xxh3-64 of bytes [begin, begin + n) of `f` as HashHex; DataLoss when the file ends first.
absl::StatusOr<std::string> HashRange(const File& f, uint64_t begin, uint64_t n,
                                      const std::function<void(uint64_t)>& on_bytes = {});

absl::Status FsyncDir(const std::string& dir);

// The whole file parsed as JSON. NotFound ("<path>: cannot open"), InvalidArgument
// ("<path>: not valid JSON at byte <B>: ..." or "<path>: JSON nested deeper than ...").
absl::StatusOr<nlohmann::json> ReadJsonFile(const std::string& path);

}  // namespace trainscope::ckpt

#endif  // TRAINSCOPE_SRC_CKPT_FILE_IO_H_
