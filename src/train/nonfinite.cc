// Non-finite checks, replay localisation, fp16 emulation and numeric fault injection (see
// nonfinite.h).
#include "train/nonfinite.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace trainscope::train {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

bool EndsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

bool AllFinite(const torch::Tensor& t) { return torch::isfinite(t).all().item<bool>(); }

// The per-step test of one fp32 buffer: an IEEE-754 binary32 value is NaN or Inf exactly
// when its 8 exponent bits are all ones, so one pass of integer ANDs and ORs over the words
// answers exactly (no rounding, no overflow of a sum, no second test) at memory speed. It
// replaces a libtorch sum + item per tensor, whose cost on these small tensors was the
// dispatch, TensorIterator set-up and thread-pool wake-up of each call, not the bytes
// (docs/PERFORMANCE.md). Four independent accumulators let the compiler keep them in
// registers (or vectorise) without reordering anything that could change the answer.
bool FiniteF32(const float* data, int64_t n) {
  constexpr uint32_t kExponent = 0x7f800000u;
  uint32_t bad[4] = {0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    uint32_t w[4];
    std::memcpy(w, data + i, sizeof(w));  // the words of 4 floats (no aliasing of float*)
    for (int k = 0; k < 4; ++k) bad[k] |= static_cast<uint32_t>((w[k] & kExponent) == kExponent);
  }
  for (; i < n; ++i) {
    uint32_t w;
    std::memcpy(&w, data + i, sizeof(w));
    bad[0] |= static_cast<uint32_t>((w & kExponent) == kExponent);
  }
  return (bad[0] | bad[1] | bad[2] | bad[3]) == 0;
}

// Every element of `t` finite: FiniteF32 on a contiguous fp32 CPU tensor (the trainer's
// weights and gradients), libtorch's isfinite otherwise.
bool TensorFinite(const torch::Tensor& t) {
  if (t.device().is_cpu() && t.scalar_type() == torch::kFloat && t.is_contiguous()) {
    return FiniteF32(t.data_ptr<float>(), t.numel());
  }
  return AllFinite(t);
}

// Largest |x| over the finite elements of `t` (0 when none).
double MaxFiniteAbs(const torch::Tensor& t) {
  torch::Tensor a = t.detach().to(torch::kFloat).abs();
  a = torch::where(torch::isfinite(a), a, torch::zeros_like(a));
  return a.numel() > 0 ? a.max().item<double>() : 0;
}

// `t` with its first element set to NaN (out of place, so autograd sees an ordinary add).
torch::Tensor WithNaN(const torch::Tensor& t) {
  torch::Tensor add = torch::zeros_like(t).contiguous();
  add.view({-1}).select(0, 0).fill_(kNaN);
  return t + add;
}

// Sequence ids travel as two floats of 22 bits each (exact in fp32; ids below 2^44).
constexpr double kIdSplit = 4194304.0;  // 2^22

}  // namespace

NonfiniteGuard::NonfiniteGuard(Gpt model, std::vector<std::pair<std::string, torch::Tensor>> named,
                               NonfiniteGuardOptions options)
    : model_(std::move(model)), named_(std::move(named)), options_(std::move(options)) {
  sites_ = model_->SiteNames();
  for (const std::string& s : sites_) {
    fp32_site_.push_back(s == "wte" || s == "wpe" || s == "ln_f" || EndsWith(s, ".ln1") ||
                         EndsWith(s, ".ln2"));
  }
  for (size_t i = 0; i < named_.size(); ++i) {
    const int index = static_cast<int>(i);
    linear_weight_.push_back(EndsWith(named_[i].first, ".weight") &&
                             model_->Decays(named_[i].first));
    hooks_.push_back(
        named_[i].second.register_hook([this, index](torch::Tensor g) { OnGrad(index, g); }));
  }
  model_->SetTap(this);
}

NonfiniteGuard::~NonfiniteGuard() {
  model_->SetTap(nullptr);
  for (size_t i = 0; i < hooks_.size(); ++i) named_[i].second.remove_hook(hooks_[i]);
}

double NonfiniteGuard::BeginStep(int step) {
  step_ = step;
  loss_flag_ = false;
  grad_bad_ = false;
  inputs_.clear();
  targets_.clear();
  sample_ids_.clear();
  nan_site_ = nan_grad_site_ = -1;
  has_local_ = false;
  double lr_factor = 1;
  for (const Injection& inj : options_.inject) {
    if (inj.step != step || !InjectionHits(inj, options_.rank)) continue;
    const int block_site = 2 + inj.layer * kSitesPerBlock;
    switch (inj.kind) {
      case InjectKind::kNanForward:
        nan_site_ = block_site + kBlockSiteFc;
        break;
      case InjectKind::kNanData:
        nan_site_ = 0;  // wte: the token embeddings of the step's input
        break;
      case InjectKind::kNanBackward:
        nan_grad_site_ = block_site + kBlockSiteFcProj;
        break;
      case InjectKind::kInfWeight: {
        const std::string name = "blocks." + std::to_string(inj.layer) + ".fc.weight";
        torch::NoGradGuard no_grad;
        for (auto& [n, p] : named_) {
          if (n == name) p.view({-1}).select(0, 0).fill_(std::numeric_limits<double>::infinity());
        }
        break;
      }
      case InjectKind::kLrSpike:
        lr_factor *= inj.factor;
        break;
      default:  // comm faults: the comm seam's
        break;
    }
  }
  return lr_factor;
}

