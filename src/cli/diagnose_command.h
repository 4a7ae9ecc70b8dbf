// `trainscope diagnose PATH... [--json]`: ranked findings (loss-curve class, reports'
// findings) from trainscope run directories and users' own metrics logs (src/diagnose).
#ifndef TRAINSCOPE_CLI_DIAGNOSE_COMMAND_H_
#define TRAINSCOPE_CLI_DIAGNOSE_COMMAND_H_

#include "CLI/CLI.hpp"
#include "cli/command.h"

namespace trainscope::cli {

void RegisterDiagnoseCommand(CLI::App& root, CommandContext& ctx);

}  // namespace trainscope::cli

#endif  // TRAINSCOPE_CLI_DIAGNOSE_COMMAND_H_
