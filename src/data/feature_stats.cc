// Numeric feature statistics: .npy (format 1.0-3.0), .safetensors, CSV.
//
// Every input is treated as hostile: a header's sizes are validated (overflow-checked
// element counts, shape x dtype against the bytes present) before a data byte is read,
// and nothing is allocated in proportion to what a header claims, only to what the file
// holds or the options allow. Binary data is streamed from disk in 1 MiB chunks; CSV is
// streamed through an RFC 4180 record splitter with a per-record byte cap.
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

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "trainscope/core/half.h"
#include "trainscope/core/json_text.h"
#include "trainscope/core/paths.h"
#include "trainscope/core/status.h"
#include "trainscope/core/table.h"
#include "trainscope/core/utf8.h"

namespace trainscope::data {
namespace {

using nlohmann::json;

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

bool MulOk(uint64_t a, uint64_t b, uint64_t* out) { return !__builtin_mul_overflow(a, b, out); }

// "(3, 4)", "(5,)", "()" as numpy prints shapes; "[3, 4]" for safetensors.
std::string ShapeText(const std::vector<uint64_t>& shape, bool python) {
  if (!python) return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
  return absl::StrCat("(", absl::StrJoin(shape, ", "), shape.size() == 1 ? ",)" : ")");
}

// ---- Input: one open file, regular (known size, random access) or a FIFO (stream).
class StatsInput {
 public:
  // Opens without blocking (O_NONBLOCK: a FIFO without a writer does not hang open()).
  // `need_regular`: the format needs a known size, so only regular files are accepted.
  static absl::StatusOr<std::unique_ptr<StatsInput>> Open(const std::string& path,
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
  ~StatsInput() { close(fd_); }

  const std::string& path() const { return path_; }
  uint64_t size() const { return size_; }  // regular files only

  // Exactly `n` bytes at `offset` (regular files); DataLoss when the file ends first.
  absl::Status ReadAt(uint64_t offset, size_t n, char* buf) const {
    for (size_t done = 0; done < n;) {
      const ssize_t k = pread(fd_, buf + done, n - done, static_cast<off_t>(offset + done));
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) {
        return absl::DataLossError(
            absl::StrCat(path_, ": byte ", offset + done, ": ",
                         k < 0 ? std::strerror(errno)
                               : "the file ended early (did it change while being read?)"));
      }
      done += static_cast<size_t>(k);
    }
    return absl::OkStatus();
  }

  // Up to `n` bytes of the stream; 0 at its end. A FIFO that brings nothing for `stall`
  // is an error.
  absl::StatusOr<size_t> Read(char* buf, size_t n, std::chrono::milliseconds stall) {
    while (true) {
      if (!regular_) {
        pollfd p{fd_, POLLIN, 0};
        const int ms = static_cast<int>(std::min<int64_t>(stall.count(), INT_MAX));
        const int r = poll(&p, 1, ms);
        if (r < 0 && errno == EINTR) continue;
        if (r == 0) {
          return absl::InvalidArgumentError(absl::StrCat(path_, ": no data for ", stall.count(),
                                                         " ms (a FIFO without a writer?)"));
        }
      }
      const ssize_t k = read(fd_, buf, n);
      if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (k < 0) return absl::InvalidArgumentError(absl::StrCat(path_, ": ", std::strerror(errno)));
      return static_cast<size_t>(k);
    }
  }

