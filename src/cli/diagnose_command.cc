// `trainscope diagnose PATH... [--json] [--rules FILE]`: parse flags, call diagnose::Diagnose,
// print. `--rules-doc` prints docs/quick-reference.md generated from the rules instead.
// Exit 1 when an error-level finding exists, 2 for a path that is missing, a file of an
// unknown kind (named) or a bad rule file (rule id and field named), 0 otherwise.
#include "cli/diagnose_command.h"

#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli/exit.h"
#include "nlohmann/json.hpp"
#include "trainscope/diagnose/diagnose.h"
#include "trainscope/diagnose/rules.h"

namespace trainscope::cli {
namespace {

struct DiagnoseArgs {
  std::vector<std::string> paths;
  std::string rules;
  bool json = false;
  bool rules_doc = false;
};

int RunDiagnose(const DiagnoseArgs& a) {
  if (a.rules_doc) {
    absl::StatusOr<diagnose::RuleSet> rules = diagnose::LoadRules(a.rules);
    if (!rules.ok()) return ReportAndExitCode("diagnose", rules.status());
    std::cout << diagnose::QuickReferenceMarkdown(*rules);
    return kExitOk;
  }
  if (a.paths.empty()) {
    return ReportAndExitCode("diagnose",
                             absl::InvalidArgumentError("give at least one PATH (or --rules-doc)"));
  }
  diagnose::Options o;
  o.rules_file = a.rules;
  absl::StatusOr<diagnose::Report> rep = diagnose::Diagnose(a.paths, o);
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
  cmd->add_option("paths", args->paths, "run directories, folders of logs, or log files");
  cmd->add_flag("--json", args->json, "print the report as JSON (format trainscope.diagnose)");
  cmd->add_option("--rules", args->rules,
                  "rule file to use instead of the bundled one (schema: docs/formats.md "
                  "\"Diagnose rules\")");
  cmd->add_flag("--rules-doc", args->rules_doc,
                "print the quick reference (symptom -> likely cause -> check -> fix) generated "
                "from the rules, as docs/quick-reference.md, and exit");
  cmd->callback([&ctx, args] { ctx.exit_code = RunDiagnose(*args); });
}

}  // namespace trainscope::cli
