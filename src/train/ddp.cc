// Bucketed gradient all-reduce overlapped with backward (see ddp.h).
#include "train/ddp.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>

#include "absl/strings/str_cat.h"
#include "trainscope/ckpt/checkpoint.h"
#include "trainscope/core/status.h"

namespace trainscope::train {

namespace {

double DdpMsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

comm::DType DdpWireType(const torch::Tensor& t) {
  switch (t.scalar_type()) {
    case torch::kHalf:
      return comm::DType::kFloat16;
    case torch::kBFloat16:
      return comm::DType::kBFloat16;
    case torch::kInt:
      return comm::DType::kInt32;
    case torch::kLong:
      return comm::DType::kInt64;
    default:
      return comm::DType::kFloat32;
  }
}

// The point-to-point tag of the compressor state's trip to rank 0 at a checkpoint.
constexpr int kDdpCompressorStateTag = 7001;
constexpr char kDdpSharedStateFile[] = "compression.safetensors";

std::string DdpRankStateFile(int rank) {
  return absl::StrCat("compression.rank", rank, ".safetensors");
}

// Copies a fp32 tensor into the snapshot's tensor file `file` (safetensors F32).
void DdpSnapshotTensor(CheckpointSnapshot* snap, const std::string& file, const std::string& name,
                       const torch::Tensor& t) {
  torch::Tensor c = t.to(torch::kCPU).contiguous();
  std::vector<uint64_t> shape(c.sizes().begin(), c.sizes().end());
  const uint64_t bytes = static_cast<uint64_t>(c.numel()) * sizeof(float);
  std::memcpy(snap->AddFileTensor(file, name, "F32", std::move(shape), bytes), c.data_ptr(), bytes);
}

}  // namespace

GradSync::GradSync(CommSeam* seam, const std::vector<std::pair<std::string, torch::Tensor>>& params,
                   double bucket_bytes, const CommConfig& compression, uint64_t seed)
    : seam_(seam) {
  // The config was validated: the name parses.
  kind_ = ParseCompression(compression.compression).value_or(CompressionKind::kNone);
  warmup_steps_ = compression.compression_warmup_steps;
  comm_config_ = compression;
  seed_ = seed;
  if (kind_ == CompressionKind::kPowerSgd) {
    compressor_ = std::make_unique<PowerSgdCompressor>(compression.powersgd_rank, seed);
  } else if (kind_ == CompressionKind::kTopK) {
    compressor_ = std::make_unique<TopKCompressor>(compression.topk_ratio);
  }
  for (const auto& [name, p] : params) {
    names_.push_back(name);
    params_.push_back(p);
  }
  where_.resize(params_.size());
  // Reverse order: the last layers' gradients are ready first.
  Bucket cur;
  int64_t cur_elems = 0;
  auto close = [&] {
    if (cur.params.empty()) return;
    cur.flat = torch::zeros({cur_elems}, torch::kFloat);
    cur.pending = static_cast<int>(cur.params.size());
    buckets_.push_back(std::move(cur));
    cur = Bucket();
    cur_elems = 0;
  };
  for (int i = static_cast<int>(params_.size()) - 1; i >= 0; --i) {
    const int64_t n = params_[i].numel();
    where_[i] = {static_cast<int>(buckets_.size()), static_cast<int>(cur.params.size())};
    cur.params.push_back(i);
    cur.offsets.push_back(cur_elems);
    cur_elems += n;
    if (cur_elems * 4.0 >= bucket_bytes) close();
  }
  close();
  for (size_t i = 0; i < params_.size(); ++i) {
    const int index = static_cast<int>(i);
    params_[i].register_hook([this, index](torch::Tensor grad) { OnGrad(index, grad); });
  }
}

GradSync::~GradSync() {
  // Never leave an all-reduce writing into freed buckets.
  for (Bucket& b : buckets_) {
    if (b.work) (void)b.work->Wait();
  }
}

absl::Status GradSync::BroadcastParams() {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    // The communicator moves host memory: a parameter on a GPU travels through a host copy.
    const bool on_host = params_[i].device().is_cpu();
    torch::Tensor host = on_host ? params_[i] : params_[i].to(torch::kCPU).contiguous();
    absl::Status st = seam_->Broadcast(host.data_ptr<float>(), static_cast<size_t>(host.numel()),
                                       /*root=*/0, absl::StrCat("init broadcast ", names_[i]));
    if (st.ok() && !on_host) params_[i].copy_(host);
    if (!st.ok()) {
      return absl::Status(st.code(),
                          absl::StrCat("broadcast of parameter ", names_[i], " from rank 0 (rank ",
                                       seam_->rank(), "): ", st.message()));
    }
  }
  return absl::OkStatus();
}

