// Checks on JSON text made before it is parsed, and the one parse every reader of a user's
// JSON file can share. nlohmann::json builds one node per nesting level, so a few MB of
// "[[[[" from a hostile file would cost GBs in the parser, and the recursive copies and
// visits of the readers would overflow the stack: readers refuse such text first. nlohmann
// also throws two kinds of exception on bad text (parse_error, and out_of_range for a number
// beyond a double: 1e309) and quotes the offending token whole; ParseJsonText catches both
// and quotes a short excerpt. Pure functions, thread-safe.
//
// The policy every JSON reader in trainscope follows (docs/errors.md, "JSON input"):
//   depth    no text nests deeper than kJsonMaxDepth arrays/objects; deeper text is refused
//            before a tree is built.
//   numbers  a number must fit the type it is stored as: a literal with a fraction or an
//            exponent must be finite as a double (1e309 is refused; 1e-400 underflows to 0
//            as strtod rounds it), an integer literal must fit int64 or uint64, i.e. lie in
//            [-2^63, 2^64-1] (an integer beyond is refused instead of being silently rounded
//            to a double).
//   result   a whole file that breaks either rule is InvalidArgument, one line naming the file
//            and the byte; a record stream (JSONL) counts the line as malformed and goes on.
// simdjson readers follow the same rules in their own way. A DOM parse (report's metrics
// lines) refuses a number beyond a double or 64 bits and, its max_depth set to kJsonMaxDepth,
// deeper text: the line is counted malformed. An ondemand reader (trace events, data corpora)
// builds no tree: it checks each value it reads (a trace's ts beyond range is counted under
// bad_ts, a corpus line that is not an object under invalid_json) and skips the values it does
// not read in constant stack, whatever their depth or digits.
#ifndef TRAINSCOPE_CORE_JSON_TEXT_H_
#define TRAINSCOPE_CORE_JSON_TEXT_H_

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace trainscope {

// The one nesting limit: the files trainscope reads nest under 10 deep (traces, tokenizer.json,
// checkpoint metadata, configs, dumps); anything deeper than this is not one of them.
inline constexpr int kJsonMaxDepth = 64;

// Offset of the first '[' or '{' nested deeper than `max_depth` (brackets inside strings do
// not count), or std::string_view::npos when there is none.
size_t JsonNestingTooDeep(std::string_view text, int max_depth);

// Why ParseJsonText refused a text.
struct JsonTextError {
  size_t byte = 0;            // offset in the text where parsing stopped
  bool too_deep = false;      // nested deeper than max_depth (then `what` is empty)
  bool out_of_range = false;  // a number the policy above refuses (1e309, 2^64)
  std::string what;           // nlohmann's message, at most a short excerpt of it
};

// Parses `text` as exactly one JSON document (trailing bytes other than white space are an
// error) under the policy above. Never throws. On failure returns false and fills *error
// when it is not null; `byte` is where the offending number starts for a number out of range.
bool ParseJsonText(std::string_view text, int max_depth, nlohmann::json* out, JsonTextError* error);

// One record of a record stream (a JSONL line) under the policy, kJsonMaxDepth deep: false
// when the reader should count the line as malformed.
inline bool ParseJsonRecord(std::string_view line, nlohmann::json* out) {
  return ParseJsonText(line, kJsonMaxDepth, out, nullptr);
}

// The same as a Status: InvalidArgument "<file>: JSON nested deeper than <max_depth> at byte
// <B>" or "<file>: not valid JSON at byte <B>: <what>", one line.
absl::StatusOr<nlohmann::json> ParseJsonText(std::string_view text, int max_depth,
                                             const std::string& file);

// j[key] when j is an object whose member `key` has T's JSON type, else `fallback`. A member
// of another type ("rank": {}, "id": 5) reads as absent instead of throwing nlohmann's
// type_error from value() (an exit 3 on a user's file). T: bool, std::string, an integer
// type (an integer literal in T's range), double (any number), or nlohmann::json (any value).
template <typename T>
T JsonValueOr(const nlohmann::json& j, std::string_view key, T fallback) {
  if (!j.is_object()) return fallback;
  auto it = j.find(key);
  if (it == j.end()) return fallback;
  if constexpr (std::is_same_v<T, nlohmann::json>) {
    return *it;
  } else if constexpr (std::is_same_v<T, bool>) {
    return it->is_boolean() ? it->template get<bool>() : fallback;
  } else if constexpr (std::is_same_v<T, std::string>) {
    return it->is_string() ? it->template get<std::string>() : fallback;
  } else if constexpr (std::is_floating_point_v<T>) {
    return it->is_number() ? it->template get<T>() : fallback;
  } else {
    static_assert(std::is_integral_v<T>, "JsonValueOr: bool, string, number or json");
    if (it->is_number_unsigned()) {
      const auto v = it->template get<uint64_t>();
      return v <= static_cast<uint64_t>(std::numeric_limits<T>::max()) ? static_cast<T>(v)
                                                                       : fallback;
    }
    if (it->is_number_integer()) {
      const auto v = it->template get<int64_t>();
      return v >= static_cast<int64_t>(std::numeric_limits<T>::min()) &&
                     (v < 0 || static_cast<uint64_t>(v) <=
                                   static_cast<uint64_t>(std::numeric_limits<T>::max()))
                 ? static_cast<T>(v)
                 : fallback;
    }
    return fallback;
  }
}

// String literals read as std::string.
inline std::string JsonValueOr(const nlohmann::json& j, std::string_view key,
                               const char* fallback) {
  return JsonValueOr<std::string>(j, key, std::string(fallback));
}

}  // namespace trainscope

#endif  // TRAINSCOPE_CORE_JSON_TEXT_H_
