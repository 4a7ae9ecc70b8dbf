// Valid UTF-8 for what we print and put into JSON. Names and text from user files (CSV
// headers, tensor names, trace names, paths, environment variables) can hold any bytes, and
// nlohmann::json::dump() throws on invalid UTF-8: every report sanitises through here.
// Pure functions, thread-safe.
#ifndef TRAINSCOPE_CORE_UTF8_H_
#define TRAINSCOPE_CORE_UTF8_H_

#include <string>
#include <string_view>

#include "nlohmann/json.hpp"

namespace trainscope {

// Length of the valid UTF-8 sequence at the start of `s` (RFC 3629: no overlong forms,
// surrogates or code points above U+10FFFF), 0 when it does not start with one.
size_t Utf8SequenceLength(std::string_view s);

// `s` with each byte that is not part of a valid sequence replaced by U+FFFD.
std::string ValidUtf8(std::string_view s);

// `s` as it may be quoted in an error message: whole (as valid UTF-8) when it has at most
// `max_bytes` bytes, else its first `max_bytes` bytes (cut at a character boundary) followed
// by "... (N bytes)". Input values echoed in errors go through here, so a 1 MB field costs
// one short line on stderr, not 1 MB.
std::string Excerpt(std::string_view s, size_t max_bytes = 60);

// Makes every string and key of `doc` valid UTF-8, in place.
void SanitizeUtf8(nlohmann::json* doc);

}  // namespace trainscope

#endif  // TRAINSCOPE_CORE_UTF8_H_
