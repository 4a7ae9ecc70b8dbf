// Diagnose rules as data: what `trainscope diagnose` concludes from the facts it collected
// (metrics, data scan, trace analysis, hang analysis, doctor, env, checkpoints, curve class)
// is written in a rule file, not in code. The bundled file, data/diagnose/rules.json, is
// compiled into the binary; `trainscope diagnose --rules FILE` uses another one.
//
// Schema (docs/formats.md "Diagnose rules"): {"format": "trainscope.diagnose.rules",
// "version": 1, "rules": [RULE...]}, each RULE an object with exactly these keys:
//   id         unique, [a-z0-9_.]+; the id of the findings it produces
//   layer      env | data | model | framework | comm | performance
//   severity   error | warning | info | inherit (the matched document finding's; only with
//              finding() in the condition)
//   needs      the facts the rule reads (facts.h catalog); every fact the condition and the
//              templates use must be listed
//   condition  the expression language of src/diagnose/rule_expr.h
//   symptom, cause, check   plain text for the quick reference (what one sees, why, how to
//              confirm)
//   title, fix  templates ({fact} placeholders) for the finding and the quick reference
//   evidence, where (optional)  templates; default evidence "fact = value, ..." of `needs`,
//              default where the run's file, the document finding's report, or ""
// Rules are listed most specific first: that order ranks findings of one severity.
//
// Scope, decided at load: a rule whose condition calls finding() is evaluated once per
// document finding (env check, trace analysis, doctor, hang analysis) and absorbs the ones
// it fires on (they are reported through the rule, not twice; the first such rule in file
// order wins); a rule that reads run.* or curve.* facts is evaluated per metrics series;
// any other rule once over the global facts.
// Thread-safety: a RuleSet is immutable after loading.
#ifndef TRAINSCOPE_DIAGNOSE_RULES_H_
#define TRAINSCOPE_DIAGNOSE_RULES_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "trainscope/core/finding.h"
#include "trainscope/core/formats.h"
#include "trainscope/core/os.h"

namespace trainscope::diagnose {

namespace internal {
struct CompiledRule;
}

inline constexpr const char* kRulesFormat = formats::kDiagnoseRules;
inline constexpr const char* kRuleLayers[] = {"env",       "data", "model",
                                              "framework", "comm", "performance"};

struct Rule {
  enum class Scope { kGlobal, kRun, kFinding };
  std::string id, layer;
  std::string severity;  // error | warning | info | inherit, as written in the file
  std::vector<std::string> needs;
  std::string condition, symptom, cause, check;
  // The finding it produces, as templates ({fact} placeholders): title and fix always,
  // evidence and where "" when the rule leaves them to the default. Its id is the rule's;
  // severity and rank are decided when the rule fires.
  Finding finding;
  Scope scope = Scope::kGlobal;
  std::shared_ptr<const internal::CompiledRule> compiled;  // parsed condition and templates
};

struct RuleSet {
  std::string source;  // the file, or "bundled"
  std::vector<Rule> rules;
};

// Parses and validates a rule file's text. InvalidArgument "SOURCE: reason" for JSON syntax
// (with the byte offset) or a wrong format/version; "SOURCE: rule ID (#N): field F: reason"
// for a missing or unknown field, a duplicate id, an unknown layer, severity or fact, a
// condition that does not parse or type-check (with the position), a fact used but not in
// `needs`, severity inherit without finding(), or finding() mixed with run facts.
absl::StatusOr<RuleSet> ParseRules(const std::string& source, std::string_view text);

// The bundled rules (`path` empty) or a file's, read through `os` (a FakeOs in tests).
// NotFound / InvalidArgument naming the file.
absl::StatusOr<RuleSet> LoadRules(const std::string& path = "", Os* os = Os::Default());

// The text of data/diagnose/rules.json as built in.
std::string_view BundledRulesText();

// docs/quick-reference.md: per layer, a table symptom -> likely cause -> check -> fix of
// every rule, then the facts the rules may read. Deterministic (a test compares it with the
// committed file).
std::string QuickReferenceMarkdown(const RuleSet& rules);

}  // namespace trainscope::diagnose

#endif  // TRAINSCOPE_DIAGNOSE_RULES_H_
