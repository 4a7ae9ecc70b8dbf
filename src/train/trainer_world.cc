// The Trainer's libtorch-free half (trainer_world.h): joining the job, the watchdogs that end
// the metrics file when the training thread cannot, and the setup decisions that need no
// tensors.
#include "train/trainer_world.h"

#include <signal.h>

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "trainscope/ckpt/checkpoint.h"
#include "trainscope/ckpt/resume.h"
#include "trainscope/core/env_vars.h"
#include "trainscope/core/os.h"
#include "trainscope/core/run_dir.h"
#include "trainscope/core/status.h"
#ifdef TS_TRAIN_WITH_COMM
#include "trainscope/comm/join.h"
#include "trainscope/comm/watchdog.h"
#endif

namespace trainscope::train {

using json = nlohmann::json;

double MsSince(TrainClock::time_point t0) {
  return std::chrono::duration<double, std::milli>(TrainClock::now() - t0).count();
}

std::string Hex64(uint64_t v) { return absl::StrFormat("%016x", v); }

EndRecord RunState::End(const char* reason) const {
  EndRecord e;
  e.reason = reason;
  e.step = steps_done.load();
  e.rank = rank.load();
  e.time_unix_us = Os::Default()->WallUs();
  e.elapsed_s = std::chrono::duration<double>(TrainClock::now() - start).count();
  return e;
}

// ---------------------------------------------------------------------------------------
// Joining the job
// ---------------------------------------------------------------------------------------

absl::StatusOr<World> JoinWorld(const TrainConfig& config, const TrainOptions& options) {
  World w;
  if (!options.distributed_from_env) return w;
#ifdef TS_TRAIN_WITH_COMM
  // trainscope launch, torchrun, srun or mpirun (comm/join.h); comm.timeout_s (or
  // --comm-timeout) bounds every op, as the watchdog's timeout.
  comm::JoinRequest request;
  request.defaults.backend = options.comm_backend;
  request.defaults.host = options.comm_host;
  request.timeout = std::chrono::milliseconds(
      std::max<int64_t>(1, static_cast<int64_t>(config.comm.timeout_s * 1000)));
  request.join_alone = false;  // one rank trains without a communicator
  TS_ASSIGN_OR_RETURN(comm::JoinedWorld joined, comm::JoinFromEnvironment(request));
  const comm::CommOptions& co = joined.options.comm;
  w.rank = co.rank;
  w.world_size = co.world_size;
  w.local_world_size = std::max(1, co.local_world_size);
  w.comm = std::move(joined.comm);
#else
  (void)config;
  std::string ws;
  if (Os::Default()->GetEnv(envvar::kWorldSize, &ws) && ws != "1" && !ws.empty()) {
    return absl::UnavailableError(
        absl::StrCat("WORLD_SIZE=", ws,
                     " but this trainscope was built without the comm module; "
                     "data-parallel training is not available"));
  }
#endif
  return w;
}

#ifdef TS_TRAIN_WITH_COMM
absl::Status StartCommWatchdog(const TrainConfig& config, const TrainOptions& options,
                               const comm::Communicator& comm, RunState* st) {
  std::optional<comm::WatchdogOptions> options_for_run =
      comm::WatchdogOptionsForRun(comm, options.run_dir);
  if (!options_for_run) return absl::OkStatus();  // recorder off
  comm::WatchdogOptions wo = *std::move(options_for_run);
  wo.dump_request = options.dump_request;
  wo.on_timeout = [st, &options](const std::string& message) {
    if (MetricsWriter* w = st->writer.load()) {
      EndRecord e = st->End(kEndError);
      e.error = message;
      (void)w->WriteEnd(e);
    }
    if (options.on_comm_timeout) options.on_comm_timeout(message);
  };
  TS_ASSIGN_OR_RETURN(st->watchdog, comm::Watchdog::Start(std::move(wo)));
  st->watchdog_ptr = st->watchdog.get();
  if (options.on_watchdog_started) options.on_watchdog_started();
  return absl::OkStatus();
}
#endif

absl::Status CheckRunInjections(const TrainConfig& config, const TrainOptions& options,
                                const World& world) {
  for (const Injection& inj : options.inject) {
    if (IsCommFault(inj.kind) && !world.data_parallel()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--inject '", inj.text,
                       "' needs a data-parallel run (e.g. trainscope launch -n 2 -- trainscope "
                       "train ...)"));
    }
  }
  return CheckInjections(options.inject, world.world_size, config.train.steps, config.model.layers);
}