 private:
  StatsInput(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  std::string path_;
  int fd_;
  bool regular_ = false;
  uint64_t size_ = 0;
};

// Stats over `total` elements at `offset` of a C-order (or Fortran-order) array whose last
// (first) axis is the feature, streamed in chunks. The caller has checked that the file
// holds total * t.size bytes there.
absl::StatusOr<ArrayStats> Reduce(const StatsInput& in, uint64_t offset, const DType& t,
                                  const std::vector<uint64_t>& shape, uint64_t total, bool fortran,
                                  const std::string& name, const std::string& where,
                                  const FeatureStatsOptions& o, bool whole = false) {
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

// ---- .npy

absl::StatusOr<DType> NpyDType(const std::string& descr, const std::string& where) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(where, "descr: ", Quote(descr), ": ", why));
  };
  if (descr.size() >= 2 && descr[1] == 'O') {
    return bad("object arrays (pickled Python objects) are not supported");
  }
  if (descr.size() < 3) return bad("not a dtype");
  DType t;
  t.kind = descr[1];
  if (!absl::SimpleAtoi(descr.substr(2), &t.size)) return bad("unsupported dtype");
  const bool ok = (t.kind == 'f' && (t.size == 2 || t.size == 4 || t.size == 8)) ||
                  ((t.kind == 'i' || t.kind == 'u') &&
                   (t.size == 1 || t.size == 2 || t.size == 4 || t.size == 8)) ||
                  (t.kind == 'b' && t.size == 1);
  if (!ok) return bad("unsupported dtype (float 2/4/8, int and uint 1/2/4/8, bool 1 are read)");
  if (descr[0] == '>' && t.size > 1) return bad("big-endian arrays are not supported");
  if (descr[0] != '<' && descr[0] != '>' && descr[0] != '|' && descr[0] != '=') {
    return bad("byte order must be one of < > | =");
  }
  t.name = t.kind == 'b' ? "bool"
                         : absl::StrCat(t.kind == 'f'   ? "float"
                                        : t.kind == 'i' ? "int"
                                                        : "uint",
                                        t.size * 8);
  return t;
}

struct NpyHeader {
  std::string descr;
  bool fortran = false;
  std::vector<uint64_t> shape;
};

// The header is a Python dict literal:
//   {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
// parsed strictly (numpy itself refuses other keys); errors name the byte and the field.
class NpyHeaderParser {
 public:
  NpyHeaderParser(absl::string_view text, uint64_t base, std::string path)
      : s_(text), base_(base), path_(std::move(path)) {}

  absl::StatusOr<NpyHeader> Parse() {
    NpyHeader h;
    bool seen[3] = {false, false, false};
    if (!Eat('{')) return Error("expected '{' (the header is a Python dict)");
    while (!Eat('}')) {
      TS_ASSIGN_OR_RETURN(std::string key, String());
      if (!Eat(':')) return Error(absl::StrCat("expected ':' after ", Quote(key)));
      if (key == "descr") {
        Ws();
        if (pos_ < s_.size() && s_[pos_] == '[') {
          return Error("descr: structured dtypes (a list of fields) are not supported");
        }
        TS_ASSIGN_OR_RETURN(h.descr, String());
        seen[0] = true;
      } else if (key == "fortran_order") {
        Ws();
        if (s_.substr(pos_, 4) == "True") {
          h.fortran = true;
          pos_ += 4;
        } else if (s_.substr(pos_, 5) == "False") {
          pos_ += 5;
        } else {
          return Error("fortran_order: expected True or False");
        }
        seen[1] = true;
      } else if (key == "shape") {
        TS_ASSIGN_OR_RETURN(h.shape, Shape());
        seen[2] = true;
      } else {
        return Error(absl::StrCat("unknown key ", Quote(key),
                                  " (a .npy header has descr, fortran_order and shape)"));
      }
      if (!Eat(',') && !(Ws(), pos_ < s_.size() && s_[pos_] == '}')) {
        return Error("expected ',' or '}'");
      }
    }
    Ws();
    if (pos_ != s_.size()) return Error("unexpected text after the header dict");
    const char* names[3] = {"descr", "fortran_order", "shape"};
    for (int i = 0; i < 3; ++i) {
      if (!seen[i]) return Error(absl::StrCat("missing '", names[i], "'"));
    }
    return h;
  }

