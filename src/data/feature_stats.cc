// Numeric feature statistics: .npy (format 1.0-3.0), .safetensors, CSV.
//
// Every input is treated as hostile: a header's sizes are validated (overflow-checked
// element counts, shape x dtype against the bytes present) before a data byte is read,
// and nothing is allocated in proportion to what a header claims, only to what the file
// holds or the options allow. Binary data is streamed from disk in 1 MiB chunks; CSV is
// streamed through an RFC 4180 record splitter with a per-record byte cap.
//
// This file: what the formats share (the input file, the reduction of a binary array),
// the choice of reader by extension, the findings, and the JSON and text reports. The
// readers: feature_stats_npy.cc, feature_stats_safetensors.cc, feature_stats_csv.cc.
#include "trainscope/data/feature_stats.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "data/feature_stats_internal.h"
#include "trainscope/core/formats.h"
#include "trainscope/core/half.h"
#include "trainscope/core/paths.h"
#include "trainscope/core/status.h"
#include "trainscope/core/table.h"
#include "trainscope/core/utf8.h"

namespace trainscope::data {
namespace internal {
namespace {

double LoadValue(const char* p, const DType& t) {
  switch (t.kind) {
    case 'f':
      if (t.size == 2) {
        uint16_t h;
        std::memcpy(&h, p, 2);
        return HalfToFloat(h);
      }
      if (t.size == 4) {
        float f;
        std::memcpy(&f, p, 4);
        return f;
      } else {
        double d;
        std::memcpy(&d, p, 8);
        return d;
      }
    case 'h': {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return BFloat16ToFloat(h);
    }
    case 'b':
      return *p != 0;
    case 'i': {
      int64_t v = 0;
      if (t.size == 1) v = *reinterpret_cast<const int8_t*>(p);
      if (t.size == 2) {
        int16_t x;
        std::memcpy(&x, p, 2);
        v = x;
      }
      if (t.size == 4) {
        int32_t x;
        std::memcpy(&x, p, 4);
        v = x;
      }
      if (t.size == 8) std::memcpy(&v, p, 8);
      return static_cast<double>(v);
    }
    default: {
      uint64_t v = 0;
      std::memcpy(&v, p, std::min<size_t>(t.size, 8));
      return static_cast<double>(v);
    }
  }
}

}  // namespace

// A name from a file, quoted for a one-line message: control bytes escaped, cut at 200.
std::string Quote(absl::string_view s) {
  std::string out = "'";
  for (size_t i = 0; i < s.size() && i < 200; ++i) {
    const unsigned char c = s[i];
    if (c < 0x20 || c == 0x7f) {
      absl::StrAppend(&out, "\\x", absl::Hex(c, absl::kZeroPad2));
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + (s.size() > 200 ? "...'" : "'");
}

// "(3, 4)", "(5,)", "()" as numpy prints shapes; "[3, 4]" for safetensors.
std::string ShapeText(const std::vector<uint64_t>& shape, bool python) {
  if (!python) return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
  return absl::StrCat("(", absl::StrJoin(shape, ", "), shape.size() == 1 ? ",)" : ")");
}

// ---- StatsInput

absl::StatusOr<std::unique_ptr<StatsInput>> StatsInput::Open(const std::string& path,
                                                             bool need_regular) {
  absl::StatusOr<int> opened = OpenNonBlocking(path);
  if (!opened.ok()) return opened.status();
  const int fd = *opened;
  std::unique_ptr<StatsInput> in(new StatsInput(path, fd));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", std::strerror(errno)));
  }
  if (S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": is a directory (give a .npy, .safetensors, .csv or .tsv file)"));
  }
  if (S_ISREG(st.st_mode)) {
    in->regular_ = true;
    in->size_ = static_cast<uint64_t>(st.st_size);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    return in;
  }
  const char* kind = S_ISFIFO(st.st_mode)   ? "a FIFO or pipe"
                     : S_ISCHR(st.st_mode)  ? "a character device"
                     : S_ISBLK(st.st_mode)  ? "a block device"
                     : S_ISSOCK(st.st_mode) ? "a socket"
                                            : "not a plain file";
  if (S_ISFIFO(st.st_mode) && !need_regular) return in;
  return absl::InvalidArgumentError(
      absl::StrCat(path, ": not a regular file (", kind, "); ",
                   need_regular ? "this format needs a file of known size"
                                : "CSV is read from regular files and FIFOs only"));
}

StatsInput::~StatsInput() { close(fd_); }

absl::Status StatsInput::ReadAt(uint64_t offset, size_t n, char* buf) const {
  for (size_t done = 0; done < n;) {
    const ssize_t k = pread(fd_, buf + done, n - done, static_cast<off_t>(offset + done));
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      return absl::DataLossError(absl::StrCat(
          path_, ": byte ", offset + done, ": ",
          k < 0 ? std::strerror(errno) : "the file ended early (did it change while being read?)"));
    }
    done += static_cast<size_t>(k);
  }
  return absl::OkStatus();
}

