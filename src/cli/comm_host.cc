// The executables' sinks for library reports (comm_host.h).
#include "cli/comm_host.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <utility>

#include "cli/exit.h"

namespace trainscope::cli {

std::function<void(const std::string& line)> StderrLines(std::string prefix) {
  return [prefix = std::move(prefix)](const std::string& line) {
    std::fprintf(stderr, "%s%s\n", prefix.c_str(), line.c_str());
    std::fflush(stderr);
  };
}

comm::CommHost TerminalCommHost() {
  comm::CommHost host;
  host.notice = StderrLines("trainscope: ");
  host.stuck_op = [](const comm::StuckOp& op) {
    std::fprintf(stderr, "%s\n", op.line.c_str());
    std::fflush(stderr);
    op.abort_job();
  };
  return host;
}

std::function<void(const std::string& message)> ExitOnCommTimeout(std::string verb) {
  return [verb = std::move(verb)](const std::string& message) {
    std::fprintf(stderr, "trainscope %s: error: %s\n", verb.c_str(), message.c_str());
    std::fflush(stdout);
    std::fflush(stderr);
    ::_exit(kExitProblems);
  };
}

void IgnoreSigpipe() { ::signal(SIGPIPE, SIG_IGN); }

}  // namespace trainscope::cli
