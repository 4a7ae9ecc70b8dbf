// The Trainer's checkpoint and resume (trainer_impl.h, "checkpoint"): a save snapshots the
// model, the AdamW state, the scheduler's position, every rank's RNG state and data position
// and every rank's gradient-compressor state into host memory that the Checkpointer writes;
// Restore() puts a checkpoint back. Which checkpoint to resume from is decided without
// libtorch (ResolveResume, trainer_world.h).
#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <sstream>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "train/trainer_impl.h"
#include "trainscope/ckpt/checkpoint.h"
#include "trainscope/core/formats.h"
#include "trainscope/core/json_text.h"
#include "trainscope/core/os.h"
#include "trainscope/core/status.h"

namespace trainscope::train {
namespace {

using json = nlohmann::json;
using ParamList = std::vector<std::pair<std::string, torch::Tensor>>;

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

// The model's parameters from <path>/model.safetensors.
absl::Status RestoreModel(const std::string& path, const ParamList& named) {
  const std::string model_file = path + "/model.safetensors";
  TS_ASSIGN_OR_RETURN(std::vector<ckpt::TensorData> model, ckpt::ReadSafetensors(model_file));
  std::map<std::string, const ckpt::TensorData*> by_name;
  for (const auto& t : model) by_name[t.entry.name] = &t;
  for (const auto& [name, p] : named) {
    auto it = by_name.find(name);
    if (it == by_name.end()) {
      return absl::InvalidArgumentError(absl::StrCat(model_file, ": no tensor \"", name, "\""));
    }
    TS_RETURN_IF_ERROR(LoadTensor(*it->second, model_file, p));
  }
  return absl::OkStatus();
}

// AdamW moments and per-parameter step counts (`steps`: meta.json's param_steps) from
// <path>/optimizer.safetensors. The state objects are created here as AdamW's first step
// would create them.
absl::Status RestoreOptimizer(const std::string& path, const json& steps, const ParamList& named,
                              torch::optim::AdamW* optimizer) {
  if (steps.empty()) return absl::OkStatus();
  const std::string opt_file = path + "/optimizer.safetensors";
  TS_ASSIGN_OR_RETURN(std::vector<ckpt::TensorData> opt, ckpt::ReadSafetensors(opt_file));
  std::map<std::string, const ckpt::TensorData*> opt_by_name;
  for (const auto& t : opt) opt_by_name[t.entry.name] = &t;
  for (const auto& [name, p] : named) {
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
    optimizer->state()[OptimizerStateKey(p)] = std::move(a);
  }
  return absl::OkStatus();
}

}  // namespace

std::string Trainer::CheckpointDir() const { return CheckpointDirOf(config_, options_.run_dir); }

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
  return {{"format", formats::kCheckpointRank},
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

absl::StatusOr<std::vector<std::string>> Trainer::GatherRankStates(int step) {
  std::vector<std::string> rank_states{RankState(step).dump()};
#ifdef TS_TRAIN_WITH_COMM
  // As bytes over an int32 all-gather, lengths first.
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
      rank_states[r].assign(
          reinterpret_cast<const char*>(recv.data() + static_cast<size_t>(words) * r), lens[r]);
    }
  }
#endif
  return rank_states;
}

absl::StatusOr<std::string> Trainer::SaveCheckpoint(int step, bool anomaly, const json& extra) {
  const auto t0 = TrainClock::now();
  // Every rank's small state to rank 0.
  TS_ASSIGN_OR_RETURN(std::vector<std::string> rank_states, GatherRankStates(step));
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

absl::Status Trainer::Restore(const std::string& path) {
  const std::string meta_path = absl::StrCat(path, "/", run_dir::kCheckpointMeta);
  TS_ASSIGN_OR_RETURN(json meta, ReadJson(meta_path));
  const int64_t step = meta.value("step", int64_t{-1});
  if (step < 0 || step > config_.train.steps) {
    return absl::InvalidArgumentError(absl::StrCat(meta_path, ": step ", step,
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
  TS_RETURN_IF_ERROR(RestoreModel(path, named_));
  TS_RETURN_IF_ERROR(
      RestoreOptimizer(path, meta["extra"]["optimizer"].value("param_steps", json::object()),
                       named_, optimizer_.get()));
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

}  // namespace trainscope::train
