// Finding <-> JSON and ordering (one shape for every module's findings).
#include "trainscope/core/finding.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"

namespace trainscope {

const char* SeverityName(Severity s) {
  switch (s) {
    case Severity::kError:
      return "error";
    case Severity::kWarning:
      return "warning";
    case Severity::kInfo:
      break;
  }
  return "info";
}

bool ParseSeverity(std::string_view name, Severity* out) {
  for (Severity s : {Severity::kError, Severity::kWarning, Severity::kInfo}) {
    if (name == SeverityName(s)) {
      *out = s;
      return true;
    }
  }
  return false;
}

nlohmann::json FindingToJson(const Finding& f) {
  nlohmann::json j = {{"severity", SeverityName(f.severity)},
                      {"id", f.id},
                      {"title", f.title},
                      {"evidence", f.evidence},
                      {"fix", f.fix}};
  if (!f.where.empty()) j["where"] = f.where;
  if (f.rank >= 0) j["rank"] = f.rank;
  return j;
}

absl::StatusOr<Finding> FindingFromJson(const nlohmann::json& j) {
  if (!j.is_object()) return absl::InvalidArgumentError("finding: not a JSON object");
  Finding f;
  auto sev = j.find("severity");
  if (sev == j.end() || !sev->is_string() ||
      !ParseSeverity(sev->get_ref<const std::string&>(), &f.severity)) {
    return absl::InvalidArgumentError(
        "finding: \"severity\" must be one of \"error\", \"warning\", \"info\"");
  }
  for (const char* key : {"id", "title"}) {
    auto it = j.find(key);
    if (it == j.end() || !it->is_string()) {
      return absl::InvalidArgumentError(std::string("finding: \"") + key +
                                        "\" is missing or not a string");
    }
  }
  f.id = j["id"].get<std::string>();
  f.title = j["title"].get<std::string>();
  auto str = [&](const char* key) {
    auto it = j.find(key);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  f.evidence = str("evidence");
  f.fix = str("fix");
  f.where = str("where");
  auto rank = j.find("rank");
  if (rank != j.end() && rank->is_number_integer()) f.rank = rank->get<int>();
  return f;
}

Finding ToFinding(const FindingText& text, std::string evidence, std::string where) {
  Finding f;
  f.severity = text.severity;
  f.id = text.id;
  f.title = text.title;
  f.evidence = std::move(evidence);
  f.fix = text.fix;
  f.where = std::move(where);
  return f;
}

void SortFindings(std::vector<Finding>* findings) {
  std::stable_sort(findings->begin(), findings->end(), [](const Finding& a, const Finding& b) {
    return static_cast<int>(a.severity) < static_cast<int>(b.severity);
  });
}

int CountFindings(const std::vector<Finding>& findings, Severity severity) {
  return static_cast<int>(std::count_if(findings.begin(), findings.end(),
                                        [&](const Finding& f) { return f.severity == severity; }));
}

}  // namespace trainscope
