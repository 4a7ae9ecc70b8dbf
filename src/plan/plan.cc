// The planner's model: memory, communication, bubble and step time of one candidate, the
// enumeration of candidates, and the ranking. Formulas: docs/metrics.md "Parallel plan".
#include "trainscope/plan/plan.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace trainscope::plan {
namespace {

// Bytes of one activation element.
double ElementBytes(Precision p) { return p == Precision::kFp32 ? 4.0 : 2.0; }

std::vector<int> Divisors(int n) {
  std::vector<int> d;
  for (int i = 1; i <= n; ++i) {
    if (n % i == 0) d.push_back(i);
  }
  return d;
}

// Ring collective: each device sends (n-1)/n of the buffer per reduce-scatter or all-gather,
// 2(n-1)/n per all-reduce (nccl-tests' busbw factors).
double RingShare(int n) { return n <= 1 ? 0.0 : double(n - 1) / n; }

}  // namespace

double CountParams(const ModelShape& m) {
  const double w = m.hidden, h = double(m.mlp_ratio) * m.hidden;
  const double block = 2 * (2 * w) + (w * 3 * w + 3 * w) + (w * w + w) + (w * h + h) + (h * w + w);
  double total = double(m.vocab) * w + double(m.seq_len) * w + m.layers * block + 2 * w;
  if (!m.tied_head) total += double(m.vocab) * w;
  return total;
}

const char* PrecisionName(Precision p) {
  switch (p) {
    case Precision::kBf16:
      return "bf16";
    case Precision::kFp16:
      return "fp16";
    case Precision::kFp32:
      return "fp32";
  }
  return "?";
}

absl::StatusOr<Precision> ParsePrecision(const std::string& name) {
  if (name == "bf16") return Precision::kBf16;
  if (name == "fp16") return Precision::kFp16;
  if (name == "fp32") return Precision::kFp32;
  return absl::InvalidArgumentError(
      absl::StrCat("precision '", name, "': expected bf16, fp16 or fp32"));
}

const char* RecomputeName(Recompute r) {
  switch (r) {
    case Recompute::kNone:
      return "none";
    case Recompute::kSelective:
      return "selective";
    case Recompute::kFull:
      return "full";
  }
  return "?";
}

absl::StatusOr<Recompute> ParseRecompute(const std::string& name) {
  if (name == "none") return Recompute::kNone;
  if (name == "selective") return Recompute::kSelective;
  if (name == "full") return Recompute::kFull;
  return absl::InvalidArgumentError(
      absl::StrCat("recompute '", name, "': expected none, selective or full"));
}

const char* BottleneckName(Bottleneck b) {
  switch (b) {
    case Bottleneck::kNone:
      return "none";
    case Bottleneck::kCompute:
      return "compute";
    case Bottleneck::kCommunication:
      return "communication";
    case Bottleneck::kMemory:
      return "memory";
    case Bottleneck::kData:
      return "data";
  }
  return "?";
}

StateBytes StateBytesFor(Precision p) {
  if (p == Precision::kFp32) return {4, 4, 8};
  return {2, 2, 12};
}

double ActivationBytesPerLayer(const ModelShape& m, Precision p, Recompute r, int tp,
                               bool sequence_parallel, int micro_batch) {
  const double s = m.seq_len, b = micro_batch, h = m.hidden, a = m.heads, t = tp;
  const bool fp32 = p == Precision::kFp32;
  const double sp_div = sequence_parallel ? t : 1.0;
  if (r == Recompute::kFull) return ElementBytes(p) * s * b * h / sp_div;
  // Korthikanti et al. 2022 Table 2, generalised to an MLP of r*h (Megatron: 18 + 4 ffn/h
  // = 10 replicated + 8 + 4r split); the fp32 eager trainer counted from model.cc.
  const double replicated = fp32 ? 16.0 : 10.0;
  const double split = fp32 ? 4.0 * (8.0 + 2.0 * m.mlp_ratio) : 8.0 + 4.0 * m.mlp_ratio;
  // fp32: the softmax output, which matmul(att, v) saves too (the raw and masked scores are
  // transients: see AttentionWorkingSet).
  const double scores = fp32 ? 4.0 : 5.0;
  double bytes = s * b * h * (replicated / sp_div + split / t);
  if (r == Recompute::kNone) bytes += a * s * s * b * scores / t;
  return bytes;
}