 private:
  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat(path_, ": byte ", base_ + pos_, ": header: ", what));
  }
  void Ws() {
    while (pos_ < s_.size() && absl::ascii_isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  bool Eat(char c) {
    Ws();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  absl::StatusOr<std::string> String() {
    Ws();
    if (pos_ >= s_.size() || (s_[pos_] != '\'' && s_[pos_] != '"')) {
      return Error("expected a quoted string");
    }
    const char q = s_[pos_++];
    std::string out;
    while (pos_ < s_.size() && s_[pos_] != q) {
      if (s_[pos_] == '\\' && pos_ + 1 < s_.size()) ++pos_;
      out += s_[pos_++];
    }
    if (pos_ >= s_.size()) return Error("unterminated string");
    ++pos_;
    return out;
  }
  // A tuple of non-negative integers, each checked against 2^64 (Python 2 wrote "3L").
  absl::StatusOr<std::vector<uint64_t>> Shape() {
    std::vector<uint64_t> shape;
    if (!Eat('(')) return Error("shape: expected a tuple such as (3, 4)");
    while (!Eat(')')) {
      Ws();
      if (pos_ >= s_.size() || !absl::ascii_isdigit(static_cast<unsigned char>(s_[pos_]))) {
        return Error(
            absl::StrCat("shape: dimension ", shape.size(), " is not a non-negative integer"));
      }
      uint64_t d = 0;
      while (pos_ < s_.size() && absl::ascii_isdigit(static_cast<unsigned char>(s_[pos_]))) {
        if (!MulOk(d, 10, &d) || __builtin_add_overflow(d, s_[pos_] - '0', &d)) {
          return Error(absl::StrCat("shape: dimension ", shape.size(), " does not fit 64 bits"));
        }
        ++pos_;
      }
      if (pos_ < s_.size() && s_[pos_] == 'L') ++pos_;
      shape.push_back(d);
      if (shape.size() > 64) return Error("shape: more than 64 dimensions");
      if (!Eat(',') && !(Ws(), pos_ < s_.size() && s_[pos_] == ')')) {
        return Error("shape: expected ',' or ')'");
      }
    }
    return shape;
  }

  absl::string_view s_;
  size_t pos_ = 0;
  uint64_t base_;  // file offset of s_[0]
  std::string path_;
};

absl::StatusOr<FeatureReport> Npy(const StatsInput& in, const FeatureStatsOptions& o) {
  const std::string& path = in.path();
  const uint64_t size = in.size();
  char pre[12] = {};
  TS_RETURN_IF_ERROR(in.ReadAt(0, std::min<uint64_t>(size, 12), pre));
  if (size < 10 || std::memcmp(pre, "\x93NUMPY", 6) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": byte 0: not a .npy file (magic)"));
  }
  const int major = static_cast<unsigned char>(pre[6]);
  if (major < 1 || major > 3) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": byte 6: .npy format version ", major,
                                                   ".", static_cast<unsigned char>(pre[7]),
                                                   " is not supported (1.0 to 3.0 are)"));
  }
  uint64_t hlen = 0, start = 10;
  if (major == 1) {
    hlen = static_cast<unsigned char>(pre[8]) | (static_cast<unsigned char>(pre[9]) << 8);
  } else {
    if (size < 12) return absl::DataLossError(absl::StrCat(path, ": byte 8: truncated header"));
    uint32_t h32;
    std::memcpy(&h32, pre + 8, 4);
    hlen = h32;
    start = 12;
  }
  if (hlen > kMaxNpyHeaderBytes) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": byte 8: header length ", hlen,
                                                   " exceeds the limit of ", kMaxNpyHeaderBytes));
  }
  if (start + hlen > size) {
    return absl::DataLossError(absl::StrCat(path, ": byte ", start, ": truncated header (", hlen,
                                            " bytes declared, the file has ", size, ")"));
  }
  std::string text(hlen, '\0');
  TS_RETURN_IF_ERROR(in.ReadAt(start, hlen, text.data()));
  TS_ASSIGN_OR_RETURN(NpyHeader h, NpyHeaderParser(text, start, path).Parse());
  const std::string where = absl::StrCat(path, ": header: ");
  TS_ASSIGN_OR_RETURN(DType t, NpyDType(h.descr, where));
  const std::string shape = absl::StrCat("shape ", ShapeText(h.shape, true), " of ", t.name);
  uint64_t total = 1, need = 0;
  for (uint64_t d : h.shape) {
    if (!MulOk(total, d, &total)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, shape, ": the element count overflows 64 bits"));
    }
  }
  if (!MulOk(total, t.size, &need)) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, shape, ": the byte size overflows 64 bits"));
  }
  const uint64_t data_off = start + hlen, have = size - data_off;
  if (need > have) {
    return absl::DataLossError(absl::StrCat(path, ": byte ", size, ": data ends early: ", shape,
                                            " needs ", need, " bytes, file has ", have,
                                            " after the header"));
  }
  if (need < have) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": byte ", data_off + need,
                                                   ": trailing bytes: ", shape, " needs ", need,
                                                   " bytes, file has ", have, " after the header"));
  }
  FeatureReport r;
  r.path = path;
  r.format = "npy";
  TS_ASSIGN_OR_RETURN(ArrayStats a,
                      Reduce(in, data_off, t, h.shape, total, h.fortran, "",
                             absl::StrCat(where, "shape ", ShapeText(h.shape, true), ": "), o));
  r.arrays.push_back(std::move(a));
  return r;
}

