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

namespace trainscope::train {

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
  // Files or directories (regular files directly inside, sorted; symlinks skipped so
  // aliases are not read twice). Relative paths are relative to the config file.
  std::vector<std::string> corpus;
  std::string format = "auto";      // "auto" (by extension: .jsonl/.json -> jsonl), "text", "jsonl"
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
  std::string precision = "fp32";  // "fp32" | "bf16" (autocast matmuls, fp32 master weights)
  double max_seconds = 0;          // stop after this much training time; 0 = no limit
  int log_every = 10;              // progress line every N steps (metrics JSONL has every step)
  int layer_norms_every = 50;      // per-layer weight/grad norms every K steps; 0 = never
  bool observability = true;       // per-step JSONL + phase timing; off for overhead benchmark
  bool keep_host_memory = true;    // keep freed host memory in the process (no per-step faults)
  double bucket_mb = 1;            // data-parallel gradient bucket size (MB = 1e6 bytes)
  double target_loss = 0;          // selftest: pass when the final loss is below this; 0 = none
};

struct TrainConfig {
  ModelConfig model;
  DataConfig data;
  OptimConfig optim;
  RunConfig train;
  std::string source;  // file it came from ("" for defaults), for messages
};

// Parses `text` (JSON); `source` names the file in messages, and the directory relative
// corpus paths are resolved against. InvalidArgument naming the key (and the byte offset
// for JSON syntax errors).
absl::StatusOr<TrainConfig> ParseTrainConfig(const std::string& text, const std::string& source);
// Reads and parses a file. NotFound naming the file when it cannot be read.
absl::StatusOr<TrainConfig> LoadTrainConfig(const std::string& path);
// Checks cross-key constraints (shapes, ranges). Called by ParseTrainConfig; call again
// after editing a config in code.
absl::Status ValidateTrainConfig(const TrainConfig& config);

// The full config with every key (the form written to the run directory).
nlohmann::json TrainConfigToJson(const TrainConfig& config);

// Bundled config files (configs/<name>): looked up next to the executable
// (../share/trainscope/configs) then in the source tree. Empty when not found.
std::string FindBundledConfig(const std::string& name);

}  // namespace trainscope::train

#endif  // TRAINSCOPE_TRAIN_CONFIG_H_
