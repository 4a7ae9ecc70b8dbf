// trainscope's own checkpoint directory (docs/formats.md "Checkpoint"): the atomic writer,
// the completeness/integrity check, FindLatestComplete and `keep` pruning.
//
//   <checkpoints dir>/step-<step>/          a complete checkpoint, renamed into place
//       model.safetensors                   replicated model state (rank 0)
//       optimizer.safetensors               optimizer state (optional)
//       <name>.safetensors, ...             more tensors (e.g. compression.rank<R>.safetensors)
//       rank<R>.json, ...                   small JSON blobs (RNG states, data position)
//       meta.json                           {"format": "trainscope.checkpoint", "version": 1, ...}
//       manifest.json                       written last: every other file, bytes, xxh3-64;
//                                           for a .safetensors file also its header's and
//                                           each tensor's byte range and xxh3-64
//   <checkpoints dir>/step-<step>.tmp-<pid>/ a save in progress, or one a crash interrupted
//   <checkpoints dir>/anomaly-step-<step>/  an anomaly checkpoint (same files, meta.json
//                                           "anomaly": true): listed, checked and kept, never
//                                           taken by FindLatestComplete (resume "latest")
//
// A directory without a valid manifest is never complete. Functions are thread-compatible
// (no shared state); they block on file I/O and have no timeout (local disk).
#ifndef TRAINSCOPE_CKPT_CHECKPOINT_H_
#define TRAINSCOPE_CKPT_CHECKPOINT_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "trainscope/ckpt/safetensors.h"
#include "trainscope/core/formats.h"
#include "trainscope/core/os.h"
#include "trainscope/core/run_dir.h"

