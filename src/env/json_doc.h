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
#include "trainscope/core/os.h"

namespace trainscope::env {

// Parses `text`; on a syntax error InvalidArgument "NAME:LINE:COL: reason".
absl::StatusOr<nlohmann::json> ParseJsonText(absl::string_view text, const std::string& name);

// Reads and parses a file through `os`. NotFound / PermissionDenied name the path.
absl::StatusOr<nlohmann::json> ReadJsonFile(Os* os, const std::string& path);

// Checks `doc` against `schema`. OK, or InvalidArgument "NAME: $.a.b[2]: reason" for the
// first violation found (depth-first, properties in document order).
absl::Status ValidateAgainstSchema(const nlohmann::json& doc, const nlohmann::json& schema,
                                   const std::string& name);

}  // namespace trainscope::env

#endif  // TRAINSCOPE_SRC_ENV_JSON_DOC_H_
