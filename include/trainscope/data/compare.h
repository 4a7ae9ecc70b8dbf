// Corpus coverage (`trainscope data compare REFERENCE CANDIDATE`): how well CANDIDATE (a
// quantisation calibration set, a cleaned corpus, an eval set) covers REFERENCE (the real
// traffic, the raw corpus). Formulas and thresholds: docs/metrics.md, "Corpus coverage".
//
//   - vocabulary mass coverage: the share of REFERENCE's word occurrences (and, with a
//     tokenizer, token occurrences) whose word (token id) occurs in CANDIDATE at least once;
//   - n-gram coverage: the same for word bigrams and trigrams;
//   - distribution distances (Kolmogorov-Smirnov) of document length in bytes and in tokens;
//   - language mix: total variation distance between the two language distributions (CLD2),
//     and REFERENCE languages (>= 1% of its documents) absent from CANDIDATE;
//   - population stability index per document feature over REFERENCE's deciles;
//   - the REFERENCE documents least covered (word and bigram coverage of the document).
//
// Streams both corpora once (CANDIDATE first); memory holds CANDIDATE's word and n-gram sets,
// REFERENCE's word counts and eight doubles per document. Blocking file I/O; not thread-safe.
#ifndef TRAINSCOPE_DATA_COMPARE_H_
#define TRAINSCOPE_DATA_COMPARE_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json_fwd.hpp"
#include "trainscope/data/reader.h"

namespace trainscope::tokenizer {
class Tokenizer;
}

namespace trainscope::data {

// Verdict thresholds (docs/metrics.md): CANDIDATE covers REFERENCE when every one holds.
struct CompareThresholds {
  double min_word_coverage = 0.95;    // REFERENCE word mass found in CANDIDATE's vocabulary
  double min_token_coverage = 0.98;   // the same over tokenizer ids (with --tokenizer)
  double min_bigram_coverage = 0.60;  // REFERENCE bigram mass found in CANDIDATE
  double max_psi = 0.25;              // per feature (0.1-0.25: moderate shift, a warning)
  double max_ks = 0.20;               // length and token-count distributions
  double max_language_tvd = 0.10;     // language mix
};

struct CompareOptions {
  ReaderOptions reader;
  // Null: no token-id coverage (the byte tokenizer's 256 ids cover any text); token counts then
  // are bytes.
  const tokenizer::Tokenizer* tokenizer = nullptr;
  CompareThresholds thresholds;
  int least_covered = 10;  // REFERENCE documents listed
  bool language = true;    // CLD2 language id
};

struct CorpusSide {
  std::vector<std::string> inputs;
  uint64_t docs = 0, bytes = 0, words = 0, tokens = 0;
  uint64_t distinct_words = 0, distinct_tokens = 0;
  std::map<std::string, uint64_t> languages;  // ISO code -> documents
  BadRecords bad;
};

struct FeatureShift {
  std::string name;
  double psi = 0;
  double reference_mean = 0, candidate_mean = 0;
};

struct UncoveredDoc {
  std::string location;  // file:line
  double word_coverage = 0, bigram_coverage = 0;
  uint64_t words = 0;
  std::string preview;  // first 80 bytes, one line
};

struct CompareReport {
  CorpusSide reference, candidate;
  std::string tokenizer;                          // name, or "" without one
  double word_coverage = 0, token_coverage = -1;  // -1: no tokenizer
  double bigram_coverage = 0, trigram_coverage = 0;
  double ks_length = 0, ks_tokens = 0;
  double language_tvd = 0;
  std::vector<std::string> missing_languages;  // in REFERENCE (>= 1% of docs), not in CANDIDATE
  std::vector<FeatureShift> features;
  std::vector<UncoveredDoc> least_covered;
  CompareThresholds thresholds;
  bool covers = true;
  std::vector<std::string> reasons;   // one per failed threshold (or why it covers)
  std::vector<std::string> warnings;  // moderate shifts
};

// Reads both corpora and compares them. Errors: those of ExpandInputs / ReadCorpus (NotFound,
// InvalidArgument naming the file); InvalidArgument when either side holds no document.
absl::StatusOr<CompareReport> CompareCorpora(const std::vector<std::string>& reference,
                                             const std::vector<std::string>& candidate,
                                             const CompareOptions& options);

// Population stability index of `candidate` against `reference` over reference's deciles
// (ties merged), each share floored at 1e-4: sum (c - r) ln(c / r).
double PopulationStabilityIndex(std::vector<double> reference, std::vector<double> candidate);
// Two-sample Kolmogorov-Smirnov statistic: max |F_ref(x) - F_cand(x)|.
double KsStatistic(std::vector<double> a, std::vector<double> b);

nlohmann::json CompareReportToJson(const CompareReport& report);  // docs/formats.md
std::string CompareReportToText(const CompareReport& report);     // fits 120 columns

}  // namespace trainscope::data

#endif  // TRAINSCOPE_DATA_COMPARE_H_
