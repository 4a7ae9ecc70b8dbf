// Rule files (rules.h): load and validate, evaluate (rule_engine.h), and the quick reference.
#include "trainscope/diagnose/rules.h"

#include <algorithm>
#include <map>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "diagnose/rule_engine.h"
#include "nlohmann/json.hpp"
#include "trainscope/core/json_text.h"
#include "trainscope/diagnose/series.h"

namespace trainscope::diagnose {

extern const char kBundledDiagnoseRules[];  // bundled_rules.cc, generated

namespace {

using nlohmann::json;

const char* const kRuleRequired[] = {"id",      "layer", "severity", "needs", "condition",
                                     "symptom", "cause", "check",    "title", "fix"};
const char* const kRuleOptional[] = {"evidence", "where"};

bool RuleIdOk(const std::string& id) {
  if (id.empty()) return false;
  for (char c : id)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.')) return false;
  return true;
}

// One rule object into *r; the error names the field.
absl::Status RulesParseOne(const json& j, Rule* r, std::string* field) {
  if (!j.is_object()) return *field = "", absl::InvalidArgumentError("not an object");
  for (auto it = j.begin(); it != j.end(); ++it) {
    bool known =
        std::find_if(std::begin(kRuleRequired), std::end(kRuleRequired),
                     [&](const char* k) { return it.key() == k; }) != std::end(kRuleRequired) ||
        std::find_if(std::begin(kRuleOptional), std::end(kRuleOptional),
                     [&](const char* k) { return it.key() == k; }) != std::end(kRuleOptional);
    if (!known) return *field = it.key(), absl::InvalidArgumentError("unknown field");
  }
  for (const char* k : kRuleRequired) {
    if (!j.contains(k)) return *field = k, absl::InvalidArgumentError("missing");
  }
  auto str = [&](const char* k, std::string* out) -> absl::Status {
    auto it = j.find(k);
    if (it == j.end()) return absl::OkStatus();
    if (!it->is_string() || it->get<std::string>().empty())
      return *field = k, absl::InvalidArgumentError("must be a non-empty string");
    *out = it->get<std::string>();
    return absl::OkStatus();
  };
  for (auto [k, out] : {std::pair{"id", &r->id},
                        {"layer", &r->layer},
                        {"severity", &r->severity},
                        {"condition", &r->condition},
                        {"symptom", &r->symptom},
                        {"cause", &r->cause},
                        {"check", &r->check},
                        {"title", &r->finding.title},
                        {"fix", &r->finding.fix},
                        {"evidence", &r->finding.evidence},
                        {"where", &r->finding.where}}) {
    if (absl::Status s = str(k, out); !s.ok()) return s;
  }
  if (!RuleIdOk(r->id)) return *field = "id", absl::InvalidArgumentError("must match [a-z0-9_.]+");
  if (std::find_if(std::begin(kRuleLayers), std::end(kRuleLayers),
                   [&](const char* l) { return r->layer == l; }) == std::end(kRuleLayers)) {
    return *field = "layer",
           absl::InvalidArgumentError(
               absl::StrCat("\"", r->layer, "\" is not one of ",
                            absl::StrJoin(std::begin(kRuleLayers), std::end(kRuleLayers), ", ")));
  }
  Severity sev;
  if (r->severity != "inherit" && !ParseSeverity(r->severity, &sev))
    return *field = "severity",
           absl::InvalidArgumentError("must be error, warning, info or inherit");
  const json& needs = j["needs"];
  if (!needs.is_array() || needs.empty())
    return *field = "needs", absl::InvalidArgumentError("must be a non-empty list of fact names");
  for (const json& n : needs) {
    if (!n.is_string()) return *field = "needs", absl::InvalidArgumentError("must list strings");
    if (!FindFact(n.get<std::string>()))
      return *field = "needs", absl::InvalidArgumentError(
                                   absl::StrCat("unknown fact \"", n.get<std::string>(), "\""));
    r->needs.push_back(n.get<std::string>());
  }
  r->finding.id = r->id;
  auto compiled = std::make_shared<internal::CompiledRule>();
  absl::StatusOr<internal::Expr> cond = internal::ParseExpr(r->condition);
  if (!cond.ok()) return *field = "condition", cond.status();
  compiled->condition = *cond;
  std::set<std::string> used = cond->facts;
  for (auto [k, member] : {std::pair{"title", &Finding::title},
                           {"fix", &Finding::fix},
                           {"evidence", &Finding::evidence},
                           {"where", &Finding::where}}) {
    const std::string& src = r->finding.*member;
    if (src.empty()) continue;  // evidence, where: the default
    absl::StatusOr<internal::Template> t = internal::ParseTemplate(src);
    if (!t.ok()) return *field = k, t.status();
    used.insert(t->facts.begin(), t->facts.end());
    compiled->finding.emplace_back(member, *std::move(t));
  }
  for (const std::string& u : used) {
    if (std::find(r->needs.begin(), r->needs.end(), u) == r->needs.end())
      return *field = "needs",
             absl::InvalidArgumentError(absl::StrCat("\"", u, "\" is used but not listed"));
  }
  bool run = false, finding_facts = false;
  for (const std::string& n : r->needs) {
    FactScope s = FindFact(n)->scope;
    run |= s == FactScope::kRun;
    finding_facts |= s == FactScope::kFinding;
  }
  if (cond->uses_finding()) {
    if (run)
      return *field = "condition",
             absl::InvalidArgumentError("finding() cannot be combined with run facts");
    r->scope = Rule::Scope::kFinding;
  } else {
    if (finding_facts)
      return *field = "needs",
             absl::InvalidArgumentError("finding.* facts need finding() in the condition");
    if (r->severity == "inherit")
      return *field = "severity",
             absl::InvalidArgumentError("inherit needs finding() in the condition");
    r->scope = run ? Rule::Scope::kRun : Rule::Scope::kGlobal;
  }
  r->compiled = std::move(compiled);
  return absl::OkStatus();
}

std::string RulesCell(std::string s) { return absl::StrReplaceAll(s, {{"|", "\\|"}, {"\n", " "}}); }

// --- evaluation ---

std::string RulesDefaultEvidence(const Rule& r, const Facts& facts) {
  std::vector<std::string> parts;
  for (const std::string& n : r.needs) {
    auto it = facts.find(n);
    if (it == facts.end() || it->second.kind == Value::kUnknown) continue;
    parts.push_back(absl::StrCat(n, " = ", internal::FormatValue(it->second, "")));
  }
  return absl::StrJoin(parts, ", ");
}

Finding RulesProduce(const Rule& r, const Facts& facts, const std::string& default_where, int rank,
                     Severity inherited) {
  Finding f;
  if (r.severity == "inherit") {
    f.severity = inherited;
  } else {
    ParseSeverity(r.severity, &f.severity);
  }
  f.id = r.id;
  // The defaults first; each field the rule has a template for replaces its default.
  if (r.finding.evidence.empty()) f.evidence = RulesDefaultEvidence(r, facts);
  f.where = default_where;
  for (const auto& [member, t] : r.compiled->finding) f.*member = internal::Render(t, facts);
  f.rank = rank;
  return f;
}

// The fix template with `<fact>` for each placeholder, for the quick reference.
std::string RulesFixForDoc(const Rule& r) {
  for (const auto& [member, t] : r.compiled->finding)
    if (member == &Finding::fix) return internal::RenderForDoc(t);
  return "";  // not reached: fix is required
}

bool RulesFire(const Rule& r, const Facts& facts, std::string_view finding_id = {}) {
  internal::EvalContext ctx{&facts, finding_id};
  return internal::Evaluate(r.compiled->condition, ctx) == internal::Tri::kTrue;
}

}  // namespace

absl::StatusOr<RuleSet> ParseRules(const std::string& source, std::string_view text) {
  // Syntax errors, numbers out of range (1e309, 2^64) and deep nesting: one line, no throw.
  absl::StatusOr<json> parsed = ParseJsonText(text, kJsonMaxDepth, source);
  if (!parsed.ok()) return parsed.status();
  json doc = *std::move(parsed);
  if (!doc.is_object() || JsonValueOr(doc, "format", "") != kRulesFormat)
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": not a rule file (\"format\": \"", kRulesFormat, "\" expected)"));
  if (JsonValueOr(doc, "version", 0) != 1)
    return absl::InvalidArgumentError(absl::StrCat(source, ": version 1 expected"));
  auto list = doc.find("rules");
  if (list == doc.end() || !list->is_array() || list->empty())
    return absl::InvalidArgumentError(absl::StrCat(source, ": \"rules\" must be a non-empty list"));
  RuleSet set;
  set.source = source;
  std::set<std::string> ids;
  for (size_t i = 0; i < list->size(); ++i) {
    Rule r;
    std::string field;
    absl::Status s = RulesParseOne((*list)[i], &r, &field);
    std::string id = r.id;
    if (id.empty() && (*list)[i].is_object()) id = JsonValueOr((*list)[i], "id", "");
    std::string who = absl::StrCat(source, ": rule ", id.empty() ? "?" : id, " (#", i + 1, ")");
    if (!s.ok())
      return absl::InvalidArgumentError(
          absl::StrCat(who, field.empty() ? "" : ": field ", field, ": ", s.message()));
    if (!ids.insert(r.id).second)
      return absl::InvalidArgumentError(absl::StrCat(who, ": field id: duplicate id"));
    set.rules.push_back(std::move(r));
  }
  return set;
}

