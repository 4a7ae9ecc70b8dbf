// Facts (facts.h): the catalog, and one collector per kind of evidence.
#include "diagnose/facts.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "diagnose/flat_json.h"
#include "nlohmann/json.hpp"
#include "trainscope/core/json_text.h"
#include "trainscope/core/run_dir.h"

namespace trainscope::diagnose {
namespace {

using nlohmann::json;
constexpr auto kFactNum = Value::kNumber;
constexpr auto kFactStr = Value::kString;
constexpr auto kFactBool = Value::kBool;
constexpr auto kFactRun = FactScope::kRun;
constexpr auto kFactGlobal = FactScope::kGlobal;
constexpr auto kFactFinding = FactScope::kFinding;

const std::vector<FactInfo> kFactsTable = {
    // --- run: one metrics series ---
    {"run.path", kFactStr, kFactRun, "the metrics file"},
    {"run.format", kFactStr, kFactRun, "its format: trainscope_metrics, jsonl, csv, trainer_state"},
    {"run.rank", kFactNum, kFactRun, "the rank the file belongs to (trainscope metrics header)"},
    {"run.world_size", kFactNum, kFactRun, "ranks in the run (header)"},
    {"run.params", kFactNum, kFactRun, "model parameters (header `params`)"},
    {"run.optimizer", kFactStr, kFactRun, "the optimizer (`adamw` for trainscope train)"},
    {"run.precision", kFactStr, kFactRun, "fp32, bf16 or fp16 (header)"},
    {"run.lr", kFactNum, kFactRun,
     "peak learning rate: config optim.lr, else the largest logged lr"},
    {"run.lr_safe_min", kFactNum, kFactRun,
     "AdamW safe-zone lower edge for run.params (>= 1e9 only)"},
    {"run.lr_safe_max", kFactNum, kFactRun,
     "AdamW safe-zone upper edge for run.params (>= 1e9 only)"},
    {"run.lr_safe_basis", kFactStr, kFactRun,
     "how the safe zone was obtained (interpolated, extrapolated)"},
    {"run.micro_batch", kFactNum, kFactRun, "sequences per micro-step per rank (config)"},
    {"run.grad_accum", kFactNum, kFactRun, "micro-steps per optimizer step (config)"},
    {"run.steps", kFactNum, kFactRun, "step records read"},
    {"run.data_order_hash", kFactStr, kFactRun,
     "the header's data_order_hash (the rank's data order)"},
    {"run.data_wait_share", kFactNum, kFactRun,
     "phases_ms.data_wait / step_ms summed over the steps after the first"},
    {"run.data_wait_ms", kFactNum, kFactRun, "mean data_wait per step, ms (steps after the first)"},
    {"run.comm_wait_share", kFactNum, kFactRun,
     "phases_ms.comm_wait / step_ms (steps after the first)"},
    {"run.comm_overlap_fraction", kFactNum, kFactRun,
     "1 - comm_wait / comm_ms: the share of all-reduce time hidden behind backward"},
    {"run.zero_grad_fraction", kFactNum, kFactRun,
     "largest zero_grad_fraction of the loss_scale records"},
    {"run.nonfinite", kFactBool, kFactRun, "a nonfinite record exists"},
    {"run.nonfinite_step", kFactNum, kFactRun, "its step"},
    {"run.nonfinite_reproducible", kFactBool, kFactRun,
     "both replays turned non-finite at the same place"},
    {"run.nonfinite_phase", kFactStr, kFactRun, "forward, backward, loss or optimizer"},
    {"run.nonfinite_module", kFactStr, kFactRun, "the module (or parameter) named"},
    {"run.nonfinite_class", kFactStr, kFactRun, "the trainer's class of the cause"},
    {"run.failed_saves", kFactNum, kFactRun, "checkpoint records with ok false"},
    {"run.failed_save_error", kFactStr, kFactRun, "the first failed save's step and error"},
    {"run.end_reason", kFactStr, kFactRun, "the end record's reason: done, interrupted, error"},
    {"run.end_error", kFactStr, kFactRun, "the end (or error) record's error text"},
    {"run.oom", kFactBool, kFactRun,
     "the run ended on an allocation failure (bad_alloc, out of memory)"},
    {"run.host_rss_peak_bytes", kFactNum, kFactRun, "largest host_rss_bytes"},
    {"run.device_mem_peak_bytes", kFactNum, kFactRun, "largest device_mem_peak_bytes"},
    {"run.device_mem_peak_share", kFactNum, kFactRun,
     "run.device_mem_peak_bytes / env.device_mem_total_bytes"},
    {"curve.class", kFactStr, kFactRun,
     "the loss-curve class (docs/metrics.md \"Loss-curve classes\")"},
    {"curve.sentence", kFactStr, kFactRun, "the classifier's sentence"},
    {"curve.evidence", kFactStr, kFactRun, "the classifier's numbers, one line"},
    {"curve.first_bad_step", kFactNum, kFactRun, "first bad step"},
    {"curve.nan_step", kFactNum, kFactRun, "first non-finite loss"},
    {"curve.nan_after_divergence", kFactBool, kFactRun, "a diverging curve that ends in NaN"},
    // --- global ---
    {"data.scan_path", kFactStr, kFactGlobal, "the data scan report (the worst of several)"},
    {"data.docs", kFactNum, kFactGlobal, "documents scanned"},
    {"data.duplicate_fraction", kFactNum, kFactGlobal,
     "duplicate documents / documents (near duplicates when run, else exact)"},
    {"data.exact_duplicate_fraction", kFactNum, kFactGlobal, "exact duplicates / documents"},
    {"data.noise_fraction", kFactNum, kFactGlobal, "documents with a noise flag / documents"},
    {"data.top_noise_flag", kFactStr, kFactGlobal, "the noise flag on most documents"},
    {"env.fingerprint_path", kFactStr, kFactGlobal, "the environment fingerprint read"},
    {"env.memlock_soft_bytes", kFactNum, kFactGlobal,
     "locked-memory limit (ulimit -l; inf = unlimited)"},
    {"env.host_mem_total_bytes", kFactNum, kFactGlobal, "host memory"},
    {"env.host_mem_available_bytes", kFactNum, kFactGlobal, "MemAvailable when fingerprinted"},
    {"env.host_mem_available_share", kFactNum, kFactGlobal, "available / total host memory"},
    {"env.device_mem_total_bytes", kFactNum, kFactGlobal, "smallest accelerator memory"},
    {"ckpt.folder", kFactStr, kFactGlobal, "the checkpoints folder with the problem"},
    {"ckpt.checkpoints", kFactNum, kFactGlobal, "checkpoint directories seen"},
    {"ckpt.incomplete", kFactNum, kFactGlobal, "step-<N> directories without manifest.json"},
    {"ckpt.incomplete_names", kFactStr, kFactGlobal, "their names"},
    {"ckpt.interrupted", kFactNum, kFactGlobal,
     ".tmp-<pid> directories: saves interrupted or running"},
    {"ckpt.interrupted_names", kFactStr, kFactGlobal, "their names"},
    {"ckpt.damaged", kFactNum, kFactGlobal,
     ".bad-<pid> directories: damaged checkpoints moved aside"},
    {"ckpt.verify_path", kFactStr, kFactGlobal, "the ckpt verify report read"},
    {"ckpt.verify_problems", kFactNum, kFactGlobal, "problems in ckpt verify reports"},
    {"ckpt.verify_first_problem", kFactStr, kFactGlobal, "the first: checkpoint, file, problem"},
    {"ranks.data_order_differs", kFactBool, kFactGlobal,
     "two ranks of one run folder recorded different data_order_hash values"},
    {"ranks.data_order_hashes", kFactStr, kFactGlobal, "rank: hash of that folder"},
    {"ranks.folder", kFactStr, kFactGlobal, "that folder"},
    // --- finding: a document finding in hand ---
    {"finding.id", kFactStr, kFactFinding,
     "its id (env.<id>, trace.<code>, hang.<kind>, doctor.<check>)"},
    {"finding.severity", kFactStr, kFactFinding, "error, warning or info"},
    {"finding.title", kFactStr, kFactFinding, "its sentence"},
    {"finding.evidence", kFactStr, kFactFinding, "its evidence"},
    {"finding.fix", kFactStr, kFactFinding, "its own fix"},
    {"finding.where", kFactStr, kFactFinding, "the report it came from"},
    {"finding.rank", kFactNum, kFactFinding, "the rank it names"},
};

// The number after `"key":` in `line` (nested objects included), or NaN (absent, null, not a
// number). The search starts at *from and, when the key is not after it, at the line's start;
// *from moves past the hit, so keys read in the order a writer wrote them cost one pass.
double FactsNumberAfterKey(std::string_view line, std::string_view quoted_key, size_t* from) {
  // glibc's memmem skips ahead by the needle (string_view::find stops at every '"').
  auto find = [&](size_t start) -> size_t {
    const void* hit =
        memmem(line.data() + start, line.size() - start, quoted_key.data(), quoted_key.size());
    return hit ? static_cast<size_t>(static_cast<const char*>(hit) - line.data())
               : std::string_view::npos;
  };
  size_t at = find(std::min(*from, line.size()));
  if (at == std::string_view::npos && *from > 0) at = find(0);
  if (at == std::string_view::npos) return NAN;
  size_t i = at + quoted_key.size();
  while (i < line.size() && (line[i] == ' ' || line[i] == ':')) ++i;
  size_t end = i;
  while (end < line.size() &&
         (std::isdigit(static_cast<unsigned char>(line[end])) || line[end] == '-' ||
          line[end] == '+' || line[end] == '.' || line[end] == 'e' || line[end] == 'E'))
    ++end;
  *from = end;
  internal::FlatValue v;
  v.kind = internal::FlatValue::kNumber;
  v.text = line.substr(i, end - i);
  return end > i && internal::DecodeFlatNumber(&v) ? v.number : NAN;
}

const json* FactsAt(const json& j, std::initializer_list<const char*> path) {
  const json* p = &j;
  for (const char* k : path) {
    if (!p->is_object()) return nullptr;
    auto it = p->find(k);
    if (it == p->end()) return nullptr;
    p = &*it;
  }
  return p;
}

void FactsSetNumber(Facts* f, const char* name, const json* v) {
  if (v && v->is_number()) (*f)[name] = Value::Number(v->get<double>());
}

void FactsMetricsHeader(const json& h, Facts* run) {
  FactsSetNumber(run, "run.rank", FactsAt(h, {"rank"}));
  FactsSetNumber(run, "run.world_size", FactsAt(h, {"world_size"}));
  FactsSetNumber(run, "run.params", FactsAt(h, {"params"}));
  if (const json* p = FactsAt(h, {"precision"}); p && p->is_string())
    (*run)["run.precision"] = Value::String(p->get<std::string>());
  if (const json* p = FactsAt(h, {"config", "train", "precision"}); p && p->is_string())
    (*run)["run.precision"] = Value::String(p->get<std::string>());
  FactsSetNumber(run, "run.lr", FactsAt(h, {"config", "optim", "lr"}));
  FactsSetNumber(run, "run.micro_batch", FactsAt(h, {"config", "train", "micro_batch"}));
  FactsSetNumber(run, "run.grad_accum", FactsAt(h, {"config", "train", "grad_accum"}));
  (*run)["run.optimizer"] = Value::String("adamw");  // the trainer's only optimizer
  if (const json* p = FactsAt(h, {"data_order_hash"}); p && p->is_string())
    (*run)["run.data_order_hash"] = Value::String(p->get<std::string>());
}

bool FactsLooksLikeOom(std::string_view error) {
  std::string e = absl::AsciiStrToLower(std::string(error));
  return absl::StrContains(e, "bad_alloc") || absl::StrContains(e, "out of memory") ||
         absl::StrContains(e, "cannot allocate memory");
}

}  // namespace

const std::vector<FactInfo>& FactCatalog() { return kFactsTable; }

const FactInfo* FindFact(std::string_view name) {
  for (const FactInfo& f : kFactsTable)
    if (name == f.name) return &f;
  return nullptr;
}

const char* FactTypeName(Value::Kind kind) {
  switch (kind) {
    case Value::kNumber:
      return "number";
    case Value::kString:
      return "string";
    case Value::kBool:
      return "bool";
    case Value::kUnknown:
      break;
  }
  return "unknown";
}

// One pass over the lines: step records (the bulk) go through the flat scanner plus two
// substring reads inside phases_ms; the few other records are parsed whole.
void CollectMetricsFacts(std::string_view text, Facts* run) {
  double steps = 0, timed = 0, step_ms = 0, data_wait = 0, comm_wait = 0, comm_ms = 0;
  double rss = NAN, dev = NAN, lr_max = NAN, zero = NAN, failed = 0;
  std::string err;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    std::string_view line =
        text.substr(pos, nl == std::string_view::npos ? text.size() - pos : nl - pos);
    pos = nl == std::string_view::npos ? text.size() : nl + 1;
    if (line.empty() || line.front() != '{') continue;
    std::string_view type;
    constexpr std::string_view kStep = "{\"type\": \"step\"", kStepTight = "{\"type\":\"step\"";
    if (line.substr(0, kStep.size()) == kStep || line.substr(0, kStepTight.size()) == kStepTight) {
      type = "step";  // the bulk, as the trainer writes it: no tokenising
    } else if (!internal::ScanFlatObjectLazy(
                   line, &err, [&](std::string_view k, const internal::FlatValue& v) {
                     if (k == "type" && v.kind == internal::FlatValue::kString) type = v.text;
                   })) {
      continue;
    }
    double ms = NAN, cms = NAN, r = NAN, d = NAN, lr = NAN, dw = NAN, cw = NAN;
    if (type == "step") {
      // Seven keys, searched in the order the trainer writes them: one pass over the line.
      size_t at = 0;
      lr = FactsNumberAfterKey(line, "\"lr\"", &at);
      ms = FactsNumberAfterKey(line, "\"step_ms\"", &at);
      dw = FactsNumberAfterKey(line, "\"data_wait\"", &at);
      cw = FactsNumberAfterKey(line, "\"comm_wait\"", &at);
      cms = FactsNumberAfterKey(line, "\"comm_ms\"", &at);
      r = FactsNumberAfterKey(line, "\"host_rss_bytes\"", &at);
      d = FactsNumberAfterKey(line, "\"device_mem_peak_bytes\"", &at);
    }
    if (type == "step") {
      ++steps;
      if (std::isfinite(r)) rss = std::isnan(rss) ? r : std::max(rss, r);
      if (std::isfinite(d)) dev = std::isnan(dev) ? d : std::max(dev, d);
      if (std::isfinite(lr)) lr_max = std::isnan(lr_max) ? lr : std::max(lr_max, lr);
      if (steps == 1 || !std::isfinite(ms)) continue;  // the first step warms the loader up
      ++timed;
      step_ms += ms;
      if (std::isfinite(dw)) data_wait += dw;
      if (std::isfinite(cw)) comm_wait += cw;
      if (std::isfinite(cms)) comm_ms += cms;
      continue;
    }
    if (type.empty()) continue;
    json j;
    if (!ParseJsonRecord(line, &j) || !j.is_object()) continue;
    if (type == "header") {
      FactsMetricsHeader(j, run);
    } else if (type == "nonfinite") {
      (*run)["run.nonfinite"] = Value::Bool(true);
      FactsSetNumber(run, "run.nonfinite_step", FactsAt(j, {"step"}));
      if (const json* x = FactsAt(j, {"reproducible"}); x && x->is_boolean())
        (*run)["run.nonfinite_reproducible"] = Value::Bool(x->get<bool>());
      for (auto [key, fact] :
           {std::pair{"phase", "run.nonfinite_phase"}, std::pair{"module", "run.nonfinite_module"},
            std::pair{"class", "run.nonfinite_class"}}) {
        if (const json* x = FactsAt(j, {key}); x && x->is_string())
          (*run)[fact] = Value::String(x->get<std::string>());
      }
      if (const json* p = FactsAt(j, {"parameter"});
          p && p->is_string() && !p->get<std::string>().empty())
        (*run)["run.nonfinite_module"] = Value::String(p->get<std::string>());
    } else if (type == "loss_scale") {
      if (const json* z = FactsAt(j, {"zero_grad_fraction"}); z && z->is_number())
        zero = std::isnan(zero) ? z->get<double>() : std::max(zero, z->get<double>());
    } else if (type == "checkpoint") {
      if (const json* o = FactsAt(j, {"ok"}); o && o->is_boolean() && !o->get<bool>()) {
        if (failed++ == 0) {
          const json* e = FactsAt(j, {"error"});
          (*run)["run.failed_save_error"] = Value::String(
              absl::StrCat("step ", j.value("step", -1), ": ",
                           e && e->is_string() ? e->get<std::string>() : "no error text"));
        }
      }
    } else if (type == "end" || type == "error") {
      if (type == "end") {
        if (const json* x = FactsAt(j, {"reason"}); x && x->is_string())
          (*run)["run.end_reason"] = Value::String(x->get<std::string>());
      }
      for (const char* key : {"error", "message"}) {
        if (const json* x = FactsAt(j, {key}); x && x->is_string()) {
          (*run)["run.end_error"] = Value::String(x->get<std::string>());
          if (FactsLooksLikeOom(x->get<std::string>())) (*run)["run.oom"] = Value::Bool(true);
        }
      }
    }
  }
  (*run)["run.steps"] = Value::Number(steps);
  if (!run->count("run.oom") && run->count("run.end_reason"))
    (*run)["run.oom"] = Value::Bool(false);
  if (!run->count("run.nonfinite")) (*run)["run.nonfinite"] = Value::Bool(false);
  (*run)["run.failed_saves"] = Value::Number(failed);
  if (timed > 0 && step_ms > 0) {
    (*run)["run.data_wait_share"] = Value::Number(data_wait / step_ms);
    (*run)["run.data_wait_ms"] = Value::Number(data_wait / timed);
    (*run)["run.comm_wait_share"] = Value::Number(comm_wait / step_ms);
    if (comm_ms > 0)
      (*run)["run.comm_overlap_fraction"] = Value::Number(std::max(0.0, 1 - comm_wait / comm_ms));
  }
  if (!std::isnan(rss)) (*run)["run.host_rss_peak_bytes"] = Value::Number(rss);
  if (!std::isnan(dev)) (*run)["run.device_mem_peak_bytes"] = Value::Number(dev);
  if (!std::isnan(zero)) (*run)["run.zero_grad_fraction"] = Value::Number(zero);
  if (!run->count("run.lr") && !std::isnan(lr_max)) (*run)["run.lr"] = Value::Number(lr_max);
}

