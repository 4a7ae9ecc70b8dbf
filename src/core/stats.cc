#include "trainscope/core/stats.h"

#include <algorithm>
#include <cmath>

#include "nlohmann/json.hpp"

namespace trainscope {

namespace {

template <typename T>
double Percentile(const std::vector<T>& sorted, double pct) {
  if (sorted.empty()) return 0;
  // Nearest rank: the smallest value with at least pct% of values at or below it.
  double rank = std::ceil(pct / 100.0 * sorted.size());
  size_t idx = rank < 1 ? 0 : static_cast<size_t>(rank) - 1;
  return static_cast<double>(sorted[std::min(idx, sorted.size() - 1)]);
}

// Sums in sorted order, so both overloads give the same bits for the same values.
template <typename T>
Summary FromSorted(const std::vector<T>& values) {
  Summary s;
  s.count = static_cast<int64_t>(values.size());
  if (values.empty()) return s;
  for (T v : values) s.sum += static_cast<double>(v);
  s.mean = s.sum / values.size();
  double ss = 0;
  for (T v : values) ss += (static_cast<double>(v) - s.mean) * (static_cast<double>(v) - s.mean);
  s.stddev = values.size() > 1 ? std::sqrt(ss / (values.size() - 1)) : 0;
  s.min = static_cast<double>(values.front());
  s.max = static_cast<double>(values.back());
  s.p50 = Percentile(values, 50);
  s.p90 = Percentile(values, 90);
  s.p95 = Percentile(values, 95);
  s.p99 = Percentile(values, 99);
  return s;
}

// LSD radix sort, 11 bits per pass; passes whose digit is the same for every value are
// skipped (lengths rarely use the top bits).
void RadixSort(std::vector<uint32_t>* values) {
  std::vector<uint32_t>& v = *values;
  uint32_t all_or = 0, all_and = ~0u;
  for (uint32_t x : v) {
    all_or |= x;
    all_and &= x;
  }
  std::vector<uint32_t> tmp(v.size());
  for (int shift = 0; shift < 32; shift += 11) {
    const uint32_t mask = 0x7FF;
    if ((((all_or ^ all_and) >> shift) & mask) == 0) continue;  // one digit value only
    size_t count[2049] = {0};
    for (uint32_t x : v) ++count[((x >> shift) & mask) + 1];
    for (int i = 0; i < 2048; ++i) count[i + 1] += count[i];
    for (uint32_t x : v) tmp[count[(x >> shift) & mask]++] = x;
    v.swap(tmp);
  }
}

}  // namespace

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  const size_t mid = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + mid, values.end());
  const double hi = values[mid];
  if (values.size() % 2) return hi;
  return (*std::max_element(values.begin(), values.begin() + mid) + hi) / 2;
}

double PercentileSorted(const std::vector<double>& sorted, double pct) {
  return Percentile(sorted, pct);
}

Summary Summarize(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return FromSorted(values);
}

Summary Summarize(std::vector<uint32_t> values) {
  RadixSort(&values);
  return FromSorted(values);
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
