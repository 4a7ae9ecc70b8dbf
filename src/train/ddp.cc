// Bucketed gradient all-reduce overlapped with backward (see ddp.h).
#include "train/ddp.h"

#include <chrono>

#include "absl/strings/str_cat.h"

namespace trainscope::train {

GradSync::GradSync(CommSeam* seam, const std::vector<std::pair<std::string, torch::Tensor>>& params,
                   double bucket_bytes)
    : seam_(seam) {
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
  b.work = seam_->AllReduceAsync(b.flat.data_ptr<float>(), static_cast<size_t>(b.flat.numel()),
                                 absl::StrCat("step ", seam_->step(), " grad bucket ", index));
}

absl::Status GradSync::Finish(double* wait_ms) {
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
    absl::Status st = buckets_[i].work->Wait();
    if (!st.ok() && first.ok()) {
      first = absl::Status(
          st.code(), absl::StrCat("gradient all-reduce of bucket ", i, " of ", buckets_.size(),
                                  " on rank ", seam_->rank(), ": ", st.message()));
    }
  }
  *wait_ms +=
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  armed_ = false;
  if (!first.ok()) return first;
  const double scale = 1.0 / seam_->world_size();
  for (Bucket& b : buckets_) {
    b.flat.mul_(scale);
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
  return absl::OkStatus();
}

}  // namespace trainscope::train