std::string_view BundledRulesText() { return kBundledDiagnoseRules; }

absl::StatusOr<RuleSet> LoadRules(const std::string& path, Os* os) {
  if (path.empty())
    return ParseRules("bundled rules (data/diagnose/rules.json)", BundledRulesText());
  std::string text;
  if (!ReadWholeFile(path, &text, os))
    return absl::NotFoundError(absl::StrCat(path, ": cannot read"));
  return ParseRules(path, text);
}

std::vector<RankedFinding> ApplyRules(const RuleSet& rules, const EngineInput& in) {
  std::vector<RankedFinding> out;
  std::vector<bool> absorbed(in.documents.size(), false);
  for (size_t i = 0; i < rules.rules.size(); ++i) {
    const Rule& r = rules.rules[i];
    int order = static_cast<int>(i);
    switch (r.scope) {
      case Rule::Scope::kGlobal:
        if (RulesFire(r, in.global))
          out.push_back({order, RulesProduce(r, in.global, "", -1, Severity::kInfo)});
        break;
      case Rule::Scope::kRun:
        for (const Facts& run : in.runs) {
          Facts all = in.global;
          for (const auto& [k, v] : run) all[k] = v;
          if (!RulesFire(r, all)) continue;
          auto path = run.find("run.path");
          auto rank = run.find("run.rank");
          out.push_back(
              {order, RulesProduce(r, all, path != run.end() ? path->second.text : "",
                                   rank != run.end() ? static_cast<int>(rank->second.number) : -1,
                                   Severity::kInfo)});
        }
        break;
      case Rule::Scope::kFinding:
        for (size_t d = 0; d < in.documents.size(); ++d) {
          if (absorbed[d]) continue;
          const Finding& doc = in.documents[d];
          Facts all = in.global;
          for (auto& [k, v] : FindingFacts(doc)) all[k] = v;
          if (!RulesFire(r, all, doc.id)) continue;
          absorbed[d] = true;
          out.push_back({order, RulesProduce(r, all, doc.where, doc.rank, doc.severity)});
        }
        break;
    }
  }
  int after = static_cast<int>(rules.rules.size());
  for (size_t d = 0; d < in.documents.size(); ++d)
    if (!absorbed[d]) out.push_back({after, in.documents[d]});
  return out;
}

