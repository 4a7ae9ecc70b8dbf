// Checks on JSON text made before it is parsed, and the one parse every reader of a user's
// JSON file can share. nlohmann::json builds one node per nesting level, so a few MB of
// "[[[[" from a hostile file would cost GBs in the parser, and the recursive copies and
// visits of the readers would overflow the stack: readers refuse such text first. nlohmann
// also throws two kinds of exception on bad text (parse_error, and out_of_range for a number
// beyond a double: 1e309) and quotes the offending token whole; ParseJsonText catches both
// and quotes a short excerpt. Pure functions, thread-safe.
#ifndef TRAINSCOPE_CORE_JSON_TEXT_H_
#define TRAINSCOPE_CORE_JSON_TEXT_H_

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace trainscope {

// Offset of the first '[' or '{' nested deeper than `max_depth` (brackets inside strings do
// not count), or std::string_view::npos when there is none.
size_t JsonNestingTooDeep(std::string_view text, int max_depth);

// Why ParseJsonText refused a text.
struct JsonTextError {
  size_t byte = 0;        // offset in the text where parsing stopped
  bool too_deep = false;  // nested deeper than max_depth (then `what` is empty)
  std::string what;       // nlohmann's message, at most a short excerpt of it
};

// Parses `text` as exactly one JSON document (trailing bytes other than white space are an
// error). Never throws. On failure returns false and fills *error when it is not null.
bool ParseJsonText(std::string_view text, int max_depth, nlohmann::json* out, JsonTextError* error);

// The same as a Status: InvalidArgument "<file>: JSON nested deeper than <max_depth> at byte
// <B>" or "<file>: not valid JSON at byte <B>: <what>", one line.
absl::StatusOr<nlohmann::json> ParseJsonText(std::string_view text, int max_depth,
                                             const std::string& file);

}  // namespace trainscope

#endif  // TRAINSCOPE_CORE_JSON_TEXT_H_
