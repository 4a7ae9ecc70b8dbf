// Operator- and kernel-level sections of a rank's analysis: top operators and kernels, kernel
// time by type, fragmentation and launch overhead, shape churn, suspects, fusion candidates.
#include <algorithm>
#include <array>
#include <cmath>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "trace/analysis_internal.h"
#include "trainscope/core/stats.h"

namespace trainscope::trace::internal {
namespace {

bool OpHas(std::string_view s, std::string_view sub) {
  return s.find(sub) != std::string_view::npos;
}

struct Agg {
  int64_t count = 0;
  int64_t total_ns = 0;
  int64_t self_ns = 0;
};

double Us(int64_t ns) { return std::round(ns / 10.0) / 100.0; }  // us, 2 decimals
double Round2(double v) { return std::round(v * 100.0) / 100.0; }

// Top `k` names by total and by self time, with count, mean and p95 (second pass).
nlohmann::json TopTable(const RankTrace& t, const absl::flat_hash_map<uint32_t, Agg>& agg,
                        const std::vector<uint32_t>& members, bool with_self, int k) {
  std::vector<std::pair<uint32_t, Agg>> v(agg.begin(), agg.end());
  auto pick = [&](auto key) {
    std::sort(v.begin(), v.end(), [&](const auto& a, const auto& b) {
      if (key(a.second) != key(b.second)) return key(a.second) > key(b.second);
      return t.strings.Get(a.first) < t.strings.Get(b.first);
    });
    std::vector<uint32_t> names;
    for (int i = 0; i < k && i < static_cast<int>(v.size()); ++i) names.push_back(v[i].first);
    return names;
  };
  std::vector<uint32_t> by_total = pick([](const Agg& a) { return a.total_ns; });
  std::vector<uint32_t> by_self;
  if (with_self) by_self = pick([](const Agg& a) { return a.self_ns; });
  absl::flat_hash_map<uint32_t, std::vector<double>> durs;
  for (uint32_t n : by_total) durs[n];
  for (uint32_t n : by_self) durs[n];
  for (uint32_t i : members) {
    auto it = durs.find(t.events[i].name);
    if (it != durs.end()) it->second.push_back(t.events[i].dur_ns / 1e3);
  }
  auto row = [&](uint32_t n) {
    const Agg& a = agg.at(n);
    std::vector<double>& d = durs[n];
    std::sort(d.begin(), d.end());
    nlohmann::json j = {{"name", t.strings.Get(n)},
                        {"count", a.count},
                        {"total_us", Us(a.total_ns)},
                        {"mean_us", Round2(a.count ? a.total_ns / 1e3 / a.count : 0)},
                        {"p95_us", Round2(PercentileSorted(d, 95))}};
    if (with_self) j["self_us"] = Us(a.self_ns);
    return j;
  };
  nlohmann::json out = nlohmann::json::object();
  out["by_total"] = nlohmann::json::array();
  for (uint32_t n : by_total) out["by_total"].push_back(row(n));
  if (with_self) {
    out["by_self"] = nlohmann::json::array();
    for (uint32_t n : by_self) out["by_self"].push_back(row(n));
  }
  return out;
}

bool IsHostOp(const Event& e) {
  return e.cat == Category::kCpuOp || e.cat == Category::kNone || e.cat == Category::kUnknown;
}

}  // namespace

bool IsHeavyComputeOp(std::string_view n) {
  for (const char* k : {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul",
                        "aten::linear", "aten::conv", "aten::convolution", "aten::_convolution",
                        "aten::_softmax", "aten::native_layer_norm", "aten::scaled_dot_product"})
    if (n.rfind(k, 0) == 0) return true;
  return false;
}

bool IsGatherScatter(std::string_view n) {
  return OpHas(n, "gather") || OpHas(n, "scatter") || OpHas(n, "index_select") ||
         OpHas(n, "index_add") || OpHas(n, "index_put") || OpHas(n, "embedding_dense_backward") ||
         OpHas(n, "Gather") || OpHas(n, "Scatter") || OpHas(n, "IndexPut");
}

bool IsFusible(std::string_view n) {
  for (const char* k :
       {"add",     "mul",         "sub",     "div",        "gelu",       "relu",       "silu",
        "sigmoid", "tanh",        "dropout", "layer_norm", "batch_norm", "group_norm", "rms_norm",
        "softmax", "conv",        "linear",  "bias",       "exp",        "pow",        "clamp",
        "where",   "masked_fill", "Add",     "Mul",        "Gelu",       "Relu",       "Norm"})
    if (OpHas(n, k)) return true;
  return false;
}

namespace {

// "AdamW" from the annotation Optimizer.step#AdamW.step ("" when the name has no class).
std::string OptimizerName(const std::string& annotation) {
  size_t hash = annotation.find('#');
  if (hash == std::string::npos) return "";
  std::string cls = annotation.substr(hash + 1);
  size_t dot = cls.find('.');
  return dot == std::string::npos ? cls : cls.substr(0, dot);
}

std::string KnownPattern(const std::vector<std::string>& names) {
  auto any = [&](std::initializer_list<const char*> keys) {
    for (const auto& n : names)
      for (const char* k : keys)
        if (OpHas(n, k)) return true;
    return false;
  };
  if (any({"layer_norm", "rms_norm"}) && any({"add"}) && any({"gelu", "relu", "silu"}))
    return "LayerNorm+Add+activation";
  if (any({"conv"}) && any({"batch_norm"}) && any({"relu"})) return "Conv+BN+ReLU";
  if (any({"linear", "addmm"}) && any({"gelu", "relu", "silu"})) return "Linear+activation";
  if (any({"layer_norm", "rms_norm"}) && any({"add"})) return "Add+LayerNorm";
  return "";
}

// Sums over the host operators that the suspects need.
struct HostOpSums {
  int64_t self_total = 0;   // self time of all operators
  int64_t gather_self = 0;  // of those, gather/scatter/index operators
};

// --- Top host operators (total and self time): d["top_operators"]. ---
HostOpSums TopOperators(const RankTrace& t, const HostView& hv, const AnalyzeOptions& opt,
                        nlohmann::json* d) {
  const auto& ev = t.events;
  std::vector<bool> is_step(ev.size(), false);
  for (uint32_t i : hv.steps) is_step[i] = true;
  absl::flat_hash_map<uint32_t, Agg> ops;
  std::vector<uint32_t> op_members;
  std::vector<int64_t> child_ns(ev.size(), 0);
  for (uint32_t i : hv.order)
    if (hv.parent[i] >= 0) child_ns[hv.parent[i]] += ev[i].dur_ns;
  HostOpSums sums;
  for (uint32_t i : hv.order) {
    const Event& e = ev[i];
    if (!IsHostOp(e) || is_step[i] || hv.names[e.name].annotation) continue;  // not operators
    Agg& a = ops[e.name];
    ++a.count;
    a.total_ns += e.dur_ns;
    int64_t self = std::max<int64_t>(0, e.dur_ns - child_ns[i]);
    a.self_ns += self;
    op_members.push_back(i);
    sums.self_total += self;
    if (hv.names[e.name].gather) sums.gather_self += self;
  }
  (*d)["top_operators"] = TopTable(t, ops, op_members, true, opt.top_k);
  return sums;
}

// The device kernels counted by the sections below, and their sums.
struct Kernels {
  std::vector<uint32_t> members;  // event indices
  int64_t n_short = 0, short_ns = 0, total_ns = 0, gather_ns = 0;
};

// --- Device kernels: d["top_kernels"]. ---
Kernels DeviceKernels(const RankTrace& t, const HostView& hv, const AnalyzeOptions& opt,
                      nlohmann::json* d) {
  const auto& ev = t.events;
  absl::flat_hash_map<uint32_t, Agg> kernels;
  Kernels k;
  for (size_t i = 0; i < ev.size(); ++i) {
    const Event& e = ev[i];
    if (!(e.flags & kFlagDevice) || (!hv.timeline[i] && hv.has_device)) continue;
    if (!hv.kept.empty() && !hv.kept[i]) continue;  // HTA's step filter
    Agg& a = kernels[e.name];
    ++a.count;
    a.total_ns += e.dur_ns;
    k.members.push_back(static_cast<uint32_t>(i));
    k.total_ns += e.dur_ns;
    if (e.dur_ns < opt.short_kernel_ns) {
      ++k.n_short;
      k.short_ns += e.dur_ns;
    }
    if (hv.names[e.name].gather) k.gather_ns += e.dur_ns;
  }
  if (!k.members.empty()) {
    (*d)["top_kernels"] = TopTable(t, kernels, k.members, false, opt.top_k)["by_total"];
  }
  return k;
}

// First-level aten operators: aten ops without an aten ancestor (what the framework
// dispatches; their children are its decomposition).
std::vector<uint32_t> FirstLevelOps(const RankTrace& t, const HostView& hv) {
  const auto& ev = t.events;
  std::vector<uint32_t> first_level;
  for (uint32_t i : hv.order) {
    if (!hv.names[ev[i].name].aten) continue;
    bool nested = false;
    for (int32_t p = hv.parent[i]; p >= 0; p = hv.parent[p])
      if (hv.names[ev[p].name].aten) {
        nested = true;
        break;
      }
    if (!nested) first_level.push_back(i);
  }
  return first_level;
}

// --- Fragmentation: tiny kernels, or tiny first-level operators on host-only traces. ---
nlohmann::json Fragmentation(const RankTrace& t, const AnalyzeOptions& opt, const Kernels& k,
                             const std::vector<uint32_t>& first_level, double steps) {
  nlohmann::json frag = {{"short_threshold_us", opt.short_kernel_ns / 1e3}};
  if (!k.members.empty()) {
    frag["kernels"] = static_cast<int64_t>(k.members.size());
    frag["kernels_per_step"] = Round2(k.members.size() / steps);
    frag["short_kernels"] = k.n_short;
    frag["short_kernels_pct"] = Round2(100.0 * k.n_short / k.members.size());
    frag["short_kernels_time_pct"] = Round2(k.total_ns ? 100.0 * k.short_ns / k.total_ns : 0);
  }
  int64_t short_ops = 0;
  for (uint32_t i : first_level)
    if (t.events[i].dur_ns < opt.short_kernel_ns) ++short_ops;
  frag["operators"] = static_cast<int64_t>(first_level.size());
  frag["operators_per_step"] = Round2(first_level.size() / steps);
  frag["short_operators"] = short_ops;
  frag["short_operators_pct"] =
      Round2(first_level.empty() ? 0 : 100.0 * short_ops / first_level.size());
  return frag;
}

double Mean(const std::vector<double>& v) {
  double x = 0;
  for (double d : v) x += d;
  return x / v.size();
}

// The p-th percentile by rank (ceil(p/100 n)-th smallest); reorders v.
double RankPercentile(std::vector<double>& v, double p) {
  size_t k = std::min(v.size() - 1, static_cast<size_t>(std::ceil(p / 100 * v.size())) - 1);
  std::nth_element(v.begin(), v.begin() + k, v.end());
  return v[k];
}

// --- Launch overhead (HTA cuda kernel launch stats): runtime launch <-> kernel by
// correlation; launch delay = kernel start - launch end. A kernel cannot start before its
// launch call returns on one clock; when it appears to (CUPTI host/device clock skew, or a
// correlation that pairs the wrong events) its delay is not a measurement: it is counted in
// negative_launch_delay and left out of the delay statistics (the two durations stay). ---
// Fills frag["launch"] and out->stats.negative_launch_delay; returns whether the trace has
// any launch events.
bool LaunchOverhead(const RankTrace& t, const HostView& hv, const AnalyzeOptions& opt,
                    const Kernels& kernels, nlohmann::json* frag, RankResult* out) {
  const auto& ev = t.events;
  absl::flat_hash_map<uint64_t, uint32_t> launches;
  for (uint32_t i : hv.order)
    if (ev[i].correlation && hv.names[ev[i].name].launch) launches[ev[i].correlation] = i;
  if (launches.empty()) return false;
  std::vector<double> cpu, gpu, delay;
  int64_t short_k = 0, runtime_out = 0, delay_out = 0, negative = 0;
  for (uint32_t i : kernels.members) {
    const Event& k = ev[i];
    if (!k.correlation) continue;
    auto it = launches.find(k.correlation);
    if (it == launches.end()) continue;
    const Event& l = ev[it->second];
    cpu.push_back(l.dur_ns / 1e3);
    gpu.push_back(k.dur_ns / 1e3);
    if (k.dur_ns < l.dur_ns && l.dur_ns <= opt.launch_runtime_cutoff_ns) ++short_k;
    if (l.dur_ns > opt.launch_runtime_cutoff_ns) ++runtime_out;
    int64_t dl = k.ts_ns - l.end_ns();
    if (dl < 0) {
      ++negative;
      continue;
    }
    delay.push_back(dl / 1e3);
    if (dl > opt.launch_delay_cutoff_ns) ++delay_out;
  }
  out->stats.negative_launch_delay = negative;
  if (cpu.empty()) return true;
  // No valid delay at all: the percentiles are null, not a made-up 0.
  nlohmann::json p50, p95;
  if (!delay.empty()) {
    p50 = Round2(RankPercentile(delay, 50));
    p95 = Round2(RankPercentile(delay, 95));
  }
  (*frag)["launch"] = {{"launches", static_cast<int64_t>(cpu.size())},
                       {"cpu_launch_mean_us", Round2(Mean(cpu))},
                       {"kernel_mean_us", Round2(Mean(gpu))},
                       {"kernels_shorter_than_launch", short_k},
                       {"kernels_shorter_than_launch_pct", Round2(100.0 * short_k / cpu.size())},
                       {"launch_runtime_outliers", runtime_out},
                       {"launch_delay_p50_us", p50},
                       {"launch_delay_p95_us", p95},
                       {"launch_delay_outliers", delay_out},
                       {"negative_launch_delays", negative}};
  return true;
}

// --- Shape churn: distinct input shapes per operator. ---
nlohmann::json ShapeChurn(const RankTrace& t, const AnalyzeOptions& opt) {
  const auto& ev = t.events;
  absl::flat_hash_map<uint32_t, absl::flat_hash_set<uint32_t>> shapes;
  absl::flat_hash_map<uint32_t, int64_t> shape_calls;
  for (size_t i = 0; i < ev.size(); ++i) {
    if (!ev[i].input_dims) continue;
    shapes[ev[i].name].insert(ev[i].input_dims);
    ++shape_calls[ev[i].name];
  }
  std::vector<std::pair<size_t, uint32_t>> churn;
  for (const auto& [n, s] : shapes)
    if (static_cast<int>(s.size()) >= opt.shape_churn_min_shapes) churn.push_back({s.size(), n});
  std::sort(churn.begin(), churn.end(), [&](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first
                              : t.strings.Get(a.second) < t.strings.Get(b.second);
  });
  nlohmann::json out = nlohmann::json::array();
  for (size_t i = 0; i < churn.size() && static_cast<int>(i) < opt.top_k; ++i)
    out.push_back({{"name", t.strings.Get(churn[i].second)},
                   {"distinct_shapes", churn[i].first},
                   {"calls", shape_calls[churn[i].second]}});
  return out;
}

// The top_k names of m by total time (name order on ties), with count and total.
nlohmann::json ByTotal(const RankTrace& t, const absl::flat_hash_map<uint32_t, Agg>& m, int top_k) {
  std::vector<std::pair<int64_t, uint32_t>> v;
  for (const auto& [n, a] : m) v.push_back({a.total_ns, n});
  std::sort(v.begin(), v.end(), [&](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first
                              : t.strings.Get(a.second) < t.strings.Get(b.second);
  });
  nlohmann::json j = nlohmann::json::array();
  for (size_t i = 0; i < v.size() && static_cast<int>(i) < top_k; ++i)
    j.push_back({{"name", t.strings.Get(v[i].second)},
                 {"count", m.at(v[i].second).count},
                 {"total_us", Us(v[i].first)}});
  return j;
}

void Count(const Event& e, Agg* a) {
  ++a->count;
  a->total_ns += e.dur_ns;
}

// --- Suspects: float64 operators, heavy operators run on the CPU of a device run, AI CPU
// tasks, host-device synchronisations, the share of gather/scatter. ---
nlohmann::json Suspects(const RankTrace& t, const HostView& hv, const AnalyzeOptions& opt,
                        double steps, const HostOpSums& ops, const Kernels& k, bool has_launches) {
  const auto& ev = t.events;
  absl::flat_hash_map<uint32_t, Agg> f64, syncs, aicpu, on_cpu;
  std::vector<bool> launched(ev.size(), false);
  for (uint32_t i : hv.order) {
    if (!hv.names[ev[i].name].launch) continue;
    for (int32_t p = hv.parent[i]; p >= 0 && !launched[p]; p = hv.parent[p]) launched[p] = true;
  }
  for (size_t i = 0; i < ev.size(); ++i) {
    const Event& e = ev[i];
    if (e.flags & kFlagFloat64) Count(e, &f64[e.name]);
    if (e.flags & kFlagAiCpu && e.dur_ns >= opt.aicpu_min_task_ns) Count(e, &aicpu[e.name]);
    // aten::item and friends only synchronise with a device when there is one; cuda_sync
    // events sit on the device timeline.
    if (e.cat == Category::kCudaSync || (!(e.flags & kFlagDevice) && hv.names[e.name].sync &&
                                         (hv.has_device || !hv.names[e.name].aten)))
      Count(e, &syncs[e.name]);
    if (e.flags & kFlagDevice) continue;
    // Only where kernels are launched from the host (CUDA/HIP runtime events): on other
    // stacks a missing launch says nothing.
    if (hv.has_device && has_launches && hv.timeline[i] && !launched[i] && e.dur_ns >= 100'000 &&
        hv.names[e.name].heavy)
      Count(e, &on_cpu[e.name]);
  }
  nlohmann::json sus = nlohmann::json::object();
  sus["float64"] = ByTotal(t, f64, opt.top_k);
  sus["cpu_ops_on_device_run"] = ByTotal(t, on_cpu, opt.top_k);
  sus["ai_cpu_tasks"] = ByTotal(t, aicpu, opt.top_k);
  sus["host_device_syncs"] = ByTotal(t, syncs, opt.top_k);
  int64_t sync_count = 0;
  for (const auto& [n, a] : syncs) sync_count += a.count;
  sus["host_device_syncs_per_step"] = Round2(sync_count / steps);
  double gather_pct = k.total_ns && hv.has_device
                          ? 100.0 * k.gather_ns / k.total_ns
                          : (ops.self_total ? 100.0 * ops.gather_self / ops.self_total : 0);
  sus["gather_scatter_pct"] = Round2(gather_pct);
  return sus;
}

// A sequence of first-level operators. One inside Optimizer.step (AdamW's div > add_ >
// addcdiv_ when foreach=False) is the optimizer's per-parameter loop: its fix is a
// fused/foreach optimizer, not a fused LayerNorm, so each sequence remembers the optimizer
// annotation it ran under.
struct Seq {
  int64_t count = 0;
  int64_t total_ns = 0;
  int64_t in_optimizer = 0;
  uint32_t optimizer = 0;  // name id of the enclosing Optimizer.step annotation
};
using SeqKey = std::array<uint32_t, 3>;  // name ids, 0-padded

// The name id of the Optimizer.step annotation around event i, 0 when none.
uint32_t OptimizerOf(const RankTrace& t, const HostView& hv, uint32_t i) {
  for (int32_t p = hv.parent[i]; p >= 0; p = hv.parent[p])
    if (hv.names[t.events[p].name].phase == Phase::kOptimizer) return t.events[p].name;
  return 0;
}

// Every run of 2-3 consecutive first-level operators on one thread, all fusible, not one
// operator repeated.
absl::flat_hash_map<SeqKey, Seq> CountSequences(const RankTrace& t, const HostView& hv,
                                                const std::vector<uint32_t>& first_level) {
  const auto& ev = t.events;
  absl::flat_hash_map<SeqKey, Seq> seqs;
  for (size_t i = 0; i < first_level.size(); ++i) {
    for (int len = 2; len <= 3; ++len) {
      if (i + len > first_level.size()) break;
      SeqKey key = {0, 0, 0};
      int64_t total = 0;
      bool ok = true;
      for (int k = 0; k < len; ++k) {
        const Event& e = ev[first_level[i + k]];
        if (ThreadKey(e) != ThreadKey(ev[first_level[i]]) || !hv.names[e.name].fusible) {
          ok = false;
          break;
        }
        key[k] = e.name;
        total += e.dur_ns;
      }
      if (!ok || (key[0] == key[1] && (len == 2 || key[1] == key[2]))) continue;
      Seq& s = seqs[key];
      ++s.count;
      s.total_ns += total;
      if (uint32_t o = OptimizerOf(t, hv, first_level[i])) {
        ++s.in_optimizer;
        s.optimizer = o;
      }
    }
  }
  return seqs;
}

// --- Fusion candidates: frequent sequences of 2-3 consecutive first-level operators on one
// thread, all fusible (elementwise, norm, activation, conv, linear); the 5 with the most
// time. ---
nlohmann::json FusionCandidates(const RankTrace& t, const HostView& hv, const AnalyzeOptions& opt,
                                const std::vector<uint32_t>& first_level) {
  std::vector<std::pair<SeqKey, Seq>> sv;
  for (const auto& kv : CountSequences(t, hv, first_level))
    if (kv.second.count >= opt.fusion_min_count) sv.push_back(kv);
  std::sort(sv.begin(), sv.end(), [&](const auto& a, const auto& b) {
    if (a.second.total_ns != b.second.total_ns) return a.second.total_ns > b.second.total_ns;
    return a.first < b.first;
  });
  nlohmann::json out = nlohmann::json::array();
  for (size_t i = 0; i < sv.size() && i < 5; ++i) {
    std::vector<std::string> names;
    std::string joined;
    for (uint32_t n : sv[i].first) {
      if (!n) continue;
      names.push_back(t.strings.Get(n));
      joined += (joined.empty() ? "" : " > ") + t.strings.Get(n);
    }
    const Seq& q = sv[i].second;
    const bool optimizer = 2 * q.in_optimizer > q.count;
    nlohmann::json& c = out.emplace_back(nlohmann::json::object());
    if (optimizer) c["optimizer"] = OptimizerName(t.strings.Get(q.optimizer));
    c.update({{"sequence", joined},
              {"pattern", optimizer ? "optimizer" : KnownPattern(names)},
              {"count", q.count},
              {"total_us", Us(q.total_ns)}});
  }
  return out;
}

}  // namespace

void AnalyzeOperators(const RankTrace& t, const HostView& hv, const AnalyzeOptions& opt,
                      RankResult* out) {
  nlohmann::json& d = out->details;
  const double steps = std::max<size_t>(1, out->steps.size());
  HostOpSums ops = TopOperators(t, hv, opt, &d);
  Kernels kernels = DeviceKernels(t, hv, opt, &d);
  std::vector<uint32_t> first_level = FirstLevelOps(t, hv);
  nlohmann::json frag = Fragmentation(t, opt, kernels, first_level, steps);
  bool has_launches = LaunchOverhead(t, hv, opt, kernels, &frag, out);
  d["fragmentation"] = frag;
  d["shape_churn"] = ShapeChurn(t, opt);
  d["suspects"] = Suspects(t, hv, opt, steps, ops, kernels, has_launches);
  d["fusion_candidates"] = FusionCandidates(t, hv, opt, first_level);
}

}  // namespace trainscope::trace::internal
