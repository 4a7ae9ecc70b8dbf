// torch_npu (Ascend) per-rank profiler output: what a `*_ascend_pt/` folder holds beyond the
// event table, and its readers (text export: ascend_rank.cc; SQLite export: ascend_db.cc).
//
// Layout (torch_npu's profiler user guide; samples in Ascend/msinsight test/data/pytorch):
//   {worker}_{ts}_ascend_pt/profiler_info_{rank}.json, profiler_metadata.json,
//   ASCEND_PROFILER_OUTPUT/ trace_view.json, kernel_details.csv, op_statistic.csv,
//   step_trace_time.csv, communication.json, communication_matrix.json, memory_record.csv,
//   operator_memory.csv, npu_module_mem.csv, ... or in DB export ascend_pytorch_profiler_{rank}.db
//   and analysis.db.
// Every file is looked up by name and every CSV column by its header name, never position.
// A file that cannot be read is named in AscendRankData::file_errors and counted in
// ParseStats::malformed; the others are still read. Files and columns this reader does not
// use are listed (unknown_files, unknown_columns), never an error.
// Thread-safety: the functions are reentrant.
#ifndef TRAINSCOPE_SRC_TRACE_ASCEND_RANK_H_
#define TRAINSCOPE_SRC_TRACE_ASCEND_RANK_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "trainscope/trace/trace.h"

namespace trainscope::trace {

// One transport of one communication op ("Communication Bandwidth Info" of communication.json;
// CommAnalyzerBandwidth in analysis.db).
struct AscendTransport {
  std::string transport;  // RDMA, HCCS, PCIE, SDMA, SIO
  double size_mb = 0, time_ms = 0, bandwidth_gbps = 0, large_packet_ratio = 0;
};

// One communication op of communication.json ("Communication Time Info"), times in ms.
struct AscendCommOp {
  std::string step, type, name;  // "step50", "collective"|"p2p", "hcom_allReduce__586_0_1@..."
  double elapse_ms = 0, transit_ms = 0, wait_ms = 0, sync_ms = 0, idle_ms = 0;
  double wait_ratio = 0, sync_ratio = 0;
  std::vector<AscendTransport> transports;
};

// One link of communication_matrix.json ("src-dst" of an op group).
struct AscendLink {
  std::string step, op, link, transport;  // "allreduce-top1@...", "0-1", "HCCS"
  double size_mb = 0, time_ms = 0, bandwidth_gbps = 0;
};

// One row of op_statistic.csv.
struct AscendOpStat {
  std::string op_type, core_type;
  int64_t count = 0;
  double total_us = 0;
};

// Device tasks of one operator on the AI CPU (kernel_details.csv Accelerator Core AI_CPU, or
// COMPUTE_TASK_INFO taskType AI_CPU), grouped by name, type and input dtypes.
struct AscendAiCpuOp {
  std::string name, type, dtypes;
  int64_t count = 0;
  double total_us = 0, max_us = 0;
};

// What a per-rank folder holds besides events and step rows (RankTrace::ascend).
struct AscendRankData {
  std::string export_type;     // "text" or "db"
  std::string schema_version;  // META_DATA SCHEMA_VERSION of a .db
  std::vector<std::string> files_read;
  std::vector<std::string> unknown_files;                           // in the folder, not used
  std::map<std::string, std::vector<std::string>> unknown_columns;  // file -> column names
  std::vector<std::pair<std::string, std::string>> file_errors;     // file -> why not read
  std::vector<AscendCommOp> comm_ops;
  std::vector<AscendLink> links;
  int64_t comm_missing_keys = 0;  // ops/links/fields of the two JSON files absent or not numbers
  std::vector<AscendOpStat> op_stats;
  // kernel_details.csv "OP State" (static/dynamic), when the column is there.
  int64_t op_state_static = 0, op_state_dynamic = 0;
  // Over every device compute task read (AddKernelFacts): count, time, the AI CPU ones, and the
  // distinct input shapes per op type (at most kMaxShapesPerType kept each).
  int64_t kernel_tasks = 0;
  double kernel_total_us = 0;
  std::vector<AscendAiCpuOp> ai_cpu;
  std::map<std::string, std::set<std::string>> shapes_by_type;
  static constexpr size_t kMaxShapesPerType = 1000;
  // Memory CSVs: peaks in MB (0 = not there).
  double peak_allocated_mb = 0, peak_reserved_mb = 0, peak_module_reserved_mb = 0;
  int64_t memory_rows = 0;
  std::map<std::string, std::string> env;  // profiler_metadata.json ENV_VARIABLES
  // AI Core frequency samples: AICORE_FREQ (.db) or trace_view.json's "AI Core Freq" counter.
  std::vector<int64_t> aicore_freq_mhz;
  // The rated AI Core frequency, MHz (DeviceInfo aic_frequency of PROF_*/device_*/info.json.*
  // or profiler_info_*.json); 0 when the folder does not give it.
  double aic_rated_mhz = 0;
  // Overlap Analysis totals (trace_view lanes or the OVERLAP_ANALYSIS table), us; < 0 absent.
  double ov_computing_us = -1, ov_comm_us = -1, ov_comm_not_overlapped_us = -1, ov_free_us = -1;
};

namespace internal {

// Reads a torch_npu output folder (`dir` is the *_ascend_pt folder or its
// ASCEND_PROFILER_OUTPUT, `out_dir` the folder holding the files). Errors: InvalidArgument
// naming the folder when no file of it could be read (each file's error in the message).
absl::Status ReadAscendDir(const std::string& dir, const std::string& out_dir,
                           const ReadOptions& opt, RankTrace* t);
// The folder of torch_npu files under `dir` (its ASCEND_PROFILER_OUTPUT, or itself), "" if none.
std::string AscendOutputDir(const std::string& dir, Os* os = Os::Default());
// step_trace_time.csv (or cluster-free StepTraceTime rows) into t->ascend_steps. Reads
// through `os`, as the next one.
absl::Status ReadStepTraceCsv(const std::string& path, RankTrace* t, Os* os = Os::Default());
// kernel_details.csv into device events; `timeline_has_device`: trace_view already has the
// tasks, so the rows are marked kFlagFromCsv (used for per-kernel facts, not the timeline).
absl::Status ReadKernelDetailsCsv(const std::string& path, bool timeline_has_device, RankTrace* t,
                                  Os* os = Os::Default());
// communication.json / communication_matrix.json from memory (`name` for messages).
absl::Status ParseCommunicationJson(const std::string& text, const std::string& name,
                                    AscendRankData* d);
absl::Status ParseCommunicationMatrixJson(const std::string& text, const std::string& name,
                                          AscendRankData* d);
// The SQLite export (ascend_pytorch_profiler_{rank}.db, and analysis.db when `analysis_db` is
// not ""): tasks, APIs, steps, communication, overlap lanes, frequency. Errors: InvalidArgument
// naming the file when it is not SQLite or lacks the tables of the known schema.
absl::Status ReadAscendDb(const std::string& db, const std::string& analysis_db, RankTrace* t);
// Adds one device compute task to the per-kernel facts of `d` (AI CPU groups, shapes per type).
void AddKernelFacts(const std::string& name, const std::string& type, const std::string& core,
                    const std::string& dtypes, const std::string& shapes, double dur_us,
                    AscendRankData* d);
// RankTrace::ascend, created when absent.
AscendRankData* AscendData(RankTrace* t);

}  // namespace internal
}  // namespace trainscope::trace

#endif  // TRAINSCOPE_SRC_TRACE_ASCEND_RANK_H_
