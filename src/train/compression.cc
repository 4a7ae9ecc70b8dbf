// Gradient compressors of the data-parallel path (see compression.h).
#include "train/compression.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "trainscope/core/status.h"

namespace trainscope::train {
namespace {

using CompressClock = std::chrono::steady_clock;

double CompressMsSince(CompressClock::time_point t0) {
  return std::chrono::duration<double, std::milli>(CompressClock::now() - t0).count();
}

// Runs a collective and books its time apart from compression time.
class CompressTimer {
 public:
  CompressTimer() : start_(CompressClock::now()) {}
  template <typename Fn>
  absl::Status Collective(Fn&& fn) {
    auto t0 = CompressClock::now();
    absl::Status st = fn();
    collective_ms_ += CompressMsSince(t0);
    return st;
  }
  double CompressMs() const { return std::max(0.0, CompressMsSince(start_) - collective_ms_); }

 private:
  CompressClock::time_point start_;
  double collective_ms_ = 0;
};

int64_t CompressPayloadBytes(const torch::Tensor& t) {
  return t.numel() * static_cast<int64_t>(t.element_size());
}

// A private fp32 copy of state[name] when it has `shape`; else InvalidArgument.
absl::StatusOr<torch::Tensor> CompressTakeState(const std::map<std::string, torch::Tensor>& state,
                                                const std::string& name,
                                                const std::vector<int64_t>& shape) {
  auto it = state.find(name);
  if (it == state.end())
    return absl::InvalidArgumentError(absl::StrCat("no tensor \"", name, "\""));
  const torch::Tensor& t = it->second;
  if (t.scalar_type() != torch::kFloat || t.sizes().vec() != shape) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor \"", name, "\" is ", std::string(c10::toString(t.scalar_type())), " [",
                     absl::StrJoin(t.sizes().vec(), ","), "], the compressor wants Float [",
                     absl::StrJoin(shape, ","), "]"));
  }
  return t.to(torch::kCPU).contiguous().clone();
}

// "powersgd (powersgd_rank 4, seed 7, ...)": a settings object in words, world_size left out.
std::string CompressDescribe(const nlohmann::json& settings) {
  std::vector<std::string> parts;
  for (auto it = settings.begin(); it != settings.end(); ++it) {
    if (it.key() != "kind" && it.key() != "world_size") {
      parts.push_back(absl::StrCat(it.key(), " ", it.value().dump()));
    }
  }
  const std::string kind = settings.value("kind", "none");
  return parts.empty() ? kind : absl::StrCat(kind, " (", absl::StrJoin(parts, ", "), ")");
}

}  // namespace

// Decision table: the current kind stateless -> nothing to restore (warn only when the
// checkpoint holds state that is dropped); stateful -> restore only equal settings.
CompressorResume DecideCompressorResume(const nlohmann::json& saved,
                                        const nlohmann::json& current) {
  CompressorResume out;
  const std::string kind = current.value("kind", "none");
  const bool stateful = kind == "powersgd" || kind == "topk";
  const bool has_saved =
      saved.is_object() && saved.contains("settings") && saved["settings"].is_object();
  const nlohmann::json none = nlohmann::json::object();
  const nlohmann::json& was = has_saved ? saved["settings"] : none;
  const std::string saved_kind = was.value("kind", "none");
  const bool saved_state = saved_kind == "powersgd" || saved_kind == "topk";
  const std::string fresh =
      absl::StrCat("; the ", kind, " compressor starts fresh (error feedback zero",
                   kind == "powersgd" ? ", Q drawn from the seed" : "",
                   "), so the run differs from an uninterrupted one");
  if (!stateful) {
    if (saved_state) {
      out.warning = absl::StrCat("warning: resume: the checkpoint's ", saved_kind,
                                 " gradient-compression state is dropped: this run has "
                                 "comm.compression ",
                                 kind);
    }
    return out;
  }
  if (!has_saved) {
    out.warning = absl::StrCat(
        "warning: resume: the checkpoint holds no gradient-compression state (written "
        "without comm.compression ",
        kind, " or by an older trainscope)", fresh);
    return out;
  }
  if (was.value("world_size", 0) != current.value("world_size", 0)) {
    out.warning = absl::StrCat(
        "warning: resume: the checkpoint's gradient-compression state is from ",
        was.value("world_size", 0), " ranks, this run has ", current.value("world_size", 0), fresh);
    return out;
  }
  if (was != current) {
    out.warning =
        absl::StrCat("warning: resume: the checkpoint's gradient-compression state is for ",
                     CompressDescribe(was), ", this run uses ", CompressDescribe(current), fresh);
    return out;
  }
  out.restore = true;
  return out;
}

