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

namespace {

// A started child and what the parent tracks of it until it is reaped.
struct Child {
  pid_t pid = -1;
  int in_fd = -1;         // the write end of its stdin, -1 once closed
  int fds[2] = {-1, -1};  // the read ends of its stdout and stderr, -1 once closed
  size_t stdin_off = 0;   // bytes of stdin_data written
  int64_t start = 0, deadline = 0;
  int64_t kill_deadline = -1;  // SIGKILL from then on; -1 until the time-out
};

// The child's environment: ours, with options.env's entries replacing or adding theirs.
std::vector<std::string> ChildEnvironment(const RunOptions& options) {
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    std::string key = kv.substr(0, kv.find('='));
    if (options.env.count(key)) continue;
    env_strings.push_back(std::move(kv));
  }
  for (const auto& [k, v] : options.env) env_strings.push_back(k + "=" + v);
  return env_strings;
}

// Fork + exec of `exe` with three pipes as its 0, 1 and 2; the child becomes its own process
// group. A failed exec sends its errno back through a fourth, close-on-exec pipe: NotFound.
absl::StatusOr<Child> StartChild(const std::string& exe, const std::vector<std::string>& argv,
                                 const RunOptions& options) {
  int in_pipe[2] = {-1, -1}, out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1};
  int exec_pipe[2] = {-1, -1};
  // On a failed pipe or fork, the pipes made so far are closed again (errno kept).
  auto close_all = [&] {
    const int saved = errno;
    for (int* p : {in_pipe, out_pipe, err_pipe, exec_pipe}) {
      for (int i = 0; i < 2; ++i) {
        if (p[i] >= 0) ::close(p[i]);
      }
    }
    errno = saved;
  };
  if (pipe2(in_pipe, O_CLOEXEC) || pipe2(out_pipe, O_CLOEXEC) || pipe2(err_pipe, O_CLOEXEC) ||
      pipe2(exec_pipe, O_CLOEXEC)) {
    close_all();
    return absl::InternalError(absl::StrCat("pipe: ", strerror(errno)));
  }
  std::vector<std::string> env_strings = ChildEnvironment(options);
  std::vector<char*> envp, args;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = argv;
  for (auto& s : argv_copy) args.push_back(s.data());
  args.push_back(nullptr);

  Child c;
  c.start = NowMs();
  c.deadline = c.start + options.timeout.count();
  c.pid = fork();
  if (c.pid < 0) {
    close_all();
    return absl::InternalError(absl::StrCat("fork: ", strerror(errno)));
  }
  if (c.pid == 0) {
    setpgid(0, 0);
    // A child starts with the default SIGPIPE, whatever the parent set (the CLI ignores it).
    signal(SIGPIPE, SIG_DFL);
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
  setpgid(c.pid, c.pid);
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
    waitpid(c.pid, nullptr, 0);
    return absl::NotFoundError(absl::StrCat(exe, ": cannot execute: ", strerror(exec_errno)));
  }
  close(exec_pipe[0]);
  c.in_fd = in_pipe[1];
  c.fds[0] = out_pipe[0];
  c.fds[1] = err_pipe[0];
  return c;
}

// At the deadline: SIGTERM to the child's process group, and the grace period starts.
void CheckDeadline(const RunOptions& options, int64_t now, Child* c, RunResult* result) {
  if (!result->timed_out && now >= c->deadline) {
    result->timed_out = true;
    kill(-c->pid, SIGTERM);
    c->kill_deadline = now + options.kill_grace.count();
  }
}

// Writes what the child's stdin takes now; closes it once all is written or a write fails.
void FeedStdin(const RunOptions& options, Child* c) {
  ssize_t w = write(c->in_fd, options.stdin_data.data() + c->stdin_off,
                    options.stdin_data.size() - c->stdin_off);
  if (w > 0) c->stdin_off += w;
  if (w < 0 && errno != EAGAIN) c->stdin_off = options.stdin_data.size();
  if (c->stdin_off >= options.stdin_data.size()) {
    close(c->in_fd);
    c->in_fd = -1;
  }
}

