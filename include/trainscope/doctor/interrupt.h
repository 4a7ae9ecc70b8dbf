// Ctrl-C handling for commands that run child processes (doctor): on SIGINT, SIGTERM or
// SIGHUP every descendant of this process is killed (its process group too: children
// started by RunProcess lead their own groups), so no stray process survives; the command
// then finishes its report and exits.
//
// While an InterruptHandler lives, the process is a child subreaper (prctl
// PR_SET_CHILD_SUBREAPER): orphans of a killed child are re-parented to it, so grandchildren
// in other process groups are found and killed as well. The executable owns it (`trainscope
// doctor` for the run); when it goes, the handlers and the subreaper setting that were there
// before come back and its watcher thread is joined: nothing is left behind in the host.
// Thread-safety: the functions are thread-safe; the signal handler only sets a flag and
// writes one byte to a pipe; the watcher thread does the killing.
#ifndef TRAINSCOPE_DOCTOR_INTERRUPT_H_
#define TRAINSCOPE_DOCTOR_INTERRUPT_H_

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <thread>
#include <vector>

namespace trainscope::doctor {

// Installs the handlers of SIGINT, SIGTERM and SIGHUP, makes the process a subreaper and
// starts the watcher thread. On a signal: Interrupted() becomes true and
// KillDescendants(grace) runs on the watcher thread. One at a time per process; construct
// and destroy on one thread. Should the pipe the handler writes to not be created, nothing
// is installed (a signal then has its previous effect).
class InterruptHandler {
 public:
  explicit InterruptHandler(std::chrono::milliseconds grace = std::chrono::milliseconds(1000));
  // Restores the previous handlers and subreaper setting, then stops and joins the watcher
  // (after the KillDescendants it may be running: at most grace + 1 s).
  ~InterruptHandler();
  InterruptHandler(const InterruptHandler&) = delete;
  InterruptHandler& operator=(const InterruptHandler&) = delete;

 private:
  static constexpr int kCount = 3;
  bool installed_ = false;
  int was_subreaper_ = 0;
  struct sigaction old_[kCount];
  std::thread watcher_;
};

// True once SIGINT/SIGTERM/SIGHUP arrived while an InterruptHandler lived (and since).
bool Interrupted();

// Live (non-zombie) descendants of `root`, from /proc/<pid>/stat.
std::vector<pid_t> Descendants(pid_t root);

// SIGTERM to every descendant of this process and its process group, then SIGKILL to
// whatever is left after `grace`. Reaps re-parented orphans, never a direct child that a
// RunProcess call may still be waiting for. Returns how many processes were signalled.
// Blocks at most grace + 1 s.
int KillDescendants(std::chrono::milliseconds grace);

// Reaps every exited child (waitpid(-1, WNOHANG)). Only call when no RunProcess is in
// flight: it would take that call's child.
void ReapExitedChildren();

}  // namespace trainscope::doctor

#endif  // TRAINSCOPE_DOCTOR_INTERRUPT_H_