absl::StatusOr<CompressionKind> ParseCompression(const std::string& name) {
  if (name == "none") return CompressionKind::kNone;
  if (name == "fp16") return CompressionKind::kFp16;
  if (name == "bf16") return CompressionKind::kBf16;
  if (name == "powersgd") return CompressionKind::kPowerSgd;
  if (name == "topk") return CompressionKind::kTopK;
  return absl::InvalidArgumentError(
      absl::StrCat("\"", name, "\" is not none|fp16|bf16|powersgd|topk"));
}

const char* CompressionName(CompressionKind kind) {
  switch (kind) {
    case CompressionKind::kFp16:
      return "fp16";
    case CompressionKind::kBf16:
      return "bf16";
    case CompressionKind::kPowerSgd:
      return "powersgd";
    case CompressionKind::kTopK:
      return "topk";
    default:
      return "none";
  }
}

torch::Tensor LowPrecisionCast(const torch::Tensor& flat, CompressionKind kind, int world_size) {
  const auto type = kind == CompressionKind::kBf16 ? torch::kBFloat16 : torch::kHalf;
  return (flat / static_cast<double>(world_size)).to(type).contiguous();
}

void LowPrecisionRestore(const torch::Tensor& reduced, torch::Tensor& flat) {
  flat.copy_(reduced);  // converts to fp32
}

// Modified Gram-Schmidt over the columns, accumulated in double, in one fixed order: the
// input (the all-reduced P) is identical on every rank and so is the output.
void OrthogonalizeColumns(torch::Tensor& matrix) {
  const int64_t n = matrix.size(0), r = matrix.size(1);
  float* a = matrix.data_ptr<float>();
  for (int64_t i = 0; i < r; ++i) {
    double norm2 = 0;
    for (int64_t k = 0; k < n; ++k) norm2 += static_cast<double>(a[k * r + i]) * a[k * r + i];
    // The small epsilon keeps a vanished column (a zero gradient) at zero instead of NaN.
    const double inv = 1.0 / (std::sqrt(norm2) + 1e-8);
    for (int64_t k = 0; k < n; ++k) a[k * r + i] = static_cast<float>(a[k * r + i] * inv);
    for (int64_t j = i + 1; j < r; ++j) {
      double dot = 0;
      for (int64_t k = 0; k < n; ++k) dot += static_cast<double>(a[k * r + i]) * a[k * r + j];
      for (int64_t k = 0; k < n; ++k)
        a[k * r + j] = static_cast<float>(a[k * r + j] - dot * a[k * r + i]);
    }
  }
}

// --- PowerSGD ---

PowerSgdCompressor::PowerSgdCompressor(int rank, uint64_t seed, double min_compression_rate)
    : rank_(std::max(1, rank)), seed_(seed), min_rate_(min_compression_rate) {}

void PowerSgdCompressor::Plan(const std::vector<torch::Tensor>& grads) {
  slots_.assign(grads.size(), Slot());
  uncompressed_elems_ = p_elems_ = q_elems_ = 0;
  // One generator for all Q's, drawn in tensor order: the same values on every rank.
  std::mt19937_64 gen(seed_ ^ 0x50575347ull);  // "PWSG"
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (size_t i = 0; i < grads.size(); ++i) {
    Slot& s = slots_[i];
    const torch::Tensor& g = grads[i];
    if (g.dim() >= 2) {
      s.n = g.size(0);
      s.m = g.numel() / std::max<int64_t>(1, s.n);
      s.r = std::min({static_cast<int64_t>(rank_), s.n, s.m});
      s.compressed = static_cast<double>(s.n) * s.m >= min_rate_ * (s.n + s.m) * s.r;
    }
    if (!s.compressed) {
      uncompressed_elems_ += g.numel();
      continue;
    }
    p_elems_ += s.n * s.r;
    q_elems_ += s.m * s.r;
    s.q = torch::empty({s.m, s.r}, torch::kFloat);
    float* q = s.q.data_ptr<float>();
    for (int64_t k = 0; k < s.m * s.r; ++k) q[k] = normal(gen);
    s.error = torch::zeros({s.n, s.m}, torch::kFloat);
  }
  elements_sent_ = uncompressed_elems_ + p_elems_ + q_elems_;
}

