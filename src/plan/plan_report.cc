// The planner's inputs and outputs: the train config's model section, a selftest comm result,
// a trace analysis (the bottleneck class), and the JSON / text reports.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "trainscope/core/formats.h"
#include "trainscope/core/json_text.h"
#include "trainscope/core/os.h"
#include "trainscope/core/table.h"
#include "trainscope/plan/plan.h"
#include "trainscope/topo/topo.h"
#include "trainscope/trace/analysis.h"
#include "trainscope/trace/trace.h"

namespace trainscope::plan {
namespace {

absl::StatusOr<nlohmann::json> ReadJson(Os* os, const std::string& path) {
  absl::StatusOr<std::string> text = os->ReadFile(path);
  if (!text.ok()) {
    return absl::NotFoundError(absl::StrCat(path, ": cannot read: ", text.status().message()));
  }
  // "PATH: not valid JSON at byte B: why", one line (a number out of range included: 1e309
  // once escaped here as an exception, found by fuzz/plan_config_fuzzer.cc).
  return ParseJsonText(*text, kJsonMaxDepth, path);
}

// A positive integer at `obj[key]`, or `fallback` when absent.
absl::StatusOr<int> IntKey(const nlohmann::json& obj, const char* section, const char* key,
                           int fallback, const std::string& path) {
  if (!obj.is_object() || !obj.contains(key)) return fallback;
  const nlohmann::json& v = obj[key];
  if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > (1 << 30)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": key ", section, ".", key, ": expected a non-negative integer"));
  }
  return static_cast<int>(v.get<int64_t>());
}

double Round(double v, double scale) { return std::round(v * scale) / scale; }

// The number obj[key] when obj is an object and the member a number, else 0; the string
// member likewise, else "". Analyses and selftest results come from disk: nlohmann's value()
// throws on a member of another type (found by bench/fuzz/mutation_campaign.py: "step_us":
// "x", "op": [1]).
double NumberAt(const nlohmann::json& obj, const char* key) {
  if (!obj.is_object()) return 0.0;
  auto it = obj.find(key);
  return it != obj.end() && it->is_number() ? it->get<double>() : 0.0;
}
std::string StringAt(const nlohmann::json& obj, const char* key) {
  if (!obj.is_object()) return "";
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace

absl::StatusOr<ConfigModel> ReadTrainConfig(Os* os, const std::string& path) {
  absl::StatusOr<nlohmann::json> j = ReadJson(os, path);
  if (!j.ok()) return j.status();
  if (!j->is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": byte 0: expected a JSON object"));
  }
  if (j->contains("format") && (*j)["format"] != formats::kTrainConfig) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": key format: expected \"trainscope.train_config\""));
  }
  // Defaults are the trainer's (include/trainscope/train/config.h).
  const nlohmann::json model = j->value("model", nlohmann::json::object());
  const nlohmann::json train = j->value("train", nlohmann::json::object());
  ConfigModel c;
  struct Key {
    const char* name;
    int fallback;
    int* out;
  };
  int vocab = 0, micro = 8, accum = 1;
  const Key model_keys[] = {{"layers", 4, &c.model.layers},
                            {"heads", 4, &c.model.heads},
                            {"width", 128, &c.model.hidden},
                            {"seq_len", 128, &c.model.seq_len},
                            {"vocab", 0, &vocab},
                            {"mlp_ratio", 4, &c.model.mlp_ratio}};
  for (const Key& k : model_keys) {
    absl::StatusOr<int> v = IntKey(model, "model", k.name, k.fallback, path);
    if (!v.ok()) return v.status();
    *k.out = *v;
  }
  const Key train_keys[] = {{"micro_batch", 8, &micro}, {"grad_accum", 1, &accum}};
  for (const Key& k : train_keys) {
    absl::StatusOr<int> v = IntKey(train, "train", k.name, k.fallback, path);
    if (!v.ok()) return v.status();
    *k.out = *v;
  }
  c.model.vocab = vocab > 0 ? vocab : 257;  // the byte tokenizer: 256 bytes + end of text
  if (model.is_object() && model.contains("tied_head")) {
    if (!model["tied_head"].is_boolean()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": key model.tied_head: expected a boolean"));
    }
    c.model.tied_head = model["tied_head"].get<bool>();
  }
  std::string precision = "fp32";
  if (train.is_object() && train.contains("precision")) {
    if (!train["precision"].is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": key train.precision: expected a string"));
    }
    precision = train["precision"].get<std::string>();
  }
  absl::StatusOr<Precision> p = ParsePrecision(precision);
  if (!p.ok())
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": key train.precision: ", p.status().message()));
  c.precision = *p;
  c.micro_batch = micro;
  c.grad_accum = accum;
  return c;
}

