#include "trainscope/core/check.h"

#include "absl/strings/str_cat.h"

namespace trainscope {
namespace {

// "failed", "warned", "passed", "skipped"; any other verdict as it is.
std::string VerdictVerb(const std::string& verdict) {
  if (verdict == "fail") return "failed";
  if (verdict == "warn") return "warned";
  if (verdict == "pass") return "passed";
  if (verdict == "skip") return "skipped";
  return verdict;
}

}  // namespace

Check MakeCheck(std::string name, std::string verdict, std::string value, std::string expected,
                std::string advice) {
  Check c;
  c.finding.severity = verdict == "fail"   ? Severity::kError
                       : verdict == "warn" ? Severity::kWarning
                                           : Severity::kInfo;
  c.finding.id = name;
  c.finding.title = absl::StrCat(name, " ", VerdictVerb(verdict), ": ", value);
  c.finding.evidence = expected.empty() ? value : absl::StrCat(value, " (expected ", expected, ")");
  c.finding.fix = std::move(advice);
  c.name = std::move(name);
  c.verdict = std::move(verdict);
  c.value = std::move(value);
  c.expected = std::move(expected);
  return c;
}

nlohmann::json CheckToJson(const Check& c) {
  return {{"name", c.name},
          {"verdict", c.verdict},
          {"value", c.value},
          {"expected", c.expected},
          {"advice", c.finding.fix}};
}

Check CheckFromJson(const nlohmann::json& j) {
  auto str = [&](const char* key) {
    auto it = j.find(key);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  return MakeCheck(str("name"), str("verdict"), str("value"), str("expected"), str("advice"));
}

}  // namespace trainscope
