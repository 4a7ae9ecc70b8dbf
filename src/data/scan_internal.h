// The two halves of RunScan that a distributed scan (data/distributed.cc) reuses: the local
// analysis of one share of the corpus (reader, workers, per-document results in order, no
// cross-document resolution), and the final stage that turns resolved duplicates into the
// report (batch duplicate ratios, padding, length distributions, verdicts). RunScan is
// LocalPass + exact/near resolution in one process + FinishScan; a distributed scan does the
// resolution over all ranks and runs FinishScan on rank 0.
#ifndef TRAINSCOPE_DATA_SCAN_INTERNAL_H_
#define TRAINSCOPE_DATA_SCAN_INTERNAL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "data/spill.h"
#include "trainscope/data/scan.h"

namespace trainscope::data {

// One process's share analysed: totals and per-document results in corpus order.
struct ScanShare {
  // docs, bytes, chars, words, tokens, input_bytes, flag_docs, flagged_docs, lang_docs,
  // lang_bytes, docs_without_shingles, bad, tokenizer; nothing about duplicates.
  ScanResult res;
  std::vector<uint64_t> raw_hash, norm_hash;  // DocResult's exact-duplicate keys
  std::vector<uint32_t> tokens;               // + end of document, as the report counts them
  std::vector<uint32_t> chars, flags;
  std::vector<uint16_t> langs;
  std::vector<uint8_t> has_signature;
  // near_dup: spill files in `spill`: band_files[b] holds band b's hash of every document
  // (8 bytes each, 0 without a signature), sig_file its bands * rows 16-bit fingerprints.
  std::unique_ptr<SpillDir> spill;
  std::vector<std::unique_ptr<SpillReader>> band_files;
  std::unique_ptr<SpillReader> sig_file;
  std::vector<std::string> ids;  // verdicts_path set: the verdict id of each document
  std::vector<uint32_t> file;    // keep_doc_arrays: index into the inputs given
  std::vector<uint64_t> line;    // keep_doc_arrays: line (block start) in that input
};

// Document numbers are 32-bit, with ScanResult::kNoDoc and a few below it reserved: a corpus
// of `docs` documents is OutOfRange ("more than 4 billion documents") from 0xFFFFFFF0 on.
// RunScan, ScanLocal and the distributed scan's global numbering check it.
absl::Status CheckCorpusDocs(uint64_t docs);

// Checks the options as RunScan does (InvalidArgument), then reads and analyses `inputs`.
// Errors: RunScan's reading errors, and writing the spill files (under options.tmp_dir).
// Holds about 40 bytes per document in memory (+ the id with verdicts).
absl::StatusOr<ScanShare> ScanLocal(const std::vector<InputFile>& inputs,
                                    const ScanOptions& options);

// What the final stage needs per document of the whole corpus, in corpus order.
struct ResolvedDocs {
  std::vector<uint32_t> exact_of;  // ScanResult::kNoDoc or the first identical document
  std::vector<uint32_t> cluster;   // the kept (first) document of its cluster; itself if kept
  std::vector<uint32_t> flags, tokens, chars;  // tokens as ScanShare::tokens
  std::vector<uint16_t> langs;
};

// Fills res's near_duplicate_docs and _clusters, batch duplicate ratios, padding, length
// distributions and (keep_doc_arrays) doc_flags, doc_tokens, doc_chars, doc_exact_of and
// doc_near_of; writes verdicts_path when set, taking each document's id from next_id (called
// once per document, in order). Consumes `docs`. Errors: next_id's, and writing verdicts.
absl::Status FinishScan(const ScanOptions& options, ResolvedDocs docs,
                        const std::function<absl::Status(std::string*)>& next_id, ScanResult* res);

}  // namespace trainscope::data

#endif  // TRAINSCOPE_DATA_SCAN_INTERNAL_H_
