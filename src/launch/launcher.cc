// The launcher's event loop: fork/exec every rank, multiplex their output into logs and
// the terminal, reap them, and stop the job when one fails or a signal arrives.
//
// Launch() runs in five steps: validate the options and plan the ranks (plan.h: which
// ranks, their environment, CPUs, devices, the rendezvous port), then a Job starts the
// ranks, runs the event loop (output, signals, reaping, stop on the first failure, the
// settle / dump / grace deadlines, timeouts) and finishes (strays, results, hang verdict).
//
// Single-threaded on purpose: fork() from a multi-threaded process is a minefield, and one
// poll() loop over the output pipes, a self-pipe for signals and a short timeout for
// waitpid() is all the concurrency a launcher needs.
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <filesystem>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "launch/hang_dump.h"
#include "launch/plan.h"
#include "launch/reaper.h"
#include "nlohmann/json.hpp"
#include "trainscope/core/formats.h"
#include "trainscope/core/os.h"
#include "trainscope/core/run_dir.h"
#include "trainscope/core/run_dir_lock.h"
#include "trainscope/core/status.h"
#include "trainscope/launch/launch.h"

namespace trainscope::launch {
namespace {

int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// Signal plumbing: the handler only records the signal and wakes poll().
volatile sig_atomic_t g_signals_seen = 0;
volatile sig_atomic_t g_last_signal = 0;
int g_wake_fd = -1;

void OnSignal(int sig) {
  g_last_signal = sig;
  g_signals_seen = g_signals_seen + 1;
  if (g_wake_fd >= 0) {
    int saved = errno;
    char c = 1;
    (void)!::write(g_wake_fd, &c, 1);
    errno = saved;
  }
}

std::string SignalName(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev != nullptr ? absl::StrCat("SIG", abbrev) : absl::StrCat("signal ", sig);
}

std::string CpuListText(const std::vector<int>& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    absl::StrAppend(&out, out.empty() ? "" : ",", cpus[i]);
    if (j > i) absl::StrAppend(&out, "-", cpus[j]);
    i = j + 1;
  }
  return out;
}

struct Stream {
  int fd = -1;      // read end of the rank's pipe; -1 once closed
  int log_fd = -1;  // rank<R>/{stdout,stderr}.log
  FILE* live = nullptr;
  std::string partial;  // bytes after the last newline
};

struct Child {
  RankStatus status;
  pid_t pid = -1;
  bool reaped = false;
  int exec_fd = -1;  // CLOEXEC pipe: EOF = exec'd, 4 bytes = errno of a failed exec
  Stream out, err;
  std::deque<std::string> tail;
};

void WriteAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void AddTail(Child& c, std::string line, int max_lines) {
  c.tail.push_back(std::move(line));
  while (static_cast<int>(c.tail.size()) > max_lines) c.tail.pop_front();
}

void EchoLine(FILE* f, int rank, const std::string& line, const LaunchOptions& o) {
  if (o.live_prefix) {
    std::fprintf(f, "[rank %d] %s\n", rank, line.c_str());
  } else {
    std::fprintf(f, "%s\n", line.c_str());
  }
}

// Emits complete lines of `s` (all of it when `flush`) live with the rank prefix.
void EmitLines(Child& c, Stream& s, bool flush, const LaunchOptions& o) {
  size_t start = 0;
  while (true) {
    size_t nl = s.partial.find('\n', start);
    if (nl == std::string::npos) break;
    std::string line = s.partial.substr(start, nl - start);
    if (o.live_output && s.live != nullptr) EchoLine(s.live, c.status.rank, line, o);
    AddTail(c, std::move(line), o.tail_lines);
    start = nl + 1;
  }
  s.partial.erase(0, start);
  if (flush && !s.partial.empty()) {
    if (o.live_output && s.live != nullptr) EchoLine(s.live, c.status.rank, s.partial, o);
    AddTail(c, s.partial, o.tail_lines);
    s.partial.clear();
  }
  if (o.live_output && s.live != nullptr) std::fflush(s.live);
}

// Reads what is available; closes the stream at EOF.
void Drain(Child& c, Stream& s, const LaunchOptions& o) {
  char buf[65536];
  while (s.fd >= 0) {
    ssize_t n = ::read(s.fd, buf, sizeof(buf));
    if (n > 0) {
      WriteAll(s.log_fd, buf, static_cast<size_t>(n));
      s.partial.append(buf, static_cast<size_t>(n));
      EmitLines(c, s, false, o);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    ::close(s.fd);  // EOF or error
    s.fd = -1;
    EmitLines(c, s, true, o);
  }
}

// "rank 1 (pid 42) was" / "ranks 1 (pid 42), 3 (pid 44) were".
std::string NameRanks(const std::vector<const Child*>& ranks) {
  std::vector<std::string> names;
  for (const Child* c : ranks) names.push_back(absl::StrCat(c->status.rank, " (pid ", c->pid, ")"));
  return absl::StrCat(ranks.size() == 1 ? "rank " : "ranks ", absl::StrJoin(names, ", "),
                      ranks.size() == 1 ? " was" : " were");
}

// The one sentence on a rank that failed on its own (LaunchResult::failure).
std::string RankFailure(const RankStatus& s, int pid) {
  return absl::StrCat("rank ", s.rank, " (pid ", pid, ") ",
                      s.exited ? absl::StrCat("exited with code ", s.exit_code)
                               : absl::StrCat("was killed by ", SignalName(s.term_signal)),
                      " after ", absl::StrFormat("%.2f", s.end_s), " s");
}

// Whether `pid` (a child) has exited already, without reaping it: a rank that ended by
// itself before the launcher signals it was not stopped by the launcher.
bool ExitedAlready(pid_t pid) {
  siginfo_t info = {};
  return ::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
         info.si_pid == pid;
}

std::string Seconds(std::chrono::milliseconds d) {
  return absl::StrFormat("%g s", static_cast<double>(d.count()) / 1000.0);
}

int64_t Ns(std::chrono::milliseconds d) { return std::chrono::nanoseconds(d).count(); }

// In the forked child: its own process group, death with the launcher, its CPUs (`cpus`,
// nullptr: not bound), output into the pipes, then exec; on failure the errno goes into
// `exec_fd`. Only async-signal-safe calls: everything was built before fork().
[[noreturn]] void ExecRank(char* const* argv, char* const* envp, const cpu_set_t* cpus, int out_fd,
                           int err_fd, int exec_fd, pid_t launcher_pid) {
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != launcher_pid) ::_exit(127);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::signal(SIGINT, SIG_DFL);
  ::signal(SIGTERM, SIG_DFL);
  ::signal(SIGHUP, SIG_DFL);
  ::signal(SIGPIPE, SIG_DFL);
  if (cpus != nullptr) ::sched_setaffinity(0, sizeof(*cpus), cpus);
  int devnull = ::open("/dev/null", O_RDONLY);
  if (devnull >= 0) ::dup2(devnull, 0);
  ::dup2(out_fd, 1);
  ::dup2(err_fd, 2);
  ::execvpe(argv[0], argv, envp);
  int err = errno;
  (void)!::write(exec_fd, &err, sizeof(err));
  ::_exit(127);
}

// One job while it runs, from its logs being opened to its result. Launch() drives it in
// order: OpenLogs, CatchSignals, StartRanks, RunEventLoop, Finish. Single-threaded.
// Deadlines are NowNs() values, 0 when not set.
class Job {
 public:
  Job(const LaunchOptions& o, const JobPlan& plan, int64_t t0);

