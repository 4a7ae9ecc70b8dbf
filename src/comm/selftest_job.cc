// `selftest comm` as a job (selftest_job.h): joining as a rank, starting the ranks through
// `trainscope launch` or mpirun, the environment sweep, and the one-line verdict on a job
// that failed.
#include "trainscope/comm/selftest_job.h"

#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "trainscope/comm/join.h"
#include "trainscope/core/env_vars.h"
#include "trainscope/core/subprocess.h"
#include "trainscope/core/table.h"
#include "trainscope/launch/launch.h"

namespace trainscope::comm {
namespace {

constexpr char kUsagePayload[] = "trainscope.selftest_comm.usage";
// The exit code of a rank whose test ran and failed (the executable's "found problems", 1):
// a failed verdict its rank 0 already explained, unlike a rank that died.
constexpr int kRankFailedVerdict = 1;

absl::Status UsageError(const std::string& message) {
  absl::Status st = absl::InvalidArgumentError(message);
  st.SetPayload(kUsagePayload, absl::Cord("1"));
  return st;
}

void Write(const std::function<void(std::string_view)>& sink, std::string_view text) {
  if (sink) sink(text);
}

bool HaveBackend(const std::string& name) {
  auto have = AvailableBackends();
  return std::find(have.begin(), have.end(), name) != have.end();
}

// -n, or 2 ranks when none was asked for.
int RanksToStart(const SelftestJobOptions& o) { return o.nranks > 0 ? o.nranks : 2; }

std::string ReadWhole(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// mpirun starts the ranks: its exit says only that one failed. Open MPI's banner says which,
// but not in our words: one line naming the rank, unless the ranks merely returned the failed
// verdict (exit 1, the reason already printed by rank 0).
absl::StatusOr<bool> RunUnderMpirun(const SelftestJobOptions& o, const SelftestOutput& output) {
  std::string mpirun = FindInPath("mpirun");
  if (mpirun.empty()) return UsageError("mpirun not found in PATH (install openmpi-bin)");
  std::vector<std::string> argv = {mpirun, "-np", std::to_string(RanksToStart(o)),
                                   "--oversubscribe"};
  if (::geteuid() == 0) argv.push_back("--allow-run-as-root");
  std::vector<std::string> rank_args = SelftestRankArgv(o);
  argv.insert(argv.end(), rank_args.begin(), rank_args.end());
  RunOptions ro;
  ro.timeout = std::chrono::hours(2);
  ro.env["OMPI_MCA_rmaps_base_oversubscribe"] = "1";
  auto r = RunProcess(argv, ro);
  if (!r.ok()) return r.status();
  Write(output.out, r->out);
  Write(output.err, r->err);
  if (r->ok()) return true;
  MpirunFailure why = ParseMpirunFailure(r->err + "\n" + r->out);
  const bool verdict = why.rank >= 0 ? why.exit_code == kRankFailedVerdict
                                     : r->exited && r->exit_code == kRankFailedVerdict;
  if (!verdict) {
    std::string what =
        why.sentence.empty()
            ? absl::StrCat(
                  "a rank failed (mpirun ",
                  r->exited ? absl::StrCat("exited with code ", r->exit_code) : "was killed",
                  ", no rank named in its report)")
            : why.sentence;
    Write(output.err, absl::StrCat("trainscope selftest comm: error: ", what.c_str(),
                                   " under mpirun; mpirun stopped the other ranks\n"));
  }
  return false;
}

// A job `trainscope launch` ran that did not pass, beyond the ranks' failed verdict: the
// launcher's sentence, the failed rank's last lines, the hang analysis, where the logs are.
std::string LaunchFailureReport(const launch::LaunchResult& r, const std::string& run_dir) {
  std::string text = absl::StrCat("trainscope selftest comm: error: ",
                                  r.failure.empty() ? "a rank failed" : r.failure.c_str(), "\n");
  if (const launch::RankStatus* bad = launch::FindRank(r, r.first_failed_rank)) {
    for (const auto& line : bad->tail) absl::StrAppend(&text, "  | ", line.c_str(), "\n");
  }
  for (const std::string& sentence : r.hang.sentences) {
    absl::StrAppend(&text, "hang analysis: ", sentence.c_str(), "\n");
  }
  absl::StrAppend(&text, "rank logs kept in ", run_dir, "\n");
  return text;
}

// `trainscope launch` starts the ranks on a temporary run directory; rank 0's stdout (the
// table, a row per size as it is measured) is echoed as it comes.
absl::StatusOr<bool> RunUnderLaunch(const SelftestJobOptions& o, const SelftestOutput& output) {
  const int n = RanksToStart(o);
  const std::vector<size_t>& sizes = o.selftest.sizes;
  const char* tmp = std::getenv(envvar::kTmpDir);
  std::string tmpl = absl::StrCat(tmp && *tmp ? tmp : "/tmp", "/trainscope-selftest-comm-XXXXXX");
  if (::mkdtemp(tmpl.data()) == nullptr) {
    return UsageError("cannot create a temporary run directory");
  }
  launch::LaunchOptions lo;
  lo.argv = SelftestRankArgv(o);
  lo.nproc_per_node = n;
  lo.run_dir = tmpl;
  lo.live_output = true;
  lo.live_stdout = output.live_stdout;
  lo.live_rank = 0;
  lo.live_prefix = false;
  lo.live_stderr = nullptr;
  lo.stop_grace = std::chrono::milliseconds(2000);
  lo.bind_cpus = false;  // ranks of a self-test share this process's CPUs like threads would
  if (output.announce) {
    Write(output.err,
          absl::StrFormat("selftest comm: %d ranks (%s), %zu sizes from %zu to %zu bytes...\n", n,
                          o.backend, sizes.size(), sizes.front(), sizes.back()));
  }
  if (output.before_launch) output.before_launch();
  auto r = launch::Launch(lo);
  if (!r.ok()) return r.status();
  const std::string out = ReadWhole(r->ranks.at(0).stdout_log);  // already echoed
  if (output.live_stdout != nullptr) std::fflush(output.live_stdout);
  bool verdict_only = true;  // every failing rank just reported a failed check (exit 1)
  for (const auto& s : r->ranks) {
    if (s.failed() && !(s.exited && s.exit_code == kRankFailedVerdict) && !s.stopped_by_us) {
      verdict_only = false;
    }
  }
  if (r->ok()) {
    std::error_code ec;
    std::filesystem::remove_all(tmpl, ec);
    return true;
  }
  if (verdict_only && !out.empty()) {
    // Rank 0 printed the verdict; its stderr carries the one-line reason.
    const std::string err0 = ReadWhole(r->ranks.at(0).stderr_log);
    Write(output.err, err0.c_str());
    return false;
  }
  Write(output.err, LaunchFailureReport(*r, tmpl));
  return false;
}

// The same measurement as a child process per value (env_sweep.h), each printing JSON.
absl::StatusOr<bool> RunSweep(const SelftestJobOptions& o, const SelftestOutput& output) {
  EnvSweepOptions eo;
  eo.specs = o.sweep_env;
  SelftestJobOptions child = o;
  child.json = true;
  child.sweep_env.clear();
  eo.argv = SelftestRankArgv(child);
  eo.argv.insert(eo.argv.begin() + 3, {"-n", std::to_string(RanksToStart(o))});
  eo.on_run = [&output](const EnvSweepRun& r) {
    std::string what = r.ok ? absl::StrCat(FormatDouble(r.score_gbps, 3), " GB/s")
                            : absl::StrCat("FAILED: ", r.error.c_str());
    Write(output.err, absl::StrFormat("selftest comm: %s=%s: %s (%.1f s)\n", r.var.c_str(),
                                      r.value.c_str(), what, r.wall_s));
  };
  auto report = RunEnvSweep(eo);
  if (!report.ok()) return report.status();
  Write(output.out, o.json ? EnvSweepJson(*report).dump(2, ' ', false,
                                                        nlohmann::json::error_handler_t::replace) +
                                 "\n"
                           : RenderEnvSweep(*report));
  return report->passed();
}

}  // namespace

std::string DefaultSelftestBackend() {
  const bool nvidia = launch::DetectLocalDevices("/dev").visible_var == "CUDA_VISIBLE_DEVICES";
  return nvidia && HaveBackend("nccl") ? "nccl" : "gloo";
}

absl::Status CheckSelftestBackend(const std::string& backend) {
  if (backend != "gloo" && backend != "mpi" && backend != "nccl") {
    return UsageError(absl::StrCat("unknown backend '", backend, "' (expected gloo, mpi or nccl)"));
  }
  if (backend != "nccl") return absl::OkStatus();
  // Asked for NCCL where it cannot run: a usage error before any rank starts.
  if (!HaveBackend("nccl")) {
    return UsageError(
        "--backend nccl: this trainscope was built without NCCL (CUDA toolkit and "
        "libnccl-dev at build time); use --backend gloo");
  }
  const launch::LocalDevices dev = launch::DetectLocalDevices("/dev");
  if (dev.visible_var != "CUDA_VISIBLE_DEVICES" || dev.count == 0) {
    return UsageError(
        "--backend nccl needs an NVIDIA GPU and none is visible (no /dev/nvidia<N>); "
        "use --backend gloo on CPUs");
  }
  return absl::OkStatus();
}

bool InLaunchedWorld(Os* os) {
  auto jo = JoinOptionsFromEnvironment({}, os);
  return !jo.ok() || jo->launcher != Launcher::kNone;
}

bool SelftestRunsHere(const SelftestJobOptions& options, Os* os) {
  if (!options.sweep_env.empty()) return false;
  return InLaunchedWorld(os) || (RanksToStart(options) == 1 && options.backend == "gloo");
}

std::vector<std::string> SelftestRankArgv(const SelftestJobOptions& o) {
  const SelftestOptions& so = o.selftest;
  std::vector<std::string> sizes;
  for (size_t s : so.sizes) sizes.push_back(std::to_string(s));
  std::vector<std::string> a = {o.self,
                                "selftest",
                                "comm",
                                "--backend",
                                o.backend,
                                "--ops",
                                o.ops_flag,
                                "--sizes",
                                absl::StrJoin(sizes, ","),
                                "--iters",
                                std::to_string(so.iters),
                                "--warmup",
                                std::to_string(so.warmup),
                                "--dtype",
                                o.dtype_flag,
                                "--check-dtypes",
                                o.check_dtypes_flag,
                                "--seconds-per-size",
                                absl::StrCat(so.seconds_per_size),
                                "--slow-rank-ratio",
                                absl::StrCat(so.slow_rank_ratio)};
  if (so.min_busbw_gbps > 0) a.insert(a.end(), {"--min-busbw", absl::StrCat(so.min_busbw_gbps)});
  if (o.timeout_s > 0) a.insert(a.end(), {"--timeout-s", absl::StrCat(o.timeout_s)});
  if (so.inject_error_rank >= 0) {
    a.insert(a.end(), {"--inject-error", std::to_string(so.inject_error_rank)});
  }
  if (o.inject_crash_rank >= 0) {
    a.insert(a.end(), {"--inject-crash", std::to_string(o.inject_crash_rank)});
  }
  if (o.json) a.push_back("--json");
  return a;
}

absl::StatusOr<std::unique_ptr<Communicator>> JoinSelftestWorld(const SelftestJobOptions& o) {
  JoinRequest req;
  req.defaults.backend = o.backend;
  req.defaults.host = o.comm_host;
  if (o.timeout_s > 0) {
    req.timeout = std::chrono::milliseconds(static_cast<int64_t>(o.timeout_s * 1000));
  }
  req.name_rank_in_errors = false;
  req.before_connect = [&o](const JoinOptions& jo) {
    const CommOptions& co = jo.comm;
    if (o.nranks > 0 && o.nranks != co.world_size && o.backend != "mpi") {
      return UsageError(absl::StrCat("world sizes disagree: -n ", o.nranks,
                                     " but this process is rank ", co.rank, " of ",
                                     jo.world_size_var, "=", co.world_size));
    }
    return absl::OkStatus();
  };
  auto world = JoinFromEnvironment(req);
  if (!world.ok()) return world.status();
  if (o.nranks > 0 && o.nranks != world->comm->world_size()) {
    return UsageError(absl::StrCat("world sizes disagree: -n ", o.nranks, " but the ", o.backend,
                                   " world has ", world->comm->world_size(), " ranks"));
  }
  return std::move(world->comm);
}

absl::StatusOr<SelftestReport> RunSelftestRank(Communicator& comm,
                                               const SelftestJobOptions& options,
                                               const SelftestOutput& output) {
  // Text output streams: each size's row is printed as soon as it is measured (nccl-tests
  // does the same), which is also the progress of a long sweep on any stdout.
  SelftestOptions run_options = options.selftest;
  std::optional<SelftestTableStream> stream;
  if (!options.json) {
    run_options.on_row = [&stream, &output](const SelftestReport& so_far, const SelftestRow& row) {
      std::string text;
      if (!stream) {
        stream.emplace(so_far.backend, so_far.world_size, so_far.options);
        text = stream->Begin();
      }
      text += stream->Row(row);
      Write(output.out, text);
    };
  }
  auto rep = RunSelftest(comm, run_options);
  if (!rep.ok()) return rep.status();
  rep->options.on_row = nullptr;  // it points into this frame
  if (comm.rank() == 0) {
    std::string text;
    if (options.json) {
      text = SelftestJson(*rep) + "\n";
    } else {
      if (!stream) {  // no row was measured
        stream.emplace(rep->backend, rep->world_size, rep->options);
        text = stream->Begin();
      }
      text += stream->End(*rep);
    }
    Write(output.out, text);
    if (!rep->passed) {
      Write(output.err,
            absl::StrCat("trainscope selftest comm: FAILED: ", rep->reason.c_str(), "\n"));
    }
  }
  // Nobody leaves before rank 0 has printed: a launcher stops the job on the first exit.
  (void)comm.Barrier();
  return rep;
}

absl::StatusOr<bool> RunSelftestJob(const SelftestJobOptions& options,
                                    const SelftestOutput& output) {
  if (!options.sweep_env.empty()) return RunSweep(options, output);
  if (options.backend == "mpi") return RunUnderMpirun(options, output);
  return RunUnderLaunch(options, output);
}

bool IsSelftestUsageError(const absl::Status& status) {
  return status.GetPayload(kUsagePayload).has_value();
}

}  // namespace trainscope::comm