void GradSync::Arm() {
  armed_ = true;
  // Steps count from 1: steps 1..warmup all-reduce uncompressed.
  step_kind_ = seam_->step() > warmup_steps_ ? kind_ : CompressionKind::kNone;
  step_stats_ = CompressStats();
  for (Bucket& b : buckets_) {
    b.pending = static_cast<int>(b.params.size());
    b.launched = false;
    b.work.reset();
  }
}

void GradSync::OnGrad(int param, const torch::Tensor& grad) {
  if (!armed_) return;
  // The hook sees the gradient of this backward before it is accumulated into .grad; the
  // step's full gradient is that plus what earlier micro-steps accumulated.
  auto [bi, slot] = where_[param];
  Bucket& b = buckets_[bi];
  torch::NoGradGuard no_grad;
  torch::Tensor dst = b.flat.narrow(0, b.offsets[slot], params_[param].numel());
  dst.copy_(grad.reshape({-1}));  // device -> host when the model is on a GPU
  const torch::Tensor& acc = params_[param].grad();
  if (acc.defined()) dst.add_(acc.reshape({-1}).to(torch::kCPU));  // no copy on the CPU
  if (--b.pending == 0) Launch(b);
}

void GradSync::Launch(Bucket& b) {
  b.launched = true;
  const size_t index = static_cast<size_t>(&b - buckets_.data());
  const size_t count = static_cast<size_t>(b.flat.numel());
  switch (step_kind_) {
    case CompressionKind::kNone:
      step_stats_.comm_bytes += static_cast<int64_t>(count * sizeof(float));
      b.work = seam_->AllReduceAsync(b.flat.data_ptr<float>(), count,
                                     absl::StrCat("step ", seam_->step(), " grad bucket ", index));
      break;
    case CompressionKind::kFp16:
    case CompressionKind::kBf16: {
      auto t0 = std::chrono::steady_clock::now();
      b.low = LowPrecisionCast(b.flat, step_kind_, seam_->world_size());
      step_stats_.compress_ms += DdpMsSince(t0);
      step_stats_.comm_bytes += static_cast<int64_t>(count * b.low.element_size());
      b.work = seam_->AllReduceAsync(b.low.data_ptr(), count, DdpWireType(b.low),
                                     absl::StrCat("step ", seam_->step(), " grad bucket ", index,
                                                  " ", CompressionName(step_kind_)));
      break;
    }
    default:  // powersgd / topk: all buckets together in Finish
      b.work.reset();
      break;
  }
}

std::vector<torch::Tensor> GradSync::CompressorInputs(CompressionKind kind) {
  // PowerSGD works on each parameter's matrix, top-k on each bucket.
  std::vector<torch::Tensor> grads;
  for (Bucket& b : buckets_) {
    if (kind == CompressionKind::kTopK) {
      grads.push_back(b.flat);
      continue;
    }
    for (size_t s = 0; s < b.params.size(); ++s) {
      const torch::Tensor& p = params_[b.params[s]];
      grads.push_back(b.flat.narrow(0, b.offsets[s], p.numel()).view(p.sizes()));
    }
  }
  return grads;
}

absl::Status GradSync::ReduceCompressed() {
  std::vector<torch::Tensor> grads = CompressorInputs(step_kind_);
  const std::string prefix = absl::StrCat("step ", seam_->step(), " grad ");
  Collectives c;
  c.world_size = seam_->world_size();
  c.all_reduce = [&](torch::Tensor& buf, const std::string& stage) {
    return seam_->AllReduce(buf.data_ptr(), static_cast<size_t>(buf.numel()), DdpWireType(buf),
                            prefix + stage);
  };
  c.all_gather = [&](const torch::Tensor& send, torch::Tensor& recv, const std::string& stage) {
    return seam_->AllGather(send.data_ptr(), recv.data_ptr(), static_cast<size_t>(send.numel()),
                            DdpWireType(send), prefix + stage);
  };
  absl::Status st = compressor_->Reduce(grads, c, &step_stats_);
  if (!st.ok()) {
    return absl::Status(
        st.code(), absl::StrCat("gradient ", CompressionName(step_kind_), " reduction on rank ",
                                seam_->rank(), ": ", st.message()));
  }
  return absl::OkStatus();
}