  // Creates each rank's log directory and opens its logs; InvalidArgument when it cannot.
  absl::Status OpenLogs();
  // Until Finish(), SIGINT, SIGTERM and SIGHUP are recorded and wake the event loop.
  // Internal when the self-pipe cannot be made (nothing installed then).
  absl::Status CatchSignals();
  // Forks every rank and waits until each exec'd or failed to; when one could not be
  // started, kills the others (Finish() then returns that error).
  void StartRanks();
  // Until every rank is reaped and its output drained: multiplexes output, forwards
  // signals, reaps, stops the job on the first failure or a timeout.
  void RunEventLoop();
  // Stops strays, restores the signal handlers, collects the ranks, runs the hang analysis
  // and writes launch.json. The start error, if any, else the result.
  absl::StatusOr<LaunchResult> Finish();

 private:
  double Since() const { return static_cast<double>(NowNs() - t0_) / 1e9; }
  absl::Status StartRank(Child& c, const RankPlan& r, const std::vector<char*>& argv,
                         pid_t launcher_pid);
  void WaitForExecs();
  // Stop helpers.
  void SignalAll(int sig, bool mark);
  void BeginStop(int sig);
  void StopAfterDumps();
  bool DumpsDone() const;
  void TimeOut(const std::string& why);
  // The event loop's steps.
  void KillLeftoverPipeHolders();
  void Poll(std::vector<pollfd>& fds, const std::vector<std::pair<Child*, Stream*>>& owners);
  void HandleSignals();
  void Reap();
  void CheckTimeouts();
  void CheckDeadlines();

