// Analyses of per-rank traces (trace.h), and the report of `trainscope trace analyze`.
//
// Definitions (docs/metrics.md "Trace breakdown"):
//   - temporal breakdown (HTA): over device kernels, kernel_time = last end - first start,
//     idle = kernel_time - union(all kernels), compute = union(compute kernels),
//     non_compute = kernel_time - compute - idle. Without device activity the same three
//     shares are taken over the main thread's step time (basis "host"): compute = forward +
//     backward + optimizer, non_compute = communication and waits for it, idle = the rest
//     (data loading, host gaps). torch_npu data uses step_trace_time.csv (Computing,
//     Communication(Not Overlapped), Free).
//   - comm_comp_overlap_pct (HTA) = |union(comm) n union(compute)| / |union(comm)|.
//   - iteration gap of a step = step time not covered by device work (by compute on the host
//     for host-only traces), flagged above AnalyzeOptions::iteration_gap_threshold_pct.
//   - straggler: per step, the rank that waits least in collectives (msprof-analyze's slow
//     rank rule) when the spread exceeds straggler_spread of the mean step time.
// Thread-safety: pure functions over their arguments.
#ifndef TRAINSCOPE_TRACE_ANALYSIS_H_
#define TRAINSCOPE_TRACE_ANALYSIS_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "trainscope/core/finding.h"
#include "trainscope/trace/trace.h"

