// `trainscope data clean`: a scan, then a second pass that copies the kept documents
// (their original lines, so JSONL fields other than the text survive) to one output file.
// Keep-first deduplication: of each exact or near-duplicate cluster the earliest document
// stays. Rules are noise flags (doc_analysis FlagName / FlagGroupMask) that drop a document.
#ifndef TRAINSCOPE_DATA_CLEAN_H_
#define TRAINSCOPE_DATA_CLEAN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "trainscope/data/scan.h"

namespace trainscope::data {

// "gopher,c4,truncated" -> flag mask; "none" -> 0. InvalidArgument naming an unknown rule.
// The content groups (gopher, gopher_quality, gopher_repetition, c4, fineweb, junk) include
// `empty`.
absl::StatusOr<uint32_t> ParseRules(const std::string& rules);

// The rules of `data clean` when none are given: broken encoding, empty documents, and junk
// (one character repeated, HTML markup, lorem ipsum), which no corpus means to keep; the
// content rules (gopher, c4, fineweb) are the user's choice, as they drop real text too.
inline constexpr char kDefaultCleanRules[] = "encoding,empty,junk";

struct CleanOptions {
  ScanOptions scan;
  // .jsonl / .txt; ".zst"/".zstd" compresses with zstd, ".gz" with gzip. A symlink is
  // written through (its target replaced, the link kept).
  std::string output;
  uint32_t drop_flags = 0;  // documents with any of these flags are dropped
  bool dedup = true;        // drop exact and near duplicates (keep the first)
  bool strict = false;      // a bad record is an error before anything is written
};

struct RuleRemoval {
  std::string rule;
  uint64_t docs = 0, tokens = 0;  // removed, attributed to the first matching reason
  uint64_t flagged_docs = 0;      // documents the rule matches (reasons overlap)
};

struct CleanReport {
  std::string output;
  uint64_t docs_before = 0, docs_after = 0, tokens_before = 0, tokens_after = 0;
  std::vector<RuleRemoval> removed;
  LengthStats chars_before, chars_after, tokens_before_dist, tokens_after_dist;
  // Jensen-Shannon divergence (bits, 0..1) between the log2 length histograms.
  double js_divergence_chars = 0, js_divergence_tokens = 0;
  BadRecords bad;
  std::string tokenizer;
};

// Errors, before anything is read or written: InvalidArgument for a Megatron input, for an
// input that is not a regular file (a pipe cannot be read twice), and for an output that
// would replace an input (CheckOutputsAgainstInputs in reader.h: the same file, or a path
// below an input directory); then RunScan's errors, --strict's bad records
// (InvalidArgument) and write failures. The output appears only on success.
absl::StatusOr<CleanReport> RunClean(const std::vector<InputFile>& inputs,
                                     const CleanOptions& options);
double JensenShannonBits(const Log2Histogram& a, const Log2Histogram& b);
nlohmann::json CleanReportToJson(const CleanReport& r);
std::string CleanReportToText(const CleanReport& r);

}  // namespace trainscope::data

#endif  // TRAINSCOPE_DATA_CLEAN_H_
