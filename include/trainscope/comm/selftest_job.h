// `trainscope selftest comm` as a job: where RunSelftest (selftest.h) runs and who starts
// its ranks.
//   - Inside a world a launcher started (trainscope launch, torchrun, srun, mpirun; join.h),
//     or for one gloo rank, this process is a rank: JoinSelftestWorld, then RunSelftestRank.
//   - Otherwise RunSelftestJob starts this executable again as the ranks: through
//     `trainscope launch` (launch/launch.h) for gloo and nccl, through mpirun for mpi; or,
//     with an environment sweep, once per swept value as a child `selftest comm --json`
//     (env_sweep.h). It reads what the ranks reported and says, in one line, why a job
//     failed: the ranks' failed verdict, a rank that died, mpirun's own report.
//
// Nothing here writes to the terminal or installs a signal handler: text goes through
// SelftestOutput and the communicator's through SelftestJobOptions::comm_host, and the
// executable keeps the process settings (SIGPIPE, the stack dump and SIGUSR1 handlers,
// becoming the ranks' subreaper) itself or through the hooks below. Errors that are
// the command line's fault carry a payload (IsSelftestUsageError), so the executable can
// print its usage with them. Main thread only.
#ifndef TRAINSCOPE_COMM_SELFTEST_JOB_H_
#define TRAINSCOPE_COMM_SELFTEST_JOB_H_

#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "trainscope/comm/comm.h"
#include "trainscope/comm/env_sweep.h"
#include "trainscope/comm/selftest.h"
#include "trainscope/core/os.h"

namespace trainscope::comm {

// What the command line asked for, parsed; the started ranks get it back as flags
// (SelftestRankArgv).
struct SelftestJobOptions {
  std::string self;          // the trainscope executable the ranks run (argv[0] of this process)
  std::string backend;       // "gloo", "mpi" or "nccl" (CheckSelftestBackend)
  int nranks = 0;            // -n; 0: 2 ranks when starting them, any size inside a world
  SelftestOptions selftest;  // sizes explicit; on_row is RunSelftestRank's
  // The flags that chose selftest.ops, .dtype and .check_dtypes, as written: the ranks
  // parse them again.
  std::string ops_flag = "all";
  std::string dtype_flag = "float32";
  std::string check_dtypes_flag = "all";
  double timeout_s = 0;  // > 0: every op's timeout (and the watchdog's); else the environment's
  bool json = false;     // rank 0 prints the JSON document, not the table
  int inject_crash_rank = -1;           // testing: that rank kills itself once connected
  std::vector<EnvSweepSpec> sweep_env;  // non-empty: RunSelftestJob sweeps them
  // The executable's: where a rank's communicator says what it must (comm.h).
  CommHost comm_host;
};

// Where the job's text goes, and the executable's hooks. Each may be empty.
struct SelftestOutput {
  std::function<void(std::string_view text)> out;  // stdout: table, JSON (flushed each call)
  std::function<void(std::string_view text)> err;  // stderr: verdicts, failure reports
  // Where `trainscope launch` echoes rank 0's stdout as it comes (the table, a row per size).
  FILE* live_stdout = stdout;
  // Say "selftest comm: N ranks (backend), S sizes from A to B bytes..." on `err` before
  // the ranks start (the executable: when stderr is a terminal).
  bool announce = false;
  // Before `trainscope launch` starts the ranks (the executable makes itself their
  // subreaper: launch::BecomeChildSubreaper).
  std::function<void()> before_launch;
};

// The backend when none is asked for: nccl where an NVIDIA GPU is visible (/dev) and NCCL was
// built, else gloo.
std::string DefaultSelftestBackend();
// Whether `backend` can run here: InvalidArgument (a usage error) for a name other than
// gloo, mpi, nccl, or nccl without NCCL built in or without a visible NVIDIA GPU.
absl::Status CheckSelftestBackend(const std::string& backend);

// Whether a launcher started this process (join.h), or left variables too malformed to tell
// (JoinSelftestWorld then says what is wrong). Reads the environment only.
bool InLaunchedWorld(Os* os = Os::Default());
// Whether this process runs the test as a rank (InLaunchedWorld, or one gloo rank: nothing to
// start) rather than RunSelftestJob. Reads the environment only.
bool SelftestRunsHere(const SelftestJobOptions& options, Os* os = Os::Default());

// The command line of one rank: `self selftest comm --backend ... --sizes <explicit list>`
// with every flag of `options` (sweep_env and nranks excepted). Pure.
std::vector<std::string> SelftestRankArgv(const SelftestJobOptions& options);

// Joins the surrounding world (JoinFromEnvironment) with options.backend, options.timeout_s
// and options.comm_host. Errors: JoinFromEnvironment's (JoinWorld's unchanged); a usage error
// when -n disagrees with the world's size (before connecting, except under mpi, and after).
absl::StatusOr<std::unique_ptr<Communicator>> JoinSelftestWorld(const SelftestJobOptions& options);

// RunSelftest on `comm` (collective), then rank 0 reports: the table, each row on `out` as it
// is measured, or the JSON document; a failed verdict's reason on `err` ("trainscope selftest
// comm: FAILED: <reason>"). Every rank waits in a barrier until rank 0 has printed (a
// launcher stops the job on the first exit). Returns the report (passed or not); errors:
// RunSelftest's.
absl::StatusOr<SelftestReport> RunSelftestRank(Communicator& comm,
                                               const SelftestJobOptions& options,
                                               const SelftestOutput& output);

// Starts the ranks and waits for them (see the top of this file): the environment sweep when
// options.sweep_env is set, else mpirun for mpi, else `trainscope launch` on a temporary run
// directory (removed when the job passed; kept, and named, when not). Rank 0's output and
// the failure report go to `output`. Returns whether every rank passed. Errors: a usage
// error when mpirun is not in PATH or no temporary directory can be made; Launch's,
// RunProcess's and RunEnvSweep's errors. Blocks up to 2 hours under mpirun.
absl::StatusOr<bool> RunSelftestJob(const SelftestJobOptions& options,
                                    const SelftestOutput& output);

// Whether `status` is the command line's fault (the executable prints its usage with it).
bool IsSelftestUsageError(const absl::Status& status);

}  // namespace trainscope::comm

#endif  // TRAINSCOPE_COMM_SELFTEST_JOB_H_
