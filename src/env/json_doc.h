// Reading the JSON documents env works with (fingerprints, the compatibility matrix) with
// errors a user can act on: "file:line:col: what" for syntax, "file: $.path: what" for
// documents that do not fit their schema. The schema language is the subset of JSON
// Schema the shipped schemas use: type, properties, required, additionalProperties,
// items, enum, const, minimum, pattern, anyOf, $ref to "#/$defs/<name>".
#ifndef TRAINSCOPE_SRC_ENV_JSON_DOC_H_
#define TRAINSCOPE_SRC_ENV_JSON_DOC_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"
#include "trainscope/core/json_text.h"
#include "trainscope/core/os.h"
#include "trainscope/core/utf8.h"

namespace trainscope::env {

// Limits on what a user-supplied document (fingerprint, matrix) may ask of us: its size in
// bytes, its nesting depth, and the length of a string a schema "pattern" is matched on
// (std::regex recurses per character: a 100 KB string overflows the stack).
inline constexpr size_t kMaxJsonDocumentBytes = size_t{16} << 20;  // 16 MiB
inline constexpr int kMaxJsonDepth = kJsonMaxDepth;                // the shared limit
inline constexpr size_t kMaxPatternInputBytes = 4096;

// Parses `text`. Never throws: a syntax error, a number out of range (1e309), or nesting
// deeper than kMaxJsonDepth is InvalidArgument "NAME:LINE:COL: reason (byte N)", N the
// 0-based offset of the offending byte.
absl::StatusOr<nlohmann::json> ParseJsonText(absl::string_view text, const std::string& name);

// Reads and parses a file through `os`. NotFound / PermissionDenied name the path;
// InvalidArgument for a directory, a FIFO, device or socket (refused without reading or
// blocking), or a file over kMaxJsonDocumentBytes. Through Os::Default() the file is read
// here with those checks (Os has no bounded read); through another Os (a fake) it is read
// whole and then size-checked.
absl::StatusOr<nlohmann::json> ReadJsonFile(Os* os, const std::string& path);

// ValidUtf8 / SanitizeUtf8 (core/utf8.h), used throughout env.
using ::trainscope::SanitizeUtf8;
using ::trainscope::ValidUtf8;

// Checks `doc` against `schema`. OK, or InvalidArgument "NAME: $.a.b[2]: reason" for the
// first violation found (depth-first, properties in document order).
absl::Status ValidateAgainstSchema(const nlohmann::json& doc, const nlohmann::json& schema,
                                   const std::string& name);

}  // namespace trainscope::env

#endif  // TRAINSCOPE_SRC_ENV_JSON_DOC_H_
