// Profiler traces, read into compact per-rank event tables.
//
// Readers (one file or profiler directory per rank):
//   - PyTorch profiler / Kineto Chrome traces: {"traceEvents": [...], "distributedInfo": ...}
//     or the older bare-list form [...] (torch <= 1.13 CPU), plain or gzip (.json.gz);
//   - torch_npu (Ascend) profiler output: ASCEND_PROFILER_OUTPUT/trace_view.json (a bare list
//     with string timestamps), step_trace_time.csv and kernel_details.csv (columns by name), and
//     the rest of a *_ascend_pt folder or its SQLite export into RankTrace::ascend
//     (src/trace/ascend_rank.h);
//   - trainscope's own per-rank phase logs (JSONL, one step per line).
// The Chrome reader streams: it parses the traceEvents array chunk by chunk with simdjson
// (ondemand) and keeps one small Event per trace event (interned strings, int64 ns times),
// never a JSON tree; peak memory is the chunk buffer plus the event table.
// Bad records (truncation, missing fields, unknown categories, out-of-order timestamps,
// ids above 2^53, fields of the wrong type or out of range) are counted in ParseStats with byte
// offsets, never fatal; no exception escapes a reader, whatever the input.
// Thread-safety: the functions are reentrant; a RankTrace is not synchronised.
#ifndef TRAINSCOPE_TRACE_TRACE_H_
#define TRAINSCOPE_TRACE_TRACE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "trainscope/core/os.h"

namespace trainscope::trace {

// Event category (Chrome trace "cat", or derived for files without one).
enum class Category : uint8_t {
  kNone,            // no "cat" (legacy torch traces, Ascend trace_view)
  kCpuOp,           // cpu_op
  kUserAnnotation,  // user_annotation, ProfilerStep#N
  kGpuUserAnnotation,
  kRuntime,  // cuda_runtime, cuda_driver, *_runtime (launches, syncs)
  kKernel,   // kernel
  kGpuMemcpy,
  kGpuMemset,
  kCudaSync,        // cuda_sync
  kPythonFunction,  // python_function (skipped by default)
  kGc,              // gc
  kOther,           // a known but unused category (Trace, enqueue, ...)
  kUnknown,         // a category this reader does not know (counted)
};

// What a device event does: HTA's kernel types (COMPUTATION, COMMUNICATION, MEMORY, OTHER).
enum class DeviceKind : uint8_t { kNone, kCompute, kComm, kMemory, kOther };

// Event flags.
inline constexpr uint8_t kFlagFloat64 = 1;     // an input or kernel of type double
inline constexpr uint8_t kFlagCollective = 2;  // carries a "Collective name" argument
inline constexpr uint8_t kFlagDevice = 4;      // runs on the device (kernel, memcpy, NPU task)
inline constexpr uint8_t kFlagFromCsv = 8;     // from kernel_details.csv (not on the timeline)
inline constexpr uint8_t kFlagAiCpu = 16;      // an Ascend task that ran on the AI CPU
// args.stream present and not -1 (HTA's test for device activity: kernels, memcpy/memset,
// cuda_sync, MTIA's mtia_ccp_events, and any other event that names a stream).
inline constexpr uint8_t kFlagOnStream = 32;
inline constexpr uint8_t kFlagHasCorrelation = 64;  // args.correlation present and valid

// One complete ("X") trace event, 56 bytes. Strings are ids into RankTrace::strings.
struct Event {
  int64_t ts_ns = 0;
  int64_t dur_ns = 0;
  uint64_t correlation = 0;  // CPU launch <-> device kernel; 0 = none
  uint64_t external_id = 0;  // cpu_op <-> runtime <-> kernel; 0 = none
  uint32_t name = 0;
  uint32_t input_dims = 0;  // interned "Input Dims"/"Input Shapes" text; 0 = none
  uint32_t pid = 0;         // interned pid text
  uint32_t tid = 0;         // interned tid text
  int32_t stream = -1;      // device stream, -1 on the host
  Category cat = Category::kNone;
  DeviceKind kind = DeviceKind::kNone;
  uint8_t flags = 0;
  int64_t end_ns() const { return ts_ns + dur_ns; }
};

// Interned strings; id 0 is "".
class StringTable {
 public:
  StringTable() { Intern(""); }
  uint32_t Intern(std::string_view s);
  const std::string& Get(uint32_t id) const { return strings_[id]; }
  size_t size() const { return strings_.size(); }

