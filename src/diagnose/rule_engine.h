// Evaluating a RuleSet (rules.h) over the facts diagnose collected: global facts, one fact
// set per metrics series, and the findings of trainscope documents.
// Thread-safety: pure function.
#ifndef TRAINSCOPE_SRC_DIAGNOSE_RULE_ENGINE_H_
#define TRAINSCOPE_SRC_DIAGNOSE_RULE_ENGINE_H_

#include <vector>

#include "diagnose/facts.h"
#include "diagnose/rule_expr.h"
#include "trainscope/core/finding.h"
#include "trainscope/diagnose/rules.h"

namespace trainscope::diagnose {

namespace internal {
struct CompiledRule {
  Expr condition;
  Template title, fix, evidence, where;
  bool has_evidence = false, has_where = false;
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
