// Spike rule, the non-finite record and the fp16 loss scaler (see anomaly.h).
#include "trainscope/train/anomaly.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "trainscope/core/stats.h"

namespace trainscope::train {
namespace {

constexpr double kMadToSigma = 1.4826;        // sigma of normal noise = 1.4826 x MAD
constexpr double kSigmaFloorRelative = 0.01;  // sigma >= 1% of |median|

}  // namespace

absl::Status ValidateSpikeOptions(const SpikeOptions& o) {
  if (o.rule != "mad" && o.rule != "megatron" && o.rule != "off") {
    return absl::InvalidArgumentError(
        absl::StrCat("anomaly.spike_rule \"", o.rule, "\": expected mad, megatron or off"));
  }
  if (o.window < 3 || o.window > 1000000) {
    return absl::InvalidArgumentError(
        absl::StrCat("anomaly.spike_window ", o.window, ": expected 3..1000000"));
  }
  if (o.min_samples < 1 || o.min_samples > 1000000) {
    return absl::InvalidArgumentError(
        absl::StrCat("anomaly.spike_min_samples ", o.min_samples, ": expected 1..1000000"));
  }
  if (!(o.k > 0 && o.k <= 1e6)) {
    return absl::InvalidArgumentError(absl::StrCat("anomaly.spike_k ", o.k, ": expected > 0"));
  }
  if (!(o.factor > 1 && o.factor <= 1e6)) {
    return absl::InvalidArgumentError(
        absl::StrCat("anomaly.spike_factor ", o.factor, ": expected > 1"));
  }
  return absl::OkStatus();
}

// Robust spike rule: the median and the median absolute deviation of a window are not moved
// by the outliers being looked for (a mean and standard deviation are: one spike inflates
// the sigma that should flag the next). Spikes stay out of the window for the same reason.
SpikeVerdict SpikeDetector::Observe(double loss) {
  SpikeVerdict v;
  if (!std::isfinite(loss) || options_.rule == "off") return v;
  if (options_.rule == "megatron") {
    v.samples = seen_;
    if (seen_ < options_.min_samples) {
      max_abs_ = std::max(max_abs_, std::fabs(loss));
      ++seen_;
      return v;
    }
    v.median = max_abs_;
    v.threshold = options_.factor * max_abs_;
    v.spike = std::fabs(loss) >= v.threshold;
    ++seen_;
    return v;
  }
  v.samples = static_cast<int>(window_.size());
  if (v.samples >= options_.min_samples) {
    std::vector<double> w(window_.begin(), window_.end());
    v.median = trainscope::Median(w);
    for (double& x : w) x = std::fabs(x - v.median);
    v.sigma = std::max(kMadToSigma * trainscope::Median(std::move(w)),
                       kSigmaFloorRelative * std::fabs(v.median));
    v.threshold = v.median + options_.k * v.sigma;
    v.spike = loss > v.threshold;
  }
  if (!v.spike) {
    window_.push_back(loss);
    if (static_cast<int>(window_.size()) > options_.window) window_.pop_front();
  }
  return v;
}

nlohmann::json NonfiniteToJson(const NonfiniteEvidence& e, const NonfiniteVerdict& v) {
  nlohmann::json j = {{"type", "nonfinite"},
                      {"step", e.step},
                      {"rank", e.rank},
                      {"ranks", e.ranks},
                      {"phase", NonfinitePhaseName(e.phase)},
                      {"module", e.module},
                      {"parameter", e.parameter},
                      {"class", v.cls},
                      {"reproducible", nullptr},
                      {"fix", v.finding.fix},
                      {"samples", e.sample_ids},
                      {"max_abs_activation", e.max_abs_activation},
                      {"lr", e.lr},
                      {"grad_norms", e.grad_norms}};
  if (e.replayed) j["reproducible"] = e.reproducible;
  return j;
}

std::string NonfiniteSentence(const NonfiniteEvidence& e, const NonfiniteVerdict& v) {
  return absl::StrCat(diagnose::NonfiniteTitle(e), " (", diagnose::NonfiniteEvidenceText(e),
                      ", class ", v.cls, "); fix: ", v.finding.fix);
}

absl::Status ValidateLossScalerOptions(const LossScalerOptions& o) {
  auto bad = [](const char* key, double value, const char* want) {
    return absl::InvalidArgumentError(absl::StrCat("fp16.", key, " ", value, ": expected ", want));
  };
  if (!(o.initial_scale >= 1 && o.initial_scale <= 1e30)) {
    return bad("initial_scale", o.initial_scale, "1..1e30");
  }
  if (!(o.growth_factor > 1 && o.growth_factor <= 1e3)) {
    return bad("growth_factor", o.growth_factor, "> 1");
  }
  if (!(o.backoff_factor > 0 && o.backoff_factor < 1)) {
    return bad("backoff_factor", o.backoff_factor, "in (0, 1)");
  }
  if (o.growth_interval < 1 || o.growth_interval > 100000000) {
    return bad("growth_interval", o.growth_interval, "1..1e8");
  }
  if (o.hysteresis < 1 || o.hysteresis > 1000) return bad("hysteresis", o.hysteresis, "1..1000");
  if (!(o.min_scale > 0 && o.min_scale <= o.initial_scale)) {
    return bad("min_scale", o.min_scale, "in (0, initial_scale]");
  }
  return absl::OkStatus();
}

LossScaler::LossScaler(LossScalerOptions options)
    : options_(options), scale_(options.initial_scale), hysteresis_left_(options.hysteresis) {}

// The scaler state machine (GradScaler's, with Megatron's hysteresis): an overflow skips the
// step, restarts the count of clean steps and uses up one unit of hysteresis; with none left
// the scale backs off (floored at min_scale). growth_interval clean steps in a row grow the
// scale and refill the hysteresis.
bool LossScaler::Update(bool overflow) {
  if (overflow) {
    ++skipped_;
    clean_ = 0;
    stuck_ = scale_ <= options_.min_scale;
    if (--hysteresis_left_ <= 0) {
      const double next = std::max(scale_ * options_.backoff_factor, options_.min_scale);
      if (next < scale_) ++backoffs_;
      scale_ = next;
      hysteresis_left_ = 0;
    }
    return true;
  }
  stuck_ = false;
  if (++clean_ >= options_.growth_interval) {
    scale_ *= options_.growth_factor;
    ++growths_;
    clean_ = 0;
    hysteresis_left_ = options_.hysteresis;
  }
  return false;
}

}  // namespace trainscope::train
