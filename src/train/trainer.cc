// The training loop: data -> forward -> backward (gradient all-reduce overlapped through
// hooks) -> optimizer, each phase timed, every step logged per rank.
#include "trainscope/train/trainer.h"

#include <ATen/autocast_mode.h>
#include <malloc.h>
#include <sched.h>
#include <signal.h>
#include <torch/torch.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "train/model.h"
#include "trainscope/core/env_vars.h"
#include "trainscope/core/os.h"
#include "trainscope/core/status.h"
#include "trainscope/core/table.h"
#include "trainscope/tokenizer/tokenizer.h"
#ifdef TS_TRAIN_WITH_COMM
#include "train/comm_seam.h"
#include "train/ddp.h"
#include "trainscope/comm/comm.h"
#include "trainscope/comm/watchdog.h"
#endif
#include "trainscope/hang/analyze.h"

namespace trainscope::train {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Turns on bf16 autocast for the CPU for its lifetime (fp32 master weights stay untouched;
// autocast casts matmul inputs per op).
class AutocastScope {
 public:
  explicit AutocastScope(bool enabled) : enabled_(enabled) {
    if (!enabled_) return;
    at::autocast::set_cpu_enabled(true);
    at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
    at::autocast::increment_nesting();
  }
  ~AutocastScope() {
    if (!enabled_) return;
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    at::autocast::set_cpu_enabled(false);
  }

 private:
  bool enabled_;
};

// Every step frees and reallocates the same few MB of activations. glibc's default returns
// freed memory at the heap top to the kernel (trim) and serves blocks over its adaptive
// mmap threshold with fresh mappings, so each step pays page faults and page zeroing again:
// 5x the faults of the same loop under Python (whose small objects pin the heap top), and
// 4-6% of the step on 2 cores. Keep freed memory in the process instead: blocks up to
// 32 MB (glibc's maximum threshold) come from the heap, and the heap shrinks only past
// 1 GB of free top. Process-wide, so set once before the model is built.
void KeepFreedHostMemory() {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

std::string Hex64(uint64_t v) { return absl::StrFormat("%016x", v); }

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

struct World {
  int rank = 0;
  int world_size = 1;
  int local_world_size = 1;
#ifdef TS_TRAIN_WITH_COMM
  // Declared before comm: outlives the communicator that calls it.
  std::unique_ptr<CommTimer> timer = std::make_unique<CommTimer>();
  std::unique_ptr<comm::Communicator> comm;
#endif
};

absl::StatusOr<World> JoinWorld(const TrainConfig& config, const TrainOptions& options) {
  World w;
  if (!options.distributed_from_env) return w;
#ifdef TS_TRAIN_WITH_COMM
  comm::CommOptions defaults;
  defaults.backend = options.comm_backend;
  TS_ASSIGN_OR_RETURN(comm::CommOptions co, comm::OptionsFromEnvironment(defaults));
  // comm.timeout_s (or --comm-timeout) bounds every op, as the watchdog's timeout.
  co.timeout = std::chrono::milliseconds(
      std::max<int64_t>(1, static_cast<int64_t>(config.comm.timeout_s * 1000)));
  w.rank = co.rank;
  w.world_size = co.world_size;
  w.local_world_size = std::max(1, co.local_world_size);
  if (co.world_size > 1) {
    auto c = comm::Communicator::Create(co);
    if (!c.ok()) {
      return absl::Status(c.status().code(),
                          absl::StrCat("rank ", co.rank, ": joining the ", co.world_size,
                                       "-rank job failed: ", c.status().message()));
    }
    w.comm = std::move(c).value();
  }
#else
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

// Everything the loop needs, built once.
struct Setup {
  TrainConfig config;
  std::unique_ptr<tokenizer::Tokenizer> tok;
  PackedCorpus corpus;
  int vocab = 0;
  int threads = 1;
};

absl::StatusOr<Setup> Prepare(const TrainConfig& config, int local_world_size,
                              const TrainOptions& options) {
  Setup s;
  s.config = config;
  TS_RETURN_IF_ERROR(ValidateTrainConfig(config));
  auto tok = tokenizer::LoadTokenizer(config.data.tokenizer);
  if (!tok.ok()) {
    return absl::Status(tok.status().code(),
                        absl::StrCat("key \"data.tokenizer\": ", tok.status().message()));
  }
  s.tok = std::move(tok).value();
  s.vocab = config.model.vocab > 0 ? config.model.vocab : s.tok->vocab_size();
  if (s.vocab < s.tok->vocab_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        config.source.empty() ? "config" : config.source, ": key \"model.vocab\": ", s.vocab,
        " is smaller than the tokenizer's vocabulary ", s.tok->vocab_size()));
  }
  // Before anything sized by the config is allocated: the memory estimate.
  const int64_t available = options.available_memory_bytes
                                ? options.available_memory_bytes()
                                : AvailableHostMemoryBytes(Os::Default());
  TS_RETURN_IF_ERROR(
      CheckTrainMemory(config, s.vocab, local_world_size, available,
                       options.available_memory_bytes ? "given" : "MemAvailable, /proc/meminfo"));
  TS_ASSIGN_OR_RETURN(s.corpus, LoadCorpus(config.data, *s.tok, config.model.seq_len));
  s.threads = ResolveThreads(config.train.threads, local_world_size);
  return s;
}

}  // namespace

namespace {

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

// What Train() needs to end the metrics file whatever way TrainImpl leaves: set by the
// training thread, read by Train() afterwards and by the stop watchdog meanwhile.
struct RunState {
  const Clock::time_point start = Clock::now();
  std::unique_ptr<MetricsWriter> metrics;       // owned here so it outlives TrainImpl's frame
  std::atomic<MetricsWriter*> writer{nullptr};  // metrics.get() once the header is written
  std::atomic<int> rank{0};
  std::atomic<int> steps_done{0};  // optimizer steps completed
  std::atomic<double> estimate_bytes{0};
#ifdef TS_TRAIN_WITH_COMM
  // Last member: stopped first, while the rest of the state its callback touches lives.
  std::unique_ptr<comm::Watchdog> watchdog;
#endif
  std::atomic<void*> watchdog_ptr{nullptr};  // watchdog.get() once started (other threads)