void NonfiniteGuard::KeepBatch(const torch::Tensor& inputs, const torch::Tensor& targets,
                               const std::vector<int64_t>& sample_ids) {
  inputs_.push_back(inputs);
  targets_.push_back(targets);
  sample_ids_.insert(sample_ids_.end(), sample_ids.begin(), sample_ids.end());
}

bool NonfiniteGuard::grad_flag() const { return options_.checks && grad_bad_; }

void NonfiniteGuard::EndStep(double lr, double grad_norm) {
  last_lr_ = lr;
  lrs_.emplace_back(step_, lr);
  if (lrs_.size() > 3) lrs_.erase(lrs_.begin());
  if (!std::isfinite(grad_norm)) return;
  grad_norms_.push_back(grad_norm);
  if (grad_norms_.size() > 20) grad_norms_.erase(grad_norms_.begin());
}

bool NonfiniteGuard::WeightsFinite() const {
  torch::NoGradGuard no_grad;
  const int64_t t0 = NowNs();
  bool finite = true;
  for (const auto& [name, p] : named_) {
    if (!TensorFinite(p)) finite = false;
  }
  check_ns_ += NowNs() - t0;
  return finite;
}

// The per-step gradient check: each gradient as backward produces it (before any all-reduce,
// so the rank is known), while it is hot in cache, with the exact word test of FiniteF32.
// (An fp32 sum per gradient, exact test only when the sum was not finite, measured 1.32% of
// the default model's loop; a sum in double 1.72%; the budget is 1%.)
void NonfiniteGuard::OnGrad(int index, const torch::Tensor& grad) {
  if (options_.checks && !probing_) {
    const int64_t t0 = NowNs();
    if (!grad_bad_ && !TensorFinite(grad)) grad_bad_ = true;
    check_ns_ += NowNs() - t0;
  }
  if (probing_ && !found_.any() && !AllFinite(grad)) {
    found_.phase = NonfinitePhase::kBackward;
    found_.param = index;
  }
}

torch::Tensor NonfiniteGuard::Out(int site, torch::Tensor y) {
  if (site == nan_site_) y = WithNaN(y);
  if (site == nan_grad_site_ && y.requires_grad()) {
    y.register_hook([](torch::Tensor g) { return WithNaN(g); });
  }
  double pre_max = 0;
  const bool probe = probing_ && !found_.any();
  if (options_.fp16 && !fp32_site_[site]) {
    // fp16 emulation: the output as an fp16 tensor would hold it (and, through the cast's
    // backward, the gradient too).
    if (probe) pre_max = MaxFiniteAbs(y);
    y = y.to(torch::kHalf).to(torch::kFloat);
  }
  if (probe) {
    if (!AllFinite(y)) {
      found_.phase = NonfinitePhase::kForward;
      found_.site = site;
      found_.param = NonfiniteParamOf(sites_[site]);
      local_max_abs_ = std::max(pre_max, prev_max_abs_);
    } else {
      prev_max_abs_ = std::max(prev_max_abs_, MaxFiniteAbs(y));
    }
  }
  return y;
}

NonfiniteGuard::Found NonfiniteGuard::ReplayOnce(const LossFn& loss_fn, int grad_accum) {
  found_ = Found();
  prev_max_abs_ = 0;
  for (auto& [name, p] : named_) p.mutable_grad() = torch::Tensor();
  probing_ = true;
  for (size_t m = 0; m < inputs_.size(); ++m) {
    torch::Tensor loss = loss_fn(inputs_[m], targets_[m]);
    if (found_.any()) break;
    if (!std::isfinite(loss.item<double>())) {
      found_.phase = NonfinitePhase::kLoss;
      found_.loss = true;
      break;
    }
    (loss / grad_accum).backward();
    if (found_.any()) break;
  }
  probing_ = false;
  for (auto& [name, p] : named_) p.mutable_grad() = torch::Tensor();
  return found_;
}

// Two replays of the step from the same state and batch: the first places the fault, the
// second tells a fixed-step cause (the same place again) from a random one.
void NonfiniteGuard::Replay(const LossFn& loss_fn, int grad_accum) {
  local_max_abs_ = 0;
  const Found first = ReplayOnce(loss_fn, grad_accum);
  const double max_abs = local_max_abs_;
  const Found second = ReplayOnce(loss_fn, grad_accum);
  replayed_ = true;
  reproducible_ = first.any() && first == second;
  local_ = first.any() ? first : second;
  local_max_abs_ = first.any() ? max_abs : local_max_abs_;
  if (!local_.any()) {
    // Neither replay turned non-finite: place it by what the step's checks saw.
    local_.phase = loss_flag_ ? NonfinitePhase::kForward : NonfinitePhase::kBackward;
  }
  has_local_ = true;
}

