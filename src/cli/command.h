// The CLI is thin: main.cc builds the CLI11 tree and each <verb>_command.cc adds its
// subcommand. A command's callback does the work through its module's library and stores
// the exit code (cli/exit.h) in the context; main() returns it.
#ifndef TRAINSCOPE_CLI_COMMAND_H_
#define TRAINSCOPE_CLI_COMMAND_H_

#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"

namespace trainscope::cli {

// Flags and options that the CLI11 tree's callbacks point at must live as long as the
// process: KeepAlive owns them, reachable from a static (so leak checkers stay quiet). Main
// thread only.
template <class T, class... Args>
T* KeepAlive(Args&&... args) {
  static std::vector<std::unique_ptr<T>>* owned = new std::vector<std::unique_ptr<T>>;
  owned->push_back(std::make_unique<T>(std::forward<Args>(args)...));
  return owned->back().get();
}

struct CommandContext {
  int exit_code = 0;
  std::string argv0;  // path of this executable, for commands that start themselves
};

// Parses argv and runs the chosen command's callback. Returns the process exit code:
// the command's, 0 for --help/--version, 2 for bad usage (after printing the usage).
int ParseAndRun(CLI::App& app, CommandContext& ctx, int argc, char** argv);
// Settings shared by both executables' root apps (version flag, usage on error).
void ConfigureRoot(CLI::App& app);

// Verbs that load libtorch live in a second executable, `trainscope-torch`, next to
// `trainscope`: the libtorch-free verbs (env, launch, data, trace, doctor, selftest comm)
// then start in milliseconds instead of paying libtorch's start-up. `trainscope` execs
// into it for these verbs (torch_main.cc); `--help` lists them in both.
bool IsTorchVerb(int argc, char** argv);

// Checks for numeric flags that fail in one plain sentence ("--nproc-per-node: 0 is not a
// positive number"); CLI11's PositiveNumber says "Value 0 not in range 0.000000 to 1.79e308".
inline CLI::Validator NumberCheck(bool allow_zero) {
  return CLI::Validator(
      [allow_zero](std::string& in) -> std::string {
        char* end = nullptr;
        double v = std::strtod(in.c_str(), &end);
        bool number = end != in.c_str() && *end == '\0';
        if (number && (allow_zero ? v >= 0 : v > 0)) return std::string();
        return in + (allow_zero ? " is not a number >= 0" : " is not a positive number");
      },
      allow_zero ? "NUMBER>=0" : "POSITIVE");
}
inline const CLI::Validator kPositiveNumber = NumberCheck(false);
inline const CLI::Validator kNonNegativeNumber = NumberCheck(true);

void RegisterEnvCommand(CLI::App& root, CommandContext& ctx);     // env_command.cc
void RegisterLaunchCommand(CLI::App& root, CommandContext& ctx);  // launch_command.cc
void RegisterTrainCommand(CLI::App& root, CommandContext& ctx);   // train_command.cc
void RegisterDoctorCommand(CLI::App& root, CommandContext& ctx);  // doctor_command.cc
void RegisterDataCommand(CLI::App& root, CommandContext& ctx);    // data_command.cc
void RegisterTraceCommand(CLI::App& root, CommandContext& ctx);   // trace_command.cc
// `trainscope selftest <part>`: `selftest` is the parent app created by main.cc.
void RegisterSelftestDeviceCommand(CLI::App& selftest, CommandContext& ctx);
void RegisterSelftestCommCommand(CLI::App& selftest, CommandContext& ctx);
void RegisterSelftestTrainCommand(CLI::App& selftest, CommandContext& ctx);

}  // namespace trainscope::cli

#endif  // TRAINSCOPE_CLI_COMMAND_H_