std::string QuickReferenceMarkdown(const RuleSet& rules) {
  std::string out =
      "# Quick reference: symptom → likely cause → check → fix\n\n"
      "<!-- Generated from data/diagnose/rules.json by `trainscope diagnose --rules-doc`; do not "
      "edit. Regenerate: build/bin/trainscope diagnose --rules-doc > docs/quick-reference.md "
      "-->\n\n"
      "The classic problems of a training run, one row per rule of the bundled rule file\n"
      "(`data/diagnose/rules.json`, schema in docs/formats.md \"Diagnose rules\"). "
      "`trainscope diagnose`\nevaluates every rule on the evidence it reads and reports the "
      "ones that fire, with the\nnumbers behind them. `<fact>` stands for a value filled in "
      "from the evidence (facts: last\nsection). Within one severity, rules listed earlier in "
      "the file rank first.\n";
  for (const char* layer : kRuleLayers) {
    bool any = false;
    for (const Rule& r : rules.rules) {
      if (r.layer != layer) continue;
      if (!any) {
        absl::StrAppend(&out, "\n## ", layer, "\n\n",
                        "| rule | symptom | likely cause | check | fix |\n|---|---|---|---|---|\n");
      }
      any = true;
      absl::StrAppend(
          &out, "| `", r.id, "` (", r.severity == "inherit" ? "severity as reported" : r.severity,
          "): `", RulesCell(r.condition), "` | ", RulesCell(r.symptom), " | ", RulesCell(r.cause),
          " | ", RulesCell(r.check), " | ", RulesCell(RulesFixForDoc(r)), " |\n");
    }
  }
  absl::StrAppend(&out,
                  "\n## Facts the rules read\n\n| fact | type | scope | meaning |\n"
                  "|---|---|---|---|\n");
  for (const FactInfo& f : FactCatalog()) {
    const char* scope = f.scope == FactScope::kRun      ? "run"
                        : f.scope == FactScope::kGlobal ? "global"
                                                        : "finding";
    absl::StrAppend(&out, "| `", f.name, "` | ", FactTypeName(f.type), " | ", scope, " | ",
                    RulesCell(f.what), " |\n");
  }
  return out;
}

}  // namespace trainscope::diagnose