// The eager fp32 trainer's attention builds the scores, scales, masks and softmaxes them one op
// at a time: two (B, H, T, T) fp32 tensors are live at once in the current layer (an op's input
// and output), in forward and again in backward (the softmax gradient and its output). Not
// saved per layer, so counted once. Megatron's fused kernels keep no such working set.
double AttentionWorkingSet(const ModelShape& m, Precision p, int tp, int micro_batch) {
  if (p != Precision::kFp32) return 0;
  return 2.0 * m.heads * double(m.seq_len) * m.seq_len * micro_batch * 4.0 / tp;
}

double BubbleFraction(int pp, int micro_batches) {
  if (pp <= 1) return 0;
  return double(pp - 1) / double(micro_batches + pp - 1);
}

// ---- One candidate ----
// Memory is the busiest stage's: stage 0 of a 1F1B pipeline holds min(m, p) micro-batches of
// L/p layers in flight; the last stage also holds the output layer's logits (one micro-batch).
// Communication is what one device sends per optimizer step; time is volume / busbw, with TP
// groups inside a node when they fit and PP/DP groups crossing nodes when there are several.
Strategy Evaluate(const PlanOptions& o, double params, int dp, int tp, int pp, int zero,
                  Recompute recompute, int micro_batch) {
  Strategy st;
  st.dp = dp;
  st.tp = tp;
  st.pp = pp;
  st.zero = zero;
  st.recompute = recompute;
  st.micro_batch = micro_batch;
  st.sequence_parallel = o.sequence_parallel && tp > 1;
  const int global_batch = o.global_batch > 0 ? o.global_batch : 8 * o.cluster.devices;
  st.micro_batches = std::max(1, global_batch / (dp * micro_batch));
  const ModelShape& m = o.model;
  const double s = m.seq_len, b = micro_batch, h = m.hidden, e = ElementBytes(o.precision);
  const int m_mb = st.micro_batches;

  // Model states (ZeRO: stage 1 shards the optimizer, 2 also the gradients, 3 also the params).
  const StateBytes sb = StateBytesFor(o.precision);
  const double shard = params / (double(tp) * pp);  // parameters this device's stage holds
  st.memory.params = shard * sb.params / (zero >= 3 ? dp : 1);
  st.memory.grads = shard * sb.grads / (zero >= 2 ? dp : 1);
  st.memory.optimizer = shard * sb.optimizer / (zero >= 1 ? dp : 1);

  // Activations.
  st.activation_bytes_per_layer =
      ActivationBytesPerLayer(m, o.precision, recompute, tp, st.sequence_parallel, micro_batch);
  const double layers_per_stage = double(m.layers) / pp;
  const double in_flight = std::min(m_mb, pp);
  double first_stage = st.activation_bytes_per_layer * layers_per_stage * in_flight;
  // Full recompute rebuilds one layer's activations during its backward: that working set
  // is live on top of the saved layer inputs.
  if (recompute == Recompute::kFull) {
    first_stage += ActivationBytesPerLayer(m, o.precision, Recompute::kNone, tp,
                                           st.sequence_parallel, micro_batch);
  }
  // Output layer: Megatron's 4sbh(1 + V/h) (bf16/fp16), the fp32 trainer's logits,
  // log-softmax and gradient 12 s b V; split over TP.
  const double logits = o.precision == Precision::kFp32
                            ? 12.0 * s * b * m.vocab / tp
                            : 4.0 * s * b * h * (1.0 + m.vocab / h) / tp;
  first_stage += AttentionWorkingSet(m, o.precision, tp, micro_batch);
  double last_stage = st.activation_bytes_per_layer * layers_per_stage + logits +
                      AttentionWorkingSet(m, o.precision, tp, micro_batch);
  if (recompute == Recompute::kFull) {
    last_stage += ActivationBytesPerLayer(m, o.precision, Recompute::kNone, tp,
                                          st.sequence_parallel, micro_batch);
  }
  st.memory.activations = pp == 1 ? first_stage + logits : std::max(first_stage, last_stage);
  const double base =
      st.memory.params + st.memory.grads + st.memory.optimizer + st.memory.activations;
  st.memory.allowance = base * o.allowance_fraction;
  st.memory.total = base + st.memory.allowance;
  st.fits = st.memory.total <= o.cluster.device_memory_gb * kBytesPerGB;

  // Communication per device per optimizer step.
  const double grad_bytes = shard * (o.precision == Precision::kFp32 ? 4.0 : 2.0);
  const double param_bytes = shard * (o.precision == Precision::kFp32 ? 4.0 : 2.0);
  const double rs = RingShare(dp);
  if (zero <= 1) {
    st.comm.dp = 2 * rs * grad_bytes;  // one all-reduce (ZeRO-1: reduce-scatter + all-gather)
  } else if (zero == 2) {
    st.comm.dp = rs * grad_bytes * m_mb + rs * param_bytes;  // reduce-scatter per micro-batch
  } else {
    // ZeRO-3: parameters all-gathered in forward and again in backward for every micro-batch,
    // gradients reduce-scattered: 3 x at one micro-batch (Rajbhandari et al.: 1.5x DP).
    st.comm.dp = rs * (2 * param_bytes + grad_bytes) * m_mb;
  }
  // TP: 2 all-reduces in forward, 2 in backward per layer (+2 when full recompute re-runs the
  // forward), each of s*b*h elements; SP turns them into reduce-scatter + all-gather pairs of
  // the same volume.
  const double tp_allreduces = recompute == Recompute::kFull ? 6.0 : 4.0;
  st.comm.tp = tp_allreduces * 2 * RingShare(tp) * s * b * h * e * layers_per_stage * m_mb;
  // PP: per micro-batch, an activation sent forward and its gradient sent backward (1/t of it
  // with SP's scatter/gather).
  st.comm.pp = pp > 1 ? 2.0 * s * b * h * e * m_mb / (st.sequence_parallel ? tp : 1) : 0.0;
  st.comm.total = st.comm.dp + st.comm.tp + st.comm.pp;
  const int per_node = std::max(1, o.cluster.devices / std::max(1, o.cluster.nodes));
  const bool multi = o.cluster.nodes > 1;
  // A group inside a node runs at its size's topology estimate when there is one.
  auto bw = [&](int span) {
    if (multi && span > per_node) return o.cluster.inter_node_gbps * kBytesPerGB;
    auto it = o.cluster.intra_node_gbps_by_size.find(span);
    if (it != o.cluster.intra_node_gbps_by_size.end()) return it->second * kBytesPerGB;
    return o.cluster.intra_node_gbps * kBytesPerGB;
  };
  st.comm.seconds = st.comm.dp / bw(dp * tp * pp) + st.comm.tp / bw(tp) + st.comm.pp / bw(tp * pp);

  // Step time: 6 x params x tokens of matmul FLOPs (+ a forward again under full recompute,
  // + the attention core's 4 s^2 h b per layer under selective), shared by tp x pp devices.
  st.bubble = BubbleFraction(pp, m_mb);
  const double tokens = s * b * m_mb;
  double flops = 6.0 * params * tokens + 12.0 * s * s * h * b * m.layers * m_mb;
  if (recompute == Recompute::kFull)
    flops += (2.0 * params * tokens + 4.0 * s * s * h * b * m.layers * m_mb);
  if (recompute == Recompute::kSelective) flops += 4.0 * s * s * h * b * m.layers * m_mb;
  st.compute_s = flops / (double(tp) * pp) / (o.cluster.device_tflops * 1e12);
  st.step_s = st.compute_s / (1.0 - st.bubble) + st.comm.seconds;
  return st;
}