// ---- safetensors (layout and rules: huggingface/safetensors, Metadata::validate)

struct SafetensorsDType {
  const char* name;
  DType t;   // kind 0: not decoded here
  int bits;  // element size
};

const SafetensorsDType* FindSafetensorsDType(const std::string& s) {
  static const SafetensorsDType kTypes[] = {
      {"F64", {"float64", 8, 'f'}, 64},
      {"F32", {"float32", 4, 'f'}, 32},
      {"F16", {"float16", 2, 'f'}, 16},
      {"BF16", {"bfloat16", 2, 'h'}, 16},
      {"I64", {"int64", 8, 'i'}, 64},
      {"I32", {"int32", 4, 'i'}, 32},
      {"I16", {"int16", 2, 'i'}, 16},
      {"I8", {"int8", 1, 'i'}, 8},
      {"U64", {"uint64", 8, 'u'}, 64},
      {"U32", {"uint32", 4, 'u'}, 32},
      {"U16", {"uint16", 2, 'u'}, 16},
      {"U8", {"uint8", 1, 'u'}, 8},
      {"BOOL", {"bool", 1, 'b'}, 8},
      {"F8_E5M2", {"F8_E5M2", 1, 0}, 8},
      {"F8_E4M3", {"F8_E4M3", 1, 0}, 8},
      {"F8_E8M0", {"F8_E8M0", 1, 0}, 8},
      {"F8_E4M3FNUZ", {"F8_E4M3FNUZ", 1, 0}, 8},
      {"F8_E5M2FNUZ", {"F8_E5M2FNUZ", 1, 0}, 8},
      {"C64", {"C64", 8, 0}, 64},
      {"F4", {"F4", 1, 0}, 4},
      {"F6_E2M3", {"F6_E2M3", 1, 0}, 6},
      {"F6_E3M2", {"F6_E3M2", 1, 0}, 6},
  };
  for (const auto& d : kTypes) {
    if (s == d.name) return &d;
  }
  return nullptr;
}

std::string JsonTypeName(const json& v) {
  const std::string n = v.type_name();
  if (v.is_number_float()) return "a fractional number";
  if (v.is_number_integer() && !v.is_number_unsigned()) return "a negative number";
  return (n == "array" || n == "object" ? "an " : "a ") + n;
}

struct TensorEntry {
  std::string name;
  const SafetensorsDType* dtype = nullptr;  // null: unknown, size not checked
  std::string dtype_text;
  std::vector<uint64_t> shape;
  uint64_t count = 0, begin = 0, end = 0;
};