absl::StatusOr<double> ReadSelftestBusBw(Os* os, const std::string& path) {
  absl::StatusOr<nlohmann::json> j = ReadJson(os, path);
  if (!j.ok()) return j.status();
  if (!j->is_object() || StringAt(*j, "format") != formats::kSelftestComm ||
      !(*j)["results"].is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": byte 0: not a `selftest comm --json` result (format trainscope.selftest.comm)"));
  }
  double best_bytes = -1, busbw = 0;
  for (const nlohmann::json& row : (*j)["results"]) {
    if (StringAt(row, "op") != "all_reduce") continue;
    if (!row.contains("bytes") || !row["bytes"].is_number() || !row.contains("busbw_gbps") ||
        !row["busbw_gbps"].is_number()) {
      continue;
    }
    const double bytes = row["bytes"].get<double>();
    const double bw = row["busbw_gbps"].get<double>();
    if (bytes > best_bytes && bw > 0) {
      best_bytes = bytes;
      busbw = bw;
    }
  }
  if (best_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": holds no all_reduce result with a busbw"));
  }
  return busbw;
}

absl::Status ApplyTopology(Os* os, const std::string& path, Cluster* cluster) {
  absl::StatusOr<std::string> text = os->ReadFile(path);
  if (!text.ok()) return text.status();
  absl::StatusOr<topo::Topology> t = topo::ParseTopology(*text, path);
  if (!t.ok()) return t.status();
  const int per_node = cluster->devices / std::max(1, cluster->nodes);
  if (per_node > static_cast<int>(t->devices.size())) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": the topology has ", t->devices.size(),
                                                   " devices; --devices / --nodes puts ", per_node,
                                                   " on a node"));
  }
  cluster->intra_node_gbps_by_size.clear();
  for (int s = 2; s <= per_node; ++s) {
    if (per_node % s != 0) continue;
    topo::PlacementOptions o;
    o.tp = s;
    o.ranks = per_node;
    absl::StatusOr<topo::Placement> p = topo::PlaceRanks(*t, o);
    if (!p.ok()) return p.status();
    const double gbps = p->proposed.min_bottleneck_gbps();
    if (!(gbps > 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": groups of ", s,
                       " devices need links of unknown class (rated 0 GB/s); give "
                       "--intra-node-gbps"));
    }
    cluster->intra_node_gbps_by_size[s] = gbps;
  }
  if (per_node >= 2) cluster->intra_node_gbps = cluster->intra_node_gbps_by_size[per_node];
  cluster->bandwidth_source = absl::StrCat(path, " (topology, estimated)");
  return absl::OkStatus();
}

// ---- Bottleneck class ----

