// Ctrl-C for doctor (interrupt.h): a handler that only flags and pokes a pipe, a watcher
// thread that kills the descendants.
#include "trainscope/doctor/interrupt.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <thread>

#include "trainscope/core/proc_table.h"

namespace trainscope::doctor {
namespace {

std::atomic<bool> g_interrupted{false};
int g_pipe_read = -1;
// The handler's end: atomic, so that a handler running on another thread while the
// destructor closes it reads -1 (and writes nothing) rather than a closed or reused fd.
std::atomic<int> g_pipe_write{-1};
constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP};
constexpr char kPoke = 1;  // a signal arrived
constexpr char kStop = 0;  // the handler is going away

void OnSignal(int) {
  const int saved_errno = errno;  // the interrupted code may be about to read it
  g_interrupted.store(true);
  char c = kPoke;
  if (const int fd = g_pipe_write.load(); fd >= 0) {
    ssize_t ignored = write(fd, &c, 1);  // async-signal-safe
    (void)ignored;
  }
  errno = saved_errno;
}

// Descendants of `root`, without zombies (they are gone but for their exit status).
std::vector<pid_t> LiveDescendantsOf(pid_t root, const std::map<pid_t, ProcEntry>& procs) {
  std::vector<pid_t> out;
  for (pid_t pid : DescendantsOf(root, procs)) {
    if (procs.at(pid).state != 'Z') out.push_back(pid);
  }
  return out;
}

}  // namespace

InterruptHandler::InterruptHandler(std::chrono::milliseconds grace) {
  static_assert(sizeof(kSignals) / sizeof(kSignals[0]) == kCount);
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return;
  g_pipe_read = fds[0];
  g_pipe_write.store(fds[1]);
  installed_ = true;
  prctl(PR_GET_CHILD_SUBREAPER, &was_subreaper_);
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  // The watcher first, so that a signal right after the handlers are in place is served.
  // It starts with these signals blocked, so that they are handled on another thread.
  sigset_t block, previous;
  sigemptyset(&block);
  for (int sig : kSignals) sigaddset(&block, sig);
  pthread_sigmask(SIG_BLOCK, &block, &previous);
  watcher_ = std::thread([grace, fd = g_pipe_read] {
    char c;
    while (true) {
      ssize_t r = read(fd, &c, 1);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0 || c == kStop) return;
      KillDescendants(grace);
    }
  });
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int i = 0; i < kCount; ++i) sigaction(kSignals[i], &sa, &old_[i]);
}

InterruptHandler::~InterruptHandler() {
  if (!installed_) return;
  for (int i = 0; i < kCount; ++i) sigaction(kSignals[i], &old_[i], nullptr);
  char c = kStop;
  const int write_fd = g_pipe_write.load();
  while (write(write_fd, &c, 1) < 0 && errno == EINTR) {
  }
  watcher_.join();  // after any KillDescendants it was running
  prctl(PR_SET_CHILD_SUBREAPER, was_subreaper_);
  close(g_pipe_write.exchange(-1));
  close(g_pipe_read);
  g_pipe_read = -1;
}

bool Interrupted() { return g_interrupted.load(); }

std::vector<pid_t> Descendants(pid_t root) { return LiveDescendantsOf(root, ReadProcTable()); }

// Kill loop: SIGTERM to each live descendant and to its process group (unless it is our
// own group), then poll every 20 ms; after `grace`, SIGKILL. Orphans re-parented to us
// (we are a subreaper) show up as new direct children and are reaped here; the direct
// children we had at the start belong to a RunProcess call, which reaps them itself.
int KillDescendants(std::chrono::milliseconds grace) {
  const pid_t self = getpid();
  const pid_t self_pgrp = getpgrp();
  std::set<pid_t> original_children;
  std::set<pid_t> signalled;
  {
    auto procs = ReadProcTable();
    for (const auto& [pid, st] : procs)
      if (st.ppid == self) original_children.insert(pid);
  }
  auto start = std::chrono::steady_clock::now();
  auto hard_end = start + grace + std::chrono::seconds(1);
  bool killing = false;
  while (std::chrono::steady_clock::now() < hard_end) {
    auto procs = ReadProcTable();
    for (const auto& [pid, st] : procs) {
      if (st.ppid == self && st.state == 'Z' && !original_children.count(pid)) {
        waitpid(pid, nullptr, WNOHANG);
      }
    }
    std::vector<pid_t> live = LiveDescendantsOf(self, procs);
    if (live.empty()) break;
    if (!killing && std::chrono::steady_clock::now() - start >= grace) killing = true;
    const int sig = killing ? SIGKILL : SIGTERM;
    for (pid_t pid : live) {
      const ProcEntry& st = procs.at(pid);
      if (st.pgrp > 0 && st.pgrp != self_pgrp) kill(-st.pgrp, sig);
      kill(pid, sig);
      signalled.insert(pid);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return static_cast<int>(signalled.size());
}

void ReapExitedChildren() {
  while (waitpid(-1, nullptr, WNOHANG) > 0) {
  }
}

}  // namespace trainscope::doctor
