// `trainscope ckpt ...`: a shell around ckpt::InspectPath / ckpt::Diff (see ckpt_command.h).
#include "cli/ckpt_command.h"

#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli/exit.h"
#include "trainscope/core/progress.h"

namespace trainscope::cli {
namespace {

struct CkptArgs {
  std::vector<std::string> paths;
  bool json = false;
};

void Print(const nlohmann::json& j) {
  std::cout << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
}

// inspect (with tensors) and verify (without): one report per checkpoint found.
int RunInspect(const char* verb, bool verify, const CkptArgs& a) {
  Progress progress(verb, 0, true);
  ckpt::InspectOptions o;
  o.on_bytes = [&](uint64_t n) { progress.Add(n); };
  auto reports = ckpt::InspectPaths(a.paths, o);
  if (!reports.ok()) return ReportAndExitCode(verb, reports.status());
  bool ok = true;
  for (const auto& r : *reports) ok = ok && r.ok();
  if (a.json) {
    Print(ckpt::ReportsToJson(*reports, !verify));
  } else {
    std::cout << ckpt::FormatReportsText(*reports, !verify);
  }
  return ok ? kExitOk : kExitProblems;
}

int RunDiff(const CkptArgs& a) {
  if (a.paths.size() != 2) {
    std::fprintf(stderr, "trainscope ckpt diff: error: give two checkpoints, A and B\n");
    return kExitUsage;
  }
  Progress progress("ckpt diff", 0, true);
  ckpt::InspectOptions o;
  o.hash = false;
  o.on_bytes = [&](uint64_t n) { progress.Add(n); };
  auto d = ckpt::Diff(a.paths[0], a.paths[1], o);
  if (!d.ok()) return ReportAndExitCode("ckpt diff", d.status());
  if (a.json) {
    Print(ckpt::DiffToJson(*d));
  } else {
    std::cout << ckpt::FormatDiffText(*d);
  }
  return d->same() ? kExitOk : kExitProblems;
}

}  // namespace

void RegisterCkptCommand(CLI::App& root, CommandContext& ctx) {
  CLI::App* cmd = root.add_subcommand(
      "ckpt",
      "checkpoints: trainscope step-<N> folders, safetensors files, HuggingFace sharded "
      "folders, torch.distributed.checkpoint folders");
  cmd->require_subcommand(1);
  struct Verb {
    const char* name;
    const char* help;
  };
  const Verb verbs[] = {
      {"inspect", "tensor names, shapes, dtypes, bytes, non-finite counts, L2 norms, min/max"},
      {"verify",
       "hashes against the manifest, completeness, safetensors headers and finiteness; exit 1 "
       "on a problem"},
      {"diff", "per-tensor max abs/rel difference of A and B, and the first tensor that differs"},
  };
  for (const Verb& v : verbs) {
    auto args = std::make_shared<CkptArgs>();
    CLI::App* sub = cmd->add_subcommand(v.name, v.help);
    sub->add_option("paths", args->paths,
                    std::string(v.name) == "diff" ? "A B" : "checkpoints, or folders of them")
        ->required();
    sub->add_flag("--json", args->json, "print JSON (docs/formats.md \"Checkpoint\")");
    const std::string name = v.name;
    sub->callback([&ctx, args, name] {
      const std::string verb = "ckpt " + name;
      if (name == "diff") {
        ctx.exit_code = RunDiff(*args);
      } else {
        ctx.exit_code = RunInspect(verb.c_str(), name == "verify", *args);
      }
    });
  }
}

}  // namespace trainscope::cli