// ---- Enumeration and ranking ----
namespace {

absl::Status ValidateOptions(const PlanOptions& o) {
  const ModelShape& m = o.model;
  auto positive = [](int v, const char* flag) -> absl::Status {
    if (v <= 0) return absl::InvalidArgumentError(absl::StrCat(flag, " must be > 0, got ", v));
    return absl::OkStatus();
  };
  for (auto [v, f] : {std::pair<int, const char*>{m.layers, "--layers"},
                      {m.hidden, "--hidden"},
                      {m.heads, "--heads"},
                      {m.seq_len, "--seq"},
                      {m.vocab, "--vocab"},
                      {m.mlp_ratio, "mlp_ratio"},
                      {o.cluster.devices, "--devices"},
                      {o.cluster.nodes, "--nodes"}}) {
    absl::Status st = positive(v, f);
    if (!st.ok()) return st;
  }
  if (m.hidden % m.heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--heads ", m.heads, " does not divide --hidden ", m.hidden));
  }
  if (o.cluster.devices % o.cluster.nodes != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--nodes ", o.cluster.nodes, " does not divide --devices ", o.cluster.devices));
  }
  if (!(o.cluster.device_memory_gb > 0)) {
    return absl::InvalidArgumentError("--device-memory must be > 0 GB");
  }
  if (!(o.cluster.intra_node_gbps > 0) || !(o.cluster.inter_node_gbps > 0) ||
      !(o.cluster.device_tflops > 0)) {
    return absl::InvalidArgumentError("bandwidths and --device-tflops must be > 0");
  }
  if (o.global_batch < 0 || !(o.allowance_fraction >= 0) || !(m.params >= 0)) {
    return absl::InvalidArgumentError("--global-batch, --params and --allowance must be >= 0");
  }
  for (int z : o.zero) {
    if (z < 0 || z > 3) {
      return absl::InvalidArgumentError(absl::StrCat("--zero ", z, ": stages are 0-3"));
    }
  }
  for (const std::vector<int>* v : {&o.tp, &o.pp, &o.micro_batch}) {
    for (int x : *v) {
      if (x <= 0) return absl::InvalidArgumentError(absl::StrCat("candidate ", x, " must be > 0"));
    }
  }
  return absl::OkStatus();
}

// The sort key the (measured) bottleneck picks; ties go to less memory, then simpler layouts.
bool Better(const Strategy& a, const Strategy& b, Bottleneck bottleneck) {
  auto key = [&](const Strategy& s) {
    switch (bottleneck) {
      case Bottleneck::kCommunication:
        return s.comm.seconds;
      case Bottleneck::kMemory:
        return s.memory.total;
      default:
        return s.step_s;
    }
  };
  auto differ = [](double x, double y) {
    return std::fabs(x - y) > 1e-9 * std::max(std::fabs(x), std::fabs(y));
  };
  const double ka = key(a), kb = key(b);
  if (differ(ka, kb)) return ka < kb;
  if (differ(a.step_s, b.step_s)) return a.step_s < b.step_s;
  if (a.memory.total != b.memory.total) return a.memory.total < b.memory.total;
  if (a.tp * a.pp != b.tp * b.pp) return a.tp * a.pp < b.tp * b.pp;
  return a.zero < b.zero;
}

// The candidate values of each dimension: the options' lists, or all of them.
struct Candidates {
  std::vector<int> tps, pps, zeros;
  std::vector<Recompute> recomputes;
};

Candidates CandidatesOf(const PlanOptions& o) {
  const std::vector<int> divisors = Divisors(o.cluster.devices);
  Candidates c;
  c.tps = o.tp.empty() ? divisors : o.tp;
  c.pps = o.pp.empty() ? divisors : o.pp;
  c.zeros = o.zero.empty() ? std::vector<int>{0, 1, 2, 3} : o.zero;
  c.recomputes =
      o.recompute.empty()
          ? std::vector<Recompute>{Recompute::kNone, Recompute::kSelective, Recompute::kFull}
          : o.recompute;
  return c;
}

bool TpOk(const PlanOptions& o, int tp) {
  const int n = o.cluster.devices;
  return tp <= n && n % tp == 0 && o.model.heads % tp == 0;
}

bool PpOk(const PlanOptions& o, int pp) {
  const int n = o.cluster.devices;
  return pp <= n && n % pp == 0 && pp <= o.model.layers && o.model.layers % pp == 0;
}

// Impossible values are named once each, with the reason.
void RejectImpossible(const PlanOptions& o, const Candidates& c, Plan* plan) {
  const int n = o.cluster.devices;
  const int per_node = n / o.cluster.nodes;
  for (int tp : c.tps) {
    if (tp > n) {
      plan->rejected.push_back(
          {0, tp, 0, absl::StrCat("tp=", tp), absl::StrCat("more devices than given (", n, ")")});
    } else if (n % tp != 0) {
      plan->rejected.push_back(
          {0, tp, 0, absl::StrCat("tp=", tp), absl::StrCat("does not divide --devices ", n)});
    } else if (o.model.heads % tp != 0) {
      plan->rejected.push_back({0, tp, 0, absl::StrCat("tp=", tp),
                                absl::StrCat("does not divide the ", o.model.heads, " heads")});
    } else if (tp > per_node) {
      // Possible but slow: kept, the inter-node bandwidth prices it.
    }
  }
  for (int pp : c.pps) {
    if (pp > n) {
      plan->rejected.push_back(
          {0, 0, pp, absl::StrCat("pp=", pp), absl::StrCat("more devices than given (", n, ")")});
    } else if (pp > o.model.layers) {
      plan->rejected.push_back({0, 0, pp, absl::StrCat("pp=", pp),
                                absl::StrCat("more stages than the ", o.model.layers, " layers")});
    } else if (o.model.layers % pp != 0) {
      plan->rejected.push_back(
          {0, 0, pp, absl::StrCat("pp=", pp),
           absl::StrCat("does not divide the ", o.model.layers, " layers into equal stages")});
    } else if (n % pp != 0) {
      plan->rejected.push_back(
          {0, 0, pp, absl::StrCat("pp=", pp), absl::StrCat("does not divide --devices ", n)});
    }
  }
}

// Every candidate of one tp x pp layout (dp follows): the micro-batches that divide the batch
// per data-parallel rank, x ZeRO stages (none above 0 at dp=1), x recomputation; what cannot
// run goes to plan->rejected.
void EvaluateLayout(const PlanOptions& o, const Candidates& c, int tp, int pp, Plan* plan) {
  const int n = o.cluster.devices;
  if (tp * pp > n) {
    plan->rejected.push_back(
        {0, tp, pp, absl::StrCat("tp=", tp, " x pp=", pp),
         absl::StrCat("needs ", tp * pp, " devices, more than the ", n, " given")});
    return;
  }
  if (n % (tp * pp) != 0) {
    plan->rejected.push_back({0, tp, pp, absl::StrCat("tp=", tp, " x pp=", pp),
                              absl::StrCat("does not divide --devices ", n)});
    return;
  }
  const int dp = n / (tp * pp);
  if (o.global_batch % dp != 0) {
    plan->rejected.push_back({dp, tp, pp, absl::StrCat("dp=", dp),
                              absl::StrCat("does not divide --global-batch ", o.global_batch)});
    return;
  }
  const int per_dp = o.global_batch / dp;
  std::vector<int> mbs = o.micro_batch;
  if (mbs.empty()) {
    for (int mb = 1; mb <= per_dp; mb *= 2) {
      if (per_dp % mb == 0) mbs.push_back(mb);
    }
  }
  std::vector<int> zs;
  for (int z : c.zeros) {
    if (z > 0 && dp == 1) continue;  // named below
    zs.push_back(z);
  }
  if (dp == 1 && zs.size() < c.zeros.size()) {
    plan->rejected.push_back(
        {dp, tp, pp, "zero=1-3", "dp=1: ZeRO shards over data-parallel ranks, none to shard over"});
  }
  for (int mb : mbs) {
    if (per_dp % mb != 0) {
      plan->rejected.push_back(
          {dp, tp, pp, absl::StrCat("micro_batch=", mb),
           absl::StrCat("does not divide the ", per_dp, " sequences per data-parallel rank")});
      continue;
    }
    for (int z : zs) {
      for (Recompute r : c.recomputes) {
        plan->strategies.push_back(Evaluate(o, plan->params, dp, tp, pp, z, r, mb));
      }
    }
  }
}

// Fitting candidates first, ranked as the bottleneck says (the others by memory), and the
// recommendation with its reason.
void RankAndRecommend(Bottleneck bottleneck, Plan* plan) {
  const PlanOptions& o = plan->options;
  std::stable_sort(plan->strategies.begin(), plan->strategies.end(),
                   [&](const Strategy& a, const Strategy& b) {
                     if (a.fits != b.fits) return a.fits;
                     if (!a.fits) return a.memory.total < b.memory.total;
                     return Better(a, b, bottleneck);
                   });
  int rank = 0;
  for (Strategy& s : plan->strategies) {
    if (s.fits) s.rank = ++rank;
  }
  if (!plan->strategies.empty() && plan->strategies[0].fits) {
    plan->recommended = 0;
    const Strategy& s = plan->strategies[0];
    const char* by = bottleneck == Bottleneck::kCommunication ? "least communication time"
                     : bottleneck == Bottleneck::kMemory      ? "most memory headroom"
                                                              : "shortest estimated step";
    plan->reason = absl::StrFormat(
        "%s of %d fitting candidates: %.3g of %.1f GB per device, %.3g GB sent per device per step "
        "(%.3g s at the %s bandwidths), bubble %.1f%%, est. step %.3g s",
        by, rank, s.memory.total / kBytesPerGB, o.cluster.device_memory_gb,
        s.comm.total / kBytesPerGB, s.comm.seconds, o.cluster.bandwidth_source, 100 * s.bubble,
        s.step_s);
  } else if (plan->strategies.empty()) {
    plan->reason = "no candidate: every combination was impossible (see rejected)";
  } else {
    const Strategy& s = plan->strategies[0];
    plan->reason = absl::StrFormat(
        "nothing fits in %.1f GB: the smallest candidate (dp %d, tp %d, pp %d, ZeRO %d, "
        "recompute %s, micro-batch %d) needs %.1f GB; add devices or memory",
        o.cluster.device_memory_gb, s.dp, s.tp, s.pp, s.zero, RecomputeName(s.recompute),
        s.micro_batch, s.memory.total / kBytesPerGB);
  }
}

}  // namespace

absl::StatusOr<Plan> MakePlan(const PlanOptions& options, const Measured& measured) {
  absl::Status valid = ValidateOptions(options);
  if (!valid.ok()) return valid;
  Plan plan;
  plan.options = options;
  plan.measured = measured;
  PlanOptions& o = plan.options;
  if (o.global_batch == 0) o.global_batch = 8 * o.cluster.devices;
  plan.params = o.model.params > 0 ? o.model.params : CountParams(o.model);
  const Candidates c = CandidatesOf(o);
  RejectImpossible(o, c, &plan);
  for (int tp : c.tps) {
    if (!TpOk(o, tp)) continue;
    for (int pp : c.pps) {
      if (PpOk(o, pp)) EvaluateLayout(o, c, tp, pp, &plan);
    }
  }
  RankAndRecommend(measured.bottleneck, &plan);
  return plan;
}

}  // namespace trainscope::plan
