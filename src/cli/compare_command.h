// `trainscope compare A B [--json] [--csv FILE] [--mapping FILE] [--top N] [--fail-on ...]`:
// two msprobe dumps compared op by op (src/compare): matched entries, msprobe's metrics and
// pass/warning/error, and the first divergence by data flow.
#ifndef TRAINSCOPE_CLI_COMPARE_COMMAND_H_
#define TRAINSCOPE_CLI_COMPARE_COMMAND_H_

#include "CLI/CLI.hpp"
#include "cli/command.h"

namespace trainscope::cli {

void RegisterCompareCommand(CLI::App& root, CommandContext& ctx);

}  // namespace trainscope::cli

#endif  // TRAINSCOPE_CLI_COMPARE_COMMAND_H_