 private:
  std::vector<std::string> strings_;
  absl::flat_hash_map<std::string, uint32_t> ids_;
};

// Counts of what was skipped or repaired while reading, each under a stable name.
struct ParseStats {
  int64_t bytes = 0;        // bytes read (uncompressed)
  int64_t events_seen = 0;  // array elements parsed
  int64_t events_kept = 0;  // complete events stored
  int64_t flow_events = 0;  // s/f/t (not needed by the analyses)
  int64_t metadata_events = 0;
  int64_t python_functions_skipped = 0;
  int64_t other_phases = 0;    // i, C, B/E, ... (not analysed)
  int64_t malformed = 0;       // elements that are not valid JSON objects
  int64_t missing_fields = 0;  // X events without name, ts or dur
  int64_t unknown_category = 0;
  int64_t out_of_order = 0;          // ts earlier than the previous event of the same thread
  int64_t ids_above_2p53 = 0;        // ids a double-based tool would corrupt (kept exact here)
  int64_t negative_or_huge_dur = 0;  // dur < 0 or > 7 days (CUPTI overflow): dropped
  // Fields of the wrong type or out of range (docs/formats.md "parse"); the event is dropped
  // unless said otherwise, never analysed with a made-up value.
  int64_t bad_ts = 0;        // ts not a number, or outside [kMinTsNs, kMaxTsNs]
  int64_t bad_dur = 0;       // dur not a number (or beyond int64 ns)
  int64_t bad_pid_tid = 0;   // pid/tid neither a string nor an integer in [-2^63, 2^64)
  int64_t bad_category = 0;  // "cat" not a string (object, array, number)
  int64_t bad_args = 0;      // args correlation/External id/stream not an integer in range,
                             // or args not an object: the field is ignored, the event kept
  int64_t bad_values = 0;    // phase logs and torch_npu CSVs: a step that is not an integer,
                             // a time that is negative, non-finite or > 7 days: row dropped
  // Set by AnalyzeRank: kernels that start before their launch call ends (host/device clock
  // skew or a broken correlation): left out of the launch-delay statistics.
  int64_t negative_launch_delay = 0;
  bool truncated = false;  // the file ended inside the event array
  int64_t truncated_at_byte = -1;
  std::map<std::string, int64_t> unknown_categories;  // name -> count
  std::vector<std::string> warnings;                  // first few, each with a byte offset
};

// step_trace_time.csv row (torch_npu definitions, all in us).
// Bad-record counters by their stable names (the keys of the "parse" JSON), in report order:
// malformed, missing_fields, unknown_category, out_of_order, ids_above_2p53, then the rest.
std::vector<std::pair<std::string, int64_t>> BadRecordCounts(const ParseStats& s);
// True when any bad-record counter is non-zero or the input was truncated.
bool HasBadRecords(const ParseStats& s);
// "2 malformed, 1 missing fields, 0 unknown category, 0 out of order, 0 ids above 2^53" plus
// every other non-zero counter ("1 bad pid/tid", ...) and ", truncated at byte N".
std::string DescribeBadRecords(const ParseStats& s);

// Timestamps outside [kMinTsNs, kMaxTsNs] (about -36 and +146 years around the clock's zero)
// are bad records: every difference of two event times then fits in int64.
inline constexpr int64_t kMinTsNs = -(int64_t{1} << 60);
inline constexpr int64_t kMaxTsNs = int64_t{1} << 62;
// Longest duration kept (CUPTI writes overflowed durations): 7 days.
inline constexpr int64_t kMaxDurNs = int64_t{7} * 24 * 3600 * 1'000'000'000;
// Ranks and world sizes above this are not believed (distributedInfo, phase logs, file names).
inline constexpr int kMaxRank = 1 << 20;

struct AscendStepRow {
  int64_t step = -1;
  double computing_us = 0, comm_not_overlapped_us = 0, overlapped_us = 0, comm_us = 0;
  double free_us = 0, stage_us = 0, bubble_us = 0, preparing_us = 0;
};

// One step of a trainscope phase log: phase name (without unit suffix) -> milliseconds.
struct PhaseStep {
  int64_t step = -1;
  std::map<std::string, double> phases_ms;
};

// torch_npu per-rank extras (communication, op statistics, memory, ...): src/trace/ascend_rank.h.
struct AscendRankData;

// Everything read for one rank.
struct RankTrace {
  std::string path;
  std::string format;  // "kineto", "chrome-list", "ascend", "phase-log"
  int rank = -1;
  std::string rank_source;  // "distributedInfo", "file name", "profiler_info", "order"
  int world_size = 0;       // from distributedInfo; 0 unknown
  std::string host_name;    // Kineto's top-level "host_name"; "" when absent
  StringTable strings;
  std::vector<Event> events;                      // complete events, in file order
  std::map<uint32_t, std::string> process_names;  // pid id -> process_name/labels
  std::map<std::pair<uint32_t, uint32_t>, std::string> thread_names;
  std::vector<AscendStepRow> ascend_steps;
  std::vector<PhaseStep> phase_steps;
  std::shared_ptr<AscendRankData> ascend;  // torch_npu folders only; null otherwise
  ParseStats stats;
  // Some event's ts was written with a fraction (ns-resolution traces): HTA then rounds every
  // event's ts up and its end down to whole microseconds (AnalyzeOptions::ns_precision).
  bool fractional_ts = false;
  int64_t on_stream_events = 0;  // events with kFlagOnStream
};

struct ReadOptions {
  size_t chunk_bytes = 4 << 20;        // streaming window of the Chrome reader
  bool keep_python_functions = false;  // python_function events are skipped by default
  size_t max_warnings = 20;
  bool progress = true;  // core/progress.h line for big files (when enabled by env/tty)
  // The file system the readers go through (a FakeOs in tests). Not owned; never null. (A
  // torch_npu SQLite export is the exception: SQLite opens it by path on the real machine.)
  Os* os = Os::Default();
};

// Reads one rank's data. `path` is a Chrome trace (.json/.json.gz), a phase log (.jsonl),
// a torch_npu output directory (*_ascend_pt or ASCEND_PROFILER_OUTPUT), or a
// step_trace_time.csv / kernel_details.csv. Errors: NotFound (no such file),
// InvalidArgument "<path>: byte N: ..." when nothing usable can be read. Blocking file I/O.
absl::StatusOr<RankTrace> ReadRankTrace(const std::string& path, const ReadOptions& options = {});

// Chrome trace from memory (tests, and the reader above for small inputs).
absl::StatusOr<RankTrace> ParseChromeTrace(std::string_view data, const std::string& name,
                                           const ReadOptions& options = {});

// Expands the command line: directories of per-rank traces become their trace files (or stay
// one entry when they are torch_npu output). Sorted, de-duplicated. NotFound for a missing path.
// Looks at the file system through `os`.
absl::StatusOr<std::vector<std::string>> ExpandTracePaths(const std::vector<std::string>& paths,
                                                          Os* os = Os::Default());

// Rank from a file or directory name ("rank3", "rank-3", "rank_3", "worker3"); -1 if none.
int RankFromFileName(std::string_view path);

// Microseconds as text ("12", "12.345", "1704161511422904.204", "-3") to int64 ns, exactly
// (no double rounding). False when not a number.
bool ParseUsToNs(std::string_view text, int64_t* ns);

// HTA's kernel type of a device event, from its name alone, in HTA's order (case-sensitive):
//   kComm    name starts with "nccl", "hip" or "hccl", or contains "ncclKernel";
//   kMemory  name starts with "Memcpy", "Memset", "hipMemcpy", "hipMemset" or "dma";
//   kOther   name contains "Memcpy", "Memset", "dma" or "Sync", starts with "Stream Wait Event",
//            "runFunction", "job_exe", "packet", "pe_exe", "cpum_exe_subgraph",
//            "collective_subgraph_execution", or starts with "cuda" and later has "LaunchKernel";
//   kCompute everything else.
DeviceKind ClassifyDeviceName(std::string_view name);
// torch_npu (Ascend) task names, which HTA does not know: hccl*/hcom*/nccl* and collective
// names -> kComm, Memcpy/Memset/dma (any case) -> kMemory, else kCompute.
DeviceKind ClassifyAscendName(std::string_view name);

}  // namespace trainscope::trace

#endif  // TRAINSCOPE_TRACE_TRACE_H_