absl::StatusOr<size_t> StatsInput::Read(char* buf, size_t n, std::chrono::milliseconds stall) {
  while (true) {
    if (!regular_) {
      pollfd p{fd_, POLLIN, 0};
      const int ms = static_cast<int>(std::min<int64_t>(stall.count(), INT_MAX));
      const int r = poll(&p, 1, ms);
      if (r < 0 && errno == EINTR) continue;
      if (r == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(path_, ": no data for ", stall.count(), " ms (a FIFO without a writer?)"));
      }
    }
    const ssize_t k = read(fd_, buf, n);
    if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (k < 0) return absl::InvalidArgumentError(absl::StrCat(path_, ": ", std::strerror(errno)));
    return static_cast<size_t>(k);
  }
}

absl::StatusOr<ArrayStats> Reduce(const StatsInput& in, uint64_t offset, const DType& t,
                                  const std::vector<uint64_t>& shape, uint64_t total, bool fortran,
                                  const std::string& name, const std::string& where,
                                  const FeatureStatsOptions& o, bool whole) {
  ArrayStats a;
  a.name = name;
  a.dtype = t.name;
  a.shape = shape;
  if (total == 0) return a;
  const uint64_t f = !whole && shape.size() >= 2 ? shape.back() : 1;
  if (f > o.max_features) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, f, " features on the last axis, more than the limit of ", o.max_features));
  }
  std::vector<Acc> acc(f);
  const bool c_order = !fortran || shape.size() < 2;
  const uint64_t per = total / f;  // Fortran order: the last axis varies slowest
  const size_t chunk = std::max<size_t>(1, (size_t{1} << 20) / t.size);
  std::vector<char> buf(chunk * t.size);
  uint64_t k = 0;  // feature of element i in C order
  for (uint64_t i = 0; i < total;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(chunk, total - i));
    TS_RETURN_IF_ERROR(in.ReadAt(offset + i * t.size, n * t.size, buf.data()));
    for (size_t j = 0; j < n; ++j, ++i) {
      const double v = LoadValue(buf.data() + j * t.size, t);
      if (c_order) {
        acc[k].Add(v);
        if (++k == f) k = 0;
      } else {
        acc[i / per].Add(v);
      }
    }
  }
  const std::string base = name.empty() ? "x" : name;
  for (uint64_t j = 0; j < f; ++j) {
    a.features.push_back(acc[j].Finish(f == 1 ? base : absl::StrCat(base, "[", j, "]")));
  }
  return a;
}

}  // namespace internal

