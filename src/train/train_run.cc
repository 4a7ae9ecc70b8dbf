// A `trainscope train` invocation's library side (train/train_run.h): the probe's options,
// the worker sweep's choice and report, a finished run's JSON and text, a failed run's
// diagnosis.
#include "trainscope/train/train_run.h"

#include <sys/resource.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <system_error>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "trainscope/core/env_vars.h"
#include "trainscope/core/formats.h"
#include "trainscope/core/json_text.h"
#include "trainscope/core/os.h"
#include "trainscope/core/run_dir.h"
#include "trainscope/core/run_dir_lock.h"
#include "trainscope/core/table.h"
#include "trainscope/diagnose/diagnose.h"
#include "trainscope/train/anomaly.h"
#ifdef TS_TRAIN_WITH_COMM
#include "trainscope/comm/join.h"
#endif

namespace trainscope::train {
namespace {

using json = nlohmann::json;

std::string Pct(double part, double whole) {
  return whole > 0 ? FormatDouble(100.0 * part / whole, 1) + "%" : "-";
}

std::string CountText(double n) { return FormatCount(static_cast<long long>(n)); }

}  // namespace

absl::StatusOr<std::string> DefaultRunDir() {
  std::string dir;
  if (Os::Default()->GetEnv(envvar::kRunDir, &dir) && !dir.empty()) return dir;
  if (const std::string job = run_dir::CurrentJobId(); !job.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "this rank belongs to job ", job, ": give every rank the same --run-dir DIR (or ",
        envvar::kRunDir, "), else each would write a run directory of its own"));
  }
  return run_dir::DefaultRunDir(run_dir::kTrain);
}

// ---------------------------------------------------------------------------------------
// --probe-batch
// ---------------------------------------------------------------------------------------

ProbeOptions ProbeOptionsFor(const ProbeRequest& request, const std::string& binary,
                             const std::string& run_dir) {
  ProbeOptions o;
  o.steps = request.steps;
  o.warmup_steps = request.steps >= 4 ? 2 : 1;
  o.ranks = request.ranks;
  o.global_batch = request.global_batch;
  if (request.memory_limit_gb > 0) {
    o.memory_limit_bytes = static_cast<int64_t>(request.memory_limit_gb * 1e9);
  }
  o.binary = binary;
  o.work_dir = run_dir::Join(run_dir::Join(run_dir, run_dir::kTrain), "probe");
  return o;
}

json ProbeRunJson(const ProbeReport& report, const std::string& config_path,
                  const std::string& run_dir) {
  json j = ProbeReportToJson(report);
  j["config"] = config_path;
  j["run_dir"] = run_dir;
  return j;
}

// ---------------------------------------------------------------------------------------
// --sweep-workers
// ---------------------------------------------------------------------------------------

absl::StatusOr<std::vector<int>> ParseSweepValues(const std::string& text) {
  std::vector<int> values;
  for (absl::string_view v : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    int n = 0;
    if (!absl::SimpleAtoi(v, &n) || n < 0 || n > 64) {
      return absl::InvalidArgumentError(absl::StrCat("--sweep-values: \"", v, "\" is not 0..64"));
    }
    values.push_back(n);
  }
  return values;
}

size_t BestSweepRow(const std::vector<WorkerSweepRow>& rows) {
  size_t best = 0;
  for (size_t i = 1; i < rows.size(); ++i) {
    if (rows[i].tokens_per_s > rows[best].tokens_per_s * 1.02) best = i;
  }
  return best;
}

json SweepToJson(const std::vector<WorkerSweepRow>& rows) {
  json j = {{"format", formats::kTrainSweep},
            {"version", 1},
            {"sweep", json::array()},
            {"best_num_workers", rows[BestSweepRow(rows)].num_workers}};
  for (const auto& r : rows) {
    j["sweep"].push_back({{"num_workers", r.num_workers},
                          {"step_ms", r.step_ms},
                          {"data_wait_fraction", r.data_wait_fraction},
                          {"tokens_per_s", r.tokens_per_s}});
  }
  return j;
}

std::string RenderSweep(const std::vector<WorkerSweepRow>& rows, int steps) {
  Table t({"num_workers", "step ms", "data wait", "tokens/s"});
  for (const auto& r : rows) {
    t.AddRow({std::to_string(r.num_workers), FormatDouble(r.step_ms, 1),
              FormatDouble(100 * r.data_wait_fraction, 1) + "%", CountText(r.tokens_per_s)});
  }
  const WorkerSweepRow& best = rows[BestSweepRow(rows)];
  return absl::StrCat(
      t.Render(), absl::StrFormat("best: data.num_workers = %d (%s tokens/s over %d steps each)\n",
                                  best.num_workers, CountText(best.tokens_per_s), steps));
}

// ---------------------------------------------------------------------------------------
// A finished run
// ---------------------------------------------------------------------------------------

json TrainRunJson(const TrainResult& r, const std::string& run_dir,
                  const std::string& config_path) {
  json j = TrainResultToJson(r);
  j["format"] = formats::kTrainResult;
  j["version"] = 1;
  j["run_dir"] = run_dir;
  j["config"] = config_path;
  // Linux reports ru_maxrss in kilobytes.
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) == 0) {
    j["peak_rss_bytes"] = static_cast<int64_t>(usage.ru_maxrss) * 1024;
  }
  return j;
}

