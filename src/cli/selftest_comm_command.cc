// `trainscope selftest comm [-n N] [--backend gloo|mpi|nccl] [--ops ...] [--sizes ... |
//   --min-bytes 8 --max-bytes 256M --factor 2] [--iters 20 --warmup 5] [--min-busbw GBPS]
//   [--sweep-env VAR=v1,v2,...]...`
//
// Inside a launch, torchrun, srun or mpirun (comm/join.h) it runs as one rank;
// otherwise it starts itself over N ranks: through `launch` for gloo/nccl, through mpirun
// for mpi (comm/selftest_job.h). Rank 0 prints the nccl-tests style table (or --json); exit
// 0 passed, 1 failed. With --sweep-env it runs that whole measurement once per value of each
// variable (comm/env_sweep.h) and prints which value was best. This file parses the flags,
// prints, and keeps the process settings: the stack dump and SIGUSR1 handlers, where the
// communicator's notices go (cli/comm_host.h).
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_split.h"
#include "cli/comm_host.h"
#include "cli/command.h"
#include "cli/exit.h"
#include "cli/stop_signals.h"
#include "trainscope/comm/comm.h"
#include "trainscope/comm/env_sweep.h"
#include "trainscope/comm/selftest.h"
#include "trainscope/comm/selftest_job.h"
#include "trainscope/comm/watchdog.h"
#include "trainscope/core/env_vars.h"
#include "trainscope/core/stacks.h"
#include "trainscope/launch/launch.h"

namespace trainscope::cli {
namespace {

// The flags that need no parsing are read straight into `job` (its defaults are the flags').
struct CommFlags {
  comm::SelftestJobOptions job;  // nranks 0: 2, or the surrounding world
  std::string sizes;
  std::string min_bytes = "8";
  std::string max_bytes = "256M";
  double factor = 2;
  std::vector<std::string> sweep_env;  // VAR=v1,v2,... (repeatable)
};

constexpr char kVerb[] = "selftest comm";

int Usage(const std::string& message) {
  std::fprintf(stderr,
               "trainscope selftest comm: error: %s\n"
               "usage: trainscope selftest comm [-n N] [--backend gloo|mpi|nccl] [--ops LIST] "
               "[--sizes LIST | --min-bytes B --max-bytes B --factor F] [--iters N --warmup N] "
               "[--min-busbw GBPS] [--sweep-env VAR=v1,v2,...] [--json]\n",
               message.c_str());
  return kExitUsage;
}

// Inside a launch (TRAINSCOPE_RUN_DIR set): the comm watchdog, as in `trainscope train` — a
// collective late by the op timeout, or failed, leaves the flight recorder dump and thread
// stacks in <run_dir>/hang/ and ends the rank with one line; SIGUSR1 asks for a dump.
std::unique_ptr<comm::Watchdog> StartWatchdog(const comm::Communicator& c) {
  const char* run_dir = std::getenv(envvar::kRunDir);
  auto wo = comm::WatchdogOptionsForRun(c, run_dir == nullptr ? "" : run_dir);
  if (!wo) return nullptr;
  (void)InstallStackDumpHandler(StackDumpSignalNumber());
  wo->dump_request = DumpOnSignal::requests();
  wo->on_timeout = ExitOnCommTimeout(kVerb);
  auto w = comm::Watchdog::Start(*std::move(wo));
  return w.ok() ? std::move(w).value() : nullptr;
}

int Fail(const absl::Status& st) {
  if (comm::IsSelftestUsageError(st)) return Usage(std::string(st.message()));
  return ReportAndExitCode(kVerb, st);
}

comm::SelftestOutput Output() {
  comm::SelftestOutput out;
  out.out = [](std::string_view text) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
  };
  out.err = [](std::string_view text) { std::fwrite(text.data(), 1, text.size(), stderr); };
  out.announce = ::isatty(2);
  // Lets the launch stop what a rank left behind, even outside its process group.
  out.before_launch = [] { (void)launch::BecomeChildSubreaper(); };
  return out;
}

// Runs as one rank of an existing world.
int RunRank(const comm::SelftestJobOptions& jo) {
  auto c = comm::JoinSelftestWorld(jo);  // SIGPIPE is ignored since main()
  if (!c.ok()) return Fail(c.status());
  if ((*c)->rank() == jo.inject_crash_rank) ::raise(SIGKILL);
  std::unique_ptr<comm::Watchdog> watchdog = StartWatchdog(**c);
  std::optional<DumpOnSignal> dump_signal;  // SIGUSR1 is caught only when it can be served
  if (watchdog != nullptr) dump_signal.emplace();
  auto rep = comm::RunSelftestRank(**c, jo, Output());
  if (!rep.ok()) {
    if (watchdog != nullptr) (void)watchdog->CheckNow();  // dumps, prints and exits if it fires
    return ReportAndExitCode(kVerb, rep.status());
  }
  return rep->passed ? kExitOk : kExitProblems;
}

// The flags that need parsing, into f->job; a usage error ends it with the exit code.
std::optional<int> ParseJob(CommFlags* f) {
  comm::SelftestJobOptions& jo = f->job;
  comm::SelftestOptions& so = jo.selftest;
  auto ops = comm::ParseSelftestOps(jo.ops_flag);
  if (!ops.ok()) return Usage(std::string(ops.status().message()));
  so.ops = *ops;
  if (!f->sizes.empty()) {
    auto sizes = comm::ParseByteSizes(f->sizes);
    if (!sizes.ok()) return Usage(std::string(sizes.status().message()));
    so.sizes = *sizes;
  } else {
    auto lo = comm::ParseByteSize(f->min_bytes);
    if (!lo.ok()) return Usage(std::string(lo.status().message()));
    auto hi = comm::ParseByteSize(f->max_bytes);
    if (!hi.ok()) return Usage(std::string(hi.status().message()));
    if (*hi < *lo) return Usage("--max-bytes is smaller than --min-bytes");
    if (!(f->factor > 1)) return Usage("--factor must be > 1");
    so.sizes = comm::SizeSweep(*lo, *hi, f->factor);
  }
  auto dt = comm::ParseDType(jo.dtype_flag);
  if (!dt.ok()) return Usage(std::string(dt.status().message()));
  so.dtype = *dt;
  if (jo.check_dtypes_flag != "all") {
    for (absl::string_view name :
         absl::StrSplit(jo.check_dtypes_flag, ',', absl::SkipWhitespace())) {
      auto d = comm::ParseDType(std::string(name));
      if (!d.ok()) return Usage(std::string(d.status().message()));
      so.check_dtypes.push_back(*d);
    }
  }
  if (so.iters < 1 || so.warmup < 0) return Usage("--iters must be >= 1 and --warmup >= 0");
  const double ratio = so.slow_rank_ratio;  // 0: off (FindSlowRanks)
  if (!(ratio == 0 || (ratio >= 1 && ratio <= 1e6))) {
    return Usage("--slow-rank-ratio must be 0 (off) or between 1 and 1e6");
  }
  if (f->sweep_env.empty()) return std::nullopt;
  if (comm::InLaunchedWorld()) {
    return Usage("--sweep-env starts its own runs: use it outside a launch or mpirun");
  }
  for (const std::string& text : f->sweep_env) {  // comm/env_sweep.h
    auto spec = comm::ParseEnvSweepSpec(text);
    if (!spec.ok()) return Usage(std::string(spec.status().message()));
    jo.sweep_env.push_back(std::move(*spec));
  }
  return std::nullopt;
}

int RunSelftestComm(CommFlags f, const std::string& self) {
  comm::SelftestJobOptions& jo = f.job;
  jo.self = self;
  jo.comm_host = TerminalCommHost();
  if (jo.backend.empty()) jo.backend = comm::DefaultSelftestBackend();
  if (auto st = comm::CheckSelftestBackend(jo.backend); !st.ok()) return Fail(st);
  if (std::optional<int> usage = ParseJob(&f)) return *usage;
  if (comm::SelftestRunsHere(jo)) return RunRank(jo);
  auto passed = comm::RunSelftestJob(jo, Output());
  if (!passed.ok()) return Fail(passed.status());
  return *passed ? kExitOk : kExitProblems;
}

}  // namespace

