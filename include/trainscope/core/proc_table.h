// A snapshot of the processes in /proc, and the descendants of one of them: what the
// launcher's end-of-job sweep and the doctor's interrupt handling use to find processes
// that left their process group or session. Linux only; reads /proc, never signals.
#ifndef TRAINSCOPE_CORE_PROC_TABLE_H_
#define TRAINSCOPE_CORE_PROC_TABLE_H_

#include <sys/types.h>

#include <map>
#include <set>
#include <string>
#include <vector>

namespace trainscope {

struct ProcEntry {
  pid_t pid = 0;
  pid_t ppid = 0;
  pid_t pgrp = 0;
  char state = '?';  // R, S, D, Z, T, ...
};

// Every process in <proc_root>, from /proc/<pid>/stat (processes that vanish while being
// read are skipped).
std::map<pid_t, ProcEntry> ReadProcTable(const std::string& proc_root = "/proc");

// Descendants of `root` in `table` (not `root` itself), zombies included, skipping the
// whole subtree of each pid in `skip`.
std::vector<pid_t> DescendantsOf(pid_t root, const std::map<pid_t, ProcEntry>& table,
                                 const std::set<pid_t>& skip = {});

}  // namespace trainscope

#endif  // TRAINSCOPE_CORE_PROC_TABLE_H_
