// Facts: the named values diagnose rules test (rules.h). Every fact is listed in one catalog
// (kFactCatalog, facts.cc) with its type, its scope and what it means; the rule loader rejects
// any other name, and the quick reference lists them.
//
// Scopes:
//   run      one metrics series (a trainscope metrics file or a user log): run.*, curve.*
//   global   the whole input: data.* (data scan JSON), env.* (environment fingerprint),
//            ckpt.* (checkpoint folders, ckpt verify JSON), ranks.* (data order across ranks)
//   finding  the document finding a finding-scope rule has in hand: finding.*
// Collectors fill a Facts map from one input each; a fact the input does not give is absent
// (unknown to the rules), never a made-up default.
// Thread-safety: pure functions and immutable tables.
#ifndef TRAINSCOPE_SRC_DIAGNOSE_FACTS_H_
#define TRAINSCOPE_SRC_DIAGNOSE_FACTS_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "nlohmann/json_fwd.hpp"
#include "trainscope/core/finding.h"

namespace trainscope::diagnose {

struct Value {
  enum Kind { kUnknown, kNumber, kString, kBool } kind = kUnknown;
  double number = 0;
  std::string text;
  bool flag = false;

  static Value Number(double v) { return {kNumber, v, {}, false}; }
  static Value String(std::string v) { return {kString, 0, std::move(v), false}; }
  static Value Bool(bool v) { return {kBool, 0, {}, v}; }
};

using Facts = std::map<std::string, Value, std::less<>>;

enum class FactScope { kRun, kGlobal, kFinding };

struct FactInfo {
  const char* name;
  Value::Kind type;
  FactScope scope;
  const char* what;
};

// Every fact, in documentation order.
const std::vector<FactInfo>& FactCatalog();
// The catalog row of a name; nullptr when unknown.
const FactInfo* FindFact(std::string_view name);
const char* FactTypeName(Value::Kind kind);  // "number", "string", "bool"

// --- collectors ---

// A trainscope metrics file (trainscope.train_metrics): header (params, precision, world
// size, config: lr, micro_batch, grad_accum, data_order_hash), step phases (data_wait and
// comm shares, memory peaks), nonfinite, loss_scale, checkpoint and end records, into run.*.
// Lines it cannot read are ignored here (the series reader counts them).
void CollectMetricsFacts(std::string_view text, Facts* run);

// The LR safe zone of AdamW for a model size (run.lr_safe_min/max/basis), when the run has
// run.params >= 1e9 and its optimizer is AdamW; tiny models get no zone.
void AddLrSafeZone(Facts* run);

// A data scan report (trainscope.data.scan) into data.*; keeps the worst of several scans.
void CollectDataScanFacts(const std::string& path, const nlohmann::json& doc, Facts* global);

// An environment fingerprint (trainscope.env.fingerprint) into env.*.
void CollectFingerprintFacts(const std::string& path, const nlohmann::json& doc, Facts* global);

// `trainscope ckpt verify --json` ({"ok", "checkpoints": [...]}) into ckpt.verify_*. False
// when `doc` is not one.
bool CollectCkptVerifyFacts(const std::string& path, const nlohmann::json& doc, Facts* global);

// One checkpoint directory seen in a run's checkpoints folder (name: step-<N>,
// anomaly-step-<N>, step-<N>.tmp-<pid>, step-<N>.bad-<pid>); `has_manifest`: manifest.json is
// in it. Into ckpt.*.
void CollectCheckpointDirFacts(const std::string& path, const std::string& name, bool has_manifest,
                               Facts* global);

// Per-rank data-order hashes of one folder's metrics files: ranks.data_order_* when two
// ranks of the folder disagree (the first folder that does).
struct RankHash {
  std::string folder;
  int rank = -1;
  std::string hash;
};
void CollectDataOrderFacts(const std::vector<RankHash>& hashes, Facts* global);

// Facts of a document finding (finding.*).
Facts FindingFacts(const Finding& f);

}  // namespace trainscope::diagnose

#endif  // TRAINSCOPE_SRC_DIAGNOSE_FACTS_H_