// AdamW's safe LR for a model size. Published anchors (the write-up behind issue 15):
// about 2e-4..4e-4 near 3B parameters, 1e-4 or lower near 10B. Between them both edges are
// interpolated linearly in log(params)-log(lr); the lower edge keeps the 3B band's factor
// of 2. Between 1B and 3B the same line is extended; above 10B the 10B edges are kept (no
// anchor says how far lower to go); below 1B no zone (tiny models tolerate far larger LRs).
void AddLrSafeZone(Facts* run) {
  auto p = run->find("run.params");
  auto opt = run->find("run.optimizer");
  if (p == run->end() || p->second.kind != Value::kNumber || p->second.number < 1e9) return;
  if (opt == run->end() || absl::AsciiStrToLower(opt->second.text) != "adamw") return;
  constexpr double kP3 = 3e9, kP10 = 1e10, kMax3 = 4e-4, kMax10 = 1e-4;
  const double slope = std::log(kMax10 / kMax3) / std::log(kP10 / kP3);
  double params = std::min(p->second.number, kP10);
  double hi = kMax3 * std::pow(params / kP3, slope);
  std::string basis;
  if (p->second.number > kP10) {
    basis = "the 10B anchor's edges (no published anchor above 10B)";
  } else if (params >= kP3) {
    basis =
        "interpolated in log-log between the published AdamW anchors (3B: 2e-4..4e-4, "
        "10B: 1e-4 or lower); the lower edge keeps the 3B band's factor of 2";
  } else {
    basis =
        "extrapolated below 3B along the log-log line through the published AdamW anchors "
        "(3B: 2e-4..4e-4, 10B: 1e-4 or lower)";
  }
  (*run)["run.lr_safe_max"] = Value::Number(hi);
  (*run)["run.lr_safe_min"] = Value::Number(hi / 2);
  (*run)["run.lr_safe_basis"] = Value::String(basis);
}

