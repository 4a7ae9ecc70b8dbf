// ParseInputFormat (reader.h): the one mapping of --format names to InputFormat.
#include <string>

#include "absl/strings/str_cat.h"
#include "trainscope/data/reader.h"

namespace trainscope::data {

absl::StatusOr<InputFormat> ParseInputFormat(const std::string& name) {
  if (name == "auto") return InputFormat::kAuto;
  if (name == "jsonl") return InputFormat::kJsonl;
  if (name == "text") return InputFormat::kText;
  if (name == "megatron") return InputFormat::kMegatron;
  return absl::InvalidArgumentError(
      absl::StrCat("format '", name, "': expected auto, jsonl, text or megatron"));
}

}  // namespace trainscope::data