// ---------------------------------------------------------------------------------------
// Stopping
// ---------------------------------------------------------------------------------------

std::string SignalName(int sig) {
  switch (sig) {
    case SIGINT:
      return "SIGINT";
    case SIGTERM:
      return "SIGTERM";
    case SIGHUP:
      return "SIGHUP";
    case SIGQUIT:
      return "SIGQUIT";
    case SIGUSR1:
      return "SIGUSR1";
    case SIGUSR2:
      return "SIGUSR2";
    default:
      return absl::StrCat("signal ", sig);
  }
}

int StopValue(const TrainOptions& o) {
  return o.stop != nullptr ? o.stop->load(std::memory_order_relaxed) : 0;
}

absl::Status Stopped(const TrainOptions& o, const RunState& st) {
  const int sig = StopValue(o);
  return absl::CancelledError(
      absl::StrCat("interrupted", sig > 0 ? " by " + SignalName(sig) : std::string(),
                   " after step ", st.steps_done.load(), " on rank ", st.rank.load(),
                   "; the metrics file ends with an \"end\" record"));
}

StopWatchdog::StopWatchdog(const TrainOptions& options, RunState* st) : options_(options), st_(st) {
  if (options.stop != nullptr) thread_ = std::thread([this] { Loop(); });
}

void StopWatchdog::Finish() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void StopWatchdog::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  TrainClock::time_point asked{};
  while (!done_) {
    cv_.wait_for(lock, std::chrono::milliseconds(50));
    if (done_) return;
    const int sig = StopValue(options_);
    if (sig == 0) continue;
    if (asked == TrainClock::time_point{}) asked = TrainClock::now();
    if (TrainClock::now() - asked < options_.stop_grace) continue;
    if (MetricsWriter* w = st_->writer.load()) {
      EndRecord e = st_->End(kEndInterrupted);
      if (sig > 0) e.signal = SignalName(sig);
      e.error = absl::StrCat("the training thread was still busy (a collective or a long phase) ",
                             std::chrono::duration<double>(options_.stop_grace).count(),
                             " s after the stop was asked for");
      (void)w->WriteEnd(e);
    }
    return;
  }
}

namespace {

// The Train() running in this process, for DumpOnFatalError.
std::atomic<RunState*> g_active_run{nullptr};

}  // namespace

ActiveRun::ActiveRun(RunState* st) {
  RunState* expected = nullptr;
  published_ = g_active_run.compare_exchange_strong(expected, st);
}

ActiveRun::~ActiveRun() {
  if (published_) g_active_run.store(nullptr);
}

std::string DumpOnFatalError(const std::string& what) {
#ifdef TS_TRAIN_WITH_COMM
  RunState* st = g_active_run.load();
  if (st == nullptr) return "";
  auto* w = static_cast<comm::Watchdog*>(st->watchdog_ptr.load());
  if (w == nullptr) return "";
  return w->FireNow(what);
#else
  (void)what;
  return "";
#endif
}

absl::Status WriteRunEnd(const TrainOptions& options, const RunState& st,
                         const absl::Status& result) {
  MetricsWriter* w = st.writer.load();
  if (w == nullptr) return absl::OkStatus();
  const int sig = StopValue(options);
  const char* reason = result.ok() ? kEndDone : sig != 0 ? kEndInterrupted : kEndError;
  EndRecord e = st.End(reason);
  if (!result.ok() && sig > 0) e.signal = SignalName(sig);
  if (!result.ok() && !absl::IsCancelled(result)) e.error = std::string(result.message());
  return w->WriteEnd(e);
}

