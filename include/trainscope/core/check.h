// A self-check's result: the pass/fail row every selftest part reports and doctor collects
// (docs/formats.md "Doctor report": checks[]). The row is name, verdict, value and
// expected; what it means and what to do is the core Finding it holds (finding.h), so that
// a check's advice is a Finding's fix, as every other module's is.
// Thread-safety: plain values and pure functions.
#ifndef TRAINSCOPE_CORE_CHECK_H_
#define TRAINSCOPE_CORE_CHECK_H_

#include <string>

#include "nlohmann/json.hpp"
#include "trainscope/core/finding.h"

namespace trainscope {

struct Check {
  std::string name;     // "device.cpu.load", "comm", "env.check", ...
  std::string verdict;  // "pass", "warn", "fail", "skip"
  std::string value;
  std::string expected;
  // The check as a finding (MakeCheck): id the name; an error for "fail", a warning for
  // "warn", else info; title "<name> failed: <value>" ("warned", "passed", "skipped");
  // evidence the value, then " (expected <expected>)" when expected is not empty; fix the
  // advice ("advice" in the JSON; "" when there is nothing to do).
  Finding finding;
};

// A check with its finding filled in as above.
Check MakeCheck(std::string name, std::string verdict, std::string value, std::string expected,
                std::string advice = "");

// {"name", "verdict", "value", "expected", "advice"} (advice: finding.fix).
nlohmann::json CheckToJson(const Check& check);
// The inverse (through MakeCheck); a missing or non-string field reads as "".
Check CheckFromJson(const nlohmann::json& j);

}  // namespace trainscope

#endif  // TRAINSCOPE_CORE_CHECK_H_