void CollectDataScanFacts(const std::string& path, const json& doc, Facts* global) {
  const json* docs = FactsAt(doc, {"docs"});
  if (!docs || !docs->is_number() || docs->get<double>() <= 0) return;
  double n = docs->get<double>();
  const json* near_on = FactsAt(doc, {"near_dup", "enabled"});
  bool near = near_on && near_on->is_boolean() && near_on->get<bool>();
  const json* dup = FactsAt(doc, {near ? "near_duplicate_ratio" : "exact_duplicate_ratio"});
  if (!dup || !dup->is_number()) return;
  double d = dup->get<double>();
  auto old = global->find("data.duplicate_fraction");
  if (old != global->end() && old->second.number >= d) return;  // keep the worst scan
  (*global)["data.scan_path"] = Value::String(path);
  (*global)["data.docs"] = Value::Number(n);
  (*global)["data.duplicate_fraction"] = Value::Number(d);
  FactsSetNumber(global, "data.exact_duplicate_fraction", FactsAt(doc, {"exact_duplicate_ratio"}));
  global->erase("data.noise_fraction");
  global->erase("data.top_noise_flag");
  const json* on = FactsAt(doc, {"noise", "enabled"});
  const json* flagged = FactsAt(doc, {"noise", "flagged_docs"});
  if (on && on->is_boolean() && on->get<bool>() && flagged && flagged->is_number()) {
    (*global)["data.noise_fraction"] = Value::Number(flagged->get<double>() / n);
    if (const json* flags = FactsAt(doc, {"noise", "flags"}); flags && flags->is_object()) {
      std::string top;
      double most = 0;
      for (auto it = flags->begin(); it != flags->end(); ++it)
        if (it->is_number() && it->get<double>() > most) most = it->get<double>(), top = it.key();
      if (!top.empty())
        (*global)["data.top_noise_flag"] =
            Value::String(absl::StrCat(top, " (", static_cast<int64_t>(most), " docs)"));
    }
  }
}

