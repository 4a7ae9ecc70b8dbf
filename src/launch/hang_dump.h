// Private to the launcher: asking one rank for a hang dump (see launch.h, "Hang dumps").
#ifndef TRAINSCOPE_SRC_LAUNCH_HANG_DUMP_H_
#define TRAINSCOPE_SRC_LAUNCH_HANG_DUMP_H_

#include <sys/types.h>

namespace trainscope::launch {

// Sends SIGUSR1 to `pid` (that process only, not its group) when its /proc status says it
// catches it; true when sent.
bool AskRankToDump(pid_t pid);

}  // namespace trainscope::launch

#endif  // TRAINSCOPE_SRC_LAUNCH_HANG_DUMP_H_
