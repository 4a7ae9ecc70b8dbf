#include "trainscope/core/json_text.h"

#include <type_traits>

#include "absl/strings/str_cat.h"
#include "trainscope/core/utf8.h"

namespace trainscope {
namespace {

// nlohmann's DOM builder, told not to throw, that keeps where and why the parser stopped:
// the parser hands every error (a syntax error, or a number that overflows a double) to
// parse_error(), which here records it before the base class marks the result discarded.
class RecordingDomParser : public nlohmann::detail::json_sax_dom_parser<nlohmann::json> {
 public:
  explicit RecordingDomParser(nlohmann::json* root)
      : json_sax_dom_parser(*root, /*allow_exceptions=*/false) {}

  // `position` is where the parser stopped: the end of a number too large for a double (its
  // token, digits only, is the literal), whose start is the more useful offset.
  template <class Exception>
  bool parse_error(size_t position, const std::string& token, const Exception& ex) {
    constexpr bool kOutOfRange = std::is_same_v<Exception, nlohmann::detail::out_of_range>;
    byte_ = kOutOfRange && token.size() <= position ? position - token.size() : position;
    out_of_range_ = kOutOfRange;
    what_ = ex.what();
    return json_sax_dom_parser::parse_error(position, token, ex);
  }

  size_t byte() const { return byte_; }
  bool out_of_range() const { return out_of_range_; }
  const std::string& what() const { return what_; }

 private:
  size_t byte_ = 0;
  bool out_of_range_ = false;
  std::string what_;
};

// One pass over the text, before nlohmann builds anything: the nesting depth (brackets
// inside strings do not count), and every integer literal outside a string checked against
// the 64-bit range. nlohmann would store an integer beyond uint64 as a double, rounded; the
// policy refuses it instead. An integer of up to 18 digits always fits; one of 19 or 20
// digits is compared, as a string, with the bound of its sign (JSON forbids leading zeros,
// and nlohmann rejects those itself).
struct ScanResult {
  size_t byte = std::string_view::npos;  // npos: nothing found
  bool too_deep = false;
  std::string_view integer;  // the integer literal out of range, when not too_deep
};

bool IntegerFits(std::string_view digits, bool negative) {
  if (digits.size() < 19) return true;
  const std::string_view bound = negative ? "9223372036854775808" : "18446744073709551615";
  if (digits.size() != bound.size()) return digits.size() < bound.size();
  return digits <= bound;
}

ScanResult ScanJsonText(std::string_view text, int max_depth) {
  ScanResult r;
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character, whatever it is
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) {
        r.byte = i;
        r.too_deep = true;
        return r;
      }
    } else if (c == ']' || c == '}') {
      --depth;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      const size_t start = i;
      const bool negative = c == '-';
      size_t j = negative ? i + 1 : i;
      const size_t digits_start = j;
      while (j < text.size() && text[j] >= '0' && text[j] <= '9') ++j;
      const bool fraction_or_exponent =
          j < text.size() && (text[j] == '.' || text[j] == 'e' || text[j] == 'E');
      if (!fraction_or_exponent &&
          !IntegerFits(text.substr(digits_start, j - digits_start), negative)) {
        if (r.byte == std::string_view::npos) {  // keep looking: depth is reported first
          r.byte = start;
          r.integer = text.substr(start, j - start);
        }
      }
      while (j < text.size() && text[j] != ',' && text[j] != ']' && text[j] != '}' &&
             text[j] != '[' && text[j] != '{' && text[j] != '"' && text[j] != ' ' &&
             text[j] != '\n') {
        ++j;  // the rest of the number token (fraction, exponent)
      }
      i = j - 1;
    }
  }
  return r;
}

}  // namespace

size_t JsonNestingTooDeep(std::string_view text, int max_depth) {
  return ScanJsonText(text, max_depth).byte;
}

bool ParseJsonText(std::string_view text, int max_depth, nlohmann::json* out,
                   JsonTextError* error) {
  JsonTextError local;
  JsonTextError* e = error != nullptr ? error : &local;
  *e = JsonTextError();
  if (const ScanResult scan = ScanJsonText(text, max_depth); scan.byte != std::string_view::npos) {
    e->byte = scan.byte;
    e->too_deep = scan.too_deep;
    e->out_of_range = !scan.too_deep;
    if (!scan.too_deep) {
      e->what = absl::StrCat("number out of range: integer '", Excerpt(scan.integer, 40),
                             "' does not fit in 64 bits");
    }
    return false;
  }
  nlohmann::json doc;
  RecordingDomParser sax(&doc);
  bool ok = false;
  try {
    ok = nlohmann::json::sax_parse(text.begin(), text.end(), &sax,
                                   nlohmann::json::input_format_t::json, /*strict=*/true);
  } catch (const std::exception& ex) {  // not expected with allow_exceptions=false
    ok = false;
    e->what = Excerpt(ex.what(), 160);
    *out = nlohmann::json();
    return false;
  }
  if (!ok || sax.is_errored()) {
    e->byte = sax.byte();
    e->out_of_range = sax.out_of_range();
    e->what = Excerpt(sax.what(), 160);
    *out = nlohmann::json();
    return false;
  }
  *out = std::move(doc);
  return true;
}

absl::StatusOr<nlohmann::json> ParseJsonText(std::string_view text, int max_depth,
                                             const std::string& file) {
  nlohmann::json doc;
  JsonTextError e;
  if (ParseJsonText(text, max_depth, &doc, &e)) return doc;
  if (e.too_deep) {
    return absl::InvalidArgumentError(
        absl::StrCat(file, ": JSON nested deeper than ", max_depth, " at byte ", e.byte));
  }
  return absl::InvalidArgumentError(
      absl::StrCat(file, ": not valid JSON at byte ", e.byte, ": ", e.what));
}

}  // namespace trainscope
