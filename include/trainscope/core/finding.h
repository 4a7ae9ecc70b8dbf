// One vocabulary for "what is wrong, the evidence, what to do": the Finding every analysis
// module reports (env check, trace analyze, hang analyze, diagnose) and doctor collects.
// core::Check (check.h) stays the shape of a pass/fail row of a self-test; a Finding is a
// problem (or a note) with its evidence and fix.
//
// Each module exports `FindingsFrom(its report)` returning std::vector<Finding>, so that a
// caller (diagnose, doctor) can rank findings from several modules together.
// Thread-safety: plain values and pure functions.
#ifndef TRAINSCOPE_CORE_FINDING_H_
#define TRAINSCOPE_CORE_FINDING_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json_fwd.hpp"

namespace trainscope {

// Most severe first: the enum order is the sort order.
enum class Severity { kError, kWarning, kInfo };

// "error", "warning", "info".
const char* SeverityName(Severity s);
// The inverse; false (and *out untouched) for any other string.
bool ParseSeverity(std::string_view name, Severity* out);

struct Finding {
  Severity severity = Severity::kInfo;
  std::string id;        // stable, dotted or snake_case: "limits.memlock", "straggler", ...
  std::string title;     // one sentence: what is wrong
  std::string evidence;  // the numbers that show it
  std::string fix;       // what to do
  std::string where;     // the file, step or object it concerns; "" for the whole input
  int rank = -1;         // the rank it concerns; -1 for none or all
};

// A Finding's fixed parts as constants, for a module's table of rules (a constexpr array of
// rows, each naming the finding it produces); the evidence and where are known only when a
// row matches: ToFinding.
struct FindingText {
  Severity severity;
  const char* id;
  const char* title;
  const char* fix;
};

Finding ToFinding(const FindingText& text, std::string evidence, std::string where = "");

// {"severity", "id", "title", "evidence", "fix"} plus "where" when not empty and "rank" when
// >= 0 (the "trainscope.finding" shape, docs/formats.md).
nlohmann::json FindingToJson(const Finding& finding);

// The inverse. InvalidArgument naming the field when "severity" is not one of the three
// names or "id"/"title" are missing or not strings; other fields default to ""/-1.
absl::StatusOr<Finding> FindingFromJson(const nlohmann::json& j);

// Stable sort by severity (errors first); the order within a severity is kept, so a module
// that lists its most specific finding first keeps it first.
void SortFindings(std::vector<Finding>* findings);

// The number of findings of a severity.
int CountFindings(const std::vector<Finding>& findings, Severity severity);

}  // namespace trainscope

#endif  // TRAINSCOPE_CORE_FINDING_H_
