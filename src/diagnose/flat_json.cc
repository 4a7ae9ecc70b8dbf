// Flat JSON object scanner (flat_json.h). A recursive-descent walk over one object: members'
// values are read when they are scalars and skipped (balanced, strings respected) when nested.
#include "diagnose/flat_json.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace trainscope::diagnose::internal {

bool FlatScanner::Fail(const char* what) {
  if (error_.empty()) error_ = std::string(what) + " at byte " + std::to_string(i_);
  return false;
}

// Skips a nested object or array, depth-limited.
bool FlatScanner::SkipNested() {
  int depth = 0;
  while (i_ < s_.size()) {
    char c = s_[i_];
    if (c == '"') {
      std::string_view ignored;
      if (!String(&ignored)) return false;
      continue;
    }
    if (c == '{' || c == '[') {
      if (++depth > 256) return Fail("nested too deep");
    } else if (c == '}' || c == ']') {
      if (--depth == 0) {
        ++i_;
        return true;
      }
    }
    ++i_;
  }
  return Fail("unterminated object or array");
}

bool FlatScanner::Value(FlatValue* v) {
  SkipWs();
  char c = Peek();
  if (c == '"') {
    v->kind = FlatValue::kString;
    return String(&v->text);
  }
  if (c == '{' || c == '[') {
    v->kind = FlatValue::kNested;
    return SkipNested();
  }
  if (c == 'n' && Literal("null")) {
    v->kind = FlatValue::kNull;
    return true;
  }
  if ((c == 't' && Literal("true")) || (c == 'f' && Literal("false"))) {
    v->kind = FlatValue::kBool;
    return true;
  }
  v->kind = FlatValue::kNumber;
  size_t start = i_;
  if (c == 'N' || c == 'I' || (c == '-' && s_.substr(i_ + 1, 1) == "I")) {
    for (auto [word, value] : {std::pair<std::string_view, double>{"NaN", NAN},
                               {"Infinity", INFINITY},
                               {"-Infinity", -INFINITY}}) {
      if (Literal(word)) {
        v->number = value;
        v->decoded = true;
        v->text = s_.substr(start, i_ - start);
        return true;
      }
    }
  }
  // JSON numbers only (from_chars would also take "inf", "nan": refuse letters first).
  if (!(c == '-' || (c >= '0' && c <= '9'))) return Fail("expected a value");
  while (i_ < s_.size()) {
    char d = s_[i_];
    if (!((d >= '0' && d <= '9') || d == '-' || d == '+' || d == '.' || d == 'e' || d == 'E'))
      break;
    ++i_;
  }
  v->text = s_.substr(start, i_ - start);
  return true;
}

namespace {

// Clinger's fast path: a decimal with at most 19 digits whose value fits in 53 bits, scaled
// by 10^e with |e| <= 22, is one correctly rounded multiplication or division of two exact
// doubles. Metrics logs are nearly all such numbers; anything else (and anything that does
// not match digits[.digits][e[+-]digits]) goes to from_chars.
bool FlatFastDecimal(std::string_view t, double* out) {
  static constexpr double kPow10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                      1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                      1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
  size_t i = 0, n = t.size();
  bool neg = i < n && t[i] == '-';
  if (neg) ++i;
  uint64_t m = 0;
  int digits = 0, exp10 = 0;
  size_t start = i;
  for (; i < n && t[i] >= '0' && t[i] <= '9'; ++i, ++digits) m = m * 10 + (t[i] - '0');
  if (i == start) return false;
  if (i < n && t[i] == '.') {
    size_t f = ++i;
    for (; i < n && t[i] >= '0' && t[i] <= '9'; ++i, ++digits) m = m * 10 + (t[i] - '0');
    if (i == f) return false;
    exp10 -= static_cast<int>(i - f);
  }
  if (digits > 19) return false;
  if (i < n && (t[i] == 'e' || t[i] == 'E')) {
    ++i;
    bool eneg = i < n && t[i] == '-';
    if (i < n && (t[i] == '-' || t[i] == '+')) ++i;
    size_t e0 = i;
    int e = 0;
    for (; i < n && t[i] >= '0' && t[i] <= '9' && e < 10000; ++i) e = e * 10 + (t[i] - '0');
    if (i == e0) return false;
    exp10 += eneg ? -e : e;
  }
  if (i != n || m > (uint64_t{1} << 53) || exp10 < -22 || exp10 > 22) return false;
  double d = static_cast<double>(m);
  d = exp10 < 0 ? d / kPow10[-exp10] : d * kPow10[exp10];
  *out = neg ? -d : d;
  return true;
}

}  // namespace

bool DecodeFlatNumber(FlatValue* v) {
  if (v->decoded) return true;
  if (FlatFastDecimal(v->text, &v->number)) {
    v->decoded = true;
    return true;
  }
  const char* begin = v->text.data();
  const char* end = begin + v->text.size();
  auto r = std::from_chars(begin, end, v->number);
  if (r.ec == std::errc::result_out_of_range) {
    // 1e999: an overflow is a non-finite value, as Python reads it.
    v->number = *begin == '-' ? -std::numeric_limits<double>::infinity()
                              : std::numeric_limits<double>::infinity();
  } else if (r.ec != std::errc() || r.ptr != end) {
    return false;
  }
  v->decoded = true;
  return true;
}

bool ScanFlatObject(std::string_view line, std::string* error,
                    const std::function<void(std::string_view, const FlatValue&)>& member) {
  bool bad_number = false;
  size_t bad_at = 0;
  bool ok = ScanFlatObjectLazy(line, error, [&](std::string_view key, FlatValue& v) {
    if (bad_number) return;
    if (v.kind == FlatValue::kNumber && !DecodeFlatNumber(&v)) {
      bad_number = true;
      bad_at = static_cast<size_t>(v.text.data() - line.data());
      return;
    }
    member(key, v);
  });
  if (ok && bad_number) {
    *error = "bad number at byte " + std::to_string(bad_at);
    return false;
  }
  return ok;
}

std::string QuoteNonFiniteTokens(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 64);
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < text.size()) {
        out += text[++i];
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
      out += c;
      continue;
    }
    bool replaced = false;
    for (std::string_view tok :
         {std::string_view("-Infinity"), std::string_view("Infinity"), std::string_view("NaN")}) {
      if (text.substr(i, tok.size()) == tok) {
        out += '"';
        out += tok;
        out += '"';
        i += tok.size() - 1;
        replaced = true;
        break;
      }
    }
    if (!replaced) out += c;
  }
  return out;
}

}  // namespace trainscope::diagnose::internal
