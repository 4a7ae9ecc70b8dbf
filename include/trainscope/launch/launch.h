// trainscope::launch — start one process per local device (or N on CPU) with the torchrun
// environment, watch them, and stop the job as soon as one rank fails.
//
// Contract:
//  - argv is exec'd directly (no shell), once per local rank, each in its own process
//    group, with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR,
//    MASTER_PORT, TRAINSCOPE_RUN_DIR set, device pinning (CUDA_VISIBLE_DEVICES /
//    ASCEND_RT_VISIBLE_DEVICES) when devices exist, and CPU affinity per rank (NUMA-aware
//    when /sys/devices/system/node is present).
//  - Each rank's stdout and stderr go to <run_dir>/rank<R>/{stdout,stderr}.log and, live,
//    to the launcher's stdout/stderr with a "[rank R] " prefix.
//  - When a rank exits non-zero or dies by a signal, the others get `failure_settle` to end
//    by themselves (a rank that does was not stopped: RankStatus::stopped_by_us false), then
//    every rank still running gets SIGTERM and, after `stop_grace`, SIGKILL (whole process
//    groups): the launch ends within a bounded time.
//    SIGINT/SIGTERM/SIGHUP sent to the launcher are forwarded the same way. Ranks get
//    PR_SET_PDEATHSIG, so a killed launcher leaves no strays.
//  - Timeouts (both off by default): `exit_timeout` — once the first rank exits with code 0,
//    the others get this long to exit as well; `job_timeout` — the whole job, from the first
//    fork, gets this long. When either expires, the ranks still running are stopped like a
//    failure (SIGTERM, then SIGKILL after `stop_grace`) and named in LaunchResult::failure
//    and timed_out_ranks; the launch ends within timeout + stop_grace + about a second.
//  - Leftovers: when the job ends, every process descended from the ranks that is still
//    alive (e.g. one that setsid()'d out of its rank's process group) is stopped and reaped
//    — provided the calling process is a child subreaper, so that such orphans are
//    re-parented to it rather than to init. Call BecomeChildSubreaper() first (the CLI
//    does); Launch() does not change that process-wide setting itself. Processes that were
//    the caller's children before Launch() started, and their descendants, are left alone.
//  - Rendezvous security: with one node, MASTER_ADDR is 127.0.0.1 (the store that rank 0
//    hosts listens there only); with several, it is `master_addr`, and node 0 checks that it
//    is an address of this host (the store binds exactly that address). Every rank gets
//    TRAINSCOPE_JOB_TOKEN (core/env_vars.h), the secret the store asks of each connection:
//    `job_token`, else TRAINSCOPE_JOB_TOKEN from `env` or the launcher's environment, else
//    (one node only) a fresh random one. With nnodes > 1 the same token must be given to
//    every node's launcher (InvalidArgument otherwise). The token is never logged and is
//    not in launch.json.
//  - Hang dumps: when a rank fails or a timeout expires, before stopping the others the
//    launcher sends SIGUSR1 to each rank still running that catches it (SigCgt in
//    /proc/<pid>/status: a program that does not would die of it) — a trainscope rank then
//    writes its flight recorder dump and thread stacks to <run_dir>/hang/ (comm/watchdog.h)
//    — and waits until every asked rank wrote both files or exited, at most `dump_wait`.
//    After the job, if <run_dir>/hang/ holds dumps, it runs the hang analysis
//    (hang/analyze.h), writes <run_dir>/hang/analysis.json and fills LaunchResult::hang.
//  - <run_dir>/launch.json records the job (format "trainscope.launch", version 1).
//  - One writer per run directory (core/run_dir_lock.h): Launch() takes <run_dir>/LOCK before
//    starting any rank and holds it until it returns; every rank gets TRAINSCOPE_JOB_ID
//    ("launch/<host>/<pid>"; "launch/<master_addr>:<master_port>" with nnodes > 1), so a rank
//    writing the same directory joins the lock. A directory another writer holds:
//    FailedPrecondition (run_dir::IsRunDirInUse), nothing started.
// Launch() is not thread-safe (it installs signal handlers for its duration) and must be
// called from a single-threaded process state (it forks).
#ifndef TRAINSCOPE_LAUNCH_LAUNCH_H_
#define TRAINSCOPE_LAUNCH_LAUNCH_H_

#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainscope/core/finding.h"
#include "trainscope/core/os.h"

