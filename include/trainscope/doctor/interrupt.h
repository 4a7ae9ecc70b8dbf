// Ctrl-C handling for commands that run child processes (doctor): on SIGINT, SIGTERM or
// SIGHUP every descendant of this process is killed (its process group too: children
// started by RunProcess lead their own groups), so no stray process survives; the command
// then finishes its report and exits.
//
// The process becomes a child subreaper (prctl PR_SET_CHILD_SUBREAPER): orphans of a
// killed child are re-parented to it, so grandchildren in other process groups are found
// and killed as well.
// Thread-safety: all functions are thread-safe; the signal handler only sets a flag and
// writes one byte to a pipe; a watcher thread does the killing.
#ifndef TRAINSCOPE_DOCTOR_INTERRUPT_H_
#define TRAINSCOPE_DOCTOR_INTERRUPT_H_

#include <sys/types.h>

#include <chrono>
#include <vector>

namespace trainscope::doctor {

// Installs the handlers and the watcher thread (idempotent). On a signal: Interrupted()
// becomes true and KillDescendants(grace) runs on the watcher thread.
void InstallInterruptHandler(std::chrono::milliseconds grace = std::chrono::milliseconds(1000));

// True once SIGINT/SIGTERM/SIGHUP arrived (after InstallInterruptHandler).
bool Interrupted();
// The signal number that interrupted, 0 if none.
int InterruptSignal();

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