void NonfiniteGuard::LocaliseWeights() {
  torch::NoGradGuard no_grad;
  local_ = Found();
  local_.phase = NonfinitePhase::kOptimizer;
  for (size_t i = 0; i < named_.size(); ++i) {
    if (!AllFinite(named_[i].second)) {
      local_.param = static_cast<int>(i);
      break;
    }
  }
  replayed_ = reproducible_ = false;
  local_max_abs_ = 0;
  has_local_ = true;
}

void NonfiniteGuard::FillHistory(double lr, NonfiniteEvidence* e) const {
  e->lr = lr;
  e->prev_lr = last_lr_;
  // The largest step-to-step jump over the last steps and this one.
  std::vector<std::pair<int, double>> lrs = lrs_;
  lrs.emplace_back(step_, lr);
  const diagnose::LrJump jump = FindLrJump(lrs);
  e->lr_jump = jump.ratio;
  e->lr_jump_step = jump.step;
  e->grad_norms = grad_norms_;
  e->fp16 = options_.fp16;
}

std::string NonfiniteGuard::ModuleOfParam(int index) const {
  const std::string& n = named_[index].first;
  const size_t dot = n.rfind('.');
  return dot == std::string::npos ? n : n.substr(0, dot);
}

int NonfiniteGuard::NonfiniteParamOf(const std::string& module) const {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < named_.size(); ++i) {
    if (ModuleOfParam(static_cast<int>(i)) == module && !AllFinite(named_[i].second)) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

void NonfiniteGuard::Encode(float* slot) const {
  std::fill(slot, slot + kSlotFloats, 0.0f);
  if (!has_local_) return;
  slot[0] = 1;
  slot[1] = static_cast<float>(static_cast<int>(local_.phase));
  slot[2] = static_cast<float>(local_.site + 1);
  slot[3] = static_cast<float>(local_.param + 1);
  slot[4] = local_.loss ? 1 : 0;
  slot[5] = replayed_ ? 1 : 0;
  slot[6] = reproducible_ ? 1 : 0;
  slot[7] = static_cast<float>(std::min(local_max_abs_, 3e38));
  const int n = static_cast<int>(std::min<size_t>(sample_ids_.size(), kMaxSamples));
  slot[9] = static_cast<float>(n);
  for (int i = 0; i < n; ++i) {
    const double id = static_cast<double>(sample_ids_[i]);
    slot[10 + 2 * i] = static_cast<float>(std::floor(id / kIdSplit));
    slot[11 + 2 * i] = static_cast<float>(std::fmod(id, kIdSplit));
  }
}

void NonfiniteGuard::Decode(const float* slot, NonfiniteEvidence* e) const {
  e->phase = static_cast<NonfinitePhase>(static_cast<int>(slot[1]));
  const int site = static_cast<int>(slot[2]) - 1;
  const int param = static_cast<int>(slot[3]) - 1;
  const bool loss = slot[4] != 0;
  e->replayed = slot[5] != 0;
  e->reproducible = slot[6] != 0;
  e->max_abs_activation = slot[7];
  const bool site_ok = site >= 0 && site < static_cast<int>(sites_.size());
  const bool param_ok = param >= 0 && param < static_cast<int>(named_.size());
  e->module = site_ok ? sites_[site] : param_ok ? ModuleOfParam(param) : loss ? "loss" : "";
  e->parameter = param_ok ? named_[param].first : "";
  e->embedding_output = site_ok && (sites_[site] == "wte" || sites_[site] == "wpe");
  e->weights_nonfinite = e->phase == NonfinitePhase::kForward && param_ok;
  e->sample_ids.clear();
  const int n = std::min(static_cast<int>(slot[9]), kMaxSamples);
  for (int i = 0; i < n; ++i) {
    e->sample_ids.push_back(static_cast<int64_t>(slot[10 + 2 * i]) *
                                static_cast<int64_t>(kIdSplit) +
                            static_cast<int64_t>(slot[11 + 2 * i]));
  }
}

bool NonfiniteGuard::UnscaleFp16Grads(double scale, double* zero_fraction) {
  torch::NoGradGuard no_grad;
  bool overflow = false;
  int64_t zeros = 0, total = 0;
  for (size_t i = 0; i < named_.size(); ++i) {
    torch::Tensor& p = named_[i].second;
    if (!p.grad().defined()) continue;
    torch::Tensor h = p.grad().to(torch::kHalf).to(torch::kFloat);  // an fp16 gradient
    if (!overflow && !AllFinite(h)) overflow = true;
    if (linear_weight_[i]) {
      zeros += (h == 0).sum().item<int64_t>();
      total += h.numel();
    }
    p.mutable_grad() = h.div_(scale);
  }
  *zero_fraction = total > 0 ? static_cast<double>(zeros) / total : 0;
  return overflow;
}

}  // namespace trainscope::train
