// The libtorch-free half of the Trainer (private to the train module): this process's place
// in the job (World), the run state Train() and the watchdogs share (RunState), the stop
// token's polling, and the setup decisions that need no tensors: which injections the run
// allows, which checkpoint it resumes from, the checkpoint writer's and the loader's options.
// Kept out of trainer_impl.h so that this code compiles without libtorch (trainer_world.cc).
#ifndef TRAINSCOPE_SRC_TRAIN_TRAINER_WORLD_H_
#define TRAINSCOPE_SRC_TRAIN_TRAINER_WORLD_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "train/checkpointer.h"
#include "trainscope/train/data.h"
#include "trainscope/train/metrics.h"
#include "trainscope/train/trainer.h"
#ifdef TS_TRAIN_WITH_COMM
#include "trainscope/comm/comm.h"
#include "trainscope/comm/watchdog.h"
#endif

namespace trainscope::train {

using TrainClock = std::chrono::steady_clock;

// Milliseconds from t0 to now.
double MsSince(TrainClock::time_point t0);
// `v` as 16 lowercase hex digits (the xxh3-64 checksums of weights and configs).
std::string Hex64(uint64_t v);

#ifdef TS_TRAIN_WITH_COMM
// Sums the durations of the communicator's ops (called from its progress thread).
class CommTimer : public comm::OpObserver {
 public:
  void OnStart(const comm::OpRecord&) override {}
  void OnEnd(const comm::OpRecord& r) override { busy_ns_ += r.end_ns - r.start_ns; }
  double TakeMs() { return busy_ns_.exchange(0) / 1e6; }

 private:
  std::atomic<int64_t> busy_ns_{0};
};
#endif

// This process's place in the job, and its communicator (data-parallel runs).
struct World {
  int rank = 0;
  int world_size = 1;
  int local_world_size = 1;
#ifdef TS_TRAIN_WITH_COMM
  // Declared before comm: outlives the communicator that calls it.
  std::unique_ptr<CommTimer> timer = std::make_unique<CommTimer>();
  std::unique_ptr<comm::Communicator> comm;
#endif
  bool data_parallel() const {
#ifdef TS_TRAIN_WITH_COMM
    return comm != nullptr;
#else
    return false;
#endif
  }
};

// What Train() needs to end the metrics file whatever way the Trainer leaves: set by the
// training thread, read by Train() afterwards and by the stop watchdog meanwhile.
struct RunState {
  const TrainClock::time_point start = TrainClock::now();
  std::unique_ptr<MetricsWriter> metrics;       // owned here so it outlives the Trainer
  std::atomic<MetricsWriter*> writer{nullptr};  // metrics.get() once the header is written
  std::atomic<int> rank{0};
  std::atomic<int> steps_done{0};  // optimizer steps completed (the last step's number)
  std::atomic<double> estimate_bytes{0};
#ifdef TS_TRAIN_WITH_COMM
  // Last member: stopped first, while the rest of the state its callback touches lives.
  std::unique_ptr<comm::Watchdog> watchdog;
#endif
  std::atomic<void*> watchdog_ptr{nullptr};  // watchdog.get() once started (other threads)

  EndRecord End(const char* reason) const;
};

// ---- joining the job ----
// Joins the launcher's job (options.distributed_from_env): rank, world size and, when the
// world has more than one rank, the communicator (comm.timeout_s bounds every op). Errors:
// the join's, naming the rank; Unavailable when WORLD_SIZE > 1 and there is no comm module.
absl::StatusOr<World> JoinWorld(const TrainConfig& config, const TrainOptions& options);
#ifdef TS_TRAIN_WITH_COMM
// The comm watchdog of a data-parallel run (see TrainOptions::on_comm_timeout): on a stall
// it ends the metrics file with the message, then hands the message to the caller. Sets
// st->watchdog; nothing when the communicator has no flight recorder.
absl::Status StartCommWatchdog(const TrainConfig& config, const TrainOptions& options,
                               const comm::Communicator& comm, RunState* st);
#endif
// The --inject faults this run can apply: comm faults need a data-parallel run, and every
// rank, step and layer named must exist (CheckInjections). InvalidArgument otherwise.
absl::Status CheckRunInjections(const TrainConfig& config, const TrainOptions& options,
                                const World& world);

// ---- stopping ----
// "SIGINT", ..., or "signal N".
std::string SignalName(int sig);
// The stop token's value (TrainOptions::stop): 0 = go on.
int StopValue(const TrainOptions& o);
// The Cancelled status of a run stopped after st.steps_done.
absl::Status Stopped(const TrainOptions& o, const RunState& st);

// Polled between steps and phases.
#define TS_RETURN_IF_STOPPED(o, st)               \
  do {                                            \
    if (StopValue(o) != 0) return Stopped(o, st); \
  } while (0)

// Writes the end record when a stop was asked for and the training thread did not get to a
// poll within options.stop_grace (see TrainOptions::stop_grace). Polls every 50 ms until
// Finish(). `options` and `st` must outlive it.
class StopWatchdog {
 public:
  StopWatchdog(const TrainOptions& options, RunState* st);
  ~StopWatchdog() { Finish(); }
  StopWatchdog(const StopWatchdog&) = delete;
  StopWatchdog& operator=(const StopWatchdog&) = delete;
  // Stops the thread (blocks until it has).
  void Finish();

 private:
  void Loop();

  const TrainOptions& options_;
  RunState* st_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;  // guarded by mu_
  std::thread thread_;
};

// Publishes `st` as the Train() running in this process (for DumpOnFatalError) for its
// lifetime, unless another Train() is running already.
class ActiveRun {
 public:
  explicit ActiveRun(RunState* st);
  ~ActiveRun();
  ActiveRun(const ActiveRun&) = delete;
  ActiveRun& operator=(const ActiveRun&) = delete;

 private:
  bool published_ = false;
};

// The end record of a finished Train() (`result` its outcome): reason "done", "interrupted"
// (a stop was asked for) or "error" with the message. Returns the write's error; nothing is
// written before the metrics file is open.
absl::Status WriteRunEnd(const TrainOptions& options, const RunState& st,
                         const absl::Status& result);

// ---- setup decisions ----
// Resolves `spec` (TrainOptions::resume: "latest" or a path) to a checkpoint in `dir`, the
// same on every rank: rank 0 decides (PlanResume; its notice goes to on_notice) and
// broadcasts the step; the other ranks check that the checkpoint is complete where they
// see it. "" when there is none (a fresh start). Errors: PlanResume's on rank 0 (and
// InvalidArgument saying so on the others); FailedPrecondition on a rank that does not see
// the checkpoint rank 0 chose. Collective in data-parallel runs.
absl::StatusOr<std::string> ResolveResume(const std::string& spec, const std::string& dir,
                                          const World& world,
                                          const std::function<void(const std::string&)>& on_notice);
// The checkpoint folder: checkpoint.dir (relative to the run directory) or
// <run_dir>/checkpoints.
std::string CheckpointDirOf(const TrainConfig& config, const std::string& run_dir);
// Rank 0's checkpoint writer: config "checkpoint", each save's outcome as a "checkpoint"
// record in the metrics file once st's writer is open.
CheckpointerOptions CheckpointerOptionsFor(const TrainConfig& config, const std::string& dir,
                                           RunState* st);
// This rank's batch loader from micro-step start_step x grad_accum on.
LoaderOptions LoaderOptionsFor(const TrainConfig& config, const World& world, int start_step);

}  // namespace trainscope::train

#endif  // TRAINSCOPE_SRC_TRAIN_TRAINER_WORLD_H_
