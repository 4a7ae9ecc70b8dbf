// Numeric feature statistics: .npy (format 1.0-3.0), .safetensors, CSV.
#include "trainscope/data/feature_stats.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "trainscope/core/os.h"
#include "trainscope/core/status.h"
#include "trainscope/core/table.h"

namespace trainscope::data {
namespace {

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

float HalfToFloat(uint16_t h) {
  const uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  float v;
  if (exp == 0) {
    v = std::ldexp(static_cast<float>(mant), -24);
  } else if (exp == 31) {
    v = mant ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  } else {
    v = std::ldexp(static_cast<float>(mant | 0x400), static_cast<int>(exp) - 25);
  }
  return sign ? -v : v;
}

// Element kinds shared by npy and safetensors.
struct DType {
  std::string name;  // numpy-style
  size_t size = 0;
  char kind = 0;  // 'f' float, 'i' signed, 'u' unsigned, 'b' bool, 'h' bfloat16
};

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
      uint32_t bits = static_cast<uint32_t>(h) << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
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
      std::memcpy(&v, p, t.size);
      return static_cast<double>(v);
    }
  }
}

// Stats over a C-order (or Fortran-order) array whose last (first) axis is the feature.
ArrayStats Reduce(const char* data, const DType& t, std::vector<uint64_t> shape, bool fortran,
                  std::string name) {
  ArrayStats a;
  a.name = name;
  a.dtype = t.name;
  a.shape = shape;
  uint64_t total = 1;
  for (uint64_t d : shape) total *= d;
  const uint64_t f = shape.size() >= 2 ? shape.back() : 1;
  std::vector<Acc> acc(f);
  if (f == 0) return a;
  if (!fortran || shape.size() < 2) {
    for (uint64_t i = 0; i < total; ++i) acc[i % f].Add(LoadValue(data + i * t.size, t));
  } else {
    const uint64_t per = total / f;  // Fortran order: the last axis varies slowest
    for (uint64_t i = 0; i < total; ++i) acc[i / per].Add(LoadValue(data + i * t.size, t));
  }
  for (uint64_t k = 0; k < f; ++k) {
    a.features.push_back(acc[k].Finish(f == 1
                                           ? (name.empty() ? "x" : name)
                                           : absl::StrCat(name.empty() ? "x" : name, "[", k, "]")));
  }
  return a;
}

absl::StatusOr<DType> NpyDType(const std::string& descr, const std::string& path) {
  if (descr.size() < 3)
    return absl::InvalidArgumentError(absl::StrCat(path, ": bad dtype '", descr, "'"));
  const char order = descr[0];
  if (order == '>')
    return absl::InvalidArgumentError(absl::StrCat(path, ": big-endian arrays are not supported"));
  DType t;
  t.kind = descr[1];
  if (!absl::SimpleAtoi(descr.substr(2), &t.size) ||
      (t.kind != 'f' && t.kind != 'i' && t.kind != 'u' && t.kind != 'b')) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": unsupported dtype '", descr, "'"));
  }
  if (t.kind == 'f' && t.size != 2 && t.size != 4 && t.size != 8) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": unsupported float size in '", descr, "'"));
  }
  t.name = t.kind == 'b' ? "bool"
                         : absl::StrCat(t.kind == 'f'   ? "float"
                                        : t.kind == 'i' ? "int"
                                                        : "uint",
                                        t.size * 8);
  return t;
}

// The header is a Python dict literal: {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
std::string DictValue(const std::string& h, const std::string& key) {
  size_t k = h.find("'" + key + "'");
  if (k == std::string::npos) return "";
  size_t c = h.find(':', k);
  if (c == std::string::npos) return "";
  size_t b = c + 1;
  while (b < h.size() && h[b] == ' ') ++b;
  if (b < h.size() && h[b] == '(') return h.substr(b, h.find(')', b) - b + 1);
  if (b < h.size() && h[b] == '\'') return h.substr(b + 1, h.find('\'', b + 1) - b - 1);
  size_t e = h.find_first_of(",}", b);
  return std::string(absl::StripAsciiWhitespace(h.substr(b, e - b)));
}

