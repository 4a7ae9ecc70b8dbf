// trainscope::hang dumps: one rank's flight recorder dump, read from bytes (our JSON,
// PyTorch's JSON, or PyTorch's pickle read with core/pickle.h), as the analysis sees it.
// analyze.h's AnalyzePaths reads files with these; tests, the fuzz target and the launcher
// may call them directly.
//
// Contract:
//  - ReadDumpBytes never fails as a call: its outcome says whether the bytes were a dump,
//    not a dump at all (skipped), or a dump that is truncated or corrupt (with a one-line
//    reason naming the entry or byte offset).
//  - Lenient on types the way PyTorch's writers differ: integers may be JSON numbers or
//    strings ("4"), times null or 0, dtypes a list or one string, process_group a list
//    or a tuple (pickle), pg_config ranks a string "[0, 1]" or a list.
//  - Pure functions; thread-safe.
#ifndef TRAINSCOPE_HANG_DUMP_H_
#define TRAINSCOPE_HANG_DUMP_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "trainscope/hang/analyze.h"

namespace trainscope::hang {

// One entry of a dump, with the op name split from its backend ("nccl:send 0->1" ->
// backend "nccl", op "send", src 0, dst 1).
struct Entry {
  int64_t record_id = -1;
  int64_t pg_id = -1;
  std::string pg_name, pg_desc;
  int64_t collective_seq_id = -1;
  int64_t p2p_seq_id = -1;
  std::string profiling_name;
  std::string backend;  // "nccl", "gloo", "xccl", "hccl", ... ("" when none)
  std::string op;       // "all_reduce", "_all_gather_base", "send", "coalesced", ...
  bool is_p2p = false;
  int src = -1, dst = -1;  // p2p: group ranks from the name or our `peer` key
  std::vector<std::vector<int64_t>> input_sizes, output_sizes;
  std::vector<std::string> input_dtypes, output_dtypes;
  std::string state;  // "scheduled" | "started" | "completed" (other text kept as is)
  int64_t time_created_ns = 0, time_started_ns = 0, time_completed_ns = 0;  // 0: not reached
  double duration_ms = 0;  // as written (PyTorch: CUDA-event timing when enabled); 0: none
  bool retired = false;
  std::string caller;  // ours; "" when not recorded
  int64_t step = -1;   // ours: the training step it was issued in; -1 when not recorded
  std::string frames;  // "func (file:line) <- ..." when recorded
  std::string error;   // ours
};

struct GroupConfig {
  std::string name, desc;
  std::vector<int> ranks;  // global ranks in group order; empty when unknown
};

struct GroupStatus {
  int64_t last_enqueued = -1, last_started = -1, last_completed = -1;
};

struct Dump {
  std::string file;                              // path it was read from (or the name given)
  int rank = -1;                                 // from "rank", else the name's trailing digits
  std::string rank_source;                       // "key" | "name"
  int world_size = -1;                           // ours; -1 when absent
  std::string version;                           // "2.10", ...
  std::string format;                            // "json" | "pickle"
  bool ours = false;                             // has the "trainscope" object
  bool hccl = false;                             // torch_npu's recorder (hang/hccl_dump.h)
  std::map<std::string, GroupConfig> pg_config;  // by group name
  std::map<int64_t, GroupStatus> pg_status;      // by pg_id
  std::vector<Entry> entries;                    // oldest first
};

enum class ReadOutcome {
  kDump,      // `dump` is set
  kNotADump,  // skipped: `reason` says what it looked like
  kCorrupt,   // a dump that is truncated or corrupt: `reason`
};

struct ReadResult {
  ReadOutcome outcome = ReadOutcome::kNotADump;
  Dump dump;
  std::string reason;
};

// Sniffs and parses one file's bytes. `name` is used for the rank fallback and messages.
ReadResult ReadDumpBytes(std::string_view bytes, const std::string& name);

// The dump in a parsed JSON value (PyTorch's layout, or pickle converted to JSON).
// InvalidArgument naming the entry and key when a field has the wrong type.
absl::StatusOr<Dump> ParseDump(const nlohmann::json& doc, const std::string& name);

// "[0, 1, 2]" -> {0, 1, 2}; InvalidArgument on anything else.
absl::StatusOr<std::vector<int>> ParseRankList(std::string_view text);

// Bad inputs met while reading; all of them are listed in Report::details["inputs"].
struct InputCounts {
  int files_read = 0;
  std::vector<std::pair<std::string, std::string>> skipped;  // file, reason
  std::vector<std::pair<std::string, std::string>> corrupt;  // file, reason
};

// The analysis of dumps already read (AnalyzePaths = read every file + this). Dumps with a
// duplicate rank are moved to `counts.corrupt`.
Report AnalyzeDumps(std::vector<Dump> dumps, InputCounts counts, const AnalyzeOptions& options);

}  // namespace trainscope::hang

#endif  // TRAINSCOPE_HANG_DUMP_H_