// One header entry, checked field by field; errors name the file, tensor and field.
absl::StatusOr<TensorEntry> ParseTensorEntry(const std::string& path, const std::string& name,
                                             const json& info, uint64_t data_len) {
  const std::string where = absl::StrCat(path, ": tensor ", Quote(name), ": ");
  auto bad = [&](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(where, what));
  };
  if (!info.is_object()) {
    return bad(absl::StrCat("expected an object with dtype, shape and data_offsets, found ",
                            JsonTypeName(info)));
  }
  TensorEntry e;
  e.name = name;
  auto dt = info.find("dtype");
  if (dt == info.end()) return bad("dtype: missing");
  if (!dt->is_string())
    return bad(absl::StrCat("dtype: expected a string, found ", JsonTypeName(*dt)));
  e.dtype_text = dt->get_ref<const std::string&>();
  e.dtype = FindSafetensorsDType(e.dtype_text);
  auto sh = info.find("shape");
  if (sh == info.end()) return bad("shape: missing");
  if (!sh->is_array())
    return bad(absl::StrCat("shape: expected an array, found ", JsonTypeName(*sh)));
  for (size_t i = 0; i < sh->size(); ++i) {
    const json& d = (*sh)[i];
    if (!d.is_number_unsigned()) {
      return bad(absl::StrCat("shape: dimension ", i, " is ", JsonTypeName(d),
                              ", not a non-negative integer"));
    }
    e.shape.push_back(d.get<uint64_t>());
  }
  auto off = info.find("data_offsets");
  if (off == info.end()) return bad("data_offsets: missing");
  if (!off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
      !(*off)[1].is_number_unsigned()) {
    return bad("data_offsets: expected [begin, end], two non-negative integers");
  }
  e.begin = (*off)[0].get<uint64_t>();
  e.end = (*off)[1].get<uint64_t>();
  if (e.end < e.begin)
    return bad(absl::StrCat("data_offsets: [", e.begin, ", ", e.end, "] ends before it begins"));
  if (e.end > data_len) {
    return bad(absl::StrCat("data_offsets: [", e.begin, ", ", e.end,
                            "] ends past the data section (", data_len,
                            " bytes after the header)"));
  }
  const std::string shape = absl::StrCat("shape ", ShapeText(e.shape, false), " of ", e.dtype_text);
  e.count = 1;
  for (uint64_t d : e.shape) {
    if (!MulOk(e.count, d, &e.count))
      return bad(absl::StrCat(shape, ": the element count overflows 64 bits"));
  }
  if (e.dtype) {
    uint64_t bits = 0;
    if (!MulOk(e.count, e.dtype->bits, &bits)) {
      return bad(absl::StrCat(shape, ": the byte size overflows 64 bits"));
    }
    if (bits % 8) return bad(absl::StrCat(shape, " is not a whole number of bytes"));
    if (bits / 8 != e.end - e.begin) {
      return bad(absl::StrCat(shape, " needs ", bits / 8, " bytes, data_offsets [", e.begin, ", ",
                              e.end, "] span ", e.end - e.begin));
    }
  }
  return e;
}

