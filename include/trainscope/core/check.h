// A self-check's finding: the one shape every selftest part reports and doctor collects
// (docs/formats.md "Doctor report": checks[]).
#ifndef TRAINSCOPE_CORE_CHECK_H_
#define TRAINSCOPE_CORE_CHECK_H_

#include <string>

#include "nlohmann/json.hpp"

namespace trainscope {

struct Check {
  std::string name;
  std::string verdict;  // "pass", "warn", "fail", "skip"
  std::string value;
  std::string expected;
  std::string advice;
};

// {"name", "verdict", "value", "expected", "advice"}.
nlohmann::json CheckToJson(const Check& check);
// The inverse; a missing or non-string field reads as "".
Check CheckFromJson(const nlohmann::json& j);

}  // namespace trainscope

#endif  // TRAINSCOPE_CORE_CHECK_H_
