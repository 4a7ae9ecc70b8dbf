#include "cli/command.h"

#include "trainscope/core/exit.h"

namespace trainscope::cli {

int ParseAndRun(CLI::App& app, CommandContext& ctx, int argc, char** argv) {
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
    return kExitUsage;
  }
  return ctx.exit_code;
}

void ConfigureRoot(CLI::App& app) {
  app.set_version_flag("--version", std::string("trainscope ") + TS_VERSION);
  app.require_subcommand(1);
  app.fallthrough(false);
  // Bad usage prints the usage of the command that was being parsed, then exit 2.
  app.failure_message(CLI::FailureMessage::help);
}

}  // namespace trainscope::cli

namespace trainscope::cli {

bool IsTorchVerb(int argc, char** argv) {
  // The verb is the first argument that is not a root flag.
  int i = 1;
  while (i < argc && argv[i][0] == '-') ++i;
  if (i >= argc) return false;
  std::string verb = argv[i];
  if (verb == "train") return true;
  if (verb != "selftest") return false;
  int j = i + 1;
  while (j < argc && argv[j][0] == '-') ++j;
  if (j >= argc) return false;
  std::string part = argv[j];
  return part == "train" || part == "device";
}

}  // namespace trainscope::cli
