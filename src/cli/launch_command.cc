// `trainscope launch [-n N] [--nnodes K --node-rank R --master-addr A --master-port P]
//                    [--timeout S] [--job-timeout S] [--run-dir DIR]
//                    [--placement topo --tp N [--pp M] [--topo-from FILE]] -- CMD ARGS...`
// One process per local device (or N on CPU) with the torchrun environment; see
// include/trainscope/launch/launch.h for the contract.
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cli/command.h"
#include "cli/exit.h"
#include "trainscope/core/env_vars.h"
#include "trainscope/core/os.h"
#include "trainscope/launch/launch.h"
#include "trainscope/launch/topo_placement.h"

namespace trainscope::cli {
namespace {

struct LaunchFlags {
  int nproc = 0;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
  std::string run_dir;
  double stop_grace_s = 5;
  bool no_bind = false;
  bool quiet = false;
  bool json = false;
  int tail_lines = 20;
  double timeout_s = 0;
  double job_timeout_s = 0;
  std::string placement = "order";        // or "topo"
  launch::TopologyPlacementOptions topo;  // --tp, --pp, --topo-from
};

std::chrono::milliseconds Ms(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

// CLI11 splits the program's words between the `command` positional (plain words, and
// everything after `--`) and remaining() (dash words), losing their order. Every word from
// the program's first word to the end of the command line is one or the other, so the
// program is the last (positional + remaining) words of /proc/self/cmdline, in order.
std::vector<std::string> ProgramArgv(const std::vector<std::string>& positional,
                                     const std::vector<std::string>& remaining) {
  std::vector<std::string> cmdline;
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string word;
  while (std::getline(in, word, '\0')) cmdline.push_back(word);
  size_t n = positional.size() + remaining.size();
  if (n == 0 || n > cmdline.size()) {
    std::vector<std::string> out = positional;
    out.insert(out.end(), remaining.begin(), remaining.end());
    return out;
  }
  return std::vector<std::string>(cmdline.end() - static_cast<long>(n), cmdline.end());
}

// The hang analysis of the ranks' dumps (launch.h), as the job's last lines.
void PrintHangVerdict(const launch::LaunchResult& r) {
  const launch::HangVerdict& h = r.hang;
  if (!h.error.empty()) {
    std::fprintf(stderr, "trainscope launch: the hang analysis of %s/hang failed: %s\n",
                 r.run_dir.c_str(), h.error.c_str());
    return;
  }
  if (!h.analyzed) return;
  std::fprintf(stderr, "hang analysis (%s; per-rank table: trainscope hang analyze %s):\n",
               h.analysis_path.c_str(), r.run_dir.c_str());
  if (h.sentences.empty()) {
    std::fprintf(stderr, "  the ranks' flight recorders show no mismatched collective\n");
  }
  for (const std::string& s : h.sentences) std::fprintf(stderr, "  %s\n", s.c_str());
}

// What became of the job, and its exit code: 0 OK, 1 a rank failed, 128 + an interruption.
int ReportJob(const LaunchFlags& f, const launch::LaunchResult& r) {
  if (r.interrupted_by != 0) {
    std::fprintf(stderr,
                 "trainscope launch: interrupted by signal %d; stopped %d ranks (logs: %s)\n",
                 r.interrupted_by, r.world_size, r.run_dir.c_str());
    PrintHangVerdict(r);
    return 128 + r.interrupted_by;
  }
  if (r.first_failed_rank >= 0) {
    const launch::RankStatus* bad = launch::FindRank(r, r.first_failed_rank);
    const Finding text = launch::DescribeFailure(r);
    std::fprintf(stderr, "trainscope launch: error: %s\n", text.title.c_str());
    if (bad != nullptr) {
      std::fprintf(stderr, "last %zu lines of rank %d (%s, %s):\n", bad->tail.size(), bad->rank,
                   bad->stdout_log.c_str(), bad->stderr_log.c_str());
      for (const auto& line : bad->tail) std::fprintf(stderr, "  | %s\n", line.c_str());
    }
    std::fprintf(stderr, "hint: %s\n", text.fix.c_str());
    PrintHangVerdict(r);
    return kExitProblems;
  }
  if (!f.quiet) {
    std::fprintf(stderr, "trainscope launch: %d rank%s finished OK in %.2f s (logs: %s)\n",
                 r.world_size / std::max(f.nnodes, 1), r.nproc_per_node == 1 ? "" : "s", r.total_s,
                 r.run_dir.c_str());
  }
  return kExitOk;
}

int RunLaunch(const LaunchFlags& f, std::vector<std::string> argv) {
  if (!argv.empty() && argv.front() == "--") {
    argv.erase(argv.begin());
  } else if (!argv.empty() && argv.front().size() > 1 && argv.front()[0] == '-') {
    std::fprintf(stderr,
                 "trainscope launch: error: unknown option %s\n"
                 "usage: trainscope launch [-n N] [options] -- CMD ARGS... (see --help)\n",
                 argv.front().c_str());
    return kExitUsage;
  }
  if (argv.empty()) {
    std::fprintf(stderr,
                 "trainscope launch: error: no program given\n"
                 "usage: trainscope launch [-n N] [options] -- CMD ARGS...\n");
    return kExitUsage;
  }
  if (f.stop_grace_s < 0) {
    std::fprintf(stderr, "trainscope launch: error: --stop-grace-s must be >= 0\n");
    return kExitUsage;
  }
  if (!(f.timeout_s >= 0) || !(f.job_timeout_s >= 0) || f.timeout_s > 1e9 ||
      f.job_timeout_s > 1e9) {
    std::fprintf(stderr,
                 "trainscope launch: error: --timeout and --job-timeout must be seconds >= 0\n");
    return kExitUsage;
  }
  launch::LaunchOptions o;
  o.argv = std::move(argv);
  o.nproc_per_node = f.nproc;
  o.nnodes = f.nnodes;
  o.node_rank = f.node_rank;
  o.master_addr = f.master_addr;
  o.master_port = f.master_port;
  o.run_dir = f.run_dir;
  o.stop_grace = Ms(f.stop_grace_s);
  o.exit_timeout = Ms(f.timeout_s);
  o.job_timeout = Ms(f.job_timeout_s);
  o.bind_cpus = !f.no_bind;
  o.live_output = !f.quiet;
  o.live_stdout = f.json ? stderr : stdout;  // --json keeps stdout for the summary
  o.tail_lines = f.tail_lines;
  if (f.placement == "topo") {  // launch/topo_placement.h: each rank's device
    auto p = launch::PlaceByTopology(f.topo, Os::Default(), &o);
    if (!p.ok()) return ReportAndExitCode("launch", p.status());
    std::fprintf(stderr,
                 "trainscope launch: placement topo (tp %d, pp %d): %s=%s per rank; slowest TP "
                 "group %.1f GB/s (%.1f in device order)\n",
                 f.topo.tp, f.topo.pp, p->var.c_str(), absl::StrJoin(p->devices, ",").c_str(),
                 p->slowest_tp_gbps, p->naive_slowest_tp_gbps);
  } else if (f.topo.tp != 1 || f.topo.pp != 1 || !f.topo.topo_from.empty()) {
    std::fprintf(stderr,
                 "trainscope launch: error: --tp, --pp and --topo-from go with "
                 "--placement topo\n");
    return kExitUsage;
  }
  // Descendants that setsid() out of their rank's group are re-parented to us, so the
  // launch can stop them at the end (launch.h); a refusal only loses that sweep.
  if (absl::Status st = launch::BecomeChildSubreaper(); !st.ok()) {
    std::fprintf(stderr, "trainscope launch: warning: %s\n", std::string(st.message()).c_str());
  }
  auto r = launch::Launch(o);
  if (!r.ok()) return ReportAndExitCode("launch", r.status());
  if (f.json) std::printf("%s\n", launch::LaunchResultJson(*r, o).c_str());
  return ReportJob(f, *r);
}

}  // namespace

void RegisterLaunchCommand(CLI::App& parent, CommandContext& ctx) {
  auto flags = std::make_shared<LaunchFlags>();
  CLI::App* cmd = parent.add_subcommand(
      "launch", "run CMD as one process per local device (or -n N on CPU), torchrun-style");
  cmd->add_option("-n,--nproc-per-node", flags->nproc,
                  "processes on this node (default: one per GPU/NPU, else 1)")
      ->check(kPositiveNumber);
  cmd->add_option("--nnodes", flags->nnodes, "number of nodes")->check(kPositiveNumber);
  cmd->add_option("--node-rank", flags->node_rank, "this node's rank (0..nnodes-1)")
      ->check(kNonNegativeNumber);
  cmd->add_option("--master-addr", flags->master_addr, "host of rank 0's rendezvous store");
  cmd->add_option("--master-port", flags->master_port,
                  "rendezvous port (default: a free one; required with --nnodes > 1)")
      ->check(CLI::Range(1, 65535));
  cmd->add_option("--run-dir", flags->run_dir,
                  "run directory for rank<R>/ logs and launch.json (default runs/launch-...)");
  cmd->add_option("--stop-grace-s", flags->stop_grace_s,
                  "seconds between SIGTERM and SIGKILL when stopping ranks");
  cmd->add_option("--timeout", flags->timeout_s,
                  "once the first rank exits OK, the others get S more seconds, then are "
                  "stopped and named (default 0: wait forever)");
  cmd->add_option("--job-timeout", flags->job_timeout_s,
                  "the whole job gets S seconds, then every rank still running is stopped and "
                  "named (default 0: no limit)");
  cmd->add_option("--tail", flags->tail_lines, "log lines shown for a failed rank")
      ->check(kNonNegativeNumber);
  cmd->add_option("--placement", flags->placement,
                  "order: rank i on the i-th visible device (default); topo: tensor-parallel "
                  "groups on the fastest links (`trainscope topo`, docs/metrics.md \"Topology\")")
      ->check(CLI::IsMember({"order", "topo"}));
  cmd->add_option("--tp", flags->topo.tp, "tensor-parallel group size, for --placement topo")
      ->check(kPositiveNumber);
  cmd->add_option("--pp", flags->topo.pp, "pipeline stages, for --placement topo")
      ->check(kPositiveNumber);
  cmd->add_option("--topo-from", flags->topo.topo_from,
                  "saved `nvidia-smi topo -m` / `npu-smi info -t topo` output for --placement "
                  "topo (default: run the tool)");
  cmd->add_flag("--no-bind-cpus", flags->no_bind, "do not set CPU affinity per rank");
  cmd->add_flag("-q,--quiet", flags->quiet, "do not echo rank output (logs are still written)");
  cmd->add_flag("--json", flags->json, "print the launch summary as JSON on stdout");
  cmd->prefix_command();
  cmd->footer(absl::StrCat(
      "Everything after the first non-option argument (or after --) is the program "
      "and its arguments, passed as is (no shell).\n\n"
      "Rendezvous: rank 0 hosts a key-value store for the ranks to meet. With one node it "
      "listens on 127.0.0.1 only (MASTER_ADDR=127.0.0.1 whatever --master-addr says); with "
      "--nnodes > 1 on --master-addr only, which must be an address of node 0. Every "
      "connection must present the job token ",
      envvar::kJobToken,
      ", which the launcher hands to its ranks: one node generates a random one unless it is "
      "set; with --nnodes > 1 set the same value on every node, e.g.\n  export ",
      envvar::kJobToken,
      "=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \\n')   # once, then copy it to each node\n"
      "The token is never printed or written to launch.json.\n\n"
      "Leftovers: processes the ranks started that are still alive at the end, even ones "
      "that left the rank's process group (setsid), are stopped."));
  auto positional = std::make_shared<std::vector<std::string>>();
  cmd->add_option("command", *positional, "the program and its arguments");
  cmd->allow_extras();
  cmd->callback([cmd, flags, positional, &ctx] {
    ctx.exit_code = RunLaunch(*flags, ProgramArgv(*positional, cmd->remaining()));
  });
}

}  // namespace trainscope::cli
