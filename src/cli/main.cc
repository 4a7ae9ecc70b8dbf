// trainscope: from a fresh machine to a converged, fast training run.
#include <cstdio>
#include <string>

#include "CLI/CLI.hpp"
#include "cli/command.h"
#include "trainscope/core/exit.h"
#include "trainscope/core/subprocess.h"

int main(int argc, char** argv) {
  using trainscope::cli::CommandContext;
  CommandContext ctx;
  ctx.argv0 = trainscope::SelfExecutablePath();
  if (ctx.argv0.empty()) ctx.argv0 = argv[0];

  CLI::App app{
      "trainscope: environment, device, communication, data, training and profile checks "
      "for large-model training"};
  app.set_version_flag("--version", std::string("trainscope ") + TS_VERSION);
  app.require_subcommand(1);
  app.fallthrough(false);

  trainscope::cli::RegisterEnvCommand(app, ctx);
  trainscope::cli::RegisterDoctorCommand(app, ctx);
  CLI::App* selftest = app.add_subcommand("selftest", "device, communication and training self-checks");
  selftest->require_subcommand(1);
  trainscope::cli::RegisterSelftestDeviceCommand(*selftest, ctx);
  trainscope::cli::RegisterSelftestCommCommand(*selftest, ctx);
  trainscope::cli::RegisterSelftestTrainCommand(*selftest, ctx);
  trainscope::cli::RegisterLaunchCommand(app, ctx);
  trainscope::cli::RegisterTrainCommand(app, ctx);
  trainscope::cli::RegisterDataCommand(app, ctx);
  trainscope::cli::RegisterTraceCommand(app, ctx);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return trainscope::kExitUsage;
  }
  return ctx.exit_code;
}
