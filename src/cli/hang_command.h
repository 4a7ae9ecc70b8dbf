// `trainscope hang analyze PATH... [--json] [--mismatch-cap N]`: which rank skipped,
// reordered or mis-sized which collective, from the flight recorder dumps (src/hang).
// Registered in both executables: `trainscope` has no pickle loader and re-runs the same
// command line in `trainscope-torch` when a dump is a pickle; `trainscope-torch` passes
// libtorch's unpickler.
#ifndef TRAINSCOPE_CLI_HANG_COMMAND_H_
#define TRAINSCOPE_CLI_HANG_COMMAND_H_

#include <functional>

#include "CLI/CLI.hpp"
#include "cli/command.h"
#include "trainscope/hang/analyze.h"

namespace trainscope::cli {

// `pickle_loader`: empty in trainscope. `rerun_with_torch`: called when a pickle dump needs
// the loader and there is none; replaces the process and only returns on failure (its
// return value is then ignored and the report without the pickle dumps is printed). May be
// empty.
void RegisterHangCommand(CLI::App& root, CommandContext& ctx, hang::PickleLoader pickle_loader,
                         std::function<int()> rerun_with_torch);

}  // namespace trainscope::cli

#endif  // TRAINSCOPE_CLI_HANG_COMMAND_H_