absl::Status GradSync::Finish(double* wait_ms, CompressStats* stats) {
  torch::NoGradGuard no_grad;
  // Parameters that got no gradient this step contribute zeros (or what they accumulated).
  for (Bucket& b : buckets_) {
    if (b.launched) continue;
    for (size_t s = 0; s < b.params.size(); ++s) {
      const torch::Tensor& p = params_[b.params[s]];
      torch::Tensor dst = b.flat.narrow(0, b.offsets[s], p.numel());
      if (p.grad().defined()) {
        dst.copy_(p.grad().reshape({-1}));
      } else {
        dst.zero_();
      }
    }
    b.pending = 0;
    Launch(b);
  }
  auto t0 = std::chrono::steady_clock::now();
  absl::Status first;
  for (size_t i = 0; i < buckets_.size(); ++i) {
    if (!buckets_[i].work) continue;  // powersgd / topk: reduced below
    absl::Status st = buckets_[i].work->Wait();
    if (!st.ok() && first.ok()) {
      first = absl::Status(
          st.code(), absl::StrCat("gradient all-reduce of bucket ", i, " of ", buckets_.size(),
                                  " on rank ", seam_->rank(), ": ", st.message()));
    }
  }
  if (first.ok() && compressor_ != nullptr &&
      (step_kind_ == CompressionKind::kPowerSgd || step_kind_ == CompressionKind::kTopK)) {
    first = ReduceCompressed();
  }
  *wait_ms += DdpMsSince(t0);
  armed_ = false;
  if (!first.ok()) return first;
  // Plain buckets hold the sum over ranks; compressed ones already the mean.
  const double scale = 1.0 / seam_->world_size();
  const bool low = step_kind_ == CompressionKind::kFp16 || step_kind_ == CompressionKind::kBf16;
  for (Bucket& b : buckets_) {
    if (step_kind_ == CompressionKind::kNone) {
      b.flat.mul_(scale);
    } else if (low) {
      auto tr = std::chrono::steady_clock::now();
      LowPrecisionRestore(b.low, b.flat);
      step_stats_.compress_ms += DdpMsSince(tr);
    }
    for (size_t s = 0; s < b.params.size(); ++s) {
      torch::Tensor& p = params_[b.params[s]];
      torch::Tensor src = b.flat.narrow(0, b.offsets[s], p.numel()).view(p.sizes());
      if (p.grad().defined()) {
        p.mutable_grad().copy_(src);
      } else {
        p.mutable_grad() = p.device().is_cpu() ? src.clone() : src.to(p.device());
      }
    }
    b.work.reset();
  }
  if (stats != nullptr) {
    stats->comm_bytes += step_stats_.comm_bytes;
    stats->compress_ms += step_stats_.compress_ms;
  }
  return absl::OkStatus();
}

// --- checkpoint ---

nlohmann::json GradSync::CompressionSettings() const {
  nlohmann::json s = {{"kind", CompressionName(kind_)}};
  if (kind_ == CompressionKind::kPowerSgd) {
    s["powersgd_rank"] = comm_config_.powersgd_rank;
    s["min_compression_rate"] = 2.0;  // PowerSgdCompressor's default, as GradSync builds it
    s["seed"] = seed_;
  } else if (kind_ == CompressionKind::kTopK) {
    s["topk_ratio"] = comm_config_.topk_ratio;
  }
  s["world_size"] = seam_->world_size();
  return s;
}

// The per-rank tensors of every rank have the same shapes (same model, same settings), so
// each rank sends one flat fp32 buffer and rank 0 cuts it back into tensors. Point-to-point
// rather than an all-gather: only rank 0 holds world_size copies.
absl::StatusOr<nlohmann::json> GradSync::SnapshotCompressor(CheckpointSnapshot* snap) {
  nlohmann::json meta = {{"settings", CompressionSettings()},
                         {"warmup_steps", warmup_steps_},
                         {"files", nlohmann::json::array()}};
  if (compressor_ == nullptr) return meta;
  const std::vector<CompressorStateTensor> state = compressor_->ExportState();
  if (state.empty()) return meta;  // not run yet (warm-up): the same on every rank
  const int rank = seam_->rank(), world = seam_->world_size();
  int64_t total = 0;
  for (const CompressorStateTensor& t : state) total += t.per_rank ? t.tensor.numel() : 0;
  torch::Tensor mine = torch::empty({total}, torch::kFloat);
  int64_t at = 0;
  for (const CompressorStateTensor& t : state) {
    if (!t.per_rank) continue;
    mine.narrow(0, at, t.tensor.numel()).copy_(t.tensor.reshape({-1}));
    at += t.tensor.numel();
  }
  comm::Communicator& comm = seam_->comm();
  if (rank != 0) {
    if (total == 0) return meta;
    absl::Status st = comm.Send(mine.data_ptr<float>(), static_cast<size_t>(total),
                                comm::DType::kFloat32, 0, kDdpCompressorStateTag);
    if (!st.ok()) {
      return absl::Status(
          st.code(), absl::StrCat("sending the gradient-compression state to rank 0 (rank ", rank,
                                  "): ", st.message()));
    }
    return meta;
  }
  bool shared = false;
  for (const CompressorStateTensor& t : state) {
    if (t.per_rank) continue;
    DdpSnapshotTensor(snap, kDdpSharedStateFile, t.name, t.tensor);
    shared = true;
  }
  if (shared) meta["files"].push_back(kDdpSharedStateFile);
  torch::Tensor from = total > 0 && world > 1 ? torch::empty({total}, torch::kFloat) : mine;
  for (int r = 0; r < world && total > 0; ++r) {
    torch::Tensor src = r == 0 ? mine : from;
    if (r > 0) {
      absl::Status st = comm.Recv(src.data_ptr<float>(), static_cast<size_t>(total),
                                  comm::DType::kFloat32, r, kDdpCompressorStateTag);
      if (!st.ok()) {
        return absl::Status(st.code(),
                            absl::StrCat("receiving rank ", r,
                                         "'s gradient-compression state (rank 0): ", st.message()));
      }
    }
    const std::string file = DdpRankStateFile(r);
    at = 0;
    for (const CompressorStateTensor& t : state) {
      if (!t.per_rank) continue;
      DdpSnapshotTensor(snap, file, t.name,
                        src.narrow(0, at, t.tensor.numel()).view(t.tensor.sizes()));
      at += t.tensor.numel();
    }
    meta["files"].push_back(file);
  }
  return meta;
}

