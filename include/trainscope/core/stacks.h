// Thread stacks of this process, for hang reports: which function each thread was in when a
// collective stopped making progress.
//
// How: a thread can only unwind its own stack, so the collector asks every thread of the
// process (/proc/self/task) to do it, with a signal whose handler copies the return
// addresses (glibc backtrace(), warmed up at installation so that it never loads libgcc in
// the handler) into a slot preallocated for that thread. Symbolisation (dladdr +
// abi::__cxa_demangle) happens afterwards on the collecting thread, outside any handler.
//
// Contract:
//  - Library code never installs the handler (house rule): the executable calls
//    InstallStackDumpHandler() once, early, with a signal it does not use otherwise (the
//    CLI takes SIGRTMIN + 3). Without it, CollectThreadStacks returns only the calling
//    thread's stack and says why the others are missing (ThreadStacks::note).
//  - CollectThreadStacks is thread-safe (collections serialise on a mutex), blocks at most
//    `timeout` waiting for threads to answer; a thread that does not answer (it blocks the
//    signal, or it is stuck in the kernel uninterruptibly) is listed with a note instead of
//    frames. At most kMaxStackThreads threads and kMaxStackFrames frames each are kept.
//  - The signal interrupts blocking system calls of the threads it visits; the handler is
//    installed with SA_RESTART, so most of them restart, but some (epoll_wait, nanosleep,
//    calls with timeouts) return EINTR, which well-written code retries. Collect stacks when
//    the process is about to end anyway (a hang report), not on a hot path.
#ifndef TRAINSCOPE_CORE_STACKS_H_
#define TRAINSCOPE_CORE_STACKS_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace trainscope {

inline constexpr int kMaxStackThreads = 512;
inline constexpr int kMaxStackFrames = 64;

// Installs the stack-dump handler for `signo` (process-wide; executables only). Calling it
// again with the same signal does nothing. InvalidArgument for a signal outside
// SIGRTMIN..SIGRTMAX; FailedPrecondition when another signal was installed before;
// Internal when sigaction fails.
absl::Status InstallStackDumpHandler(int signo);
// The installed signal, or 0 when none is.
int StackDumpSignal();

struct ThreadStack {
  int64_t tid = 0;
  std::string name;                 // /proc/self/task/<tid>/comm
  bool current = false;             // the collecting thread
  std::vector<std::string> frames;  // innermost first: "function+0x1c (libfoo.so)"
  std::string note;                 // why frames are missing ("" when present)
};

struct ThreadStacks {
  std::vector<ThreadStack> threads;  // ascending tid; the process's main thread first
  std::string note;                  // e.g. "no stack-dump handler installed: ..."
};

// Every thread's stack (see the contract). Never fails; problems are notes.
ThreadStacks CollectThreadStacks(std::chrono::milliseconds timeout = std::chrono::seconds(2));

// Text for a stacks file: a header line, then per thread "thread <tid> (<name>)" and
// "  #<i> <frame>" lines.
std::string FormatThreadStacks(const ThreadStacks& stacks);

}  // namespace trainscope

#endif  // TRAINSCOPE_CORE_STACKS_H_
