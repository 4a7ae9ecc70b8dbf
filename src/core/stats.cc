#include "trainscope/core/stats.h"

#include <algorithm>
#include <cmath>

#include "nlohmann/json.hpp"

namespace trainscope {

double PercentileSorted(const std::vector<double>& sorted, double pct) {
  if (sorted.empty()) return 0;
  // Nearest rank: the smallest value with at least pct% of values at or below it.
  double rank = std::ceil(pct / 100.0 * sorted.size());
  size_t idx = rank < 1 ? 0 : static_cast<size_t>(rank) - 1;
  return sorted[std::min(idx, sorted.size() - 1)];
}

Summary Summarize(std::vector<double> values) {
  Summary s;
  s.count = static_cast<int64_t>(values.size());
  if (values.empty()) return s;
  std::sort(values.begin(), values.end());
  for (double v : values) s.sum += v;
  s.mean = s.sum / values.size();
  double ss = 0;
  for (double v : values) ss += (v - s.mean) * (v - s.mean);
  s.stddev = values.size() > 1 ? std::sqrt(ss / (values.size() - 1)) : 0;
  s.min = values.front();
  s.max = values.back();
  s.p50 = PercentileSorted(values, 50);
  s.p90 = PercentileSorted(values, 90);
  s.p95 = PercentileSorted(values, 95);
  s.p99 = PercentileSorted(values, 99);
  return s;
}

nlohmann::json SummaryToJson(const Summary& s) {
  return {{"count", s.count}, {"sum", s.sum}, {"mean", s.mean}, {"stddev", s.stddev},
          {"min", s.min},     {"max", s.max}, {"p50", s.p50},   {"p90", s.p90},
          {"p95", s.p95},     {"p99", s.p99}};
}

void Log2Histogram::Add(uint64_t value, uint64_t count) {
  size_t b = value == 0 ? 0 : 64 - __builtin_clzll(value);
  if (buckets_.size() <= b) buckets_.resize(b + 1, 0);
  buckets_[b] += count;
  total_ += count;
}

void Log2Histogram::Merge(const Log2Histogram& other) {
  if (buckets_.size() < other.buckets_.size()) buckets_.resize(other.buckets_.size(), 0);
  for (size_t i = 0; i < other.buckets_.size(); ++i) buckets_[i] += other.buckets_[i];
  total_ += other.total_;
}

uint64_t Log2Histogram::ApproxPercentile(double pct) const {
  if (total_ == 0) return 0;
  uint64_t rank = static_cast<uint64_t>(std::ceil(pct / 100.0 * total_));
  if (rank == 0) rank = 1;
  uint64_t seen = 0;
  for (size_t i = 0; i < buckets_.size(); ++i) {
    seen += buckets_[i];
    if (seen >= rank) return i == 0 ? 0 : (i >= 64 ? UINT64_MAX : (uint64_t{1} << i) - 1);
  }
  return UINT64_MAX;
}

nlohmann::json Log2Histogram::ToJson() const {
  nlohmann::json out = nlohmann::json::array();
  for (size_t i = 0; i < buckets_.size(); ++i) {
    if (!buckets_[i]) continue;
    uint64_t lo = i == 0 ? 0 : uint64_t{1} << (i - 1);
    uint64_t hi = i == 0 ? 0 : (i >= 64 ? UINT64_MAX : (uint64_t{1} << i) - 1);
    out.push_back({{"lo", lo}, {"hi", hi}, {"count", buckets_[i]}});
  }
  return out;
}

}  // namespace trainscope