void CollectFingerprintFacts(const std::string& path, const json& doc, Facts* global) {
  (*global)["env.fingerprint_path"] = Value::String(path);
  if (const json* m = FactsAt(doc, {"limits", "memlock_soft_bytes"})) {
    if (m->is_number()) (*global)["env.memlock_soft_bytes"] = Value::Number(m->get<double>());
    if (m->is_string() && m->get<std::string>() == "unlimited")
      (*global)["env.memlock_soft_bytes"] = Value::Number(INFINITY);
  }
  const json* total = FactsAt(doc, {"host", "mem_total_bytes"});
  const json* avail = FactsAt(doc, {"host", "mem_available_bytes"});
  FactsSetNumber(global, "env.host_mem_total_bytes", total);
  FactsSetNumber(global, "env.host_mem_available_bytes", avail);
  if (total && avail && total->is_number() && avail->is_number() && total->get<double>() > 0)
    (*global)["env.host_mem_available_share"] =
        Value::Number(avail->get<double>() / total->get<double>());
  if (const json* gpus = FactsAt(doc, {"accelerators", "nvidia", "gpus"});
      gpus && gpus->is_array()) {
    double least = INFINITY;
    for (const json& g : *gpus)
      if (const json* b = FactsAt(g, {"memory_total_bytes"}); b && b->is_number())
        least = std::min(least, b->get<double>());
    if (std::isfinite(least)) (*global)["env.device_mem_total_bytes"] = Value::Number(least);
  }
}

