// `trainscope ckpt inspect|verify|diff PATH... [--json]`: checkpoints of ours, safetensors
// files, HuggingFace sharded folders and torch.distributed.checkpoint folders (src/ckpt).
// libtorch-free: DCP's pickled .metadata is read with core/pickle.h.
#ifndef TRAINSCOPE_CLI_CKPT_COMMAND_H_
#define TRAINSCOPE_CLI_CKPT_COMMAND_H_

#include "CLI/CLI.hpp"
#include "cli/command.h"
#include "trainscope/ckpt/inspect.h"

namespace trainscope::cli {

void RegisterCkptCommand(CLI::App& root, CommandContext& ctx);

}  // namespace trainscope::cli

#endif  // TRAINSCOPE_CLI_CKPT_COMMAND_H_
