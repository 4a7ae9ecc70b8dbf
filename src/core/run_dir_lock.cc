#include "trainscope/core/run_dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <thread>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "trainscope/core/env_vars.h"
#include "trainscope/core/os.h"
#include "trainscope/core/run_dir.h"

namespace trainscope::run_dir {
namespace {

constexpr char kNoJob[] = "-";

std::string OneLine(std::string_view s, size_t max_bytes) {
  std::string out(s.substr(0, max_bytes));
  for (char& c : out) {
    if (c == '\n' || c == '\r' || c == '\0') c = ' ';
  }
  return out;
}

std::string SelfCommand() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string word, out;
  while (std::getline(in, word, '\0')) {
    if (!out.empty()) out += ' ';
    out += word;
    if (out.size() >= kMaxLockCommandBytes) break;
  }
  return out;
}

std::string Get(const std::map<std::string, std::string>& env, const char* name) {
  auto it = env.find(name);
  return it == env.end() ? std::string() : it->second;
}

bool IsLoopback(const std::string& addr) {
  return addr == "localhost" || addr == "::1" || addr.rfind("127.", 0) == 0;
}

// The whole file through the open descriptor (the path may be replaced meanwhile).
std::string ReadAll(int fd) {
  std::string text;
  char buf[512];
  off_t off = 0;
  while (true) {
    ssize_t n = ::pread(fd, buf, sizeof(buf), off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
    off += n;
    if (text.size() > 64 * 1024) break;  // not ours
  }
  return text;
}

absl::Status InUse(const std::string& dir, const LockHolder* holder) {
  absl::Status st = absl::FailedPreconditionError(
      holder == nullptr
          ? absl::StrCat(dir, " is in use by another process (its ", kLockFile,
                         " names none yet); wait for it to end or use another run directory")
          : absl::StrCat(dir, " is in use by pid ", holder->pid, " (", holder->command,
                         "); wait for it to end or use another run directory"));
  st.SetPayload(kRunDirInUsePayload, absl::Cord(holder ? std::to_string(holder->pid) : "0"));
  return st;
}

}  // namespace

std::string FormatLockRecord(const LockHolder& holder) {
  return absl::StrCat("pid ", holder.pid, "\ncommand ",
                      OneLine(holder.command, kMaxLockCommandBytes), "\njob ",
                      holder.job_id.empty() ? kNoJob : OneLine(holder.job_id, 256), "\n");
}

absl::StatusOr<LockHolder> ParseLockRecord(std::string_view text) {
  // Every line ends with '\n', the "job" line last: a record cut short by a holder still
  // writing it is incomplete, never a different record.
  LockHolder h;
  bool have_pid = false, have_command = false, have_job = false;
  size_t end = text.rfind('\n');
  if (end == std::string_view::npos) return absl::InvalidArgumentError("empty lock record");
  for (absl::string_view line : absl::StrSplit(absl::string_view(text.data(), end), '\n')) {
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(line, absl::MaxSplits(' ', 1));
    if (kv.first == "pid") {
      have_pid = absl::SimpleAtoi(kv.second, &h.pid) && h.pid > 0;
    } else if (kv.first == "command") {
      h.command = std::string(kv.second);
      have_command = true;
    } else if (kv.first == "job") {
      h.job_id = kv.second == kNoJob ? "" : std::string(kv.second);
      have_job = true;
    }
  }
  if (!have_pid || !have_command || !have_job) {
    return absl::InvalidArgumentError("incomplete lock record");
  }
  return h;
}

std::string JobIdFromEnvironment(const std::map<std::string, std::string>& env,
                                 const std::string& hostname) {
  if (std::string id = Get(env, envvar::kJobId); !id.empty() && id != kNoJob) return id;
  // A job of more than one process: a rendezvous endpoint or a launcher's job id is shared
  // by its ranks and by no other job running at the same time. One process alone (a
  // notebook with MASTER_PORT exported) is no job: two of them must not join each other.
  int world = 0;
  for (const char* var : {envvar::kWorldSize, envvar::kOmpiSize, envvar::kPmiSize,
                          envvar::kSlurmStepNumTasks, envvar::kSlurmNtasks}) {
    int n = 0;
    if (absl::SimpleAtoi(Get(env, var), &n) && n > world) world = n;
  }
  if (world <= 1) return "";
  const std::string addr = Get(env, envvar::kMasterAddr);
  const std::string port = Get(env, envvar::kMasterPort);
  if (!addr.empty() && !port.empty()) {
    return IsLoopback(addr) ? absl::StrCat("rdzv/", hostname, "/", addr, ":", port)
                            : absl::StrCat("rdzv/", addr, ":", port);
  }
  std::string step = Get(env, envvar::kSlurmStepId);
  if (step.empty()) step = Get(env, envvar::kSlurmStepIdOld);
  if (std::string job = Get(env, envvar::kSlurmJobId); !job.empty() && !step.empty()) {
    return absl::StrCat("slurm/", job, ".", step);
  }
  if (std::string ns = Get(env, envvar::kPmixNamespace); !ns.empty()) return "pmix/" + ns;
  if (std::string id = Get(env, envvar::kOmpiJobId); !id.empty()) return "ompi/" + id;
  if (std::string id = Get(env, envvar::kPmiJobId); !id.empty()) return "pmi/" + id;
  return "";
}

std::string CurrentJobId() {
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  return JobIdFromEnvironment(Os::Default()->Environment(), host);
}

RunDirLock::RunDirLock(RunDirLock&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      dir_(std::move(other.dir_)),
      holder_(std::move(other.holder_)) {}

RunDirLock& RunDirLock::operator=(RunDirLock&& other) noexcept {
  if (this != &other) {
    Release();
    fd_ = std::exchange(other.fd_, -1);
    dir_ = std::move(other.dir_);
    holder_ = std::move(other.holder_);
  }
  return *this;
}

RunDirLock::~RunDirLock() { Release(); }

void RunDirLock::Release() {
  // Closing the only descriptor of the open file description drops the flock. The record
  // stays: a stale record names the last holder but blocks nobody.
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

// Try the flock without blocking; the winner writes its record. A loser reads the record:
// the same job joins, anyone else is refused. An empty or partial record is a winner that
// has not written yet (or one that died right after flock): re-read until record_wait.
absl::StatusOr<RunDirLock> LockRunDir(const std::string& dir, const LockOptions& options) {
  if (absl::Status st = MakeDirs(dir); !st.ok()) return st;
  const std::string path = Join(dir, kLockFile);
  int fd = ::open(path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int err = errno;
    std::string what = absl::StrCat("cannot open ", path, ": ", std::strerror(err));
    return err == EACCES || err == EPERM || err == EROFS ? absl::PermissionDeniedError(what)
                                                         : absl::InvalidArgumentError(what);
  }
  RunDirLock lock;
  lock.dir_ = dir;
  const auto deadline = std::chrono::steady_clock::now() + options.record_wait;
  while (true) {
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) {
      lock.fd_ = fd;
      lock.holder_.pid = static_cast<int>(::getpid());
      lock.holder_.command = options.command.empty() ? SelfCommand() : options.command;
      lock.holder_.job_id = options.job_id;
      const std::string record = FormatLockRecord(lock.holder_);
      if (::ftruncate(fd, 0) != 0 ||
          ::pwrite(fd, record.data(), record.size(), 0) != static_cast<ssize_t>(record.size())) {
        return absl::InvalidArgumentError(
            absl::StrCat("cannot write ", path, ": ", std::strerror(errno)));
      }
      return lock;
    }
    if (errno == EINTR) continue;
    if (errno != EWOULDBLOCK) {
      std::string what = absl::StrCat("cannot lock ", path, ": ", std::strerror(errno));
      ::close(fd);
      return absl::InvalidArgumentError(what);
    }
    absl::StatusOr<LockHolder> holder = ParseLockRecord(ReadAll(fd));
    if (holder.ok()) {
      ::close(fd);
      if (!options.job_id.empty() && holder->job_id == options.job_id) {
        lock.holder_ = *std::move(holder);
        return lock;  // joined: holds() is false
      }
      return InUse(dir, &*holder);
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      ::close(fd);
      return InUse(dir, nullptr);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

bool IsRunDirInUse(const absl::Status& status) {
  return status.GetPayload(kRunDirInUsePayload).has_value();
}

}  // namespace trainscope::run_dir
