// Finding and stopping what a job leaves behind: processes that descend from the ranks but
// left their process group or session (setsid, daemonising double forks), which the
// process-group signals of the event loop cannot reach.
//
// With the launcher a child subreaper (BecomeChildSubreaper in launch.h), such orphans are
// re-parented to it instead of to init, so "every descendant of this process that is not
// under one of the caller's own children" is exactly the job's leftovers. Reads /proc; not
// thread-safe with respect to other code that reaps this process's children.
#ifndef TRAINSCOPE_SRC_LAUNCH_REAPER_H_
#define TRAINSCOPE_SRC_LAUNCH_REAPER_H_

#include <sys/types.h>

#include <chrono>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "trainscope/core/proc_table.h"

namespace trainscope::launch {

// The /proc snapshot and the descendant walk (core/proc_table.h).
using ::trainscope::DescendantsOf;
using ::trainscope::ProcEntry;
using ::trainscope::ReadProcTable;

// This process's direct children now.
std::set<pid_t> ChildrenOfSelf();

// Stops every descendant of this process outside the subtrees of `keep` (the caller's own
// children, recorded before the job started): SIGTERM, then SIGKILL after `grace`; reaps
// those that are (or became) our children. Blocks at most grace + 1 s. Returns how many
// live processes were signalled.
int KillStrays(const std::set<pid_t>& keep, std::chrono::milliseconds grace);

}  // namespace trainscope::launch

#endif  // TRAINSCOPE_SRC_LAUNCH_REAPER_H_
