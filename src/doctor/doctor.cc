// RunDoctor: the parts in order, each a child process with a time budget; then the
// report files. Reports (JSON, table, markdown) are in report.cc.
#include "trainscope/doctor/doctor.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "trainscope/core/env_vars.h"
#include "trainscope/core/json_text.h"
#include "trainscope/core/os.h"
#include "trainscope/core/run_dir.h"
#include "trainscope/core/status.h"
#include "trainscope/core/subprocess.h"
#include "trainscope/core/table.h"
#include "trainscope/diagnose/diagnose.h"
#include "trainscope/doctor/interrupt.h"

namespace trainscope::doctor {
namespace {

// Room kept at the end of the total budget for killing a part that overruns (RunProcess's
// SIGTERM grace) and for writing the report.
constexpr double kGraceS = 2.5;

double NowS() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// NVIDIA devices listed by the device part: comm then runs one rank per GPU over NCCL.
int NvidiaDevices(const PartOutcome& device) {
  nlohmann::json j;
  if (!ParseJsonText(device.out, kJsonMaxDepth, &j, nullptr) || !j.is_object()) return 0;
  int n = 0;
  for (const auto& d : j.value("devices", nlohmann::json::array()))
    if (d.value("kind", "") == "nvidia" && d.value("online", false)) ++n;
  return n;
}

// True when this run's fingerprint part succeeded (and so wrote fingerprint.json).
bool FingerprintTaken(const Report& report) {
  for (const PartOutcome& o : report.parts) {
    if (o.name == "fingerprint" && o.started && !o.timed_out && o.exit_code == 0) {
      return Os::Default()->FileExists(run_dir::Join(report.run_dir, run_dir::kFingerprint));
    }
  }
  return false;
}

}  // namespace

// Comm sweeps fewer sizes than `selftest comm`'s default (8 B..256 MiB): enough to see
// correctness at small and large sizes and a bandwidth figure, within the budget.
std::vector<Part> DefaultParts(const std::string& self, bool quick) {
  std::vector<Part> parts;
  parts.push_back({"fingerprint", {self, "env", "fingerprint", "--json"}, quick ? 8.0 : 30.0});
  parts.push_back({"env", {self, "env", "check", "--json"}, quick ? 6.0 : 30.0});
  // Quick: `selftest device --quick` takes 8-10 s on 2 idle cores; 20 s keeps it from
  // running out on a loaded machine (a budget is a limit, not a duration).
  Part device{"device", {self, "selftest", "device", "--json"}, quick ? 20.0 : 60.0};
  if (quick) device.argv.push_back("--quick");
  parts.push_back(device);
  Part comm{"comm",
            {self, "selftest", "comm", "-n", "2", "--backend", "gloo", "--json"},
            quick ? 12.0 : 90.0};
  if (quick) {
    comm.argv.insert(comm.argv.end(), {"--ops", "all_reduce,all_gather", "--min-bytes", "4K",
                                       "--max-bytes", "1M", "--factor", "16", "--iters", "5",
                                       "--warmup", "1", "--seconds-per-size", "0.2"});
  } else {
    comm.argv.insert(comm.argv.end(),
                     {"--ops", "all", "--min-bytes", "1K", "--max-bytes", "16M", "--factor", "4",
                      "--iters", "10", "--warmup", "2", "--seconds-per-size", "0.3"});
  }
  parts.push_back(comm);
  // RunDoctor appends --max-seconds from the budget the trainer actually gets.
  Part train{"train", {self, "selftest", "train", "--json"}, quick ? 40.0 : 150.0};
  if (quick) train.argv.push_back("--quick");
  parts.push_back(train);
  return parts;
}

std::string DefaultRunDir() { return run_dir::DefaultRunDir("doctor"); }

std::vector<Finding> FindingsFrom(const std::vector<Check>& checks) {
  std::vector<Finding> out;
  for (const Check& c : checks) {
    if (c.verdict != "fail" && c.verdict != "warn") continue;
    Finding f = c.finding;
    f.id = absl::StrCat("doctor.", c.finding.id);
    out.push_back(std::move(f));
  }
  return out;
}

int Report::exit_code() const {
  if (interrupted) return 130;
  return failures > 0 ? 1 : 0;
}

namespace {

void Say(const Options& options, const std::string& line) {
  if (options.on_progress) options.on_progress(line);
}

// The part's command line with --extra-args, and for the default comm part its ranks: on GPUs
// one per NVIDIA device over NCCL; inside a launched job the job's world size.
void AddArgs(const Options& options, const Report& report, bool defaults, Part* part) {
  auto extra = options.extra_args.find(part->name);
  if (extra != options.extra_args.end()) {
    part->argv.insert(part->argv.end(), extra->second.begin(), extra->second.end());
  }
  if (!defaults || part->name != "comm") return;
  std::vector<std::string>& argv = part->argv;
  for (const PartOutcome& o : report.parts) {
    int gpus = o.name == "device" ? NvidiaDevices(o) : 0;
    if (gpus >= 1) {
      for (size_t k = 0; k + 1 < argv.size(); ++k) {
        if (argv[k] == "-n") argv[k + 1] = std::to_string(std::max(gpus, 2));
        if (argv[k] == "--backend") argv[k + 1] = gpus >= 2 ? "nccl" : "gloo";
      }
    }
  }
  // Inside a launched job the comm part is one rank of it (`selftest comm` sees the
  // launcher's variables): its -n must be the job's world size.
  for (size_t k = 0; options.comm_world_size > 1 && k + 1 < argv.size(); ++k) {
    if (argv[k] == "-n") argv[k + 1] = std::to_string(options.comm_world_size);
  }
}

// The default env and train parts' arguments that depend on this run: the fingerprint just
// taken, and the trainer's time (`left` seconds remain of doctor's budget) and run directory.
void AddRunArgs(const Report& report, bool defaults, double left, Part* part) {
  if (defaults && part->name == "env" && FingerprintTaken(report)) {
    // Check the fingerprint just taken instead of probing the machine again.
    part->argv.push_back(run_dir::Join(report.run_dir, run_dir::kFingerprint));
  }
  if (defaults && part->name == "train") {
    // The trainer stops itself before doctor's budget would kill it; start-up, data
    // preparation and the final evaluation come on top of its training time.
    double budget = std::min(part->budget_s, left - kGraceS);
    part->argv.insert(part->argv.end(),
                      {"--max-seconds", FormatDouble(std::max(1.0, budget * 0.6), 0)});
    // Its metrics go into this run directory (train/), where diagnose reads the curve.
    part->argv.insert(part->argv.end(), {"--run-dir", report.run_dir});
  }
}

// Runs `part` as a child process within what is left of the budget (`left` of `total`
// seconds), unless --skip names it, doctor was interrupted or the budget is used up; its
// stdout and stderr go to the run directory's parts/.
PartOutcome RunPart(const Part& part, const Options& options, const std::string& run_dir,
                    double left, double total, const std::string& tag) {
  PartOutcome o;
  o.name = part.name;
  o.argv = part.argv;
  o.budget_s = part.budget_s;
  if (std::find(options.skip.begin(), options.skip.end(), part.name) != options.skip.end()) {
    o.skip_reason = "skipped by --skip";
  } else if (Interrupted()) {
    o.skip_reason = "not run: interrupted";
  } else if (left - kGraceS < 2) {
    o.skip_reason =
        absl::StrCat("not run: the doctor budget of ", FormatDouble(total, 0), " s was used up");
  } else {
    o.budget_s = std::min(part.budget_s, left - kGraceS);
    Say(options, absl::StrCat(tag, ": running (budget ", FormatDouble(o.budget_s, 0), " s)"));
    RunOptions ro;
    ro.timeout = std::chrono::milliseconds(static_cast<int64_t>(o.budget_s * 1000));
    ro.kill_grace = std::chrono::milliseconds(2000);
    ro.env[envvar::kNoProgress] = "1";
    absl::StatusOr<RunResult> r = RunProcess(part.argv, ro);
    if (!r.ok()) {
      o.skip_reason = absl::StrCat("cannot start: ", r.status().message());
    } else {
      o.started = true;
      o.exit_code = r->exit_code;
      o.term_signal = r->term_signal;
      o.timed_out = r->timed_out;
      o.wall_s = r->wall_s;
      o.out = std::move(r->out);
      o.err = std::move(r->err);
    }
    // Anything the part left behind (ranks in their own process groups) goes now.
    KillDescendants(std::chrono::milliseconds(500));
    ReapExitedChildren();
  }
  if (o.started && Interrupted()) {
    o.started = false;
    o.skip_reason = "interrupted while running";
  }
  const std::string parts_dir = run_dir::Join(run_dir, run_dir::kParts);
  WriteFileAtomic(absl::StrCat(parts_dir, "/", part.name, ".stdout"), o.out).IgnoreError();
  WriteFileAtomic(absl::StrCat(parts_dir, "/", part.name, ".stderr"), o.err).IgnoreError();
  return o;
}

// What a part found, worst first: "1 fail, 8 pass, 2 skip", or "no checks".
std::string FoundSummary(const std::vector<Check>& checks) {
  std::vector<std::string> found;
  for (const char* verdict : {"fail", "warn", "pass", "skip"}) {
    const auto n = std::count_if(checks.begin(), checks.end(),
                                 [&](const Check& c) { return c.verdict == verdict; });
    if (n > 0) found.push_back(absl::StrCat(n, " ", verdict));
  }
  if (found.empty()) found.push_back("no checks");
  return absl::StrJoin(found, ", ");
}

void CountVerdicts(Report* report) {
  for (const Check& c : report->checks) {
    if (c.verdict == "fail")
      ++report->failures;
    else if (c.verdict == "warn")
      ++report->warnings;
    else if (c.verdict == "skip")
      ++report->skips;
    else
      ++report->passes;
  }
}

// Then diagnose: the checks' findings and, when the train part left metrics, its curve.
void AddFindings(Report* report) {
  report->findings = FindingsFrom(report->checks);
  const std::string train_dir = run_dir::Join(report->run_dir, run_dir::kTrain);
  std::error_code ec;
  if (std::filesystem::is_directory(train_dir, ec)) {
    absl::StatusOr<diagnose::Report> d = diagnose::Diagnose({train_dir});
    if (d.ok()) {
      for (Finding& f : d->findings) report->findings.push_back(std::move(f));
    }
  }
  SortFindings(&report->findings);
}

}  // namespace

absl::StatusOr<Report> RunDoctor(const Options& options) {
  const double start = NowS();
  Report report;
  report.run_dir = options.run_dir.empty() ? DefaultRunDir() : options.run_dir;
  if (absl::Status s = MakeDirs(run_dir::Join(report.run_dir, run_dir::kParts)); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot create run directory ", report.run_dir, ": ", s.message()));
  }
  const bool defaults = options.parts.empty();
  std::vector<Part> parts =
      defaults ? DefaultParts(options.self_exe, options.quick) : options.parts;
  const double total =
      options.total_budget_s > 0 ? options.total_budget_s : (options.quick ? 55.0 : 280.0);
  const double deadline = start + total;

  for (size_t i = 0; i < parts.size(); ++i) {
    Part part = parts[i];
    AddArgs(options, report, defaults, &part);
    const double left = deadline - NowS();
    AddRunArgs(report, defaults, left, &part);
    const std::string tag = absl::StrCat("[", i + 1, "/", parts.size(), "] ", part.name);
    PartOutcome o = RunPart(part, options, report.run_dir, left, total, tag);
    const PartOutcome* device = nullptr;
    for (const PartOutcome& earlier : report.parts)
      if (earlier.name == "device") device = &earlier;
    std::vector<Check> checks = EvaluatePart(o, device);
    if (part.name == "fingerprint" && o.started && o.exit_code == 0) {
      WriteFileAtomic(run_dir::Join(report.run_dir, run_dir::kFingerprint), o.out).IgnoreError();
    }
    if (o.started || !o.skip_reason.empty()) {
      Say(options, absl::StrCat(tag, ": ", FoundSummary(checks),
                                o.started ? absl::StrCat(" (", FormatDouble(o.wall_s, 1), " s)")
                                          : absl::StrCat(" (", o.skip_reason, ")")));
    }
    report.checks.insert(report.checks.end(), checks.begin(), checks.end());
    report.parts.push_back(std::move(o));
  }
  report.interrupted = Interrupted();
  CountVerdicts(&report);
  AddFindings(&report);
  report.wall_s = NowS() - start;
  TS_RETURN_IF_ERROR(WriteFileAtomic(run_dir::Join(report.run_dir, run_dir::kDoctorReportJson),
                                     ReportToJson(report).dump(2) + "\n"));
  TS_RETURN_IF_ERROR(WriteFileAtomic(run_dir::Join(report.run_dir, run_dir::kDoctorReportMd),
                                     RenderMarkdown(report)));
  return report;
}

}  // namespace trainscope::doctor
