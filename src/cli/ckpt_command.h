// `trainscope ckpt inspect|verify|diff PATH... [--json]`: checkpoints of ours, safetensors
// files, HuggingFace sharded folders and torch.distributed.checkpoint folders (src/ckpt).
// Registered in both executables, as hang is: `trainscope` has no DCP loader and re-runs
// the same command line in `trainscope-torch` when a DCP folder is met; `trainscope-torch`
// passes libtorch's unpickler.
#ifndef TRAINSCOPE_CLI_CKPT_COMMAND_H_
#define TRAINSCOPE_CLI_CKPT_COMMAND_H_

#include <functional>

#include "CLI/CLI.hpp"
#include "cli/command.h"
#include "trainscope/ckpt/inspect.h"

namespace trainscope::cli {

// `dcp_loader`: empty in trainscope. `rerun_with_torch`: replaces the process with
// trainscope-torch and only returns on failure (the DCP folder is then reported without
// tensor names). May be empty.
void RegisterCkptCommand(CLI::App& root, CommandContext& ctx, ckpt::DcpMetadataLoader dcp_loader,
                         std::function<int()> rerun_with_torch);

}  // namespace trainscope::cli

#endif  // TRAINSCOPE_CLI_CKPT_COMMAND_H_
