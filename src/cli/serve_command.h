// `trainscope serve RUN_DIR [--port P] [--bind ADDR]`: the report page of a run directory,
// live in a browser while the run writes into it (src/report/serve.h). Prints the URL, serves
// until SIGINT/SIGTERM/SIGHUP, then stops cleanly (exit 0).
#ifndef TRAINSCOPE_CLI_SERVE_COMMAND_H_
#define TRAINSCOPE_CLI_SERVE_COMMAND_H_

#include "CLI/CLI.hpp"
#include "cli/command.h"

namespace trainscope::cli {

void RegisterServeCommand(CLI::App& root, CommandContext& ctx);

}  // namespace trainscope::cli

#endif  // TRAINSCOPE_CLI_SERVE_COMMAND_H_