absl::Status PowerSgdCompressor::Reduce(const std::vector<torch::Tensor>& grads,
                                        const Collectives& comm, CompressStats* stats) {
  torch::NoGradGuard no_grad;
  CompressTimer timer;
  if (slots_.size() != grads.size()) Plan(grads);
  // Stage 1: [uncompressed tensors | P of each compressed matrix], all-reduced at once.
  torch::Tensor first = torch::empty({uncompressed_elems_ + p_elems_}, torch::kFloat);
  std::vector<torch::Tensor> mats(grads.size()), ps(grads.size());
  int64_t at = 0, p_at = uncompressed_elems_;
  for (size_t i = 0; i < grads.size(); ++i) {
    Slot& s = slots_[i];
    if (!s.compressed) {
      first.narrow(0, at, grads[i].numel()).copy_(grads[i].reshape({-1}));
      at += grads[i].numel();
      continue;
    }
    mats[i] = grads[i].view({s.n, s.m});
    mats[i].add_(s.error);  // error feedback: what earlier steps did not send
    ps[i] = first.narrow(0, p_at, s.n * s.r).view({s.n, s.r});
    torch::matmul_out(ps[i], mats[i], s.q);  // P = M Q
    p_at += s.n * s.r;
  }
  TS_RETURN_IF_ERROR(timer.Collective([&] { return comm.all_reduce(first, "powersgd P"); }));
  // Stage 2: orthogonalise P (the same on every rank), Q = M^T P, all-reduced.
  torch::Tensor second = torch::empty({q_elems_}, torch::kFloat);
  std::vector<torch::Tensor> qs(grads.size());
  int64_t q_at = 0;
  for (size_t i = 0; i < grads.size(); ++i) {
    Slot& s = slots_[i];
    if (!s.compressed) continue;
    OrthogonalizeColumns(ps[i]);
    qs[i] = second.narrow(0, q_at, s.m * s.r).view({s.m, s.r});
    torch::matmul_out(qs[i], mats[i].t(), ps[i]);
    q_at += s.m * s.r;
  }
  TS_RETURN_IF_ERROR(timer.Collective([&] { return comm.all_reduce(second, "powersgd Q"); }));
  second.div_(static_cast<double>(comm.world_size));
  // Decompress: approx = P Q^T; error = M - approx; the gradient becomes approx.
  const double inv_world = 1.0 / comm.world_size;
  at = 0;
  for (size_t i = 0; i < grads.size(); ++i) {
    Slot& s = slots_[i];
    if (!s.compressed) {
      const int64_t n = grads[i].numel();
      grads[i].copy_(first.narrow(0, at, n).view(grads[i].sizes()));
      grads[i].mul_(inv_world);
      at += n;
      continue;
    }
    s.q.copy_(qs[i]);  // warm start of the next step
    torch::Tensor approx = torch::matmul(ps[i], qs[i].t());
    torch::sub_out(s.error, mats[i], approx);
    mats[i].copy_(approx);
  }
  if (stats != nullptr) {
    stats->comm_bytes += CompressPayloadBytes(first) + CompressPayloadBytes(second);
    stats->compress_ms += timer.CompressMs();
  }
  return absl::OkStatus();
}

std::vector<CompressorStateTensor> PowerSgdCompressor::ExportState() const {
  std::vector<CompressorStateTensor> out;
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (!slots_[i].compressed) continue;
    const std::string base = absl::StrCat("compression.powersgd.", i);
    out.push_back({base + ".q", slots_[i].q.clone(), /*per_rank=*/false});
    out.push_back({base + ".error", slots_[i].error.clone(), /*per_rank=*/true});
  }
  return out;
}

absl::Status PowerSgdCompressor::ImportState(const std::vector<torch::Tensor>& like,
                                             const std::map<std::string, torch::Tensor>& state) {
  if (state.empty()) {
    Reset();
    return absl::OkStatus();
  }
  // Planned for `like` as the first Reduce would, then Q and e replaced; on an error the
  // old plan comes back.
  std::vector<Slot> old_slots = slots_;
  const int64_t old[4] = {uncompressed_elems_, p_elems_, q_elems_, elements_sent_};
  Plan(like);
  size_t used = 0;
  absl::Status st;
  for (size_t i = 0; i < slots_.size() && st.ok(); ++i) {
    Slot& s = slots_[i];
    if (!s.compressed) continue;
    const std::string base = absl::StrCat("compression.powersgd.", i);
    absl::StatusOr<torch::Tensor> q = CompressTakeState(state, base + ".q", {s.m, s.r});
    absl::StatusOr<torch::Tensor> e = CompressTakeState(state, base + ".error", {s.n, s.m});
    if (!q.ok() || !e.ok()) {
      st = q.ok() ? e.status() : q.status();
      break;
    }
    s.q = *std::move(q);
    s.error = *std::move(e);
    used += 2;
  }
  if (st.ok() && used != state.size()) {
    st = absl::InvalidArgumentError(
        absl::StrCat(state.size(), " tensors for ", used, " (another model or bucket layout?)"));
  }
  if (!st.ok()) {
    slots_ = std::move(old_slots);
    uncompressed_elems_ = old[0];
    p_elems_ = old[1];
    q_elems_ = old[2];
    elements_sent_ = old[3];
  }
  return st;
}

