// Rules as data: the condition language (parse, types, three-valued evaluation), templates,
// rule-file validation (a bad rule is refused naming its id and field), every bundled rule
// firing on a minimal fact set and staying silent just under its threshold, the fact
// collectors, and the quick reference.
#include "trainscope/diagnose/rules.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "diagnose/facts.h"
#include "diagnose/rule_engine.h"
#include "diagnose/rule_expr.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "trainscope/core/fake_os.h"
#include "trainscope/diagnose/diagnose.h"

namespace trainscope::diagnose {
namespace {

using internal::Evaluate;
using internal::ParseExpr;
using internal::Tri;

Tri RulesEval(const std::string& text, const Facts& facts, std::string_view finding_id = {}) {
  absl::StatusOr<internal::Expr> e = ParseExpr(text);
  EXPECT_TRUE(e.ok()) << text << ": " << e.status();
  if (!e.ok()) return Tri::kUnknown;
  return Evaluate(*e, {&facts, finding_id});
}

TEST(RuleExpr, ComparisonsLogicAndUnknowns) {
  Facts f{{"data.duplicate_fraction", Value::Number(0.3)},
          {"curve.class", Value::String("overfitting")},
          {"run.nonfinite", Value::Bool(true)}};
  EXPECT_EQ(RulesEval("data.duplicate_fraction > 0.05", f), Tri::kTrue);
  EXPECT_EQ(RulesEval("data.duplicate_fraction <= 3e-1", f), Tri::kTrue);
  EXPECT_EQ(RulesEval("data.duplicate_fraction > 0.3", f), Tri::kFalse);
  EXPECT_EQ(RulesEval("curve.class == \"overfitting\" && run.nonfinite", f), Tri::kTrue);
  EXPECT_EQ(RulesEval("not (curve.class != \"overfitting\") and !false", f), Tri::kTrue);
  // A missing fact is unknown, and unknown never fires; Kleene logic around it.
  EXPECT_EQ(RulesEval("data.noise_fraction > 0.2", f), Tri::kUnknown);
  EXPECT_EQ(RulesEval("not (data.noise_fraction > 0.2)", f), Tri::kUnknown);
  EXPECT_EQ(RulesEval("data.noise_fraction > 0.2 or run.nonfinite", f), Tri::kTrue);
  EXPECT_EQ(RulesEval("data.noise_fraction > 0.2 and false", f), Tri::kFalse);
  EXPECT_EQ(RulesEval("has(data.noise_fraction) or has(curve.class)", f), Tri::kTrue);
  EXPECT_EQ(RulesEval("not has(data.noise_fraction)", f), Tri::kTrue);
  // Precedence: and binds tighter than or.
  EXPECT_EQ(RulesEval("true or false and false", f), Tri::kTrue);
  EXPECT_EQ(RulesEval("(true or false) and false", f), Tri::kFalse);
  // finding() sees the document finding in hand only.
  EXPECT_EQ(RulesEval("finding(\"env.matrix.*\")", f, "env.matrix.cuda_driver"), Tri::kTrue);
  EXPECT_EQ(RulesEval("finding(\"env.matrix.*\")", f, "env.limits.memlock"), Tri::kFalse);
  EXPECT_EQ(RulesEval("finding(\"env.matrix.*\")", f), Tri::kFalse);
}

TEST(RuleExpr, SyntaxAndTypeErrorsNameThePosition) {
  struct Bad {
    const char* text;
    const char* message;
  } cases[] = {
      {"data.duplicate_fraction >", "position 26: unexpected end"},
      {"data.dup > 0.05", "position 1: unknown fact \"data.dup\""},
      {"curve.class > 3", "position 13: \">\" compares numbers"},
      {"curve.class == 3", "compares a string with a number"},
      {"data.duplicate_fraction", "not a boolean"},
      {"run.nonfinite and 3", "\"and\" needs booleans"},
      {"(run.nonfinite", "expected \")\""},
      {"curve.class == \"x", "unterminated string"},
      {"run.nonfinite # x", "unexpected character '#'"},
      {"max(data.docs)", "unknown function \"max\""},
      {"has(\"x\")", "has() takes a fact name"},
      {"finding(env)", "finding() takes a quoted id pattern"},
      {"data.docs > 5x", "bad number"},
      {"run.nonfinite run.nonfinite", "unexpected \"run.nonfinite\""},
  };
  for (const Bad& b : cases) {
    absl::StatusOr<internal::Expr> e = ParseExpr(b.text);
    ASSERT_FALSE(e.ok()) << b.text;
    EXPECT_TRUE(absl::StrContains(e.status().message(), b.message))
        << b.text << " -> " << e.status().message();
  }
}

TEST(RuleExpr, GlobAndTemplates) {
  EXPECT_TRUE(internal::GlobMatch("env.*", "env.matrix.cuda"));
  EXPECT_TRUE(internal::GlobMatch("*.memlock", "env.limits.memlock"));
  EXPECT_TRUE(internal::GlobMatch("a*b*c", "axxbyyc"));
  EXPECT_FALSE(internal::GlobMatch("a*b*c", "axxbyy"));
  EXPECT_FALSE(internal::GlobMatch("env.matrix", "env.matrix.x"));
  absl::StatusOr<internal::Template> t = internal::ParseTemplate(
      "{data.duplicate_fraction:%} of {data.docs:int} docs, {env.memlock_soft_bytes:bytes}, "
      "{curve.class}, {data.noise_fraction}");
  ASSERT_TRUE(t.ok()) << t.status();
  Facts f{{"data.duplicate_fraction", Value::Number(0.3)},
          {"data.docs", Value::Number(1000)},
          {"env.memlock_soft_bytes", Value::Number(65536)},
          {"curve.class", Value::String("plateau")}};
  EXPECT_EQ(internal::Render(*t, f), "30.0% of 1000 docs, 64.0 KiB, plateau, ?");
  EXPECT_EQ(internal::RenderForDoc(*t),
            "`<data.duplicate_fraction>` of `<data.docs>` docs, `<env.memlock_soft_bytes>`, "
            "`<curve.class>`, `<data.noise_fraction>`");
  EXPECT_FALSE(internal::ParseTemplate("{nope}").ok());
  EXPECT_FALSE(internal::ParseTemplate("{curve.class:%}").ok());  // a format of a string
  EXPECT_FALSE(internal::ParseTemplate("{data.docs:x}").ok());
  EXPECT_FALSE(internal::ParseTemplate("{data.docs").ok());
}

// A valid one-rule file with one field replaced (or removed when `value` is null).
std::string RulesFileWith(const std::string& field, const nlohmann::json& value, int copies = 1) {
  nlohmann::json rule = {{"id", "data.dups"},
                         {"layer", "data"},
                         {"severity", "warning"},
                         {"needs", {"data.duplicate_fraction"}},
                         {"condition", "data.duplicate_fraction > 0.05"},
                         {"symptom", "s"},
                         {"cause", "c"},
                         {"check", "k"},
                         {"title", "{data.duplicate_fraction:%} duplicates"},
                         {"fix", "deduplicate"}};
  if (!field.empty()) {
    if (value.is_null()) {
      rule.erase(field);
    } else {
      rule[field] = value;
    }
  }
  nlohmann::json doc = {{"format", "trainscope.diagnose.rules"}, {"version", 1}};
  for (int i = 0; i < copies; ++i) doc["rules"].push_back(rule);
  return doc.dump();
}

TEST(RuleFile, ValidatedAtLoadNamingRuleAndField) {
  ASSERT_TRUE(ParseRules("r.json", RulesFileWith("", nullptr)).ok());
  struct Bad {
    std::string field;
    nlohmann::json value;
    std::string message;
  } cases[] = {
      {"fix", nullptr, "r.json: rule data.dups (#1): field fix: missing"},
      {"colour", "red", "field colour: unknown field"},
      {"layer", "storage", "field layer: \"storage\" is not one of env, data, model"},
      {"severity", "fatal", "field severity: must be error, warning, info or inherit"},
      {"severity", "inherit", "field severity: inherit needs finding()"},
      {"id", "Data Dups", "field id: must match"},
      {"condition", "data.duplicate_fraction >> 1", "field condition: position 26:"},
      {"condition", "data.dup_share > 1", "field condition: position 1: unknown fact"},
      {"needs", nlohmann::json::array({"data.docs"}),
       "field needs: \"data.duplicate_fraction\" is used but not listed"},
      {"needs", nlohmann::json::array({"data.nope"}), "field needs: unknown fact \"data.nope\""},
      {"title", "{data.docs} docs", "field needs: \"data.docs\" is used but not listed"},
      {"title", "", "field title: must be a non-empty string"},
      {"condition", "finding(\"env.*\") and curve.class == \"x\"",
       "field needs: \"curve.class\" is used but not listed"},
  };
  for (const Bad& b : cases) {
    absl::StatusOr<RuleSet> r = ParseRules("r.json", RulesFileWith(b.field, b.value));
    ASSERT_FALSE(r.ok()) << b.field;
    EXPECT_TRUE(absl::StrContains(r.status().message(), b.message))
        << b.field << " -> " << r.status().message();
    if (b.field != "id") {
      EXPECT_TRUE(absl::StrContains(r.status().message(), "rule data.dups (#1)")) << r.status();
    }
  }
  absl::StatusOr<RuleSet> dup = ParseRules("r.json", RulesFileWith("", nullptr, 2));
  ASSERT_FALSE(dup.ok());
  EXPECT_TRUE(absl::StrContains(dup.status().message(), "rule data.dups (#2): field id: duplicate"))
      << dup.status();
  nlohmann::json mixed = nlohmann::json::parse(
      RulesFileWith("condition", "finding(\"env.*\") and curve.class == \"x\""));
  mixed["rules"][0]["needs"].push_back("curve.class");
  absl::StatusOr<RuleSet> m = ParseRules("r.json", mixed.dump());
  ASSERT_FALSE(m.ok());
  EXPECT_TRUE(absl::StrContains(m.status().message(), "cannot be combined with run facts"))
      << m.status();
  for (const char* whole : {"{", "[]", "{\"format\": \"x\", \"version\": 1, \"rules\": []}",
                            "{\"format\": \"trainscope.diagnose.rules\", \"version\": 2}"}) {
    absl::StatusOr<RuleSet> r = ParseRules("r.json", whole);
    ASSERT_FALSE(r.ok()) << whole;
    EXPECT_TRUE(absl::StartsWith(r.status().message(), "r.json: ")) << r.status();
  }
  // The shared JSON policy: 1e309 (nlohmann's out_of_range once escaped here: exit 3), an
  // integer beyond 64 bits and 100,000-deep nesting are each one line with the byte.
  const std::pair<std::string, std::string> refused[] = {
      {R"({"format": "trainscope.diagnose.rules", "version": 1e309})",
       "r.json: not valid JSON at byte 51: [json.exception.out_of_range.406] number overflow "
       "parsing '1e309'"},
      {R"({"version": 18446744073709551616})",
       "r.json: not valid JSON at byte 12: number out of range: integer "
       "'18446744073709551616' does not fit in 64 bits"},
      {std::string(100000, '[') + std::string(100000, ']'),
       "r.json: JSON nested deeper than 64 at byte 64"}};
  for (const auto& [text, want] : refused) {
    absl::StatusOr<RuleSet> r = ParseRules("r.json", text);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().message(), want);
  }
}

// For each bundled rule: facts on which it fires, and the one change that keeps it silent
// (just under its threshold, or the other value). A bundled rule missing here fails the test.
struct RuleCase {
  Facts global, run;
  std::string finding_id;  // finding-scope rules
  Facts silent_global, silent_run;
  std::string silent_finding_id;
};

std::map<std::string, RuleCase> BundledRuleCases() {
  auto N = Value::Number;
  auto S = Value::String;
  auto B = Value::Bool;
  std::map<std::string, RuleCase> c;
  c["model.nan_bad_data"] = {{},
                             {{"run.nonfinite_class", S("bad_data")}},
                             "",
                             {},
                             {{"run.nonfinite_class", S("operator")}}};
  c["model.nan_fixed_step"] = {
      {},
      {{"run.nonfinite_reproducible", B(true)}, {"run.nonfinite_class", S("operator")}},
      "",
      {},
      {{"run.nonfinite_reproducible", B(true)}, {"run.nonfinite_class", S("bad_data")}}};
  c["model.nan_random"] = {{},
                           {{"run.nonfinite_reproducible", B(false)}},
                           "",
                           {},
                           {{"run.nonfinite_reproducible", B(true)}}};
  for (const char* cls : {"nan_fixed_step", "diverging", "unstable", "not_learning", "overfitting",
                          "loss_spikes", "plateau"}) {
    c[absl::StrCat("curve.", cls)] = {
        {}, {{"curve.class", S(cls)}}, "", {}, {{"curve.class", S("healthy")}}};
  }
  // 3B parameters: safe zone 2e-4..4e-4.
  Facts big{{"run.optimizer", S("adamw")}, {"run.params", N(3e9)}};
  AddLrSafeZone(&big);
  auto with = [](Facts f, const char* k, Value v) {
    f[k] = v;
    return f;
  };
  c["model.lr_above_safe_zone"] = {
      {}, with(big, "run.lr", N(4.2e-4)), "", {}, with(big, "run.lr", N(3.9e-4))};
  c["model.lr_below_safe_zone"] = {
      {}, with(big, "run.lr", N(1.9e-4)), "", {}, with(big, "run.lr", N(2.1e-4))};
  c["framework.fp16_underflow"] = {
      {},
      {{"run.precision", S("fp16")}, {"run.zero_grad_fraction", N(0.06)}},
      "",
      {},
      {{"run.precision", S("fp16")}, {"run.zero_grad_fraction", N(0.049)}}};
  c["data.order_differs_between_ranks"] = {{{"ranks.data_order_differs", B(true)}},
                                           {},
                                           "",
                                           {{"ranks.data_order_differs", B(false)}},
                                           {}};
  c["data.duplicates"] = {
      {{"data.duplicate_fraction", N(0.051)}}, {}, "", {{"data.duplicate_fraction", N(0.049)}}, {}};
  c["data.noise"] = {
      {{"data.noise_fraction", N(0.21)}}, {}, "", {{"data.noise_fraction", N(0.19)}}, {}};
  c["env.oom_host_limits"] = {{{"env.memlock_soft_bytes", N(8 << 20)}},
                              {{"run.oom", B(true)}, {"run.device_mem_peak_share", N(0.5)}},
                              "",
                              {{"env.memlock_soft_bytes", N(8 << 20)}},
                              {{"run.oom", B(true)}, {"run.device_mem_peak_share", N(0.95)}}};
  c["framework.oom"] = {{},
                        {{"run.oom", B(true)}},
                        "",
                        {{"env.fingerprint_path", S("fingerprint.json")}},
                        {{"run.oom", B(true)}}};
  c["comm.hang_not_joined"] = {{}, {}, "hang.not_joined", {}, {}, "hang.type_mismatch"};
  c["comm.hang_mismatch"] = {{}, {}, "hang.size_mismatch", {}, {}, "hang.missing_dump"};
  c["comm.hang_missing_dump"] = {{}, {}, "hang.missing_dump", {}, {}, "hang.not_joined"};
  c["comm.straggler"] = {{}, {}, "trace.straggler", {}, {}, "trace.step_time_spread"};
  c["env.version_mismatch"] = {{}, {}, "env.matrix.cuda_driver", {}, {}, "env.framework.x"};
  c["env.host_limits"] = {{}, {}, "env.limits.memlock", {}, {}, "env.nvidia.driver"};
  c["env.trap"] = {{}, {}, "env.nccl.flight_recorder_off", {}, {}, "env.probe.errors"};
  c["framework.checkpoint_corrupt"] = {
      {{"ckpt.verify_problems", N(1)}}, {}, "", {{"ckpt.verify_problems", N(0)}}, {}};
  c["framework.checkpoint_failed_save"] = {
      {}, {{"run.failed_saves", N(1)}}, "", {}, {{"run.failed_saves", N(0)}}};
  c["framework.checkpoint_incomplete"] = {
      {{"ckpt.incomplete", N(1)}}, {}, "", {{"ckpt.incomplete", N(0)}}, {}};
  c["framework.checkpoint_interrupted"] = {
      {{"ckpt.interrupted", N(1)}}, {}, "", {{"ckpt.interrupted", N(0)}}, {}};
  c["performance.data_wait"] = {
      {}, {{"run.data_wait_share", N(0.31)}}, "", {}, {{"run.data_wait_share", N(0.29)}}};
  c["performance.slow_dataloader"] = {{}, {}, "trace.slow_dataloader", {}, {}, "trace.syncs"};
  c["performance.iteration_gap"] = {{}, {}, "trace.iteration_gap", {}, {}, "trace.syncs"};
  Facts comm{{"run.world_size", N(2)}, {"run.comm_wait_share", N(0.2)}};
  c["comm.not_overlapped"] = {{},
                              with(comm, "run.comm_overlap_fraction", N(0.49)),
                              "",
                              {},
                              with(comm, "run.comm_overlap_fraction", N(0.51))};
  c["comm.low_overlap"] = {{}, {}, "trace.low_overlap", {}, {}, "trace.device_idle"};
  c["performance.dynamic_shapes"] = {{}, {}, "trace.shape_churn", {}, {}, "trace.fusion"};
  c["performance.fp64"] = {{}, {}, "trace.float64", {}, {}, "trace.fusion"};
  c["performance.grad_accum_high"] = {
      {}, {{"run.grad_accum", N(17)}}, "", {}, {{"run.grad_accum", N(16)}}};
  return c;
}

// The ids of the findings `rule` produces on these facts.
std::vector<std::string> RulesFired(const RuleSet& all, const std::string& id, const Facts& global,
                                    const Facts& run, const std::string& finding_id) {
  RuleSet one;
  for (const Rule& r : all.rules)
    if (r.id == id) one.rules.push_back(r);
  EngineInput in;
  in.global = global;
  Facts r = run;
  r["run.path"] = Value::String("m.jsonl");
  in.runs.push_back(r);
  if (!finding_id.empty())
    in.documents.push_back({Severity::kWarning, finding_id, "t", "e", "f", "report.json"});
  std::vector<std::string> ids;
  for (const RankedFinding& f : ApplyRules(one, in)) ids.push_back(f.finding.id);
  return ids;
}

TEST(BundledRules, LoadAndEachFiresAndStaysSilentJustUnder) {
  absl::StatusOr<RuleSet> rules = LoadRules();
  ASSERT_TRUE(rules.ok()) << rules.status();
  std::map<std::string, RuleCase> cases = BundledRuleCases();
  std::set<std::string> layers;
  for (const Rule& r : rules->rules) {
    layers.insert(r.layer);
    auto it = cases.find(r.id);
    ASSERT_NE(it, cases.end()) << "bundled rule " << r.id << " has no test case here";
    const RuleCase& c = it->second;
    EXPECT_EQ(RulesFired(*rules, r.id, c.global, c.run, c.finding_id),
              std::vector<std::string>{r.id})
        << r.id << " should fire";
    std::vector<std::string> silent =
        RulesFired(*rules, r.id, c.silent_global, c.silent_run, c.silent_finding_id);
    // A finding-scope rule that does not fire passes the document finding through unchanged.
    if (!c.silent_finding_id.empty()) {
      EXPECT_EQ(silent, std::vector<std::string>{c.silent_finding_id}) << r.id;
    } else {
      EXPECT_TRUE(silent.empty()) << r.id << " should stay silent";
    }
  }
  EXPECT_EQ(cases.size(), rules->rules.size()) << "a test case for a rule no longer bundled";
  EXPECT_EQ(layers.size(), std::size(kRuleLayers));
}

TEST(BundledRules, AbsorbedFindingKeepsItsTextAndSeverity) {
  absl::StatusOr<RuleSet> rules = LoadRules();
  ASSERT_TRUE(rules.ok()) << rules.status();
  EngineInput in;
  in.documents.push_back({Severity::kError, "env.matrix.cuda_driver", "driver too old",
                          "driver 470", "install driver >= 525", "check.json", 3});
  in.documents.push_back(
      {Severity::kWarning, "doctor.selftest", "doctor check failed", "x", "y", "report.json"});
  std::vector<RankedFinding> out = ApplyRules(*rules, in);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].finding.id, "env.version_mismatch");
  EXPECT_EQ(out[0].finding.severity, Severity::kError);
  EXPECT_EQ(out[0].finding.title, "driver too old");
  EXPECT_EQ(out[0].finding.evidence, "driver 470");
  EXPECT_TRUE(absl::StrContains(out[0].finding.fix, "install driver >= 525"));
  EXPECT_EQ(out[0].finding.where, "check.json");
  EXPECT_EQ(out[0].finding.rank, 3);
  EXPECT_EQ(out[1].finding.id, "doctor.selftest");  // no rule: passed through, ranked after
  EXPECT_GT(out[1].order, out[0].order);
}

