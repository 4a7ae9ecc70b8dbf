// The training loop: data -> forward -> backward (gradient all-reduce overlapped through
// hooks) -> optimizer, each phase timed, every step logged per rank. The Trainer class
// (trainer_impl.h) splits it into setup / step / checkpoint / summarize: setup, the step,
// its anomaly handling and the libtorch part of the summary are here; checkpoint and resume
// in trainer_checkpoint.cc; what needs no libtorch in trainer_world.cc (the job, stopping,
// the resume choice) and trainer_summary.cc (the result's figures and files). Train() at
// the end is the adapter boundary that turns exceptions into Status.
#include "trainscope/train/trainer.h"

#include <torch/torch.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "train/model.h"
#include "train/trainer_impl.h"
#include "train/validation.h"
#include "trainscope/core/os.h"
#include "trainscope/core/run_dir.h"
#include "trainscope/core/status.h"
#include "trainscope/core/table.h"
#include "trainscope/tokenizer/tokenizer.h"

namespace trainscope::train {

using json = nlohmann::json;
using Clock = TrainClock;

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
  if (options_.run_dir.empty()) return absl::InvalidArgumentError("no run directory given");
  TS_RETURN_IF_ERROR(JoinJob());
  TS_RETURN_IF_STOPPED(options_, *st_);
  // Everything sized by the config, once: tokenizer, memory check, corpus.
  TS_RETURN_IF_ERROR(LoadInputs());
  TS_RETURN_IF_STOPPED(options_, *st_);

  TS_RETURN_IF_ERROR(BuildModelAndOptimizer());
  train_dir_ = run_dir::Join(options_.run_dir, run_dir::kTrain);
  TS_RETURN_IF_ERROR(MakeDirs(train_dir_));

  // Resume before the parameter broadcast: every rank loads the same checkpoint.
  if (!options_.resume.empty()) {
    TS_ASSIGN_OR_RETURN(std::string path, ResolveResume(options_.resume, CheckpointDir(), world_,
                                                        options_.on_notice));
    if (!path.empty()) TS_RETURN_IF_ERROR(Restore(path));
  }
  TS_RETURN_IF_ERROR(StartGradSync());
  SetUpAnomalies();
  if (world_.rank == 0) {
    TS_RETURN_IF_ERROR(WriteFileAtomic(run_dir::TrainConfigPath(options_.run_dir),
                                       TrainConfigToJson(config_).dump(2) + "\n"));
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
    checkpointer_ =
        std::make_unique<Checkpointer>(CheckpointerOptionsFor(config_, CheckpointDir(), st_));
  }
  loader_ = std::make_unique<BatchLoader>(&corpus_, LoaderOptionsFor(config_, world_, start_step_));
  return absl::OkStatus();
}

absl::Status Trainer::JoinJob() {
  TS_ASSIGN_OR_RETURN(world_, JoinWorld(config_in_, options_));
  st_->rank = world_.rank;
#ifdef TS_TRAIN_WITH_COMM
  if (world_.comm) TS_RETURN_IF_ERROR(StartCommWatchdog(config_in_, options_, *world_.comm, st_));
#endif
  return CheckRunInjections(config_in_, options_, world_);
}

absl::Status Trainer::LoadInputs() {
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
  const TrainOptions& options = options_;
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
  return absl::OkStatus();
}

absl::Status Trainer::StartGradSync() {
#ifdef TS_TRAIN_WITH_COMM
  if (!world_.comm) return absl::OkStatus();
  world_.comm->AddObserver(world_.timer.get());
  seam_ = std::make_unique<CommSeam>(world_.comm.get(), options_.inject, options_.stop,
                                     options_.on_rank_notice);
  sync_ = std::make_unique<GradSync>(seam_.get(), named_, config_.train.bucket_mb * 1e6,
                                     config_.comm, config_.train.seed);
  TS_RETURN_IF_ERROR(sync_->BroadcastParams());
  if (!result_.resumed_from.empty()) {  // the compressor's state (or a warning)
    std::string notice;
    TS_RETURN_IF_ERROR(
        sync_->RestoreCompressor(result_.resumed_from, resumed_compression_, &notice));
    if (!notice.empty() && options_.on_notice) options_.on_notice(notice);
  }
#endif
  return absl::OkStatus();
}

