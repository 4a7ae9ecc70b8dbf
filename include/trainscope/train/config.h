// Trainer configuration: the JSON file `trainscope train --config FILE` reads (format in
// docs/formats.md, "Trainer config"). Parsing is strict: an unknown key, a value of the
// wrong type or an impossible shape (heads not dividing width) is an InvalidArgument that
// names the file and the key. Every key is optional; absent keys keep the defaults below.
// libtorch-free, so it is unit-tested without the trainer.
#ifndef TRAINSCOPE_TRAIN_CONFIG_H_
#define TRAINSCOPE_TRAIN_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json_fwd.hpp"
#include "trainscope/train/anomaly.h"

namespace trainscope {
class Os;
}

namespace trainscope::train {

// Caps on the size-like keys (docs/formats.md, "Trainer config"). A value over its cap is an
// InvalidArgument naming the file and the key, found while parsing, before anything is
// allocated; the memory estimate below then bounds the combination of keys.
inline constexpr int kMaxLayers = 1024;
inline constexpr int kMaxHeads = 1024;
inline constexpr int kMaxWidth = 65536;
inline constexpr int kMaxSeqLen = 131072;
inline constexpr int kMaxVocab = 1 << 24;
inline constexpr int kMaxMlpRatio = 64;
inline constexpr int kMaxMicroBatch = 1 << 20;
inline constexpr int kMaxGradAccum = 1 << 20;
inline constexpr int kMaxSteps = 100000000;  // also optim.warmup_steps
inline constexpr int kMaxWorkers = 64;       // data.num_workers
inline constexpr int kMaxPrefetch = 1024;    // data.prefetch
inline constexpr double kMaxWorkerDelayMs = 60000;
inline constexpr double kMaxBucketMb = 65536;
inline constexpr double kMaxCommTimeoutS = 7 * 86400.0;  // comm.timeout_s: a week
inline constexpr int kMaxPowerSgdRank = 1024;            // comm.powersgd_rank
// train.threads: at most 4 x the hardware threads, and never more than 1024 (1024 when the
// hardware thread count is unknown).
int MaxTrainThreads();

struct ModelConfig {
  int layers = 4;
  int heads = 4;
  int width = 128;        // embedding width C; heads must divide it
  int seq_len = 128;      // T: every sequence is packed to exactly this length
  int vocab = 0;          // 0: the tokenizer's vocabulary size; else must be >= it
  int mlp_ratio = 4;      // MLP hidden = mlp_ratio * width
  bool tied_head = true;  // output head shares the token embedding
};

struct DataConfig {
  // Files, directories, globs or Megatron dataset prefixes, expanded as `data scan` does
  // (LoadCorpus in data.h; files reached through a symlink inside a directory are skipped so
  // aliases are not read twice). Relative paths are relative to the config file.
  std::vector<std::string> corpus;
  // "auto" (by extension: .jsonl/.json/.ndjson -> jsonl, .bin/.idx -> Megatron, else text;
  // .zst/.gz decompressed), "text", "jsonl"
  std::string format = "auto";
  std::string text_field = "text";  // JSONL field holding a document's text
  std::string tokenizer = "byte";   // "byte" or a SentencePiece .model path
  int num_workers = 2;              // prefetch threads; 0 = build batches on the step thread
  int prefetch = 4;                 // batches buffered ahead
  // Test knob: extra milliseconds each batch takes to build, emulating slow storage or
  // heavy preprocessing (used to exercise the data-loader verdict). 0 in real runs.
  double worker_delay_ms = 0;
};

struct OptimConfig {
  double lr = 3e-3;           // peak learning rate after warm-up
  double min_lr = 3e-4;       // floor of the cosine decay
  int warmup_steps = 20;      // linear warm-up from 0
  double weight_decay = 0.1;  // AdamW, on matrices only (not biases, LayerNorm, embeddings)
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double grad_clip = 1.0;  // max global L2 norm; 0 disables clipping
};

struct RunConfig {
  int steps = 200;                 // optimizer steps
  int micro_batch = 8;             // sequences per micro-step per rank
  int grad_accum = 1;              // micro-steps per optimizer step
  uint64_t seed = 1234;            // init, data order (same on every rank)
  bool deterministic = true;       // deterministic algorithms; same seed+config -> same losses
  int threads = 0;                 // intra-op threads; 0 = hardware threads / local ranks
  std::string precision = "fp32";  // "fp32" | "bf16" (autocast) | "fp16" (emulated; nonfinite.h)
  // Where the model trains: "cpu", "cuda" (device 0) or "cuda:N" (ParseDevice). A CUDA device
  // needs a libtorch built with CUDA and a visible GPU; otherwise Train() refuses the run.
  std::string device = "cpu";
  // Peak FLOP/s of the device in TFLOP/s (1e12), the denominator of MFU; 0 = from the device:
  // the table of known GPUs (DevicePeakTflops), else a measured matmul peak.
  double device_tflops = 0;
  double max_seconds = 0;        // stop after this much training time; 0 = no limit
  int log_every = 10;            // progress line every N steps (metrics JSONL has every step)
  int layer_norms_every = 50;    // per-layer weight/grad norms every K steps; 0 = never
  bool observability = true;     // per-step JSONL + phase timing; off for overhead benchmark
  bool tensorboard = true;       // with observability: step scalars in train/tb/rank<R>/
  bool keep_host_memory = true;  // keep freed host memory in the process (no per-step faults)
  double bucket_mb = 1;          // data-parallel gradient bucket size (MB = 1e6 bytes)
  double target_loss = 0;        // selftest: pass when the final loss is below this; 0 = none
};

struct CommConfig {
  // Data-parallel runs: a collective not completed after this long ends the rank, leaving
  // its flight recorder dump and thread stacks in <run_dir>/hang/ (comm/watchdog.h); also
  // every op's own timeout (comm::CommOptions::timeout). `--comm-timeout S` overrides it.
  double timeout_s = 600;
  // Gradient compression of the data-parallel all-reduce (train/compression.h):
  // "none" | "fp16" | "bf16" (pre-divided 16-bit all-reduce) | "powersgd" (rank
  // powersgd_rank, error feedback) | "topk" (the topk_ratio largest values, error feedback).
  // The first compression_warmup_steps steps all-reduce uncompressed (as PyTorch's
  // start_powerSGD_iter). `--compression NAME` overrides the name.
  std::string compression = "none";
  int powersgd_rank = 4;             // 1..kMaxPowerSgdRank
  double topk_ratio = 0.01;          // (0, 1]
  int compression_warmup_steps = 0;  // 0..kMaxSteps
};

struct CheckpointConfig {
  // Save a checkpoint after every N optimizer steps; 0 = no periodic checkpoints (anomaly
  // checkpoints are still written). Format: docs/formats.md, "Checkpoint".
  int every_steps = 0;
  int keep = 3;       // complete periodic checkpoints kept (oldest removed); 0 = all
  bool async = true;  // snapshot to host memory, write on a background thread
  // Folder of step-<N>/ checkpoints; "" = <run-dir>/checkpoints. A relative path is
  // relative to the run directory.
  std::string dir;
};

// Anomaly handling (docs/formats.md "Trainer config", docs/metrics.md "Loss spikes" and
// "Non-finite localisation").
struct AnomalyConfig {
  // Every step: this rank's loss and gradients (before the all-reduce) and the weights after
  // the optimizer step are checked; a non-finite value stops every rank at that step after a
  // replay that localises it.
  bool nonfinite_checks = true;
  SpikeOptions spike;  // keys spike_rule, spike_window, spike_min_samples, spike_k, spike_factor
  bool spike_checkpoint = true;  // an anomaly checkpoint at each loss spike
};

// Validation loss on held-out text (docs/formats.md "Trainer config", docs/metrics.md
// "Validation loss"). Off unless `fraction` > 0 or `corpus` is given (not both).
struct EvalConfig {
  // Hold out this share of the corpus's documents (whole documents, never a split one),
  // chosen by a fixed seeded permutation that does not depend on train.seed: the same
  // documents for every run of one corpus. 0 = none. Range 0..0.5.
  double fraction = 0;
  // Or a separate corpus read like data.corpus (files, directories, globs, Megatron
  // prefixes; data.format, data.text_field, data.tokenizer); relative paths are relative
  // to the config file. Empty = none.
  std::vector<std::string> corpus;
  // Evaluate after every N optimizer steps, and after the last; 0 = after the last only.
  int every_steps = 50;
  // Global batches (train.micro_batch x ranks sequences) per evaluation, 1..kMaxEvalBatches.
  int batches = 8;
  bool enabled() const { return fraction > 0 || !corpus.empty(); }
};
inline constexpr double kMaxEvalFraction = 0.5;
inline constexpr int kMaxEvalBatches = 1 << 20;

struct TrainConfig {
  ModelConfig model;
  DataConfig data;
  EvalConfig eval;
  OptimConfig optim;
  RunConfig train;
  CommConfig comm;
  CheckpointConfig checkpoint;
  AnomalyConfig anomaly;
  LossScalerOptions fp16;  // the dynamic loss scaler of train.precision "fp16"
  std::string source;      // file it came from ("" for defaults), for messages
};

// A parsed train.device: "cpu", or CUDA device `index` ("cuda" is "cuda:0").
struct DeviceSpec {
  bool cuda = false;
  int index = 0;
  std::string Name() const;  // "cpu" or "cuda:N"
};
inline constexpr int kMaxCudaIndex = 1023;
// InvalidArgument ("\"tpu\" is not cpu|cuda|cuda:N") for anything else.
absl::StatusOr<DeviceSpec> ParseDevice(const std::string& text);
inline constexpr double kMaxDeviceTflops = 1e6;  // train.device_tflops: (0, 1e6], 0 = automatic

// Dense peak TFLOP/s of a known accelerator, from its name as the driver reports it ("NVIDIA
// H100 80GB HBM3"), for `precision` ("fp32": TF32 tensor cores; "bf16"/"fp16": 16-bit tensor
// cores). 0 when the device is not in the table (docs/metrics.md, "MFU"). libtorch-free.
double DevicePeakTflops(const std::string& device_name, const std::string& precision);

// Parses `text` (JSON); `source` names the file in messages, and the directory relative
// corpus paths are resolved against. InvalidArgument naming the key (and the byte offset
// for JSON syntax errors).
absl::StatusOr<TrainConfig> ParseTrainConfig(const std::string& text, const std::string& source);
// Reads and parses a file. NotFound naming the file when it cannot be read.
absl::StatusOr<TrainConfig> LoadTrainConfig(const std::string& path);
// Checks cross-key constraints (shapes, ranges). Called by ParseTrainConfig; call again
// after editing a config in code.
absl::Status ValidateTrainConfig(const TrainConfig& config);

// Overrides of config keys from `trainscope train`'s flags; a field left at its default
// overrides nothing.
struct TrainOverrides {
  int steps = 0;               // --steps: train.steps when > 0
  double max_seconds = -1;     // --max-seconds: train.max_seconds when >= 0
  double comm_timeout_s = -1;  // --comm-timeout: comm.timeout_s unless -1
  std::string compression;     // --compression: comm.compression unless ""
  std::string device;          // --device: train.device unless ""
  double device_tflops = 0;    // --device-tflops: train.device_tflops when > 0
};
// Applies `overrides` to *config and checks the result (ValidateTrainConfig); train.steps and
// train.max_seconds are applied after the check (their flags check their own range).
// InvalidArgument for a comm_timeout_s outside (0, kMaxCommTimeoutS] (naming --comm-timeout)
// and ValidateTrainConfig's errors.
absl::Status ApplyOverrides(const TrainOverrides& overrides, TrainConfig* config);

// The full config with every key (the form written to the run directory).
nlohmann::json TrainConfigToJson(const TrainConfig& config);

// ---- Memory estimate (docs/metrics.md, "Trainer memory estimate") ----
// Rough peak host memory of one rank, from the config alone, so that a config that cannot fit
// is refused before anything is allocated. Every term is in bytes (double: no overflow).
struct MemoryEstimate {
  double params = 0;            // CountParams(model, vocab)
  double state_bytes = 0;       // weights + grads + AdamW moments: 16 B/param (+2 under bf16)
  double activation_bytes = 0;  // saved for backward, one micro-batch, all layers
  double logits_bytes = 0;      // logits, their log-softmax and gradient: 3 x 4 B x B x T x V
  double mask_bytes = 0;        // the causal mask, T x T bytes
  double loader_bytes = 0;      // batches in flight: (prefetch + workers + 1) x B x T x 16 B
  double total_bytes = 0;       // sum of the above
  // The keys of the largest term with their values, e.g. "model.layers=1024, model.width=65536".
  std::string drivers;
};
// `vocab` is the resolved vocabulary (model.vocab, or the tokenizer's when that is 0).
MemoryEstimate EstimateTrainMemory(const TrainConfig& config, int vocab);

// Refuses (ResourceExhausted, naming the config file, the driving keys, the estimate and what
// is available) a run whose estimate times `local_ranks` (ranks sharing this machine) is over
// `available_bytes`. available_bytes < 0 means unknown: no check. `available_what` names the
// figure in the message ("MemAvailable").
absl::Status CheckTrainMemory(const TrainConfig& config, int vocab, int local_ranks,
                              int64_t available_bytes, const std::string& available_what);

// MemAvailable of /proc/meminfo, read through `os` (a FakeOs in tests); -1 when unknown.
int64_t AvailableHostMemoryBytes(Os* os);

// Bundled config files (configs/<name>): looked up next to the executable
// (../share/trainscope/configs) then in the source tree. Empty when not found.
std::string FindBundledConfig(const std::string& name);
// `path`, or the bundled configs/default.json when `path` is "" (NotFound when that is not
// found: "bundled configs/default.json not found; pass --config FILE").
absl::StatusOr<std::string> ConfigPathOrDefault(const std::string& path);

}  // namespace trainscope::train

#endif  // TRAINSCOPE_TRAIN_CONFIG_H_
