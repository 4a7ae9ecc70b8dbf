// `trainscope env fingerprint | diff | check`: thin wrappers over trainscope/env.
#include <chrono>
#include <cstdio>
#include <string>

#include "cli/command.h"
#include "cli/exit.h"
#include "trainscope/core/os.h"
#include "trainscope/env/check.h"
#include "trainscope/env/diff.h"
#include "trainscope/env/fingerprint.h"

namespace trainscope::cli {
namespace {

struct EnvArgs {
  std::string output;       // fingerprint -o
  bool json = false;        // --json (every verb)
  int timeout_ms = 2000;    // fingerprint/check: limit per probe
  std::string a, b;         // diff
  std::string fingerprint;  // check: file, or empty for this machine
  std::string matrix;       // check --matrix
};

void Emit(const std::string& s) { std::fwrite(s.data(), 1, s.size(), stdout); }

// JSON text of a document that may carry bytes from the command line or the machine (file
// names, environment values): invalid UTF-8 becomes U+FFFD instead of an exception.
std::string Dump(const nlohmann::json& doc) {
  return doc.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

env::FingerprintOptions ProbeOptions(const EnvArgs& args) {
  env::FingerprintOptions o;
  o.tool_timeout = std::chrono::milliseconds(args.timeout_ms);
  o.python_timeout = std::chrono::milliseconds(args.timeout_ms);
  return o;
}

int RunFingerprint(const EnvArgs& args) {
  absl::StatusOr<nlohmann::json> fp = env::Fingerprint(Os::Default(), ProbeOptions(args));
  if (!fp.ok()) return ReportAndExitCode("env fingerprint", fp.status());
  std::string doc = Dump(*fp);
  if (!args.output.empty()) {
    absl::Status st = WriteFileAtomic(args.output, doc);
    if (!st.ok()) return ReportAndExitCode("env fingerprint", st);
  }
  if (args.json) {
    Emit(doc);
  } else {
    Emit(env::RenderFingerprintSummary(*fp));
    if (!args.output.empty()) Emit("fingerprint written to " + args.output + "\n");
  }
  return kExitOk;
}

int RunDiff(const EnvArgs& args) {
  absl::StatusOr<nlohmann::json> a = env::LoadFingerprint(Os::Default(), args.a);
  if (!a.ok()) return ReportAndExitCode("env diff", a.status());
  absl::StatusOr<nlohmann::json> b = env::LoadFingerprint(Os::Default(), args.b);
  if (!b.ok()) return ReportAndExitCode("env diff", b.status());
  env::DiffResult d = env::Diff(*a, *b);
  if (args.json) {
    Emit(Dump(env::DiffToJson(d, args.a, args.b)));
  } else {
    Emit(env::RenderDiff(d, args.a, args.b));
  }
  return d.version_differences > 0 ? kExitProblems : kExitOk;
}

int RunCheck(const EnvArgs& args) {
  nlohmann::json matrix = env::DefaultMatrix();
  if (!args.matrix.empty()) {
    absl::StatusOr<nlohmann::json> m = env::LoadMatrix(Os::Default(), args.matrix);
    if (!m.ok()) return ReportAndExitCode("env check", m.status());
    matrix = std::move(*m);
  }
  absl::StatusOr<nlohmann::json> fp = args.fingerprint.empty()
                                          ? env::Fingerprint(Os::Default(), ProbeOptions(args))
                                          : env::LoadFingerprint(Os::Default(), args.fingerprint);
  if (!fp.ok()) return ReportAndExitCode("env check", fp.status());
  env::CheckResult r = env::Check(*fp, matrix);
  if (args.json) {
    Emit(Dump(env::CheckResultToJson(r)));
  } else {
    Emit(env::RenderCheck(r));
  }
  return r.passed() ? kExitOk : kExitProblems;
}

}  // namespace

void RegisterEnvCommand(CLI::App& parent, CommandContext& ctx) {
  auto args = std::make_shared<EnvArgs>();
  CLI::App* env = parent.add_subcommand(
      "env", "environment fingerprint, diff between machines, and compatibility check");
  env->require_subcommand(1);

  CLI::App* fp = env->add_subcommand(
      "fingerprint", "probe host, limits, accelerators, toolkits, frameworks and env vars");
  fp->add_option("-o,--output", args->output, "write the JSON document to FILE");
  fp->add_flag("--json", args->json, "print the JSON document instead of the summary");
  fp->add_option("--timeout-ms", args->timeout_ms, "time limit per probe (default 2000)")
      ->check(CLI::Range(100, 600000));
  fp->callback([args, &ctx] { ctx.exit_code = RunFingerprint(*args); });

  CLI::App* diff = env->add_subcommand(
      "diff",
      "what differs between two fingerprints, most important first; exit 1 when a "
      "version differs");
  diff->add_option("A", args->a, "first fingerprint (JSON)")->required();
  diff->add_option("B", args->b, "second fingerprint (JSON)")->required();
  diff->add_flag("--json", args->json, "JSON output");
  diff->callback([args, &ctx] { ctx.exit_code = RunDiff(*args); });

  CLI::App* check = env->add_subcommand(
      "check", "findings from the compatibility matrix and known traps; exit 1 on an error");
  check->add_option("FINGERPRINT", args->fingerprint,
                    "fingerprint file to check (default: probe this machine)");
  check->add_option(
      "--matrix", args->matrix,
      "compatibility matrix file (default: the one built in, data/compat_matrix.json)");
  check->add_flag("--json", args->json, "JSON output (format trainscope.env.check)");
  check->add_option("--timeout-ms", args->timeout_ms, "time limit per probe (default 2000)")
      ->check(CLI::Range(100, 600000));
  check->callback([args, &ctx] { ctx.exit_code = RunCheck(*args); });
}

}  // namespace trainscope::cli
