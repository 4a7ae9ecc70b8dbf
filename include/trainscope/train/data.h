// The trainer's data pipeline: read a corpus through the data module's readers (text,
// JSONL, each optionally .zst/.gz compressed, and Megatron .bin/.idx token datasets; files,
// directories, globs), tokenize, pack into fixed-length sequences (fixed shapes:
// accelerators compile per shape), order them with a seeded shuffle that is identical on
// every rank, shard by rank, and prefetch batches in a pool of worker threads.
// libtorch-free: batches are plain int64 vectors the trainer wraps.
#ifndef TRAINSCOPE_TRAIN_DATA_H_
#define TRAINSCOPE_TRAIN_DATA_H_

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json_fwd.hpp"
#include "trainscope/tokenizer/tokenizer.h"
#include "trainscope/train/config.h"

namespace trainscope::train {

struct CorpusStats {
  int64_t files = 0;      // inputs read (a Megatron dataset is one)
  int64_t documents = 0;  // documents that gave tokens
  int64_t bytes = 0;      // bytes of text tokenized (0 for Megatron datasets: no text)
  int64_t tokens = 0;     // including one end-of-document id per text/JSONL document
  int64_t sequences = 0;
  // Bad records as the data module counts them (data/reader.h BadRecords), other than a
  // missing text field: invalid JSON or UTF-8, records over 64 MiB, empty JSONL files,
  // truncated or corrupt compressed streams (a damaged compressed text file is skipped).
  int64_t bad_records = 0;
  int64_t missing_text_field = 0;  // JSONL objects without a string text field
  int64_t empty_documents = 0;     // skipped
  std::string first_bad_record;    // "file:line: kind: why" of the first bad record, if any
};
nlohmann::json CorpusStatsToJson(const CorpusStats& s);

// A token stream cut into sequences: sequence i is tokens[i*T, i*T + T] (T+1 ids; inputs
// are the first T, targets the last T), so every sequence has exactly seq_len positions.
struct PackedCorpus {
  std::vector<int32_t> tokens;
  int seq_len = 0;
  int64_t num_sequences = 0;
  CorpusStats stats;
  // With LoadCorpus(..., keep_document_ends): where each document's tokens end in `tokens`
  // (exclusive, ascending; document d is [ends[d-1], ends[d])). Empty otherwise.
  std::vector<int64_t> document_ends;
};

// Expands the corpus paths as `trainscope data scan` does (data::ExpandInputs: files,
// directories recursively with sorted names and hidden files skipped, glob patterns,
// Megatron dataset prefixes), reads the inputs in that order and appends each document's
// tokens to one stream:
//  - a text file (also .zst/.gz, decompressed) is one document: tokenized, then the eos id;
//  - a JSONL line (also in .jsonl.zst/.gz) is one document (config.text_field): tokenized,
//    then the eos id; bad records are counted in stats, not fatal;
//  - a Megatron .bin/.idx dataset (`data pack` output, or Megatron-LM's preprocess_data.py)
//    is read as token ids directly, every document's tokens as stored, in order, with no
//    end-of-document id added (`data pack` and --append-eod already store it; a pack's
//    padding is kept as it is).
// Errors: NotFound naming a corpus path that does not exist or an unreadable file;
// InvalidArgument naming the file and document when a Megatron token id is outside the
// tokenizer's vocabulary (or negative), naming the file(s) when the corpus is empty or
// yields fewer than seq_len + 1 tokens; a damaged Megatron dataset as ReadMegatronIndex.
// `keep_document_ends`: also fill PackedCorpus::document_ends (for the held-out split,
// train/validation.h).
absl::StatusOr<PackedCorpus> LoadCorpus(const DataConfig& config,
                                        const tokenizer::Tokenizer& tokenizer, int seq_len,
                                        bool keep_document_ends = false);

// What must be identical on every rank for data parallelism to be right, as 16 hex digits
// of xxh3-64: the packed token stream (its length and every id), seq_len, the number of
// sequences, the shuffle seed and the whole epoch-0 order ShuffledOrder(n, seed, 0). The
// trainer writes it into each rank's metrics header ("data_order_hash"); ranks that differ
// read different corpora or orders. Cost: one pass over the tokens and one shuffle.
std::string DataOrderHash(const PackedCorpus& corpus, uint64_t seed);

// splitmix64: the generator behind the shuffle, simple enough to reproduce in the Python
// benchmark peer (bench/train/peer.py).
uint64_t SplitMix64(uint64_t* state);
// Fisher-Yates permutation of 0..n-1 for `epoch`, from seed ^ (epoch * golden ratio).
// Identical on every rank and platform.
std::vector<int64_t> ShuffledOrder(int64_t n, uint64_t seed, int64_t epoch);

// One micro-batch: rows x cols int64 ids (row-major), inputs and next-token targets.
struct Batch {
  int64_t index = -1;  // micro-step number, from 0
  int rows = 0, cols = 0;
  std::vector<int64_t> inputs, targets;
  std::vector<int64_t> sequence_ids;  // which packed sequences, for tests
};

struct LoaderOptions {
  int micro_batch = 8;
  int rank = 0;
  int world_size = 1;
  uint64_t seed = 0;
  int num_workers = 2;         // 0: Next() builds the batch itself
  int prefetch = 4;            // batches buffered ahead of the consumer
  double worker_delay_ms = 0;  // see DataConfig::worker_delay_ms
  // The first micro-step to produce: a run resumed after optimizer step S starts at
  // S x grad_accum, so it continues the same sample order (a checkpoint's data position).
  int64_t start_index = 0;
};

// Sequence ids of micro-step `index` for `rank`: global positions
// (index * world_size + rank) * micro_batch + j over the concatenation of per-epoch
// permutations, so ranks read disjoint sequences and the global order does not depend on
// world_size for a fixed global batch.
std::vector<int64_t> SequencesForMicroStep(int64_t num_sequences, const LoaderOptions& options,
                                           int64_t index);

// Produces micro-batches start_index, start_index + 1, ... in order, built ahead by `num_workers`
// threads. Next() is called from one thread; the corpus must outlive the loader. Destruction stops
// and joins the workers.
class BatchLoader {
 public:
  BatchLoader(const PackedCorpus* corpus, LoaderOptions options);
  ~BatchLoader();
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;

  // Blocks until the next batch is ready. An exception a worker hit while building a batch
  // (std::bad_alloc) is rethrown here, on the caller's thread, instead of terminating.
  Batch Next();

 private:
  Batch Build(int64_t index) const;
  void WorkerLoop();
  // Permutation of `epoch`, computed once and shared by the workers.
  std::shared_ptr<const std::vector<int64_t>> Order(int64_t epoch) const;

  // Constant after construction.
  const PackedCorpus* corpus_;
  const LoaderOptions options_;

  std::mutex mu_;
  std::condition_variable cv_;
  // Guarded by mu_.
  int64_t next_to_build_ = 0;
  int64_t next_to_consume_ = 0;
  std::map<int64_t, Batch> ready_;
  bool stop_ = false;
  std::exception_ptr error_;  // first exception of a worker

  std::vector<std::thread> workers_;

  mutable std::mutex order_mu_;
  mutable std::map<int64_t, std::shared_ptr<const std::vector<int64_t>>> orders_;  // by epoch
};

}  // namespace trainscope::train

#endif  // TRAINSCOPE_TRAIN_DATA_H_
