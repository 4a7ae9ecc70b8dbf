// Data-parallel gradient synchronisation (private to the train module; libtorch).
// As PyTorch's DDP: parameters are grouped into buckets of about bucket_bytes in reverse
// registration order (roughly the order backward produces their gradients); a hook on each
// parameter copies its gradient into its bucket, and the moment a bucket is complete its
// all-reduce is launched on the communicator's progress thread while backward continues.
// Finish() waits for the remaining all-reduces and writes the averaged gradients back.
// With comm.compression (compression.h): fp16/bf16 buckets are cast and all-reduced the
// same way, still overlapping backward; powersgd and topk compress all buckets together in
// Finish (two collectives per step). The first compression_warmup_steps steps are plain.
// The compressor's state (error feedback, Q) travels with the trainer's checkpoints
// (SnapshotCompressor / RestoreCompressor). Used from the training thread only.
#ifndef TRAINSCOPE_SRC_TRAIN_DDP_H_
#define TRAINSCOPE_SRC_TRAIN_DDP_H_

#include <torch/torch.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "train/checkpointer.h"
#include "train/comm_seam.h"
#include "train/compression.h"
#include "trainscope/comm/comm.h"
#include "trainscope/train/config.h"

namespace trainscope::train {

class GradSync {
 public:
  // Registers hooks on `params` (fp32, contiguous). `seam` is not owned and must outlive
  // this object; every op goes through it (caller tags "step S grad bucket B", faults).
  // `compression` is the config's comm section (validated); Q's of PowerSGD are drawn
  // from `seed` (the same on every rank).
  GradSync(CommSeam* seam, const std::vector<std::pair<std::string, torch::Tensor>>& params,
           double bucket_bytes, const CommConfig& compression, uint64_t seed);
  ~GradSync();

  // Rank 0's parameters to every rank (before the first step).
  absl::Status BroadcastParams();
  // Call before the backward whose gradients complete a step (the last micro-step): arms
  // the hooks. Earlier micro-steps accumulate locally, as DDP's no_sync().
  void Arm();
  // Launches buckets that hooks did not complete (parameters without gradients), waits for
  // every all-reduce, sets each parameter's grad to the mean over ranks. The time spent
  // blocked (and compressing, for powersgd/topk) is added to *wait_ms, the step's bytes and
  // compression time to *stats. Errors name the rank and the bucket.
  absl::Status Finish(double* wait_ms, CompressStats* stats);
  size_t num_buckets() const { return buckets_.size(); }

  // ---- checkpoint: collective, every rank at the same point ----
  // This run's compressor as checkpoints record it: {"kind", its parameters, "world_size"}.
  nlohmann::json CompressionSettings() const;
  // Every rank's compressor state to rank 0 (point-to-point, under the communicator's
  // timeout), which adds it to `snap` (null on the other ranks): compression.safetensors
  // (tensors equal on every rank, rank 0's copy) and compression.rank<R>.safetensors (each
  // rank's error feedback). Returns meta.json's extra.compression {"settings",
  // "warmup_steps", "files"} ("files" empty when there is no state yet). Errors: those of
  // the communicator, naming the rank.
  absl::StatusOr<nlohmann::json> SnapshotCompressor(CheckpointSnapshot* snap);
  // Puts back the compressor state of the checkpoint at `path`, whose extra.compression is
  // `saved` (null when absent), when it was saved with this run's settings
  // (DecideCompressorResume): on every rank or on none (one all-reduce agrees). A state that
  // does not fit (other settings, other world size, a file missing or of other shapes)
  // means a fresh compressor and a warning, never an error. *notice: the one line this rank
  // prints (empty for none). Errors: those of the communicator.
  absl::Status RestoreCompressor(const std::string& path, const nlohmann::json& saved,
                                 std::string* notice);

 private:
  struct Bucket {
    torch::Tensor flat;                // fp32, the bucket's gradients back to back
    std::vector<int> params;           // indices into params_
    std::vector<int64_t> offsets;      // element offset of each param in flat
    int pending = 0;                   // params whose gradient has not arrived yet
    std::unique_ptr<comm::Work> work;  // in flight
    bool launched = false;
    torch::Tensor low;  // fp16/bf16: the cast bucket being all-reduced
  };
  void OnGrad(int param, const torch::Tensor& grad);
  void Launch(Bucket& b);
  // powersgd / topk: every bucket at once, after backward.
  absl::Status ReduceCompressed();
  // What the compressor of `kind` is handed: each parameter's gradient (powersgd) or each
  // bucket (topk), as views of the buckets.
  std::vector<torch::Tensor> CompressorInputs(CompressionKind kind);

  CommSeam* seam_;
  std::vector<torch::Tensor> params_;
  std::vector<std::string> names_;
  std::vector<Bucket> buckets_;
  std::vector<std::pair<int, int>> where_;  // param -> (bucket, slot)
  CompressionKind kind_ = CompressionKind::kNone;
  CommConfig comm_config_;
  uint64_t seed_ = 0;
  int warmup_steps_ = 0;
  std::unique_ptr<Compressor> compressor_;  // powersgd / topk
  bool armed_ = false;
  CompressionKind step_kind_ = CompressionKind::kNone;  // this step's (kNone in warm-up)
  CompressStats step_stats_;
};

}  // namespace trainscope::train

#endif  // TRAINSCOPE_SRC_TRAIN_DDP_H_