TEST(Facts, LrSafeZoneInterpolatesInLogLog) {
  auto zone = [](double params, const char* opt = "adamw") {
    Facts f{{"run.params", Value::Number(params)}, {"run.optimizer", Value::String(opt)}};
    AddLrSafeZone(&f);
    return f;
  };
  Facts at3 = zone(3e9);
  EXPECT_NEAR(at3["run.lr_safe_max"].number, 4e-4, 1e-12);
  EXPECT_NEAR(at3["run.lr_safe_min"].number, 2e-4, 1e-12);
  EXPECT_TRUE(absl::StrContains(at3["run.lr_safe_basis"].text, "interpolated"));
  Facts at10 = zone(1e10);
  EXPECT_NEAR(at10["run.lr_safe_max"].number, 1e-4, 1e-12);
  // Halfway in log(params) is halfway in log(lr): sqrt(3e9 * 1e10) -> sqrt(4e-4 * 1e-4).
  Facts mid = zone(std::sqrt(3e9 * 1e10));
  EXPECT_NEAR(mid["run.lr_safe_max"].number, 2e-4, 1e-10);
  Facts big = zone(7e10);
  EXPECT_NEAR(big["run.lr_safe_max"].number, 1e-4, 1e-12);
  EXPECT_TRUE(absl::StrContains(big["run.lr_safe_basis"].text, "10B"));
  Facts small = zone(1.5e9);
  EXPECT_GT(small["run.lr_safe_max"].number, 4e-4);
  EXPECT_TRUE(absl::StrContains(small["run.lr_safe_basis"].text, "extrapolated"));
  EXPECT_EQ(zone(1.2e8).count("run.lr_safe_max"), 0u);       // tiny model: no zone
  EXPECT_EQ(zone(3e9, "sgd").count("run.lr_safe_max"), 0u);  // AdamW only
}

