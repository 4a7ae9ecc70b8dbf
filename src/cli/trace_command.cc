// Placeholder registered until the module's issue lands; replaced by the real command.
#include "cli/command.h"

#include <cstdio>

namespace trainscope::cli {

void RegisterTraceCommand(CLI::App& parent, CommandContext& ctx) {
  CLI::App* cmd = parent.add_subcommand("trace", "profiler trace analysis");
  cmd->allow_extras();
  cmd->callback([&ctx] {
    std::fprintf(stderr, "trainscope trace: not built yet\n");
    ctx.exit_code = 2;
  });
}

}  // namespace trainscope::cli
