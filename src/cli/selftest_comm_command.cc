// `trainscope selftest comm [-n N] [--backend gloo|mpi|nccl] [--ops ...] [--sizes ... |
//   --min-bytes 8 --max-bytes 256M --factor 2] [--iters 20 --warmup 5] [--min-busbw GBPS]
//   [--sweep-env VAR=v1,v2,...]...`
//
// Inside a launch, torchrun, srun or mpirun (comm/join.h) it runs as one rank;
// otherwise it starts itself over N ranks: through `launch` for gloo/nccl, through mpirun
// for mpi. Rank 0 prints the nccl-tests style table (or --json); exit 0 passed, 1 failed.
// With --sweep-env it runs that whole measurement once per value of each variable
// (comm/env_sweep.h) and prints which value was best.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "cli/command.h"
#include "cli/stop_signals.h"
#include "nlohmann/json.hpp"
#include "trainscope/comm/comm.h"
#include "trainscope/comm/env_sweep.h"
#include "trainscope/comm/join.h"
#include "trainscope/comm/selftest.h"
#include "trainscope/comm/watchdog.h"
#include "trainscope/core/env_vars.h"
#include "trainscope/core/exit.h"
#include "trainscope/core/stacks.h"
#include "trainscope/core/subprocess.h"
#include "trainscope/core/table.h"
#include "trainscope/hang/analyze.h"
#include "trainscope/launch/launch.h"