TEST(Facts, TrainscopeMetricsRecords) {
  std::string text =
      R"({"type": "header", "format": "trainscope.train_metrics", "version": 1, "rank": 1, "world_size": 2, "params": 3000000000, "precision": "fp16", "data_order_hash": "ab12", "config": {"optim": {"lr": 0.0006}, "train": {"micro_batch": 2, "grad_accum": 32, "precision": "fp16"}}}
{"type": "step", "step": 1, "loss": 5.0, "lr": 0.0001, "step_ms": 100.0, "phases_ms": {"data_wait": 90.0, "comm_wait": 0}, "comm_ms": 5}
{"type": "step", "step": 2, "loss": 4.0, "lr": 0.0002, "step_ms": 10.0, "phases_ms": {"data_wait": 4.0, "comm_wait": 3.0}, "comm_ms": 5, "host_rss_bytes": 1000, "device_mem_peak_bytes": null}
{"type": "step", "step": 3, "loss": 3.0, "lr": 0.0003, "step_ms": 10.0, "phases_ms": {"data_wait": 2.0, "comm_wait": 1.0}, "comm_ms": 5, "host_rss_bytes": 3000}
{"type": "loss_scale", "step": 3, "scale": 32768, "zero_grad_fraction": 0.07}
{"type": "checkpoint", "step": 3, "path": "x", "ok": false, "error": "disk full"}
{"type": "nonfinite", "step": 4, "rank": 1, "phase": "forward", "module": "blocks.1.fc", "class": "operator", "reproducible": false}
{"type": "end", "reason": "error", "step": 4, "rank": 1, "error": "std::bad_alloc at step 4"}
)";
  Facts f;
  CollectMetricsFacts(text, &f);
  EXPECT_EQ(f["run.rank"].number, 1);
  EXPECT_EQ(f["run.params"].number, 3e9);
  EXPECT_EQ(f["run.lr"].number, 6e-4);  // the config's peak, not the logged warm-up
  EXPECT_EQ(f["run.grad_accum"].number, 32);
  EXPECT_EQ(f["run.precision"].text, "fp16");
  EXPECT_EQ(f["run.data_order_hash"].text, "ab12");
  EXPECT_NEAR(f["run.data_wait_share"].number, 6.0 / 20, 1e-12);  // step 1 left out
  EXPECT_NEAR(f["run.comm_wait_share"].number, 4.0 / 20, 1e-12);
  EXPECT_NEAR(f["run.comm_overlap_fraction"].number, 1 - 4.0 / 10, 1e-12);
  EXPECT_EQ(f["run.host_rss_peak_bytes"].number, 3000);
  EXPECT_EQ(f.count("run.device_mem_peak_bytes"), 0u);  // null: unknown, not zero
  EXPECT_EQ(f["run.zero_grad_fraction"].number, 0.07);
  EXPECT_EQ(f["run.failed_saves"].number, 1);
  EXPECT_EQ(f["run.failed_save_error"].text, "step 3: disk full");
  EXPECT_TRUE(f["run.nonfinite"].flag);
  EXPECT_FALSE(f["run.nonfinite_reproducible"].flag);
  EXPECT_EQ(f["run.nonfinite_module"].text, "blocks.1.fc");
  EXPECT_TRUE(f["run.oom"].flag);
  EXPECT_EQ(f["run.end_reason"].text, "error");
}

