#include "trainscope/core/os.h"

#include <dirent.h>
#include <fcntl.h>
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

class RealOs : public Os {
 public:
  absl::StatusOr<std::string> ReadFile(const std::string& path) override {
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ErrnoStatus(path, errno);
    std::string data;
    char buf[65536];
    while (true) {
      ssize_t n = read(fd, buf, sizeof(buf));
      if (n < 0) {
        if (errno == EINTR) continue;
        int e = errno;
        close(fd);
        return ErrnoStatus(path, e);
      }
      if (n == 0) break;
      data.append(buf, n);
    }
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
