// Small statistics used across modules: summaries with percentiles, log2 histograms.
#ifndef TRAINSCOPE_CORE_STATS_H_
#define TRAINSCOPE_CORE_STATS_H_

#include <cstdint>
#include <vector>

#include "nlohmann/json_fwd.hpp"

namespace trainscope {

struct Summary {
  int64_t count = 0;
  double sum = 0, mean = 0, stddev = 0, min = 0, max = 0;
  double p50 = 0, p90 = 0, p95 = 0, p99 = 0;
};

// Summary of `values` (copied and sorted). Percentiles use the nearest-rank method.
Summary Summarize(std::vector<double> values);
// The same for counts (lengths, sizes): radix-sorted, several times faster on large inputs.
Summary Summarize(std::vector<uint32_t> values);
// Median: the middle value, or the mean of the two middle ones for an even count; 0 for empty
// input.
double Median(std::vector<double> values);
// Percentile (0..100) of already sorted values, nearest rank. 0 for empty input.
double PercentileSorted(const std::vector<double>& sorted, double pct);
nlohmann::json SummaryToJson(const Summary& s);

// Histogram over power-of-two buckets: bucket i counts values in [2^(i-1), 2^i), bucket 0
// counts values < 1. Mergeable, O(1) memory; for lengths and sizes.
class Log2Histogram {
 public:
  void Add(uint64_t value, uint64_t count = 1);
  void Merge(const Log2Histogram& other);
  uint64_t total() const { return total_; }
  const std::vector<uint64_t>& buckets() const { return buckets_; }
  // Approximate percentile: the upper edge of the bucket holding the rank.
  uint64_t ApproxPercentile(double pct) const;
  nlohmann::json ToJson() const;  // [{"lo":..,"hi":..,"count":..}, ...]

 private:
  std::vector<uint64_t> buckets_;
  uint64_t total_ = 0;
};

}  // namespace trainscope

#endif  // TRAINSCOPE_CORE_STATS_H_