namespace {

using internal::Csv;
using internal::Npy;
using internal::Quote;
using internal::Safetensors;
using internal::ShapeText;
using internal::StatsInput;

using nlohmann::json;

void Findings(FeatureReport* r) {
  uint64_t nan = 0, inf = 0, constant = 0;
  double smallest = std::numeric_limits<double>::infinity(), largest = 0;
  for (const auto& a : r->arrays) {
    const std::string name = a.name.empty() ? "the array" : absl::StrCat("tensor ", Quote(a.name));
    if (a.dtype == "float64") {
      r->findings.push_back(
          absl::StrCat(a.name.empty() ? "the array" : a.name,
                       " is float64: accelerators emulate fp64 slowly (many NPUs not at all); "
                       "store float32 or bfloat16"));
    }
    if (r->format != "csv" && a.features.empty() &&
        std::find(a.shape.begin(), a.shape.end(), 0) != a.shape.end()) {
      r->findings.push_back(absl::StrCat(name, " has no elements (shape ",
                                         ShapeText(a.shape, r->format == "npy"), ")"));
    }
    for (const auto& f : a.features) {
      nan += f.nan;
      inf += f.inf;
      constant += f.suggest == "drop";
      if (f.suggest == "zscore") {
        const double range = std::max(std::fabs(f.min), std::fabs(f.max));
        smallest = std::min(smallest, range);
        largest = std::max(largest, range);
      }
    }
  }
  if (nan + inf > 0 && r->format == "safetensors") {
    std::vector<std::string> bad;
    for (const auto& a : r->arrays) {
      uint64_t n = 0;
      for (const auto& f : a.features) n += f.nan + f.inf;
      if (n > 0) bad.push_back(Quote(a.name));
    }
    const size_t named = std::min<size_t>(bad.size(), 5);
    r->findings.push_back(absl::StrCat(
        nan, " NaN and ", inf, " Inf values in ", bad.size(), " tensor(s) (",
        absl::StrJoin(bad.begin(), bad.begin() + named, ", "), bad.size() > named ? ", ..." : "",
        "): a model saved with non-finite weights diverged before the save or was corrupted; "
        "resume from an earlier checkpoint (trainscope ckpt verify finds the newest good one)"));
    return;  // weights get no feature advice (constant or differently scaled is normal)
  }
  if (r->format == "safetensors") return;
  if (nan + inf > 0) {
    r->findings.push_back(absl::StrCat(nan, " NaN and ", inf,
                                       " Inf values: they poison the loss; impute or drop them"));
  }
  if (constant > 0)
    r->findings.push_back(absl::StrCat(constant, " constant feature(s): drop them"));
  if (smallest > 0 && largest / smallest > 1e3) {
    r->findings.push_back(absl::StrCat("feature magnitudes differ by ",
                                       FormatDouble(largest / smallest, 0),
                                       "x: normalise with the suggested shift and scale"));
  }
}

}  // namespace

absl::StatusOr<FeatureReport> FeatureStatsOfFile(const std::string& path,
                                                 const FeatureStatsOptions& options) {
  // The extension first: nothing is opened (let alone read) for a format we cannot read.
  enum { kNpy, kSafetensors, kCsv } format;
  if (absl::EndsWith(path, ".npy")) {
    format = kNpy;
  } else if (absl::EndsWith(path, ".safetensors")) {
    format = kSafetensors;
  } else if (absl::EndsWith(path, ".csv") || absl::EndsWith(path, ".tsv")) {
    format = kCsv;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": unknown format (expected .npy, .safetensors, .csv or .tsv)"));
  }
  TS_ASSIGN_OR_RETURN(std::unique_ptr<StatsInput> in, StatsInput::Open(path, format != kCsv));
  absl::StatusOr<FeatureReport> r = format == kNpy           ? Npy(*in, options)
                                    : format == kSafetensors ? Safetensors(*in, options)
                                                             : Csv(*in, options);
  if (r.ok()) Findings(&*r);
  return r;
}