// ---------------------------------------------------------------------------------------
// Setup decisions
// ---------------------------------------------------------------------------------------

absl::StatusOr<std::string> ResolveResume(
    const std::string& spec, const std::string& dir, const World& world,
    const std::function<void(const std::string&)>& on_notice) {
  // Rank 0 decides, so that every rank loads the same step even while files change.
  // step: -1 a fresh start, -2 rank 0 refused (its error says why).
  int64_t step = -1;
  std::string path;
  absl::Status refused;
  if (world.rank == 0) {
    absl::StatusOr<ckpt::ResumePlan> plan = ckpt::PlanResume(spec, dir);
    if (plan.ok()) {
      if (on_notice) on_notice(plan->notice);
      path = plan->path;
      step = plan->path.empty() ? -1 : plan->step;
    } else {
      refused = plan.status();
      step = -2;
    }
  }
#ifdef TS_TRAIN_WITH_COMM
  if (world.comm) {
    int64_t v = step;
    TS_RETURN_IF_ERROR(world.comm->Broadcast(&v, 1, comm::DType::kInt64, 0));
    step = v;
    if (world.rank != 0 && step == -2) {
      return absl::InvalidArgumentError(absl::StrCat(
          "rank ", world.rank, ": rank 0 refused --resume ", spec, " (its log says why)"));
    }
    if (world.rank != 0 && step >= 0) {
      path = spec == "latest" ? run_dir::CheckpointStepDir(dir, step) : spec;
      ckpt::CheckResult c = ckpt::CheckCheckpoint(path, /*hash=*/false);
      if (!c.ok()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "rank ", world.rank, ": rank 0 resumes from step ", step, " but ", path,
            " is not complete here (", c.problems.empty() ? "?" : c.problems[0].problem,
            "); multi-node runs need the checkpoint folder on a shared filesystem"));
      }
    }
  }
#else
  (void)step;
#endif
  if (!refused.ok()) return refused;
  return path;
}

std::string CheckpointDirOf(const TrainConfig& config, const std::string& run_dir) {
  const std::string& d = config.checkpoint.dir;
  if (d.empty()) return run_dir::Join(run_dir, run_dir::kCheckpoints);
  if (d[0] == '/') return d;
  return run_dir::Join(run_dir, d);
}

CheckpointerOptions CheckpointerOptionsFor(const TrainConfig& config, const std::string& dir,
                                           RunState* st) {
  CheckpointerOptions co;
  co.dir = dir;
  co.keep = config.checkpoint.keep;
  co.async = config.checkpoint.async;
  co.on_saved = [st](const SaveOutcome& o) {
    MetricsWriter* w = st->writer.load();
    if (w == nullptr) return;
    json j = {{"step", o.step},         {"path", o.path},       {"bytes", o.bytes},
              {"write_ms", o.write_ms}, {"anomaly", o.anomaly}, {"async", o.async},
              {"pruned", o.pruned},     {"ok", o.status.ok()}};
    if (!o.status.ok()) j["error"] = std::string(o.status.message());
    (void)w->WriteRecord("checkpoint", std::move(j));
  };
  return co;
}

LoaderOptions LoaderOptionsFor(const TrainConfig& config, const World& world, int start_step) {
  const RunConfig& rc = config.train;
  LoaderOptions lo;
  lo.micro_batch = rc.micro_batch;
  lo.rank = world.rank;
  lo.world_size = world.world_size;
  lo.seed = rc.seed;
  lo.num_workers = config.data.num_workers;
  lo.prefetch = config.data.prefetch;
  lo.worker_delay_ms = config.data.worker_delay_ms;
  lo.start_index = int64_t{start_step} * rc.grad_accum;
  return lo;
}

}  // namespace trainscope::train
