// `trainscope diagnose PATH... [--json]`: parse flags, call diagnose::Diagnose, print.
// Exit 1 when an error-level finding exists, 2 for a path that is missing or a file of an
// unknown kind (named), 0 otherwise.
#include "cli/diagnose_command.h"

#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "trainscope/core/exit.h"
#include "trainscope/diagnose/diagnose.h"

namespace trainscope::cli {
namespace {

struct DiagnoseArgs {
  std::vector<std::string> paths;
  bool json = false;
};

int RunDiagnose(const DiagnoseArgs& a) {
  absl::StatusOr<diagnose::Report> rep = diagnose::Diagnose(a.paths);
  if (!rep.ok()) return ReportAndExitCode("diagnose", rep.status());
  if (a.json) {
    std::cout << diagnose::ReportToJson(*rep).dump(2) << "\n";
  } else {
    std::cout << diagnose::ReportToText(*rep);
  }
  return rep->has_error() ? kExitProblems : kExitOk;
}

}  // namespace

void RegisterDiagnoseCommand(CLI::App& parent, CommandContext& ctx) {
  auto args = std::make_shared<DiagnoseArgs>();
  CLI::App* cmd = parent.add_subcommand(
      "diagnose",
      "what is wrong with a training run, why, and what to do: loss-curve class (healthy, "
      "not_learning, plateau, diverging, unstable, loss_spikes, overfitting, nan_fixed_step) "
      "from metrics JSONL/CSV, trainer_state.json or trainscope run directories, plus the "
      "findings of trainscope reports; ranked, most severe first");
  cmd->add_option("paths", args->paths, "run directories, folders of logs, or log files")
      ->required();
  cmd->add_flag("--json", args->json, "print the report as JSON (format trainscope.diagnose)");
  cmd->callback([&ctx, args] { ctx.exit_code = RunDiagnose(*args); });
}

}  // namespace trainscope::cli
