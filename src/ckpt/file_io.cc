#include "ckpt/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "trainscope/core/json_text.h"

namespace trainscope::ckpt {

absl::Status ErrnoStatus(const std::string& path, const char* what) {
  const int e = errno;
  std::string msg = absl::StrCat(path, ": ", what, ": ", std::strerror(e));
  if (e == ENOENT) return absl::NotFoundError(msg);
  if (e == EACCES || e == EPERM) return absl::PermissionDeniedError(msg);
  return absl::InvalidArgumentError(msg);
}

absl::StatusOr<File> File::Open(const std::string& path, Os* os) {
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> f = os->NewRandomAccessFile(path);
  if (f.ok()) return File(*std::move(f));
  // Os says "<path>: <strerror>"; this module's messages say what failed.
  const absl::Status& s = f.status();
  std::string why(s.message());
  if (s.code() == absl::StatusCode::kInvalidArgument || !absl::StartsWith(why, path + ": ")) {
    return s;
  }
  std::string msg = absl::StrCat(path, ": cannot open: ", why.substr(path.size() + 2));
  if (s.code() == absl::StatusCode::kNotFound) return absl::NotFoundError(msg);
  if (s.code() == absl::StatusCode::kPermissionDenied) return absl::PermissionDeniedError(msg);
  return absl::InvalidArgumentError(msg);
}

std::string HashHex(uint64_t h) { return absl::StrFormat("%016x", h); }

absl::StatusOr<std::string> HashRange(const File& f, uint64_t begin, uint64_t n,
                                      const std::function<void(uint64_t)>& on_bytes) {
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  std::vector<char> buf(std::min<uint64_t>(4 << 20, std::max<uint64_t>(n, 1)));
  uint64_t at = 0;
  absl::Status status;
  while (at < n) {
    const uint64_t k = std::min<uint64_t>(buf.size(), n - at);
    status = f.ReadAt(begin + at, k, buf.data());
    if (!status.ok()) break;
    XXH3_64bits_update(st, buf.data(), k);
    at += k;
    if (on_bytes) on_bytes(k);
  }
  const uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  if (!status.ok()) return status;
  return HashHex(h);
}

absl::StatusOr<std::string> HashFile(const std::string& path,
                                     const std::function<void(uint64_t)>& on_bytes, Os* os) {
  auto f = File::Open(path, os);
  if (!f.ok()) return f.status();
  return HashRange(*f, 0, f->size(), on_bytes);
}

absl::Status FsyncDir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(dir, "cannot open directory");
  int r = ::fsync(fd);
  absl::Status s = r == 0 ? absl::OkStatus() : ErrnoStatus(dir, "fsync failed");
  ::close(fd);
  return s;
}

absl::StatusOr<nlohmann::json> ReadJsonFile(const std::string& path, Os* os) {
  absl::StatusOr<std::string> text = os->ReadFile(path);
  if (!text.ok()) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  // Our JSON files nest a few levels deep (meta.json's config: 4).
  return ParseJsonText(*text, kJsonMaxDepth, path);
}

}  // namespace trainscope::ckpt
