// Private to the launcher: asking one rank for a hang dump (see launch.h, "Hang dumps").
#ifndef TRAINSCOPE_SRC_LAUNCH_HANG_DUMP_H_
#define TRAINSCOPE_SRC_LAUNCH_HANG_DUMP_H_

#include <sys/types.h>

#include "trainscope/core/os.h"

namespace trainscope::launch {

// Sends SIGUSR1 to `pid` (that process only, not its group) when its /proc status says it
// catches it (read through `os`); true when sent.
bool AskRankToDump(pid_t pid, Os* os = Os::Default());

}  // namespace trainscope::launch

#endif  // TRAINSCOPE_SRC_LAUNCH_HANG_DUMP_H_