absl::StatusOr<FeatureReport> Safetensors(const StatsInput& in, const FeatureStatsOptions& o) {
  const std::string& path = in.path();
  const uint64_t size = in.size();
  if (size < 8) {
    return absl::DataLossError(absl::StrCat(path, ": byte 0: shorter than the 8-byte header size"));
  }
  uint64_t n;
  TS_RETURN_IF_ERROR(in.ReadAt(0, 8, reinterpret_cast<char*>(&n)));
  if (n > kMaxSafetensorsHeaderBytes) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": byte 0: header length ", n,
                                                   " exceeds the format's limit of ",
                                                   kMaxSafetensorsHeaderBytes, " bytes"));
  }
  if (n > size - 8) {
    return absl::DataLossError(absl::StrCat(path, ": byte 8: header of ", n,
                                            " bytes runs past the end (the file has ", size, ")"));
  }
  std::string text(n, '\0');
  TS_RETURN_IF_ERROR(in.ReadAt(8, n, text.data()));
  json h;
  if (JsonTextError e; !ParseJsonText(text, kMaxHeaderJsonDepth, &h, &e)) {
    if (e.too_deep) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": byte ", 8 + e.byte,
                                                     ": header nested deeper than ",
                                                     kMaxHeaderJsonDepth, " levels"));
    }
    // "[json.exception.parse_error.101] parse error at line 1, column 2: why" -> "why";
    // "[json.exception.out_of_range.406] number overflow parsing '1e999'" -> the rest.
    std::string what = e.what;
    if (size_t end = what.find("] "); !what.empty() && what[0] == '[' && end != std::string::npos) {
      what = what.substr(end + 2);
    }
    if (size_t colon = what.find(": "); !e.out_of_range && colon != std::string::npos) {
      what = what.substr(colon + 2);
    }
    // A syntax error's byte is nlohmann's, one past the bad character; a number's is its start.
    const size_t at = e.out_of_range || e.byte == 0 ? e.byte : e.byte - 1;
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": byte ", 8 + at, ": header is not valid JSON: ", ValidUtf8(what)));
  }
  if (!h.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": byte 8: header is not a JSON object"));
  }
  const uint64_t data_off = 8 + n, data_len = size - data_off;
  std::vector<TensorEntry> entries;
  for (auto it = h.begin(); it != h.end(); ++it) {
    if (it.key() == "__metadata__") {
      bool ok = it->is_object();
      for (auto m = it->begin(); ok && m != it->end(); ++m) ok = m->is_string();
      if (!ok) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": __metadata__: expected an object of strings"));
      }
      continue;
    }
    TS_ASSIGN_OR_RETURN(TensorEntry e, ParseTensorEntry(path, it.key(), *it, data_len));
    entries.push_back(std::move(e));
  }
  // The tensors must tile the data section: sorted by offset, each begins where the
  // previous one ends, and the last ends at the end of the file.
  std::vector<const TensorEntry*> order;
  for (const auto& e : entries) order.push_back(&e);
  std::sort(order.begin(), order.end(), [](const TensorEntry* a, const TensorEntry* b) {
    return std::make_pair(a->begin, a->end) < std::make_pair(b->begin, b->end);
  });
  uint64_t at = 0;
  const TensorEntry* prev = nullptr;
  for (const TensorEntry* e : order) {
    const std::string range = absl::StrCat("[", e->begin, ", ", e->end, "]");
    if (e->begin < at) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": tensor ", Quote(e->name), ": data_offsets ", range, " overlap tensor ",
          Quote(prev->name), " [", prev->begin, ", ", prev->end, "]"));
    }
    if (e->begin > at) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": tensor ", Quote(e->name), ": data_offsets ", range, " leave a gap: bytes [", at,
          ", ", e->begin, ") of the data section belong to no tensor"));
    }
    at = e->end;
    prev = e;
  }
  if (at != data_len) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": byte ", data_off + at, ": trailing bytes: the tensors end at offset ",
                     at, " but the data section has ", data_len, " bytes"));
  }
  FeatureReport r;
  r.path = path;
  r.format = "safetensors";
  for (const TensorEntry& e : entries) {
    if (!e.dtype || e.dtype->t.kind == 0) {
      ArrayStats a;
      a.name = e.name;
      a.dtype = e.dtype ? e.dtype->t.name : e.dtype_text;
      a.shape = e.shape;
      r.findings.push_back(absl::StrCat(
          "tensor ", Quote(e.name), " is ", e.dtype_text,
          e.dtype ? ": not decoded, no statistics"
                  : ": a dtype unknown to trainscope (size not checked), no statistics"));
      r.arrays.push_back(std::move(a));
      continue;
    }
    // A tensor in a checkpoint is one population (weights, not features): one line of
    // statistics per tensor, and no normalisation advice.
    TS_ASSIGN_OR_RETURN(ArrayStats a,
                        Reduce(in, data_off + e.begin, e.dtype->t, e.shape, e.count, false, e.name,
                               absl::StrCat(path, ": tensor ", Quote(e.name), ": shape ",
                                            ShapeText(e.shape, false), ": "),
                               o, /*whole=*/true));
    for (FeatureStats& f : a.features) f.suggest.clear();
    r.arrays.push_back(std::move(a));
  }
  return r;
}

// ---- CSV

// Receives the records of a CSV stream.
class CsvSink {
 public:
  virtual ~CsvSink() = default;
  // `cells` are views into the record's unquoted bytes; `line` is where it starts.
  virtual absl::Status OnRecord(const std::vector<absl::string_view>& cells, uint64_t line) = 0;
  virtual void OnBad(const char* kind, uint64_t line, const std::string& why) = 0;
};

// RFC 4180 record splitter over a byte stream fed in pieces. Records end at \n, \r\n or a
// lone \r (old Mac files), whichever the file uses, mixed or not; fields are separated by
// `sep` and may be quoted with '"' ('""' inside quotes is one quote; a quoted field may
// hold separators and line breaks, kept as \n). Lenient like Python's csv: a quote in the
// middle of an unquoted field is a character. A record over `max_bytes` raw bytes is
// dropped up to the next line break (quotes no longer matter then) and reported as
// oversized_record, so memory stays O(max_bytes).
class CsvSplitter {
 public:
  CsvSplitter(char sep, size_t max_bytes) : sep_(sep), max_bytes_(max_bytes) {}