namespace trainscope::ckpt {

inline constexpr auto& kCheckpointFormat = formats::kCheckpoint;
inline constexpr auto& kManifestFormat = formats::kCheckpointManifest;
inline constexpr int kCheckpointVersion = 1;
using run_dir::CheckpointDirName;
using run_dir::kAnomalyPrefix;  // the folder names are the run directory's (core/run_dir.h)

// What one save holds. Views point into the caller's memory, read during the call only.
// Whether `name` can be one of CheckpointData::tensor_files: a plain "<name>.safetensors"
// (no directory, not hidden) other than model.safetensors and optimizer.safetensors.
bool IsExtraTensorFileName(const std::string& name);

struct CheckpointData {
  int64_t step = 0;
  int world_size = 1;
  std::string config_hash;
  bool anomaly = false;               // anomaly checkpoints are never pruned
  std::vector<TensorView> model;      // -> model.safetensors (written even when empty)
  std::vector<TensorView> optimizer;  // -> optimizer.safetensors (omitted when empty)
  // More tensor files: "compression.rank0.safetensors" -> its tensors; plain names ending in
  // .safetensors other than model/optimizer.safetensors.
  std::map<std::string, std::vector<TensorView>> tensor_files;
  std::map<std::string, nlohmann::json> json_files;      // "rank0.json" -> blob; plain names only
  nlohmann::json meta_extra = nlohmann::json::object();  // meta.json "extra"
};

struct WriteOptions {
  bool fsync = true;  // fsync files and directories (tests may turn it off for speed)
  // Test seam: called after each file is complete in the temporary directory (name given);
  // a non-ok Status stops the save there, leaving the temporary directory as a crash would.
  std::function<absl::Status(const std::string& file)> after_file;
};

// Writes `data` into `<dir>/<name>.tmp-<pid>/`, fsyncs every file and the directory, writes
// manifest.json last, renames to `<dir>/<name>/` and fsyncs `dir`, where <name> is
// CheckpointDirName(data.step, data.anomaly). Creates `dir` when missing. Returns the final
// path. Errors: AlreadyExists when <name> exists;
// InvalidArgument for a bad tensor (dtype x shape != bytes, repeated name), JSON file
// name or tensor file name; I/O errors name the path. On error the temporary directory is left
// behind.
absl::StatusOr<std::string> WriteCheckpoint(const std::string& dir, const CheckpointData& data,
                                            const WriteOptions& options = {});

struct Problem {
  std::string file;     // path of the file (or directory) concerned
  std::string problem;  // one sentence: "incomplete: ..." only for an unfinished save,
                        // "corrupt: ..." for damaged bytes (a header, a tensor's data)
  std::string tensor;   // the damaged tensor's name, "" when the problem is not one tensor's
};

struct CheckResult {
  std::string path;
  int64_t step = -1;        // from meta.json, else the directory name, else -1
  bool complete = false;    // a valid manifest, every file present with its size
  bool incomplete = false;  // an unfinished save (.tmp- directory, no manifest): not corrupt
  bool anomaly = false;
  std::vector<Problem> problems;  // empty when complete and every hash matches
  bool ok() const { return complete && problems.empty(); }
};

// Checks one checkpoint directory: manifest present and valid, every listed file present
// with its size and (when `hash`) its xxh3; meta.json readable. A safetensors file whose
// hash differs is checked again part by part: a header that no longer parses (or differs
// from the manifest's header hash) is "corrupt: damaged safetensors header ...", a tensor
// whose bytes differ from its hash is "corrupt: tensor \"<name>\" ..." with Problem::tensor
// set; manifests without per-tensor hashes (older writers) keep the file-level
// "hash mismatch: ...". Never fails: unreadable
// things are problems. `on_bytes` (may be empty) is told of hashed bytes (progress).
// The readers below take the file system as `os` (a FakeOs in tests).
CheckResult CheckCheckpoint(const std::string& path, bool hash,
                            const std::function<void(uint64_t)>& on_bytes = {},
                            Os* os = Os::Default());

// True when `path` is a directory that looks like one of ours (name
// [anomaly-]step-<N>[.tmp-<pid>],
// or holds meta.json/manifest.json in our format).
bool LooksLikeCheckpoint(const std::string& path, Os* os = Os::Default());

// Checkpoint directories (complete or not, anomaly ones included) directly under `dir`,
// newest step first.
std::vector<std::string> ListCheckpointDirs(const std::string& dir, Os* os = Os::Default());

struct Latest {
  std::string path;  // "" when there is none
  int64_t step = -1;
  // Newer checkpoints skipped, and why: file is the checkpoint folder, problem its first
  // problem ("<file in it>: <problem>" when about one file), tensor as in that problem.
  std::vector<Problem> skipped;
};
// The newest complete checkpoint under `run_dir` (its checkpoints/ folder when present,
// else `run_dir` itself) that is not an anomaly checkpoint (anomaly-step-<N>, or meta.json
// "anomaly": true); anomaly ones are passed over silently (not in `skipped`). Hashes are
// checked when `hash`. Errors: NotFound when `run_dir` is missing.
absl::StatusOr<Latest> FindLatestComplete(const std::string& run_dir, bool hash = true,
                                          Os* os = Os::Default());

// A tensor read back from a safetensors file (the trainer's resume).
struct TensorData {
  TensorEntry entry;  // name, dtype, shape
  std::string bytes;  // the raw little-endian data
};
// Reads the header and every tensor of a safetensors file, in name order. Errors: those of
// ReadHeader, DataLoss naming the file when its data ends early.
absl::StatusOr<std::vector<TensorData>> ReadSafetensors(const std::string& path,
                                                        Os* os = Os::Default());

// Deletes complete checkpoints under `dir` beyond the newest `keep`, never an anomaly one
// and never an incomplete one. Returns the removed paths. keep <= 0 keeps everything.
// Crash-safe: each is renamed to step-<N>.deleting-<pid> (outside the step-<N> names every
// reader lists) before it is removed; such leftovers of a killed removal are removed too,
// and so are step-<N>.tmp-<pid> folders whose writer process no longer exists.
absl::StatusOr<std::vector<std::string>> Prune(const std::string& dir, int keep);

}  // namespace trainscope::ckpt

#endif  // TRAINSCOPE_CKPT_CHECKPOINT_H_
