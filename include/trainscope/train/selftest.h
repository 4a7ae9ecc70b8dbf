// `trainscope selftest train`: the bundled config on the bundled corpus of real text
// (/usr/share/common-licenses, from Debian's base-files), bounded in time; passes when the
// final loss falls below the config's train.target_loss. Reports loss start -> end,
// tokens/s and MFU = 6 * params * tokens/s / the device's peak: train.device_tflops, the table
// of known GPUs (config.h DevicePeakTflops), else a matmul peak measured on the device.
#ifndef TRAINSCOPE_TRAIN_SELFTEST_H_
#define TRAINSCOPE_TRAIN_SELFTEST_H_

#include <atomic>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json_fwd.hpp"
#include "trainscope/train/trainer.h"

namespace trainscope::train {

inline constexpr char kSelftestConfig[] = "selftest_train.json";
inline constexpr char kSelftestQuickConfig[] = "selftest_train_quick.json";

struct SelftestOptions {
  std::string config_path;   // empty: the bundled config (quick or full)
  bool quick = false;        // the quick config: < 40 s, a higher loss bar
  double max_seconds = 0;    // > 0: overrides train.max_seconds
  std::string device;        // non-empty: overrides train.device ("cpu", "cuda", "cuda:N")
  double device_tflops = 0;  // > 0: overrides train.device_tflops (the MFU denominator)
  std::string run_dir;       // empty: a fresh directory under $TMPDIR
  std::function<void(const StepRecord&)> on_step;
  const std::atomic<int>* stop = nullptr;  // TrainOptions::stop: a stop returns Cancelled
};

struct SelftestResult {
  bool passed = false;
  std::string reason;  // empty when passed
  double loss_start = 0, loss_end = 0, target_loss = 0;
  double tokens_per_s = 0;
  double mfu = 0;                // fraction, 0..1
  double peak_flops = 0;         // the device's peak, FLOP/s (peak_source says which)
  std::string peak_source;       // "train.device_tflops" | "table" | "measured"
  double model_flops_per_s = 0;  // 6 * params * tokens/s
  int steps = 0;
  double seconds = 0;  // whole self-test, including loading and the peak measurement
  std::string config_path;
  TrainResult train;
};
nlohmann::json SelftestResultToJson(const SelftestResult& r);

// Errors only for problems that prevent the test from running (missing bundled config or
// corpus: NotFound / InvalidArgument); a run that does not converge is passed == false with
// a reason.
absl::StatusOr<SelftestResult> RunSelftestTrain(const SelftestOptions& options);

}  // namespace trainscope::train

#endif  // TRAINSCOPE_TRAIN_SELFTEST_H_