absl::StatusOr<Measured> ClassifyAnalysis(const nlohmann::json& a, const std::string& source) {
  if (!a.is_object() || !a.contains("ranks") || !a["ranks"].is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": not a trace analysis (format trainscope.trace.analysis)"));
  }
  double step = 0, data = 0, comm = 0, memory_pct = 0;
  int steps = 0, kernel_ranks = 0;
  for (const nlohmann::json& r : a["ranks"]) {
    if (!r.is_object()) continue;
    const double overlap =
        r.contains("comm_comp_overlap_pct") && r["comm_comp_overlap_pct"].is_number()
            ? r["comm_comp_overlap_pct"].get<double>() / 100.0
            : 0.0;
    for (const nlohmann::json& s : r.value("per_step", nlohmann::json::array())) {
      if (!s.is_object() || !NumberAt(s, "step_us")) continue;
      const nlohmann::json hb = s.value("host_breakdown", nlohmann::json::object());
      step += NumberAt(s, "step_us");
      data += NumberAt(hb, "data_loading_us");
      const double wait = NumberAt(hb, "comm_wait_us");
      comm += wait > 0 ? wait : NumberAt(s, "comm_us") * (1.0 - overlap);
      ++steps;
    }
    const nlohmann::json kt = r.value("kernel_types", nlohmann::json());
    if (kt.is_object() && kt.contains("types") && kt["types"].is_array()) {
      ++kernel_ranks;
      for (const nlohmann::json& t : kt["types"]) {
        if (StringAt(t, "kernel_type") == "MEMORY") {
          memory_pct += NumberAt(t, "pct");
        }
      }
    }
  }
  if (steps == 0 || step <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": the trace analysis holds no step"));
  }
  Measured m;
  m.source = source;
  m.data_share = data / step;
  m.comm_share = comm / step;
  m.memory_share = kernel_ranks ? memory_pct / kernel_ranks / 100.0 : 0.0;
  m.compute_share = std::max(0.0, 1.0 - m.data_share - m.comm_share);
  Finding& f = m.finding;
  f.evidence = absl::StrFormat(
      "over %d rank-steps: data loading %.1f%% of the step, exposed communication %.1f%%, "
      "memory kernels %.1f%% of kernel time",
      steps, 100 * m.data_share, 100 * m.comm_share, 100 * m.memory_share);
  if (m.data_share >= 0.30) {
    m.bottleneck = Bottleneck::kData;
    f.fix =
        "data-bound: fix the input pipeline first (more loader workers, prefetch, packed "
        "pre-tokenized data); a different parallel layout will not help";
  } else if (m.comm_share >= 0.25) {
    m.bottleneck = Bottleneck::kCommunication;
    f.fix =
        "communication-bound: gradient compression (bf16/PowerSGD hooks), topology-aware "
        "placement, pipeline parallelism over slow links; candidates ranked by communication time";
  } else if (m.memory_share >= 0.25) {
    m.bottleneck = Bottleneck::kMemory;
    f.fix =
        "memory-bound: tensor parallelism and activation recomputation; candidates ranked by "
        "memory headroom";
  } else {
    m.bottleneck = Bottleneck::kCompute;
    f.fix =
        "compute-bound: operator fusion (see `trace analyze` fusion candidates) and a faster "
        "data pipeline; candidates ranked by estimated step time";
  }
  f.severity = Severity::kWarning;
  f.id = absl::StrCat("plan.", BottleneckName(m.bottleneck), "_bound");
  f.title = absl::StrCat("the measured run is ", BottleneckName(m.bottleneck), "-bound");
  f.where = source;
  return m;
}

absl::StatusOr<Measured> ReadMeasured(Os* os, const std::string& path) {
  // A trace analysis JSON document first.
  absl::StatusOr<std::string> text = os->ReadFile(path);
  if (text.ok()) {
    nlohmann::json j;
    if (ParseJsonText(*text, kJsonMaxDepth, &j, nullptr) && j.is_object() &&
        StringAt(j, "format") == formats::kTraceAnalysis) {
      return ClassifyAnalysis(j, path);
    }
  }
  // Otherwise whatever `trace analyze` reads: a run directory, trace files.
  absl::StatusOr<std::vector<std::string>> paths = trace::ExpandTracePaths({path});
  if (!paths.ok()) return paths.status();
  if (paths->empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": no trace found"));
  std::vector<trace::RankTrace> traces;
  trace::ReadOptions ro;
  ro.progress = false;
  for (const std::string& p : *paths) {
    absl::StatusOr<trace::RankTrace> t = trace::ReadRankTrace(p, ro);
    if (!t.ok()) return t.status();
    traces.push_back(std::move(*t));
  }
  trace::Report report = trace::AnalyzeRanks(&traces);
  return ClassifyAnalysis(trace::ReportToJson(report), path);
}