TEST(Facts, DataScanFingerprintCkptAndDataOrder) {
  Facts g;
  CollectDataScanFacts("scan.json",
                       {{"format", "trainscope.data.scan"},
                        {"docs", 200},
                        {"exact_duplicate_ratio", 0.1},
                        {"near_duplicate_ratio", 0.3},
                        {"near_dup", {{"enabled", true}}},
                        {"noise",
                         {{"enabled", true},
                          {"flagged_docs", 10},
                          {"flags", {{"c4_curly_bracket", 7}, {"empty", 3}}}}}},
                       &g);
  EXPECT_EQ(g["data.duplicate_fraction"].number, 0.3);
  EXPECT_EQ(g["data.exact_duplicate_fraction"].number, 0.1);
  EXPECT_EQ(g["data.noise_fraction"].number, 0.05);
  EXPECT_EQ(g["data.top_noise_flag"].text, "c4_curly_bracket (7 docs)");
  CollectFingerprintFacts("fp.json",
                          {{"limits", {{"memlock_soft_bytes", "unlimited"}}},
                           {"host", {{"mem_total_bytes", 1000}, {"mem_available_bytes", 50}}}},
                          &g);
  EXPECT_TRUE(std::isinf(g["env.memlock_soft_bytes"].number));
  EXPECT_EQ(g["env.host_mem_available_share"].number, 0.05);
  EXPECT_TRUE(CollectCkptVerifyFacts(
      "v.json",
      {{"ok", false},
       {"checkpoints",
        {{{"path", "step-4"},
          {"problems", {{{"file", "model.safetensors"}, {"problem", "hash mismatch"}}}}}}}},
      &g));
  EXPECT_EQ(g["ckpt.verify_problems"].number, 1);
  EXPECT_EQ(g["ckpt.verify_first_problem"].text, "step-4: model.safetensors: hash mismatch");
  EXPECT_FALSE(CollectCkptVerifyFacts("x.json", {{"format", "x"}}, &g));
  CollectCheckpointDirFacts("run/checkpoints/step-10", "step-10", true, &g);
  CollectCheckpointDirFacts("run/checkpoints/step-20", "step-20", false, &g);
  CollectCheckpointDirFacts("run/checkpoints/step-30.tmp-77", "step-30.tmp-77", false, &g);
  EXPECT_EQ(g["ckpt.checkpoints"].number, 3);
  EXPECT_EQ(g["ckpt.incomplete"].number, 1);
  EXPECT_EQ(g["ckpt.incomplete_names"].text, "step-20");
  EXPECT_EQ(g["ckpt.interrupted"].number, 1);
  EXPECT_EQ(g["ckpt.folder"].text, "run/checkpoints");
  Facts same, differ;
  CollectDataOrderFacts({{"a/train", 0, "x1"}, {"a/train", 1, "x1"}}, &same);
  EXPECT_FALSE(same["ranks.data_order_differs"].flag);
  CollectDataOrderFacts(
      {{"a/train", 0, "x1"}, {"a/train", 1, "x1"}, {"b/train", 1, "y2"}, {"b/train", 0, "y1"}},
      &differ);
  EXPECT_TRUE(differ["ranks.data_order_differs"].flag);
  EXPECT_EQ(differ["ranks.data_order_hashes"].text, "rank 0: y1, rank 1: y2");
  EXPECT_EQ(differ["ranks.folder"].text, "b/train");
}

