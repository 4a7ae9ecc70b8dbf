// `trainscope report RUN_DIR... [-o FILE] [--json] [--fail-on warn|error|none]`: one
// self-contained HTML page drawing what the run directories hold (src/report).
#ifndef TRAINSCOPE_CLI_REPORT_COMMAND_H_
#define TRAINSCOPE_CLI_REPORT_COMMAND_H_

#include "CLI/CLI.hpp"
#include "cli/command.h"

namespace trainscope::cli {

void RegisterReportCommand(CLI::App& root, CommandContext& ctx);

}  // namespace trainscope::cli

#endif  // TRAINSCOPE_CLI_REPORT_COMMAND_H_
