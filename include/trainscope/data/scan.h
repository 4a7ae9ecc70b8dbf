// `trainscope data scan`: one streaming pass over a corpus that counts documents, bytes and
// tokens, finds exact and near duplicates (MinHash-LSH), applies the noise rules, measures
// per-batch duplicate ratios and padding waste, and optionally writes one verdict line per
// document. Also the first pass of `data clean`.
//
// Threads: one reader thread (decompression, line splitting, JSON decoding), `threads`
// worker threads (per-document analysis), and the calling thread, which merges results in
// corpus order (exact-duplicate tables, LSH band records). Memory per document: about
// 40-70 bytes while reading (two exact-hash tables, token/char lengths, flags), then
// 12 bytes per LSH band record of one band at a time plus 4 bytes of union-find state;
// band records and 16-bit MinHash fingerprints are spilled to `tmp_dir`.
#ifndef TRAINSCOPE_DATA_SCAN_H_
#define TRAINSCOPE_DATA_SCAN_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "trainscope/core/finding.h"
#include "trainscope/core/stats.h"
#include "trainscope/data/reader.h"

namespace trainscope::data {

struct ScanOptions {
  ReaderOptions reader;
  const tokenizer::Tokenizer* tokenizer = nullptr;  // null: byte-level
  int threads = 2;                                  // worker threads (>= 1)
  bool near_dup = true;                             // MinHash-LSH near duplicates
  bool noise = true;                                // quality rules
  bool language = true;                             // CLD2
  double threshold = 0.8;  // Jaccard threshold for verified near duplicates
  int ngram = 5, bands = 14, rows = 8;
  uint64_t minhash_seed = 1;
  int c4_min_sentences = 3;
  int64_t seq_len = 2048;   // for padding waste
  int64_t batch_size = 32;  // documents per training batch (duplicate ratio, padding)
  uint64_t shuffle_seed = 1234;
  std::string verdicts_path;     // "" = no verdicts; a symlink is written through
  std::string tmp_dir;           // "" = $TMPDIR or /tmp
  bool keep_doc_arrays = false;  // fill ScanResult::doc_* (for data clean)
  bool progress = true;
  // The shares above which the scan reports a problem (`data scan` exits 1; docs/metrics.md
  // "Data scan thresholds"): duplicate documents (near duplicates, or exact ones when near
  // duplicates are off) and documents that trip a noise rule. `fail` false: the verdicts
  // are still reported but `data scan` exits 0.
  double fail_duplicates = 0.05;
  double fail_noise = 0.20;
  bool fail = true;
};

// The default for ScanOptions::threads in `data scan`, `data clean` and the Python
// binding's data_scan: the machine's hardware threads, at most 16 (2 when unknown).
int DefaultScanThreads();

// `--fail-on`: "duplicates=0.1,noise=0.3" (shares; "10%" also accepted), a subset of
// them, or "none" (report, never fail). Sets the fail* fields of `options`;
// InvalidArgument naming the bad entry.
absl::Status ParseFailOn(const std::string& spec, ScanOptions* options);

struct LengthStats {
  Summary summary;  // exact percentiles over documents
  Log2Histogram histogram;
};

struct PaddingStrategy {
  std::string name;
  uint64_t sequences = 0;
  double pad_fraction = 0;        // padded slots / all slots
  uint64_t truncated_tokens = 0;  // tokens cut off (pad-to-max, pad-per-batch)
  uint64_t split_documents = 0;   // documents spread over more than one sequence
};

struct BatchDupStats {
  double mean = 0, p50 = 0, p99 = 0, max = 0;  // within-batch duplicate ratio
  uint64_t batches = 0, batches_with_dups = 0;
};

struct ScanResult {
  uint64_t docs = 0, bytes = 0, chars = 0, words = 0, tokens = 0, input_bytes = 0;
  std::string tokenizer = "byte";
  uint64_t exact_duplicate_docs = 0;       // identical bytes to an earlier document
  uint64_t normalized_duplicate_docs = 0;  // identical after case/whitespace normalisation
  uint64_t near_duplicate_docs = 0;        // dropped by keep-first dedup at the threshold
  uint64_t near_duplicate_clusters = 0;    // clusters with >= 2 documents
  uint64_t candidate_pairs = 0, verified_pairs = 0;
  uint64_t docs_without_shingles = 0;
  double near_dup_estimate_stddev = 0;  // sqrt(J(1-J)/P) at the threshold
  LengthStats chars_per_doc, tokens_per_doc;
  std::map<std::string, uint64_t> flag_docs;  // flag name -> documents
  uint64_t flagged_docs = 0;
  std::map<std::string, uint64_t> lang_docs, lang_bytes;
  BatchDupStats batch_dup_corpus_order, batch_dup_shuffled;
  std::vector<PaddingStrategy> padding;
  BadRecords bad;
  double wall_s = 0;
  // With keep_doc_arrays: per document in corpus order.
  std::vector<uint32_t> doc_flags;
  std::vector<uint32_t> doc_tokens;
  std::vector<uint32_t> doc_chars;
  std::vector<uint32_t> doc_exact_of;  // kNoDoc or the first identical document
  std::vector<uint32_t> doc_near_of;   // kNoDoc or the kept document of its cluster
  std::vector<uint32_t> doc_file;      // input index
  std::vector<uint64_t> doc_line;      // line (block start) in that input
  static constexpr uint32_t kNoDoc = 0xFFFFFFFFu;
};

// Runs the scan. Errors: unreadable inputs (NotFound, PermissionDenied, DataLoss naming the
// file), unwritable verdicts or temporary files; InvalidArgument, before anything is read,
// when verdicts_path would replace an input (CheckOutputsAgainstInputs in reader.h).
// Bad records are counted, not errors. The temporary directory is removed on every
// return and registered for RemoveRegisteredTempPaths (core/paths.h) while it exists.
absl::StatusOr<ScanResult> RunScan(const std::vector<InputFile>& inputs,
                                   const ScanOptions& options);

// Padding waste of documents of `tokens` lengths at sequence length L and batch size B:
// pad-to-max, pad-per-batch, concatenate-and-chunk, best-fit (docs longer than L split
// into L-sized pieces; pieces placed best-fit decreasing).
std::vector<PaddingStrategy> PaddingWaste(const std::vector<uint32_t>& tokens, int64_t seq_len,
                                          int64_t batch_size);

// The problems the thresholds find, one sentence each (empty: none); the text report's
// verdict and the JSON's "problems".
std::vector<std::string> ScanProblems(const ScanResult& r, const ScanOptions& options);
// The same problems as core Findings, for callers that rank findings from several modules:
// errors "data.duplicates" and "data.noise", title what is wrong (with the threshold),
// evidence the document counts ("12 of 100 documents"), fix what to run. ScanProblems'
// sentences are title and fix joined by "; ".
std::vector<Finding> FindingsFrom(const ScanResult& r, const ScanOptions& options);

nlohmann::json ScanResultToJson(const ScanResult& r, const ScanOptions& options);
std::string ScanResultToText(const ScanResult& r, const ScanOptions& options);

}  // namespace trainscope::data

#endif  // TRAINSCOPE_DATA_SCAN_H_