  absl::Status Feed(const char* p, size_t n, CsvSink* sink) {
    for (size_t i = 0; i < n; ++i) {
      const char c = p[i];
      if (after_cr_ && c == '\n') {  // the \n of a \r\n: the \r ended the line already
        after_cr_ = false;
        continue;
      }
      const bool eol = c == '\n' || c == '\r';
      after_cr_ = c == '\r';
      if (state_ == kSkipping) {
        if (eol) {
          sink->OnBad("oversized_record", line_,
                      absl::StrCat("longer than the limit of ", max_bytes_,
                                   " bytes; skipped to the end of its line"));
          ++line_;
          Reset();
        }
        continue;
      }
      if (state_ == kQuoted) {
        if (c == '"') {
          state_ = kQuoteSeen;
        } else {
          if (eol) ++line_;
          Append(eol ? '\n' : c);
        }
        continue;
      }
      if (c == '"' && state_ == kFieldStart) {
        quoted_ = true;
        state_ = kQuoted;
        Count();
      } else if (c == '"' && state_ == kQuoteSeen) {
        state_ = kQuoted;
        Append('"');
      } else if (c == sep_) {
        state_ = kFieldStart;
        Count();  // may switch to kSkipping
        if (state_ != kSkipping) ends_.push_back(bytes_.size());
      } else if (eol) {
        ends_.push_back(bytes_.size());
        TS_RETURN_IF_ERROR(Emit(sink));
        ++line_;
        Reset();
      } else {
        state_ = kUnquoted;
        Append(c);  // may switch to kSkipping
      }
    }
    return absl::OkStatus();
  }

  // End of input: the last record may lack a line break.
  absl::Status Finish(CsvSink* sink) {
    if (state_ == kSkipping) {
      sink->OnBad("oversized_record", record_line_,
                  absl::StrCat("longer than the limit of ", max_bytes_, " bytes"));
    } else if (state_ == kQuoted) {
      sink->OnBad("unterminated_quote", record_line_,
                  "a quoted field opened in this record is still open at the end of the file");
    } else if (raw_ > 0) {
      ends_.push_back(bytes_.size());
      TS_RETURN_IF_ERROR(Emit(sink));
    }
    Reset();
    return absl::OkStatus();
  }

 private:
  enum State { kFieldStart, kUnquoted, kQuoted, kQuoteSeen, kSkipping };

  void Count() {
    if (++raw_ > max_bytes_) {
      state_ = kSkipping;
      bytes_.clear();
      ends_.clear();
    }
  }
  void Append(char c) {
    Count();
    if (state_ != kSkipping) bytes_ += c;
  }
  absl::Status Emit(CsvSink* sink) {
    // A blank or whitespace-only line is not a record.
    if (!quoted_ && ends_.size() == 1 && absl::StripAsciiWhitespace(bytes_).empty()) {
      return absl::OkStatus();
    }
    cells_.clear();
    size_t b = 0;
    for (size_t e : ends_) {
      cells_.push_back(absl::string_view(bytes_).substr(b, e - b));
      b = e;
    }
    return sink->OnRecord(cells_, record_line_);
  }
  void Reset() {
    state_ = kFieldStart;
    bytes_.clear();
    ends_.clear();
    raw_ = 0;
    quoted_ = false;
    record_line_ = line_;
  }

  const char sep_;
  const size_t max_bytes_;
  State state_ = kFieldStart;
  bool after_cr_ = false, quoted_ = false;
  std::string bytes_;         // the current record's field bytes, unquoted
  std::vector<size_t> ends_;  // end of each field in bytes_
  std::vector<absl::string_view> cells_;
  size_t raw_ = 0;  // raw bytes of the current record so far
  uint64_t line_ = 1, record_line_ = 1;
};

// Column statistics from CSV records: the first record is a header when one of its
// cells is not a number; a row with another field count is an error.
class CsvStats : public CsvSink {
 public:
  CsvStats(const std::string& path, const FeatureStatsOptions& o) : path_(path), o_(o) {}