bool CollectCkptVerifyFacts(const std::string& path, const json& doc, Facts* global) {
  const json* list = FactsAt(doc, {"checkpoints"});
  const json* ok = FactsAt(doc, {"ok"});
  if (!list || !list->is_array() || !ok || !ok->is_boolean()) return false;
  double problems =
      global->count("ckpt.verify_problems") ? (*global)["ckpt.verify_problems"].number : 0;
  for (const json& c : *list) {
    const json* ps = FactsAt(c, {"problems"});
    if (!ps || !ps->is_array()) continue;
    for (const json& p : *ps) {
      if (problems++ == 0) {
        (*global)["ckpt.verify_first_problem"] = Value::String(absl::StrCat(
            c.value("path", "?"), ": ", p.value("file", "?"), ": ", p.value("problem", "?")));
        (*global)["ckpt.verify_path"] = Value::String(path);
      }
    }
  }
  (*global)["ckpt.verify_problems"] = Value::Number(problems);
  return true;
}

void CollectCheckpointDirFacts(const std::string& path, const std::string& name, bool has_manifest,
                               Facts* global) {
  auto add = [&](const char* count, const char* names) {
    Value& c = (*global)[count];
    c = Value::Number(c.number + 1);
    if (names) {
      Value& n = (*global)[names];
      n = Value::String(n.text.empty() ? name : absl::StrCat(n.text, ", ", name));
    }
    std::string folder = path.substr(0, path.size() - name.size());
    while (!folder.empty() && folder.back() == '/') folder.pop_back();
    if (!global->count("ckpt.folder") && names) (*global)["ckpt.folder"] = Value::String(folder);
  };
  add("ckpt.checkpoints", nullptr);
  if (!global->count("ckpt.incomplete")) (*global)["ckpt.incomplete"] = Value::Number(0);
  if (!global->count("ckpt.interrupted")) (*global)["ckpt.interrupted"] = Value::Number(0);
  if (!global->count("ckpt.damaged")) (*global)["ckpt.damaged"] = Value::Number(0);
  if (absl::StrContains(name, run_dir::kCheckpointTmpInfix)) {
    add("ckpt.interrupted", "ckpt.interrupted_names");
  } else if (absl::StrContains(name, ".bad-")) {
    add("ckpt.damaged", nullptr);
  } else if (!absl::StrContains(name, ".deleting-") && !has_manifest) {
    add("ckpt.incomplete", "ckpt.incomplete_names");
  }
}

