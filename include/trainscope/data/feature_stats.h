// `trainscope data stats`: statistics of numeric features in .npy, .safetensors and CSV
// files, for normalising inputs: per feature count, mean, std, min, max, NaN and Inf
// counts, and suggested normalisation constants. float64 data is flagged (accelerators
// emulate fp64 slowly or not at all). Features: the last axis of each array ((N, F) ->
// F features; 1-D -> one feature); CSV columns.
#ifndef TRAINSCOPE_DATA_FEATURE_STATS_H_
#define TRAINSCOPE_DATA_FEATURE_STATS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace trainscope::data {

struct FeatureStats {
  std::string name;
  uint64_t count = 0;  // values, NaN and Inf included
  uint64_t nan = 0, inf = 0, non_numeric = 0;
  double mean = 0, std = 0, min = 0, max = 0;  // over finite values
  // Suggestion: "zscore" (x - shift) / scale, "drop" (constant), "none" (no finite value).
  std::string suggest = "zscore";
  double shift = 0, scale = 1;
};

struct ArrayStats {
  std::string name;   // tensor name (safetensors), "" otherwise
  std::string dtype;  // numpy-style ("float32") for all formats
  std::vector<uint64_t> shape;
  std::vector<FeatureStats> features;
};

struct FeatureReport {
  std::string path, format;  // "npy", "safetensors", "csv"
  std::vector<ArrayStats> arrays;
  std::vector<std::string> findings;  // one sentence each (float64, NaN, constant, scale)
};

// Errors: NotFound / InvalidArgument (unknown extension, malformed header) / DataLoss
// (file shorter than its header says) naming the file and byte offset or line.
absl::StatusOr<FeatureReport> FeatureStatsOfFile(const std::string& path);
nlohmann::json FeatureReportToJson(const FeatureReport& r);
std::string FeatureReportToText(const FeatureReport& r);

}  // namespace trainscope::data

#endif  // TRAINSCOPE_DATA_FEATURE_STATS_H_
