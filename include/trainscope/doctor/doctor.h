// Doctor: every check a machine needs before it is trusted with a training job, in one
// command and one report (`trainscope doctor`).
//
// Each part (env fingerprint, env check, device, comm, baseline training) runs as a CHILD
// PROCESS of the trainscope binary with --json and a time budget, so that a crash or a
// hang in one part cannot take doctor down, and no part is linked into doctor. A part's
// JSON output is turned into one or more checks (name, verdict, value, expected, advice).
// A part that cannot run (verb not built, no device, time-out) is a "skip" with the
// reason; a part that ran and found a problem is a "fail" with what to do.
//
// Thread-safety: RunDoctor is meant to be called from one thread; the interrupt handling
// (interrupt.h) is process-wide.
#ifndef TRAINSCOPE_DOCTOR_DOCTOR_H_
#define TRAINSCOPE_DOCTOR_DOCTOR_H_

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "trainscope/core/check.h"
#include "trainscope/core/finding.h"

namespace trainscope::doctor {

// One part: the command line of a child process and its time budget.
struct Part {
  std::string name;               // "fingerprint", "env", "device", "comm", "train"
  std::vector<std::string> argv;  // argv[0] is a path or a name looked up in PATH
  double budget_s = 30;
};

struct Options {
  std::string self_exe;  // the trainscope binary the default parts run
  std::string run_dir;   // where report.md, report.json and parts/ go (created)
  bool quick = false;    // the quick budgets (< 1 min in all on 2 cores)
  // Parts to run, in order; empty: DefaultParts(self_exe, quick).
  std::vector<Part> parts;
  // Extra arguments appended to a part's argv, by part name (e.g. comm: --inject-error).
  std::map<std::string, std::vector<std::string>> extra_args;
  std::vector<std::string> skip;  // part names not to run (reported as skip)
  // The whole run's budget; a part gets min(its budget, what is left). 0: 280 s, quick 55 s.
  // The last 2.5 s of it are kept for stopping an overrunning part and writing the report.
  double total_budget_s = 0;
  // Called before and after each part (progress lines); may be empty.
  std::function<void(const std::string& line)> on_progress;
  // > 1: doctor itself is one rank of a launched job (torchrun, srun, mpirun, trainscope
  // launch: comm::JoinOptionsFromEnvironment's world size). The default comm part, which
  // inherits the launcher's variables, then joins that job as one of this many ranks
  // instead of starting its own 2 (or one per GPU).
  int comm_world_size = 0;
};

// The default parts and budgets (seconds):
//                 fingerprint  env  device  comm  train   (total)
//   full               30      30     60     90    150     280
//   quick               8       6     10     12     40      55
std::vector<Part> DefaultParts(const std::string& self_exe, bool quick);

// One line of the summary table, and of `doctor --json`: a part's check
// (trainscope/core/check.h, made with MakeCheck: its advice is its finding's fix) and the
// part that produced it.
struct Check : ::trainscope::Check {
  std::string part;
};

// How a part's child process ended.
struct PartOutcome {
  std::string name;
  std::vector<std::string> argv;
  bool started = false;  // false: skipped or not found
  int exit_code = -1;    // valid when exited
  int term_signal = 0;
  bool timed_out = false;
  double budget_s = 0;
  double wall_s = 0;
  std::string out, err;  // captured stdout / stderr
  std::string skip_reason;
};

// Turns one part's outcome into checks. Pure: no I/O (tested with canned outcomes).
// Rules: not started -> skip; time-out -> skip "timed out after N s"; exit 2 or "not
// built yet" -> skip with the part's own message; killed by a signal -> fail; stdout not
// JSON -> fail (exit != 0) or skip; otherwise the part's JSON is read (see doctor.cc).
// `device`: the device part's outcome when it ran before (may be null): the train part's
// MFU is then computed against the device part's matmul peak (MfuPeakFromDeviceReport).
std::vector<Check> EvaluatePart(const PartOutcome& outcome, const PartOutcome* device = nullptr);

// The peak doctor's MFU is computed against: the one the device part judged its matmul
// with, its benchmark "matmul_<precision>" on `train_device` ("cpu": device "cpu"; "cuda:N":
// "nvidiaN" or "cudaN"), so that MFU and the matmul check share one peak (on CPUs,
// device::EstimateCpuPeak). flops 0 when the report has no such peak.
struct MfuPeak {
  double flops = 0;     // FLOP/s
  std::string check;    // "device.cpu.matmul_fp32"
  std::string formula;  // the benchmark's peak_formula, "" for a data-sheet peak
};
MfuPeak MfuPeakFromDeviceReport(const nlohmann::json& device_report,
                                const std::string& train_device, const std::string& precision);

struct Report {
  std::vector<Check> checks;
  std::vector<PartOutcome> parts;
  std::string run_dir;
  bool interrupted = false;
  double wall_s = 0;
  int failures = 0, warnings = 0, skips = 0, passes = 0;
  // "Run the parts, then diagnose": the failed and warned checks as findings plus diagnose's
  // findings over the run directory (the train part's loss curve in train/), ranked.
  std::vector<Finding> findings;
  int exit_code() const;  // 1 if any fail (or interrupted), else 0
};

// Runs every part in order, within the budgets, writes the run directory (report.json,
// report.md, parts/<name>.stdout|.stderr) and returns the report. Returns an error only
// when the run directory cannot be written. Stops early (remaining parts skipped,
// interrupted = true) when the process got SIGINT/SIGTERM (interrupt.h).
absl::StatusOr<Report> RunDoctor(const Options& options);

// report.json ("trainscope.doctor", version 1), the summary table, and report.md.
nlohmann::json ReportToJson(const Report& report);
// The table fits 120 columns (check, verdict, value), followed by the expected value and the
// advice of every check that did not pass, wrapped; `wide`: one table with every column.
std::string RenderTable(const Report& report, bool wide = false);
std::string RenderMarkdown(const Report& report);

// The failed (error) and warned (warning) checks' own findings (core/check.h), their id
// prefixed "doctor." ("doctor.<check>"); title "<check> failed: <value>", evidence value and
// expected, fix the advice. Order kept.
std::vector<Finding> FindingsFrom(const std::vector<Check>& checks);

// runs/doctor-YYYYmmdd-HHMMSS-<pid> under the current directory (core/run_dir.h).
std::string DefaultRunDir();

}  // namespace trainscope::doctor

#endif  // TRAINSCOPE_DOCTOR_DOCTOR_H_
