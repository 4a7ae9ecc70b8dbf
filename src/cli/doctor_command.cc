// `trainscope doctor [--run-dir DIR] [--quick] [--json] [--skip PART,...]`: env
// fingerprint + env check + device + comm + baseline training, each a child process of
// this binary with a time budget; one summary table, report.md and report.json in the run
// directory; exit 1 if any check failed, 130 when interrupted (Ctrl-C).
#include <cstdio>
#include <iostream>

#include "absl/strings/str_split.h"
#include "cli/command.h"
#include "cli/exit.h"
#include "trainscope/comm/join.h"
#include "trainscope/core/env_vars.h"
#include "trainscope/doctor/doctor.h"
#include "trainscope/doctor/interrupt.h"

namespace trainscope::cli {

void RegisterDoctorCommand(CLI::App& parent, CommandContext& ctx) {
  CLI::App* cmd = parent.add_subcommand("doctor", "every check in one report");
  struct Args {
    std::string run_dir;
    bool quick = false;
    bool json = false;
    bool wide = false;
    std::vector<std::string> skip;
    std::vector<std::string> part_args;
    double budget_s = 0;
  };
  auto args = std::make_shared<Args>();
  cmd->add_option("--run-dir", args->run_dir,
                  "where report.md, report.json and parts/ go (default runs/doctor-<UTC time>)");
  cmd->add_flag("--quick", args->quick, "short budgets: the whole run in under a minute");
  cmd->add_flag("--json", args->json, "print report.json to stdout instead of the table");
  cmd->add_flag("--wide", args->wide,
                "one table with every column in full (expected, advice), wider than 120 columns");
  cmd->add_option("--skip", args->skip, "parts not to run: fingerprint,env,device,comm,train")
      ->delimiter(',')
      ->check(CLI::IsMember({"fingerprint", "env", "device", "comm", "train"}));
  cmd->add_option("--budget", args->budget_s,
                  "total time budget in seconds (default 280, quick 55)")
      ->check(CLI::Range(1.0, 86400.0));
  // For tests: extra arguments for one part, e.g. --part-args "comm=--inject-error".
  cmd->add_option("--part-args", args->part_args, "PART=ARGS (space separated)")->group("");
  cmd->callback([&ctx, args] {
    doctor::InterruptHandler interrupts;  // for the run: Ctrl-C kills what doctor started
    doctor::Options opt;
    opt.self_exe = ctx.argv0;
    opt.run_dir = args->run_dir;
    opt.quick = args->quick;
    opt.skip = args->skip;
    opt.total_budget_s = args->budget_s;
    // Started by torchrun, srun, mpirun or trainscope launch: comm joins that job.
    if (auto jo = comm::JoinOptionsFromEnvironment(); jo.ok()) {
      opt.comm_world_size = jo->comm.world_size;
    }
    for (const std::string& pa : args->part_args) {
      std::pair<std::string, std::string> kv = absl::StrSplit(pa, absl::MaxSplits('=', 1));
      if (kv.first.empty()) {
        std::fprintf(stderr, "trainscope doctor: error: --part-args %s: expected PART=ARGS\n",
                     pa.c_str());
        ctx.exit_code = kExitUsage;
        return;
      }
      for (absl::string_view a : absl::StrSplit(kv.second, ' ', absl::SkipEmpty())) {
        opt.extra_args[kv.first].push_back(std::string(a));
      }
    }
    opt.on_progress = [](const std::string& line) {
      std::fprintf(stderr, "doctor %s\n", line.c_str());
    };
    absl::StatusOr<doctor::Report> report = doctor::RunDoctor(opt);
    if (!report.ok()) {
      ctx.exit_code = ReportAndExitCode("doctor", report.status());
      return;
    }
    if (args->json) {
      std::cout << doctor::ReportToJson(*report).dump(2) << "\n";
    } else {
      std::cout << doctor::RenderTable(*report, args->wide);
    }
    ctx.exit_code = report->exit_code();
  });
}

}  // namespace trainscope::cli
