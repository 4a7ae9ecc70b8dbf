// Watchdog: notices that this rank's collectives stopped making progress, and leaves the
// evidence behind before the rank ends — its flight recorder dump and its thread stacks —
// so that `trainscope hang analyze` (hang/analyze.h) can say which rank skipped or
// mis-sized which collective. Modelled on c10d's ProcessGroupNCCL watchdog.
//
// Contract:
//  - One Watchdog per rank, watching that rank's FlightRecorder (shared ownership: the
//    recorder may outlive the communicators). A thread of its own polls the recorder every
//    `poll` (default 50 ms; the age check runs at least every timeout / 10).
//  - It fires once, on the first of:
//      * an op not retired `timeout` after it was issued (FlightEntry::time_created_ns);
//      * an op retired with an error (the communicator's own timeout, a peer that left, an
//        engine error).
//    Firing = write the recorder dump (FlightRecorder::DumpJson to dump_path), then the
//    thread stacks (core/stacks.h, to stacks_path), then call on_timeout(message) with one
//    line naming the op, group, sequence number, caller tag and how long, e.g.
//      rank 1: all_reduce #17 (group 0 default_pg, caller 'step 5 grad bucket 0') not
//      completed after 10.0 s
//    The watchdog does not end the process: on_timeout's owner decides (the train CLI
//    prints the line and exits non-zero). Dump errors are folded into the message.
//  - Dump on request: RequestDump() (and a change of *dump_request) makes the thread write
//    both files at its next poll without firing (no on_timeout). RequestDump is
//    async-signal-safe (one atomic store), so a SIGUSR1 handler may call it; so may the
//    caller's handler store into dump_request, an atomic the watchdog only reads.
//  - CheckNow() runs the same check on the calling thread (for a caller that just got an
//    error from the communicator and is about to return: the dump is on disk when it
//    returns). Serialised with the thread: never two dumps at once.
//  - Bounded everywhere: a dump waits for the recorder's mutex (a ring copy) and the disk;
//    stack collection is bounded by 2 s. The destructor stops the thread within one poll
//    plus a dump in progress.
//  - Thread-safe: every method may be called from any thread. Installs no signal handler.
#ifndef TRAINSCOPE_COMM_WATCHDOG_H_
#define TRAINSCOPE_COMM_WATCHDOG_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "trainscope/comm/flight_recorder.h"

namespace trainscope::comm {

struct WatchdogOptions {
  std::shared_ptr<FlightRecorder> recorder;  // required
  int rank = 0;
  std::chrono::milliseconds timeout{600000};  // comm.timeout_s
  std::chrono::milliseconds poll{50};
  std::string dump_path;    // required: the recorder dump (hang::DumpPath)
  std::string stacks_path;  // the thread stacks text (hang::StacksPath); "" = none
  // Called once, on the thread that found the problem, after both files were written.
  std::function<void(const std::string& message)> on_timeout;
  // Optional dump-request counter owned by the caller (e.g. bumped by a SIGUSR1 handler):
  // every change asks for a dump, as RequestDump() does.
  const std::atomic<int>* dump_request = nullptr;
};

class Communicator;  // comm.h

// The watchdog of one rank of a run: `comm`'s flight recorder, rank and op timeout, with the
// dump and thread stacks going to <run_dir>/hang/ (run_dir::HangDumpPath, HangStacksPath:
// where `trainscope launch` and `hang analyze` look). nullopt when run_dir is "" or `comm`
// has no flight recorder (nowhere to leave the evidence, or nothing to watch). The caller
// adds on_timeout and dump_request. Pure.
std::optional<WatchdogOptions> WatchdogOptionsForRun(const Communicator& comm,
                                                     const std::string& run_dir);

// What stopped progress, from one snapshot of a recorder (pure; see FindStall).
struct Stall {
  FlightEntry entry;
  std::string pg_name;
  std::string pg_desc;
  bool failed = false;  // retired with an error (else: not retired in time)
  int64_t age_ns = 0;   // now - issue time (failed: end - issue, when known)
};

// The oldest op not retired `timeout_ns` after it was issued, or the first op that failed,
// whichever was issued first; nullopt when progress looks fine. `groups` indexes pg_id.
std::optional<Stall> FindStall(const std::vector<FlightEntry>& entries,
                               const std::vector<ProcessGroupInfo>& groups, int64_t now_ns,
                               int64_t timeout_ns);
// The one-line message for a stall (see the contract).
std::string DescribeStall(int rank, const Stall& stall);

class Watchdog {
 public:
  // Starts the thread. InvalidArgument without a recorder or dump_path, or a timeout <= 0.
  static absl::StatusOr<std::unique_ptr<Watchdog>> Start(WatchdogOptions options);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Asks for a dump at the next poll (async-signal-safe).
  void RequestDump() { requested_.store(true, std::memory_order_relaxed); }
  // The check of the thread, now, on this thread; fires when it finds a stall. Returns the
  // message when the watchdog has fired (now or before), else "".
  std::string CheckNow();
  // Fires now, whatever the timeout, for an error the communicator never saw: e.g. the
  // engine's network thread threw (gloo raises on a message of the wrong size, and nothing
  // can catch that: the caller's std::terminate handler calls this). Writes both files and
  // calls on_timeout with a message naming the oldest op in flight (or only `what`).
  // Returns the message (the earlier one if the watchdog had fired already).
  std::string FireNow(const std::string& what);
  bool fired() const { return fired_.load(); }
  // Dumps written so far (fired or requested).
  int dumps() const { return dumps_.load(); }

 private:
  explicit Watchdog(WatchdogOptions options);
  void Loop();
  // Writes both files; returns "" or what failed.
  std::string Dump();
  std::string Check();  // needs check_mu_

  const WatchdogOptions options_;
  std::atomic<bool> requested_{false};
  std::atomic<bool> fired_{false};
  std::atomic<int> dumps_{0};
  int last_request_ = 0;  // *dump_request last seen; watchdog thread only

  std::mutex check_mu_;  // one check / dump at a time
  std::string message_;  // guarded by check_mu_

  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;  // guarded by stop_mu_
  std::thread thread_;
};

}  // namespace trainscope::comm

#endif  // TRAINSCOPE_COMM_WATCHDOG_H_
