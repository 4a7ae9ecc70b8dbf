// Thread stacks through a signal each thread answers itself (see stacks.h).
//
// The handler may only touch async-signal-safe state: it looks up the slot the collector
// reserved for its thread id (a fixed array of atomics), claims it with a compare-and-swap,
// and fills it with backtrace(). The collector reads a slot only after it saw the "done"
// state (release/acquire), and retires slots a thread never answered so that a late handler
// finds nothing to write into.
#include "trainscope/core/stacks.h"

#include <cxxabi.h>
#include <dirent.h>
#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace trainscope {
namespace {

enum StackSlotState : int { kIdle = 0, kAsked = 1, kBusy = 2, kDone = 3 };

struct Slot {
  std::atomic<int64_t> tid{0};
  std::atomic<int> state{kIdle};
  void* frames[kMaxStackFrames + 2];
  int depth = 0;
};

Slot g_slots[kMaxStackThreads];
std::atomic<int> g_slot_count{0};
std::atomic<int> g_signal{0};
std::mutex g_collect_mu;  // one collection at a time; also guards installation

int64_t GetTid() { return static_cast<int64_t>(::syscall(SYS_gettid)); }

void OnStackSignal(int) {
  const int saved = errno;
  const int64_t me = GetTid();
  const int n = g_slot_count.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i) {
    Slot& s = g_slots[i];
    if (s.tid.load(std::memory_order_relaxed) != me) continue;
    int expected = kAsked;
    if (!s.state.compare_exchange_strong(expected, kBusy, std::memory_order_acq_rel)) break;
    s.depth = ::backtrace(s.frames, kMaxStackFrames + 2);
    s.state.store(kDone, std::memory_order_release);
    break;
  }
  errno = saved;
}

std::string ThreadName(int64_t tid) {
  std::ifstream in(absl::StrCat("/proc/self/task/", tid, "/comm"));
  std::string name;
  std::getline(in, name);
  return name;
}

std::vector<int64_t> ListThreads() {
  std::vector<int64_t> tids;
  DIR* dir = ::opendir("/proc/self/task");
  if (dir == nullptr) return tids;
  while (dirent* e = ::readdir(dir)) {
    char* end = nullptr;
    long long v = std::strtoll(e->d_name, &end, 10);
    if (end != e->d_name && *end == '\0' && v > 0) tids.push_back(v);
  }
  ::closedir(dir);
  std::sort(tids.begin(), tids.end());
  return tids;
}

std::string Basename(const char* path) {
  if (path == nullptr) return "?";
  const char* slash = std::strrchr(path, '/');
  return slash != nullptr ? slash + 1 : path;
}

// "function+0x1c (libfoo.so)", or "0x7f.. (libfoo.so+0x1234)" without a symbol. Return
// addresses point after the call: look up addr - 1 for every frame but the innermost.
std::string Symbolize(void* addr, bool innermost) {
  const uintptr_t pc = reinterpret_cast<uintptr_t>(addr);
  const uintptr_t lookup = innermost || pc == 0 ? pc : pc - 1;
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(lookup), &info) == 0) {
    return absl::StrFormat("0x%x", pc);
  }
  const std::string object = Basename(info.dli_fname);
  if (info.dli_sname == nullptr) {
    const uintptr_t base = reinterpret_cast<uintptr_t>(info.dli_fbase);
    return absl::StrFormat("0x%x (%s+0x%x)", pc, object, pc - base);
  }
  int status = 0;
  char* demangled = abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status);
  std::string name = status == 0 && demangled != nullptr ? demangled : info.dli_sname;
  std::free(demangled);
  const uintptr_t sym = reinterpret_cast<uintptr_t>(info.dli_saddr);
  return absl::StrFormat("%s+0x%x (%s)", name, pc - sym, object);
}

std::vector<std::string> SymbolizeAll(void* const* frames, int depth) {
  std::vector<std::string> out;
  for (int i = 0; i < depth; ++i) out.push_back(Symbolize(frames[i], i == 0));
  return out;
}

}  // namespace

absl::Status InstallStackDumpHandler(int signo) {
  if (signo < SIGRTMIN || signo > SIGRTMAX) {
    return absl::InvalidArgumentError(absl::StrCat("stack-dump signal ", signo,
                                                   " is not a real-time signal (", SIGRTMIN, "..",
                                                   SIGRTMAX, ")"));
  }
  std::lock_guard<std::mutex> lock(g_collect_mu);
  const int have = g_signal.load();
  if (have == signo) return absl::OkStatus();
  if (have != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("a stack-dump handler is already installed for signal ", have));
  }
  // Warm-up: the first backtrace() loads libgcc_s (malloc, locks): never in the handler.
  void* warm[4];
  (void)::backtrace(warm, 4);
  struct sigaction sa = {};
  sa.sa_handler = OnStackSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  if (::sigaction(signo, &sa, nullptr) != 0) {
    return absl::InternalError(absl::StrCat("sigaction(", signo, "): ", std::strerror(errno)));
  }
  g_signal.store(signo);
  return absl::OkStatus();
}

