// The Ascend cluster view of `trace analyze`: msprof-analyze's own `cluster_analysis_output/`
// (cluster_step_trace_time.csv, cluster_communication.json, cluster_communication_matrix.json,
// communication_group.json) or a folder of per-rank torch_npu `*_ascend_pt/` folders, read into
// one table of (rank, step) figures with the pipeline stages, communication records and links;
// then msprof-analyze's cluster rules over it (docs/metrics.md "Ascend cluster"):
//   - slow rank (advisor slow_rank_analyzer): per (step, rank) Computing, Communication(Not
//     Overlapped), Free; a dimension is a bottleneck when (max - min) / mean(step total) > 5%;
//     the ranks it names are the max and min of the dimension when (max - min) / mean(dimension)
//     >= 5%, over all ranks and per pipeline stage. The slow rank is the one the others wait
//     for: the least communication, or else the most computing, or else the most free time.
//   - slow link (advisor slow_link_analyzer): per (step, rank) SDMA and RDMA bandwidth =
//     sum(Transit Size MB) / sum(Transit Time ms) over the communication records; the rank with
//     the least bandwidth when (max - min) / mean >= 5%. Per link (src -> dst, transport) from
//     the matrix the same rule among the links of one transport.
//   - pipeline bubble: per stage row, Bubble / (Stage + Bubble); the stage that waits most.
//   - wait ratio: per rank, sum(Wait) / (sum(Wait) + sum(Transit)) over its records.
// Thread-safety: plain values and pure functions; the readers block on file I/O.
#ifndef TRAINSCOPE_SRC_TRACE_ASCEND_CLUSTER_H_
#define TRAINSCOPE_SRC_TRACE_ASCEND_CLUSTER_H_

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "trainscope/core/os.h"
#include "trainscope/trace/analysis.h"
#include "trainscope/trace/trace.h"

namespace trainscope::trace::internal {

// One row of cluster_step_trace_time.csv (Type rank) or of a rank's step_trace_time.csv (us).
struct ClusterRow {
  int64_t step = -1;  // -1: no step column / empty cell (msprof-analyze's default step)
  int rank = -1;
  double computing_us = 0, comm_not_overlapped_us = 0, overlapped_us = 0, comm_us = 0;
  double free_us = 0, stage_us = 0, bubble_us = 0, comm_not_overlapped_excl_receive_us = 0;
  double preparing_us = 0;
  int dp_index = -1, pp_index = -1, tp_index = -1;  // -1 absent / NA
};

// A pipeline stage in one step: its ranks and the column-wise maximum over them (msprof's
// Type stage row).
struct ClusterStage {
  int64_t step = -1;
  std::vector<int> ranks;  // sorted
  ClusterRow max;          // rank -1
};

// One communication op of one rank (cluster_communication.json or a rank's communication.json).
struct ClusterCommRecord {
  std::string group;  // "(0, 1)" in cluster output, the "@..." group id in rank folders
  int64_t step = -1;
  std::string op;
  int rank = -1;
  double elapse_ms = 0, transit_ms = 0, wait_ms = 0, sync_ms = 0, idle_ms = 0;
  std::map<std::string, std::pair<double, double>> transport;  // "SDMA" -> (size MB, time ms)
  bool total = false;  // msprof's "Total Op Info" aggregate of the group (not an op)
};

// One link of the communication matrix, summed over the records used (see the reader).
struct ClusterLink {
  int src = -1, dst = -1;
  std::string transport;  // LOCAL, HCCS, PCIE, RDMA, SIO, ...
  double size_mb = 0, time_ms = 0;
};

// What one file gave: records kept, bad records, and the first problems (file: line/key: why).
struct ClusterFile {
  std::string path;
  int64_t records = 0, bad_records = 0;
  std::vector<std::string> problems;
};

struct ClusterInput {
  std::string source;  // "cluster_analysis_output" or "rank_folders"
  std::string path;    // the folder read
  // True when the per-rank folders are analysed as ranks too (then the rows do not become
  // RankResults of their own).
  bool ranks_from_folders = false;
  std::vector<ClusterRow> rows;  // by (step, rank)
  std::vector<ClusterStage> stages;
  std::vector<ClusterCommRecord> comm;
  std::vector<ClusterLink> links;
  std::vector<ClusterFile> files;
  bool Empty() const { return rows.empty() && comm.empty() && links.empty(); }
};

// The command line split into cluster inputs and the rest. A path is a cluster input when it
// is a cluster_analysis_output folder (or holds cluster_step_trace_time.csv), that CSV itself,
// a folder holding cluster_analysis_output/ (its rank folders stay in `rest`), or a folder of
// two or more rank folders (*_ascend_pt or with ASCEND_PROFILER_OUTPUT/; stays in `rest` too).
struct ClusterPaths {
  std::vector<std::string> outputs;       // cluster_analysis_output folders
  std::vector<std::string> rank_parents;  // folders of rank folders without an output
  std::vector<std::string> rest;          // for the per-rank readers
  std::vector<std::string> with_ranks;    // outputs whose parent's rank folders are in rest
};
// The readers below take the file system as `os` (a FakeOs in tests).
ClusterPaths SplitClusterPaths(const std::vector<std::string>& paths, Os* os = Os::Default());

// Reads a cluster_analysis_output folder. Bad records and missing keys are counted per file;
// InvalidArgument naming the folder only when no file gave anything.
absl::StatusOr<ClusterInput> ReadClusterOutput(const std::string& dir, Os* os = Os::Default());
// Reads a folder of rank folders: each rank's step_trace_time.csv and communication.json (not
// communication_matrix.json: its links name group-local ranks), rank from
// profiler_info_<rank>.json, stages from the pipeline
// groups of profiler_metadata.json (msprof-analyze's StageInfoAnalysis). Same errors.
absl::StatusOr<ClusterInput> ReadRankFolders(const std::string& dir, Os* os = Os::Default());
// The readers over text (the fuzz target and the tests): `name` is how problems name it.
void ParseClusterStepTraceCsv(std::string_view text, const std::string& name, ClusterInput* in);
void ParseClusterCommJson(std::string_view text, const std::string& name, ClusterInput* in);
void ParseClusterMatrixJson(std::string_view text, const std::string& name, ClusterInput* in);

// The one cluster input of the paths (nullopt when none). InvalidArgument when there are two.
absl::StatusOr<std::optional<ClusterInput>> ReadClusterPaths(const ClusterPaths& paths,
                                                             Os* os = Os::Default());

// One RankTrace per rank of the rows (format "ascend", its steps as ascend_steps), for
// AnalyzeRank.
std::vector<RankTrace> ClusterRankTraces(const ClusterInput& in);

// The cluster rules: report->cluster (JSON), findings (slow_rank, slow_link, pipeline_bubble,
// comm_wait, cluster_input), and one warning line per file with bad records or per rank with
// other steps than the rest.
void AnalyzeCluster(const ClusterInput& in, const AnalyzeOptions& opt, Report* report);
// The readable section of report->cluster ("" when it is null).
std::string ClusterToText(const nlohmann::json& cluster);

}  // namespace trainscope::trace::internal

#endif  // TRAINSCOPE_SRC_TRACE_ASCEND_CLUSTER_H_