absl::Status GradSync::RestoreCompressor(const std::string& path, const nlohmann::json& saved,
                                         std::string* notice) {
  notice->clear();
  const int rank = seam_->rank(), world = seam_->world_size();
  const CompressorResume decision = DecideCompressorResume(saved, CompressionSettings());
  if (!decision.restore || compressor_ == nullptr) {
    if (compressor_ != nullptr) compressor_->Reset();
    if (rank == 0) *notice = decision.warning;
    return absl::OkStatus();
  }
  // This rank's part: the shared file and its own, as the checkpoint lists them.
  std::string problem;
  std::map<std::string, torch::Tensor> state;
  const nlohmann::json files = saved.value("files", nlohmann::json::array());
  for (const nlohmann::json& f : files) {
    const std::string name = f.is_string() ? f.get<std::string>() : std::string();
    if (name != kDdpSharedStateFile && name != DdpRankStateFile(rank)) continue;
    const std::string file = absl::StrCat(path, "/", name);
    absl::StatusOr<std::vector<ckpt::TensorData>> tensors = ckpt::ReadSafetensors(file);
    if (!tensors.ok()) {
      problem = std::string(tensors.status().message());
      break;
    }
    for (ckpt::TensorData& t : *tensors) {
      if (t.entry.dtype != "F32") {
        problem =
            absl::StrCat(file, ": tensor \"", t.entry.name, "\" is ", t.entry.dtype, ", not F32");
        break;
      }
      std::vector<int64_t> shape(t.entry.shape.begin(), t.entry.shape.end());
      state[t.entry.name] = torch::from_blob(t.bytes.data(), shape, torch::kFloat).clone();
    }
  }
  if (problem.empty() && !files.empty() &&
      std::find(files.begin(), files.end(), DdpRankStateFile(rank)) == files.end()) {
    problem = absl::StrCat(path, ": meta.json lists no ", DdpRankStateFile(rank));
  }
  if (problem.empty()) {
    absl::Status st = compressor_->ImportState(CompressorInputs(kind_), state);
    if (!st.ok()) problem = absl::StrCat(path, ": ", st.message());
  }
  // Every rank or none: the lowest rank that could not restore (world when all could).
  int32_t first_bad = problem.empty() ? world : rank;
  TS_RETURN_IF_ERROR(
      seam_->comm().AllReduce(&first_bad, 1, comm::DType::kInt32, comm::ReduceOp::kMin));
  const char* kind = CompressionName(kind_);
  if (first_bad < world) {
    compressor_->Reset();
    if (rank == first_bad) {
      *notice = absl::StrCat("warning: resume: rank ", rank, ": ", problem, "; the ", kind,
                             " compressor starts fresh on every rank, so the run differs from "
                             "an uninterrupted one");
    }
    return absl::OkStatus();
  }
  if (rank == 0) {
    *notice = state.empty()
                  ? absl::StrCat("resume: the ", kind,
                                 " compressor had not run when the checkpoint was saved; it "
                                 "starts as it would have")
                  : absl::StrCat("resume: restored the ", kind, " gradient-compression state (",
                                 state.size(), " tensors on rank 0, ", world, " ranks)");
  }
  return absl::OkStatus();
}

}  // namespace trainscope::train
