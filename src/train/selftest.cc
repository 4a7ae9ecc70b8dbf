// selftest train: run, judge, measure the device peak for MFU.
#include "trainscope/train/selftest.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "trainscope/core/env_vars.h"
#include "trainscope/core/formats.h"
#include "trainscope/core/status.h"
#include "trainscope/core/table.h"

namespace trainscope::train {

nlohmann::json SelftestResultToJson(const SelftestResult& r) {
  return {{"format", formats::kSelftestTrain},
          {"version", 1},
          {"passed", r.passed},
          {"reason", r.reason},
          {"loss_start", r.loss_start},
          {"loss_end", r.loss_end},
          {"target_loss", r.target_loss},
          {"tokens_per_s", r.tokens_per_s},
          {"mfu", r.mfu},
          {"peak_flops", r.peak_flops},
          {"peak_source", r.peak_source},
          {"device", r.train.device},
          {"device_name", r.train.device_name},
          {"memory_source", r.train.memory_source},
          {"memory_peak_bytes", r.train.memory_peak_bytes},
          {"model_flops_per_s", r.model_flops_per_s},
          {"params", r.train.params},
          {"steps", r.steps},
          {"seconds", r.seconds},
          {"threads", r.train.threads},
          {"precision", r.train.precision},
          {"config", r.config_path},
          {"metrics_path", r.train.metrics_path}};
}

absl::StatusOr<SelftestResult> RunSelftestTrain(const SelftestOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  SelftestResult r;
  r.config_path = options.config_path;
  if (r.config_path.empty()) {
    const char* name = options.quick ? kSelftestQuickConfig : kSelftestConfig;
    r.config_path = FindBundledConfig(name);
    if (r.config_path.empty()) {
      return absl::NotFoundError(
          absl::StrCat("bundled config ", name,
                       " not found (looked next to the executable in "
                       "../share/trainscope/configs and in the source tree)"));
    }
  }
  TS_ASSIGN_OR_RETURN(TrainConfig config, LoadTrainConfig(r.config_path));
  if (options.max_seconds > 0) config.train.max_seconds = options.max_seconds;
  if (!options.device.empty()) config.train.device = options.device;
  if (options.device_tflops > 0) config.train.device_tflops = options.device_tflops;
  TS_RETURN_IF_ERROR(ValidateTrainConfig(config));
  r.target_loss = config.train.target_loss;

  TrainOptions to;
  to.run_dir = options.run_dir;
  if (to.run_dir.empty()) {
    const char* tmp = std::getenv(envvar::kTmpDir);
    std::string templ = absl::StrCat(tmp && *tmp ? tmp : "/tmp", "/trainscope-selftest-XXXXXX");
    if (mkdtemp(templ.data()) == nullptr) {
      return absl::InternalError(absl::StrCat("cannot create a directory like ", templ));
    }
    to.run_dir = templ;
  }
  to.distributed_from_env = false;  // the self-test is one rank on this machine
  to.on_step = options.on_step;
  to.stop = options.stop;
  TS_ASSIGN_OR_RETURN(r.train, Train(config, to));
  r.loss_start = r.train.loss_start;
  r.loss_end = r.train.loss_end;
  r.tokens_per_s = r.train.tokens_per_s;
  r.steps = r.train.steps;
  // A known peak (the config's, or the table's for this GPU), else one measured after
  // training on the same device, with the same threads and precision, for about a second
  // (half in quick mode).
  r.peak_flops = r.train.peak_flops;
  r.peak_source = r.train.peak_flops_source;
  if (r.peak_flops <= 0) {
    r.peak_flops = MeasureMatmulPeakFlops(r.train.threads, r.train.precision,
                                          options.quick ? 0.5 : 1.0, config.train.device);
    r.peak_source = "measured";
  }
  r.model_flops_per_s = 6.0 * static_cast<double>(r.train.params) * r.tokens_per_s;
  r.mfu = r.peak_flops > 0 ? r.model_flops_per_s / r.peak_flops : 0;

  if (!std::isfinite(r.loss_end)) {
    r.reason = "loss is not finite";
  } else if (r.target_loss > 0 && !(r.loss_end < r.target_loss)) {
    r.reason = absl::StrCat("did not converge: loss ", FormatDouble(r.loss_start, 3), " -> ",
                            FormatDouble(r.loss_end, 3), " after ", r.steps, " steps",
                            r.train.stopped_by_time ? " (time limit reached)" : "",
                            ", not below the target ", FormatDouble(r.target_loss, 3));
  } else if (!(r.loss_end < r.loss_start)) {
    r.reason = absl::StrCat("loss did not fall: ", FormatDouble(r.loss_start, 3), " -> ",
                            FormatDouble(r.loss_end, 3));
  }
  r.passed = r.reason.empty();
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace trainscope::train
