#include "trainscope/core/os.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

extern char** environ;

namespace trainscope {
namespace {

absl::Status ErrnoStatus(const std::string& what, int err) {
  std::string msg = absl::StrCat(what, ": ", strerror(err));
  if (err == ENOENT) return absl::NotFoundError(msg);
  if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(msg);
  return absl::InternalError(msg);
}

// Everything left to read from `fd`. A regular file is read straight into a string of the
// size fstat gives (one allocation), then on in 64 KiB reads should it have grown; anything
// else (a pipe, /proc, whose size says 0) in 64 KiB reads.
absl::StatusOr<std::string> ReadAll(const std::string& path, int fd) {
  struct stat st;
  const bool sized = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0;
  std::string data(sized ? static_cast<size_t>(st.st_size) : 0, '\0');
  size_t got = 0;
  while (got < data.size()) {
    ssize_t n = read(fd, data.data() + got, data.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus(path, errno);
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  if (got < data.size()) {  // shrank while read: keep what was read
    data.resize(got);
    return data;
  }
  char buf[65536];
  while (true) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(path, errno);
    }
    if (n == 0) break;
    data.append(buf, n);
  }
  return data;
}

class PosixSequentialFile : public SequentialFile {
 public:
  PosixSequentialFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~PosixSequentialFile() override { close(fd_); }
  absl::Status Read(size_t n, std::string* out) override {
    out->resize(n);
    while (true) {
      ssize_t r = read(fd_, out->data(), n);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) {
        int e = errno;
        out->clear();
        return ErrnoStatus(path_, e);
      }
      out->resize(static_cast<size_t>(r));
      return absl::OkStatus();
    }
  }

 private:
  const std::string path_;
  const int fd_;
};

class PosixRandomAccessFile : public RandomAccessFile {
 public:
  PosixRandomAccessFile(std::string path, int fd, FileInfo info)
      : path_(std::move(path)), fd_(fd), info_(info) {}
  ~PosixRandomAccessFile() override { close(fd_); }
  const FileInfo& info() const override { return info_; }
  absl::Status Read(uint64_t offset, size_t n, std::string* out) const override {
    out->resize(n);
    size_t got = 0;
    absl::Status s = ReadInto(offset, n, out->data(), &got);
    out->resize(got);
    return s;
  }
  absl::Status ReadExactly(uint64_t offset, size_t n, char* buf) const override {
    size_t got = 0;
    absl::Status s = ReadInto(offset, n, buf, &got);
    if (s.ok() && got < n) {
      return absl::DataLossError(
          absl::StrCat(path_, ": byte ", offset + got, ": the file ends early (truncated?)"));
    }
    return s;
  }

 private:
  // pread until `n` bytes or the end of the file; *got = bytes read.
  absl::Status ReadInto(uint64_t offset, size_t n, char* buf, size_t* got) const {
    while (*got < n) {
      ssize_t r = pread(fd_, buf + *got, n - *got, static_cast<off_t>(offset + *got));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return ErrnoStatus(absl::StrCat(path_, ": read failed"), errno);
      if (r == 0) break;
      *got += static_cast<size_t>(r);
    }
    return absl::OkStatus();
  }
  const std::string path_;
  const int fd_;
  const FileInfo info_;
};

class StringBytesView : public FileBytesView {
 public:
  explicit StringBytesView(std::string bytes) : bytes_(std::move(bytes)) {}
  std::string_view data() const override { return bytes_; }

 private:
  const std::string bytes_;
};

class MappedBytesView : public FileBytesView {
 public:
  MappedBytesView(void* map, size_t len) : map_(map), len_(len) {}
  ~MappedBytesView() override { munmap(map_, len_); }
  std::string_view data() const override {
    return std::string_view(static_cast<const char*>(map_), len_);
  }

