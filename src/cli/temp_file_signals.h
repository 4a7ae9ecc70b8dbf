// For verbs that write their output through registered temporary files (core/paths.h; `data
// scan | clean | pack`): SIGINT, SIGTERM or SIGHUP removes the temporary directory and the
// output's temporary file, says so in one line, then kills the process with the signal's
// default action (exit status 128 + signal in a shell, as without a handler). Nothing else is
// left to finish: the output is only ever renamed into place at the very end. A signal that
// was ignored when the process started (nohup) stays ignored. The executable's business, not
// the library's: call RemoveTempFilesOnStopSignals on the main thread before the verb runs;
// the handlers stay for the life of the process.
#ifndef TRAINSCOPE_CLI_TEMP_FILE_SIGNALS_H_
#define TRAINSCOPE_CLI_TEMP_FILE_SIGNALS_H_

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "trainscope/core/paths.h"

namespace trainscope::cli {

namespace temp_file_signals_internal {
inline constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP};
inline char g_stop_message[3][160];

inline void OnStopSignal(int sig) {
  RemoveRegisteredTempPaths();
  for (int i = 0; i < 3; ++i) {
    if (kStopSignals[i] != sig) continue;
    ssize_t ignored = ::write(STDERR_FILENO, g_stop_message[i], std::strlen(g_stop_message[i]));
    (void)ignored;
  }
  ::signal(sig, SIG_DFL);
  ::raise(sig);  // blocked until this handler returns, then fatal
}
}  // namespace temp_file_signals_internal

// `verb` names the command in the message ("data scan" -> "trainscope data scan: stopped by
// SIGINT; temporary files removed, no output written").
inline void RemoveTempFilesOnStopSignals(const char* verb) {
  using namespace temp_file_signals_internal;  // NOLINT: the handler and its messages
  const char* names[3] = {"SIGINT", "SIGTERM", "SIGHUP"};
  struct sigaction sa = {};
  sa.sa_handler = OnStopSignal;
  sigemptyset(&sa.sa_mask);
  for (int s : kStopSignals) sigaddset(&sa.sa_mask, s);  // one handler at a time
  for (int i = 0; i < 3; ++i) {
    std::snprintf(g_stop_message[i], sizeof(g_stop_message[i]),
                  "\ntrainscope %s: stopped by %s; temporary files removed, no output written\n",
                  verb, names[i]);
    struct sigaction old = {};
    if (::sigaction(kStopSignals[i], nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;
    ::sigaction(kStopSignals[i], &sa, nullptr);
  }
}

}  // namespace trainscope::cli

#endif  // TRAINSCOPE_CLI_TEMP_FILE_SIGNALS_H_
