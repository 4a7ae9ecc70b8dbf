// Gradient compression for the data-parallel path (private to the train module; libtorch).
// GradSync (ddp.h) hands a step's gradients to one of these instead of all-reducing them in
// fp32; the compressor issues its collectives through a Collectives callback (the comm seam
// in a real run, so the flight recorder sees every op with its true count and dtype; a
// loopback in unit tests) and leaves the mean over ranks in place.
//
//   fp16 / bf16  each bucket divided by the world size, cast, all-reduced in 16 bits, cast
//                back (LowPrecisionCast / LowPrecisionRestore; GradSync runs the all-reduce
//                asynchronously so it still overlaps backward).
//   powersgd     rank-r PowerSGD with error feedback and warm-started Q (PowerSgdCompressor).
//   topk         the k largest |values| of each bucket with error feedback, all-gathered as
//                indices and values (TopKCompressor).
// Every rank computes the same result bit for bit: the reduced buffers are identical on all
// ranks and everything derived from them is computed in a fixed order with a fixed seed.
// Not thread-safe: used from the training thread only.
#ifndef TRAINSCOPE_SRC_TRAIN_COMPRESSION_H_
#define TRAINSCOPE_SRC_TRAIN_COMPRESSION_H_

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace trainscope::train {

enum class CompressionKind { kNone, kFp16, kBf16, kPowerSgd, kTopK };
// "none", "fp16", "bf16", "powersgd", "topk"; InvalidArgument otherwise.
absl::StatusOr<CompressionKind> ParseCompression(const std::string& name);
const char* CompressionName(CompressionKind kind);

// What a compressor may call; `stage` names the op for the flight recorder's caller tag.
struct Collectives {
  int world_size = 1;
  // In place, sum over ranks; buf is contiguous fp32 (or fp16/bf16), on the host.
  std::function<absl::Status(torch::Tensor& buf, const std::string& stage)> all_reduce;
  // recv (world_size * send.numel(), same dtype as send) gets rank r's send at r * numel.
  std::function<absl::Status(const torch::Tensor& send, torch::Tensor& recv,
                             const std::string& stage)>
      all_gather;
};

// One step's cost of gradient synchronisation on this rank.
struct CompressStats {
  int64_t comm_bytes = 0;  // payload handed to the gradient collectives (count x dtype size)
  double compress_ms = 0;  // compressing and decompressing (collectives excluded)
};

// fp16/bf16: flat (fp32) / world_size cast to the 16-bit type (a new tensor to all-reduce).
// Dividing first keeps the sum over ranks within the type's range.
torch::Tensor LowPrecisionCast(const torch::Tensor& flat, CompressionKind kind, int world_size);
// The all-reduced 16-bit tensor (already the mean) back into flat.
void LowPrecisionRestore(const torch::Tensor& reduced, torch::Tensor& flat);

// A compressor of whole steps: Reduce replaces each tensor of `grads` (this rank's
// gradients, fp32, contiguous, on the host) with the mean over ranks of the compressed
// gradients; its state (error feedback, warm starts) belongs to the tensors' positions, so
// every call must pass tensors of the same shapes in the same order. Errors: those of the
// collectives, unchanged (the tensors are then unspecified).
//
// State for checkpoints: ExportState gives the state as named fp32 tensors (copies; empty
// before the first Reduce), ImportState puts such a set back, Reset forgets it (the next
// Reduce starts as a new compressor's first). Error feedback differs per rank (per_rank);
// PowerSGD's Q is the same on every rank.
struct CompressorStateTensor {
  std::string name;  // "compression.powersgd.<i>.q", "compression.topk.<i>.error", ...
  torch::Tensor tensor;
  bool per_rank = false;
};
class Compressor {
 public:
  virtual ~Compressor() = default;
  virtual absl::Status Reduce(const std::vector<torch::Tensor>& grads, const Collectives& comm,
                              CompressStats* stats) = 0;
  virtual std::vector<CompressorStateTensor> ExportState() const = 0;
  // Replaces the state by `state` (name -> tensor, as ExportState named them) for Reduce
  // calls with tensors shaped as `like`; an empty `state` is a Reset. Errors:
  // InvalidArgument naming a missing tensor or one of another shape or dtype (the state is
  // then unchanged).
  virtual absl::Status ImportState(const std::vector<torch::Tensor>& like,
                                   const std::map<std::string, torch::Tensor>& state) = 0;
  virtual void Reset() = 0;
};

// Resuming a run whose checkpoint recorded `saved` (meta.json extra.compression:
// {"settings": {...}, "files": [...]}; null for a checkpoint without it) with a compressor
// of `current` settings ({"kind", its parameters, "world_size"}; see GradSync). Restore only
// when the settings are equal and the current kind has state; otherwise `warning` is the
// one line to tell the user (empty when there is nothing to lose: no state either side).
struct CompressorResume {
  bool restore = false;
  std::string warning;
};
CompressorResume DecideCompressorResume(const nlohmann::json& saved, const nlohmann::json& current);

// PowerSGD (Vogels et al. 2019; PyTorch's powerSGD_hook). Each gradient is viewed as a
// matrix M (n x m: its first dimension by the rest); with the error e of the last step,
//   M += e;  P = M Q;  all-reduce P;  orthogonalise P's columns;  Q = M^T P;
//   all-reduce Q;  Q /= world;  approx = P Q^T;  e = M - approx;  M = approx.
// Q (m x r) persists across steps (warm start) and starts from a normal draw of `seed`,
// equal on every rank. Tensors with one dimension, and matrices where the rank-r factors
// would not save at least min_compression_rate x the elements (n m < rate (n + m) r, as
// PyTorch's min_compression_rate), are all-reduced uncompressed, in the same buffer as the
// P factors: two collectives per step in all.
class PowerSgdCompressor : public Compressor {
 public:
  PowerSgdCompressor(int rank, uint64_t seed, double min_compression_rate = 2.0);
  absl::Status Reduce(const std::vector<torch::Tensor>& grads, const Collectives& comm,
                      CompressStats* stats) override;
  // Elements sent per step for these shapes: uncompressed + P + Q (after the first Reduce).
  int64_t elements_sent() const { return elements_sent_; }
  // "compression.powersgd.<i>.q" (equal on every rank) and ".error" (per rank) for each
  // compressed tensor i of grads.
  std::vector<CompressorStateTensor> ExportState() const override;
  absl::Status ImportState(const std::vector<torch::Tensor>& like,
                           const std::map<std::string, torch::Tensor>& state) override;
  void Reset() override { slots_.clear(); }

 private:
  struct Slot {
    bool compressed = false;
    int64_t n = 0, m = 0, r = 0;
    torch::Tensor q;      // (m, r), persists
    torch::Tensor error;  // (n, m), persists
  };
  void Plan(const std::vector<torch::Tensor>& grads);

  const int rank_;
  const uint64_t seed_;
  const double min_rate_;
  std::vector<Slot> slots_;  // one per tensor of grads, planned by the first Reduce
  int64_t uncompressed_elems_ = 0, p_elems_ = 0, q_elems_ = 0, elements_sent_ = 0;
};

// Top-k sparsification with error feedback: per tensor, v = grad + error, keep the
// k = ceil(ratio x numel) largest |v| (exactly k), all-gather their int32 indices and fp32
// values from every rank (two collectives per step for all tensors together), sum them in
// rank order, divide by the world size; error = v - the part this rank sent.
class TopKCompressor : public Compressor {
 public:
  explicit TopKCompressor(double ratio);
  absl::Status Reduce(const std::vector<torch::Tensor>& grads, const Collectives& comm,
                      CompressStats* stats) override;
  static int64_t KeepCount(double ratio, int64_t numel);  // ceil(ratio x numel), in 1..numel
  // "compression.topk.<i>.error" (per rank, flat) for each tensor i of grads.
  std::vector<CompressorStateTensor> ExportState() const override;
  absl::Status ImportState(const std::vector<torch::Tensor>& like,
                           const std::map<std::string, torch::Tensor>& state) override;
  void Reset() override { errors_.clear(); }

 private:
  const double ratio_;
  std::vector<torch::Tensor> errors_;  // one per tensor, flat
};

// Orthogonalises the columns of `matrix` (n x r, fp32, contiguous) in place by modified
// Gram-Schmidt, in a fixed order (bit-identical on every rank). A column that vanishes stays
// (near) zero rather than becoming NaN.
void OrthogonalizeColumns(torch::Tensor& matrix);

}  // namespace trainscope::train

#endif  // TRAINSCOPE_SRC_TRAIN_COMPRESSION_H_