std::string RenderTrainResult(const TrainResult& r, const std::string& run_dir) {
  if (r.rank != 0) {
    return absl::StrFormat("train: rank %d done, %d steps, weights xxh3_64 %s\n", r.rank, r.steps,
                           r.weights_checksum);
  }
  std::string out =
      absl::StrFormat("train: %d steps on %d rank(s), %s params, %s, %d threads%s\n", r.steps,
                      r.world_size, FormatCount(r.params), r.precision, r.threads,
                      r.stopped_by_time ? " (stopped at train.max_seconds)" : "");
  absl::StrAppendFormat(&out, "loss %s -> %s   tokens/s %s   step %s ms\n",
                        FormatDouble(r.loss_start, 3), FormatDouble(r.loss_end, 3),
                        CountText(r.tokens_per_s), FormatDouble(r.mean_step_ms, 1));
  if (r.eval && r.evaluations > 0) {
    absl::StrAppendFormat(
        &out, "val_loss %s (lowest %s at step %d; %d evaluations on %s held-out tokens)\n",
        FormatDouble(r.val_loss_last, 3), FormatDouble(r.val_loss_min, 3), r.val_loss_min_step,
        r.evaluations, CountText(r.val_corpus.tokens));
  }
  Table t({"phase", "ms/step", "share"});
  const PhaseTimes& p = r.mean_phases;
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
  absl::StrAppend(&out, t.Render(), "loader: ", r.loader.message, "\n");
  if (r.corpus.bad_records + r.corpus.missing_text_field > 0) {
    absl::StrAppendFormat(
        &out, "corpus: %d bad records, %d without a text field skipped (first: %s)\n",
        r.corpus.bad_records, r.corpus.missing_text_field, r.corpus.first_bad_record);
  }
  absl::StrAppend(&out, "run dir: ", run_dir,
                  "   metrics: ", r.metrics_path.empty() ? "(observability off)" : r.metrics_path,
                  "\n");
  absl::StrAppend(&out, "weights xxh3_64: ", r.weights_checksum, "\n");
  if (!r.dump_dir.empty()) {
    absl::StrAppendFormat(&out, "op dumps: %s (%d step(s); `trainscope compare A/dump B/dump`)\n",
                          r.dump_dir, r.dump_steps);
  }
  return out;
}

std::string StepProgressLine(const StepRecord& s, int total_steps, int log_every) {
  if (!s.has_val &&
      (log_every <= 0 || (s.step % log_every != 0 && s.step != 1 && s.step != total_steps))) {
    return "";
  }
  const std::string val = s.has_val ? absl::StrCat("  val_loss ", FormatDouble(s.val_loss, 4)) : "";
  return absl::StrFormat(
      "step %d/%d  loss %.4f%s  lr %.2e  grad_norm %.3f  tokens/s %s  data %s  comm %s\n", s.step,
      total_steps, s.loss, val, s.lr, s.grad_norm, CountText(s.tokens_per_s),
      Pct(s.phases.data_wait_ms, s.step_ms), Pct(s.phases.comm_wait_ms, s.step_ms));
}

// ---------------------------------------------------------------------------------------
// A failed run
// ---------------------------------------------------------------------------------------

std::string DumpOnFatalException(std::exception_ptr e) {
  std::string what = "an exception escaped an engine thread";
  if (e) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      what = absl::StrCat("an engine thread threw: ", ex.what());
    } catch (...) {
    }
  }
  return DumpOnFatalError(what);
}

std::vector<Finding> DiagnoseFailedRun(const absl::Status& status, const std::string& run_dir) {
  // Rank 0 of whichever launcher started us (RANK, SLURM_PROCID, OMPI_COMM_WORLD_RANK...).
  bool rank0 = true;
#ifdef TS_TRAIN_WITH_COMM
  auto world = comm::JoinOptionsFromEnvironment();
  rank0 = !world.ok() || world->comm.rank == 0;
#endif
  std::vector<Finding> findings;
  if (!rank0 || status.code() == absl::StatusCode::kCancelled) return findings;
  const std::string train_dir = run_dir::Join(run_dir, run_dir::kTrain);
  std::error_code ec;
  if (std::filesystem::is_directory(train_dir, ec)) {
    if (auto d = diagnose::Diagnose({train_dir}); d.ok()) findings = d->findings;
  }
  return findings;
}

json FailedRunJson(const absl::Status& status, const std::string& run_dir,
                   const std::vector<Finding>& findings) {
  auto payload = status.GetPayload(kNonfinitePayload);
  if (!payload) return nullptr;
  json nonfinite;  // our own record; null if it ever failed the shared policy
  if (!ParseJsonText(std::string(*payload), kJsonMaxDepth, &nonfinite, nullptr)) {
    nonfinite = nullptr;
  }
  json j = {{"error", std::string(status.message())},
            {"run_dir", run_dir},
            {"nonfinite", std::move(nonfinite)}};
  j["findings"] = json::array();
  for (const Finding& fd : findings) j["findings"].push_back(FindingToJson(fd));
  return j;
}

std::string RenderFailureFindings(const std::vector<Finding>& findings,
                                  const std::string& run_dir) {
  std::string out;
  int shown = 0;
  for (const Finding& fd : findings) {
    if (fd.severity == Severity::kInfo) continue;
    if (shown++ == 0) absl::StrAppend(&out, "diagnose (", run_dir, "):\n");
    absl::StrAppend(&out, "  ", SeverityName(fd.severity), ": ", fd.title, " (", fd.id, ")\n");
    if (!fd.fix.empty()) absl::StrAppend(&out, "    fix: ", fd.fix, "\n");
  }
  return out;
}

}  // namespace trainscope::train
