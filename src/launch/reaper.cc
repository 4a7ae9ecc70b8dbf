// /proc walking for the launcher's end-of-job sweep (see reaper.h).
#include "launch/reaper.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <thread>

namespace trainscope::launch {

std::set<pid_t> ChildrenOfSelf() {
  std::set<pid_t> out;
  const pid_t self = ::getpid();
  for (const auto& [pid, p] : ReadProcTable())
    if (p.ppid == self) out.insert(pid);
  return out;
}

// Sweep loop: signal every live stray (and its process group, which may hold more), reap
// the ones that are our zombies, repeat every 20 ms until none is left or the time is up.
// Strays that fork while being killed are caught by the next pass.
int KillStrays(const std::set<pid_t>& keep, std::chrono::milliseconds grace) {
  const pid_t self = ::getpid();
  const pid_t self_pgrp = ::getpgrp();
  std::set<pid_t> signalled;
  const auto start = std::chrono::steady_clock::now();
  const auto hard_end = start + grace + std::chrono::seconds(1);
  while (true) {
    const auto table = ReadProcTable();
    bool any_live = false;
    const bool hard = std::chrono::steady_clock::now() - start >= grace;
    for (pid_t pid : DescendantsOf(self, table, keep)) {
      const ProcEntry& p = table.at(pid);
      if (p.ppid == self && p.state == 'Z') {
        ::waitpid(pid, nullptr, WNOHANG);
        continue;
      }
      if (p.state == 'Z') continue;  // its parent (a stray too) reaps it or dies
      any_live = true;
      const int sig = hard ? SIGKILL : SIGTERM;
      const pid_t pgrp = ::getpgid(pid);
      if (pgrp > 0 && pgrp != self_pgrp) ::kill(-pgrp, sig);
      ::kill(pid, sig);
      signalled.insert(pid);
    }
    if (!any_live || std::chrono::steady_clock::now() >= hard_end) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // Last reap of strays that died after the final pass.
  for (pid_t pid : DescendantsOf(self, ReadProcTable(), keep)) ::waitpid(pid, nullptr, WNOHANG);
  return static_cast<int>(signalled.size());
}

}  // namespace trainscope::launch