namespace trainscope::trace {

struct AnalyzeOptions {
  double iteration_gap_threshold_pct = 20;  // the rule of thumb
  int top_k = 10;
  int64_t short_kernel_ns = 10'000;           // fragmentation: shorter kernels/ops are "tiny"
  int64_t launch_runtime_cutoff_ns = 50'000;  // HTA get_cuda_kernel_launch_stats
  int64_t launch_delay_cutoff_ns = 100'000;   // HTA get_cuda_kernel_launch_stats
  int shape_churn_min_shapes = 8;             // distinct input shapes of one operator
  double dataloader_ms_per_step = 10;         // msprof-analyze advisor "slow dataloader"
  double straggler_spread = 0.05;             // msprof-analyze advisor slow-rank ratio
  int fusion_min_count = 5;                   // occurrences of an operator sequence
  int64_t aicpu_min_task_ns = 20'000;         // msprof-analyze AICPU rule
  // HTA drops the last ProfilerStep (include_last_profiler_step=False); true keeps it.
  bool include_last_step = false;
  // HTA rounds fractional-us times to whole us (ts up, end down); true keeps them to the ns.
  bool ns_precision = false;
};

// Findings are core Findings (trainscope/core/finding.h): id is the stable code
// ("iteration_gap", "slow_dataloader", "straggler", ...; "code" in the JSON), title the
// sentence ("what" in the JSON), rank -1 across ranks.
using ::trainscope::Finding;
using ::trainscope::Severity;

// One step (ProfilerStep#N, a step_trace_time.csv row, or a phase-log line).
struct StepResult {
  int64_t step = -1;    // the ProfilerStep number; -1 for a trace without steps
  double start_us = 0;  // relative to the rank's first step
  double step_us = 0;
  double gap_us = 0, gap_pct = 0;
  bool gap_flagged = false;
  double device_busy_us = 0;  // union of device work in the step (0 on host-only traces)
  double comm_us = 0;         // collective time in the step (device comm kernels or host comm ops)
  // Host phases of the main thread (us): data_loading, forward, backward, optimizer,
  // communication, comm_wait, host_idle, other; or a phase log's phases.
  std::map<std::string, double> host_us;
};

// One profiler window: a file of a rank. torch.profiler's schedule(repeat=N) with
// tensorboard_trace_handler writes one file per window and process.
struct WindowResult {
  std::string path;
  std::vector<int64_t> steps;       // its analysed steps (ProfilerStep numbers)
  double start_us = 0, end_us = 0;  // its events' time range, from the rank's first event
  double mean_step_us = 0;          // over its analysed steps
};

struct RankResult {
  int rank = -1;
  std::string path, format, rank_source;
  std::string basis;  // "device", "host", "ascend" or "phase-log"
  // What the trace ran on, for advice that fits it: "cuda" (CUDA kernels or runtime calls),
  // "npu" (torch_npu / Ascend), "cpu" (a profiler trace with no device activity), "" unknown
  // (phase logs).
  std::string device;
  std::vector<StepResult> steps;
  // Temporal breakdown, us and % (of kernel_time_us).
  double kernel_time_us = 0, idle_us = 0, compute_us = 0, non_compute_us = 0;
  double idle_pct = 0, compute_pct = 0, non_compute_pct = 0;
  std::optional<double> comm_comp_overlap_pct;  // none without communication
  nlohmann::json details;  // top_operators, top_kernels, kernel_types, fragmentation, ...
  ParseStats stats;        // the reader's counts, plus negative_launch_delay from the analysis
  nlohmann::json parse;    // `stats` as JSON (docs/formats.md "parse")
  std::vector<Finding> findings;
  // The files of this rank, by time (AnalyzePaths fills it; one entry per file). With several
  // windows, steps and figures are over all of them; the temporal breakdown sums the windows'.
  std::vector<WindowResult> windows;
  double MeanStepUs() const;
  double MeanHostUs(const std::string& phase) const;
  double MeanCommUs() const;
};

struct Straggler {
  int rank = -1;
  int votes = 0;  // steps in which it waited least in collectives
  int steps_compared = 0;
  double comm_us = 0, others_comm_us = 0;  // mean per step
  double step_us = 0;
  std::string cause;  // "data_loading", "forward", "compute", ... (largest excess)
  double cause_us = 0, others_cause_us = 0;
};

// A file found in a directory that is not a trace (an execution trace, notes, ...): skipped.
struct SkippedFile {
  std::string path, reason;
};

struct Report {
  std::vector<RankResult> ranks;
  std::vector<Straggler> stragglers;
  std::vector<Finding> findings;  // across ranks
  std::vector<SkippedFile> skipped;
  // Bad-record counts and reader warnings, one line per item ("path: ..."); not in the JSON.
  std::vector<std::string> warnings;
  // The Ascend cluster view (msprof-analyze's cluster_analysis_output or a folder of rank
  // folders: per rank and step figures, stages, slow rank, slow link, waits; docs/formats.md
  // "cluster"); null for any other input, and then absent from the JSON.
  nlohmann::json cluster;
};

// Analyses one rank. Sorts trace->events by time (the table is otherwise left as read).
RankResult AnalyzeRank(RankTrace* trace, const AnalyzeOptions& options = {});

// Per-rank analyses plus stragglers and cross-rank findings. Ranks sorted by rank; traces
// without a rank get the next free number in order.
Report AnalyzeRanks(std::vector<RankTrace>* traces, const AnalyzeOptions& options = {});

// The cross-rank part alone, over per-rank results (so that a caller can analyse one rank at a
// time and free its events: memory stays at one rank's event table). Sorts by rank.
Report CombineRanks(std::vector<RankResult> ranks, const AnalyzeOptions& options = {});

// Options of AnalyzePaths.
struct AnalyzePathsOptions {
  AnalyzeOptions analyze;
  bool strict = false;  // bad records in a trace are an error rather than a warning
  // The file system every path is read through (a FakeOs in tests). Not owned; never null.
  Os* os = Os::Default();
};

// InvalidArgument naming the first path that exists and is neither a regular file nor a
// directory (a FIFO, /dev/zero): checked from stat() alone (through `os`), so nothing can block.
absl::Status CheckTracePaths(const std::vector<std::string>& paths, Os* os = Os::Default());

// `trace analyze` (the CLI and the Python module call this): checks the paths
// (CheckTracePaths), expands directories (ExpandTracePaths), reads and analyses one rank at a
// time (memory stays at one rank's event table), numbers traces without a rank with the next
// free numbers and combines the ranks. A file found in a directory that is not a trace is
// skipped (Report::skipped). The files of one process are one rank with several windows
// (RankResult::windows; torch.profiler's schedule(repeat=N) writes one file per window): files
// that name the same rank, or without a rank the same host and pid; their events are analysed
// together, HTA's last-step rule applied per window. Bad records go to Report::warnings, or with
// options.strict are an InvalidArgument naming the file. Errors: NotFound (a missing path),
// InvalidArgument (a named file that is not a trace or has no usable events, no trace at all), each
// naming the file. Blocking (reads files); writes nothing.
absl::StatusOr<Report> AnalyzePaths(const std::vector<std::string>& paths,
                                    const AnalyzePathsOptions& options = {});

// True when a finding of the report (across ranks or of one rank) is an error.
bool HasErrorFinding(const Report& report);

// Every finding, across ranks first, then per rank in rank order.
std::vector<Finding> FindingsFrom(const Report& report);

// The --json document (format "trainscope.trace.analysis", version 1; docs/formats.md).
nlohmann::json ReportToJson(const Report& report);
// The readable report: side-by-side breakdown, per-step table, top operators, findings.
std::string ReportToText(const Report& report);
// A Chrome trace (opens in Perfetto / chrome://tracing) of the per-step summary: one process
// per rank, a track of steps with their gap and breakdown, a track of host phases.
nlohmann::json ExportChromeTrace(const Report& report);

}  // namespace trainscope::trace

#endif  // TRAINSCOPE_TRACE_ANALYSIS_H_
