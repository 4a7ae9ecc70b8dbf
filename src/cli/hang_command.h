// `trainscope hang analyze PATH... [--json] [--mismatch-cap N]`: which rank skipped,
// reordered or mis-sized which collective, from the flight recorder dumps (src/hang), JSON
// or pickle (read with core/pickle.h: no libtorch).
#ifndef TRAINSCOPE_CLI_HANG_COMMAND_H_
#define TRAINSCOPE_CLI_HANG_COMMAND_H_

#include "CLI/CLI.hpp"
#include "cli/command.h"
#include "trainscope/hang/analyze.h"

namespace trainscope::cli {

void RegisterHangCommand(CLI::App& root, CommandContext& ctx);

}  // namespace trainscope::cli

#endif  // TRAINSCOPE_CLI_HANG_COMMAND_H_
