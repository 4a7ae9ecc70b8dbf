// `trainscope selftest train`: a short real training run that must converge.
#include <cstdio>
#include <string>

#include "cli/command.h"
#include "cli/exit.h"
#include "cli/stop_signals.h"
#include "nlohmann/json.hpp"
#include "trainscope/core/table.h"
#include "trainscope/train/selftest.h"

namespace trainscope::cli {
namespace {

struct SelftestTrainFlags {
  bool json = false;
  bool quick = false;
  double max_seconds = 0;
  std::string device;
  double device_tflops = 0;
  std::string config;
  std::string run_dir;
};

int RunSelftestTrain(const SelftestTrainFlags& f) {
  train::SelftestOptions o;
  o.quick = f.quick;
  o.max_seconds = f.max_seconds;
  o.device = f.device;
  o.device_tflops = f.device_tflops;
  o.config_path = f.config;
  o.run_dir = f.run_dir;
  if (!f.json) {
    o.on_step = [](const train::StepRecord& s) {
      if (s.step % 25 != 0 && s.step != 1) return;
      std::fprintf(stderr, "selftest train: step %d  loss %.3f  tokens/s %s\n", s.step, s.loss,
                   FormatCount(static_cast<long long>(s.tokens_per_s)).c_str());
    };
  }
  StopOnSignals signals;  // a stop ends the metrics file; exit 128 + the signal
  o.stop = signals.stop();
  auto r = train::RunSelftestTrain(o);
  if (!r.ok()) return signals.ExitCode("selftest train", r.status());
  if (f.json) {
    std::printf("%s\n", train::SelftestResultToJson(*r).dump(2).c_str());
  } else {
    std::printf("selftest train: %s\n", r->passed ? "PASS" : "FAIL");
    std::printf("  loss %s -> %s (target < %s) in %d steps, %s s%s\n",
                FormatDouble(r->loss_start, 3).c_str(), FormatDouble(r->loss_end, 3).c_str(),
                FormatDouble(r->target_loss, 3).c_str(), r->steps,
                FormatDouble(r->seconds, 1).c_str(),
                r->train.stopped_by_time ? " (time limit)" : "");
    std::printf("  tokens/s %s, %s params, %s, %d threads, device %s (%s)\n",
                FormatCount(static_cast<long long>(r->tokens_per_s)).c_str(),
                FormatCount(r->train.params).c_str(), r->train.precision.c_str(), r->train.threads,
                r->train.device.c_str(), r->train.device_name.c_str());
    const char* peak_what = r->peak_source == "measured" ? "a measured matmul peak"
                            : r->peak_source == "table"  ? "the device's data-sheet peak"
                                                         : "the given peak";
    std::printf("  MFU %s%% (6 x params x tokens/s = %s GFLOP/s of %s of %s GFLOP/s)\n",
                FormatDouble(100 * r->mfu, 1).c_str(),
                FormatDouble(r->model_flops_per_s / 1e9, 2).c_str(), peak_what,
                FormatDouble(r->peak_flops / 1e9, 1).c_str());
    if (r->train.memory_peak_bytes >= 0) {
      std::printf("  memory peak %s (%s)\n",
                  FormatBytes(static_cast<double>(r->train.memory_peak_bytes)).c_str(),
                  r->train.memory_source.c_str());
    }
    std::printf("  metrics: %s\n", r->train.metrics_path.c_str());
    if (!r->passed) std::printf("  reason: %s\n", r->reason.c_str());
  }
  return r->passed ? kExitOk : kExitProblems;
}

}  // namespace

void RegisterSelftestTrainCommand(CLI::App& parent, CommandContext& ctx) {
  auto flags = std::make_shared<SelftestTrainFlags>();
  CLI::App* cmd = parent.add_subcommand(
      "train", "baseline training run on bundled real text: must converge; tokens/s and MFU");
  cmd->add_flag(
      "--json", flags->json,
      "print JSON: passed, reason, loss_start, loss_end, tokens_per_s, mfu, steps, seconds");
  cmd->add_flag("--quick", flags->quick, "shorter run (< 40 s) with a higher loss bar");
  cmd->add_option("--max-seconds", flags->max_seconds, "bound the training time (seconds)")
      ->check(kPositiveNumber);
  cmd->add_option("--config", flags->config,
                  "run this config instead of the bundled one (its train.target_loss is the bar)");
  cmd->add_option("--run-dir", flags->run_dir, "where to write metrics (default: a temp dir)");
  cmd->add_option("--device", flags->device,
                  "train on cpu, cuda or cuda:N (default: the config's)");
  cmd->add_option("--device-tflops", flags->device_tflops,
                  "the device's peak TFLOP/s for MFU (default: known GPUs' table, else measured)")
      ->check(kPositiveNumber);
  cmd->callback([flags, &ctx] { ctx.exit_code = RunSelftestTrain(*flags); });
}

}  // namespace trainscope::cli
