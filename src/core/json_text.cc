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
    what_ = ex.what();
    return json_sax_dom_parser::parse_error(position, token, ex);
  }

  size_t byte() const { return byte_; }
  const std::string& what() const { return what_; }

 private:
  size_t byte_ = 0;
  std::string what_;
};

}  // namespace

size_t JsonNestingTooDeep(std::string_view text, int max_depth) {
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
      if (++depth > max_depth) return i;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return std::string_view::npos;
}

bool ParseJsonText(std::string_view text, int max_depth, nlohmann::json* out,
                   JsonTextError* error) {
  JsonTextError local;
  JsonTextError* e = error != nullptr ? error : &local;
  *e = JsonTextError();
  if (size_t deep = JsonNestingTooDeep(text, max_depth); deep != std::string_view::npos) {
    e->byte = deep;
    e->too_deep = true;
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