// ---- Reports ----
nlohmann::json PlanToJson(const Plan& plan) {
  const PlanOptions& o = plan.options;
  nlohmann::json j;
  j["format"] = formats::kPlan;
  j["version"] = 1;
  j["model"] = {{"params", plan.params},         {"layers", o.model.layers},
                {"hidden", o.model.hidden},      {"heads", o.model.heads},
                {"seq_len", o.model.seq_len},    {"vocab", o.model.vocab},
                {"mlp_ratio", o.model.mlp_ratio}};
  j["cluster"] = {{"devices", o.cluster.devices},
                  {"nodes", o.cluster.nodes},
                  {"device_memory_gb", o.cluster.device_memory_gb},
                  {"intra_node_gbps", o.cluster.intra_node_gbps},
                  {"inter_node_gbps", o.cluster.inter_node_gbps},
                  {"bandwidth_source", o.cluster.bandwidth_source},
                  {"device_tflops", o.cluster.device_tflops}};
  if (!o.cluster.intra_node_gbps_by_size.empty()) {
    nlohmann::json by_size = nlohmann::json::object();
    for (const auto& [size, gbps] : o.cluster.intra_node_gbps_by_size)
      by_size[std::to_string(size)] = Round(gbps, 100);
    j["cluster"]["intra_node_gbps_by_size"] = by_size;
  }
  j["precision"] = PrecisionName(o.precision);
  j["global_batch"] = o.global_batch;
  j["allowance_fraction"] = o.allowance_fraction;
  auto gb = [](double bytes) { return Round(bytes / kBytesPerGB, 1e9); };  // to the byte
  nlohmann::json list = nlohmann::json::array();
  for (const Strategy& s : plan.strategies) {
    list.push_back(
        {{"dp", s.dp},
         {"tp", s.tp},
         {"pp", s.pp},
         {"zero", s.zero},
         {"recompute", RecomputeName(s.recompute)},
         {"micro_batch", s.micro_batch},
         {"micro_batches", s.micro_batches},
         {"sequence_parallel", s.sequence_parallel},
         {"activation_bytes_per_layer", Round(s.activation_bytes_per_layer, 1)},
         {"memory_gb",
          {{"params", gb(s.memory.params)},
           {"grads", gb(s.memory.grads)},
           {"optimizer", gb(s.memory.optimizer)},
           {"model_states", gb(s.memory.params + s.memory.grads + s.memory.optimizer)},
           {"activations", gb(s.memory.activations)},
           {"allowance", gb(s.memory.allowance)},
           {"total", gb(s.memory.total)}}},
         {"comm_gb_per_step", gb(s.comm.total)},
         {"comm_gb", {{"dp", gb(s.comm.dp)}, {"tp", gb(s.comm.tp)}, {"pp", gb(s.comm.pp)}}},
         {"comm_s", Round(s.comm.seconds, 1e9)},
         {"bubble", Round(s.bubble, 1e6)},
         {"step_s", Round(s.step_s, 1e9)},
         {"fits", s.fits},
         {"rank", s.rank}});
  }
  j["strategies"] = std::move(list);
  nlohmann::json rejected = nlohmann::json::array();
  for (const Rejected& r : plan.rejected) {
    rejected.push_back(
        {{"dp", r.dp}, {"tp", r.tp}, {"pp", r.pp}, {"what", r.what}, {"reason", r.reason}});
  }
  j["rejected"] = std::move(rejected);
  if (plan.recommended >= 0) {
    const Strategy& s = plan.strategies[plan.recommended];
    j["recommended"] = {{"dp", s.dp},
                        {"tp", s.tp},
                        {"pp", s.pp},
                        {"zero", s.zero},
                        {"recompute", RecomputeName(s.recompute)},
                        {"micro_batch", s.micro_batch},
                        {"reason", plan.reason}};
  } else {
    j["recommended"] = nullptr;
    j["reason"] = plan.reason;
  }
  if (plan.measured.bottleneck != Bottleneck::kNone) {
    const Measured& m = plan.measured;
    j["measured"] = {{"bottleneck", BottleneckName(m.bottleneck)},
                     {"source", m.source},
                     {"evidence", m.finding.evidence},
                     {"rule", m.finding.fix},
                     {"data_share", Round(m.data_share, 1e4)},
                     {"comm_share", Round(m.comm_share, 1e4)},
                     {"memory_share", Round(m.memory_share, 1e4)}};
  } else {
    j["measured"] = nullptr;
  }
  return j;
}

std::vector<Finding> FindingsFrom(const Plan& plan) {
  std::vector<Finding> out;
  if (plan.measured.bottleneck != Bottleneck::kNone) out.push_back(plan.measured.finding);
  Finding f;
  if (plan.recommended >= 0) {
    const Strategy& s = plan.strategies[plan.recommended];
    f.id = "plan.recommended";
    f.title =
        absl::StrFormat("recommended: dp %d x tp %d x pp %d, ZeRO %d, recompute %s, micro-batch %d",
                        s.dp, s.tp, s.pp, s.zero, RecomputeName(s.recompute), s.micro_batch);
    f.evidence = plan.reason;
  } else {
    f.severity = Severity::kError;
    const bool none = plan.strategies.empty();
    f.id = none ? "plan.no_candidate" : "plan.nothing_fits";
    f.title = plan.reason;
    f.fix = none ? "change the model or the cluster: the rejected combinations say why each "
                   "is impossible"
                 : "add devices, or devices with more memory";
  }
  out.push_back(std::move(f));
  return out;
}