int StackDumpSignal() { return g_signal.load(); }

ThreadStacks CollectThreadStacks(std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lock(g_collect_mu);
  ThreadStacks out;
  const int64_t self = GetTid();
  const int signo = g_signal.load();
  std::vector<int64_t> tids = ListThreads();
  if (tids.empty()) tids.push_back(self);
  if (static_cast<int>(tids.size()) > kMaxStackThreads) {
    out.note = absl::StrCat(tids.size(), " threads; the first ", kMaxStackThreads, " are shown");
    tids.resize(kMaxStackThreads);
  }
  if (signo == 0) {
    out.note =
        "no stack-dump handler installed (the executable did not call "
        "InstallStackDumpHandler): only the collecting thread's stack is shown";
  }
  // Ask every other thread.
  int asked = 0;
  if (signo != 0) {
    for (int64_t tid : tids) {
      if (tid == self) continue;
      Slot& s = g_slots[asked++];
      s.depth = 0;
      s.tid.store(tid, std::memory_order_relaxed);
      s.state.store(kAsked, std::memory_order_release);
    }
    g_slot_count.store(asked, std::memory_order_release);
    const pid_t pid = ::getpid();
    for (int i = 0; i < asked; ++i) {
      if (::syscall(SYS_tgkill, pid, static_cast<pid_t>(g_slots[i].tid.load()), signo) != 0) {
        int expected = kAsked;
        g_slots[i].state.compare_exchange_strong(expected, kIdle);  // the thread is gone
      }
    }
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      bool pending = false;
      for (int i = 0; i < asked && !pending; ++i) {
        const int st = g_slots[i].state.load(std::memory_order_acquire);
        pending = st == kAsked || st == kBusy;
      }
      if (!pending) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  void* mine[kMaxStackFrames];
  const int my_depth = ::backtrace(mine, kMaxStackFrames);
  int slot = 0;
  for (int64_t tid : tids) {
    ThreadStack t;
    t.tid = tid;
    t.name = ThreadName(tid);
    if (tid == self) {
      t.current = true;
      t.frames = SymbolizeAll(mine + 1, my_depth - 1);  // without this function
    } else if (signo == 0) {
      t.note = "not collected: no stack-dump handler installed";
    } else {
      Slot& s = g_slots[slot++];
      int st = s.state.load(std::memory_order_acquire);
      if (st == kDone) {
        // Skip the handler and the signal trampoline.
        const int skip = std::min(2, s.depth);
        t.frames = SymbolizeAll(s.frames + skip, std::min(s.depth - skip, kMaxStackFrames));
      } else if (st == kIdle) {
        t.note = "thread exited before it could answer";
      } else {
        t.note = absl::StrCat("no answer within ", timeout.count(),
                              " ms (signal blocked, or stuck in the kernel)");
      }
      // Retire the slot: a late handler finds it no longer asked.
      int expected = kAsked;
      s.state.compare_exchange_strong(expected, kIdle);
    }
    out.threads.push_back(std::move(t));
  }
  // Wait out handlers that claimed a slot (kBusy) before the slots are reused.
  for (int i = 0; i < asked; ++i) {
    for (int spin = 0; spin < 1000 && g_slots[i].state.load() == kBusy; ++spin) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  g_slot_count.store(0, std::memory_order_release);
  return out;
}

std::string FormatThreadStacks(const ThreadStacks& stacks) {
  std::string out = absl::StrCat("# trainscope thread stacks, pid ", ::getpid(), ", ",
                                 stacks.threads.size(), " threads\n");
  if (!stacks.note.empty()) absl::StrAppend(&out, "# ", stacks.note, "\n");
  for (const ThreadStack& t : stacks.threads) {
    absl::StrAppend(&out, "\nthread ", t.tid, " (", t.name, ")",
                    t.current ? " [collecting thread]" : "", "\n");
    if (!t.note.empty()) absl::StrAppend(&out, "  (", t.note, ")\n");
    for (size_t i = 0; i < t.frames.size(); ++i) {
      absl::StrAppend(&out, "  #", i, " ", t.frames[i], "\n");
    }
  }
  return out;
}

}  // namespace trainscope