  absl::Status OnRecord(const std::vector<absl::string_view>& cells, uint64_t line) override {
    if (names_.empty()) {
      if (cells.size() > o_.max_features) {
        return absl::InvalidArgumentError(absl::StrCat(path_, ":", line, ": ", cells.size(),
                                                       " columns, more than the limit of ",
                                                       o_.max_features));
      }
      bool header = false;
      for (auto c : cells) {
        double d;
        auto s = absl::StripAsciiWhitespace(c);
        if (!s.empty() && !absl::SimpleAtod(s, &d)) header = true;
      }
      for (size_t i = 0; i < cells.size(); ++i) {
        names_.push_back(header ? std::string(absl::StripAsciiWhitespace(cells[i]))
                                : absl::StrCat("col", i));
      }
      acc_.resize(names_.size());
      non_numeric_.resize(names_.size());
      if (header) return absl::OkStatus();
    }
    if (cells.size() != names_.size()) {
      return absl::InvalidArgumentError(absl::StrCat(path_, ":", line, ": ", cells.size(),
                                                     " fields, header has ", names_.size()));
    }
    ++rows_;
    for (size_t i = 0; i < cells.size(); ++i) {
      auto s = absl::StripAsciiWhitespace(cells[i]);
      double d;
      if (s.empty() || s == "NA" || s == "NaN" || s == "nan" || s == "null") {
        acc_[i].Add(std::numeric_limits<double>::quiet_NaN());
      } else if (absl::SimpleAtod(s, &d)) {
        acc_[i].Add(d);
      } else {
        ++non_numeric_[i];
      }
    }
    return absl::OkStatus();
  }

  void OnBad(const char* kind, uint64_t line, const std::string& why) override {
    ++bad_[kind];
    if (examples_.size() < 20)
      examples_.push_back(absl::StrCat(path_, ":", line, ": ", kind, ": ", why));
  }

  absl::StatusOr<FeatureReport> Finish() {
    FeatureReport r;
    r.path = path_;
    r.format = "csv";
    r.bad_records = {{"oversized_record", 0}, {"unterminated_quote", 0}};
    uint64_t bad = 0;
    for (const auto& [k, v] : bad_) {
      r.bad_records[k] = v;
      bad += v;
    }
    r.bad_record_examples = examples_;
    if (names_.empty()) {
      if (bad > 0) {
        return absl::InvalidArgumentError(absl::StrCat(path_, ": no usable record: ", bad,
                                                       " skipped, the first: ", examples_[0]));
      }
      return absl::InvalidArgumentError(absl::StrCat(path_, ": empty CSV file"));
    }
    if (bad > 0) {
      std::vector<std::string> parts;
      for (const auto& [k, v] : bad_) parts.push_back(absl::StrCat(k, ": ", v));
      r.findings.push_back(absl::StrCat(bad, " CSV record(s) skipped (", absl::StrJoin(parts, ", "),
                                        "); the first: ", examples_[0]));
    }
    ArrayStats a;
    a.dtype = "float64 (text)";
    a.shape = {rows_, names_.size()};
    for (size_t i = 0; i < names_.size(); ++i) {
      FeatureStats f = acc_[i].Finish(names_[i]);
      f.count += non_numeric_[i];
      f.non_numeric = non_numeric_[i];
      if (non_numeric_[i] * 2 > rows_) f.suggest = "categorical";
      a.features.push_back(f);
    }
    r.arrays.push_back(std::move(a));
    return r;
  }

 private:
  const std::string path_;
  const FeatureStatsOptions o_;
  std::vector<std::string> names_;
  std::vector<Acc> acc_;
  std::vector<uint64_t> non_numeric_;
  uint64_t rows_ = 0;
  std::map<std::string, uint64_t> bad_;
  std::vector<std::string> examples_;
};

absl::StatusOr<FeatureReport> Csv(StatsInput& in, const FeatureStatsOptions& o) {
  CsvStats stats(in.path(), o);
  CsvSplitter splitter(absl::EndsWith(in.path(), ".tsv") ? '\t' : ',', o.max_record_bytes);
  std::vector<char> buf(size_t{1} << 16);
  while (true) {
    TS_ASSIGN_OR_RETURN(size_t n, in.Read(buf.data(), buf.size(), o.stall_timeout));
    if (n == 0) break;
    TS_RETURN_IF_ERROR(splitter.Feed(buf.data(), n, &stats));
  }
  TS_RETURN_IF_ERROR(splitter.Finish(&stats));
  return stats.Finish();
}

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
  return {{"format", "trainscope.data.stats"},
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
