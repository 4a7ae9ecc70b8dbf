// Signal handling for the verbs that train (train, selftest train). The executable, not the
// trainer library, decides what SIGINT, SIGTERM and SIGHUP do: while a StopOnSignals is alive,
// the first of them stores its number into stop(), the cancellation token the trainer polls
// between steps (TrainOptions::stop); the trainer then ends its metrics file with an "end"
// record (reason "interrupted") and returns Cancelled. A second signal restores the default
// action and re-raises it: the process dies at once (Ctrl-C twice when a step is too slow).
// The destructor restores the handlers that were there before.
//
// Exit code of a run stopped by a signal: 128 + the signal (130 SIGINT, 143 SIGTERM, 129
// SIGHUP), the shell convention, so scripts and `trainscope launch` see what stopped it.
// Thread-safety: construct and destroy on the main thread; one instance at a time.
#ifndef TRAINSCOPE_CLI_STOP_SIGNALS_H_
#define TRAINSCOPE_CLI_STOP_SIGNALS_H_

#include <signal.h>

#include <atomic>
#include <cstdio>
#include <string>

#include "absl/status/status.h"
#include "cli/exit.h"

namespace trainscope::cli {

namespace stop_signals_internal {
inline std::atomic<int> g_stop{0};
static_assert(std::atomic<int>::is_always_lock_free, "the handler stores into it");

inline void OnSignal(int sig) {
  int expected = 0;
  if (!g_stop.compare_exchange_strong(expected, sig)) {
    // Second signal: stop waiting for the trainer.
    ::signal(sig, SIG_DFL);
    ::raise(sig);
  }
}
}  // namespace stop_signals_internal

class StopOnSignals {
 public:
  StopOnSignals() {
    stop_signals_internal::g_stop.store(0);
    struct sigaction sa = {};
    sa.sa_handler = stop_signals_internal::OnSignal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    for (int i = 0; i < kCount; ++i) ::sigaction(kSignals[i], &sa, &old_[i]);
  }
  ~StopOnSignals() {
    for (int i = 0; i < kCount; ++i) ::sigaction(kSignals[i], &old_[i], nullptr);
  }
  StopOnSignals(const StopOnSignals&) = delete;
  StopOnSignals& operator=(const StopOnSignals&) = delete;

  const std::atomic<int>* stop() const { return &stop_signals_internal::g_stop; }
  int signal() const { return stop_signals_internal::g_stop.load(); }

  // For a failed run: when a signal asked for the stop, prints "trainscope <verb>: <message>"
  // (the trainer's Cancelled message, or the error the stop ran into, such as a peer that
  // died) and returns 128 + the signal; otherwise ReportAndExitCode's line and code.
  int ExitCode(const char* verb, const absl::Status& status) const {
    const int sig = signal();
    if (sig <= 0) return ReportAndExitCode(verb, status);
    std::fprintf(stderr, "trainscope %s: %s%s\n", verb,
                 absl::IsCancelled(status) ? "" : "error after a stop signal: ",
                 std::string(status.message()).c_str());
    return 128 + sig;
  }

 private:
  static constexpr int kCount = 3;
  static constexpr int kSignals[kCount] = {SIGINT, SIGTERM, SIGHUP};
  struct sigaction old_[kCount];
};

// The signal the executables install core/stacks.h's stack-dump handler on (once, in main):
// a real-time signal nothing else here uses.
inline int StackDumpSignalNumber() { return SIGRTMIN + 3; }

namespace stop_signals_internal {
inline std::atomic<int> g_dump_requests{0};
inline void OnDumpSignal(int) { g_dump_requests.fetch_add(1, std::memory_order_relaxed); }
}  // namespace stop_signals_internal

// SIGUSR1 asks for a hang dump: while a DumpOnSignal is alive, each SIGUSR1 bumps
// requests(), the counter the comm watchdog polls (TrainOptions::dump_request,
// comm/watchdog.h), which then writes this rank's flight recorder dump and thread stacks
// without stopping the run. `trainscope launch` sends it, to ranks that catch it only
// (SigCgt), when another rank failed. The destructor restores the previous handler.
// Construct and destroy on the main thread; one instance at a time.
class DumpOnSignal {
 public:
  DumpOnSignal() {
    struct sigaction sa = {};
    sa.sa_handler = stop_signals_internal::OnDumpSignal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    ::sigaction(SIGUSR1, &sa, &old_);
  }
  ~DumpOnSignal() { ::sigaction(SIGUSR1, &old_, nullptr); }
  DumpOnSignal(const DumpOnSignal&) = delete;
  DumpOnSignal& operator=(const DumpOnSignal&) = delete;
  // The counter, also before any DumpOnSignal exists (the handler may be installed later).
  static const std::atomic<int>* requests() { return &stop_signals_internal::g_dump_requests; }

 private:
  struct sigaction old_;
};

}  // namespace trainscope::cli

#endif  // TRAINSCOPE_CLI_STOP_SIGNALS_H_