namespace trainscope::launch {

struct LaunchOptions {
  std::vector<std::string> argv;  // the program and its arguments, passed as is
  int nproc_per_node = 0;         // 0: one per local device (GPU / NPU), else 1
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;                         // 0: a free port (single node only)
  std::string run_dir;                         // empty: ./runs/launch-<UTC time>-<pid>
  std::chrono::milliseconds stop_grace{5000};  // SIGTERM -> SIGKILL
  bool bind_cpus = true;                       // sched_setaffinity per rank
  bool live_output = true;                     // echo rank output with a prefix
  FILE* live_stdout = stdout;                  // where rank stdout is echoed
  FILE* live_stderr = stderr;                  // nullptr: that stream is not echoed
  int live_rank = -1;                          // >= 0: echo only this rank's output
  bool live_prefix = true;                     // "[rank R] " before each echoed line
  int tail_lines = 20;                         // log lines kept for the failure report
  std::string sysfs_root = "/sys";             // topology source (tests use a fake tree)
  std::string dev_root = "/dev";               // device nodes (nvidia*, davinci*)
  std::map<std::string, std::string> env;      // extra variables for every rank
  std::chrono::milliseconds exit_timeout{0};   // after the first clean exit (0: wait forever)
  std::chrono::milliseconds job_timeout{0};    // whole job (0: no limit)
  std::string job_token;  // "" : from env / environment / generated (see the contract above)
  // After the first rank fails on its own, the others get this long to exit by themselves
  // before they are stopped, so that an error common to every rank (the script, its inputs)
  // shows as every rank failing rather than one failing and the others stopped.
  std::chrono::milliseconds failure_settle{300};
  bool request_dumps = true;  // SIGUSR1 to the ranks that catch it before stopping them
  std::chrono::milliseconds dump_wait{10000};  // for the asked ranks' dumps
  // Device of each local rank (e.g. `launch --placement topo`, launch/topo_placement.h), set
  // in `rank_devices_var` (default: the detected devices' variable). When given it replaces
  // the split of the visible list and must name at least one device per local rank
  // (InvalidArgument otherwise).
  std::vector<std::string> rank_devices;
  std::string rank_devices_var;
};

// The hang analysis of a job's dumps (see the contract).
struct HangVerdict {
  std::vector<int> asked_ranks;  // ranks sent SIGUSR1 for a dump, ascending
  bool analyzed = false;         // <run_dir>/hang/ held dumps and the analysis ran
  std::string analysis_path;     // <run_dir>/hang/analysis.json
  bool problem = false;
  int findings = 0;
  std::vector<std::string> sentences;  // one per finding, most likely root cause first
  std::string error;                   // the analysis failed (one line); "" otherwise
};

struct RankStatus {
  int rank = 0;
  int local_rank = 0;
  int pid = -1;
  bool exited = false;  // exited normally (exit_code valid)
  int exit_code = -1;
  int term_signal = 0;         // non-zero when killed by a signal
  bool stopped_by_us = false;  // signalled by the launcher while running (not once exited)
  double start_s = 0;          // seconds since launch start: exec'd
  double end_s = 0;            // seconds since launch start: reaped
  std::vector<int> cpus;       // affinity given (empty: not bound)
  std::string device;          // visible device given ("" when none)
  std::string stdout_log;
  std::string stderr_log;
  std::vector<std::string> tail;  // last lines of output (stdout and stderr, in order)
  bool failed() const { return !(exited && exit_code == 0); }
};

struct LaunchResult {
  std::string run_dir;
  std::string master_addr;
  int master_port = 0;
  int world_size = 0;
  int nproc_per_node = 0;
  double all_running_s = 0;  // launch start -> every rank exec'd
  double total_s = 0;
  int first_failed_rank = -1;        // -1: none failed on their own
  std::string failure;               // one sentence on the first failure ("" when none)
  int interrupted_by = 0;            // signal that interrupted the launcher (0: none)
  std::vector<int> timed_out_ranks;  // stopped by exit_timeout / job_timeout, ascending
  int strays_killed = 0;             // leftover descendants stopped at the end (see above)
  HangVerdict hang;
  std::vector<RankStatus> ranks;
  bool ok() const { return first_failed_rank < 0 && interrupted_by == 0; }
};

// Runs the job to completion. Errors (nothing started, or every rank stopped): InvalidArgument
// (bad options), NotFound (program cannot be executed, naming it), Internal (fork/pipe).
// A rank failing is not an error: see LaunchResult::first_failed_rank / failure.
absl::StatusOr<LaunchResult> Launch(const LaunchOptions& options);

// What to tell the user about a failed job (result.first_failed_rank >= 0), as a Finding: an
// error, id "launch.rank_timed_out" (a rank did not exit in time) or "launch.rank_failed",
// rank result.first_failed_rank. Its title is result.failure followed by what became of the
// other ranks: stopped by the launcher, failed on their own too, or finished OK ("rank 0
// (pid 7) exited with code 3 after 0.01 s; the other rank failed on its own too"); its fix
// is one line on where to look next, which never says the launcher stopped ranks it did not
// stop. Neither ends in a newline; evidence and where are "".
Finding DescribeFailure(const LaunchResult& result);
// The status of `rank` in result.ranks (e.g. result.first_failed_rank); nullptr when absent.
const RankStatus* FindRank(const LaunchResult& result, int rank);

// Makes the calling process a child subreaper (prctl PR_SET_CHILD_SUBREAPER), so that
// descendants of its children that are orphaned are re-parented to it and Launch() can stop
// them at the end of a job. Process-wide and inherited by nothing: the executable calls it
// (the CLI's launch and selftest verbs do), never a library behind its caller's back.
// Internal when the kernel refuses.
absl::Status BecomeChildSubreaper();

// A fresh job token is trainscope::RandomHexToken() (core/os.h): 32 hex digits (128 bits).

// The launch summary as JSON (what launch.json holds).
std::string LaunchResultJson(const LaunchResult& result, const LaunchOptions& options);

// --- Hang dumps (exposed for tests) ---
// Whether a /proc/<pid>/status text says the process catches `sig` (its SigCgt mask).
bool CatchesSignal(const std::string& proc_status, int sig);
// `rank`'s dump and stacks files under <run_dir>/hang/ as stat(2) saw them: for each, empty
// when absent, else its device, inode, size, modification and change times.
struct HangDumpFiles {
  std::string dump;
  std::string stacks;
};
HangDumpFiles StatHangDump(const std::string& run_dir, int rank);
// Whether `rank`'s dump and stacks both exist and each differs from `before` (taken just
// before the rank was asked). A file is compared with itself, never its time with the
// launcher's clock: file times come from the kernel's coarse clock, up to a tick (4 ms at
// HZ=250, more under load) behind the clock a process reads, or from another host's (NFS).
bool HangDumpWritten(const std::string& run_dir, int rank, const HangDumpFiles& before);
// Runs the hang analysis when <run_dir>/hang/ holds dumps (else returns `verdict` as is):
// writes <run_dir>/hang/analysis.json and fills analyzed, problem, findings, sentences, or
// error. Whether dumps are there is asked of `os`.
HangVerdict AnalyzeHangDumps(const std::string& run_dir, HangVerdict verdict,
                             Os* os = Os::Default());

// A TCP port that is free now on this host (bind to port 0 and read it back).
absl::StatusOr<int> PickFreePort();

// --- CPU placement (exposed for tests) ---
// "0-3,8,10-11" -> {0,1,2,3,8,10,11}. InvalidArgument on malformed text.
absl::StatusOr<std::vector<int>> ParseCpuList(const std::string& text);
// CPUs of each NUMA node under <sysfs_root>/devices/system/node, restricted to `allowed`;
// one node holding `allowed` when the topology is not known. Read through `os`.
std::vector<std::vector<int>> ReadNumaNodes(const std::string& sysfs_root,
                                            const std::vector<int>& allowed,
                                            Os* os = Os::Default());
// Splits the CPUs among `nranks` ranks: ranks are spread over NUMA nodes in order
// (rank i on node i * nodes / nranks) and share their node's CPUs evenly, so a rank never
// straddles nodes. With more ranks than CPUs on a node, ranks share CPUs.
std::vector<std::vector<int>> PlanAffinity(const std::vector<std::vector<int>>& nodes, int nranks);
// Local devices: count of /dev/nvidia<N> or /dev/davinci<N>, and the variable that pins them.
struct LocalDevices {
  int count = 0;
  std::string visible_var;  // "CUDA_VISIBLE_DEVICES", "ASCEND_RT_VISIBLE_DEVICES" or ""
};
LocalDevices DetectLocalDevices(const std::string& dev_root, Os* os = Os::Default());
// The device each of `nproc` local ranks is pinned to: `placed[i]` when `placed` is given
// (it must hold at least nproc entries), else the visible list round-robin; empty when both
// are empty (no devices).
std::vector<std::string> PlanRankDevices(const std::vector<std::string>& visible,
                                         const std::vector<std::string>& placed, int nproc);

}  // namespace trainscope::launch

#endif  // TRAINSCOPE_LAUNCH_LAUNCH_H_
