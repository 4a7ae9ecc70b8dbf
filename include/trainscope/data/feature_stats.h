// `trainscope data stats`: statistics of numeric features in .npy, .safetensors and CSV
// files, for normalising inputs: per feature count, mean, std, min, max, NaN and Inf
// counts, and suggested normalisation constants. float64 data is flagged (accelerators
// emulate fp64 slowly or not at all). Features: the last axis of each .npy array ((N, F)
// -> F features; 1-D -> one feature); CSV columns. A .safetensors tensor is a checkpoint's
// weights, not features: one set of statistics per tensor and no normalisation advice.
//
// Hostile files: every size a header declares is checked (overflow-checked element
// counts, shape x dtype against the bytes actually present) before any data is read, so
// a header that does not match its file is an error, never statistics. Memory is bounded
// by the options below, not by what a file claims: .npy and safetensors data is streamed
// from disk, CSV is streamed record by record.
#ifndef TRAINSCOPE_DATA_FEATURE_STATS_H_
#define TRAINSCOPE_DATA_FEATURE_STATS_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "trainscope/core/json_text.h"

namespace trainscope::data {

struct FeatureStats {
  std::string name;
  uint64_t count = 0;  // values, NaN and Inf included
  uint64_t nan = 0, inf = 0, non_numeric = 0;
  double mean = 0, std = 0, min = 0, max = 0;  // over finite values
  // Suggestion: "zscore" (x - shift) / scale, "drop" (constant), "none" (no finite value);
  // "" for a safetensors tensor (weights get no normalisation advice; JSON omits it).
  std::string suggest = "zscore";
  double shift = 0, scale = 1;
};

struct ArrayStats {
  std::string name;   // tensor name (safetensors), "" otherwise
  std::string dtype;  // numpy-style ("float32") for all formats; safetensors dtypes that
                      // are not decoded keep their own name ("F8_E4M3") and get no features
  std::vector<uint64_t> shape;
  std::vector<FeatureStats> features;  // empty for an array without elements
};

struct FeatureReport {
  std::string path, format;  // "npy", "safetensors", "csv"
  std::vector<ArrayStats> arrays;
  std::vector<std::string> findings;  // one sentence each (float64, NaN, constant, scale)
  // CSV records skipped, by kind: "oversized_record" (longer than max_record_bytes),
  // "unterminated_quote" (a quoted field still open at the end of the file). Every kind
  // is present for CSV (0 when none); empty for the binary formats.
  std::map<std::string, uint64_t> bad_records;
  std::vector<std::string> bad_record_examples;  // the first 20, "FILE:LINE: kind: why"
};

struct FeatureStatsOptions {
  // CSV: a record (header or row) longer than this is skipped up to the next line end and
  // counted as "oversized_record"; it is never buffered. Default 1 MiB.
  size_t max_record_bytes = size_t{1} << 20;
  // Features per array (the last axis; CSV columns): each needs an accumulator, so a
  // header asking for more is InvalidArgument. Default 2^20.
  uint64_t max_features = uint64_t{1} << 20;
  // CSV from a FIFO or pipe: a read that brings no byte for this long is an error
  // (InvalidArgument "no data for N ms"), so a FIFO without a writer cannot block forever.
  std::chrono::milliseconds stall_timeout{30000};
};

// Header limits (documented in docs/errors.md): a .npy header over kMaxNpyHeaderBytes and
// a safetensors header over kMaxSafetensorsHeaderBytes (the format's own limit, decimal
// 100 MB) are refused; JSON nested deeper than kMaxHeaderJsonDepth likewise.
inline constexpr uint64_t kMaxNpyHeaderBytes = uint64_t{1} << 20;
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;
inline constexpr int kMaxHeaderJsonDepth = kJsonMaxDepth;  // the shared limit

// Reads `path` (format from the extension: .npy, .safetensors, .csv, .tsv) and computes
// the statistics. Blocks on file reads only; a CSV FIFO at most `stall_timeout` per read.
// Errors, each one line naming the file and the byte offset, line, tensor or field:
//   NotFound / PermissionDenied: the file cannot be opened;
//   InvalidArgument: unknown extension, a directory, a FIFO/device/socket given as .npy or
//     .safetensors (they need a file of known size), a malformed header (bad dtype,
//     shape, offsets, overflowing element count), a header that declares fewer bytes than
//     the file holds (trailing bytes), a ragged CSV row, limits above exceeded;
//   DataLoss: the file is shorter than its header says.
// Malformed CSV records (see FeatureReport::bad_records) are counted, not errors.
absl::StatusOr<FeatureReport> FeatureStatsOfFile(const std::string& path,
                                                 const FeatureStatsOptions& options = {});

// {"format": "trainscope.data.stats", "version": 1, "path", "file_format", "arrays",
// "findings", "bad_records", "bad_record_examples"}. Every string is valid UTF-8 (invalid
// bytes from CSV cells or paths become U+FFFD), so dump() never throws.
nlohmann::json FeatureReportToJson(const FeatureReport& r);
// NaN plus Inf values over every array (`data stats` exits 1 when there are any).
uint64_t NonFiniteCount(const FeatureReport& r);
std::string FeatureReportToText(const FeatureReport& r);

}  // namespace trainscope::data

#endif  // TRAINSCOPE_DATA_FEATURE_STATS_H_
