// The environment sweep behind `trainscope selftest comm --sweep-env VAR=v1,v2,...`: runs the
// collective self-test once per value of a variable (NCCL_ALGO, NCCL_BUFFSIZE,
// GLOO_SOCKET_IFNAME, ...), each run a child process with only that variable changed, and
// says which value gave the most bus bandwidth and by how much.
//
// Each variable is swept on its own (several specs are not crossed: k variables with n
// values cost k x n runs, not n^k), in the order given; a run that fails (the child exits
// with an error, times out, or reports wrong results) is recorded as failed for its value
// and the sweep goes on.
//
// The score of a run: its busbw (docs/metrics.md, "Collective bandwidth") at each of the
// largest half of its sizes (at least one), averaged over the ops, then over those sizes —
// small sizes measure latency, which the variables swept here rarely change.
//
// RunEnvSweep blocks for the runs (each bounded by `run_timeout`), one at a time, and touches
// nothing of the calling process; not thread-safe with respect to `on_run`.
#ifndef TRAINSCOPE_COMM_ENV_SWEEP_H_
#define TRAINSCOPE_COMM_ENV_SWEEP_H_

#include <chrono>
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json_fwd.hpp"
#include "trainscope/core/formats.h"
#include "trainscope/core/subprocess.h"

namespace trainscope::comm {

inline constexpr const char* kEnvSweepFormat = formats::kSelftestCommSweep;

// One --sweep-env: a variable and the values to try, in order (duplicates removed).
struct EnvSweepSpec {
  std::string var;
  std::vector<std::string> values;
};

// "VAR=v1,v2,...": VAR a shell variable name ([A-Za-z_][A-Za-z0-9_]*), at least one value;
// values may be empty strings ("VAR=,x" tries VAR set to "" and to "x"). InvalidArgument
// naming what is wrong otherwise.
absl::StatusOr<EnvSweepSpec> ParseEnvSweepSpec(const std::string& text);

// The outcome of one value.
struct EnvSweepRun {
  std::string var;
  std::string value;
  bool ok = false;                 // the run finished and its results were correct
  std::string error;               // one line when !ok
  double wall_s = 0;               // the child's wall time
  std::vector<size_t> sizes;       // the sizes scored (the largest half), ascending
  std::vector<double> busbw_gbps;  // per scored size, mean over ops
  double score_gbps = 0;           // mean of busbw_gbps
};

// Reads a run's `selftest comm --json` document into `run` (sizes, busbw, score; ok and
// error from its verdict). InvalidArgument when it is not such a document.
absl::Status ScoreSelftestJson(const std::string& json_text, EnvSweepRun* run);

struct EnvSweepVariable {
  std::string var;
  std::vector<EnvSweepRun> runs;  // one per value, in the order given
  int best = -1;                  // index into runs of the highest score; -1: none ran
  int worst = -1;                 // lowest score among the runs that ran
  double best_vs_worst = 0;       // best score / worst score (1: no difference; 0: unknown)
  double best_vs_first = 0;       // best score / the first value's (0: the first failed)
};

struct EnvSweepReport {
  std::vector<std::string> argv;  // the measuring command, as run for each value
  std::vector<EnvSweepVariable> variables;
  int failed_runs = 0;
  bool passed() const { return failed_runs == 0; }
};

struct EnvSweepOptions {
  // The command that measures once and prints a `selftest comm --json` document on stdout
  // (e.g. {"trainscope", "selftest", "comm", "-n", "2", "--json", ...}); it gets the parent's
  // environment plus the swept variable.
  std::vector<std::string> argv;
  std::vector<EnvSweepSpec> specs;
  std::chrono::milliseconds run_timeout{std::chrono::minutes(10)};  // per run
  // Called after each run (progress). May be empty.
  std::function<void(const EnvSweepRun& run)> on_run;
  // How a run is started; empty: RunProcess (core/subprocess.h). Tests pass a fake.
  std::function<absl::StatusOr<RunResult>(const std::vector<std::string>& argv,
                                          const RunOptions& options)>
      runner;
};

// Runs every value of every spec. Errors: InvalidArgument (no argv, no spec or a spec
// without values); a run that cannot start at all (NotFound for the program) ends the sweep
// with that error. Any other failure is recorded in its EnvSweepRun.
absl::StatusOr<EnvSweepReport> RunEnvSweep(const EnvSweepOptions& options);

// Best/worst and the ratios of one variable from its runs (RunEnvSweep calls it).
void RankEnvSweepRuns(EnvSweepVariable* variable);

// One table per variable (value, result, busbw at the scored sizes, score, vs best) with a
// line naming the best value; fits 120 columns for up to 5 scored sizes (more are elided).
std::string RenderEnvSweep(const EnvSweepReport& report);
// {"format": kEnvSweepFormat, "version": 1, "argv", "passed", "failed_runs", "variables":
// [{"var", "best", "worst", "best_vs_worst", "best_vs_first", "runs": [{"value", "ok",
// "error", "wall_s", "sizes", "busbw_gbps", "score_gbps"}]}]}; best/worst are values (null
// when none ran).
nlohmann::json EnvSweepJson(const EnvSweepReport& report);

}  // namespace trainscope::comm

#endif  // TRAINSCOPE_COMM_ENV_SWEEP_H_