void RegisterSelftestCommCommand(CLI::App& parent, CommandContext& ctx) {
  auto f = std::make_shared<CommFlags>();
  CLI::App* cmd = parent.add_subcommand(
      "comm", "collective correctness and bandwidth (nccl-tests layout, exact checks)");
  cmd->add_option("-n,--nranks", f->job.nranks,
                  "ranks to start (default 2; inside a launch: its world)")
      ->check(kPositiveNumber);
  cmd->add_option("--backend", f->job.backend,
                  "gloo, mpi or nccl (default: nccl on NVIDIA, else gloo)");
  cmd->add_option("--ops", f->job.ops_flag,
                  "comma list of all_reduce, all_gather, reduce_scatter, broadcast, all_to_all, "
                  "send_recv, or all");
  cmd->add_option("--sizes", f->sizes, "explicit comma list of sizes (e.g. 8,1K,1M,64M)");
  cmd->add_option("-b,--min-bytes", f->min_bytes, "smallest size (default 8)");
  cmd->add_option("-e,--max-bytes", f->max_bytes, "largest size (default 256M)");
  cmd->add_option("-f,--factor", f->factor, "size multiplication factor (default 2)");
  cmd->add_option("--iters", f->job.selftest.iters,
                  "timed iterations per size (fewer for large sizes)");
  cmd->add_option("--warmup", f->job.selftest.warmup, "untimed iterations per size");
  cmd->add_option("--min-busbw", f->job.selftest.min_busbw_gbps,
                  "fail when an op's busbw at its largest size is under this (GB/s)");
  cmd->add_option("--dtype", f->job.dtype_flag, "timed dtype (default float32)");
  cmd->add_option("--check-dtypes", f->job.check_dtypes_flag,
                  "dtypes checked exactly (default all)");
  cmd->add_option("--seconds-per-size", f->job.selftest.seconds_per_size,
                  "time budget per size that caps --iters (0: no cap)");
  cmd->add_option("--slow-rank-ratio", f->job.selftest.slow_rank_ratio,
                  "flag a rank whose memcpy probe is this many times slower than the others' "
                  "median, in its median and in most of 5 repetitions (default 2; 0: off)");
  cmd->add_option("--timeout-s,--comm-timeout", f->job.timeout_s,
                  "op timeout in seconds; inside a launch also the comm watchdog's, which dumps "
                  "the flight recorder and stacks to <run dir>/hang/ (default "
                  "TRAINSCOPE_COMM_TIMEOUT_S or 60)");
  cmd->add_option("--sweep-env", f->sweep_env,
                  "repeatable: VAR=v1,v2,... runs the whole test once per value with VAR set "
                  "(each variable swept separately) and names the value with the best busbw "
                  "over the larger sizes")
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->add_flag("--json", f->job.json, "print the report as JSON");
  cmd->add_option("--inject-error", f->job.selftest.inject_error_rank,
                  "testing: this rank corrupts one result element")
      ->group("");
  cmd->add_option("--inject-crash", f->job.inject_crash_rank,
                  "testing: this rank kills itself with SIGKILL once connected")
      ->group("");
  cmd->callback([f, &ctx] { ctx.exit_code = RunSelftestComm(*f, ctx.argv0); });
}

}  // namespace trainscope::cli