void Trainer::SetUpAnomalies() {
  // The guard hooks every parameter and taps every module output.
  fp16_ = config_.train.precision == "fp16";
  bool numeric_inject = false;
  for (const Injection& inj : options_.inject) numeric_inject |= !IsCommFault(inj.kind);
  if (config_.anomaly.nonfinite_checks || fp16_ || numeric_inject) {
    NonfiniteGuardOptions go;
    go.rank = world_.rank;
    go.checks = config_.anomaly.nonfinite_checks;
    go.fp16 = fp16_ && autocast_dtype_ != at::kHalf;  // emulation only where not autocast
    go.inject = options_.inject;
    guard_ = std::make_unique<NonfiniteGuard>(model_, named_, std::move(go));
  }
  if (options_.dump.enabled()) {
    result_.dump_dir = run_dir::Join(options_.run_dir, run_dir::kDump);
    dump_ = std::make_unique<DumpTap>(model_, guard_.get(), named_, options_.dump, world_.rank,
                                      result_.dump_dir);
  }
  spike_ = std::make_unique<SpikeDetector>(config_.anomaly.spike);
  if (fp16_) scaler_ = std::make_unique<LossScaler>(config_.fp16);
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
  if (dump_) dump_->BeginStep(step);
  TS_RETURN_IF_ERROR(ForwardBackward(&s));
  if (dump_) TS_RETURN_IF_ERROR(dump_->EndStep(&result_.dump_steps));
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
  if (s->step > start_step_ + 1 || config_.train.steps == start_step_ + 1) sums_.AddTimed(rec);
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
  sums_.obs_ms += obs_ms;
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
// Summarize
// ---------------------------------------------------------------------------------------

absl::StatusOr<TrainResult> Trainer::Summarize() {
  TrainResult& result = result_;
  // A save still writing finishes before the run reports success.
  if (checkpointer_) TS_RETURN_IF_ERROR(checkpointer_->Wait(&result.checkpoint_blocked_ms));
  const double seconds = std::chrono::duration<double>(Clock::now() - loop_start_).count();
  // The device's figures: memory (and MFU in SummarizeLoop, from the device's name).
  result.device = device_.str();
  result.device_name = device_name_;
  const DeviceMemory memory = ReadDeviceMemory(device_);
  result.memory_source = memory.source;
  result.memory_peak_bytes = memory.peak_bytes;
  result.memory_reserved_bytes = memory.reserved_bytes;
  SummarizeLoop(sums_, seconds, config_, world_.world_size, &result);

  // Weights checksum: xxh3-64 over every parameter's bytes in name order; ranks of a
  // data-parallel run must agree bit for bit.
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  std::vector<ParamDigest> params;
  for (const auto& [name, p] : named_) {
    torch::Tensor t = p.detach().to(torch::kCPU).contiguous();
    const size_t bytes = static_cast<size_t>(t.numel()) * t.element_size();
    XXH3_64bits_update(state, t.data_ptr(), bytes);
    params.push_back({name, t.numel(), XXH3_64bits(t.data_ptr(), bytes), t.norm().item<double>()});
  }
  result.weights_checksum = Hex64(XXH3_64bits_digest(state));
  XXH3_freeState(state);
  TS_RETURN_IF_ERROR(WriteRunFiles(result, params, options_, st_->metrics.get()));
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

}  // namespace

absl::StatusOr<TrainResult> Train(const TrainConfig& config, const TrainOptions& options) {
  RunState st;
  ActiveRun active(&st);  // published for DumpOnFatalError; withdrawn before `st` goes
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
  absl::Status written = WriteRunEnd(options, st, r.status());
  if (r.ok() && !written.ok()) r = written;
  return r;
}

}  // namespace trainscope::train
