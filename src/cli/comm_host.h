// What the trainscope executables do with what a library reports beyond a Status (lines for
// the user on stderr, a stuck MPI job ended) and the process setting the comm library needs
// (SIGPIPE). The library only reports (comm::CommHost, TrainOptions' notices) and leaves
// signals alone; the executable decides, here, once for every verb.
#ifndef TRAINSCOPE_CLI_COMM_HOST_H_
#define TRAINSCOPE_CLI_COMM_HOST_H_

#include <functional>
#include <string>

#include "trainscope/comm/comm.h"

namespace trainscope::cli {

// A sink that prints "<prefix><line>\n" on stderr and flushes it. Callable from any thread.
std::function<void(const std::string& line)> StderrLines(std::string prefix);

// The executables' comm::CommHost: notices as "trainscope: <line>" on stderr (StderrLines);
// a stuck mpi op's line on stderr, then its abort_job (mpirun stops every rank).
comm::CommHost TerminalCommHost();

// How a rank ends when its comm watchdog fires (TrainOptions::on_comm_timeout,
// comm::WatchdogOptions::on_timeout): "trainscope <verb>: error: <message>" on stderr,
// stdout and stderr flushed, then _exit(1) at once (a thread blocked in a collective cannot
// unwind). Callable from any thread.
std::function<void(const std::string& message)> ExitOnCommTimeout(std::string verb);

// Ignores SIGPIPE; each executable's main() calls it once, first. A write to a peer (or a
// pipe) that closed then fails with EPIPE, which the comm library reports as an op error
// naming the peer, instead of ending the process. Children started by `trainscope launch`
// get the default back (launch/launcher.cc). Main thread only.
void IgnoreSigpipe();

}  // namespace trainscope::cli

#endif  // TRAINSCOPE_CLI_COMM_HOST_H_
