// `trainscope train`: the reference trainer (`--sweep-workers`, `--probe-batch` measure it). A
// shell: flags -> train::ApplyOverrides, the process's signal handlers and allocator policy ->
// train::Train (or SweepWorkers, ProbeBatch) -> print what train/train_run.h renders.
#include <malloc.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cli/comm_host.h"
#include "cli/command.h"
#include "cli/exit.h"
#include "cli/stop_signals.h"
#include "nlohmann/json.hpp"
#include "trainscope/core/os.h"
#include "trainscope/core/run_dir.h"
#include "trainscope/core/run_dir_lock.h"
#include "trainscope/core/subprocess.h"
#include "trainscope/train/config.h"
#include "trainscope/train/dump.h"
#include "trainscope/train/probe.h"
#include "trainscope/train/train_run.h"
#include "trainscope/train/trainer.h"

namespace trainscope::cli {
namespace {

struct TrainFlags {
  std::string config;
  std::string run_dir;
  bool json = false;
  train::TrainOverrides overrides;  // --steps, --max-seconds, --comm-timeout, ...
  std::string backend = "gloo";
  bool sweep = false;
  std::string sweep_values = "0,1,2,4";
  int sweep_steps = 20;
  std::vector<std::string> inject;
  std::string resume;  // "", "latest" or a checkpoint path
  bool probe = false;  // --probe-batch (train/probe.h)
  train::ProbeRequest probe_request;
  std::string dump_steps;  // --dump (train/dump.h), with --dump-mode and --dump-level
  train::DumpOptions dump;
};

// An exception on a thread nobody catches on (gloo's, when ranks disagree on a size) ends in
// std::terminate: the trainer's comm watchdog dumps and ends the rank as any comm failure
// (exit 1), else the previous handler runs (ParseAndRun's "internal error", exit 3).
std::terminate_handler g_previous_terminate = nullptr;

[[noreturn]] void TerminateWithHangDump() {
  (void)train::DumpOnFatalException(std::current_exception());  // exits when it dumped
  if (g_previous_terminate != nullptr) g_previous_terminate();
  std::abort();
}

// `--probe-batch`: each candidate micro-batch is a child `trainscope train` of a few steps
// (train/probe.h); the table or --json, exit 0 with a recommendation, 1 without.
int RunProbeBatch(const TrainFlags& f, const train::TrainConfig& config, const std::string& path,
                  const std::string& run_dir) {
  if (f.sweep || !f.resume.empty() || !f.inject.empty()) {
    return ReportAndExitCode("train",
                             absl::InvalidArgumentError("--probe-batch cannot be combined with "
                                                        "--sweep-workers, --resume or --inject"));
  }
  train::ProbeOptions o = train::ProbeOptionsFor(f.probe_request, SelfExecutablePath(), run_dir);
  o.on_progress = StderrLines("");
  auto report = train::ProbeBatch(config, o, Os::Default());
  if (!report.ok()) return ReportAndExitCode("train", report.status());
  std::printf("%s", (f.json ? train::ProbeRunJson(*report, path, run_dir).dump(2) + "\n"
                            : absl::StrCat(train::RenderProbeReport(*report),
                                           "candidate runs: ", o.work_dir, "\n"))
                        .c_str());
  return report->recommended >= 0 ? kExitOk : kExitProblems;
}

// `--sweep-workers`: one short single-rank run per data.num_workers value, the best one.
int RunSweep(const TrainFlags& f, const train::TrainConfig& config, train::TrainOptions o,
             const StopOnSignals& signals) {
  auto values = train::ParseSweepValues(f.sweep_values);
  if (!values.ok()) return ReportAndExitCode("train", values.status());
  o.on_step = nullptr;
  auto rows = train::SweepWorkers(config, o, *values, f.sweep_steps);
  if (!rows.ok()) return signals.ExitCode("train", rows.status());
  std::printf("%s", (f.json ? train::SweepToJson(*rows).dump(2) + "\n"
                            : train::RenderSweep(*rows, f.sweep_steps))
                        .c_str());
  return kExitOk;
}

// A failed run ends with diagnose's reading of the metrics it left; a non-finite step's --json
// has the localisation record under "nonfinite" (the error line is its one-sentence verdict).
int ReportFailure(const TrainFlags& f, const absl::Status& status, const std::string& run_dir,
                  const StopOnSignals& signals) {
  const std::vector<Finding> findings = train::DiagnoseFailedRun(status, run_dir);
  const nlohmann::json j = f.json ? train::FailedRunJson(status, run_dir, findings) : nullptr;
  if (!j.is_null()) std::printf("%s\n", j.dump(2).c_str());
  const int code = signals.ExitCode("train", status);
  std::fprintf(stderr, "%s", train::RenderFailureFindings(findings, run_dir).c_str());
  return code;
}

// Allocator policy of a training process (train.keep_host_memory; the library leaves it
// alone): glibc's default trims and mmaps the few MB of activations each step frees, so each
// step pays the page faults again (4-6% of the step on 2 cores). Blocks up to 32 MB come from
// the heap, which shrinks only past 1 GB of free top. Set before the model is built.
void KeepFreedHostMemory() {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

int RunTrain(const TrainFlags& f) {
  absl::StatusOr<std::string> path = train::ConfigPathOrDefault(f.config);
  if (!path.ok()) return ReportAndExitCode("train", path.status());
  auto config = train::LoadTrainConfig(*path);
  if (!config.ok()) return ReportAndExitCode("train", config.status());
  if (config->train.keep_host_memory) KeepFreedHostMemory();
  // SIGINT/SIGTERM/SIGHUP stop the trainer between steps (exit 128 + the signal).
  StopOnSignals signals;
  // SIGUSR1: the comm watchdog dumps the flight recorder and stacks (the launcher asks);
  // caught only once the watchdog runs (before that, a dump cannot be written).
  std::optional<DumpOnSignal> dump_signal;
  auto inject = train::ParseInjections(f.inject);
  if (!inject.ok()) return ReportAndExitCode("train", inject.status());
  const absl::Status overridden = train::ApplyOverrides(f.overrides, &*config);
  if (!overridden.ok()) return ReportAndExitCode("train", overridden);
  auto dump = train::ResolveDumpOptions(f.dump_steps, f.dump, config->train.steps);
  if (!dump.ok()) return ReportAndExitCode("train", dump.status());
  // One writer per run directory (core/run_dir_lock.h), held until we exit: a second
  // trainer on a directory in use exits 2 naming the holder, before it writes anything. The
  // ranks of one job share a job id (TRAINSCOPE_JOB_ID from `trainscope launch`, else the
  // rendezvous endpoint): the first to arrive holds the lock, the others join it.
  absl::StatusOr<std::string> default_dir = train::DefaultRunDir();
  if (f.run_dir.empty() && !default_dir.ok())
    return ReportAndExitCode("train", default_dir.status());
  const std::string run_dir = f.run_dir.empty() ? *default_dir : f.run_dir;
  run_dir::LockOptions lock_options;
  lock_options.job_id = run_dir::CurrentJobId();
  absl::StatusOr<run_dir::RunDirLock> lock = run_dir::LockRunDir(run_dir, lock_options);
  if (!lock.ok()) return ReportAndExitCode("train", lock.status());
  if (f.probe) return RunProbeBatch(f, *config, *path, run_dir);
  train::TrainOptions o;
  o.run_dir = run_dir;
  o.comm_backend = f.backend;
  o.stop = signals.stop();
  o.dump_request = DumpOnSignal::requests();
  o.on_watchdog_started = [&dump_signal] { dump_signal.emplace(); };
  o.inject = *std::move(inject);
  o.resume = f.resume;
  o.dump = *std::move(dump);
  o.on_notice = StderrLines("");
  o.on_rank_notice = StderrLines("trainscope train: ");  // every rank's (an --inject firing)
  o.comm_host = TerminalCommHost();
  // A stuck or failed collective ends the rank at once, the dumps already on disk: one line
  // naming the op and its sequence number, exit 1 (a blocked training thread cannot unwind).
  g_previous_terminate = std::set_terminate(TerminateWithHangDump);
  o.on_comm_timeout = ExitOnCommTimeout("train");
  o.on_step = [log_every = config->train.log_every,
               total = config->train.steps](const train::StepRecord& s) {
    std::fprintf(stderr, "%s", train::StepProgressLine(s, total, log_every).c_str());
  };
  if (f.sweep) return RunSweep(f, *config, o, signals);
  auto r = train::Train(*config, o);
  if (!r.ok()) return ReportFailure(f, r.status(), o.run_dir, signals);
  std::printf("%s", (f.json ? train::TrainRunJson(*r, o.run_dir, *path).dump(2) + "\n"
                            : train::RenderTrainResult(*r, o.run_dir))
                        .c_str());
  return kExitOk;
}

}  // namespace

void RegisterTrainCommand(CLI::App& parent, CommandContext& ctx) {
  auto flags = std::make_shared<TrainFlags>();
  CLI::App* cmd = parent.add_subcommand(
      "train", "reference LLM trainer (GPT decoder on libtorch) with per-rank step metrics");
  cmd->add_option("--config", flags->config,
                  "trainer config JSON (docs/formats.md); default: bundled configs/default.json");
  cmd->add_option("--run-dir", flags->run_dir,
                  "run directory (default: $TRAINSCOPE_RUN_DIR, else runs/train-<UTC time>-<pid>)");
  cmd->add_flag("--json", flags->json, "print the result as JSON");
  cmd->add_option("--steps", flags->overrides.steps, "override train.steps")
      ->check(kPositiveNumber);
  cmd->add_option("--max-seconds", flags->overrides.max_seconds, "override train.max_seconds")
      ->check(kNonNegativeNumber);
  cmd->add_option("--backend", flags->backend, "comm backend for data-parallel runs (gloo|mpi)");
  cmd->add_option("--device", flags->overrides.device,
                  "train on cpu, cuda or cuda:N (overrides train.device)");
  cmd->add_option("--device-tflops", flags->overrides.device_tflops,
                  "the device's peak TFLOP/s, MFU's denominator (overrides train.device_tflops)")
      ->check(kPositiveNumber);
  cmd->add_option("--comm-timeout", flags->overrides.comm_timeout_s,
                  "seconds a collective may take before the rank dumps its flight recorder and "
                  "stacks to <run dir>/hang/ and exits 1 (overrides comm.timeout_s, default "
                  "600)");
  cmd->add_option("--compression", flags->overrides.compression,
                  "gradient compression of data-parallel runs: none|fp16|bf16|powersgd|topk "
                  "(overrides comm.compression)");
  cmd->add_option("--inject", flags->inject,
                  "testing aid, repeatable: make one rank misbehave at the first collective of "
                  "one step. KIND:rank=R,step=S with KIND skip_collective, wrong_op, "
                  "wrong_size, wrong_dtype; sleep:rank=R,step=S,seconds=X; "
                  "exit:rank=R,step=S,code=C; numeric faults nan_forward|nan_backward:layer=L,"
                  "step=S[,rank=R], inf_weight:layer=L,step=S, lr_spike:factor=F,step=S, "
                  "nan_data:step=S[,rank=R] (docs/formats.md)")
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->add_option("--resume", flags->resume,
                  "continue from a checkpoint: 'latest' (the newest complete one in the run's "
                  "checkpoint folder; a fresh start when there is none) or a step-<N> path; "
                  "metrics are appended to the same run directory");
  cmd->add_option("--dump", flags->dump_steps,
                  "op dumps of these steps (3, 1,4 or 2-5) in msprobe's layout under <run "
                  "dir>/dump/step<N>/rank<R>, for `trainscope compare A/dump B/dump`");
  cmd->add_option("--dump-mode", flags->dump.mode, "statistics (default), tensor (.pt files), md5");
  cmd->add_option("--dump-level", flags->dump.level, "L0 (modules, default) or mix (+ functions)");
  cmd->add_flag("--sweep-workers", flags->sweep,
                "measure step time for several data.num_workers values and report the best");
  cmd->add_option("--sweep-values", flags->sweep_values, "num_workers values to sweep (0,1,2,4)");
  cmd->add_option("--sweep-steps", flags->sweep_steps, "steps per sweep value (20)")
      ->check(kPositiveNumber);
  cmd->add_flag("--probe-batch", flags->probe,
                "find the micro-batch: run a few steps per candidate (each a child run), growing "
                "from a safe guess and stopping before the memory limit; recommend micro-batch "
                "and accumulation (<= 16) for the config's global batch (exit 1: nothing fits)");
  cmd->add_option("--probe-steps", flags->probe_request.steps,
                  "steps per probe candidate (5; the first 2 are warm-up)")
      ->check(CLI::Range(2, 1000));
  cmd->add_option("--probe-memory-limit", flags->probe_request.memory_limit_gb,
                  "memory one rank may use, GB = 1e9 bytes (default: train.device cuda: the "
                  "GPU's free memory (nvidia-smi); cpu: min(MemAvailable, cgroup room) / "
                  "--probe-ranks)")
      ->check(kPositiveNumber);
  cmd->add_option("--probe-ranks", flags->probe_request.ranks,
                  "data-parallel ranks of the real run on this machine (1)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--probe-global-batch", flags->probe_request.global_batch,
                  "sequences per optimizer step, all ranks (default: the config's micro_batch x "
                  "grad_accum x --probe-ranks)")
      ->check(kPositiveNumber);
  cmd->callback([flags, &ctx] { ctx.exit_code = RunTrain(*flags); });
}

}  // namespace trainscope::cli
