// `trainscope serve`: a shell around report::Server (see serve_command.h). The executable owns
// the signals: StopOnSignals turns the first SIGINT/SIGTERM/SIGHUP into a stop request, which
// this loop passes on to Server::Stop.
#include "cli/serve_command.h"

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include "cli/exit.h"
#include "cli/stop_signals.h"
#include "trainscope/report/serve.h"

namespace trainscope::cli {
namespace {

int RunServe(const report::ServeOptions& options) {
  StopOnSignals signals;
  absl::StatusOr<std::unique_ptr<report::Server>> server = report::Server::Start(options);
  if (!server.ok()) return ReportAndExitCode("serve", server.status());
  std::printf("serve: %s\n", (*server)->url().c_str());
  std::printf("serving %s; Ctrl-C stops\n", options.run_dir.c_str());
  std::fflush(stdout);
  while (signals.signal() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  (*server)->Stop();
  (*server)->Wait();
  std::fprintf(stderr, "serve: stopped (signal %d)\n", signals.signal());
  return kExitOk;
}

}  // namespace

void RegisterServeCommand(CLI::App& root, CommandContext& ctx) {
  auto options = std::make_shared<report::ServeOptions>();
  CLI::App* cmd = root.add_subcommand(
      "serve", "the report page of a run directory, live in a browser while the run writes");
  cmd->add_option("run_dir", options->run_dir, "the run directory")->required();
  cmd->add_option("--port", options->port, "TCP port (default 8765; 0: any free port)")
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--bind", options->bind,
                  "address to listen on (default 127.0.0.1: this machine only; 0.0.0.0 "
                  "exposes the run's paths and configuration to the network)");
  cmd->callback([&ctx, options] { ctx.exit_code = RunServe(*options); });
}

}  // namespace trainscope::cli
