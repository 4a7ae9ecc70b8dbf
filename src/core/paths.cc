#include "trainscope/core/paths.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace trainscope {
namespace {

constexpr int kMaxSymlinkHops = 40;  // Linux's ELOOP limit

std::string Dirname(const std::string& p) {
  const size_t slash = p.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return p.substr(0, slash);
}

bool RealPath(const std::string& p, std::string* out) {
  char* r = ::realpath(p.c_str(), nullptr);
  if (r == nullptr) return false;
  *out = r;
  std::free(r);
  return true;
}

std::string JoinPath(const std::string& dir, const std::string& name) {
  return dir == "/" ? "/" + name : dir + "/" + name;
}

// Follows `path` while it is a symlink; the result is not a symlink (or does not exist).
absl::StatusOr<std::string> FollowLinks(const std::string& path) {
  std::string p = path;
  for (int hop = 0; hop <= kMaxSymlinkHops; ++hop) {
    struct stat st;
    if (::lstat(p.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return p;
    std::string target(PATH_MAX, '\0');
    const ssize_t n = ::readlink(p.c_str(), target.data(), target.size());
    if (n < 0) return p;  // a race with its removal: what is there now is not a link
    target.resize(static_cast<size_t>(n));
    p = target.empty() || target[0] == '/' ? target : JoinPath(Dirname(p), target);
  }
  return absl::InvalidArgumentError(
      absl::StrCat(path, ": too many levels of symbolic links (a loop?)"));
}

}  // namespace

bool IsDirectory(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool IsRegularFile(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::vector<std::string> ListNames(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") out.push_back(std::move(n));
  }
  closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

std::string BaseName(std::string_view p) {
  while (p.size() > 1 && p.back() == '/') p.remove_suffix(1);
  const size_t s = p.rfind('/');
  return std::string(s == std::string_view::npos || p.size() == 1 ? p : p.substr(s + 1));
}

std::string_view FileTypeName(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "not a regular file";
}

absl::StatusOr<int> OpenNonBlocking(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd >= 0) return fd;
  const int e = errno;
  const std::string msg = absl::StrCat(path, ": ", std::strerror(e));
  if (e == ENOENT) return absl::NotFoundError(msg);
  if (e == EACCES || e == EPERM) return absl::PermissionDeniedError(msg);
  return absl::InvalidArgumentError(msg);
}

absl::Status CheckRegularFile(const std::string& path, std::string_view why) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) {
      return absl::NotFoundError(absl::StrCat(path, ": no such file"));
    }
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", std::strerror(errno)));
  }
  if (S_ISREG(st.st_mode)) return absl::OkStatus();
  if (S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is a directory, not a file"));
  }
  return absl::InvalidArgumentError(absl::StrCat(path, " is not a regular file (",
                                                 std::string(FileTypeName(st.st_mode)), ")",
                                                 why.empty() ? "" : ": ", std::string(why)));
}

// Symlinks first (the final target), then the longest existing prefix through realpath
// and the rest lexically: a component that does not exist cannot be a symlink, so "x/.."
// after it is just "." (as mkdir -p followed by the open will see it).
absl::StatusOr<std::string> ResolveOutputPath(const std::string& path) {
  if (path.empty()) return absl::InvalidArgumentError("empty output path");
  std::string p;
  {
    auto followed = FollowLinks(path);
    if (!followed.ok()) return followed.status();
    p = *followed;
  }
  std::string resolved;
  if (RealPath(p, &resolved)) return resolved;
  if (p.empty() || p[0] != '/') {
    std::string cwd(PATH_MAX, '\0');
    if (::getcwd(cwd.data(), cwd.size()) == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": cannot resolve (current directory: ", std::strerror(errno), ")"));
    }
    p = JoinPath(cwd.c_str(), p);
  }
  const std::vector<std::string> parts = absl::StrSplit(p, '/', absl::SkipEmpty());
  // Longest prefix that exists; "/" always does.
  size_t k = parts.size();
  std::string base = "/";
  for (; k > 0; --k) {
    std::string prefix;
    for (size_t i = 0; i < k; ++i) prefix += "/" + parts[i];
    if (RealPath(prefix, &base)) break;
  }
  if (k == 0) base = "/";
  for (size_t i = k; i < parts.size(); ++i) {
    if (parts[i] == ".") continue;
    if (parts[i] == "..") {
      base = Dirname(base);
      continue;
    }
    base = JoinPath(base, parts[i]);
  }
  return base;
}

absl::Status CheckOutputFile(const std::string& output) {
  struct stat st;
  if (::stat(output.c_str(), &st) != 0 || S_ISREG(st.st_mode)) return absl::OkStatus();
  if (S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(output, " is a directory: the output must be a file path"));
  }
  return absl::InvalidArgumentError(
      absl::StrCat(output, " is not a regular file (", std::string(FileTypeName(st.st_mode)),
                   "): outputs are written to a temporary file renamed over the path"));
}

