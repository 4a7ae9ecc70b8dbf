// `trainscope plan`: the parallel-strategy planner (src/plan).
#ifndef TRAINSCOPE_CLI_PLAN_COMMAND_H_
#define TRAINSCOPE_CLI_PLAN_COMMAND_H_

#include "CLI/CLI.hpp"
#include "cli/command.h"

namespace trainscope::cli {

void RegisterPlanCommand(CLI::App& root, CommandContext& ctx);

}  // namespace trainscope::cli

#endif  // TRAINSCOPE_CLI_PLAN_COMMAND_H_