 private:
  void* const map_;
  const size_t len_;
};

class RealOs : public Os {
 public:
  absl::StatusOr<std::unique_ptr<SequentialFile>> NewSequentialFile(
      const std::string& path) override {
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ErrnoStatus(path, errno);
    return std::make_unique<PosixSequentialFile>(path, fd);
  }
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path) override {
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ErrnoStatus(path, errno);
    struct stat st;
    if (fstat(fd, &st) != 0) {
      int e = errno;
      close(fd);
      return ErrnoStatus(absl::StrCat(path, ": cannot stat"), e);
    }
    if (!S_ISREG(st.st_mode)) {
      close(fd);
      return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
    }
    FileInfo info{static_cast<uint64_t>(st.st_size), static_cast<uint64_t>(st.st_dev),
                  static_cast<uint64_t>(st.st_ino)};
    return std::make_unique<PosixRandomAccessFile>(path, fd, info);
  }
  absl::StatusOr<std::unique_ptr<FileBytesView>> MapFile(const std::string& path) override {
    constexpr off_t kMapFromBytes = off_t{32} << 20;
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ErrnoStatus(path, errno);
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size >= kMapFromBytes) {
      void* p = mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
      if (p != MAP_FAILED) {
        madvise(p, static_cast<size_t>(st.st_size), MADV_WILLNEED);
        close(fd);
        return std::make_unique<MappedBytesView>(p, static_cast<size_t>(st.st_size));
      }
    }
    absl::StatusOr<std::string> bytes = ReadAll(path, fd);
    close(fd);
    if (!bytes.ok()) return bytes.status();
    return std::make_unique<StringBytesView>(*std::move(bytes));
  }
  absl::StatusOr<FileInfo> Stat(const std::string& path) override {
    struct stat st;
    if (stat(path.c_str(), &st) != 0) return ErrnoStatus(path, errno);
    FileInfo info{static_cast<uint64_t>(st.st_size), static_cast<uint64_t>(st.st_dev),
                  static_cast<uint64_t>(st.st_ino)};
    info.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    info.is_directory = S_ISDIR(st.st_mode);
    info.is_regular = S_ISREG(st.st_mode);
    return info;
  }
  absl::StatusOr<std::string> ReadFile(const std::string& path) override {
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ErrnoStatus(path, errno);
    absl::StatusOr<std::string> data = ReadAll(path, fd);
    close(fd);
    return data;
  }
  bool FileExists(const std::string& path) override {
    struct stat st;
    return stat(path.c_str(), &st) == 0;
  }
  absl::StatusOr<std::vector<std::string>> ListDir(const std::string& path) override {
    DIR* d = opendir(path.c_str());
    if (!d) return ErrnoStatus(path, errno);
    std::vector<std::string> names;
    while (dirent* e = readdir(d)) {
      if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
      names.emplace_back(e->d_name);
    }
    closedir(d);
    std::sort(names.begin(), names.end());
    return names;
  }
  bool GetEnv(const std::string& name, std::string* value) override {
    const char* v = getenv(name.c_str());
    if (!v) return false;
    *value = v;
    return true;
  }
  std::map<std::string, std::string> Environment() override {
    std::map<std::string, std::string> env;
    for (char** e = environ; *e; ++e) {
      const char* eq = strchr(*e, '=');
      if (!eq) continue;
      env[std::string(*e, eq - *e)] = eq + 1;
    }
    return env;
  }
  absl::StatusOr<RunResult> Run(const std::vector<std::string>& argv,
                                const RunOptions& options) override {
    return RunProcess(argv, options);
  }
  int64_t MonotonicNs() override {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  int64_t WallUs() override {
    return std::chrono::duration_cast<std::chrono::microseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
};

}  // namespace

bool Os::IsDirectory(const std::string& path) {
  absl::StatusOr<FileInfo> info = Stat(path);
  return info.ok() && info->is_directory;
}

bool Os::IsRegularFile(const std::string& path) {
  absl::StatusOr<FileInfo> info = Stat(path);
  return info.ok() && info->is_regular;
}

absl::StatusOr<uint64_t> Os::FileSize(const std::string& path) {
  absl::StatusOr<FileInfo> info = Stat(path);
  if (!info.ok()) return info.status();
  return info->size_bytes;
}

std::vector<std::string> Os::ListNames(const std::string& dir) {
  absl::StatusOr<std::vector<std::string>> names = ListDir(dir);
  return names.ok() ? *std::move(names) : std::vector<std::string>();
}

Os* Os::Default() {
  static Os* os = new RealOs();
  return os;
}

absl::Status MakeDirs(const std::string& path) {
  if (path.empty()) return absl::OkStatus();
  std::string cur;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    cur = path.substr(0, pos);
    if (cur.empty()) continue;
    if (mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST) return ErrnoStatus(cur, errno);
  }
  return absl::OkStatus();
}

absl::Status WriteFileAtomic(const std::string& path, const std::string& data) {
  size_t slash = path.rfind('/');
  if (slash != std::string::npos && slash > 0) {
    absl::Status s = MakeDirs(path.substr(0, slash));
    if (!s.ok()) return s;
  }
  std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus(tmp, errno);
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = write(fd, data.data() + off, data.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      close(fd);
      unlink(tmp.c_str());
      return ErrnoStatus(tmp, e);
    }
    off += n;
  }
  fsync(fd);
  close(fd);
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    unlink(tmp.c_str());
    return ErrnoStatus(path, e);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> RandomHexToken(size_t bytes) {
  std::string raw(bytes, '\0');
  size_t got = 0;
  while (got < bytes) {
    ssize_t n = ::getrandom(raw.data() + got, bytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return absl::InternalError(
          absl::StrCat("cannot generate a job token: getrandom: ", std::strerror(errno)));
    }
    got += static_cast<size_t>(n);
  }
  std::string out;
  for (unsigned char b : raw) absl::StrAppendFormat(&out, "%02x", b);
  return out;
}

}  // namespace trainscope
