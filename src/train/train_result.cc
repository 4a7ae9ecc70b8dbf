// The trainer's entry points around Train() that need no libtorch: the result as JSON, the
// thread count, and the num_workers sweep (a loop of Train() runs).
#include <sched.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "trainscope/core/env_vars.h"
#include "trainscope/core/os.h"
#include "trainscope/core/status.h"
#include "trainscope/train/trainer.h"

namespace trainscope::train {

using json = nlohmann::json;

int ResolveThreads(int configured, int local_world_size) {
  if (configured > 0) return configured;
  // OMP_NUM_THREADS (launch sets it to the CPUs it bound), else the CPUs this process may
  // run on, shared among the local ranks when they were not bound apart.
  std::string omp;
  int n = 0;
  if (Os::Default()->GetEnv(envvar::kOmpNumThreads, &omp) && absl::SimpleAtoi(omp, &n) && n > 0) {
    return n;
  }
  cpu_set_t set;
  int cpus = static_cast<int>(std::thread::hardware_concurrency());
  if (sched_getaffinity(0, sizeof(set), &set) == 0) cpus = CPU_COUNT(&set);
  if (cpus >= static_cast<int>(std::thread::hardware_concurrency())) {
    cpus /= std::max(1, local_world_size);
  }
  return std::max(1, cpus);
}

double KnownPeakFlops(const RunConfig& run, const std::string& device_name, std::string* source) {
  if (run.device_tflops > 0) {
    *source = "train.device_tflops";
    return run.device_tflops * 1e12;
  }
  const double tflops = DevicePeakTflops(device_name, run.precision);
  *source = tflops > 0 ? "table" : "";
  return tflops * 1e12;
}

json TrainResultToJson(const TrainResult& r) {
  json j = {{"rank", r.rank},
            {"world_size", r.world_size},
            {"steps", r.steps},
            {"stopped_by_time", r.stopped_by_time},
            {"loss_start", r.loss_start},
            {"loss_end", r.loss_end},
            {"seconds", r.seconds},
            {"tokens_per_s", r.tokens_per_s},
            {"params", r.params},
            {"tokens_per_step", r.tokens_per_step},
            {"mean_step_ms", r.mean_step_ms},
            {"median_step_ms", r.median_step_ms},
            {"mean_phases_ms", PhaseTimesToJson(r.mean_phases)},
            {"mean_comm_ms", r.mean_comm_ms},
            {"overlap_fraction", r.overlap_fraction},
            {"observability_fraction", r.observability_fraction},
            {"loader",
             {{"data_bound", r.loader.data_bound},
              {"data_wait_fraction", r.loader.data_wait_fraction},
              {"num_workers", r.loader.num_workers},
              {"suggested_workers", r.loader.suggested_workers},
              {"message", r.loader.message}}},
            {"corpus", CorpusStatsToJson(r.corpus)},
            {"precision", r.precision},
            {"threads", r.threads},
            {"device",
             {{"type", r.device},
              {"name", r.device_name},
              {"memory_source", r.memory_source},
              {"memory_peak_bytes", r.memory_peak_bytes},
              {"memory_reserved_bytes", r.memory_reserved_bytes},
              {"peak_flops", r.peak_flops},
              {"peak_flops_source", r.peak_flops_source},
              {"mfu", r.mfu}}},
            {"metrics_path", r.metrics_path},
            {"weights_checksum", r.weights_checksum},
            {"checkpoint",
             {{"resumed_from_step", r.resumed_from_step},
              {"resumed_from", r.resumed_from},
              {"saved", r.checkpoints_saved},
              {"blocked_ms", r.checkpoint_blocked_ms},
              {"snapshot_ms", r.checkpoint_snapshot_ms}}}};
  if (r.eval) {
    auto finite = [](double v) { return std::isfinite(v) ? json(v) : json(nullptr); };
    j["eval"] = {
        {"documents", r.val_corpus.documents},      {"tokens", r.val_corpus.tokens},
        {"sequences", r.val_corpus.sequences},      {"evaluations", r.evaluations},
        {"val_loss_last", finite(r.val_loss_last)}, {"val_loss_min", finite(r.val_loss_min)},
        {"val_loss_min_step", r.val_loss_min_step}};
  }
  if (!r.dump_dir.empty()) j["dump"] = {{"dir", r.dump_dir}, {"steps", r.dump_steps}};
  return j;
}

absl::StatusOr<std::vector<WorkerSweepRow>> SweepWorkers(const TrainConfig& config,
                                                         const TrainOptions& options,
                                                         const std::vector<int>& values,
                                                         int steps) {
  std::vector<WorkerSweepRow> rows;
  for (int w : values) {
    TrainConfig c = config;
    c.data.num_workers = w;
    c.train.steps = steps;
    c.train.max_seconds = 0;
    TrainOptions o = options;
    o.distributed_from_env = false;
    o.on_step = nullptr;
    o.write_weights = false;
    o.resume.clear();
    o.run_dir = absl::StrCat(options.run_dir, "/sweep/workers", w);
    TS_ASSIGN_OR_RETURN(TrainResult r, Train(c, o));
    WorkerSweepRow row;
    row.num_workers = w;
    row.step_ms = r.mean_step_ms;
    row.data_wait_fraction = r.loader.data_wait_fraction;
    row.tokens_per_s = r.tokens_per_s;
    rows.push_back(row);
  }
  return rows;
}

}  // namespace trainscope::train
