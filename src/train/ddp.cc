// Bucketed gradient all-reduce overlapped with backward (see ddp.h).
#include "train/ddp.h"

#include <chrono>

#include "absl/strings/str_cat.h"

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

}  // namespace

GradSync::GradSync(CommSeam* seam, const std::vector<std::pair<std::string, torch::Tensor>>& params,
                   double bucket_bytes, const CommConfig& compression, uint64_t seed)
    : seam_(seam) {
  // The config was validated: the name parses.
  kind_ = ParseCompression(compression.compression).value_or(CompressionKind::kNone);
  warmup_steps_ = compression.compression_warmup_steps;
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

absl::Status GradSync::ReduceCompressed() {
  // PowerSGD works on each parameter's matrix, top-k on each bucket.
  std::vector<torch::Tensor> grads;
  for (Bucket& b : buckets_) {
    if (step_kind_ == CompressionKind::kTopK) {
      grads.push_back(b.flat);
      continue;
    }
    for (size_t s = 0; s < b.params.size(); ++s) {
      const torch::Tensor& p = params_[b.params[s]];
      grads.push_back(b.flat.narrow(0, b.offsets[s], p.numel()).view(p.sizes()));
    }
  }
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

}  // namespace trainscope::train
