// `trainscope compare RUN_A RUN_B` on two runs rather than two op dumps: where do the loss
// curves part beyond their own noise, and which per-layer norm parts first (issue 30 part 6).
//
// Contract:
//  - A run is a run directory (its train/metrics.rank<R>.jsonl, rank 0 or the lowest rank),
//    a train/ folder, or one metrics log diagnose reads (trainscope or any JSONL, CSV,
//    trainer_state.json, TensorBoard events, Megatron-LM logs; diagnose/series.h).
//  - Noise: each curve's step-to-step scatter, 1.4826 x the median absolute first difference
//    over sqrt(2) (robust to spikes). The curves differ at step S when one is finite and the
//    other not, or when the median of their differences over the 5 common steps around S
//    exceeds sigmas x 1.2533 x sqrt(noise_A^2 + noise_B^2) / sqrt(5) (the median's noise), at
//    S and the next `sustain - 1` common steps; S is then the first step of that window whose
//    own values differ. A lone spike is noise; identical runs (a deterministic rerun) never
//    differ.
//  - Layers (trainscope metrics only: `layer_norms` records): the earliest common step at
//    which a parameter's weight or gradient norm differs by more than `layer_rtol` relative,
//    and at that step the parameters that do, largest first.
//  - Bad records are counted (diagnose's readers); errors only when a side has no loss.
//  - Pure function of the files; thread-safe.
#ifndef TRAINSCOPE_COMPARE_RUNS_H_
#define TRAINSCOPE_COMPARE_RUNS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "trainscope/core/finding.h"

namespace trainscope::compare {

struct RunsOptions {
  double sigmas = 4;         // the noise multiple a difference must exceed
  int sustain = 3;           // ... on this many consecutive common steps (fewer at the end)
  double layer_rtol = 1e-3;  // a layer norm differs above this relative difference
  int top = 10;              // layers listed at the first diverging step
};

struct LayerDiff {
  std::string layer;  // parameter name
  std::string field;  // "weight_norm" or "grad_norm"
  double a = 0, b = 0, relative = 0;
};

struct RunsReport {
  std::string path_a, path_b;  // the metrics files read
  std::string format_a, format_b;
  int64_t steps_compared = 0;  // common steps with a loss on both sides
  int64_t first_step = -1, last_step = -1;
  int64_t bad_records_a = 0, bad_records_b = 0;
  double noise_a = 0, noise_b = 0;  // loss noise (see above)
  // The loss: -1 when the curves agree.
  int64_t diverge_step = -1;
  std::string diverge_kind;  // "loss", "nonfinite"; "first_step" when they differ from the start
  double loss_a = 0, loss_b = 0, threshold = 0;
  // Layer norms: -1 when none differ (or no layer_norms records on both sides).
  int64_t layer_steps_compared = 0;
  int64_t layer_step = -1;
  std::vector<LayerDiff> layers;  // at layer_step, largest relative difference first (top N)
  int64_t layers_differing = 0;   // at layer_step, all of them
  bool diverged = false;          // the loss or a layer
  std::vector<Finding> findings;
};

// True when `path` is a run (directory holding train/metrics.rank*.jsonl or metrics.rank*.jsonl)
// or a file that is not an msprobe dump.json: compare treats A and B as runs then.
bool LooksLikeRun(const std::string& path);

// Errors: NotFound naming the path when it holds no metrics file; InvalidArgument when a
// side has no loss values.
absl::StatusOr<RunsReport> CompareRuns(const std::string& a, const std::string& b,
                                       const RunsOptions& options = {});

// {"format": "trainscope.compare", "version": 1, "kind": "runs", "a", "b", "matched" (steps
// compared), "first_divergence": null | {"step", "kind", "loss_a", "loss_b", "threshold"},
// "noise", "layers": {"steps_compared", "first": null | {"step", "differing": [...]}},
// "findings"}.
nlohmann::json RunsReportToJson(const RunsReport& report);
std::string FormatRunsText(const RunsReport& report, int top);

}  // namespace trainscope::compare

#endif  // TRAINSCOPE_COMPARE_RUNS_H_
