// `trainscope ckpt inspect|verify|diff`: reads any supported checkpoint into one report.
// Formats (detected from the path, never from a flag):
//   trainscope   our step-<N> directory (checkpoint.h), or a folder of them (each one reported)
//   safetensors  one .safetensors file (or any file whose header parses as one)
//   hf-sharded   a folder with model.safetensors.index.json (weight_map -> shard files)
//   dcp          a torch.distributed.checkpoint folder (.metadata pickle + *.distcp), read
//                with core/pickle.h: names, global shapes, dtypes, chunks and where each
//                chunk lies; inspect does not read tensor data (stats stay undecoded),
//                diff compares values chunk by chunk (src/ckpt/dcp.h)
// Thread-compatible; blocks on file I/O; no timeout (local files).
#ifndef TRAINSCOPE_CKPT_INSPECT_H_
#define TRAINSCOPE_CKPT_INSPECT_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "trainscope/ckpt/checkpoint.h"
#include "trainscope/ckpt/safetensors.h"
#include "trainscope/core/finding.h"
#include "trainscope/core/os.h"

namespace trainscope::ckpt {

struct InspectOptions {
  bool stats = true;                       // read tensor data for non-finite counts, norms, min/max
  bool hash = true;                        // verify hashes of our checkpoints
  std::function<void(uint64_t)> on_bytes;  // progress: bytes read so far (may be empty)
  Os* os = Os::Default();                  // the file system read (a FakeOs in tests)
};

struct TensorReport {
  std::string name, dtype, file;  // file: relative to the checkpoint path ("" for one file)
  std::vector<uint64_t> shape;
  uint64_t bytes = 0;
  uint64_t offset = 0;  // absolute offset of the data in `file` (safetensors)
  TensorStats stats;    // stats.decoded false when not read
  int chunks = -1;      // dcp: chunks of the tensor (0 for a non-tensor entry); -1 otherwise
};

struct CheckpointReport {
  std::string path, format;  // format: "trainscope", "safetensors", "hf-sharded", "dcp"
  int64_t step = -1;
  bool complete = true;
  std::vector<Problem> problems;
  std::vector<TensorReport> tensors;  // in (file, name) order for ours, else name order
  uint64_t total_bytes = 0;
  bool incomplete = false;  // an unfinished save (ours: a .tmp- folder or no manifest.json)
  bool anomaly = false;     // ours: an anomaly checkpoint (never resumed from as "latest")
  // Problems make a report not ok; an unfinished save inside a folder of checkpoints is
  // complete=false without a problem (the writer may still be running).
  bool ok() const { return problems.empty(); }
  // One word for the report: "incomplete" (an unfinished save, or DCP data missing),
  // "corrupt" (damaged bytes: a header, a tensor's data, a manifest), "non-finite" (intact,
  // holding NaN/Inf), "ok".
  std::string status() const;
};

// The newest report that `checkpoint.load` / `--resume latest` would take: of our format,
// ok, complete, not an anomaly checkpoint, highest step; nullptr when there is none.
const CheckpointReport* NewestGood(const std::vector<CheckpointReport>& reports);

// Size in bytes of the tensor data that Inspect would read under `path` (for progress).
uint64_t DataBytes(const std::string& path);

// Reads `path` (format detected as above). A folder of our step-<N> directories yields one
// report per checkpoint (incomplete ones are reported with complete=false and, being an
// unfinished save, no problem). Problems (corrupt headers, hash mismatches, truncation,
// non-finite values) are recorded, not returned as errors. Errors: NotFound when `path`
// does not exist; InvalidArgument "<path>: unknown checkpoint format ..." otherwise, and
// "<dir>/.metadata: byte N: OPCODE: ..." (or naming the entry) for a DCP .metadata that is
// not a readable pickle of DCP's metadata. For DCP, problems are: a chunk's .distcp file
// missing or shorter than the chunk's end, a tensor whose chunks are missing from
// storage_data or do not cover its elements, no .distcp file at all.
absl::StatusOr<std::vector<CheckpointReport>> InspectPath(const std::string& path,
                                                          const InspectOptions& options);
// `ckpt inspect` / `ckpt verify` (the CLI and the Python module): InspectPath over each
// path in order, the reports concatenated. Errors: those of InspectPath, for the first
// path that fails.
absl::StatusOr<std::vector<CheckpointReport>> InspectPaths(const std::vector<std::string>& paths,
                                                           const InspectOptions& options);
// One checkpoint (a folder of checkpoints is an error here).
absl::StatusOr<CheckpointReport> Inspect(const std::string& path, const InspectOptions& options);

struct TensorDiff {
  std::string name;
  std::string change;  // "", "shape", "dtype", "not compared" (no data, or DCP chunks
                       // that do not pair up or are not decoded)
  double max_abs = 0, max_rel = 0;
  bool differs = false;
};
struct DiffReport {
  std::string a, b;
  std::vector<std::string> only_a, only_b;
  std::vector<TensorDiff> tensors;  // common tensors, name order
  std::string first_different;      // "" when none
  bool same() const { return only_a.empty() && only_b.empty() && first_different.empty(); }
};
// Compares two checkpoints tensor by tensor (values decoded to double; max rel uses
// |a-b| / max(|a|, |b|), 0 when both are 0; a NaN in one and not the other differs).
// Errors: those of Inspect; for DCP folders also DataLoss (a .distcp file shorter than an
// entry) and InvalidArgument "<file>: bytes [A, B): ..." (an entry that is not a torch.save
// archive).
absl::StatusOr<DiffReport> Diff(const std::string& a, const std::string& b,
                                const InspectOptions& options);

// --json forms (docs/formats.md "Checkpoint inspection").
nlohmann::json ReportToJson(const CheckpointReport& r, bool with_tensors);
nlohmann::json DiffToJson(const DiffReport& d);
// The --json document of `ckpt inspect` (with_tensors) and `ckpt verify` (without):
// {"format": "trainscope.ckpt.report", "version": 1, "ok": every report ok,
//  "checkpoints": [ReportToJson(r, with_tensors), ...],
//  "newest_good": {"path", "step"} of NewestGood, or null}.
nlohmann::json ReportsToJson(const std::vector<CheckpointReport>& reports, bool with_tensors);
// Text: problems first (one sentence each), then a table fitting 120 columns.
std::string FormatReportText(const CheckpointReport& r, bool with_tensors);
// Every report's FormatReportText, then (when any report is of our format) a line naming
// NewestGood: "newest good checkpoint: PATH (step N)", or that there is none.
std::string FormatReportsText(const std::vector<CheckpointReport>& reports, bool with_tensors);
std::string FormatDiffText(const DiffReport& d);

// Every problem of the reports as a core Finding, in order, for callers that rank findings
// from several modules (doctor, diagnose): title the problem's sentence, where its file,
// evidence the damaged tensor ("tensor \"<name>\"", "" when none), fix what to resume from;
// id "ckpt.incomplete" (a warning: an unfinished save, not damage), "ckpt.non_finite" or
// "ckpt.corrupt" (errors). An unfinished save without a problem gives none.
std::vector<Finding> FindingsFrom(const std::vector<CheckpointReport>& reports);

}  // namespace trainscope::ckpt

#endif  // TRAINSCOPE_CKPT_INSPECT_H_