void CollectDataOrderFacts(const std::vector<RankHash>& hashes, Facts* global) {
  std::map<std::string, std::vector<const RankHash*>> by_folder;
  for (const RankHash& h : hashes) by_folder[h.folder].push_back(&h);
  for (auto& [folder, list] : by_folder) {
    std::sort(list.begin(), list.end(),
              [](const RankHash* a, const RankHash* b) { return a->rank < b->rank; });
    bool differs = false;
    for (const RankHash* h : list) differs |= h->hash != list.front()->hash;
    if (list.size() < 2) continue;
    if (!global->count("ranks.data_order_differs") || differs) {
      std::vector<std::string> parts;
      for (const RankHash* h : list) parts.push_back(absl::StrCat("rank ", h->rank, ": ", h->hash));
      (*global)["ranks.data_order_differs"] = Value::Bool(differs);
      (*global)["ranks.data_order_hashes"] = Value::String(absl::StrJoin(parts, ", "));
      (*global)["ranks.folder"] = Value::String(folder);
    }
    if (differs) return;
  }
}

Facts FindingFacts(const Finding& f) {
  Facts x;
  x["finding.id"] = Value::String(f.id);
  x["finding.severity"] = Value::String(SeverityName(f.severity));
  x["finding.title"] = Value::String(f.title);
  x["finding.evidence"] = Value::String(f.evidence);
  x["finding.fix"] = Value::String(f.fix);
  x["finding.where"] = Value::String(f.where);
  if (f.rank >= 0) x["finding.rank"] = Value::Number(f.rank);
  return x;
}

}  // namespace trainscope::diagnose
