// trainscope-torch: the verbs of trainscope that link libtorch (train, selftest train,
// selftest device). Users run them as `trainscope <verb>`, which execs this binary with the
// same argv; running it directly works too.
#include <string>

#include "CLI/CLI.hpp"
#include "cli/comm_host.h"
#include "cli/command.h"
#include "cli/stop_signals.h"
#include "trainscope/core/progress.h"
#include "trainscope/core/stacks.h"
#include "trainscope/core/subprocess.h"

int main(int argc, char** argv) {
  // The trainer's communicator writes to peers' sockets: a dead peer must be an op error
  // naming it, not a SIGPIPE death (the comm library leaves signals alone).
  trainscope::cli::IgnoreSigpipe();
  // Hang reports list every thread's stack (core/stacks.h); the executable owns signals.
  (void)trainscope::InstallStackDumpHandler(trainscope::cli::StackDumpSignalNumber());
  trainscope::SetProgressSink(stderr);  // the library never writes progress on its own
  trainscope::cli::CommandContext ctx;
  ctx.argv0 = trainscope::SelfExecutablePath();
  if (ctx.argv0.empty()) ctx.argv0 = argv[0];

  CLI::App app{"trainscope (libtorch verbs): train, selftest train, selftest device"};
  app.name("trainscope");
  trainscope::cli::ConfigureRoot(app);
  CLI::App* selftest = app.add_subcommand("selftest", "device and training self-checks");
  selftest->require_subcommand(1);
  trainscope::cli::RegisterSelftestDeviceCommand(*selftest, ctx);
  trainscope::cli::RegisterSelftestTrainCommand(*selftest, ctx);
  trainscope::cli::RegisterTrainCommand(app, ctx);
  return trainscope::cli::ParseAndRun(app, ctx, argc, argv);
}