absl::StatusOr<FeatureReport> Npy(const std::string& path, const std::string& bytes) {
  if (bytes.size() < 10 || bytes.compare(0, 6, "\x93NUMPY") != 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": byte 0: not a .npy file (magic)"));
  }
  const int major = static_cast<unsigned char>(bytes[6]);
  size_t hlen = 0, start = 0;
  if (major == 1) {
    hlen = static_cast<unsigned char>(bytes[8]) | (static_cast<unsigned char>(bytes[9]) << 8);
    start = 10;
  } else {
    if (bytes.size() < 12) return absl::DataLossError(absl::StrCat(path, ": truncated header"));
    uint32_t h32;
    std::memcpy(&h32, bytes.data() + 8, 4);
    hlen = h32;
    start = 12;
  }
  if (start + hlen > bytes.size())
    return absl::DataLossError(absl::StrCat(path, ": byte ", start, ": truncated header"));
  const std::string header = bytes.substr(start, hlen);
  TS_ASSIGN_OR_RETURN(DType t, NpyDType(DictValue(header, "descr"), path));
  const bool fortran = DictValue(header, "fortran_order") == "True";
  std::vector<uint64_t> shape;
  std::string sh = DictValue(header, "shape");
  if (sh.size() < 2) return absl::InvalidArgumentError(absl::StrCat(path, ": header has no shape"));
  for (absl::string_view part :
       absl::StrSplit(sh.substr(1, sh.size() - 2), ',', absl::SkipWhitespace())) {
    uint64_t d;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(part), &d)) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": bad shape ", sh));
    }
    shape.push_back(d);
  }
  uint64_t total = 1;
  for (uint64_t d : shape) total *= d;
  const uint64_t data_off = start + hlen;
  if (data_off + total * t.size > bytes.size()) {
    return absl::DataLossError(absl::StrCat(path, ": byte ", bytes.size(), ": data ends early (",
                                            total * t.size, " bytes expected after byte ", data_off,
                                            ")"));
  }
  FeatureReport r;
  r.path = path;
  r.format = "npy";
  r.arrays.push_back(Reduce(bytes.data() + data_off, t, shape, fortran, ""));
  return r;
}

absl::StatusOr<FeatureReport> Safetensors(const std::string& path, const std::string& bytes) {
  if (bytes.size() < 8)
    return absl::DataLossError(absl::StrCat(path, ": byte 0: shorter than the 8-byte header size"));
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  if (n > bytes.size() - 8)
    return absl::DataLossError(
        absl::StrCat(path, ": byte 8: header of ", n, " bytes runs past the end"));
  nlohmann::json h = nlohmann::json::parse(bytes.substr(8, n), nullptr, false);
  if (h.is_discarded() || !h.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": byte 8: header is not a JSON object"));
  }
  FeatureReport r;
  r.path = path;
  r.format = "safetensors";
  const char* data = bytes.data() + 8 + n;
  const uint64_t data_len = bytes.size() - 8 - n;
  for (auto& [name, info] : h.items()) {
    if (name == "__metadata__") continue;
    const std::string dt = info.value("dtype", "");
    DType t;
    if (dt == "F64")
      t = {"float64", 8, 'f'};
    else if (dt == "F32")
      t = {"float32", 4, 'f'};
    else if (dt == "F16")
      t = {"float16", 2, 'f'};
    else if (dt == "BF16")
      t = {"bfloat16", 2, 'h'};
    else if (dt == "I64")
      t = {"int64", 8, 'i'};
    else if (dt == "I32")
      t = {"int32", 4, 'i'};
    else if (dt == "I16")
      t = {"int16", 2, 'i'};
    else if (dt == "I8")
      t = {"int8", 1, 'i'};
    else if (dt == "U8")
      t = {"uint8", 1, 'u'};
    else if (dt == "BOOL")
      t = {"bool", 1, 'b'};
    else
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": tensor ", name, ": unsupported dtype ", dt));
    std::vector<uint64_t> shape = info.value("shape", std::vector<uint64_t>{});
    auto offs = info.value("data_offsets", std::vector<uint64_t>{});
    uint64_t total = 1;
    for (uint64_t d : shape) total *= d;
    if (offs.size() != 2 || offs[1] < offs[0] || offs[1] > data_len ||
        offs[1] - offs[0] != total * t.size) {
      return absl::DataLossError(absl::StrCat(
          path, ": tensor ", name, ": data_offsets do not match its shape and the file size"));
    }
    r.arrays.push_back(Reduce(data + offs[0], t, shape, false, name));
  }
  return r;
}

