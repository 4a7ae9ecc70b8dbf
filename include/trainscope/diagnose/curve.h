// The loss-curve classifier: one class from a fixed vocabulary per run, with the first bad
// step, the numbers behind the verdict and what to do. Definitions and thresholds:
// docs/metrics.md "Loss-curve classes". All thresholds are ratios (scale-free): a loss curve
// in nats, bits or x1000 gets the same class.
// Thread-safety: pure functions.
#ifndef TRAINSCOPE_DIAGNOSE_CURVE_H_
#define TRAINSCOPE_DIAGNOSE_CURVE_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "trainscope/core/finding.h"
#include "trainscope/diagnose/series.h"

namespace trainscope::diagnose {

// The vocabulary ("class" in --json under "curve").
inline constexpr const char* kCurveClasses[] = {"healthy",     "not_learning",   "plateau",
                                                "diverging",   "unstable",       "loss_spikes",
                                                "overfitting", "nan_fixed_step", "too_short"};

struct CurveOptions {
  int min_points = 20;               // fewer finite losses: "too_short"
  double spike_sigmas = 6;           // a spike: this many robust sigmas above the smoothed curve
  double spike_jump_sigmas = 4;      // ... and this far above the previous point
  double spike_min_rel = 0.1;        // ... and at least this share above the local median
  double not_learning_drop = 0.03;   // learned less than this share of the starting loss
  double explode_ratio = 1.5;        // smoothed loss above start x this: exploded
  double diverge_rise = 0.25;        // rise above the minimum, as a share of the start level
  double plateau_post_share = 0.25;  // drop after the stall < this x drop in the window before
  double plateau_pre_share = 0.08;   // the window before the stall dropped >= this x total drop
  // A schedule plateau: the LR stays below this share of its peak (a cosine or linear decay to
  // the usual floor of 10% never gets there) ...
  double lr_fall_share = 0.05;
  double lr_tail_share = 0.25;       // ... for at least this share of the run's steps
  double overfit_rise = 0.04;        // validation loss above its minimum by this share
  double overfit_train_fall = 0.02;  // ... while training loss fell this share of its start
};

struct CurveResult {
  std::string cls = "too_short";
  bool nan_after_divergence = false;
  int64_t first_bad_step = -1;
  int64_t nan_step = -1;
  std::vector<int64_t> spike_steps;  // every step of every spike (consecutive ones each)
  // The numbers behind the verdict, name -> value, in a fixed order (window, slopes, ratios).
  std::vector<std::pair<std::string, double>> evidence;
  // The verdict: id "curve.<cls>", title what is wrong (or that it looks healthy), evidence
  // EvidenceText, the fix ("" for healthy and too_short), severity error / warning / info.
  // where and rank are left to the caller (it knows the file).
  Finding finding;
};

CurveResult ClassifyCurve(const Series& series, const CurveOptions& options = {});

// The evidence numbers as one line: "window 15, start 5.5, end 2.1, ...", then every spike
// step of a loss_spikes verdict: "spike_steps [120, 121]".
std::string EvidenceText(const CurveResult& r);

}  // namespace trainscope::diagnose

#endif  // TRAINSCOPE_DIAGNOSE_CURVE_H_
