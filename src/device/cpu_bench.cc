#include "device/cpu_bench.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace trainscope::device {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Runs `body(lo, hi)` over [0, n) split evenly across one thread per CPU in `cpus`, each
// pinned, and returns the wall time of the slowest.
template <typename F>
double ParallelFor(const std::vector<int>& cpus, int64_t n, F body) {
  const int t = static_cast<int>(cpus.size());
  std::vector<std::thread> threads;
  double start = Now();
  for (int i = 0; i < t; ++i) {
    int64_t lo = n * i / t, hi = n * (i + 1) / t;
    int cpu = cpus[i];
    threads.emplace_back([=, &body] {
      PinCurrentThread(cpu);
      body(lo, hi);
    });
  }
  for (auto& th : threads) th.join();
  return Now() - start;
}

struct FreeDeleter {
  void operator()(double* p) const { std::free(p); }
};

}  // namespace

std::vector<int> AllowedCpus() {
  std::vector<int> out;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    for (int i = 0; i < CPU_SETSIZE; ++i)
      if (CPU_ISSET(i, &set)) out.push_back(i);
  }
  if (out.empty()) {
    unsigned n = std::max(1u, std::thread::hardware_concurrency());
    for (unsigned i = 0; i < n; ++i) out.push_back(static_cast<int>(i));
  }
  return out;
}

bool PinCurrentThread(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof(set), &set) == 0;
}

void PinCurrentThreadTo(const std::vector<int>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) CPU_SET(c, &set);
  pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

// A chain of 16 dependent multiplies per loop iteration (x86-64: imul, 3 cycles of latency
// on every Intel core since Sandy Bridge and every AMD Zen; AArch64: dependent adds, one per
// cycle): each needs the previous result, so the chain runs at its latency whatever the
// core's width; the loop counter runs in parallel. A chain of add-immediates is not used on
// x86-64: newer cores fold consecutive immediate adds (a 2.1 GHz Sapphire Rapids VM measured
// 10.97 GHz with one). cycles = 16 x latency x iterations; GHz = cycles / seconds. Best of
// many 1 ms windows, so that a preemption by another process lowers no result.
double MeasureClockGhz(double seconds) {
#if defined(__x86_64__) || defined(__aarch64__)
#if defined(__x86_64__)
  constexpr double kChainLatencyCycles = 3;  // imul r64, r64
#else
  constexpr double kChainLatencyCycles = 1;  // add
#endif
  auto run = [](uint64_t iters) {
    uint64_t x = 3;
    double t0 = Now();
#if defined(__x86_64__)
    asm volatile(
        "1:\n"
        "imul %0, %0\n imul %0, %0\n imul %0, %0\n imul %0, %0\n"
        "imul %0, %0\n imul %0, %0\n imul %0, %0\n imul %0, %0\n"
        "imul %0, %0\n imul %0, %0\n imul %0, %0\n imul %0, %0\n"
        "imul %0, %0\n imul %0, %0\n imul %0, %0\n imul %0, %0\n"
        "dec %1\n"
        "jnz 1b\n"
        : "+r"(x), "+r"(iters)
        :
        : "cc");
#else
    asm volatile(
        "1:\n"
        "add %0, %0, #1\n add %0, %0, #1\n add %0, %0, #1\n add %0, %0, #1\n"
        "add %0, %0, #1\n add %0, %0, #1\n add %0, %0, #1\n add %0, %0, #1\n"
        "add %0, %0, #1\n add %0, %0, #1\n add %0, %0, #1\n add %0, %0, #1\n"
        "add %0, %0, #1\n add %0, %0, #1\n add %0, %0, #1\n add %0, %0, #1\n"
        "subs %1, %1, #1\n"
        "b.ne 1b\n"
        : "+r"(x), "+r"(iters)
        :
        : "cc");
#endif
    return Now() - t0;
  };
  // Calibrate to windows of about 1 ms: short enough that, on a machine shared with other
  // processes, some windows run without being preempted (the scheduler's slices are
  // several ms), long enough for the clock read to be negligible.
  uint64_t iters = 1 << 12;
  double dt = run(iters);
  while (dt < 0.0005 && iters < (uint64_t{1} << 40)) {
    iters *= 2;
    dt = run(iters);
  }
  iters = static_cast<uint64_t>(iters * 0.001 / std::max(dt, 1e-7)) + 1;
  double best = 0, end = Now() + std::max(seconds, 0.02);
  do {
    double t = run(iters);
    if (t > 0) best = std::max(best, 16.0 * kChainLatencyCycles * iters / t / 1e9);
  } while (Now() < end);
  return best;
#else
  (void)seconds;
  return 0;
#endif
}

// STREAM conventions (McCalpin): triad moves 3 arrays (24 bytes per element), copy 2
// (16 bytes); write-allocate traffic is not counted; the best repetition is reported.
absl::StatusOr<BandwidthResult> MeasureBandwidth(const std::vector<int>& cpus, int64_t array_bytes,
                                                 double seconds) {
  if (cpus.empty()) return absl::InvalidArgumentError("MeasureBandwidth: no CPUs");
  const int64_t n = std::max<int64_t>(array_bytes / 8, 1024);
  const size_t bytes = ((n * 8 + 63) / 64) * 64;
  std::unique_ptr<double, FreeDeleter> a(static_cast<double*>(std::aligned_alloc(64, bytes)));
  std::unique_ptr<double, FreeDeleter> b(static_cast<double*>(std::aligned_alloc(64, bytes)));
  std::unique_ptr<double, FreeDeleter> c(static_cast<double*>(std::aligned_alloc(64, bytes)));
  if (!a || !b || !c) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate 3 x ", bytes, " bytes for the triad"));
  }
  double* pa = a.get();
  double* pb = b.get();
  double* pc = c.get();
  // First touch from the pinned threads, so pages land on each thread's NUMA node.
  ParallelFor(cpus, n, [=](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      pa[i] = 0;
      pb[i] = 1.0 + (i & 7);
      pc[i] = 2.0;
    }
  });
  BandwidthResult r;
  r.array_bytes = n * 8;
  r.threads = static_cast<int>(cpus.size());
  const double s = 3.0;
  double best_triad = 1e30, best_copy = 1e30;
  double end = Now() + std::max(seconds, 0.01);
  int reps = 0;
  do {
    best_triad = std::min(best_triad, ParallelFor(cpus, n, [=](int64_t lo, int64_t hi) {
                            for (int64_t i = lo; i < hi; ++i) pa[i] = pb[i] + s * pc[i];
                          }));
    best_copy = std::min(best_copy, ParallelFor(cpus, n, [=](int64_t lo, int64_t hi) {
                           std::memcpy(pa + lo, pb + lo, (hi - lo) * sizeof(double));
                         }));
    ++reps;
  } while (Now() < end || reps < 2);
  // Keep the compiler from dropping the stores.
  volatile double sink = pa[n / 2];
  (void)sink;
  r.triad_gbps = 24.0 * n / best_triad / 1e9;
  r.memcpy_gbps = 16.0 * n / best_copy / 1e9;
  return r;
}

}  // namespace trainscope::device