// Reads what output pipe i holds now into `sink`, keeping at most max_output_bytes (the rest
// sets truncated); closes the pipe at its end or on an error.
void DrainOutput(const RunOptions& options, int i, std::string* sink, Child* c, RunResult* result) {
  char buf[65536];
  ssize_t r = read(c->fds[i], buf, sizeof(buf));
  if (r > 0) {
    size_t room =
        options.max_output_bytes > sink->size() ? options.max_output_bytes - sink->size() : 0;
    if (static_cast<size_t>(r) > room) result->truncated = true;
    sink->append(buf, std::min<size_t>(r, room));
  } else if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN)) {
    close(c->fds[i]);
    c->fds[i] = -1;
  }
}

// Polls the pipes, feeding stdin and draining stdout/stderr, until both output pipes close or
// the grace period after the time-out ends; then closes what is left open.
void PumpPipes(const RunOptions& options, Child* c, RunResult* result) {
  std::string* sinks[2] = {&result->out, &result->err};
  while (true) {
    pollfd pfds[3];
    int n = 0;
    int map[3];
    for (int i = 0; i < 2; ++i) {
      if (c->fds[i] >= 0) {
        pfds[n] = {c->fds[i], POLLIN, 0};
        map[n++] = i;
      }
    }
    if (c->in_fd >= 0) {
      pfds[n] = {c->in_fd, POLLOUT, 0};
      map[n++] = 2;
    }
    if (n == 0) break;
    int64_t now = NowMs();
    CheckDeadline(options, now, c, result);
    if (c->kill_deadline >= 0 && now >= c->kill_deadline) {
      kill(-c->pid, SIGKILL);
      // A grandchild may still hold the pipes open; stop reading.
      break;
    }
    int64_t wait_ms = (c->kill_deadline >= 0 ? c->kill_deadline : c->deadline) - now;
    int rc = poll(pfds, n, static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(wait_ms, 100))));
    if (rc < 0 && errno != EINTR) break;
    for (int j = 0; j < n && rc > 0; ++j) {
      if (!pfds[j].revents) continue;
      if (map[j] == 2) {
        FeedStdin(options, c);
      } else {
        DrainOutput(options, map[j], sinks[map[j]], c, result);
      }
    }
  }
  for (int i = 0; i < 2; ++i)
    if (c->fds[i] >= 0) close(c->fds[i]);
  if (c->in_fd >= 0) close(c->in_fd);
}

// Reaps the child, honouring the deadline; its wait status.
int Reap(const RunOptions& options, Child* c, RunResult* result) {
  int status = 0;
  while (waitpid(c->pid, &status, WNOHANG) != c->pid) {
    int64_t now = NowMs();
    CheckDeadline(options, now, c, result);
    if (c->kill_deadline >= 0 && now >= c->kill_deadline) kill(-c->pid, SIGKILL);
    usleep(2000);
  }
  return status;
}

}  // namespace

// The child becomes its own process group so that a time-out kills the whole tree it started
// (a shell script's children included). The parent pumps the pipes until both output pipes
// close, then reaps the child, or the deadline passes.
absl::StatusOr<RunResult> RunProcess(const std::vector<std::string>& argv,
                                     const RunOptions& options) {
  if (argv.empty()) return absl::InvalidArgumentError("RunProcess: empty argv");
  std::string exe = FindInPath(argv[0]);
  if (exe.empty()) return absl::NotFoundError(absl::StrCat(argv[0], ": not found in PATH"));
  absl::StatusOr<Child> started = StartChild(exe, argv, options);
  if (!started.ok()) return started.status();
  Child& c = *started;
  if (options.stdin_data.empty()) {
    close(c.in_fd);
    c.in_fd = -1;
  } else {
    fcntl(c.in_fd, F_SETFL, O_NONBLOCK);
  }
  RunResult result;
  PumpPipes(options, &c, &result);
  const int status = Reap(options, &c, &result);
  result.wall_s = (NowMs() - c.start) / 1000.0;
  if (WIFEXITED(status)) {
    result.exited = true;
    result.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    result.term_signal = WTERMSIG(status);
  }
  return result;
}

}  // namespace trainscope
