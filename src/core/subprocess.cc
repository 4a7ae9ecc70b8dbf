#include "trainscope/core/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

extern char** environ;

namespace trainscope {
namespace {

int64_t NowMs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000 + ts.tv_nsec / 1000000;
}

bool IsExecutable(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(path.c_str(), X_OK) == 0;
}

}  // namespace

std::string FindInPath(const std::string& name) {
  if (name.empty()) return "";
  if (name.find('/') != std::string::npos) return IsExecutable(name) ? name : "";
  const char* path = getenv("PATH");
  std::string p = path ? path : "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin";
  for (absl::string_view dir : absl::StrSplit(p, ':')) {
    if (dir.empty()) continue;
    std::string candidate = absl::StrCat(dir, "/", name);
    if (IsExecutable(candidate)) return candidate;
  }
  return "";
}

std::string SelfExecutablePath() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "";
  return std::string(buf, n);
}

// Fork + exec with three pipes. The child becomes its own process group so that a
// time-out kills the whole tree it started (a shell script's children included).
// The parent polls the pipes, feeding stdin and draining stdout/stderr, until both
// output pipes close and the child is reaped, or the deadline passes.
absl::StatusOr<RunResult> RunProcess(const std::vector<std::string>& argv,
                                     const RunOptions& options) {
  if (argv.empty()) return absl::InvalidArgumentError("RunProcess: empty argv");
  std::string exe = FindInPath(argv[0]);
  if (exe.empty()) return absl::NotFoundError(absl::StrCat(argv[0], ": not found in PATH"));

  int in_pipe[2], out_pipe[2], err_pipe[2], exec_pipe[2];
  if (pipe2(in_pipe, O_CLOEXEC) || pipe2(out_pipe, O_CLOEXEC) || pipe2(err_pipe, O_CLOEXEC) ||
      pipe2(exec_pipe, O_CLOEXEC)) {
    return absl::InternalError(absl::StrCat("pipe: ", strerror(errno)));
  }
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    std::string key = kv.substr(0, kv.find('='));
    if (options.env.count(key)) continue;
    env_strings.push_back(std::move(kv));
  }
  for (const auto& [k, v] : options.env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp, args;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = argv;
  for (auto& s : argv_copy) args.push_back(s.data());
  args.push_back(nullptr);

  const int64_t start = NowMs();
  pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", strerror(errno)));
  if (pid == 0) {
    setpgid(0, 0);
    dup2(in_pipe[0], 0);
    dup2(out_pipe[1], 1);
    dup2(err_pipe[1], 2);
    if (!options.working_dir.empty() && chdir(options.working_dir.c_str()) != 0) _exit(127);
    execve(exe.c_str(), args.data(), envp.data());
    int e = errno;
    ssize_t ignored = write(exec_pipe[1], &e, sizeof(e));
    (void)ignored;
    _exit(127);
  }
  setpgid(pid, pid);
  close(in_pipe[0]);
  close(out_pipe[1]);
  close(err_pipe[1]);
  close(exec_pipe[1]);
  int exec_errno = 0;
  if (read(exec_pipe[0], &exec_errno, sizeof(exec_errno)) == sizeof(exec_errno)) {
    close(exec_pipe[0]);
    close(in_pipe[1]);
    close(out_pipe[0]);
    close(err_pipe[0]);
    waitpid(pid, nullptr, 0);
    return absl::NotFoundError(absl::StrCat(exe, ": cannot execute: ", strerror(exec_errno)));
  }
  close(exec_pipe[0]);

  RunResult result;
  size_t stdin_off = 0;
  int in_fd = in_pipe[1];
  if (options.stdin_data.empty()) {
    close(in_fd);
    in_fd = -1;
  } else {
    fcntl(in_fd, F_SETFL, O_NONBLOCK);
  }
  int fds[2] = {out_pipe[0], err_pipe[0]};
  std::string* sinks[2] = {&result.out, &result.err};
  const int64_t deadline = start + options.timeout.count();
  int64_t kill_deadline = -1;
  int status = 0;
  bool reaped = false;
  char buf[65536];
  while (true) {
    pollfd pfds[3];
    int n = 0;
    int map[3];
    for (int i = 0; i < 2; ++i) {
      if (fds[i] >= 0) {
        pfds[n] = {fds[i], POLLIN, 0};
        map[n++] = i;
      }
    }
    if (in_fd >= 0) {
      pfds[n] = {in_fd, POLLOUT, 0};
      map[n++] = 2;
    }
    if (n == 0) break;
    int64_t now = NowMs();
    if (!result.timed_out && now >= deadline) {
      result.timed_out = true;
      kill(-pid, SIGTERM);
      kill_deadline = now + options.kill_grace.count();
    }
    if (kill_deadline >= 0 && now >= kill_deadline) {
      kill(-pid, SIGKILL);
      // A grandchild may still hold the pipes open; stop reading.
      break;
    }
    int64_t wait_ms = (kill_deadline >= 0 ? kill_deadline : deadline) - now;
    int rc = poll(pfds, n, static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(wait_ms, 100))));
    if (rc < 0 && errno != EINTR) break;
    for (int j = 0; j < n && rc > 0; ++j) {
      if (!pfds[j].revents) continue;
      int i = map[j];
      if (i == 2) {
        ssize_t w = write(in_fd, options.stdin_data.data() + stdin_off,
                          options.stdin_data.size() - stdin_off);
        if (w > 0) stdin_off += w;
        if (w < 0 && errno != EAGAIN) stdin_off = options.stdin_data.size();
        if (stdin_off >= options.stdin_data.size()) {
          close(in_fd);
          in_fd = -1;
        }
        continue;
      }
      ssize_t r = read(fds[i], buf, sizeof(buf));
      if (r > 0) {
        size_t room = options.max_output_bytes > sinks[i]->size()
                          ? options.max_output_bytes - sinks[i]->size()
                          : 0;
        if (static_cast<size_t>(r) > room) result.truncated = true;
        sinks[i]->append(buf, std::min<size_t>(r, room));
      } else if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN)) {
        close(fds[i]);
        fds[i] = -1;
      }
    }
  }
  for (int i = 0; i < 2; ++i)
    if (fds[i] >= 0) close(fds[i]);
  if (in_fd >= 0) close(in_fd);
  // Reap, honouring the deadline.
  while (!reaped) {
    pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid) {
      reaped = true;
      break;
    }
    int64_t now = NowMs();
    if (!result.timed_out && now >= deadline) {
      result.timed_out = true;
      kill(-pid, SIGTERM);
      kill_deadline = now + options.kill_grace.count();
    }
    if (kill_deadline >= 0 && now >= kill_deadline) kill(-pid, SIGKILL);
    usleep(2000);
  }
  result.wall_s = (NowMs() - start) / 1000.0;
  if (WIFEXITED(status)) {
    result.exited = true;
    result.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    result.term_signal = WTERMSIG(status);
  }
  return result;
}

}  // namespace trainscope
