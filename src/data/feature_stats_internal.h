// What the readers of `data stats` share (feature_stats.cc and one file per format:
// feature_stats_npy.cc, feature_stats_safetensors.cc, feature_stats_csv.cc): the Welford
// accumulator, element types, the input file, and the chunked reduction of a binary array.
// Private to the data module.
#ifndef TRAINSCOPE_DATA_FEATURE_STATS_INTERNAL_H_
#define TRAINSCOPE_DATA_FEATURE_STATS_INTERNAL_H_

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "trainscope/data/feature_stats.h"

namespace trainscope::data::internal {

// Welford accumulator over finite values.
struct Acc {
  uint64_t count = 0, nan = 0, inf = 0, finite = 0;
  double mean = 0, m2 = 0, min = std::numeric_limits<double>::infinity(),
         max = -std::numeric_limits<double>::infinity();
  void Add(double x) {
    ++count;
    if (std::isnan(x)) {
      ++nan;
      return;
    }
    if (std::isinf(x)) {
      ++inf;
      return;
    }
    ++finite;
    const double d = x - mean;
    mean += d / finite;
    m2 += d * (x - mean);
    min = std::min(min, x);
    max = std::max(max, x);
  }
  FeatureStats Finish(std::string name) const {
    FeatureStats f;
    f.name = std::move(name);
    f.count = count;
    f.nan = nan;
    f.inf = inf;
    if (finite == 0) {
      f.suggest = "none";
      return f;
    }
    f.mean = mean;
    f.std = finite > 1 ? std::sqrt(m2 / finite) : 0;
    f.min = min;
    f.max = max;
    if (f.std == 0 || max == min) {
      f.suggest = "drop";
    } else {
      f.shift = f.mean;
      f.scale = f.std;
    }
    return f;
  }
};

// Element kinds shared by npy and safetensors. `kind` 0: known size, not decoded.
// Sizes are validated where a DType is made: f in {2,4,8}, i/u in {1,2,4,8}, b 1, h 2.
struct DType {
  std::string name;  // numpy-style
  size_t size = 0;   // bytes
  char kind = 0;     // 'f' float, 'i' signed, 'u' unsigned, 'b' bool, 'h' bfloat16
};

// A name from a file, quoted for a one-line message: control bytes escaped, cut at 200.
std::string Quote(absl::string_view s);

inline bool MulOk(uint64_t a, uint64_t b, uint64_t* out) {
  return !__builtin_mul_overflow(a, b, out);
}

// "(3, 4)", "(5,)", "()" as numpy prints shapes; "[3, 4]" for safetensors.
std::string ShapeText(const std::vector<uint64_t>& shape, bool python);

// One open file, regular (known size, random access) or a FIFO (stream). Not thread-safe.
class StatsInput {
 public:
  // Opens without blocking (O_NONBLOCK: a FIFO without a writer does not hang open()).
  // `need_regular`: the format needs a known size, so only regular files are accepted.
  static absl::StatusOr<std::unique_ptr<StatsInput>> Open(const std::string& path,
                                                          bool need_regular);
  ~StatsInput();

  const std::string& path() const { return path_; }
  uint64_t size() const { return size_; }  // regular files only

  // Exactly `n` bytes at `offset` (regular files); DataLoss when the file ends first.
  absl::Status ReadAt(uint64_t offset, size_t n, char* buf) const;

  // Up to `n` bytes of the stream; 0 at its end. A FIFO that brings nothing for `stall`
  // is an error.
  absl::StatusOr<size_t> Read(char* buf, size_t n, std::chrono::milliseconds stall);

 private:
  StatsInput(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  std::string path_;
  int fd_;
  bool regular_ = false;
  uint64_t size_ = 0;
};

// Stats over `total` elements at `offset` of a C-order (or Fortran-order) array whose last
// (first) axis is the feature, streamed in chunks. The caller has checked that the file
// holds total * t.size bytes there. `whole`: the array is one population (one feature).
absl::StatusOr<ArrayStats> Reduce(const StatsInput& in, uint64_t offset, const DType& t,
                                  const std::vector<uint64_t>& shape, uint64_t total, bool fortran,
                                  const std::string& name, const std::string& where,
                                  const FeatureStatsOptions& o, bool whole = false);

// The readers, one per format: the report without findings (FeatureStatsOfFile adds them).
absl::StatusOr<FeatureReport> Npy(const StatsInput& in, const FeatureStatsOptions& o);
absl::StatusOr<FeatureReport> Safetensors(const StatsInput& in, const FeatureStatsOptions& o);
absl::StatusOr<FeatureReport> Csv(StatsInput& in, const FeatureStatsOptions& o);

}  // namespace trainscope::data::internal

#endif  // TRAINSCOPE_DATA_FEATURE_STATS_INTERNAL_H_