namespace trainscope::cli {
namespace {

struct CommFlags {
  int nranks = 0;  // 0: 2, or the surrounding world
  std::string backend;
  std::string ops = "all";
  std::string sizes;
  std::string min_bytes = "8";
  std::string max_bytes = "256M";
  double factor = 2;
  int iters = 20;
  int warmup = 5;
  double min_busbw = 0;
  std::string dtype = "float32";
  std::string check_dtypes = "all";
  double seconds_per_size = 1.0;
  double slow_rank_ratio = 2.0;
  double timeout_s = 0;  // 0: TRAINSCOPE_COMM_TIMEOUT_S or 60
  bool json = false;
  int inject_error_rank = -1;          // hidden: corrupt one element on this rank
  int inject_crash_rank = -1;          // hidden: this rank kills itself (SIGKILL) once connected
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

// Started by a launcher (trainscope launch, torchrun, srun, mpirun; comm/join.h), or with
// variables too malformed to tell (RunRank then says what is wrong).
bool InWorld() {
  auto jo = comm::JoinOptionsFromEnvironment();
  return !jo.ok() || jo->launcher != comm::Launcher::kNone;
}

// Inside a launch (TRAINSCOPE_RUN_DIR set): the comm watchdog, as in `trainscope train` — a
// collective late by the op timeout, or failed, leaves the flight recorder dump and thread
// stacks in <run_dir>/hang/ and ends the rank with one line; SIGUSR1 asks for a dump.
std::unique_ptr<comm::Watchdog> StartWatchdog(const comm::Communicator& c) {
  const char* run_dir = std::getenv(envvar::kRunDir);
  if (run_dir == nullptr || *run_dir == '\0' || c.flight_recorder() == nullptr) return nullptr;
  (void)InstallStackDumpHandler(StackDumpSignalNumber());
  comm::WatchdogOptions wo;
  wo.recorder = c.flight_recorder();
  wo.rank = c.rank();
  wo.timeout = c.options().timeout;
  wo.dump_path = hang::DumpPath(run_dir, c.rank());
  wo.stacks_path = hang::StacksPath(run_dir, c.rank());
  wo.dump_request = DumpOnSignal::requests();
  wo.on_timeout = [](const std::string& message) {
    std::fprintf(stderr, "trainscope %s: error: %s\n", kVerb, message.c_str());
    std::fflush(stdout);
    std::fflush(stderr);
    ::_exit(kExitProblems);
  };
  auto w = comm::Watchdog::Start(std::move(wo));
  return w.ok() ? std::move(w).value() : nullptr;
}

// A peer that dies makes the backend's socket writes fail with EPIPE; the signal would kill
// this rank instead of letting the op return an error naming the peer. The comm library
// leaves signals alone: the executable ignores SIGPIPE, unless it was caught.
void IgnoreSigpipeForComm() {
  struct sigaction old {};
  if (sigaction(SIGPIPE, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) {
    signal(SIGPIPE, SIG_IGN);
  }
}

// Runs as one rank of an existing world.
int RunRank(const CommFlags& f, const comm::SelftestOptions& so) {
  comm::CommOptions defaults;
  defaults.backend = f.backend;
  auto jo = comm::JoinOptionsFromEnvironment(defaults);
  if (!jo.ok()) return ReportAndExitCode(kVerb, jo.status());
  comm::CommOptions* opts = &jo->comm;
  if (f.timeout_s > 0)
    opts->timeout = std::chrono::milliseconds(static_cast<int64_t>(f.timeout_s * 1000));
  if (f.nranks > 0 && f.nranks != opts->world_size && f.backend != "mpi") {
    return Usage(absl::StrCat("world sizes disagree: -n ", f.nranks, " but this process is rank ",
                              opts->rank, " of ", jo->world_size_var, "=", opts->world_size));
  }
  IgnoreSigpipeForComm();
  auto c = comm::JoinWorld(*jo);
  if (!c.ok()) return ReportAndExitCode(kVerb, c.status());
  if (f.nranks > 0 && f.nranks != (*c)->world_size()) {
    return Usage(absl::StrCat("world sizes disagree: -n ", f.nranks, " but the ", f.backend,
                              " world has ", (*c)->world_size(), " ranks"));
  }
  if ((*c)->rank() == f.inject_crash_rank) ::raise(SIGKILL);
  std::unique_ptr<comm::Watchdog> watchdog = StartWatchdog(**c);
  std::optional<DumpOnSignal> dump_signal;  // SIGUSR1 is caught only when it can be served
  if (watchdog != nullptr) dump_signal.emplace();
  // Text output streams: each size's row is printed as soon as it is measured (nccl-tests
  // does the same), which is also the progress of a long sweep on any stdout.
  comm::SelftestOptions run_options = so;
  std::optional<comm::SelftestTableStream> stream;
  if (!f.json) {
    run_options.on_row = [&stream](const comm::SelftestReport& so_far,
                                   const comm::SelftestRow& row) {
      std::string text;
      if (!stream) {
        stream.emplace(so_far.backend, so_far.world_size, so_far.options);
        text = stream->Begin();
      }
      text += stream->Row(row);
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
    };
  }
  auto rep = comm::RunSelftest(**c, run_options);
  if (!rep.ok()) {
    if (watchdog != nullptr) (void)watchdog->CheckNow();  // dumps, prints and exits if it fires
    return ReportAndExitCode(kVerb, rep.status());
  }
  if ((*c)->rank() == 0) {
    std::string text;
    if (f.json) {
      text = comm::SelftestJson(*rep) + "\n";
    } else {
      if (!stream) {  // no row was measured
        stream.emplace(rep->backend, rep->world_size, rep->options);
        text = stream->Begin();
      }
      text += stream->End(*rep);
    }
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    if (!rep->passed)
      std::fprintf(stderr, "trainscope selftest comm: FAILED: %s\n", rep->reason.c_str());
  }
  // Nobody leaves before rank 0 has printed: a launcher stops the job on the first exit.
  (void)(*c)->Barrier();
  return rep->passed ? kExitOk : kExitProblems;
}

// The flags a rank needs, rebuilt from the parsed ones (sizes as an explicit list).
std::vector<std::string> RankArgs(const std::string& self, const CommFlags& f,
                                  const std::vector<size_t>& sizes) {
  std::vector<std::string> sz;
  for (size_t s : sizes) sz.push_back(std::to_string(s));
  std::vector<std::string> a = {self,
                                "selftest",
                                "comm",
                                "--backend",
                                f.backend,
                                "--ops",
                                f.ops,
                                "--sizes",
                                absl::StrJoin(sz, ","),
                                "--iters",
                                std::to_string(f.iters),
                                "--warmup",
                                std::to_string(f.warmup),
                                "--dtype",
                                f.dtype,
                                "--check-dtypes",
                                f.check_dtypes,
                                "--seconds-per-size",
                                absl::StrCat(f.seconds_per_size),
                                "--slow-rank-ratio",
                                absl::StrCat(f.slow_rank_ratio)};
  if (f.min_busbw > 0) a.insert(a.end(), {"--min-busbw", absl::StrCat(f.min_busbw)});
  if (f.timeout_s > 0) a.insert(a.end(), {"--timeout-s", absl::StrCat(f.timeout_s)});
  if (f.inject_error_rank >= 0) {
    a.insert(a.end(), {"--inject-error", std::to_string(f.inject_error_rank)});
  }
  if (f.inject_crash_rank >= 0) {
    a.insert(a.end(), {"--inject-crash", std::to_string(f.inject_crash_rank)});
  }
  if (f.json) a.push_back("--json");
  return a;
}

int LaunchSelf(const CommFlags& f, const std::string& self, const std::vector<size_t>& sizes,
               int n) {
  std::vector<std::string> rank_args = RankArgs(self, f, sizes);
  if (f.backend == "mpi") {
    std::string mpirun = FindInPath("mpirun");
    if (mpirun.empty()) return Usage("mpirun not found in PATH (install openmpi-bin)");
    std::vector<std::string> argv = {mpirun, "-np", std::to_string(n), "--oversubscribe"};
    if (::geteuid() == 0) argv.push_back("--allow-run-as-root");
    argv.insert(argv.end(), rank_args.begin(), rank_args.end());
    RunOptions ro;
    ro.timeout = std::chrono::hours(2);
    ro.env["OMPI_MCA_rmaps_base_oversubscribe"] = "1";
    auto r = RunProcess(argv, ro);
    if (!r.ok()) return ReportAndExitCode(kVerb, r.status());
    std::fwrite(r->out.data(), 1, r->out.size(), stdout);
    std::fwrite(r->err.data(), 1, r->err.size(), stderr);
    if (r->ok()) return kExitOk;
    // Open MPI's banner says what happened but not in our words: name the rank in one line,
    // unless the ranks merely returned the failed verdict (exit 1, reason already printed).
    comm::MpirunFailure why = comm::ParseMpirunFailure(r->err + "\n" + r->out);
    const bool verdict =
        why.rank >= 0 ? why.exit_code == kExitProblems : r->exited && r->exit_code == kExitProblems;
    if (!verdict) {
      std::fprintf(stderr,
                   "trainscope selftest comm: error: %s under mpirun; mpirun stopped "
                   "the other ranks\n",
                   why.sentence.empty()
                       ? absl::StrCat("a rank failed (mpirun ",
                                      r->exited ? absl::StrCat("exited with code ", r->exit_code)
                                                : "was killed",
                                      ", no rank named in its report)")
                             .c_str()
                       : why.sentence.c_str());
    }
    return kExitProblems;
  }
  char tmpl[] = "/tmp/trainscope-selftest-comm-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) return Usage("cannot create a temporary run directory");
  launch::LaunchOptions lo;
  lo.argv = std::move(rank_args);
  lo.nproc_per_node = n;
  lo.run_dir = tmpl;
  // Rank 0's stdout (the table, a row per size as it is measured) is echoed as it comes.
  lo.live_output = true;
  lo.live_rank = 0;
  lo.live_prefix = false;
  lo.live_stderr = nullptr;
  lo.stop_grace = std::chrono::milliseconds(2000);
  lo.bind_cpus = false;  // ranks of a self-test share this process's CPUs like threads would
  if (::isatty(2)) {
    std::fprintf(stderr, "selftest comm: %d ranks (%s), %zu sizes from %zu to %zu bytes...\n", n,
                 f.backend.c_str(), sizes.size(), sizes.front(), sizes.back());
  }
  // Lets the launch stop what a rank left behind, even outside its process group.
  (void)launch::BecomeChildSubreaper();
  auto r = launch::Launch(lo);
  if (!r.ok()) return ReportAndExitCode(kVerb, r.status());
  std::ifstream rank0(r->ranks.at(0).stdout_log);
  std::stringstream ss;
  ss << rank0.rdbuf();
  const std::string out = ss.str();  // already echoed
  std::fflush(stdout);
  bool verdict_only = true;  // every failing rank just reported a failed check (exit 1)
  for (const auto& s : r->ranks) {
    if (s.failed() && !(s.exited && s.exit_code == 1) && !s.stopped_by_us) verdict_only = false;
  }
  if (r->ok()) {
    std::error_code ec;
    std::filesystem::remove_all(tmpl, ec);
    return kExitOk;
  }
  if (verdict_only && !out.empty()) {
    // Rank 0 printed the verdict; its stderr carries the one-line reason.
    std::ifstream err0(r->ranks.at(0).stderr_log);
    std::stringstream es;
    es << err0.rdbuf();
    std::fputs(es.str().c_str(), stderr);
    return kExitProblems;
  }
  const launch::RankStatus* bad = nullptr;
  for (const auto& s : r->ranks)
    if (s.rank == r->first_failed_rank) bad = &s;
  std::fprintf(stderr, "trainscope selftest comm: error: %s\n",
               r->failure.empty() ? "a rank failed" : r->failure.c_str());
  if (bad != nullptr) {
    for (const auto& line : bad->tail) std::fprintf(stderr, "  | %s\n", line.c_str());
  }
  for (const std::string& sentence : r->hang.sentences) {
    std::fprintf(stderr, "hang analysis: %s\n", sentence.c_str());
  }
  std::fprintf(stderr, "rank logs kept in %s\n", tmpl);
  return kExitProblems;
}

// --sweep-env: the same measurement as a child process per value (comm/env_sweep.h).
int RunSweep(const CommFlags& f, const std::string& self, const std::vector<size_t>& sizes, int n) {
  comm::EnvSweepOptions eo;
  for (const std::string& text : f.sweep_env) {
    auto spec = comm::ParseEnvSweepSpec(text);
    if (!spec.ok()) return Usage(std::string(spec.status().message()));
    eo.specs.push_back(std::move(*spec));
  }
  CommFlags child = f;
  child.json = true;
  child.sweep_env.clear();
  eo.argv = RankArgs(self, child, sizes);
  eo.argv.insert(eo.argv.begin() + 3, {"-n", std::to_string(n)});
  eo.on_run = [](const comm::EnvSweepRun& r) {
    std::string what = r.ok ? absl::StrCat(FormatDouble(r.score_gbps, 3), " GB/s")
                            : absl::StrCat("FAILED: ", r.error);
    std::fprintf(stderr, "selftest comm: %s=%s: %s (%.1f s)\n", r.var.c_str(), r.value.c_str(),
                 what.c_str(), r.wall_s);
  };
  auto report = comm::RunEnvSweep(eo);
  if (!report.ok()) return ReportAndExitCode(kVerb, report.status());
  std::string text = f.json ? comm::EnvSweepJson(*report).dump(
                                  2, ' ', false, nlohmann::json::error_handler_t::replace) +
                                  "\n"
                            : comm::RenderEnvSweep(*report);
  std::fwrite(text.data(), 1, text.size(), stdout);
  return report->passed() ? kExitOk : kExitProblems;
}

int RunSelftestComm(CommFlags f, const std::string& self) {
  if (f.backend.empty()) {
    f.backend =
        launch::DetectLocalDevices("/dev").visible_var == "CUDA_VISIBLE_DEVICES" ? "nccl" : "gloo";
    auto have = comm::AvailableBackends();
    if (std::find(have.begin(), have.end(), f.backend) == have.end()) f.backend = "gloo";
  }
  if (f.backend != "gloo" && f.backend != "mpi" && f.backend != "nccl") {
    return Usage(absl::StrCat("unknown backend '", f.backend, "' (expected gloo, mpi or nccl)"));
  }
  if (f.backend == "nccl") {
    // Asked for NCCL where it cannot run: a usage error before any rank starts.
    auto have = comm::AvailableBackends();
    if (std::find(have.begin(), have.end(), "nccl") == have.end()) {
      return Usage(
          "--backend nccl: this trainscope was built without NCCL (CUDA toolkit and "
          "libnccl-dev at build time); use --backend gloo");
    }
    const launch::LocalDevices dev = launch::DetectLocalDevices("/dev");
    if (dev.visible_var != "CUDA_VISIBLE_DEVICES" || dev.count == 0) {
      return Usage(
          "--backend nccl needs an NVIDIA GPU and none is visible (no /dev/nvidia<N>); "
          "use --backend gloo on CPUs");
    }
  }
  comm::SelftestOptions so;
  auto ops = comm::ParseSelftestOps(f.ops);
  if (!ops.ok()) return Usage(std::string(ops.status().message()));
  so.ops = *ops;
  if (!f.sizes.empty()) {
    auto sizes = comm::ParseByteSizes(f.sizes);
    if (!sizes.ok()) return Usage(std::string(sizes.status().message()));
    so.sizes = *sizes;
  } else {
    auto lo = comm::ParseByteSize(f.min_bytes);
    if (!lo.ok()) return Usage(std::string(lo.status().message()));
    auto hi = comm::ParseByteSize(f.max_bytes);
    if (!hi.ok()) return Usage(std::string(hi.status().message()));
    if (*hi < *lo) return Usage("--max-bytes is smaller than --min-bytes");
    if (!(f.factor > 1)) return Usage("--factor must be > 1");
    so.sizes = comm::SizeSweep(*lo, *hi, f.factor);
  }
  auto dt = comm::ParseDType(f.dtype);
  if (!dt.ok()) return Usage(std::string(dt.status().message()));
  so.dtype = *dt;
  if (f.check_dtypes != "all") {
    for (absl::string_view name : absl::StrSplit(f.check_dtypes, ',', absl::SkipWhitespace())) {
      auto d = comm::ParseDType(std::string(name));
      if (!d.ok()) return Usage(std::string(d.status().message()));
      so.check_dtypes.push_back(*d);
    }
  }
  if (f.iters < 1 || f.warmup < 0) return Usage("--iters must be >= 1 and --warmup >= 0");
  so.iters = f.iters;
  so.warmup = f.warmup;
  so.min_busbw_gbps = f.min_busbw;
  so.seconds_per_size = f.seconds_per_size;
  if (!(f.slow_rank_ratio == 0 || (f.slow_rank_ratio >= 1 && f.slow_rank_ratio <= 1e6))) {
    return Usage("--slow-rank-ratio must be 0 (off) or between 1 and 1e6");
  }
  so.slow_rank_ratio = f.slow_rank_ratio;  // 0: off (FindSlowRanks)
  so.inject_error_rank = f.inject_error_rank;

  const int n = f.nranks > 0 ? f.nranks : 2;
  if (!f.sweep_env.empty()) {
    if (InWorld()) {
      return Usage("--sweep-env starts its own runs: use it outside a launch or mpirun");
    }
    return RunSweep(f, self, so.sizes, n);
  }
  if (InWorld()) return RunRank(f, so);
  if (n == 1 && f.backend == "gloo") return RunRank(f, so);
  return LaunchSelf(f, self, so.sizes, n);
}

}  // namespace

void RegisterSelftestCommCommand(CLI::App& parent, CommandContext& ctx) {
  auto f = std::make_shared<CommFlags>();
  CLI::App* cmd = parent.add_subcommand(
      "comm", "collective correctness and bandwidth (nccl-tests layout, exact checks)");
  cmd->add_option("-n,--nranks", f->nranks,
                  "ranks to start (default 2; inside a launch: its world)")
      ->check(kPositiveNumber);
  cmd->add_option("--backend", f->backend,
                  "gloo, mpi or nccl (default: nccl on NVIDIA, else gloo)");
  cmd->add_option("--ops", f->ops,
                  "comma list of all_reduce, all_gather, reduce_scatter, broadcast, all_to_all, "
                  "send_recv, or all");
  cmd->add_option("--sizes", f->sizes, "explicit comma list of sizes (e.g. 8,1K,1M,64M)");
  cmd->add_option("-b,--min-bytes", f->min_bytes, "smallest size (default 8)");
  cmd->add_option("-e,--max-bytes", f->max_bytes, "largest size (default 256M)");
  cmd->add_option("-f,--factor", f->factor, "size multiplication factor (default 2)");
  cmd->add_option("--iters", f->iters, "timed iterations per size (fewer for large sizes)");
  cmd->add_option("--warmup", f->warmup, "untimed iterations per size");
  cmd->add_option("--min-busbw", f->min_busbw,
                  "fail when an op's busbw at its largest size is under this (GB/s)");
  cmd->add_option("--dtype", f->dtype, "timed dtype (default float32)");
  cmd->add_option("--check-dtypes", f->check_dtypes, "dtypes checked exactly (default all)");
  cmd->add_option("--seconds-per-size", f->seconds_per_size,
                  "time budget per size that caps --iters (0: no cap)");
  cmd->add_option("--slow-rank-ratio", f->slow_rank_ratio,
                  "flag a rank whose memcpy probe is this many times slower than the others' "
                  "median, in its median and in most of 5 repetitions (default 2; 0: off)");
  cmd->add_option("--timeout-s,--comm-timeout", f->timeout_s,
                  "op timeout in seconds; inside a launch also the comm watchdog's, which dumps "
                  "the flight recorder and stacks to <run dir>/hang/ (default "
                  "TRAINSCOPE_COMM_TIMEOUT_S or 60)");
  cmd->add_option("--sweep-env", f->sweep_env,
                  "repeatable: VAR=v1,v2,... runs the whole test once per value with VAR set "
                  "(each variable swept separately) and names the value with the best busbw "
                  "over the larger sizes")
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->add_flag("--json", f->json, "print the report as JSON");
  cmd->add_option("--inject-error", f->inject_error_rank,
                  "testing: this rank corrupts one result element")
      ->group("");
  cmd->add_option("--inject-crash", f->inject_crash_rank,
                  "testing: this rank kills itself with SIGKILL once connected")
      ->group("");
  cmd->callback([f, &ctx] { ctx.exit_code = RunSelftestComm(*f, ctx.argv0); });
}

}  // namespace trainscope::cli
