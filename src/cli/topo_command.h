// `trainscope topo`: the device link matrix and a placement of tensor-parallel groups (src/topo).
#ifndef TRAINSCOPE_CLI_TOPO_COMMAND_H_
#define TRAINSCOPE_CLI_TOPO_COMMAND_H_

#include "CLI/CLI.hpp"
#include "cli/command.h"

namespace trainscope::cli {

void RegisterTopoCommand(CLI::App& root, CommandContext& ctx);

}  // namespace trainscope::cli

#endif  // TRAINSCOPE_CLI_TOPO_COMMAND_H_
