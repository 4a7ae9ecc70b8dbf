// `data stats` on .npy files (format 1.0 to 3.0): the header, a Python dict literal, is
// parsed strictly and its shape x dtype checked against the bytes present before the data
// is reduced (feature_stats_internal.h).
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "data/feature_stats_internal.h"
#include "trainscope/core/status.h"

namespace trainscope::data::internal {
namespace {

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

}  // namespace

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

}  // namespace trainscope::data::internal