std::string PlanToText(const Plan& plan, int max_rows) {
  const PlanOptions& o = plan.options;
  std::string out = absl::StrFormat(
      "model: %.3g params, %d layers, hidden %d, %d heads, seq %d, vocab %d; %s\n"
      "cluster: %d devices on %d node(s), %.1f GB each; global batch %d; allowance %.0f%%\n"
      "links: busbw %.1f GB/s in a node, %.1f between (%s); %.0f TFLOP/s per device\n\n",
      plan.params, o.model.layers, o.model.hidden, o.model.heads, o.model.seq_len, o.model.vocab,
      PrecisionName(o.precision), o.cluster.devices, o.cluster.nodes, o.cluster.device_memory_gb,
      o.global_batch, 100 * o.allowance_fraction, o.cluster.intra_node_gbps,
      o.cluster.inter_node_gbps, o.cluster.bandwidth_source, o.cluster.device_tflops);
  if (!o.cluster.intra_node_gbps_by_size.empty()) {
    std::vector<std::string> sizes;
    for (const auto& [size, gbps] : o.cluster.intra_node_gbps_by_size)
      sizes.push_back(absl::StrCat(size, " devices ", FormatDouble(gbps, 1)));
    // Before the blank line that ends the header.
    out.insert(out.size() - 1,
               WrapText(absl::StrCat("groups in a node, slowest link of the placement (GB/s): ",
                                     absl::StrJoin(sizes, ", ")),
                        120));
  }
  // One unit for the table: GB, or MB when every fitting candidate is under 1 GB.
  double max_total = 0;
  for (const Strategy& s : plan.strategies) {
    if (s.fits) max_total = std::max({max_total, s.memory.total, s.comm.total});
  }
  const bool mb = max_total < kBytesPerGB;
  const double unit = mb ? 1e6 : kBytesPerGB;
  const std::string u = mb ? " MB" : " GB";
  Table t({"#", "dp", "tp", "pp", "zero", "recompute", "mb", "params", "grads", "optim", "activ",
           "total" + u, "comm" + u, "comm s", "bubble", "step s"});
  int shown = 0, fitting = 0;
  for (const Strategy& s : plan.strategies) {
    if (!s.fits) continue;
    ++fitting;
    if (shown >= max_rows) continue;
    ++shown;
    auto g = [unit](double b) { return FormatDouble(b / unit, 2); };
    t.AddRow({std::to_string(s.rank), std::to_string(s.dp), std::to_string(s.tp),
              std::to_string(s.pp), std::to_string(s.zero), RecomputeName(s.recompute),
              std::to_string(s.micro_batch), g(s.memory.params), g(s.memory.grads),
              g(s.memory.optimizer), g(s.memory.activations), g(s.memory.total),
              FormatDouble(s.comm.total / unit, 3), FormatDouble(s.comm.seconds, 3),
              FormatDouble(100 * s.bubble, 1) + "%", FormatDouble(s.step_s, 3)});
  }
  absl::StrAppend(&out,
                  absl::StrFormat("%d of %zu candidates fit", fitting, plan.strategies.size()));
  if (fitting > shown)
    absl::StrAppend(&out, absl::StrFormat(" (best %d shown; --json has all)", shown));
  absl::StrAppend(&out, "\n");
  if (shown > 0) absl::StrAppend(&out, t.Render());
  if (!plan.rejected.empty()) {
    absl::StrAppend(&out, "\nimpossible combinations:\n");
    for (const Rejected& r : plan.rejected) {
      const std::string where =
          r.dp > 0 ? absl::StrFormat(" (with dp %d, tp %d, pp %d)", r.dp, r.tp, r.pp) : "";
      absl::StrAppend(&out, "  ", r.what, where, ": ", r.reason, "\n");
    }
  }
  if (plan.measured.bottleneck != Bottleneck::kNone) {
    const Measured& m = plan.measured;
    absl::StrAppend(
        &out, "\n",
        WrapText(absl::StrCat("measured (", m.source, "): ", BottleneckName(m.bottleneck),
                              "-bound; ", m.finding.evidence),
                 118),
        WrapText("rule: " + m.finding.fix, 118, "  ", "  "));
  }
  if (plan.recommended >= 0) {
    const Strategy& s = plan.strategies[plan.recommended];
    absl::StrAppend(&out,
                    absl::StrFormat("\nrecommended: dp %d x tp %d x pp %d, ZeRO %d, recompute %s, "
                                    "micro-batch %d (%d per step)\n",
                                    s.dp, s.tp, s.pp, s.zero, RecomputeName(s.recompute),
                                    s.micro_batch, s.micro_batches),
                    WrapText("why: " + plan.reason, 118, "  ", "  "));
  } else {
    absl::StrAppend(&out, "\n", WrapText("recommended: none: " + plan.reason, 118));
  }
  return out;
}

}  // namespace trainscope::plan