absl::StatusOr<FeatureReport> Csv(const std::string& path, const std::string& bytes) {
  FeatureReport r;
  r.path = path;
  r.format = "csv";
  std::vector<std::string> names;
  std::vector<Acc> acc;
  std::vector<uint64_t> non_numeric;
  uint64_t line_no = 0, rows = 0;
  const char sep = absl::EndsWith(path, ".tsv") ? '\t' : ',';
  for (absl::string_view line : absl::StrSplit(bytes, '\n')) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    std::vector<absl::string_view> cells = absl::StrSplit(line, sep);
    if (names.empty()) {
      bool header = false;
      for (auto c : cells) {
        double d;
        auto s = absl::StripAsciiWhitespace(c);
        if (!s.empty() && !absl::SimpleAtod(s, &d)) header = true;
      }
      for (size_t i = 0; i < cells.size(); ++i) {
        names.push_back(header ? std::string(absl::StripAsciiWhitespace(cells[i]))
                               : absl::StrCat("col", i));
      }
      acc.resize(names.size());
      non_numeric.resize(names.size());
      if (header) continue;
    }
    if (cells.size() != names.size()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", line_no, ": ", cells.size(),
                                                     " fields, header has ", names.size()));
    }
    ++rows;
    for (size_t i = 0; i < cells.size(); ++i) {
      auto s = absl::StripAsciiWhitespace(cells[i]);
      double d;
      if (s.empty() || s == "NA" || s == "NaN" || s == "nan" || s == "null") {
        acc[i].Add(std::numeric_limits<double>::quiet_NaN());
      } else if (absl::SimpleAtod(s, &d)) {
        acc[i].Add(d);
      } else {
        ++non_numeric[i];
      }
    }
  }
  if (names.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": empty CSV file"));
  ArrayStats a;
  a.dtype = "float64 (text)";
  a.shape = {rows, names.size()};
  for (size_t i = 0; i < names.size(); ++i) {
    FeatureStats f = acc[i].Finish(names[i]);
    f.count += non_numeric[i];
    f.non_numeric = non_numeric[i];
    if (non_numeric[i] * 2 > rows) f.suggest = "categorical";
    a.features.push_back(f);
  }
  r.arrays.push_back(std::move(a));
  return r;
}

void Findings(FeatureReport* r) {
  uint64_t nan = 0, inf = 0, constant = 0;
  double smallest = std::numeric_limits<double>::infinity(), largest = 0;
  for (const auto& a : r->arrays) {
    if (a.dtype == "float64") {
      r->findings.push_back(
          absl::StrCat(a.name.empty() ? "the array" : a.name,
                       " is float64: accelerators emulate fp64 slowly (many NPUs not at all); "
                       "store float32 or bfloat16"));
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

absl::StatusOr<FeatureReport> FeatureStatsOfFile(const std::string& path) {
  TS_ASSIGN_OR_RETURN(std::string bytes, Os::Default()->ReadFile(path));
  absl::StatusOr<FeatureReport> r;
  if (absl::EndsWith(path, ".npy")) {
    r = Npy(path, bytes);
  } else if (absl::EndsWith(path, ".safetensors")) {
    r = Safetensors(path, bytes);
  } else if (absl::EndsWith(path, ".csv") || absl::EndsWith(path, ".tsv")) {
    r = Csv(path, bytes);
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": unknown format (expected .npy, .safetensors, .csv or .tsv)"));
  }
  if (r.ok()) Findings(&*r);
  return r;
}

nlohmann::json FeatureReportToJson(const FeatureReport& r) {
  nlohmann::json arrays = nlohmann::json::array();
  auto num = [](double v) {
    return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
  };
  for (const auto& a : r.arrays) {
    nlohmann::json feats = nlohmann::json::array();
    for (const auto& f : a.features) {
      feats.push_back(
          {{"name", f.name},
           {"count", f.count},
           {"nan", f.nan},
           {"inf", f.inf},
           {"non_numeric", f.non_numeric},
           {"mean", num(f.mean)},
           {"std", num(f.std)},
           {"min", num(f.min)},
           {"max", num(f.max)},
           {"normalize",
            {{"method", f.suggest}, {"shift", num(f.shift)}, {"scale", num(f.scale)}}}});
    }
    arrays.push_back({{"name", a.name},
                      {"dtype", a.dtype},
                      {"shape", a.shape},
                      {"float64", a.dtype == "float64"},
                      {"features", feats}});
  }
  return {{"format", "trainscope.data.stats"}, {"version", 1},     {"path", r.path},
          {"file_format", r.format},           {"arrays", arrays}, {"findings", r.findings}};
}

std::string FeatureReportToText(const FeatureReport& r) {
  std::string out;
  for (const auto& a : r.arrays) {
    std::string shape;
    for (size_t i = 0; i < a.shape.size(); ++i)
      shape += (i ? "x" : "") + std::to_string(a.shape[i]);
    out += absl::StrCat(a.name.empty() ? r.path : a.name, ": ", a.dtype, " [", shape, "]\n");
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