TEST(QuickReference, EveryRuleAndFactListed) {
  absl::StatusOr<RuleSet> rules = LoadRules();
  ASSERT_TRUE(rules.ok()) << rules.status();
  std::string md = QuickReferenceMarkdown(*rules);
  for (const Rule& r : rules->rules)
    EXPECT_TRUE(absl::StrContains(md, absl::StrCat("| `", r.id, "` ("))) << r.id;
  for (const FactInfo& f : FactCatalog())
    EXPECT_TRUE(absl::StrContains(md, absl::StrCat("| `", f.name, "` |"))) << f.name;
  EXPECT_TRUE(absl::StrContains(md, "## data\n"));
}

// A run directory: a data scan with 30% duplicates next to an overfitting curve.
TEST(DiagnoseRules, RunDirectoryWithScanAndCheckpoints) {
  namespace fs = std::filesystem;
  fs::path dir = fs::path(::testing::TempDir()) / "rules_run_dir";
  fs::remove_all(dir);
  fs::create_directories(dir / "data");
  fs::create_directories(dir / "checkpoints" / "step-5");
  fs::create_directories(dir / "checkpoints" / "step-10");
  std::ofstream(dir / "checkpoints" / "step-5" / "manifest.json") << "{}";
  std::ofstream(dir / "checkpoints" / "step-10" / "model.safetensors") << "x";
  std::ofstream(dir / "data" / "scan.json")
      << R"({"format": "trainscope.data.scan", "version": 1, "docs": 100, "exact_duplicate_ratio": 0.3,
            "near_duplicate_ratio": 0.3, "near_dup": {"enabled": true}, "noise": {"enabled": true, "flagged_docs": 0}})";
  {
    std::ofstream m(dir / "metrics.csv");
    m << "step,loss,val_loss\n";
    for (int i = 1; i <= 200; ++i) {
      double loss = 3.0 / std::sqrt(1.0 + i / 5.0) + 0.01 * std::sin(i * 1.3);
      m << i << "," << loss << ",";
      if (i % 10 == 0) m << (i <= 60 ? 2.0 - 0.005 * i : 1.7 + 0.004 * (i - 60));
      m << "\n";
    }
  }
  absl::StatusOr<Report> rep = Diagnose({dir.string()});
  ASSERT_TRUE(rep.ok()) << rep.status();
  std::vector<std::string> ids;
  for (const Finding& f : rep->findings) ids.push_back(f.id);
  EXPECT_EQ(ids, (std::vector<std::string>{"data.duplicates", "curve.overfitting",
                                           "framework.checkpoint_incomplete"}))
      << ReportToText(*rep);
  EXPECT_EQ(rep->findings[0].title, "30.0% of the 100 documents are duplicates");
  EXPECT_TRUE(absl::StrContains(rep->findings[2].title, "step-10")) << rep->findings[2].title;
  // The checkpoint folder is listed, never read as a metrics file.
  for (const SkippedFile& s : rep->skipped)
    EXPECT_FALSE(absl::StrContains(s.path, "checkpoints")) << s.path;
  fs::remove_all(dir);
}

