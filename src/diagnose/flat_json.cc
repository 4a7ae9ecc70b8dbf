// Flat JSON object scanner (flat_json.h). A recursive-descent walk over one object: members'
// values are read when they are scalars and skipped (balanced, strings respected) when nested.
#include "diagnose/flat_json.h"

#include <charconv>
#include <cmath>
#include <limits>

namespace trainscope::diagnose::internal {
namespace {

class Scanner {
 public:
  explicit Scanner(std::string_view s) : s_(s) {}

  void SkipWs() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\r' || s_[i_] == '\n'))
      ++i_;
  }
  bool AtEnd() const { return i_ >= s_.size(); }
  char Peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  bool Eat(char c) {
    SkipWs();
    if (Peek() != c) return false;
    ++i_;
    return true;
  }
  bool Fail(const char* what) {
    if (error_.empty()) error_ = std::string(what) + " at byte " + std::to_string(i_);
    return false;
  }
  const std::string& error() const { return error_; }

  // A string at the cursor (after the opening quote check); raw content.
  bool String(std::string_view* out) {
    if (Peek() != '"') return Fail("expected a string");
    size_t start = ++i_;
    while (i_ < s_.size()) {
      char c = s_[i_];
      if (c == '\\') {
        i_ += 2;
        continue;
      }
      if (c == '"') {
        *out = s_.substr(start, i_ - start);
        ++i_;
        return true;
      }
      if (static_cast<unsigned char>(c) < 0x20) return Fail("control character in a string");
      ++i_;
    }
    return Fail("unterminated string");
  }

  bool Literal(std::string_view word) {
    if (s_.substr(i_, word.size()) != word) return false;
    i_ += word.size();
    return true;
  }

  // Skips a nested object or array, depth-limited.
  bool SkipNested() {
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

  bool Value(FlatValue* v) {
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
    if (Literal("null")) {
      v->kind = FlatValue::kNull;
      return true;
    }
    if (Literal("true") || Literal("false")) {
      v->kind = FlatValue::kBool;
      return true;
    }
    v->kind = FlatValue::kNumber;
    if (Literal("NaN")) {
      v->number = std::numeric_limits<double>::quiet_NaN();
      return true;
    }
    if (Literal("Infinity")) {
      v->number = std::numeric_limits<double>::infinity();
      return true;
    }
    if (Literal("-Infinity")) {
      v->number = -std::numeric_limits<double>::infinity();
      return true;
    }
    // JSON numbers only (from_chars would also take "inf", "nan": refuse letters first).
    if (!(c == '-' || (c >= '0' && c <= '9'))) return Fail("expected a value");
    const char* begin = s_.data() + i_;
    const char* end = s_.data() + s_.size();
    const char* p = begin;
    while (p < end && (*p == '-' || *p == '+' || *p == '.' || *p == 'e' || *p == 'E' ||
                       (*p >= '0' && *p <= '9')))
      ++p;
    auto r = std::from_chars(begin, p, v->number);
    if (r.ec == std::errc::result_out_of_range) {
      // 1e999: an overflow is a non-finite value, as Python reads it.
      v->number = *begin == '-' ? -std::numeric_limits<double>::infinity()
                                : std::numeric_limits<double>::infinity();
    } else if (r.ec != std::errc() || r.ptr != p) {
      return Fail("bad number");
    }
    i_ += static_cast<size_t>(p - begin);
    return true;
  }

 private:
  std::string_view s_;
  size_t i_ = 0;
  std::string error_;
};

}  // namespace

bool ScanFlatObject(std::string_view line, std::string* error,
                    const std::function<void(std::string_view, const FlatValue&)>& member) {
  Scanner sc(line);
  auto fail = [&] {
    *error = sc.error().empty() ? "not a JSON object" : sc.error();
    return false;
  };
  if (!sc.Eat('{')) {
    sc.Fail("not a JSON object");
    return fail();
  }
  if (!sc.Eat('}')) {
    while (true) {
      sc.SkipWs();
      std::string_view key;
      if (!sc.String(&key)) return fail();
      if (!sc.Eat(':')) {
        sc.Fail("expected ':'");
        return fail();
      }
      FlatValue v;
      if (!sc.Value(&v)) return fail();
      member(key, v);
      if (sc.Eat(',')) continue;
      if (sc.Eat('}')) break;
      sc.Fail("expected ',' or '}'");
      return fail();
    }
  }
  sc.SkipWs();
  if (!sc.AtEnd()) {
    sc.Fail("text after the object");
    return fail();
  }
  return true;
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