  // Constant after construction.
  const LaunchOptions& o_;
  const JobPlan& plan_;
  const int64_t t0_;

  LaunchResult result_;
  std::vector<Child> children_;  // by local rank
  int wake_[2] = {-1, -1};       // signal self-pipe
  struct sigaction old_int_ {
  }, old_term_{}, old_hup_{};
  std::set<pid_t> callers_children_;  // not the job's: the end-of-job sweep leaves them be
  absl::Status start_error_;
  std::string exec_failure_;
  int64_t kill_deadline_ns_ = 0;  // a stop is in progress: SIGKILL then
  // A failure or a timeout: first the ranks still running are asked for a hang dump (those
  // that catch SIGUSR1), and stopped once they wrote it or exited, or after dump_wait.
  int64_t dump_deadline_ns_ = 0;  // 0: no dump phase
  std::vector<Child*> dump_asked_;
  std::vector<HangDumpFiles> dump_files_before_;  // of each asked rank, before it was asked
  int64_t first_ok_exit_ns_ = 0;                  // when the first rank exited with code 0
  std::string first_ok_name_;
  int64_t settle_deadline_ns_ = 0;  // a rank failed: stop the others then
  int signals_handled_ = 0;
};

Job::Job(const LaunchOptions& o, const JobPlan& plan, int64_t t0)
    : o_(o), plan_(plan), t0_(t0), children_(plan.ranks.size()) {
  result_.nproc_per_node = plan.nproc;
  result_.world_size = plan.world_size;
  result_.master_addr = plan.master_addr;
  result_.master_port = plan.master_port;
  result_.run_dir = plan.run_dir;
  for (size_t lr = 0; lr < children_.size(); ++lr) {
    const RankPlan& r = plan.ranks[lr];
    Child& c = children_[lr];
    c.status.local_rank = r.local_rank;
    c.status.rank = r.rank;
    c.status.cpus = r.cpus;
    c.status.device = r.device;
    c.status.stdout_log = r.stdout_log;
    c.status.stderr_log = r.stderr_log;
    const bool echoed = o.live_rank < 0 || o.live_rank == r.rank;
    c.out.live = echoed ? o.live_stdout : nullptr;
    c.err.live = echoed ? o.live_stderr : nullptr;
  }
}

absl::Status Job::OpenLogs() {
  for (size_t lr = 0; lr < children_.size(); ++lr) {
    Child& c = children_[lr];
    const std::string& dir = plan_.ranks[lr].log_dir;
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    c.out.log_fd =
        ::open(c.status.stdout_log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    c.err.log_fd =
        ::open(c.status.stderr_log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (c.out.log_fd < 0 || c.err.log_fd < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot write logs in ", dir, ": ", std::strerror(errno)));
    }
  }
  return absl::OkStatus();
}

absl::Status Job::CatchSignals() {
  if (::pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  g_wake_fd = wake_[1];
  g_signals_seen = 0;
  g_last_signal = 0;
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, &old_int_);
  ::sigaction(SIGTERM, &sa, &old_term_);
  ::sigaction(SIGHUP, &sa, &old_hup_);
  return absl::OkStatus();
}

void Job::StartRanks() {
  std::vector<char*> argv;
  for (const auto& a : o_.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t launcher_pid = ::getpid();
  callers_children_ = ChildrenOfSelf();
  for (size_t lr = 0; lr < children_.size() && start_error_.ok(); ++lr) {
    start_error_ = StartRank(children_[lr], plan_.ranks[lr], argv, launcher_pid);
  }
  WaitForExecs();
  result_.all_running_s = Since();
  if (!start_error_.ok() || !exec_failure_.empty()) {
    SignalAll(SIGKILL, true);
    kill_deadline_ns_ = NowNs();
  }
}

absl::Status Job::StartRank(Child& c, const RankPlan& r, const std::vector<char*>& argv,
                            pid_t launcher_pid) {
  int out_p[2], err_p[2], exec_p[2];
  if (::pipe2(out_p, O_CLOEXEC) != 0 || ::pipe2(err_p, O_CLOEXEC) != 0 ||
      ::pipe2(exec_p, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  std::vector<char*> envp;
  for (const std::string& kv : r.env) envp.push_back(const_cast<char*>(kv.c_str()));
  envp.push_back(nullptr);
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  for (int cpu : r.cpus) CPU_SET(cpu, &cpus);
  const cpu_set_t* bind = r.cpus.empty() ? nullptr : &cpus;

  pid_t pid = ::fork();
  if (pid == 0)
    ExecRank(argv.data(), envp.data(), bind, out_p[1], err_p[1], exec_p[1], launcher_pid);
  if (pid < 0) {
    absl::Status error = absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
    for (int fd : {out_p[0], out_p[1], err_p[0], err_p[1], exec_p[0], exec_p[1]}) ::close(fd);
    return error;
  }
  ::setpgid(pid, pid);  // also here, so signals sent right away reach the group
  ::close(out_p[1]);
  ::close(err_p[1]);
  ::close(exec_p[1]);
  c.pid = pid;
  c.status.pid = pid;
  c.out.fd = out_p[0];
  c.err.fd = err_p[0];
  c.exec_fd = exec_p[0];
  ::fcntl(c.out.fd, F_SETFL, O_NONBLOCK);
  ::fcntl(c.err.fd, F_SETFL, O_NONBLOCK);
  return absl::OkStatus();
}

// Every exec pipe ends at the exec (EOF) or carries the errno of a failed one.
void Job::WaitForExecs() {
  for (Child& c : children_) {
    if (c.exec_fd < 0) continue;
    int err = 0;
    ssize_t n;
    do {
      n = ::read(c.exec_fd, &err, sizeof(err));
    } while (n < 0 && errno == EINTR);
    ::close(c.exec_fd);
    c.exec_fd = -1;
    c.status.start_s = Since();
    if (n == sizeof(err) && exec_failure_.empty()) {
      exec_failure_ = absl::StrCat("cannot execute '", o_.argv[0], "': ", std::strerror(err));
    }
  }
}

void Job::SignalAll(int sig, bool mark) {
  for (Child& c : children_) {
    if (c.pid <= 0 || c.reaped) continue;
    if (mark && !ExitedAlready(c.pid)) c.status.stopped_by_us = true;
    ::kill(-c.pid, sig);
  }
}

void Job::BeginStop(int sig) {
  SignalAll(sig, true);
  if (kill_deadline_ns_ == 0) kill_deadline_ns_ = NowNs() + Ns(o_.stop_grace);
}

void Job::StopAfterDumps() {
  if (kill_deadline_ns_ != 0 || dump_deadline_ns_ != 0) return;
  for (Child& c : children_) {
    if (!o_.request_dumps || c.pid <= 0 || c.reaped) continue;
    HangDumpFiles before = StatHangDump(plan_.abs_run_dir, c.status.rank);
    if (!AskRankToDump(c.pid)) continue;
    dump_asked_.push_back(&c);
    dump_files_before_.push_back(std::move(before));
    result_.hang.asked_ranks.push_back(c.status.rank);
  }
  if (dump_asked_.empty()) {
    BeginStop(SIGTERM);
  } else {
    dump_deadline_ns_ = NowNs() + Ns(o_.dump_wait);
  }
}

bool Job::DumpsDone() const {
  if (NowNs() >= dump_deadline_ns_) return true;
  for (size_t i = 0; i < dump_asked_.size(); ++i) {
    const Child* c = dump_asked_[i];
    if (!c->reaped && !HangDumpWritten(plan_.abs_run_dir, c->status.rank, dump_files_before_[i])) {
      return false;
    }
  }
  return true;
}

// A timeout: stop the ranks still running and name them as the failure.
void Job::TimeOut(const std::string& why) {
  std::vector<const Child*> running;
  for (const Child& c : children_)
    if (c.pid > 0 && !c.reaped) running.push_back(&c);
  if (running.empty()) return;
  for (const Child* c : running) result_.timed_out_ranks.push_back(c->status.rank);
  result_.first_failed_rank = running.front()->status.rank;
  result_.failure = absl::StrCat(NameRanks(running), " still running ", why, "; stopped");
  StopAfterDumps();
}

void Job::RunEventLoop() {
  int64_t all_reaped_ns = 0;
  while (true) {
    bool all_reaped = true;
    std::vector<pollfd> fds{{wake_[0], POLLIN, 0}};
    std::vector<std::pair<Child*, Stream*>> owners{{nullptr, nullptr}};
    for (Child& c : children_) {
      all_reaped = all_reaped && (c.reaped || c.pid <= 0);
      for (Stream* s : {&c.out, &c.err}) {
        if (s->fd < 0) continue;
        fds.push_back({s->fd, POLLIN, 0});
        owners.emplace_back(&c, s);
      }
    }
    const bool any_open = fds.size() > 1;
    if (all_reaped && !any_open) break;
    if (all_reaped) {
      // Grandchildren may hold the pipes: give them a moment, then kill the groups.
      if (all_reaped_ns == 0) all_reaped_ns = NowNs();
      if (NowNs() - all_reaped_ns > 500000000) {
        KillLeftoverPipeHolders();
        continue;
      }
    }
    Poll(fds, owners);
    HandleSignals();
    Reap();
    CheckDeadlines();
  }
}

void Job::KillLeftoverPipeHolders() {
  for (Child& c : children_)
    if (c.pid > 0) ::kill(-c.pid, SIGKILL);
  for (Child& c : children_)
    for (Stream* s : {&c.out, &c.err})
      if (s->fd >= 0) {
        Drain(c, *s, o_);
        if (s->fd >= 0) ::close(s->fd), s->fd = -1;
      }
}

// Waits up to 20 ms for output or a signal; drains what came.
void Job::Poll(std::vector<pollfd>& fds, const std::vector<std::pair<Child*, Stream*>>& owners) {
  int r = ::poll(fds.data(), fds.size(), 20);
  if (r <= 0) return;
  for (size_t i = 1; i < fds.size(); ++i) {
    if (fds[i].revents != 0) Drain(*owners[i].first, *owners[i].second, o_);
  }
  if (fds[0].revents & POLLIN) {
    char buf[64];
    while (::read(wake_[0], buf, sizeof(buf)) > 0) {
    }
  }
}

// Signals to the launcher: forward the first, escalate on the second.
void Job::HandleSignals() {
  int seen = g_signals_seen;
  if (seen <= signals_handled_) return;
  int sig = g_last_signal;
  if (result_.interrupted_by == 0) result_.interrupted_by = sig;
  if (signals_handled_ == 0) {
    BeginStop(sig);
  } else {
    SignalAll(SIGKILL, true);
  }
  signals_handled_ = seen;
}

void Job::Reap() {
  for (Child& c : children_) {
    if (c.pid <= 0 || c.reaped) continue;
    int wstatus;
    pid_t w = ::waitpid(c.pid, &wstatus, WNOHANG);
    if (w != c.pid) continue;
    c.reaped = true;
    c.status.end_s = Since();
    if (WIFEXITED(wstatus)) {
      c.status.exited = true;
      c.status.exit_code = WEXITSTATUS(wstatus);
    } else if (WIFSIGNALED(wstatus)) {
      c.status.term_signal = WTERMSIG(wstatus);
    }
    ::kill(-c.pid, SIGTERM);  // the rank's own leftovers, if any
    if (!c.status.failed() && first_ok_exit_ns_ == 0) {
      first_ok_exit_ns_ = NowNs();
      first_ok_name_ = absl::StrCat("rank ", c.status.rank);
    }
    if (c.status.failed() && !c.status.stopped_by_us && result_.first_failed_rank < 0 &&
        result_.interrupted_by == 0) {
      result_.first_failed_rank = c.status.rank;
      result_.failure = RankFailure(c.status, c.pid);
      settle_deadline_ns_ = NowNs() + Ns(o_.failure_settle);
    }
  }
}

void Job::CheckTimeouts() {
  const int64_t now = NowNs();
  if (o_.exit_timeout.count() > 0 && first_ok_exit_ns_ != 0 &&
      now - first_ok_exit_ns_ >= Ns(o_.exit_timeout)) {
    TimeOut(absl::StrCat(Seconds(o_.exit_timeout), " after ", first_ok_name_,
                         " exited OK (--timeout ", Seconds(o_.exit_timeout), ")"));
  } else if (o_.job_timeout.count() > 0 && now - t0_ >= Ns(o_.job_timeout)) {
    TimeOut(
        absl::StrCat("when the job timeout expired (--job-timeout ", Seconds(o_.job_timeout), ")"));
  }
}

void Job::CheckDeadlines() {
  // A failure: the others had failure_settle to fail by themselves; stop the rest.
  if (settle_deadline_ns_ != 0 && NowNs() >= settle_deadline_ns_) {
    settle_deadline_ns_ = 0;
    StopAfterDumps();
  }
  if (kill_deadline_ns_ == 0 && result_.interrupted_by == 0 && result_.first_failed_rank < 0) {
    CheckTimeouts();
  }
  if (dump_deadline_ns_ != 0 && kill_deadline_ns_ == 0 && DumpsDone()) BeginStop(SIGTERM);
  if (kill_deadline_ns_ != 0 && NowNs() >= kill_deadline_ns_) SignalAll(SIGKILL, true);
}

absl::StatusOr<LaunchResult> Job::Finish() {
  // Descendants that escaped their rank's process group (setsid, double fork) were
  // re-parented to us if the caller made us a subreaper: stop them now.
  result_.strays_killed =
      KillStrays(callers_children_, std::min(o_.stop_grace, std::chrono::milliseconds(1000)));
  ::sigaction(SIGINT, &old_int_, nullptr);
  ::sigaction(SIGTERM, &old_term_, nullptr);
  ::sigaction(SIGHUP, &old_hup_, nullptr);
  g_wake_fd = -1;
  ::close(wake_[0]);
  ::close(wake_[1]);
  for (Child& c : children_) {
    ::close(c.out.log_fd);
    ::close(c.err.log_fd);
    c.status.tail.assign(c.tail.begin(), c.tail.end());
    result_.ranks.push_back(c.status);
  }
  result_.hang = AnalyzeHangDumps(plan_.abs_run_dir, std::move(result_.hang));
  result_.total_s = Since();
  // The job's result stands even when launch.json cannot be written (a full disk): the
  // summary on stdout says the same.
  (void)WriteFileAtomic(run_dir::Join(result_.run_dir, run_dir::kLaunchJson),
                        LaunchResultJson(result_, o_) + "\n");
  if (!start_error_.ok()) return start_error_;
  if (!exec_failure_.empty()) return absl::NotFoundError(exec_failure_);
  return std::move(result_);
}

}  // namespace

absl::Status BecomeChildSubreaper() {
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
    return absl::InternalError(
        absl::StrCat("cannot become a child subreaper: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

// Validate, plan, lock the run directory, then run the job: start / event loop / finish.
absl::StatusOr<LaunchResult> Launch(const LaunchOptions& o) {
  const int64_t t0 = NowNs();
  TS_RETURN_IF_ERROR(ValidateOptions(o));
  TS_ASSIGN_OR_RETURN(const std::string token, ResolveJobToken(o));
  if (o.nnodes > 1 && o.node_rank == 0)
    TS_RETURN_IF_ERROR(CheckMasterAddressIsLocal(o.master_addr));
  TS_ASSIGN_OR_RETURN(const HostView host, ReadHost(o));
  TS_ASSIGN_OR_RETURN(const JobPlan plan, PlanJob(o, host, token));

  std::error_code ec;
  std::filesystem::create_directories(plan.run_dir, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot create run directory ", plan.run_dir, ": ", ec.message()));
  }
  // One job, one writer (core/run_dir_lock.h): the launcher holds the run directory's lock
  // until it returns, and its ranks carry its job id, so that a rank writing the same
  // directory joins it while any other job is refused.
  run_dir::LockOptions lock_options;
  lock_options.job_id = plan.job_id;
  absl::StatusOr<run_dir::RunDirLock> lock = run_dir::LockRunDir(plan.run_dir, lock_options);
  if (!lock.ok()) return lock.status();

  Job job(o, plan, t0);
  TS_RETURN_IF_ERROR(job.OpenLogs());
  TS_RETURN_IF_ERROR(job.CatchSignals());
  job.StartRanks();
  job.RunEventLoop();
  return job.Finish();
}

std::string LaunchResultJson(const LaunchResult& r, const LaunchOptions& o) {
  nlohmann::json j;
  j["format"] = formats::kLaunch;
  j["version"] = 1;
  j["argv"] = o.argv;
  j["run_dir"] = r.run_dir;
  j["nnodes"] = o.nnodes;
  j["node_rank"] = o.node_rank;
  j["nproc_per_node"] = r.nproc_per_node;
  j["world_size"] = r.world_size;
  j["master_addr"] = r.master_addr;
  j["master_port"] = r.master_port;
  j["all_running_s"] = r.all_running_s;
  j["total_s"] = r.total_s;
  j["ok"] = r.ok();
  j["first_failed_rank"] =
      r.first_failed_rank >= 0 ? nlohmann::json(r.first_failed_rank) : nlohmann::json(nullptr);
  j["failure"] = r.failure;
  j["timed_out_ranks"] = r.timed_out_ranks;
  j["strays_killed"] = r.strays_killed;
  j["hang"] =
      r.hang.analyzed || !r.hang.error.empty() || !r.hang.asked_ranks.empty()
          ? nlohmann::json{{"asked_ranks", r.hang.asked_ranks}, {"analysis", r.hang.analysis_path},
                           {"problem", r.hang.problem},         {"findings", r.hang.findings},
                           {"verdict", r.hang.sentences},       {"error", r.hang.error}}
          : nlohmann::json(nullptr);
  j["interrupted_by"] = r.interrupted_by != 0 ? nlohmann::json(SignalName(r.interrupted_by))
                                              : nlohmann::json(nullptr);
  nlohmann::json ranks = nlohmann::json::array();
  for (const RankStatus& s : r.ranks) {
    nlohmann::json x;
    x["rank"] = s.rank;
    x["local_rank"] = s.local_rank;
    x["pid"] = s.pid;
    x["exit_code"] = s.exited ? nlohmann::json(s.exit_code) : nlohmann::json(nullptr);
    x["signal"] =
        s.term_signal != 0 ? nlohmann::json(SignalName(s.term_signal)) : nlohmann::json(nullptr);
    x["stopped_by_launcher"] = s.stopped_by_us;
    x["start_s"] = s.start_s;
    x["end_s"] = s.end_s;
    x["cpus"] = CpuListText(s.cpus);
    x["device"] = s.device;
    x["stdout_log"] = s.stdout_log;
    x["stderr_log"] = s.stderr_log;
    ranks.push_back(std::move(x));
  }
  j["ranks"] = std::move(ranks);
  return j.dump(2);
}

}  // namespace trainscope::launch