nlohmann::json FeatureReportToJson(const FeatureReport& r) {
  json arrays = json::array();
  auto num = [](double v) { return std::isfinite(v) ? json(v) : json(nullptr); };
  for (const auto& a : r.arrays) {
    json feats = json::array();
    for (const auto& f : a.features) {
      feats.push_back({{"name", ValidUtf8(f.name)},
                       {"count", f.count},
                       {"nan", f.nan},
                       {"inf", f.inf},
                       {"non_numeric", f.non_numeric},
                       {"mean", num(f.mean)},
                       {"std", num(f.std)},
                       {"min", num(f.min)},
                       {"max", num(f.max)}});
      if (!f.suggest.empty()) {
        feats.back()["normalize"] = {
            {"method", f.suggest}, {"shift", num(f.shift)}, {"scale", num(f.scale)}};
      }
    }
    arrays.push_back({{"name", ValidUtf8(a.name)},
                      {"dtype", ValidUtf8(a.dtype)},
                      {"shape", a.shape},
                      {"float64", a.dtype == "float64"},
                      {"features", feats}});
  }
  json findings = json::array(), examples = json::array();
  for (const auto& f : r.findings) findings.push_back(ValidUtf8(f));
  for (const auto& e : r.bad_record_examples) examples.push_back(ValidUtf8(e));
  return {{"format", formats::kDataStats},
          {"version", 1},
          {"path", ValidUtf8(r.path)},
          {"file_format", r.format},
          {"arrays", arrays},
          {"findings", findings},
          {"bad_records", r.bad_records},
          {"bad_record_examples", examples}};
}

uint64_t NonFiniteCount(const FeatureReport& r) {
  uint64_t n = 0;
  for (const auto& a : r.arrays) {
    for (const auto& f : a.features) n += f.nan + f.inf;
  }
  return n;
}

namespace {

// Checkpoint tensors: one row per tensor.
std::string TensorTable(const FeatureReport& r) {
  Table t({"tensor", "dtype", "shape", "mean", "std", "min", "max", "NaN", "Inf"});
  for (const auto& a : r.arrays) {
    std::string shape;
    for (size_t i = 0; i < a.shape.size(); ++i)
      shape += (i ? "x" : "") + std::to_string(a.shape[i]);
    if (a.features.empty()) {
      t.AddRow({a.name, a.dtype, "[" + shape + "]", "-", "-", "-", "-", "-", "-"});
      continue;
    }
    const FeatureStats& f = a.features.front();
    t.AddRow({a.name, a.dtype, "[" + shape + "]", FormatDouble(f.mean, 4), FormatDouble(f.std, 4),
              FormatDouble(f.min, 4), FormatDouble(f.max, 4), FormatCount(f.nan),
              FormatCount(f.inf)});
  }
  return t.Render() + "\n";
}

}  // namespace

std::string FeatureReportToText(const FeatureReport& r) {
  std::string out;
  if (r.format == "safetensors") {
    out = TensorTable(r);
    for (const auto& f : r.findings) out += "finding: " + f + "\n";
    if (r.findings.empty()) out += "no problems found\n";
    return out;
  }
  for (const auto& a : r.arrays) {
    std::string shape;
    for (size_t i = 0; i < a.shape.size(); ++i)
      shape += (i ? "x" : "") + std::to_string(a.shape[i]);
    out += absl::StrCat(a.name.empty() ? r.path : a.name, ": ", a.dtype, " [", shape, "]\n");
    if (a.features.empty()) continue;
    Table t({"feature", "mean", "std", "min", "max", "NaN", "Inf", "normalise"});
    size_t shown = 0;
    for (const auto& f : a.features) {
      if (shown++ == 64) {
        t.AddRow({absl::StrCat("... ", a.features.size() - 64, " more (see --json)")});
        break;
      }
      t.AddRow({f.name, FormatDouble(f.mean, 4), FormatDouble(f.std, 4), FormatDouble(f.min, 4),
                FormatDouble(f.max, 4), FormatCount(f.nan), FormatCount(f.inf),
                f.suggest == "zscore" ? absl::StrCat("(x - ", FormatDouble(f.shift, 4), ") / ",
                                                     FormatDouble(f.scale, 4))
                                      : f.suggest});
    }
    out += t.Render() + "\n";
  }
  for (const auto& f : r.findings) out += "finding: " + f + "\n";
  if (r.findings.empty()) out += "no problems found\n";
  return out;
}

}  // namespace trainscope::data
