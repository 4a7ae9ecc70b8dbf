// The condition language of diagnose rules (docs/formats.md "Diagnose rules") and the
// templates of their title, evidence, where and fix:
//
//   expr    := or
//   or      := and { ("or" | "||") and }
//   and     := unary { ("and" | "&&") unary }
//   unary   := ("not" | "!") unary | compare
//   compare := primary [ ("==" | "!=" | "<" | "<=" | ">" | ">=") primary ]
//   primary := NUMBER | "STRING" | true | false | FACT | has(FACT) | finding("GLOB")
//            | "(" expr ")"
//
// FACT is a dotted name from the fact catalog (facts.h); every fact has a type (number,
// string or bool) and the parser checks types: ordering compares numbers, == and != compare
// values of one type, and/or/not take booleans, the whole condition is a boolean.
// Evaluation is three-valued (Kleene): a fact the evidence does not provide is unknown, a
// comparison with an unknown is unknown, `not unknown` is unknown, `false and unknown` is
// false, `true or unknown` is true; a rule fires only when its condition is true.
// `has(FACT)` is true when the fact is known. `finding("GLOB")` is true when the document
// finding in hand (a finding-scope rule, see rules.h) has an id matching GLOB (`*` matches
// any run of characters).
// Thread-safety: parsed expressions are immutable and may be evaluated concurrently.
#ifndef TRAINSCOPE_SRC_DIAGNOSE_RULE_EXPR_H_
#define TRAINSCOPE_SRC_DIAGNOSE_RULE_EXPR_H_

#include <functional>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "diagnose/facts.h"

namespace trainscope::diagnose::internal {

struct ExprNode;

// A parsed, type-checked condition.
struct Expr {
  std::shared_ptr<const ExprNode> root;
  std::set<std::string> facts;     // fact names used
  std::vector<std::string> globs;  // finding("...") patterns used
  bool uses_finding() const { return !globs.empty(); }
};

// What an evaluation sees: the facts, and (finding-scope rules) the id of the document
// finding in hand ("" for none).
struct EvalContext {
  const Facts* facts = nullptr;
  std::string_view finding_id;
};

// Parses and type-checks `text`. InvalidArgument "position P: reason" (P from 1) for bad
// syntax, an unknown fact or function, or a type mismatch.
absl::StatusOr<Expr> ParseExpr(std::string_view text);

// The condition's value: true, false, or unknown (a fact missing); fires only on true.
enum class Tri { kFalse, kTrue, kUnknown };
Tri Evaluate(const Expr& expr, const EvalContext& ctx);

// `*` matches any run of characters; everything else literally.
bool GlobMatch(std::string_view glob, std::string_view text);

// A template: text with {FACT} or {FACT:FORMAT} placeholders, FORMAT one of "%" (a share as
// a percentage), "g" (4 significant digits, the default for numbers), "bytes", "int".
// Parses and checks the names; InvalidArgument "position P: reason" naming the placeholder.
struct Template {
  struct Part {
    std::string literal;  // when name is empty
    std::string name, format;
  };
  std::vector<Part> parts;
  std::set<std::string> facts;
};
absl::StatusOr<Template> ParseTemplate(std::string_view text);

// The text with each placeholder replaced by the fact's value ("?" when unknown).
std::string Render(const Template& t, const Facts& facts);
// The text with each placeholder shown as `<name>`, in backticks (for the quick reference).
std::string RenderForDoc(const Template& t);
// One value formatted as a placeholder format says.
std::string FormatValue(const Value& v, std::string_view format);

}  // namespace trainscope::diagnose::internal

#endif  // TRAINSCOPE_SRC_DIAGNOSE_RULE_EXPR_H_