// Two ranks of one run whose headers record different data orders; a 3e9-parameter AdamW
// run at 6e-4 (above the interpolated zone); gradient accumulation 32; data wait 40%.
TEST(DiagnoseRules, RankFilesOfOneRunCompared) {
  namespace fs = std::filesystem;
  fs::path dir = fs::path(::testing::TempDir()) / "rules_ranks" / "train";
  fs::remove_all(dir.parent_path());
  fs::create_directories(dir);
  for (int rank = 0; rank < 2; ++rank) {
    std::ofstream m(dir / absl::StrCat("metrics.rank", rank, ".jsonl"));
    m << R"({"type": "header", "format": "trainscope.train_metrics", "version": 1, "rank": )"
      << rank << R"(, "world_size": 2, "params": 3000000000, "data_order_hash": ")"
      << (rank == 0 ? "00aa" : "00bb")
      << R"(", "config": {"optim": {"lr": 0.0006}, "train": {"grad_accum": 32, "micro_batch": 1}}})"
      << "\n";
    for (int i = 1; i <= 40; ++i) {
      m << R"({"type": "step", "step": )" << i << R"(, "loss": )" << 5.0 / std::sqrt(i)
        << R"(, "lr": 0.0006, "step_ms": 10, "phases_ms": {"data_wait": 4, "comm_wait": 0.1}, "comm_ms": 2})"
        << "\n";
    }
    m << R"({"type": "end", "reason": "done", "step": 40, "rank": )" << rank << "}\n";
  }
  absl::StatusOr<Report> rep = Diagnose({dir.parent_path().string()});
  ASSERT_TRUE(rep.ok()) << rep.status();
  std::map<std::string, int> count;
  for (const Finding& f : rep->findings) ++count[f.id];
  EXPECT_EQ(count["data.order_differs_between_ranks"], 1) << ReportToText(*rep);
  EXPECT_EQ(count["model.lr_above_safe_zone"], 2);  // per rank file
  EXPECT_EQ(count["performance.grad_accum_high"], 2);
  EXPECT_EQ(count["performance.data_wait"], 2);
  EXPECT_EQ(count["comm.not_overlapped"], 0);  // overlap 95%
  EXPECT_EQ(rep->findings[0].id, "data.order_differs_between_ranks");
  EXPECT_EQ(rep->findings[0].evidence, "data_order_hash per rank: rank 0: 00aa, rank 1: 00bb");
  for (const Finding& f : rep->findings) {
    if (f.id != "model.lr_above_safe_zone") continue;
    EXPECT_TRUE(absl::StrContains(f.evidence, "interpolated in log-log")) << f.evidence;
    EXPECT_TRUE(absl::StrContains(f.title, "0.0006 is above AdamW's safe zone 0.0002..0.0004"))
        << f.title;
  }
  fs::remove_all(dir.parent_path());
}