absl::Status CheckOutputNotInput(const std::vector<std::string>& outputs,
                                 const std::vector<std::string>& inputs) {
  struct InFile {
    const std::string* path;
    dev_t dev;
    ino_t ino;
  };
  struct InDir {
    const std::string* path;
    std::string real;
  };
  std::vector<InFile> files;
  std::vector<InDir> dirs;
  for (const std::string& in : inputs) {
    struct stat st;
    if (::stat(in.c_str(), &st) != 0) continue;
    if (S_ISDIR(st.st_mode)) {
      std::string real;
      if (RealPath(in, &real)) dirs.push_back({&in, real});
    } else {
      files.push_back({&in, st.st_dev, st.st_ino});
    }
  }
  for (const std::string& out : outputs) {
    auto resolved = ResolveOutputPath(out);
    if (!resolved.ok()) return resolved.status();
    struct stat st;
    if (::stat(resolved->c_str(), &st) == 0) {
      for (const InFile& f : files) {
        if (f.dev == st.st_dev && f.ino == st.st_ino) {
          return absl::InvalidArgumentError(
              absl::StrCat("refusing to write ", out, ": it is the input ", *f.path,
                           " (the same file); choose another output path"));
        }
      }
    }
    for (const InDir& d : dirs) {
      const bool inside =
          *resolved == d.real || d.real == "/" ||
          (resolved->size() > d.real.size() && resolved->compare(0, d.real.size(), d.real) == 0 &&
           (*resolved)[d.real.size()] == '/');
      if (inside) {
        return absl::InvalidArgumentError(absl::StrCat(
            "refusing to write ", out, ": it is inside the input directory ", *d.path,
            " (every file below an input directory is read as input); choose a path outside it"));
      }
    }
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------- temporary paths

namespace {

constexpr size_t kMaxTempPathBytes = 4096;
enum SlotState : int { kFree = 0, kWriting = 1, kActive = 2 };

struct TempSlot {
  std::atomic<int> state{kFree};
  TempPathKind kind = TempPathKind::kFile;
  char path[kMaxTempPathBytes];
};
static_assert(std::atomic<int>::is_always_lock_free, "read by a signal handler");

TempSlot g_temp_slots[kMaxTempPaths];

// The entries of a directory of ours, one level: getdents64 and unlinkat are system calls
// (opendir/readdir allocate and are not async-signal-safe). Unlinking while reading may
// make the kernel skip entries, so read again from the start until it is empty.
void RemoveDirEntries(const char* dir) {
  const int fd = ::open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  alignas(8) char buf[4096];
  for (int round = 0; round < 16; ++round) {
    bool removed = false;
    ::lseek(fd, 0, SEEK_SET);
    for (;;) {
      const long n = ::syscall(SYS_getdents64, fd, buf, sizeof(buf));
      if (n <= 0) break;
      for (long off = 0; off < n;) {
        // struct linux_dirent64 { u64 d_ino; s64 d_off; u16 d_reclen; u8 d_type; char d_name[]; }
        unsigned short reclen;
        std::memcpy(&reclen, buf + off + 16, sizeof(reclen));
        const char* name = buf + off + 19;
        off += reclen;
        if (name[0] == '.' && (name[1] == 0 || (name[1] == '.' && name[2] == 0))) continue;
        if (::unlinkat(fd, name, 0) == 0) removed = true;
      }
    }
    if (!removed) break;
  }
  ::close(fd);
}

}  // namespace

TempPathRegistration::TempPathRegistration(const std::string& path, TempPathKind kind) {
  if (path.empty() || path.size() >= kMaxTempPathBytes) return;
  for (int i = 0; i < kMaxTempPaths; ++i) {
    int expected = kFree;
    if (!g_temp_slots[i].state.compare_exchange_strong(expected, kWriting)) continue;
    g_temp_slots[i].kind = kind;
    std::memcpy(g_temp_slots[i].path, path.c_str(), path.size() + 1);
    g_temp_slots[i].state.store(kActive, std::memory_order_release);
    slot_ = i;
    return;
  }
}

TempPathRegistration& TempPathRegistration::operator=(TempPathRegistration&& o) noexcept {
  if (this != &o) {
    Release();
    slot_ = o.slot_;
    o.slot_ = -1;
  }
  return *this;
}

void TempPathRegistration::Release() {
  if (slot_ < 0) return;
  g_temp_slots[slot_].state.store(kFree, std::memory_order_release);
  slot_ = -1;
}

int RemoveRegisteredTempPaths() {
  const int saved_errno = errno;  // a signal handler must leave errno as it found it
  int n = 0;
  for (TempPathKind pass : {TempPathKind::kFile, TempPathKind::kPrivateDir}) {
    for (TempSlot& s : g_temp_slots) {
      if (s.state.load(std::memory_order_acquire) != kActive || s.kind != pass) continue;
      ++n;
      if (pass == TempPathKind::kFile) {
        ::unlink(s.path);
      } else {
        // Other threads of the process may still be creating files in it: empty it until
        // it can be removed (then their creations fail).
        for (int round = 0; round < 100; ++round) {
          RemoveDirEntries(s.path);
          if (::rmdir(s.path) == 0 || errno != ENOTEMPTY) break;
        }
      }
    }
  }
  errno = saved_errno;
  return n;
}

}  // namespace trainscope
