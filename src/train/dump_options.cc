// Options of the trainer's op dumps (trainscope/train/dump.h); libtorch-free.
#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "trainscope/train/dump.h"

namespace trainscope::train {

namespace {

bool ParseStep(absl::string_view s, int* out) {
  return absl::SimpleAtoi(absl::StripAsciiWhitespace(s), out) && *out >= 1;
}

}  // namespace

absl::StatusOr<std::vector<int>> ParseDumpSteps(std::string_view text) {
  std::vector<int> steps;
  for (absl::string_view part : absl::StrSplit(absl::string_view(text.data(), text.size()), ',')) {
    auto bad = [&] {
      return absl::InvalidArgumentError(
          absl::StrCat("--dump: \"", part, "\" is not a step (>= 1) or a range A-B of steps"));
    };
    std::vector<absl::string_view> ends = absl::StrSplit(part, absl::MaxSplits('-', 1));
    int a = 0, b = 0;
    if (!ParseStep(ends[0], &a)) return bad();
    b = a;
    if (ends.size() == 2 && (!ParseStep(ends[1], &b) || b < a)) return bad();
    if (b - a > 100000) return bad();
    for (int64_t s = a; s <= b; ++s) steps.push_back(static_cast<int>(s));  // b may be INT_MAX
  }
  std::sort(steps.begin(), steps.end());
  steps.erase(std::unique(steps.begin(), steps.end()), steps.end());
  return steps;
}

absl::Status ValidateDumpOptions(const DumpOptions& options, int total_steps) {
  if (options.mode != "statistics" && options.mode != "tensor" && options.mode != "md5") {
    return absl::InvalidArgumentError(
        absl::StrCat("--dump-mode: \"", options.mode, "\" is not one of statistics, tensor, md5"));
  }
  if (options.level != "L0" && options.level != "mix") {
    return absl::InvalidArgumentError(
        absl::StrCat("--dump-level: \"", options.level, "\" is not one of L0, mix"));
  }
  if (total_steps > 0 && !options.steps.empty() && options.steps.back() > total_steps) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--dump: step ", options.steps.back(), " is past the run's last step (", total_steps, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<DumpOptions> ResolveDumpOptions(std::string_view steps, DumpOptions mode_and_level,
                                               int total_steps) {
  DumpOptions o = std::move(mode_and_level);
  o.steps.clear();
  if (!steps.empty()) {
    absl::StatusOr<std::vector<int>> parsed = ParseDumpSteps(steps);
    if (!parsed.ok()) return parsed.status();
    o.steps = *std::move(parsed);
  }
  if (absl::Status st = ValidateDumpOptions(o, total_steps); !st.ok()) return st;
  return o;
}

}  // namespace trainscope::train