  EndRecord End(const char* reason) const {
    EndRecord e;
    e.reason = reason;
    e.step = steps_done.load();
    e.rank = rank.load();
    e.time_unix_us = Os::Default()->WallUs();
    e.elapsed_s = std::chrono::duration<double>(Clock::now() - start).count();
    return e;
  }
};

absl::Status Stopped(const TrainOptions& o, const RunState& st) {
  const int sig = StopValue(o);
  return absl::CancelledError(
      absl::StrCat("interrupted", sig > 0 ? " by " + SignalName(sig) : std::string(),
                   " after step ", st.steps_done.load(), " on rank ", st.rank.load(),
                   "; the metrics file ends with an \"end\" record"));
}

// Polled between steps and phases.
#define TS_RETURN_IF_STOPPED(o, st)               \
  do {                                            \
    if (StopValue(o) != 0) return Stopped(o, st); \
  } while (0)

#ifdef TS_TRAIN_WITH_COMM
// The comm watchdog of a data-parallel run (see TrainOptions::on_comm_timeout): on a stall
// it ends the metrics file with the message, then hands the message to the caller.
absl::Status StartCommWatchdog(const TrainConfig& config, const TrainOptions& options,
                               const comm::Communicator& comm, RunState* st) {
  if (comm.flight_recorder() == nullptr) return absl::OkStatus();  // recorder off
  comm::WatchdogOptions wo;
  wo.recorder = comm.flight_recorder();
  wo.rank = comm.rank();
  wo.timeout = std::chrono::milliseconds(
      std::max<int64_t>(1, static_cast<int64_t>(config.comm.timeout_s * 1000)));
  wo.dump_path = hang::DumpPath(options.run_dir, comm.rank());
  wo.stacks_path = hang::StacksPath(options.run_dir, comm.rank());
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

absl::StatusOr<TrainResult> TrainImpl(const TrainConfig& config, const TrainOptions& options,
                                      RunState* st) {
  if (options.run_dir.empty()) return absl::InvalidArgumentError("no run directory given");
  TS_ASSIGN_OR_RETURN(World world, JoinWorld(config, options));
  st->rank = world.rank;
#ifdef TS_TRAIN_WITH_COMM
  if (world.comm) TS_RETURN_IF_ERROR(StartCommWatchdog(config, options, *world.comm, st));
  const bool data_parallel = world.comm != nullptr;
#else
  const bool data_parallel = false;
#endif
  if (!options.inject.empty() && !data_parallel) {
    return absl::InvalidArgumentError(
        absl::StrCat("--inject '", options.inject.front().text,
                     "' needs a data-parallel run (e.g. trainscope launch -n 2 -- trainscope "
                     "train ...)"));
  }
  TS_RETURN_IF_ERROR(CheckInjections(options.inject, world.world_size, config.train.steps));
  TS_RETURN_IF_STOPPED(options, *st);
  TS_ASSIGN_OR_RETURN(Setup setup, Prepare(config, world.local_world_size, options));
  st->estimate_bytes = EstimateTrainMemory(setup.config, setup.vocab).total_bytes;
  TS_RETURN_IF_STOPPED(options, *st);
  const TrainConfig& c = setup.config;
  const RunConfig& rc = c.train;
  const int rank = world.rank;
  const bool observe = rc.observability;

  // Determinism: fixed seed and thread count, deterministic kernels.
  if (rc.keep_host_memory) KeepFreedHostMemory();
  at::set_num_threads(setup.threads);
  torch::manual_seed(rc.seed);
  at::globalContext().setDeterministicAlgorithms(rc.deterministic, /*warn_only=*/false);
  const bool bf16 = rc.precision == "bf16";

  Gpt model(c.model, setup.vocab);
  model->train();
  const auto named = model->NamedParams();
  int64_t params = 0;
  std::vector<torch::Tensor> all_params, decay, no_decay;
  for (const auto& [name, p] : named) {
    params += p.numel();
    all_params.push_back(p);
    (model->Decays(name) ? decay : no_decay).push_back(p);
  }
  torch::optim::AdamWOptions base(c.optim.lr);
  base.betas({c.optim.beta1, c.optim.beta2}).eps(c.optim.eps).weight_decay(0.0);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  auto decay_opts = std::make_unique<torch::optim::AdamWOptions>(base);
  decay_opts->weight_decay(c.optim.weight_decay);
  groups.emplace_back(decay, std::move(decay_opts));
  groups.emplace_back(no_decay, std::make_unique<torch::optim::AdamWOptions>(base));
  torch::optim::AdamW optimizer(groups, base);

#ifdef TS_TRAIN_WITH_COMM
  std::unique_ptr<CommSeam> seam;
  std::unique_ptr<GradSync> sync;
  CommTimer& comm_timer = *world.timer;
  if (world.comm) {
    world.comm->AddObserver(&comm_timer);
    seam = std::make_unique<CommSeam>(world.comm.get(), options.inject, options.stop);
    sync = std::make_unique<GradSync>(seam.get(), named, rc.bucket_mb * 1e6);
    TS_RETURN_IF_ERROR(sync->BroadcastParams());
  }
#endif

  const std::string train_dir = options.run_dir + "/train";
  TS_RETURN_IF_ERROR(MakeDirs(train_dir));
  if (rank == 0) {
    TS_RETURN_IF_ERROR(
        WriteFileAtomic(train_dir + "/config.json", TrainConfigToJson(c).dump(2) + "\n"));
  }
  TrainResult result;
  result.rank = rank;
  result.world_size = world.world_size;
  result.params = params;
  result.corpus = setup.corpus.stats;
  result.precision = rc.precision;
  result.threads = setup.threads;
  result.tokens_per_step =
      int64_t{rc.micro_batch} * rc.grad_accum * c.model.seq_len * world.world_size;
  std::unique_ptr<MetricsWriter>& metrics = st->metrics;
  if (observe) {
    result.metrics_path = absl::StrCat(train_dir, "/metrics.rank", rank, ".jsonl");
    char host[256] = {0};
    gethostname(host, sizeof(host) - 1);
    json header = {{"rank", rank},
                   {"world_size", world.world_size},
                   {"params", params},
                   {"start_unix_us", Os::Default()->WallUs()},
                   {"host", host},
                   {"pid", static_cast<int64_t>(getpid())},
                   {"device", "cpu"},
                   {"threads", setup.threads},
                   {"precision", rc.precision},
                   {"tokenizer", setup.tok->name()},
                   {"vocab", setup.vocab},
                   {"tokens_per_step", result.tokens_per_step},
                   {"corpus", CorpusStatsToJson(setup.corpus.stats)},
                   {"config", TrainConfigToJson(c)}};
    TS_ASSIGN_OR_RETURN(metrics, MetricsWriter::Open(result.metrics_path, header));
    st->writer = metrics.get();
  }

  LoaderOptions lo;
  lo.micro_batch = rc.micro_batch;
  lo.rank = rank;
  lo.world_size = world.world_size;
  lo.seed = rc.seed;
  lo.num_workers = c.data.num_workers;
  lo.prefetch = c.data.prefetch;
  lo.worker_delay_ms = c.data.worker_delay_ms;
  BatchLoader loader(&setup.corpus, lo);

  const auto loop_start = Clock::now();
  PhaseTimes phase_sum;
  double step_ms_sum = 0, tokens_sum = 0, comm_sum = 0;
  double obs_sum = 0;  // time spent in observability code (norms, RSS, metrics lines)
  int timed_steps = 0;
  std::vector<double> timed_step_ms;
  for (int step = 1; step <= rc.steps; ++step) {
    TS_RETURN_IF_STOPPED(options, *st);
#ifdef TS_TRAIN_WITH_COMM
    if (seam) seam->BeginStep(step);
#endif
    const auto step_start = Clock::now();
    PhaseTimes ph;
    const double lr = LearningRate(c.optim, step, rc.steps);
    for (auto& group : optimizer.param_groups()) {
      static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
    }
    double loss_sum = 0;
    for (int micro = 0; micro < rc.grad_accum; ++micro) {
      if (micro > 0) TS_RETURN_IF_STOPPED(options, *st);
      auto t0 = Clock::now();
      Batch batch = loader.Next();
      ph.data_wait_ms += MsSince(t0);
      t0 = Clock::now();
      torch::Tensor inputs =
          torch::from_blob(batch.inputs.data(), {batch.rows, batch.cols}, torch::kLong).clone();
      torch::Tensor targets =
          torch::from_blob(batch.targets.data(), {batch.rows, batch.cols}, torch::kLong).clone();
      ph.h2d_ms += MsSince(t0);
      t0 = Clock::now();
      torch::Tensor loss;
      {
        AutocastScope autocast(bf16);
        loss = model->Loss(inputs, targets);
      }
      const double loss_value = loss.item<double>();
      ph.forward_ms += MsSince(t0);
      if (!std::isfinite(loss_value)) {
        std::string msg =
            absl::StrCat("non-finite loss ", loss_value, " at step ", step, " (micro-batch ", micro,
                         ") on rank ", rank, "; the run stopped");
        if (metrics) {
          (void)metrics->WriteRecord("error", {{"step", step}, {"rank", rank}, {"message", msg}});
        }
        return absl::AbortedError(msg);
      }
      loss_sum += loss_value;
      t0 = Clock::now();
#ifdef TS_TRAIN_WITH_COMM
      if (sync && micro == rc.grad_accum - 1) sync->Arm();
#endif
      (loss / rc.grad_accum).backward();
      ph.backward_ms += MsSince(t0);
    }
    TS_RETURN_IF_STOPPED(options, *st);
    double step_loss = loss_sum / rc.grad_accum;
    bool stop_for_time =
        rc.max_seconds > 0 &&
        std::chrono::duration<double>(Clock::now() - loop_start).count() >= rc.max_seconds;
#ifdef TS_TRAIN_WITH_COMM
    double comm_ms = 0;
    if (sync) {
      TS_RETURN_IF_ERROR(sync->Finish(&ph.comm_wait_ms));
      comm_ms = comm_timer.TakeMs();  // the gradient buckets, not the loss all-reduce below
      // Mean loss over ranks, and one stop decision for all (any rank out of time stops all).
      auto t0 = Clock::now();
      float pair[2] = {static_cast<float>(step_loss), stop_for_time ? 1.0f : 0.0f};
      TS_RETURN_IF_ERROR(seam->AllReduce(pair, 2, absl::StrCat("step ", step, " loss all_reduce")));
      ph.comm_wait_ms += MsSince(t0);
      step_loss = pair[0] / world.world_size;
      stop_for_time = pair[1] > 0;
    }
#endif
    auto t0 = Clock::now();
    double grad_norm;
    if (c.optim.grad_clip > 0) {
      grad_norm = torch::nn::utils::clip_grad_norm_(all_params, c.optim.grad_clip);
    } else {
      torch::NoGradGuard no_grad;
      torch::Tensor sq = torch::zeros({}, torch::kDouble);
      for (const auto& p : all_params) {
        if (p.grad().defined()) sq += p.grad().to(torch::kDouble).pow(2).sum();
      }
      grad_norm = std::sqrt(sq.item<double>());
    }
    const bool norms_now =
        observe && rc.layer_norms_every > 0 && (step % rc.layer_norms_every == 0 || step == 1);
    std::vector<LayerNorms> layer_norms;
    const auto obs_start = Clock::now();
    if (norms_now) {
      torch::NoGradGuard no_grad;
      for (const auto& [name, p] : named) {
        LayerNorms ln;
        ln.name = name;
        ln.weight_norm = p.norm().item<double>();
        ln.grad_norm = p.grad().defined() ? p.grad().norm().item<double>() : 0.0;
        layer_norms.push_back(std::move(ln));
      }
    }
    double obs_ms = MsSince(obs_start);
    optimizer.step();
    for (auto& p : all_params) p.mutable_grad() = torch::Tensor();  // zero_grad(set_to_none)
    ph.optimizer_ms += MsSince(t0);

    StepRecord rec;
    rec.step = step;
    rec.loss = step_loss;
    rec.lr = lr;
    rec.grad_norm = grad_norm;
    rec.tokens = result.tokens_per_step;
    rec.step_ms = MsSince(step_start);
    rec.tokens_per_s = rec.step_ms > 0 ? rec.tokens * 1000.0 / rec.step_ms : 0;
    rec.phases = ph;
#ifdef TS_TRAIN_WITH_COMM
    rec.comm_ms = comm_ms;
    (void)comm_timer.TakeMs();
#endif
    result.losses.push_back(step_loss);
    result.steps = step;
    st->steps_done = step;
    if (step > 1 || rc.steps == 1) {
      phase_sum.Add(ph);
      comm_sum += rec.comm_ms;
      step_ms_sum += rec.step_ms;
      timed_step_ms.push_back(rec.step_ms);
      tokens_sum += rec.tokens;
      ++timed_steps;
    }
    if (metrics) {
      const auto write_start = Clock::now();
      rec.host_rss_bytes = HostRssBytes();
      TS_RETURN_IF_ERROR(metrics->WriteStep(rec));
      if (norms_now) TS_RETURN_IF_ERROR(metrics->WriteLayerNorms(step, layer_norms));
      obs_ms += MsSince(write_start);
    }
    obs_sum += obs_ms;
    if (rank == 0 && options.on_step) options.on_step(rec);
    if (stop_for_time && step < rc.steps) {
      result.stopped_by_time = true;
      break;
    }
  }
  result.seconds = std::chrono::duration<double>(Clock::now() - loop_start).count();
  result.observability_fraction = result.seconds > 0 ? obs_sum / (result.seconds * 1000) : 0;

  const int n = static_cast<int>(result.losses.size());
  result.loss_start = result.losses.front();
  const int tail = std::max(1, std::min(10, n / 5 + 1));
  double tail_sum = 0;
  for (int i = n - tail; i < n; ++i) tail_sum += result.losses[i];
  result.loss_end = tail_sum / tail;
  if (timed_steps > 0) {
    phase_sum.Add(phase_sum, 1.0 / timed_steps - 1.0);  // sum -> mean
    result.mean_phases = phase_sum;
    result.mean_step_ms = step_ms_sum / timed_steps;
    std::sort(timed_step_ms.begin(), timed_step_ms.end());
    const size_t mid = timed_step_ms.size() / 2;
    result.median_step_ms = timed_step_ms.size() % 2
                                ? timed_step_ms[mid]
                                : (timed_step_ms[mid - 1] + timed_step_ms[mid]) / 2;
    result.mean_comm_ms = comm_sum / timed_steps;
    if (result.mean_comm_ms > 0) {
      // comm_wait also holds the small loss all-reduce; clamp to [0, 1].
      result.overlap_fraction =
          std::min(1.0, std::max(0.0, 1.0 - result.mean_phases.comm_wait_ms / result.mean_comm_ms));
    }
    result.tokens_per_s = step_ms_sum > 0 ? tokens_sum * 1000.0 / step_ms_sum : 0;
  }
  result.loader =
      JudgeDataLoader(result.mean_phases.data_wait_ms, result.mean_step_ms, c.data.num_workers);

  // Weights checksum: xxh3-64 over every parameter's bytes in name order; ranks of a
  // data-parallel run must agree bit for bit.
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  json per_param = json::array();
  for (const auto& [name, p] : named) {
    torch::Tensor t = p.detach().contiguous();
    const size_t bytes = static_cast<size_t>(t.numel()) * t.element_size();
    XXH3_64bits_update(state, t.data_ptr(), bytes);
    per_param.push_back({{"name", name},
                         {"numel", t.numel()},
                         {"xxh3_64", Hex64(XXH3_64bits(t.data_ptr(), bytes))},
                         {"norm", t.norm().item<double>()}});
  }
  result.weights_checksum = Hex64(XXH3_64bits_digest(state));
  XXH3_freeState(state);
  if (options.write_weights) {
    json w = {{"format", "trainscope.train_weights"},
              {"version", 1},
              {"rank", rank},
              {"world_size", world.world_size},
              {"step", result.steps},
              {"xxh3_64", result.weights_checksum},
              {"params", per_param}};
    TS_RETURN_IF_ERROR(
        WriteFileAtomic(absl::StrCat(train_dir, "/weights.rank", rank, ".json"), w.dump(1) + "\n"));
  }
  if (metrics) {
    TS_RETURN_IF_ERROR(metrics->WriteRecord("summary", TrainResultToJson(result)));
  }
  if (rank == 0) {
    json summary = TrainResultToJson(result);
    summary["format"] = "trainscope.train_summary";
    summary["version"] = 1;
    TS_RETURN_IF_ERROR(WriteFileAtomic(train_dir + "/summary.json", summary.dump(2) + "\n"));
  }
#ifdef TS_TRAIN_WITH_COMM
  if (world.comm) {
    sync.reset();
    TS_RETURN_IF_ERROR(seam->Barrier("final barrier"));
  }
#endif
  return result;
}

}  // namespace

namespace {

// One line: libtorch's messages span lines (and may carry a backtrace).
std::string OneLine(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  std::string out;
  for (char ch : s) {
    if (ch == '\n') {
      out += "; ";
    } else {
      out.push_back(ch);
    }
  }
  return out;
}

// Writes the end record when a stop was asked for and the training thread did not get to a
// poll within options.stop_grace (see TrainOptions::stop_grace). Polls every 50 ms until
// Finish().
class StopWatchdog {
 public:
  StopWatchdog(const TrainOptions& options, RunState* st) : options_(options), st_(st) {
    if (options.stop != nullptr) thread_ = std::thread([this] { Loop(); });
  }
  ~StopWatchdog() { Finish(); }
  void Finish() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    Clock::time_point asked{};
    while (!done_) {
      cv_.wait_for(lock, std::chrono::milliseconds(50));
      if (done_) return;
      const int sig = StopValue(options_);
      if (sig == 0) continue;
      if (asked == Clock::time_point{}) asked = Clock::now();
      if (Clock::now() - asked < options_.stop_grace) continue;
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

  const TrainOptions& options_;
  RunState* st_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;  // guarded by mu_
  std::thread thread_;
};

// The Train() running in this process, for DumpOnFatalError.
std::atomic<RunState*> g_active_run{nullptr};

}  // namespace

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

absl::StatusOr<TrainResult> Train(const TrainConfig& config, const TrainOptions& options) {
  RunState st;
  // Published for DumpOnFatalError; withdrawn before `st` goes.
  RunState* expected = nullptr;
  const bool published = g_active_run.compare_exchange_strong(expected, &st);
  struct Withdraw {
    bool on;
    ~Withdraw() {
      if (on) g_active_run.store(nullptr);
    }
  } withdraw{published};
  StopWatchdog watchdog(options, &st);
  // libtorch reports errors by exception; this is the adapter boundary. Every exception
  // becomes a Status naming the step and the rank.
  absl::StatusOr<TrainResult> r = absl::UnknownError("unset");
  auto where = [&] {
    return absl::StrCat(" after step ", st.steps_done.load(), " on rank ", st.rank.load());
  };
  try {
    r = TrainImpl(config, options, &st);
  } catch (const std::bad_alloc&) {
    r = absl::ResourceExhaustedError(absl::StrCat(
        config.source.empty() ? "config" : config.source, ": out of host memory (std::bad_alloc)",
        where(), "; the config's estimate was ~", FormatBytes(st.estimate_bytes.load()),
        " (docs/metrics.md): lower train.micro_batch, model.seq_len or the model size"));
  } catch (const c10::Error& e) {
    r = absl::InternalError(
        absl::StrCat("libtorch error", where(), ": ", OneLine(e.what_without_backtrace())));
  } catch (const std::exception& e) {
    r = absl::InternalError(absl::StrCat("trainer error", where(), ": ", OneLine(e.what())));
  } catch (...) {
    r = absl::InternalError(absl::StrCat("trainer error", where(), ": unknown exception"));
  }
#ifdef TS_TRAIN_WITH_COMM
  // A failed collective: the dump is on disk before the error is returned (and the caller's
  // on_comm_timeout has run, with the watchdog's message).
  if (!r.ok() && st.watchdog != nullptr) (void)st.watchdog->CheckNow();
#endif
  watchdog.Finish();
  // The end record: the file's last line on every path that can run code.
  if (MetricsWriter* w = st.writer.load()) {
    const int sig = StopValue(options);
    const char* reason = r.ok() ? kEndDone : sig != 0 ? kEndInterrupted : kEndError;
    EndRecord e = st.End(reason);
    if (!r.ok() && sig > 0) e.signal = SignalName(sig);
    if (!r.ok() && !absl::IsCancelled(r.status())) e.error = std::string(r.status().message());
    absl::Status written = w->WriteEnd(e);
    if (r.ok() && !written.ok()) r = written;
  }
  return r;
}

}  // namespace trainscope::train
