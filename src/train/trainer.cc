// The training loop: data -> forward -> backward (gradient all-reduce overlapped through
// hooks) -> optimizer, each phase timed, every step logged per rank; periodic checkpoints
// and resume. The Trainer class (trainer_impl.h) splits it into setup / step / checkpoint /
// summarize; Train() at the end is the adapter boundary that turns exceptions into Status.
#include "trainscope/train/trainer.h"

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
#include <cstring>
#include <filesystem>
#include <mutex>
#include <sstream>
#include <thread>
#include <type_traits>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "train/checkpointer.h"
#include "train/model.h"
#include "train/trainer_impl.h"
#include "train/validation.h"
#include "trainscope/ckpt/checkpoint.h"
#include "trainscope/core/env_vars.h"
#include "trainscope/core/json_text.h"
#include "trainscope/core/os.h"
#include "trainscope/core/run_dir.h"
#include "trainscope/core/status.h"
#include "trainscope/core/table.h"
#include "trainscope/hang/analyze.h"
#include "trainscope/tokenizer/tokenizer.h"

namespace trainscope::train {
namespace {

using json = nlohmann::json;
using Clock = TrainClock;

double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

std::string Hex64(uint64_t v) { return absl::StrFormat("%016x", v); }

std::string HexBytes(const uint8_t* p, size_t n) {
  static const char kDigits[] = "0123456789abcdef";
  std::string s(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    s[2 * i] = kDigits[p[i] >> 4];
    s[2 * i + 1] = kDigits[p[i] & 15];
  }
  return s;
}

bool UnhexBytes(const std::string& s, std::vector<uint8_t>* out) {
  if (s.size() % 2 != 0) return false;
  out->resize(s.size() / 2);
  auto nib = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  for (size_t i = 0; i < out->size(); ++i) {
    int hi = nib(s[2 * i]), lo = nib(s[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    (*out)[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return true;
}

absl::StatusOr<World> JoinWorld(const TrainConfig& config, const TrainOptions& options) {
  World w;
  if (!options.distributed_from_env) return w;
#ifdef TS_TRAIN_WITH_COMM
  comm::CommOptions defaults;
  defaults.backend = options.comm_backend;
  // trainscope launch, torchrun, srun or mpirun (comm/join.h).
  TS_ASSIGN_OR_RETURN(comm::JoinOptions jo, comm::JoinOptionsFromEnvironment(defaults));
  comm::CommOptions& co = jo.comm;
  // comm.timeout_s (or --comm-timeout) bounds every op, as the watchdog's timeout.
  co.timeout = std::chrono::milliseconds(
      std::max<int64_t>(1, static_cast<int64_t>(config.comm.timeout_s * 1000)));
  w.rank = co.rank;
  w.world_size = co.world_size;
  w.local_world_size = std::max(1, co.local_world_size);
  if (co.world_size > 1) {
    auto c = comm::JoinWorld(jo);
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

// The key of a parameter's entry in an optimizer's state: its TensorImpl, as a pointer in
// libtorch 2.x, printed as a string (as c10::guts::to_string did) in older ones.
template <typename Key>
Key StateKeyOf(void* impl) {
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream key;
    key << impl;
    return key.str();
  } else {
    return impl;
  }
}
using OptimizerStateMap = std::decay_t<decltype(std::declval<torch::optim::AdamW&>().state())>;
OptimizerStateMap::key_type OptimizerStateKey(const torch::Tensor& p) {
  return StateKeyOf<OptimizerStateMap::key_type>(p.unsafeGetTensorImpl());
}

// The optimizer's per-parameter state (created by its first step).
torch::optim::AdamWParamState* AdamState(torch::optim::AdamW& opt, const torch::Tensor& p) {
  auto it = opt.state().find(OptimizerStateKey(p));
  if (it == opt.state().end()) return nullptr;
  return static_cast<torch::optim::AdamWParamState*>(it->second.get());
}

// Copies a contiguous fp32 tensor into a snapshot as safetensors F32.
void SnapshotTensor(CheckpointSnapshot* snap, bool optimizer, const std::string& name,
                    const torch::Tensor& t) {
  torch::Tensor c = t.detach().to(torch::kCPU).contiguous();  // no copy when on the CPU
  TS_CHECK(c.scalar_type() == torch::kFloat);
  std::vector<uint64_t> shape(c.sizes().begin(), c.sizes().end());
  const uint64_t bytes = static_cast<uint64_t>(c.numel()) * sizeof(float);
  void* dst = snap->AddTensor(optimizer, name, "F32", std::move(shape), bytes);
  std::memcpy(dst, c.data_ptr(), bytes);
}

// Copies a tensor read from a checkpoint into `dst` (same shape, F32).
absl::Status LoadTensor(const ckpt::TensorData& t, const std::string& file, torch::Tensor dst) {
  std::vector<uint64_t> want(dst.sizes().begin(), dst.sizes().end());
  if (t.entry.dtype != "F32" || t.entry.shape != want) {
    return absl::InvalidArgumentError(
        absl::StrCat(file, ": tensor \"", t.entry.name, "\" is ", t.entry.dtype, " of shape [",
                     absl::StrJoin(t.entry.shape, ","), "], the model wants F32 [",
                     absl::StrJoin(want, ","), "] (a checkpoint of another config?)"));
  }
  torch::NoGradGuard no_grad;
  dst.copy_(torch::from_blob(const_cast<char*>(t.bytes.data()), dst.sizes(), torch::kFloat));
  return absl::OkStatus();
}

absl::StatusOr<json> ReadJson(const std::string& path) {
  auto text = Os::Default()->ReadFile(path);
  if (!text.ok()) return absl::NotFoundError(absl::StrCat(path, ": cannot read"));
  return ParseJsonText(*text, kJsonMaxDepth, path);
}

}  // namespace

EndRecord RunState::End(const char* reason) const {
  EndRecord e;
  e.reason = reason;
  e.step = steps_done.load();
  e.rank = rank.load();
  e.time_unix_us = Os::Default()->WallUs();
  e.elapsed_s = std::chrono::duration<double>(Clock::now() - start).count();
  return e;
}

// ---------------------------------------------------------------------------------------
// Setup
// ---------------------------------------------------------------------------------------

Trainer::Trainer(const TrainConfig& config, const TrainOptions& options, RunState* st)
    : config_in_(config), options_(options), st_(st) {}

Trainer::~Trainer() = default;

absl::StatusOr<TrainResult> Trainer::Run() {
  TS_RETURN_IF_ERROR(Init());
  loop_start_ = Clock::now();
  const int steps = config_.train.steps;
  for (int step = start_step_ + 1; step <= steps; ++step) {
    bool stop = false;
    TS_RETURN_IF_ERROR(RunStep(step, &stop));
    TS_RETURN_IF_ERROR(MaybeCheckpoint(step));
    if (stop && step < steps) {
      result_.stopped_by_time = true;
      break;
    }
  }
  if (guard_ && config_.anomaly.nonfinite_checks && st_->metrics) {
    // The per-step checks' own time over the loop's (docs/PERFORMANCE.md).
    const double loop_ms = MsSince(loop_start_);
    TS_RETURN_IF_ERROR(st_->metrics->WriteRecord(
        "nonfinite_checks", {{"check_ms", guard_->check_ms()},
                             {"loop_ms", loop_ms},
                             {"fraction", loop_ms > 0 ? guard_->check_ms() / loop_ms : 0.0}}));
  }
  return Summarize();
}

absl::Status Trainer::Init() {
  const TrainOptions& options = options_;
  if (options.run_dir.empty()) return absl::InvalidArgumentError("no run directory given");
  TS_ASSIGN_OR_RETURN(world_, JoinWorld(config_in_, options));
  st_->rank = world_.rank;
#ifdef TS_TRAIN_WITH_COMM
  if (world_.comm) TS_RETURN_IF_ERROR(StartCommWatchdog(config_in_, options, *world_.comm, st_));
  const bool data_parallel = world_.comm != nullptr;
#else
  const bool data_parallel = false;
#endif
  for (const Injection& inj : options.inject) {
    if (IsCommFault(inj.kind) && !data_parallel) {
      return absl::InvalidArgumentError(
          absl::StrCat("--inject '", inj.text,
                       "' needs a data-parallel run (e.g. trainscope launch -n 2 -- trainscope "
                       "train ...)"));
    }
  }
  TS_RETURN_IF_ERROR(CheckInjections(options.inject, world_.world_size, config_in_.train.steps,
                                     config_in_.model.layers));
  TS_RETURN_IF_STOPPED(options, *st_);

  // Everything sized by the config, once: tokenizer, memory check, corpus.
  config_ = config_in_;
  TS_RETURN_IF_ERROR(ValidateTrainConfig(config_));
  TS_ASSIGN_OR_RETURN(device_, OpenDevice(config_.train.device));
  device_name_ = DeviceName(device_);
  auto tok = tokenizer::LoadTokenizer(config_.data.tokenizer);
  if (!tok.ok()) {
    return absl::Status(tok.status().code(),
                        absl::StrCat("key \"data.tokenizer\": ", tok.status().message()));
  }
  tok_ = std::move(tok).value();
  vocab_ = config_.model.vocab > 0 ? config_.model.vocab : tok_->vocab_size();
  if (vocab_ < tok_->vocab_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        config_.source.empty() ? "config" : config_.source, ": key \"model.vocab\": ", vocab_,
        " is smaller than the tokenizer's vocabulary ", tok_->vocab_size()));
  }
  // Before anything sized by the config is allocated: the memory estimate.
  const int64_t available = options.available_memory_bytes
                                ? options.available_memory_bytes()
                                : AvailableHostMemoryBytes(Os::Default());
  TS_RETURN_IF_ERROR(
      CheckTrainMemory(config_, vocab_, world_.local_world_size, available,
                       options.available_memory_bytes ? "given" : "MemAvailable, /proc/meminfo"));
  TS_ASSIGN_OR_RETURN(corpus_, LoadCorpus(config_.data, *tok_, config_.model.seq_len,
                                          /*keep_document_ends=*/config_.eval.fraction > 0));
  if (config_.eval.enabled()) {
    TS_ASSIGN_OR_RETURN(val_, LoadValidationCorpus(config_, *tok_, &corpus_));
    result_.eval = true;
    result_.val_corpus = val_.stats;
  }
  threads_ = ResolveThreads(config_.train.threads, world_.local_world_size);
  st_->estimate_bytes = EstimateTrainMemory(config_, vocab_).total_bytes;
  TS_RETURN_IF_STOPPED(options, *st_);

  TS_RETURN_IF_ERROR(BuildModelAndOptimizer());
  train_dir_ = run_dir::Join(options.run_dir, run_dir::kTrain);
  TS_RETURN_IF_ERROR(MakeDirs(train_dir_));

  // Resume before the parameter broadcast: every rank loads the same checkpoint.
  if (!options.resume.empty()) {
    TS_ASSIGN_OR_RETURN(std::string path, ResolveResume());
    if (!path.empty()) TS_RETURN_IF_ERROR(Restore(path));
  }
#ifdef TS_TRAIN_WITH_COMM
  if (world_.comm) {
    world_.comm->AddObserver(world_.timer.get());
    seam_ = std::make_unique<CommSeam>(world_.comm.get(), options.inject, options.stop);
    sync_ = std::make_unique<GradSync>(seam_.get(), named_, config_.train.bucket_mb * 1e6,
                                       config_.comm, config_.train.seed);
    TS_RETURN_IF_ERROR(sync_->BroadcastParams());
    if (!result_.resumed_from.empty()) {  // the compressor's state (or a warning)
      std::string notice;
      TS_RETURN_IF_ERROR(
          sync_->RestoreCompressor(result_.resumed_from, resumed_compression_, &notice));
      if (!notice.empty() && options_.on_notice) options_.on_notice(notice);
    }
  }
#endif
  // Anomalies: the guard hooks every parameter and taps every module output.
  fp16_ = config_.train.precision == "fp16";
  bool numeric_inject = false;
  for (const Injection& inj : options.inject) numeric_inject |= !IsCommFault(inj.kind);
  if (config_.anomaly.nonfinite_checks || fp16_ || numeric_inject) {
    NonfiniteGuardOptions go;
    go.rank = world_.rank;
    go.checks = config_.anomaly.nonfinite_checks;
    go.fp16 = fp16_ && autocast_dtype_ != at::kHalf;  // emulation only where not autocast
    go.inject = options.inject;
    guard_ = std::make_unique<NonfiniteGuard>(model_, named_, std::move(go));
  }
  spike_ = std::make_unique<SpikeDetector>(config_.anomaly.spike);
  if (fp16_) scaler_ = std::make_unique<LossScaler>(config_.fp16);
  if (world_.rank == 0) {
    TS_RETURN_IF_ERROR(
        WriteFileAtomic(train_dir_ + "/config.json", TrainConfigToJson(config_).dump(2) + "\n"));
  }
  const RunConfig& rc = config_.train;
  result_.rank = world_.rank;
  result_.world_size = world_.world_size;
  result_.corpus = corpus_.stats;
  result_.precision = rc.precision;
  result_.threads = threads_;
  result_.tokens_per_step =
      int64_t{rc.micro_batch} * rc.grad_accum * config_.model.seq_len * world_.world_size;
  result_.steps = start_step_;
  TS_RETURN_IF_ERROR(OpenMetrics());

  // The checkpoint writer: rank 0 writes; the other ranks only hand over their state.
  if (world_.rank == 0) {
    CheckpointerOptions co;
    co.dir = CheckpointDir();
    co.keep = config_.checkpoint.keep;
    co.async = config_.checkpoint.async;
    co.on_saved = [this](const SaveOutcome& o) {
      MetricsWriter* w = st_->writer.load();
      if (w == nullptr) return;
      json j = {{"step", o.step},         {"path", o.path},       {"bytes", o.bytes},
                {"write_ms", o.write_ms}, {"anomaly", o.anomaly}, {"async", o.async},
                {"pruned", o.pruned},     {"ok", o.status.ok()}};
      if (!o.status.ok()) j["error"] = std::string(o.status.message());
      (void)w->WriteRecord("checkpoint", std::move(j));
    };
    checkpointer_ = std::make_unique<Checkpointer>(std::move(co));
  }

  LoaderOptions lo;
  lo.micro_batch = rc.micro_batch;
  lo.rank = world_.rank;
  lo.world_size = world_.world_size;
  lo.seed = rc.seed;
  lo.num_workers = config_.data.num_workers;
  lo.prefetch = config_.data.prefetch;
  lo.worker_delay_ms = config_.data.worker_delay_ms;
  lo.start_index = int64_t{start_step_} * rc.grad_accum;
  loader_ = std::make_unique<BatchLoader>(&corpus_, lo);
  return absl::OkStatus();
}

absl::Status Trainer::BuildModelAndOptimizer() {
  const RunConfig& rc = config_.train;
  // Determinism: fixed seed and thread count, deterministic kernels.
  at::set_num_threads(threads_);
  torch::manual_seed(rc.seed);
  at::globalContext().setDeterministicAlgorithms(rc.deterministic, /*warn_only=*/false);
  bf16_ = rc.precision == "bf16";
  // fp16 is real autocast on CUDA; on the CPU (no fast half matmuls) the guard emulates it.
  autocast_dtype_ = bf16_                                         ? at::kBFloat16
                    : rc.precision == "fp16" && device_.is_cuda() ? at::kHalf
                                                                  : at::kFloat;

  model_ = Gpt(config_.model, vocab_);  // initialised on the CPU: the same weights anywhere
  if (!device_.is_cpu()) model_->to(device_);
  model_->train();
  named_ = model_->NamedParams();
  int64_t params = 0;
  std::vector<torch::Tensor> decay, no_decay;
  for (const auto& [name, p] : named_) {
    params += p.numel();
    all_params_.push_back(p);
    (model_->Decays(name) ? decay : no_decay).push_back(p);
  }
  result_.params = params;
  const OptimConfig& o = config_.optim;
  torch::optim::AdamWOptions base(o.lr);
  base.betas({o.beta1, o.beta2}).eps(o.eps).weight_decay(0.0);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  auto decay_opts = std::make_unique<torch::optim::AdamWOptions>(base);
  decay_opts->weight_decay(o.weight_decay);
  groups.emplace_back(decay, std::move(decay_opts));
  groups.emplace_back(no_decay, std::make_unique<torch::optim::AdamWOptions>(base));
  optimizer_ = std::make_unique<torch::optim::AdamW>(groups, base);
  return absl::OkStatus();
}

absl::Status Trainer::OpenMetrics() {
  if (!config_.train.observability) return absl::OkStatus();
  const int rank = world_.rank;
  result_.metrics_path = run_dir::TrainMetricsPath(options_.run_dir, rank);
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  json header = {{"rank", rank},
                 {"world_size", world_.world_size},
                 {"params", result_.params},
                 {"start_unix_us", Os::Default()->WallUs()},
                 {"host", host},
                 {"pid", static_cast<int64_t>(getpid())},
                 {"device", device_.str()},
                 {"device_name", device_name_},
                 {"threads", threads_},
                 {"precision", config_.train.precision},
                 {"tokenizer", tok_->name()},
                 {"vocab", vocab_},
                 {"tokens_per_step", result_.tokens_per_step},
                 {"corpus", CorpusStatsToJson(corpus_.stats)},
                 // Same on every rank of a correct data-parallel run (diagnose compares).
                 {"data_order_hash", DataOrderHash(corpus_, config_.train.seed)},
                 {"config", TrainConfigToJson(config_)}};
  if (!options_.resume.empty()) {  // 0 and "": --resume found nothing, a fresh start
    header["resumed_from_step"] = start_step_;
    header["resumed_from"] = result_.resumed_from;
  }
  // A resumed run (any --resume) continues the file: readers take a step's last record.
  TS_ASSIGN_OR_RETURN(st_->metrics, MetricsWriter::Open(result_.metrics_path, header,
                                                        /*append=*/!options_.resume.empty()));
  if (config_.train.tensorboard) {
    TS_RETURN_IF_ERROR(
        st_->metrics->AttachTensorBoard(run_dir::TrainTensorBoardDir(options_.run_dir, rank)));
  }
  st_->writer = st_->metrics.get();
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------
// Step
// ---------------------------------------------------------------------------------------

absl::Status Trainer::RunStep(int step, bool* stop) {
  TS_RETURN_IF_STOPPED(options_, *st_);
#ifdef TS_TRAIN_WITH_COMM
  if (seam_) seam_->BeginStep(step);
#endif
  StepContext s;
  s.step = step;
  s.start = Clock::now();
  s.lr = LearningRate(config_.optim, step, config_.train.steps);
  if (guard_) s.lr *= guard_->BeginStep(step);  // lr_spike injection: the factor, else 1
  for (auto& group : optimizer_->param_groups()) {
    static_cast<torch::optim::AdamWOptions&>(group.options()).lr(s.lr);
  }
  TS_RETURN_IF_ERROR(ForwardBackward(&s));
  TS_RETURN_IF_STOPPED(options_, *st_);
  s.stop_for_time = config_.train.max_seconds > 0 &&
                    std::chrono::duration<double>(Clock::now() - loop_start_).count() >=
                        config_.train.max_seconds;
  TS_RETURN_IF_ERROR(ReduceGradients(&s));
  TS_RETURN_IF_ERROR(OptimizerStep(&s));
  TS_RETURN_IF_ERROR(MaybeEvaluate(&s));
  TS_RETURN_IF_ERROR(RecordStep(&s));
  TS_RETURN_IF_ERROR(CheckSpike(s));
  *stop = s.stop_for_time;
  return absl::OkStatus();
}

absl::Status Trainer::ForwardBackward(StepContext* s) {
  const int accum = config_.train.grad_accum;
  double loss_sum = 0;
  for (int micro = 0; micro < accum; ++micro) {
    if (micro > 0) TS_RETURN_IF_STOPPED(options_, *st_);
    auto t0 = Clock::now();
    Batch batch = loader_->Next();
    s->phases.data_wait_ms += MsSince(t0);
    s->sequence_ids.insert(s->sequence_ids.end(), batch.sequence_ids.begin(),
                           batch.sequence_ids.end());
    t0 = Clock::now();
    // Copied off the batch's buffers: to the device, or a clone on the CPU.
    auto upload = [this](std::vector<int64_t>& v, int64_t rows, int64_t cols) {
      torch::Tensor t = torch::from_blob(v.data(), {rows, cols}, torch::kLong);
      return device_.is_cpu() ? t.clone() : t.to(device_);
    };
    torch::Tensor inputs = upload(batch.inputs, batch.rows, batch.cols);
    torch::Tensor targets = upload(batch.targets, batch.rows, batch.cols);
    s->phases.h2d_ms += MsSince(t0);
    if (guard_) guard_->KeepBatch(inputs, targets, batch.sequence_ids);
    t0 = Clock::now();
    torch::Tensor loss;
    {
      AutocastScope autocast(autocast_dtype_, device_);
      loss = model_->Loss(inputs, targets);
    }
    const double loss_value = loss.item<double>();
    s->phases.forward_ms += MsSince(t0);
    if (!std::isfinite(loss_value) && guard_ && config_.anomaly.nonfinite_checks) {
      // Not a return: every rank goes on through backward and the step's all-reduces, so
      // that all stop at this step together once the flags are reduced.
      guard_->FlagLoss();
    } else if (!std::isfinite(loss_value)) {
      std::string msg =
          absl::StrCat("non-finite loss ", loss_value, " at step ", s->step, " (micro-batch ",
                       micro, ") on rank ", world_.rank, "; the run stopped");
      if (st_->metrics) {
        (void)st_->metrics->WriteRecord(
            "error", {{"step", s->step}, {"rank", world_.rank}, {"message", msg}});
      }
      return absl::AbortedError(msg);
    }
    loss_sum += loss_value;
    t0 = Clock::now();
#ifdef TS_TRAIN_WITH_COMM
    if (sync_ && micro == accum - 1) sync_->Arm();
#endif
    if (scaler_) loss = loss * scaler_->scale();
    (loss / accum).backward();
    SynchronizeDevice(device_);  // a GPU's backward is asynchronous: time all of it here
    s->phases.backward_ms += MsSince(t0);
  }
  s->loss = loss_sum / accum;
  return absl::OkStatus();
}

absl::Status Trainer::ReduceGradients(StepContext* s) {
  // This rank's non-finite flag: its loss, or one of its gradients before the all-reduce
  // (except under fp16, where gradient overflows are the loss scaler's to handle).
  const bool local_flag = guard_ != nullptr && config_.anomaly.nonfinite_checks &&
                          (guard_->loss_flag() || (!fp16_ && guard_->grad_flag()));
  std::vector<int> flagged;
  bool reduced = false;
#ifdef TS_TRAIN_WITH_COMM
  if (sync_) {
    CompressStats sync_stats;
    TS_RETURN_IF_ERROR(sync_->Finish(&s->phases.comm_wait_ms, &sync_stats));
    s->comm_bytes = sync_stats.comm_bytes;
    s->compress_ms = sync_stats.compress_ms;
    s->comm_ms = world_.timer->TakeMs();  // the gradient buckets, not the loss all-reduce below
    // Mean loss over ranks, one stop decision for all (any rank out of time stops all), and
    // every rank's non-finite flag in its own slot (so the rank is named).
    auto t0 = Clock::now();
    std::vector<float> v(2 + static_cast<size_t>(world_.world_size), 0.0f);
    v[0] = static_cast<float>(s->loss);
    v[1] = s->stop_for_time ? 1.0f : 0.0f;
    v[2 + world_.rank] = local_flag ? 1.0f : 0.0f;
    TS_RETURN_IF_ERROR(
        seam_->AllReduce(v.data(), v.size(), absl::StrCat("step ", s->step, " loss all_reduce")));
    s->phases.comm_wait_ms += MsSince(t0);
    s->loss = v[0] / world_.world_size;
    s->stop_for_time = v[1] > 0;
    for (int r = 0; r < world_.world_size; ++r) {
      if (!(v[2 + r] == 0)) flagged.push_back(r);
    }
    reduced = true;
  }
#endif
  if (!reduced && local_flag) flagged.push_back(world_.rank);
  if (!flagged.empty()) return OnNonfinite(s, flagged, /*optimizer_phase=*/false);
  return absl::OkStatus();
}

absl::Status Trainer::OptimizerStep(StepContext* s) {
  const RunConfig& rc = config_.train;
  auto t0 = Clock::now();
  if (scaler_) {
    TS_RETURN_IF_ERROR(Fp16Unscale(s));
    if (s->skipped) {
      for (auto& p : all_params_) p.mutable_grad() = torch::Tensor();
      s->phases.optimizer_ms += MsSince(t0);
      return absl::OkStatus();
    }
  }
  if (config_.optim.grad_clip > 0) {
    s->grad_norm = torch::nn::utils::clip_grad_norm_(all_params_, config_.optim.grad_clip);
  } else {
    torch::NoGradGuard no_grad;
    torch::Tensor sq = torch::zeros({}, torch::dtype(torch::kDouble).device(device_));
    for (const auto& p : all_params_) {
      if (p.grad().defined()) sq += p.grad().to(torch::kDouble).pow(2).sum();
    }
    s->grad_norm = std::sqrt(sq.item<double>());
  }
  s->norms_now = rc.observability && rc.layer_norms_every > 0 &&
                 (s->step % rc.layer_norms_every == 0 || s->step == 1);
  const auto obs_start = Clock::now();
  if (s->norms_now) {
    torch::NoGradGuard no_grad;
    for (const auto& [name, p] : named_) {
      LayerNorms ln;
      ln.name = name;
      ln.weight_norm = p.norm().item<double>();
      ln.grad_norm = p.grad().defined() ? p.grad().norm().item<double>() : 0.0;
      s->layer_norms.push_back(std::move(ln));
    }
  }
  s->obs_ms = MsSince(obs_start);
  optimizer_->step();
  if (guard_ && config_.anomaly.nonfinite_checks && !guard_->WeightsFinite()) {
    std::vector<int> all(static_cast<size_t>(world_.world_size));
    for (int r = 0; r < world_.world_size; ++r) all[r] = r;  // replicated: every rank
    return OnNonfinite(s, all, /*optimizer_phase=*/true);
  }
  if (guard_) guard_->EndStep(s->lr, s->grad_norm);
  for (auto& p : all_params_) p.mutable_grad() = torch::Tensor();  // zero_grad(set_to_none)
  s->phases.optimizer_ms += MsSince(t0);
  return absl::OkStatus();
}

absl::Status Trainer::RecordStep(StepContext* s) {
  StepRecord rec;
  rec.step = s->step;
  rec.loss = s->loss;
  rec.lr = s->lr;
  rec.grad_norm = s->grad_norm;
  rec.tokens = result_.tokens_per_step;
  rec.step_ms = MsSince(s->start) - s->eval_ms;  // the evaluation is not the step's
  rec.has_val = s->has_val;
  rec.val_loss = s->val_loss;
  rec.eval_ms = s->eval_ms;
  rec.tokens_per_s = rec.step_ms > 0 ? rec.tokens * 1000.0 / rec.step_ms : 0;
  rec.phases = s->phases;
#ifdef TS_TRAIN_WITH_COMM
  rec.comm_ms = s->comm_ms;
  rec.comm_bytes = s->comm_bytes;
  rec.compress_ms = s->compress_ms;
  if (world_.comm) (void)world_.timer->TakeMs();
#endif
  result_.losses.push_back(s->loss);
  result_.steps = s->step;
  st_->steps_done = s->step;
  // The first step of a process is warm-up; it is timed only when it is the only one.
  if (s->step > start_step_ + 1 || config_.train.steps == start_step_ + 1) {
    phase_sum_.Add(s->phases);
    comm_sum_ += rec.comm_ms;
    step_ms_sum_ += rec.step_ms;
    timed_step_ms_.push_back(rec.step_ms);
    tokens_sum_ += rec.tokens;
    ++timed_steps_;
  }
  double obs_ms = s->obs_ms;
  if (MetricsWriter* metrics = st_->metrics.get()) {
    const auto write_start = Clock::now();
    rec.host_rss_bytes = HostRssBytes();
    if (device_.is_cuda()) {  // the device's own figures beside the host's (docs/metrics.md)
      const DeviceMemory m = ReadDeviceMemory(device_);
      rec.device_mem_allocated_bytes = m.allocated_bytes;
      rec.device_mem_peak_bytes = m.peak_bytes;
    }
    TS_RETURN_IF_ERROR(metrics->WriteStep(rec));
    if (s->norms_now) TS_RETURN_IF_ERROR(metrics->WriteLayerNorms(s->step, s->layer_norms));
    obs_ms += MsSince(write_start);
  }
  obs_sum_ += obs_ms;
  if (world_.rank == 0 && options_.on_step) options_.on_step(rec);
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------
// Anomalies
// ---------------------------------------------------------------------------------------

absl::Status Trainer::OnNonfinite(StepContext* s, const std::vector<int>& ranks,
                                  bool optimizer_phase) {
  NonfiniteEvidence e;
  e.step = s->step;
  e.ranks = ranks;
  e.rank = ranks.front();
  if (optimizer_phase) {
    guard_->LocaliseWeights();
  } else if (std::find(ranks.begin(), ranks.end(), world_.rank) != ranks.end()) {
    const double scale = scaler_ ? scaler_->scale() : 1.0;
    guard_->Replay(
        [this, scale](const torch::Tensor& in, const torch::Tensor& tg) {
          AutocastScope autocast(autocast_dtype_, device_);
          torch::Tensor loss = model_->Loss(in, tg);
          return scale != 1.0 ? loss * scale : loss;
        },
        config_.train.grad_accum);
  }
  // Every rank fills its own slot; the sum hands each the culprit's findings.
  const size_t k = NonfiniteGuard::kSlotFloats;
  std::vector<float> slots(k * static_cast<size_t>(world_.world_size), 0.0f);
  guard_->Encode(&slots[k * static_cast<size_t>(world_.rank)]);
#ifdef TS_TRAIN_WITH_COMM
  if (seam_) {
    TS_RETURN_IF_ERROR(seam_->AllReduce(slots.data(), slots.size(),
                                        absl::StrCat("step ", s->step, " nonfinite exchange")));
  }
#endif
  guard_->Decode(&slots[k * static_cast<size_t>(e.rank)], &e);
  guard_->FillHistory(s->lr, &e);
  const NonfiniteVerdict verdict = ClassifyNonfinite(e);
  const json rec = NonfiniteToJson(e, verdict);
  std::string sentence = NonfiniteSentence(e, verdict);
  if (st_->metrics) TS_RETURN_IF_ERROR(st_->metrics->WriteRecord("nonfinite", rec));
  // The anomaly checkpoint: the last good state (before this step) when the forward or
  // backward pass turned non-finite; the state the optimizer step left in the optimizer phase.
  for (auto& p : all_params_) p.mutable_grad() = torch::Tensor();
  absl::StatusOr<std::string> saved =
      SaveCheckpoint(optimizer_phase ? s->step : s->step - 1, /*anomaly=*/true, rec);
  if (!saved.ok()) {
    absl::StrAppend(&sentence, " (the anomaly checkpoint failed: ", saved.status().message(), ")");
  }
  absl::Status st = absl::AbortedError(sentence);
  st.SetPayload(kNonfinitePayload, absl::Cord(rec.dump()));
  return st;
}

absl::Status Trainer::Fp16Unscale(StepContext* s) {
  const double scale = scaler_->scale();
  double zero_fraction = 0;
  const bool overflow = guard_->UnscaleFp16Grads(scale, &zero_fraction);
  s->skipped = scaler_->Update(overflow);
  if (s->skipped && scaler_->stuck_at_min()) {
    // Scaling cannot help any more: a non-finite gradient, found like any other.
    std::vector<int> all(static_cast<size_t>(world_.world_size));
    for (int r = 0; r < world_.world_size; ++r) all[r] = r;
    return OnNonfinite(s, all, /*optimizer_phase=*/false);
  }
  const bool warn = !underflow_warned_ && zero_fraction > kUnderflowWarnFraction;
  if (MetricsWriter* m = st_->metrics.get();
      m && (s->skipped || scale != scaler_->scale() || warn)) {
    TS_RETURN_IF_ERROR(m->WriteRecord("loss_scale", {{"step", s->step},
                                                     {"scale", scale},
                                                     {"next_scale", scaler_->scale()},
                                                     {"skipped", s->skipped},
                                                     {"skipped_steps", scaler_->skipped_steps()},
                                                     {"zero_grad_fraction", zero_fraction}}));
  }
  if (warn) {
    underflow_warned_ = true;
    if (world_.rank == 0 && options_.on_notice) {
      options_.on_notice(absl::StrFormat(
          "warning: fp16 underflow: %.1f%% of the Linear weights' gradients are exactly 0 at "
          "step %d with loss scale %g: raise fp16.initial_scale",
          100 * zero_fraction, s->step, scale));
    }
  }
  return absl::OkStatus();
}

absl::Status Trainer::CheckSpike(const StepContext& s) {
  if (s.skipped) return absl::OkStatus();
  const SpikeVerdict v = spike_->Observe(s.loss);
  if (!v.spike) return absl::OkStatus();
  const json rec = {{"step", s.step},           {"rank", world_.rank},
                    {"loss", s.loss},           {"rule", config_.anomaly.spike.rule},
                    {"threshold", v.threshold}, {"median", v.median},
                    {"sigma", v.sigma},         {"window", v.samples},
                    {"samples", s.sequence_ids}};
  if (st_->metrics) TS_RETURN_IF_ERROR(st_->metrics->WriteRecord("spike", rec));
  if (world_.rank == 0 && options_.on_notice) {
    options_.on_notice(
        absl::StrFormat("warning: loss spike at step %d: %.4g > %.4g (%s rule over %d steps)%s",
                        s.step, s.loss, v.threshold, config_.anomaly.spike.rule, v.samples,
                        config_.anomaly.spike_checkpoint ? "; anomaly checkpoint saved" : ""));
  }
  if (config_.anomaly.spike_checkpoint) {
    TS_RETURN_IF_ERROR(SaveCheckpoint(s.step, /*anomaly=*/true, rec).status());
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------
// Checkpoint
// ---------------------------------------------------------------------------------------

std::string Trainer::CheckpointDir() const {
  const std::string& d = config_.checkpoint.dir;
  if (d.empty()) return run_dir::Join(options_.run_dir, run_dir::kCheckpoints);
  if (d[0] == '/') return d;
  return run_dir::Join(options_.run_dir, d);
}

// xxh3-64 of the config with the keys that do not change the state's meaning left out (run
// length: train.steps may grow to extend a run, the LR schedule then follows the new length;
// time limits, logging, loader threads, checkpointing, timeouts): a resumed run must have the
// same hash.
std::string Trainer::ConfigHash() const {
  json j = TrainConfigToJson(config_);
  j.erase("checkpoint");
  j.erase("comm");
  j["train"].erase("device");  // a checkpoint moves between devices
  j["train"].erase("device_tflops");
  for (const char* k : {"steps", "max_seconds", "log_every", "layer_norms_every", "observability",
                        "tensorboard", "keep_host_memory", "target_loss"}) {
    j["train"].erase(k);
  }
  for (const char* k : {"num_workers", "prefetch", "worker_delay_ms"}) j["data"].erase(k);
  // The held-out split changes the training corpus; when to evaluate does not (and a config
  // without eval hashes as before the section existed).
  if (config_.eval.enabled()) {
    for (const char* k : {"every_steps", "batches"}) j["eval"].erase(k);
  } else {
    j.erase("eval");
  }
  const std::string text = j.dump();
  return Hex64(XXH3_64bits(text.data(), text.size()));
}

json Trainer::RankState(int step) const {
  // The CPU generator drives initialisation (and dropout, were there any); the loader's
  // order is a pure function of (seed, position), so the position is its whole state.
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  torch::Tensor g = gen.get_state();
  return {{"format", "trainscope.checkpoint.rank"},
          {"version", 1},
          {"rank", world_.rank},
          {"world_size", world_.world_size},
          {"step", step},
          {"torch_cpu_generator", HexBytes(g.data_ptr<uint8_t>(), g.numel())},
          {"data",
           {{"next_micro_step", int64_t{step} * config_.train.grad_accum},
            {"micro_batch", config_.train.micro_batch},
            {"seed", config_.train.seed},
            {"num_sequences", corpus_.num_sequences}}}};
}

absl::Status Trainer::SetRankState(const json& j, const std::string& file) {
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": ", why));
  };
  if (!j.is_object() || !j.contains("torch_cpu_generator") ||
      !j["torch_cpu_generator"].is_string() || !j.contains("data") || !j["data"].is_object()) {
    return bad("not a rank state (torch_cpu_generator, data)");
  }
  std::vector<uint8_t> bytes;
  if (!UnhexBytes(j["torch_cpu_generator"].get<std::string>(), &bytes)) {
    return bad("torch_cpu_generator is not hex");
  }
  const json& d = j["data"];
  if (d.value("num_sequences", int64_t{-1}) != corpus_.num_sequences) {
    return bad(absl::StrCat("the corpus had ", d.value("num_sequences", int64_t{-1}),
                            " sequences at save time and has ", corpus_.num_sequences,
                            " now: the sample order would not continue"));
  }
  torch::Tensor state =
      torch::from_blob(bytes.data(), {static_cast<int64_t>(bytes.size())}, torch::kUInt8).clone();
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  gen.set_state(state);
  return absl::OkStatus();
}

absl::Status Trainer::MaybeCheckpoint(int step) {
  const int every = config_.checkpoint.every_steps;
  if (every <= 0 || step % every != 0) return absl::OkStatus();
  return SaveCheckpoint(step, /*anomaly=*/false, json::object()).status();
}

absl::StatusOr<std::string> Trainer::SaveCheckpoint(int step, bool anomaly, const json& extra) {
  const auto t0 = Clock::now();
  // Every rank's small state to rank 0, as bytes over an int32 all-gather (lengths first).
  std::vector<std::string> rank_states{RankState(step).dump()};
#ifdef TS_TRAIN_WITH_COMM
  if (world_.comm) {
    const int n = world_.world_size;
    int32_t mine = static_cast<int32_t>(rank_states[0].size());
    std::vector<int32_t> lens(n);
    TS_RETURN_IF_ERROR(world_.comm->AllGather(&mine, lens.data(), 1, comm::DType::kInt32));
    const int32_t words = (*std::max_element(lens.begin(), lens.end()) + 3) / 4;
    std::vector<int32_t> send(words, 0), recv(static_cast<size_t>(words) * n);
    std::memcpy(send.data(), rank_states[0].data(), rank_states[0].size());
    TS_RETURN_IF_ERROR(
        world_.comm->AllGather(send.data(), recv.data(), words, comm::DType::kInt32));
    rank_states.assign(n, "");
    for (int r = 0; r < n; ++r) {
      rank_states[r].assign(reinterpret_cast<const char*>(recv.data() + size_t{words} * r),
                            lens[r]);
    }
  }
#endif
  // Snapshot: the replicated tensors copied to host memory the writer owns.
  auto snap = std::make_unique<CheckpointSnapshot>();
  json compression;  // meta.json extra.compression (data-parallel runs)
#ifdef TS_TRAIN_WITH_COMM
  // Error feedback differs per rank: every rank's compressor state to rank 0's snapshot.
  if (sync_) {
    TS_ASSIGN_OR_RETURN(compression,
                        sync_->SnapshotCompressor(world_.rank == 0 ? snap.get() : nullptr));
  }
#endif
  if (world_.rank != 0) return std::string();
  ckpt::CheckpointData& d = snap->data;
  d.step = step;
  d.world_size = world_.world_size;
  d.config_hash = ConfigHash();
  d.anomaly = anomaly;
  for (const auto& [name, p] : named_) SnapshotTensor(snap.get(), false, name, p);
  json adam_steps = json::object();
  for (const auto& [name, p] : named_) {
    torch::optim::AdamWParamState* a = AdamState(*optimizer_, p);
    if (a == nullptr) continue;  // no step taken for this parameter yet
    SnapshotTensor(snap.get(), true, name + ".exp_avg", a->exp_avg());
    SnapshotTensor(snap.get(), true, name + ".exp_avg_sq", a->exp_avg_sq());
    adam_steps[name] = a->step();
  }
  for (size_t r = 0; r < rank_states.size(); ++r) {
    json j;
    if (!ParseJsonText(rank_states[r], kJsonMaxDepth, &j, nullptr)) {
      return absl::InternalError("a rank's state did not arrive intact");
    }
    d.json_files[absl::StrCat("rank", r, ".json")] = std::move(j);
  }
  d.meta_extra = {{"optimizer", {{"kind", "adamw"}, {"param_steps", std::move(adam_steps)}}},
                  {"scheduler",
                   {{"kind", "warmup_cosine"},
                    {"step", step},
                    {"total_steps", config_.train.steps},
                    {"lr", LearningRate(config_.optim, std::max(step, 1), config_.train.steps)}}},
                  {"config", TrainConfigToJson(config_)}};
  if (!compression.is_null()) d.meta_extra["compression"] = std::move(compression);
  if (anomaly) d.meta_extra["anomaly"] = extra;
  result_.checkpoint_snapshot_ms += MsSince(t0);
  TS_ASSIGN_OR_RETURN(std::string path,
                      checkpointer_->Save(std::move(snap), /*allow_async=*/!anomaly,
                                          &result_.checkpoint_blocked_ms));
  ++result_.checkpoints_saved;
  return path;
}

absl::StatusOr<std::string> Trainer::ResolveResume() {
  // Rank 0 decides, so that every rank loads the same step even while files change.
  // step: -1 a fresh start, -2 rank 0 refused (its error says why).
  int64_t step = -1;
  std::string path;
  absl::Status refused;
  if (world_.rank == 0) {
    absl::StatusOr<ResumePlan> plan = PlanResume(options_.resume, CheckpointDir());
    if (plan.ok()) {
      if (options_.on_notice) options_.on_notice(plan->notice);
      path = plan->path;
      step = plan->path.empty() ? -1 : plan->step;
    } else {
      refused = plan.status();
      step = -2;
    }
  }
#ifdef TS_TRAIN_WITH_COMM
  if (world_.comm) {
    int64_t v = step;
    TS_RETURN_IF_ERROR(world_.comm->Broadcast(&v, 1, comm::DType::kInt64, 0));
    step = v;
    if (world_.rank != 0 && step == -2) {
      return absl::InvalidArgumentError(absl::StrCat("rank ", world_.rank,
                                                     ": rank 0 refused --resume ", options_.resume,
                                                     " (its log says why)"));
    }
    if (world_.rank != 0 && step >= 0) {
      path = options_.resume == "latest" ? absl::StrCat(CheckpointDir(), "/step-", step)
                                         : options_.resume;
      ckpt::CheckResult c = ckpt::CheckCheckpoint(path, /*hash=*/false);
      if (!c.ok()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "rank ", world_.rank, ": rank 0 resumes from step ", step, " but ", path,
            " is not complete here (", c.problems.empty() ? "?" : c.problems[0].problem,
            "); multi-node runs need the checkpoint folder on a shared filesystem"));
      }
    }
  }
#endif
  if (!refused.ok()) return refused;
  return path;
}

absl::Status Trainer::Restore(const std::string& path) {
  TS_ASSIGN_OR_RETURN(json meta, ReadJson(path + "/meta.json"));
  const int64_t step = meta.value("step", int64_t{-1});
  if (step < 0 || step > config_.train.steps) {
    return absl::InvalidArgumentError(absl::StrCat(path, "/meta.json: step ", step,
                                                   " is outside this run's 0..",
                                                   config_.train.steps, " (train.steps)"));
  }
  if (meta.value("world_size", 0) != world_.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": saved by a ", meta.value("world_size", 0), "-rank run, this run has ",
        world_.world_size, " ranks (the sample order and the state per rank would differ)"));
  }
  if (meta.value("config_hash", "") != ConfigHash()) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": saved with another config (config hash ", meta.value("config_hash", ""),
        ", this run's is ", ConfigHash(),
        "); model, optim, data order and train keys must match (see meta.json extra.config)"));
  }
  // Model.
  const std::string model_file = path + "/model.safetensors";
  TS_ASSIGN_OR_RETURN(std::vector<ckpt::TensorData> model, ckpt::ReadSafetensors(model_file));
  std::map<std::string, const ckpt::TensorData*> by_name;
  for (const auto& t : model) by_name[t.entry.name] = &t;
  for (const auto& [name, p] : named_) {
    auto it = by_name.find(name);
    if (it == by_name.end()) {
      return absl::InvalidArgumentError(absl::StrCat(model_file, ": no tensor \"", name, "\""));
    }
    TS_RETURN_IF_ERROR(LoadTensor(*it->second, model_file, p));
  }
  // Optimizer: AdamW moments and per-parameter step counts. The state objects are created
  // here as AdamW's first step would create them.
  const std::string opt_file = path + "/optimizer.safetensors";
  const json steps = meta["extra"]["optimizer"].value("param_steps", json::object());
  if (!steps.empty()) {
    TS_ASSIGN_OR_RETURN(std::vector<ckpt::TensorData> opt, ckpt::ReadSafetensors(opt_file));
    std::map<std::string, const ckpt::TensorData*> opt_by_name;
    for (const auto& t : opt) opt_by_name[t.entry.name] = &t;
    for (const auto& [name, p] : named_) {
      if (!steps.contains(name)) continue;
      auto a = std::make_unique<torch::optim::AdamWParamState>();
      a->step(steps[name].get<int64_t>());
      a->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
      a->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
      for (const char* part : {".exp_avg", ".exp_avg_sq"}) {
        auto it = opt_by_name.find(name + part);
        if (it == opt_by_name.end()) {
          return absl::InvalidArgumentError(
              absl::StrCat(opt_file, ": no tensor \"", name, part, "\""));
        }
        TS_RETURN_IF_ERROR(
            LoadTensor(*it->second, opt_file,
                       std::strcmp(part, ".exp_avg") == 0 ? a->exp_avg() : a->exp_avg_sq()));
      }
      optimizer_->state()[OptimizerStateKey(p)] = std::move(a);
    }
  }
  // This rank's RNG state and data position.
  const std::string rank_file = absl::StrCat(path, "/rank", world_.rank, ".json");
  TS_ASSIGN_OR_RETURN(json rank_state, ReadJson(rank_file));
  TS_RETURN_IF_ERROR(SetRankState(rank_state, rank_file));
  start_step_ = static_cast<int>(step);
  st_->steps_done = start_step_;
  result_.resumed_from_step = start_step_;
  result_.resumed_from = path;
  resumed_compression_ = meta.value("extra", json::object()).value("compression", json());
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------
// Summarize
// ---------------------------------------------------------------------------------------

