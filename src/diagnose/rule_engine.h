// Evaluating a RuleSet (rules.h) over the facts diagnose collected: global facts, one fact
// set per metrics series, and the findings of trainscope documents.
// Thread-safety: pure function.
#ifndef TRAINSCOPE_SRC_DIAGNOSE_RULE_ENGINE_H_
#define TRAINSCOPE_SRC_DIAGNOSE_RULE_ENGINE_H_

#include <string>
#include <utility>
#include <vector>

#include "diagnose/facts.h"
#include "diagnose/rule_expr.h"
#include "trainscope/core/finding.h"
#include "trainscope/diagnose/rules.h"

namespace trainscope::diagnose {

namespace internal {
// A Rule's condition and its finding's templates, parsed. The templates are keyed by the
// Finding member they fill (&Finding::title, ...), so that the finding's fields are named
// in one place only (core/finding.h); a field the rule leaves out (evidence, where) has no
// entry and gets its default.
struct CompiledRule {
  Expr condition;
  std::vector<std::pair<std::string Finding::*, Template>> finding;
};
}  // namespace internal

struct EngineInput {
  Facts global;
  std::vector<Facts> runs;         // each with run.path (and run.rank when known)
  std::vector<Finding> documents;  // findings read from trainscope reports
};

// A finding with its place in the ranking: the rule's index in the file (most specific
// first), or `documents` order after every rule for a document finding no rule absorbed.
struct RankedFinding {
  int order = 0;
  Finding finding;
};

std::vector<RankedFinding> ApplyRules(const RuleSet& rules, const EngineInput& input);

}  // namespace trainscope::diagnose

#endif  // TRAINSCOPE_SRC_DIAGNOSE_RULE_ENGINE_H_
