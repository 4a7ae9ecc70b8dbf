// The Trainer's summary without libtorch (trainer_summary.h): the loop's sums become the
// TrainResult's figures, and the result becomes the run's final files.
#include "train/trainer_summary.h"

#include <algorithm>

#include "nlohmann/json.hpp"
#include "train/trainer_world.h"
#include "trainscope/core/formats.h"
#include "trainscope/core/os.h"
#include "trainscope/core/run_dir.h"
#include "trainscope/core/status.h"

namespace trainscope::train {

using json = nlohmann::json;

void LoopSums::AddTimed(const StepRecord& rec) {
  phases.Add(rec.phases);
  comm_ms += rec.comm_ms;
  step_ms += rec.step_ms;
  step_ms_each.push_back(rec.step_ms);
  tokens += rec.tokens;
  ++timed_steps;
}

void SummarizeLoop(const LoopSums& sums, double seconds, const TrainConfig& config, int world_size,
                   TrainResult* r) {
  r->seconds = seconds;
  r->observability_fraction = seconds > 0 ? sums.obs_ms / (seconds * 1000) : 0;
  // The start and end losses: step 1's, and the mean of the last min(10, steps/5 + 1).
  const int n = static_cast<int>(r->losses.size());
  if (n > 0) {
    r->loss_start = r->losses.front();
    const int tail = std::max(1, std::min(10, n / 5 + 1));
    double tail_sum = 0;
    for (int i = n - tail; i < n; ++i) tail_sum += r->losses[i];
    r->loss_end = tail_sum / tail;
  }
  if (sums.timed_steps > 0) {
    PhaseTimes mean = sums.phases;
    mean.Add(sums.phases, 1.0 / sums.timed_steps - 1.0);  // sum -> mean
    r->mean_phases = mean;
    r->mean_step_ms = sums.step_ms / sums.timed_steps;
    std::vector<double> sorted = sums.step_ms_each;
    std::sort(sorted.begin(), sorted.end());
    const size_t mid = sorted.size() / 2;
    r->median_step_ms = sorted.size() % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
    r->mean_comm_ms = sums.comm_ms / sums.timed_steps;
    if (r->mean_comm_ms > 0) {
      // comm_wait also holds the small loss all-reduce; clamp to [0, 1].
      r->overlap_fraction =
          std::min(1.0, std::max(0.0, 1.0 - r->mean_phases.comm_wait_ms / r->mean_comm_ms));
    }
    r->tokens_per_s = sums.step_ms > 0 ? sums.tokens * 1000.0 / sums.step_ms : 0;
  }
  // MFU when the peak is known without measuring.
  r->peak_flops = KnownPeakFlops(config.train, r->device_name, &r->peak_flops_source);
  if (r->peak_flops > 0) {
    r->mfu = 6.0 * static_cast<double>(r->params) * r->tokens_per_s / (r->peak_flops * world_size);
  }
  r->loader =
      JudgeDataLoader(r->mean_phases.data_wait_ms, r->mean_step_ms, config.data.num_workers);
}

absl::Status WriteRunFiles(const TrainResult& r, const std::vector<ParamDigest>& params,
                           const TrainOptions& options, MetricsWriter* metrics) {
  if (options.write_weights) {
    json per_param = json::array();
    for (const ParamDigest& p : params) {
      per_param.push_back(
          {{"name", p.name}, {"numel", p.numel}, {"xxh3_64", Hex64(p.xxh3_64)}, {"norm", p.norm}});
    }
    json w = {
        {"format", formats::kTrainWeights}, {"version", 1},    {"rank", r.rank},
        {"world_size", r.world_size},       {"step", r.steps}, {"xxh3_64", r.weights_checksum},
        {"params", std::move(per_param)}};
    TS_RETURN_IF_ERROR(
        WriteFileAtomic(run_dir::TrainWeightsPath(options.run_dir, r.rank), w.dump(1) + "\n"));
  }
  if (metrics != nullptr) {
    TS_RETURN_IF_ERROR(metrics->WriteRecord("summary", TrainResultToJson(r)));
  }
  if (r.rank == 0) {
    json summary = TrainResultToJson(r);
    summary["format"] = formats::kTrainSummary;
    summary["version"] = 1;
    TS_RETURN_IF_ERROR(
        WriteFileAtomic(run_dir::TrainSummaryPath(options.run_dir), summary.dump(2) + "\n"));
  }
  return absl::OkStatus();
}

}  // namespace trainscope::train