absl::StatusOr<TrainResult> Trainer::Summarize() {
  TrainResult& result = result_;
  // A save still writing finishes before the run reports success.
  if (checkpointer_) TS_RETURN_IF_ERROR(checkpointer_->Wait(&result.checkpoint_blocked_ms));
  result.seconds = std::chrono::duration<double>(Clock::now() - loop_start_).count();
  result.observability_fraction = result.seconds > 0 ? obs_sum_ / (result.seconds * 1000) : 0;

  const int n = static_cast<int>(result.losses.size());
  if (n > 0) {
    result.loss_start = result.losses.front();
    const int tail = std::max(1, std::min(10, n / 5 + 1));
    double tail_sum = 0;
    for (int i = n - tail; i < n; ++i) tail_sum += result.losses[i];
    result.loss_end = tail_sum / tail;
  }
  if (timed_steps_ > 0) {
    PhaseTimes mean = phase_sum_;
    mean.Add(phase_sum_, 1.0 / timed_steps_ - 1.0);  // sum -> mean
    result.mean_phases = mean;
    result.mean_step_ms = step_ms_sum_ / timed_steps_;
    std::vector<double> sorted = timed_step_ms_;
    std::sort(sorted.begin(), sorted.end());
    const size_t mid = sorted.size() / 2;
    result.median_step_ms = sorted.size() % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
    result.mean_comm_ms = comm_sum_ / timed_steps_;
    if (result.mean_comm_ms > 0) {
      // comm_wait also holds the small loss all-reduce; clamp to [0, 1].
      result.overlap_fraction =
          std::min(1.0, std::max(0.0, 1.0 - result.mean_phases.comm_wait_ms / result.mean_comm_ms));
    }
    result.tokens_per_s = step_ms_sum_ > 0 ? tokens_sum_ * 1000.0 / step_ms_sum_ : 0;
  }
  // The device's figures: memory, and MFU when the peak is known without measuring.
  result.device = device_.str();
  result.device_name = device_name_;
  const DeviceMemory memory = ReadDeviceMemory(device_);
  result.memory_source = memory.source;
  result.memory_peak_bytes = memory.peak_bytes;
  result.memory_reserved_bytes = memory.reserved_bytes;
  result.peak_flops = KnownPeakFlops(config_.train, device_name_, &result.peak_flops_source);
  if (result.peak_flops > 0) {
    result.mfu = 6.0 * static_cast<double>(result.params) * result.tokens_per_s /
                 (result.peak_flops * world_.world_size);
  }
  result.loader = JudgeDataLoader(result.mean_phases.data_wait_ms, result.mean_step_ms,
                                  config_.data.num_workers);

  // Weights checksum: xxh3-64 over every parameter's bytes in name order; ranks of a
  // data-parallel run must agree bit for bit.
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  json per_param = json::array();
  for (const auto& [name, p] : named_) {
    torch::Tensor t = p.detach().to(torch::kCPU).contiguous();
    const size_t bytes = static_cast<size_t>(t.numel()) * t.element_size();
    XXH3_64bits_update(state, t.data_ptr(), bytes);
    per_param.push_back({{"name", name},
                         {"numel", t.numel()},
                         {"xxh3_64", Hex64(XXH3_64bits(t.data_ptr(), bytes))},
                         {"norm", t.norm().item<double>()}});
  }
  result.weights_checksum = Hex64(XXH3_64bits_digest(state));
  XXH3_freeState(state);
  const int rank = world_.rank;
  if (options_.write_weights) {
    json w = {{"format", "trainscope.train_weights"},
              {"version", 1},
              {"rank", rank},
              {"world_size", world_.world_size},
              {"step", result.steps},
              {"xxh3_64", result.weights_checksum},
              {"params", per_param}};
    TS_RETURN_IF_ERROR(
        WriteFileAtomic(run_dir::TrainWeightsPath(options_.run_dir, rank), w.dump(1) + "\n"));
  }
  if (st_->metrics) {
    TS_RETURN_IF_ERROR(st_->metrics->WriteRecord("summary", TrainResultToJson(result)));
  }
  if (rank == 0) {
    json summary = TrainResultToJson(result);
    summary["format"] = "trainscope.train_summary";
    summary["version"] = 1;
    TS_RETURN_IF_ERROR(WriteFileAtomic(train_dir_ + "/summary.json", summary.dump(2) + "\n"));
  }
#ifdef TS_TRAIN_WITH_COMM
  if (world_.comm) {
    sync_.reset();
    TS_RETURN_IF_ERROR(seam_->Barrier("final barrier"));
  }
#endif
  return result;
}

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
    Trainer trainer(config, options, &st);
    r = trainer.Run();
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