// --- top-k ---

TopKCompressor::TopKCompressor(double ratio) : ratio_(ratio) {}

int64_t TopKCompressor::KeepCount(double ratio, int64_t numel) {
  const int64_t k = static_cast<int64_t>(std::ceil(ratio * static_cast<double>(numel)));
  return std::min(numel, std::max<int64_t>(1, k));
}

std::vector<CompressorStateTensor> TopKCompressor::ExportState() const {
  std::vector<CompressorStateTensor> out;
  for (size_t i = 0; i < errors_.size(); ++i) {
    out.push_back({absl::StrCat("compression.topk.", i, ".error"), errors_[i].clone(),
                   /*per_rank=*/true});
  }
  return out;
}

absl::Status TopKCompressor::ImportState(const std::vector<torch::Tensor>& like,
                                         const std::map<std::string, torch::Tensor>& state) {
  if (state.empty()) {
    Reset();
    return absl::OkStatus();
  }
  if (state.size() != like.size()) {
    return absl::InvalidArgumentError(absl::StrCat(state.size(), " tensors for ", like.size(),
                                                   " (another model or bucket layout?)"));
  }
  std::vector<torch::Tensor> errors;
  for (size_t i = 0; i < like.size(); ++i) {
    TS_ASSIGN_OR_RETURN(torch::Tensor e,
                        CompressTakeState(state, absl::StrCat("compression.topk.", i, ".error"),
                                          {like[i].numel()}));
    errors.push_back(std::move(e));
  }
  errors_ = std::move(errors);
  return absl::OkStatus();
}

absl::Status TopKCompressor::Reduce(const std::vector<torch::Tensor>& grads,
                                    const Collectives& comm, CompressStats* stats) {
  torch::NoGradGuard no_grad;
  CompressTimer timer;
  if (errors_.size() != grads.size()) {
    errors_.clear();
    for (const torch::Tensor& g : grads)
      errors_.push_back(torch::zeros({g.numel()}, torch::kFloat));
  }
  std::vector<int64_t> ks(grads.size()), offsets(grads.size());
  int64_t total_k = 0;
  for (size_t i = 0; i < grads.size(); ++i) {
    ks[i] = KeepCount(ratio_, grads[i].numel());
    offsets[i] = total_k;
    total_k += ks[i];
  }
  torch::Tensor send_idx = torch::empty({total_k}, torch::kInt);
  torch::Tensor send_val = torch::empty({total_k}, torch::kFloat);
  for (size_t i = 0; i < grads.size(); ++i) {
    torch::Tensor v = errors_[i];
    v.add_(grads[i].reshape({-1}));  // v = grad + error, kept in the error buffer
    torch::Tensor idx = std::get<1>(torch::topk(v.abs(), ks[i], 0, /*largest=*/true,
                                                /*sorted=*/false));
    send_idx.narrow(0, offsets[i], ks[i]).copy_(idx);
    send_val.narrow(0, offsets[i], ks[i]).copy_(v.index_select(0, idx));
    v.index_fill_(0, idx, 0.0);  // error = v - the part sent
  }
  const int world = comm.world_size;
  torch::Tensor recv_idx = torch::empty({world * total_k}, torch::kInt);
  torch::Tensor recv_val = torch::empty({world * total_k}, torch::kFloat);
  TS_RETURN_IF_ERROR(
      timer.Collective([&] { return comm.all_gather(send_idx, recv_idx, "topk indices"); }));
  TS_RETURN_IF_ERROR(
      timer.Collective([&] { return comm.all_gather(send_val, recv_val, "topk values"); }));
  // Sum in rank order with a plain loop: the same additions in the same order everywhere.
  const int32_t* ri = recv_idx.data_ptr<int32_t>();
  const float* rv = recv_val.data_ptr<float>();
  for (size_t i = 0; i < grads.size(); ++i) {
    torch::Tensor flat = grads[i].view({-1});
    flat.zero_();
    float* out = flat.data_ptr<float>();
    const int64_t numel = flat.numel();
    for (int r = 0; r < world; ++r) {
      const int64_t base = r * total_k + offsets[i];
      for (int64_t j = 0; j < ks[i]; ++j) {
        const int32_t k = ri[base + j];
        if (k >= 0 && k < numel) out[k] += rv[base + j];
      }
    }
    flat.mul_(1.0 / world);
  }
  if (stats != nullptr) {
    stats->comm_bytes += CompressPayloadBytes(send_idx) + CompressPayloadBytes(send_val);
    stats->compress_ms += timer.CompressMs();
  }
  return absl::OkStatus();
}

}  // namespace trainscope::train
