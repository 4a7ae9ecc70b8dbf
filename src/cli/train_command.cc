// `trainscope train --config FILE [--run-dir DIR] [--resume latest|PATH]`: the reference trainer;
// `--sweep-workers` and `--probe-batch` measure it over several settings.
#include <malloc.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <filesystem>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cli/command.h"
#include "cli/stop_signals.h"
#include "nlohmann/json.hpp"
#include "trainscope/comm/join.h"
#include "trainscope/core/env_vars.h"
#include "trainscope/core/exit.h"
#include "trainscope/core/finding.h"
#include "trainscope/core/json_text.h"
#include "trainscope/core/os.h"
#include "trainscope/core/run_dir.h"
#include "trainscope/core/run_dir_lock.h"
#include "trainscope/core/subprocess.h"
#include "trainscope/core/table.h"
#include "trainscope/diagnose/diagnose.h"
#include "trainscope/train/config.h"
#include "trainscope/train/probe.h"
#include "trainscope/train/trainer.h"

namespace trainscope::cli {
namespace {

struct TrainFlags {
  std::string config;
  std::string run_dir;
  bool json = false;
  int steps = 0;
  double max_seconds = -1;
  std::string backend = "gloo";
  bool sweep = false;
  std::string sweep_values = "0,1,2,4";
  int sweep_steps = 20;
  double comm_timeout_s = -1;  // -1: comm.timeout_s of the config
  std::string compression;     // "": comm.compression of the config
  std::vector<std::string> inject;
  std::string resume;  // "", "latest" or a checkpoint path
  std::string device;  // "": train.device of the config
  double device_tflops = 0;
  // --probe-batch (train/probe.h)
  bool probe = false;
  int probe_steps = 5;
  double probe_memory_limit_gb = 0;  // 0: detect
  int probe_ranks = 1;
  int probe_global_batch = 0;  // 0: the config's
};

// An exception thrown on a thread nobody can catch on (gloo's network thread raises when
// ranks disagree on a collective's size) ends in std::terminate: first let the running
// trainer's comm watchdog dump and end the rank like any comm failure (exit 1, one line),
// then fall back to the previous handler (ParseAndRun's "internal error", exit 3).
std::terminate_handler g_previous_terminate = nullptr;

[[noreturn]] void TerminateWithHangDump() {
  std::string what = "an exception escaped an engine thread";
  if (std::exception_ptr e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      what = absl::StrCat("an engine thread threw: ", ex.what());
    } catch (...) {
    }
  }
  (void)train::DumpOnFatalError(what);  // calls on_comm_timeout (exits) when it dumped
  if (g_previous_terminate != nullptr) g_previous_terminate();
  std::abort();
}

std::string DefaultRunDir() {
  std::string dir;
  if (Os::Default()->GetEnv(envvar::kRunDir, &dir) && !dir.empty()) return dir;
  std::time_t now = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%d-%H%M%S", std::localtime(&now));
  return absl::StrCat("trainscope-runs/train-", buf);
}

std::string Pct(double part, double whole) {
  return whole > 0 ? FormatDouble(100.0 * part / whole, 1) + "%" : "-";
}

void PrintResult(const train::TrainResult& r, const std::string& run_dir) {
  std::printf("train: %d steps on %d rank(s), %s params, %s, %d threads%s\n", r.steps, r.world_size,
              FormatCount(r.params).c_str(), r.precision.c_str(), r.threads,
              r.stopped_by_time ? " (stopped at train.max_seconds)" : "");
  std::printf("loss %s -> %s   tokens/s %s   step %s ms\n", FormatDouble(r.loss_start, 3).c_str(),
              FormatDouble(r.loss_end, 3).c_str(),
              FormatCount(static_cast<long long>(r.tokens_per_s)).c_str(),
              FormatDouble(r.mean_step_ms, 1).c_str());
  if (r.eval && r.evaluations > 0) {
    std::printf("val_loss %s (lowest %s at step %d; %d evaluations on %s held-out tokens)\n",
                FormatDouble(r.val_loss_last, 3).c_str(), FormatDouble(r.val_loss_min, 3).c_str(),
                r.val_loss_min_step, r.evaluations,
                FormatCount(static_cast<long long>(r.val_corpus.tokens)).c_str());
  }
  Table t({"phase", "ms/step", "share"});
  const train::PhaseTimes& p = r.mean_phases;
  const double total = r.mean_step_ms;
  auto row = [&](const char* name, double ms) {
    t.AddRow({name, FormatDouble(ms, 2), Pct(ms, total)});
  };
  row("data_wait", p.data_wait_ms);
  row("h2d", p.h2d_ms);
  row("forward", p.forward_ms);
  row("backward", p.backward_ms);
  row("comm_wait", p.comm_wait_ms);
  row("optimizer", p.optimizer_ms);
  row("other", std::max(0.0, total - p.Sum()));
  std::printf("%s", t.Render().c_str());
  std::printf("loader: %s\n", r.loader.message.c_str());
  if (r.corpus.bad_records + r.corpus.missing_text_field > 0) {
    std::printf("corpus: %lld bad records, %lld without a text field skipped (first: %s)\n",
                static_cast<long long>(r.corpus.bad_records),
                static_cast<long long>(r.corpus.missing_text_field),
                r.corpus.first_bad_record.c_str());
  }
  std::printf("run dir: %s   metrics: %s\n", run_dir.c_str(),
              r.metrics_path.empty() ? "(observability off)" : r.metrics_path.c_str());
  std::printf("weights xxh3_64: %s\n", r.weights_checksum.c_str());
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
  train::ProbeOptions o;
  o.steps = f.probe_steps;
  o.warmup_steps = f.probe_steps >= 4 ? 2 : 1;
  o.ranks = f.probe_ranks;
  o.global_batch = f.probe_global_batch;
  if (f.probe_memory_limit_gb > 0) {
    o.memory_limit_bytes = static_cast<int64_t>(f.probe_memory_limit_gb * 1e9);
  }
  o.binary = SelfExecutablePath();
  o.work_dir = run_dir::Join(run_dir::Join(run_dir, run_dir::kTrain), "probe");
  o.on_progress = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
  auto report = train::ProbeBatch(config, o, Os::Default());
  if (!report.ok()) return ReportAndExitCode("train", report.status());
  if (f.json) {
    nlohmann::json j = train::ProbeReportToJson(*report);
    j["config"] = path;
    j["run_dir"] = run_dir;
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("%s", train::RenderProbeReport(*report).c_str());
    std::printf("candidate runs: %s\n", o.work_dir.c_str());
  }
  return report->recommended >= 0 ? kExitOk : kExitProblems;
}

// Allocator policy of a training process (train.keep_host_memory; the trainer library leaves
// the allocator alone). Every step frees and reallocates the same few MB of activations.
// glibc's default returns freed memory at the heap top to the kernel (trim) and serves
// blocks over its adaptive mmap threshold with fresh mappings, so each step pays page
// faults and page zeroing again: 5x the faults of the same loop under Python (whose small
// objects pin the heap top), and 4-6% of the step on 2 cores. Keep freed memory in the
// process instead: blocks up to 32 MB (glibc's maximum threshold) come from the heap, and
// the heap shrinks only past 1 GB of free top. Set before the model is built.
void KeepFreedHostMemory() {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

int RunTrain(const TrainFlags& f) {
  std::string path = f.config;
  if (path.empty()) {
    path = train::FindBundledConfig("default.json");
    if (path.empty()) {
      return ReportAndExitCode("train", absl::NotFoundError("bundled configs/default.json not "
                                                            "found; pass --config FILE"));
    }
  }
  auto config = train::LoadTrainConfig(path);
  if (!config.ok()) return ReportAndExitCode("train", config.status());
  if (config->train.keep_host_memory) KeepFreedHostMemory();
  // SIGINT/SIGTERM/SIGHUP stop the trainer between steps; it ends the metrics file with an
  // "end" record and the exit code is 128 + the signal (stop_signals.h).
  StopOnSignals signals;
  // SIGUSR1: the comm watchdog dumps the flight recorder and stacks (the launcher asks);
  // caught only once the watchdog runs (before that, a dump cannot be written).
  std::optional<DumpOnSignal> dump_signal;
  auto inject = train::ParseInjections(f.inject);
  if (!inject.ok()) return ReportAndExitCode("train", inject.status());
  if (f.comm_timeout_s != -1) {
    if (!(f.comm_timeout_s > 0 && f.comm_timeout_s <= train::kMaxCommTimeoutS)) {
      return ReportAndExitCode(
          "train", absl::InvalidArgumentError(absl::StrCat("--comm-timeout ", f.comm_timeout_s,
                                                           ": must be in (0, ",
                                                           train::kMaxCommTimeoutS, "] seconds")));
    }
    config->comm.timeout_s = f.comm_timeout_s;
  }
  if (!f.compression.empty()) config->comm.compression = f.compression;
  if (!f.device.empty()) config->train.device = f.device;
  if (f.device_tflops > 0) config->train.device_tflops = f.device_tflops;
  if (absl::Status v = train::ValidateTrainConfig(*config); !v.ok()) {
    return ReportAndExitCode("train", v);
  }
  if (f.steps > 0) config->train.steps = f.steps;
  if (f.max_seconds >= 0) config->train.max_seconds = f.max_seconds;
  // One writer per run directory (core/run_dir_lock.h), held until we exit: a second
  // trainer on a directory in use exits 2 naming the holder, before it writes anything. The
  // ranks of one job share a job id (TRAINSCOPE_JOB_ID from `trainscope launch`, else the
  // rendezvous endpoint): the first to arrive holds the lock, the others join it.
  const std::string run_dir = f.run_dir.empty() ? DefaultRunDir() : f.run_dir;
  run_dir::LockOptions lock_options;
  lock_options.job_id = run_dir::CurrentJobId();
  absl::StatusOr<run_dir::RunDirLock> lock = run_dir::LockRunDir(run_dir, lock_options);
  if (!lock.ok()) return ReportAndExitCode("train", lock.status());
  if (f.probe) return RunProbeBatch(f, *config, path, run_dir);
  train::TrainOptions o;
  o.run_dir = run_dir;
  o.comm_backend = f.backend;
  o.stop = signals.stop();
  o.dump_request = DumpOnSignal::requests();
  o.on_watchdog_started = [&dump_signal] { dump_signal.emplace(); };
  o.inject = *std::move(inject);
  o.resume = f.resume;
  o.on_notice = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
  // A stuck or failed collective ends the rank at once, the dumps already on disk: one line
  // naming the op and its sequence number, exit 1 (a blocked training thread cannot unwind).
  g_previous_terminate = std::set_terminate(TerminateWithHangDump);
  o.on_comm_timeout = [](const std::string& message) {
    std::fprintf(stderr, "trainscope train: error: %s\n", message.c_str());
    std::fflush(stdout);
    std::fflush(stderr);
    ::_exit(kExitProblems);
  };
  const int log_every = config->train.log_every;
  const int total = config->train.steps;
  o.on_step = [log_every, total](const train::StepRecord& s) {
    // Every log_every-th step, and every step an evaluation followed (its val_loss).
    if (!s.has_val &&
        (log_every <= 0 || (s.step % log_every != 0 && s.step != 1 && s.step != total))) {
      return;
    }
    const std::string val =
        s.has_val ? absl::StrCat("  val_loss ", FormatDouble(s.val_loss, 4)) : "";
    std::fprintf(
        stderr, "step %d/%d  loss %.4f%s  lr %.2e  grad_norm %.3f  tokens/s %s  data %s  comm %s\n",
        s.step, total, s.loss, val.c_str(), s.lr, s.grad_norm,
        FormatCount(static_cast<long long>(s.tokens_per_s)).c_str(),
        Pct(s.phases.data_wait_ms, s.step_ms).c_str(),
        Pct(s.phases.comm_wait_ms, s.step_ms).c_str());
  };
  if (f.sweep) {
    std::vector<int> values;
    for (absl::string_view v : absl::StrSplit(f.sweep_values, ',', absl::SkipEmpty())) {
      int n = 0;
      if (!absl::SimpleAtoi(v, &n) || n < 0 || n > 64) {
        return ReportAndExitCode("train", absl::InvalidArgumentError(absl::StrCat(
                                              "--sweep-values: \"", v, "\" is not 0..64")));
      }
      values.push_back(n);
    }
    o.on_step = nullptr;
    auto rows = train::SweepWorkers(*config, o, values, f.sweep_steps);
    if (!rows.ok()) return signals.ExitCode("train", rows.status());
    size_t best = 0;
    for (size_t i = 1; i < rows->size(); ++i) {
      if ((*rows)[i].tokens_per_s > (*rows)[best].tokens_per_s * 1.02) best = i;
    }
    if (f.json) {
      nlohmann::json j = {{"sweep", nlohmann::json::array()},
                          {"best_num_workers", (*rows)[best].num_workers}};
      for (const auto& r : *rows) {
        j["sweep"].push_back({{"num_workers", r.num_workers},
                              {"step_ms", r.step_ms},
                              {"data_wait_fraction", r.data_wait_fraction},
                              {"tokens_per_s", r.tokens_per_s}});
      }
      std::printf("%s\n", j.dump(2).c_str());
    } else {
      Table t({"num_workers", "step ms", "data wait", "tokens/s"});
      for (const auto& r : *rows) {
        t.AddRow({std::to_string(r.num_workers), FormatDouble(r.step_ms, 1),
                  FormatDouble(100 * r.data_wait_fraction, 1) + "%",
                  FormatCount(static_cast<long long>(r.tokens_per_s))});
      }
      std::printf("%s", t.Render().c_str());
      std::printf("best: data.num_workers = %d (%s tokens/s over %d steps each)\n",
                  (*rows)[best].num_workers,
                  FormatCount(static_cast<long long>((*rows)[best].tokens_per_s)).c_str(),
                  f.sweep_steps);
    }
    return kExitOk;
  }
  auto r = train::Train(*config, o);
  if (!r.ok()) {
    // A failed run ends with diagnose's reading of the metrics it left (rank 0; not for a
    // run stopped by a signal or one that never got to write metrics).
    // Rank 0 of whichever launcher started us (RANK, SLURM_PROCID, OMPI_COMM_WORLD_RANK...).
    auto world = comm::JoinOptionsFromEnvironment();
    const bool rank0 = !world.ok() || world->comm.rank == 0;
    std::vector<Finding> findings;
    if (rank0 && r.status().code() != absl::StatusCode::kCancelled) {
      const std::string train_dir = run_dir::Join(o.run_dir, run_dir::kTrain);
      std::error_code ec;
      if (std::filesystem::is_directory(train_dir, ec)) {
        if (auto d = diagnose::Diagnose({train_dir}); d.ok()) findings = d->findings;
      }
    }
    // A non-finite step: --json carries the localisation record under "nonfinite"; the
    // error line (stderr) is its one-sentence verdict.
    if (auto payload = r.status().GetPayload(train::kNonfinitePayload); payload && f.json) {
      nlohmann::json nonfinite;  // our own record; null if it ever failed the shared policy
      if (!ParseJsonText(std::string(*payload), kJsonMaxDepth, &nonfinite, nullptr)) {
        nonfinite = nullptr;
      }
      nlohmann::json j = {{"error", std::string(r.status().message())},
                          {"run_dir", o.run_dir},
                          {"nonfinite", std::move(nonfinite)}};
      j["findings"] = nlohmann::json::array();
      for (const Finding& fd : findings) j["findings"].push_back(FindingToJson(fd));
      std::printf("%s\n", j.dump(2).c_str());
    }
    const int code = signals.ExitCode("train", r.status());
    int shown = 0;
    for (const Finding& fd : findings) {
      if (fd.severity == Severity::kInfo) continue;
      if (shown++ == 0) std::fprintf(stderr, "diagnose (%s):\n", o.run_dir.c_str());
      std::fprintf(stderr, "  %s: %s (%s)\n", SeverityName(fd.severity), fd.title.c_str(),
                   fd.id.c_str());
      if (!fd.fix.empty()) std::fprintf(stderr, "    fix: %s\n", fd.fix.c_str());
    }
    return code;
  }
  if (f.json) {
    nlohmann::json j = train::TrainResultToJson(*r);
    j["run_dir"] = o.run_dir;
    j["config"] = path;
    // This process's peak RSS (what wait4 and /usr/bin/time report; the batch-size probe
    // reads it from its child runs). Linux reports kilobytes.
    rusage usage{};
    if (getrusage(RUSAGE_SELF, &usage) == 0) {
      j["peak_rss_bytes"] = static_cast<int64_t>(usage.ru_maxrss) * 1024;
    }
    std::printf("%s\n", j.dump(2).c_str());
  } else if (r->rank == 0) {
    PrintResult(*r, o.run_dir);
  } else {
    std::printf("train: rank %d done, %d steps, weights xxh3_64 %s\n", r->rank, r->steps,
                r->weights_checksum.c_str());
  }
  return kExitOk;
}

}  // namespace

void RegisterTrainCommand(CLI::App& parent, CommandContext& ctx) {
  auto flags = std::make_shared<TrainFlags>();
  CLI::App* cmd = parent.add_subcommand(
      "train", "reference LLM trainer (GPT decoder on libtorch) with per-rank step metrics");
  cmd->add_option("--config", flags->config,
                  "trainer config JSON (docs/formats.md); default: bundled configs/default.json");
  cmd->add_option(
      "--run-dir", flags->run_dir,
      "run directory (default: $TRAINSCOPE_RUN_DIR, else trainscope-runs/train-<time>)");
  cmd->add_flag("--json", flags->json, "print the result as JSON");
  cmd->add_option("--steps", flags->steps, "override train.steps")->check(kPositiveNumber);
  cmd->add_option("--max-seconds", flags->max_seconds, "override train.max_seconds")
      ->check(kNonNegativeNumber);
  cmd->add_option("--backend", flags->backend, "comm backend for data-parallel runs (gloo|mpi)");
  cmd->add_option("--device", flags->device,
                  "train on cpu, cuda or cuda:N (overrides train.device)");
  cmd->add_option("--device-tflops", flags->device_tflops,
                  "the device's peak TFLOP/s, MFU's denominator (overrides train.device_tflops)")
      ->check(kPositiveNumber);
  cmd->add_option("--comm-timeout", flags->comm_timeout_s,
                  "seconds a collective may take before the rank dumps its flight recorder and "
                  "stacks to <run dir>/hang/ and exits 1 (overrides comm.timeout_s, default "
                  "600)");
  cmd->add_option("--compression", flags->compression,
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
  cmd->add_flag("--sweep-workers", flags->sweep,
                "measure step time for several data.num_workers values and report the best");
  cmd->add_option("--sweep-values", flags->sweep_values, "num_workers values to sweep (0,1,2,4)");
  cmd->add_option("--sweep-steps", flags->sweep_steps, "steps per sweep value (20)")
      ->check(kPositiveNumber);
  cmd->add_flag("--probe-batch", flags->probe,
                "find the micro-batch: run a few steps per candidate (each a child run), growing "
                "from a safe guess and stopping before the memory limit; recommend micro-batch "
                "and accumulation (<= 16) for the config's global batch (exit 1: nothing fits)");
  cmd->add_option("--probe-steps", flags->probe_steps,
                  "steps per probe candidate (5; the first 2 are warm-up)")
      ->check(CLI::Range(2, 1000));
  cmd->add_option("--probe-memory-limit", flags->probe_memory_limit_gb,
                  "memory one rank may use, GB = 1e9 bytes (default: train.device cuda: the "
                  "GPU's free memory (nvidia-smi); cpu: min(MemAvailable, cgroup room) / "
                  "--probe-ranks)")
      ->check(kPositiveNumber);
  cmd->add_option("--probe-ranks", flags->probe_ranks,
                  "data-parallel ranks of the real run on this machine (1)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--probe-global-batch", flags->probe_global_batch,
                  "sequences per optimizer step, all ranks (default: the config's micro_batch x "
                  "grad_accum x --probe-ranks)")
      ->check(kPositiveNumber);
  cmd->callback([flags, &ctx] { ctx.exit_code = RunTrain(*flags); });
}

}  // namespace trainscope::cli