TEST(DiagnoseRules, UserRuleFileReplacesTheBundledOne) {
  namespace fs = std::filesystem;
  fs::path dir = fs::path(::testing::TempDir()) / "rules_user_file";
  fs::create_directories(dir);
  std::ofstream(dir / "scan.json") << R"({"format": "trainscope.data.scan", "docs": 10,
      "exact_duplicate_ratio": 0.02, "near_dup": {"enabled": false}})";
  std::ofstream(dir / "rules.json") << RulesFileWith("condition", "data.duplicate_fraction > 0.01");
  Options o;
  o.rules_file = (dir / "rules.json").string();
  absl::StatusOr<Report> rep = Diagnose({(dir / "scan.json").string()}, o);
  ASSERT_TRUE(rep.ok()) << rep.status();
  ASSERT_EQ(rep->findings.size(), 1u);
  EXPECT_EQ(rep->findings[0].id, "data.dups");
  EXPECT_EQ(rep->findings[0].title, "2.0% duplicates");
  std::ofstream(dir / "rules.json") << RulesFileWith("condition", "data.duplicate_fraction >");
  rep = Diagnose({(dir / "scan.json").string()}, o);
  ASSERT_FALSE(rep.ok());
  EXPECT_TRUE(absl::StrContains(rep.status().message(), "rule data.dups (#1): field condition"))
      << rep.status();
  fs::remove_all(dir);
}

// LoadRules reads the rule file through `os`: a file that exists only in a FakeOs is loaded
// as ParseRules parses its text; one absent there is NotFound naming it, as on disk.
TEST(RuleFile, LoadRulesOnAFakeOs) {
  FakeOs os;
  os.AddFile("/fake/rules.json", RulesFileWith("", nullptr));
  absl::StatusOr<RuleSet> rules = LoadRules("/fake/rules.json", &os);
  ASSERT_TRUE(rules.ok()) << rules.status();
  EXPECT_EQ(rules->source, "/fake/rules.json");
  ASSERT_EQ(rules->rules.size(), 1u);
  EXPECT_EQ(rules->rules[0].id, "data.dups");
  absl::StatusOr<RuleSet> missing = LoadRules("/fake/other.json", &os);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(), "/fake/other.json: cannot read");
  os.AddFile("/fake/bad.json", RulesFileWith("condition", "data.duplicate_fraction >"));
  EXPECT_TRUE(absl::StrContains(LoadRules("/fake/bad.json", &os).status().message(),
                                "/fake/bad.json: rule data.dups (#1): field condition"));
}

}  // namespace
}  // namespace trainscope::diagnose
