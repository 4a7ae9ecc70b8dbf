// `trainscope data pack`: tokenizes a corpus and writes fixed-length sequences as a
// Megatron-compatible dataset (PREFIX.bin + PREFIX.idx, megatron.h). Every sequence has
// exactly seq_len tokens and is its own "document" in the index (doc_idx = 0, 1, ..., N).
//  - concat: documents (each followed by the end-of-document id) are concatenated and cut
//    every seq_len tokens; only the last sequence is padded.
//  - best-fit: documents longer than seq_len are cut into seq_len pieces; the remaining
//    pieces go, in corpus order, into the open sequence with the least room that fits
//    (online best fit); at most max_open_bins sequences stay open (the fullest is closed
//    and padded first). Documents are never split across sequences except the long ones.
// Memory: bounded by one document plus max_open_bins small entries, and 4 bytes of index
// per sequence. The .bin is written with positioned writes and appears atomically.
#ifndef TRAINSCOPE_DATA_PACK_H_
#define TRAINSCOPE_DATA_PACK_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "trainscope/data/reader.h"

namespace trainscope::data {

struct PackOptions {
  ReaderOptions reader;
  const tokenizer::Tokenizer* tokenizer = nullptr;  // required
  int64_t seq_len = 2048;
  enum Mode { kConcat, kBestFit } mode = kBestFit;
  std::string output_prefix;
  int64_t pad_id = -1;  // -1: the tokenizer's end-of-document id (0 when it has none)
  size_t max_open_bins = 4096;
  bool progress = true;
};

struct PackReport {
  std::string prefix, tokenizer, mode, dtype;
  int64_t seq_len = 0, vocab_size = 0, pad_id = 0;
  uint64_t docs = 0, tokens = 0;  // tokens written, end-of-document ids included
  uint64_t sequences = 0, pad_tokens = 0, split_docs = 0, truncated_tokens = 0;
  double pad_fraction = 0;
  BadRecords bad;
};

// Packs the inputs into "<output_prefix>.bin" and ".idx" (each written to a temporary file
// and renamed; a symlink is written through, its target replaced). Errors: InvalidArgument
// for bad options, and, before anything is read or written, for an output that would
// replace an input (CheckOutputsAgainstInputs in reader.h: either output file against both
// files of a Megatron input); unreadable inputs as ReadCorpus; write failures.
absl::StatusOr<PackReport> RunPack(const std::vector<InputFile>& inputs,
                                   const PackOptions& options);
nlohmann::json PackReportToJson(const PackReport& r);
std::string PackReportToText(const PackReport& r);

}  // namespace trainscope::data

#endif  // TRAINSCOPE_DATA_PACK_H_
