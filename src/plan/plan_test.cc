#include "trainscope/plan/plan.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "trainscope/core/fake_os.h"
#include "trainscope/plan/request.h"

namespace trainscope::plan {
namespace {

// A trainscope train config: 2 layers, 2 heads, width 64, 32 tokens; 4 x 2 sequences a step.
constexpr char kTrainConfig[] =
    R"({"format":"trainscope.train_config","version":1,"model":{"layers":2,"heads":2,"width":64,)"
    R"("seq_len":32},"train":{"micro_batch":4,"grad_accum":2}})";

PlanOptions ZeroPaperOptions() {
  PlanOptions o;
  o.model.params = 7.5e9;
  o.model.layers = 32;
  o.model.hidden = 4096;
  o.model.heads = 32;
  o.model.seq_len = 1024;
  o.model.vocab = 50304;
  o.cluster.devices = 64;
  o.cluster.device_memory_gb = 32;
  o.global_batch = 64;
  o.tp = {1};
  o.pp = {1};
  o.micro_batch = {1};
  o.recompute = {Recompute::kFull};
  return o;
}

// Rajbhandari et al. 2020, Figure 1: 7.5B parameters, Nd = 64, K = 12.
TEST(PlanTest, ZeroPaperModelStates) {
  PlanOptions o = ZeroPaperOptions();
  const double expected_gb[] = {120.0, 31.40625, 16.640625, 1.875};
  for (int z = 0; z <= 3; ++z) {
    Strategy s = Evaluate(o, 7.5e9, 64, 1, 1, z, Recompute::kFull, 1);
    EXPECT_NEAR((s.memory.params + s.memory.grads + s.memory.optimizer) / 1e9, expected_gb[z], 1e-9)
        << "ZeRO " << z;
  }
}

// Korthikanti et al. 2022 Table 2, bf16: sbh(34 + 5as/h) without parallelism, and the TP,
// TP+SP, selective and full rows.
TEST(PlanTest, KorthikantiActivationRows) {
  ModelShape m;
  m.layers = 1;
  m.hidden = 12288;
  m.heads = 96;
  m.seq_len = 2048;
  m.vocab = 51200;
  const double s = 2048, b = 1, h = 12288, a = 96, t = 8;
  const Precision p = Precision::kBf16;
  EXPECT_DOUBLE_EQ(ActivationBytesPerLayer(m, p, Recompute::kNone, 1, false, 1),
                   s * b * h * (34 + 5 * a * s / h));
  EXPECT_DOUBLE_EQ(ActivationBytesPerLayer(m, p, Recompute::kNone, 8, false, 1),
                   s * b * h * (10 + 24 / t + 5 * a * s / (h * t)));
  EXPECT_DOUBLE_EQ(ActivationBytesPerLayer(m, p, Recompute::kNone, 8, true, 1),
                   s * b * h / t * (34 + 5 * a * s / h));
  EXPECT_DOUBLE_EQ(ActivationBytesPerLayer(m, p, Recompute::kSelective, 8, false, 1),
                   s * b * h * (10 + 24 / t));
  EXPECT_DOUBLE_EQ(ActivationBytesPerLayer(m, p, Recompute::kSelective, 8, true, 1),
                   s * b * h * 34 / t);
  EXPECT_DOUBLE_EQ(ActivationBytesPerLayer(m, p, Recompute::kFull, 1, false, 1), 2 * s * b * h);
}

// The fp32 eager trainer (src/train/model.cc): 4 B T ((12 + 2r) C + H T) bytes saved per layer,
// plus two (B, H, T, T) fp32 score tensors live in the current layer.
TEST(PlanTest, Fp32ActivationsCountedFromTheTrainer) {
  ModelShape m;
  m.layers = 1;
  m.hidden = 32;
  m.heads = 2;
  m.seq_len = 32;
  m.vocab = 257;
  EXPECT_DOUBLE_EQ(ActivationBytesPerLayer(m, Precision::kFp32, Recompute::kNone, 1, false, 4),
                   4.0 * 4 * 32 * ((12 + 8) * 32 + 2 * 32));
  EXPECT_DOUBLE_EQ(AttentionWorkingSet(m, Precision::kFp32, 1, 4), 2.0 * 2 * 32 * 32 * 4 * 4);
  EXPECT_DOUBLE_EQ(AttentionWorkingSet(m, Precision::kBf16, 1, 4), 0);
  EXPECT_DOUBLE_EQ(CountParams(m), 22016);  // docs/metrics.md worked check
}

TEST(PlanTest, BubbleAndCommVolumes) {
  EXPECT_DOUBLE_EQ(BubbleFraction(1, 8), 0);
  EXPECT_DOUBLE_EQ(BubbleFraction(4, 8), 3.0 / 11);
  EXPECT_DOUBLE_EQ(BubbleFraction(8, 1), 7.0 / 8);
  PlanOptions o = ZeroPaperOptions();
  Strategy z0 = Evaluate(o, 7.5e9, 64, 1, 1, 0, Recompute::kFull, 1);
  Strategy z3 = Evaluate(o, 7.5e9, 64, 1, 1, 3, Recompute::kFull, 1);
  EXPECT_NEAR(z0.comm.dp, 2.0 * 63 / 64 * 7.5e9 * 2, 1);
  EXPECT_NEAR(z3.comm.dp / z0.comm.dp, 1.5, 1e-12);  // ZeRO-3: 1.5x the all-reduce
}

TEST(PlanTest, ImpossibleCombinationsAreNamed) {
  PlanOptions o = ZeroPaperOptions();
  o.model.layers = 4;
  o.model.heads = 12;
  o.model.hidden = 768;
  o.tp = {1, 8, 128};
  o.pp = {1, 8};
  absl::StatusOr<Plan> p = MakePlan(o);
  ASSERT_TRUE(p.ok()) << p.status();
  std::string all;
  for (const Rejected& r : p->rejected) all += r.what + ": " + r.reason + "\n";
  EXPECT_NE(all.find("tp=8: does not divide the 12 heads"), std::string::npos) << all;
  EXPECT_NE(all.find("tp=128: more devices than given (64)"), std::string::npos) << all;
  EXPECT_NE(all.find("pp=8: more stages than the 4 layers"), std::string::npos) << all;
  for (const Strategy& s : p->strategies) EXPECT_EQ(s.tp * s.pp, 1);
}

TEST(PlanTest, FindingsSayTheBottleneckAndTheRecommendation) {
  Plan p;
  std::vector<Finding> f = FindingsFrom(p);  // no candidate at all
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].id, "plan.no_candidate");
  EXPECT_EQ(f[0].severity, Severity::kError);

  p.strategies.resize(2);
  p.reason = "nothing fits in 80.0 GB: ...";
  f = FindingsFrom(p);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].id, "plan.nothing_fits");
  EXPECT_EQ(f[0].title, p.reason);

  p.recommended = 1;
  p.strategies[1].tp = 2;
  p.reason = "shortest estimated step of 2 fitting candidates: ...";
  p.measured.bottleneck = Bottleneck::kCommunication;
  p.measured.source = "run/trace";
  p.measured.finding = {Severity::kWarning,
                        "plan.communication_bound",
                        "the measured run is communication-bound",
                        "comm 40% of the step",
                        "rank by communication time",
                        "run/trace"};
  nlohmann::json found = nlohmann::json::array();
  for (const Finding& x : FindingsFrom(p)) found.push_back(FindingToJson(x));
  EXPECT_EQ(found, nlohmann::json::parse(R"js([
    {"severity": "warning", "id": "plan.communication_bound",
     "title": "the measured run is communication-bound", "evidence": "comm 40% of the step",
     "fix": "rank by communication time", "where": "run/trace"},
    {"severity": "info", "id": "plan.recommended",
     "title": "recommended: dp 1 x tp 2 x pp 1, ZeRO 0, recompute none, micro-batch 1",
     "evidence": "shortest estimated step of 2 fitting candidates: ...", "fix": ""}])js"));
}

TEST(PlanTest, RecommendsFittingAndRanksByBottleneck) {
  PlanOptions o = ZeroPaperOptions();
  o.tp.clear();
  o.pp.clear();
  o.recompute.clear();
  o.micro_batch.clear();
  o.cluster.nodes = 8;
  absl::StatusOr<Plan> p = MakePlan(o);
  ASSERT_TRUE(p.ok());
  ASSERT_GE(p->recommended, 0);
  EXPECT_TRUE(p->strategies[p->recommended].fits);
  for (size_t i = 1; i < p->strategies.size(); ++i) {
    if (p->strategies[i].fits) {
      EXPECT_LE(p->strategies[0].step_s, p->strategies[i].step_s);
    }
  }
  Measured comm;
  comm.bottleneck = Bottleneck::kCommunication;
  absl::StatusOr<Plan> pc = MakePlan(o, comm);
  ASSERT_TRUE(pc.ok());
  for (const Strategy& s : pc->strategies) {
    if (s.fits) {
      EXPECT_LE(pc->strategies[0].comm.seconds, s.comm.seconds);
    }
  }
  o.cluster.device_memory_gb = 0.5;  // nothing fits
  absl::StatusOr<Plan> none = MakePlan(o);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->recommended, -1);
  EXPECT_NE(none->reason.find("nothing fits"), std::string::npos);
}

TEST(PlanTest, ReadersAndClassifier) {
  FakeOs os;
  os.AddFile("/c.json", kTrainConfig);
  absl::StatusOr<ConfigModel> c = ReadTrainConfig(&os, "/c.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model.layers, 2);
  EXPECT_EQ(c->model.hidden, 64);
  EXPECT_EQ(c->model.vocab, 257);
  EXPECT_EQ(c->precision, Precision::kFp32);
  EXPECT_EQ(c->micro_batch * c->grad_accum, 8);
  os.AddFile("/bad.json", R"({"model":{"layers":-1}})");
  absl::StatusOr<ConfigModel> bad = ReadTrainConfig(&os, "/bad.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("model.layers"), std::string::npos);
  EXPECT_FALSE(ReadTrainConfig(&os, "/missing.json").ok());
  // A number beyond double's range is bad input, not an escaped exception.
  os.AddFile("/overflow.json", R"({"optim":{"lr":1e309}})");
  absl::StatusOr<ConfigModel> overflow = ReadTrainConfig(&os, "/overflow.json");
  ASSERT_FALSE(overflow.ok());
  EXPECT_EQ(overflow.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(overflow.status().message().find("/overflow.json: not valid JSON"), std::string::npos);
  // The shared JSON policy (core/json_text.h): an integer beyond 64 bits and 100,000-deep
  // nesting are one line each, with the byte.
  os.AddFile("/bigint.json", R"({"train":{"steps":18446744073709551616}})");
  absl::StatusOr<ConfigModel> bigint = ReadTrainConfig(&os, "/bigint.json");
  ASSERT_FALSE(bigint.ok());
  EXPECT_EQ(bigint.status().message(),
            "/bigint.json: not valid JSON at byte 18: number out of range: integer "
            "'18446744073709551616' does not fit in 64 bits");
  os.AddFile("/deep.json", std::string(100000, '[') + std::string(100000, ']'));
  absl::StatusOr<ConfigModel> deep = ReadTrainConfig(&os, "/deep.json");
  ASSERT_FALSE(deep.ok());
  EXPECT_EQ(deep.status().message(), "/deep.json: JSON nested deeper than 64 at byte 64");

  os.AddFile(
      "/comm.json",
      R"({"format":"trainscope.selftest.comm","results":[{"op":"all_reduce","bytes":1024,"busbw_gbps":1.0},)"
      R"({"op":"all_reduce","bytes":1048576,"busbw_gbps":3.5},{"op":"all_gather","bytes":4194304,"busbw_gbps":9}]})");
  absl::StatusOr<double> bw = ReadSelftestBusBw(&os, "/comm.json");
  ASSERT_TRUE(bw.ok());
  EXPECT_DOUBLE_EQ(*bw, 3.5);

  nlohmann::json a = nlohmann::json::parse(
      R"({"format":"trainscope.trace.analysis","ranks":[{"per_step":[
        {"step_us":100,"comm_us":40,"host_breakdown":{"data_loading_us":5,"comm_wait_us":35}}]}]})");
  absl::StatusOr<Measured> m = ClassifyAnalysis(a, "x");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->bottleneck, Bottleneck::kCommunication);
  EXPECT_EQ(m->finding.severity, Severity::kWarning);
  EXPECT_EQ(m->finding.id, "plan.communication_bound");
  EXPECT_EQ(m->finding.title, "the measured run is communication-bound");
  EXPECT_EQ(m->finding.where, "x");
  EXPECT_TRUE(absl::StrContains(m->finding.evidence, "exposed communication 35.0%"))
      << m->finding.evidence;
  EXPECT_TRUE(absl::StrContains(m->finding.fix, "ranked by communication time")) << m->finding.fix;
  a["ranks"][0]["per_step"][0]["host_breakdown"]["data_loading_us"] = 50;
  EXPECT_EQ(ClassifyAnalysis(a, "x")->bottleneck, Bottleneck::kData);
  a["ranks"][0]["per_step"][0]["host_breakdown"] = {{"data_loading_us", 1}, {"comm_wait_us", 2}};
  EXPECT_EQ(ClassifyAnalysis(a, "x")->bottleneck, Bottleneck::kCompute);
  EXPECT_FALSE(ClassifyAnalysis(nlohmann::json::object(), "x").ok());
}

// The request's merge: the config's model and batch, shape values over it, then the
// bandwidths (given > selftest comm > topology), then the candidate lists.
TEST(PlanTest, ResolveOptionsMergesConfigFlagsAndBandwidths) {
  FakeOs os;
  os.AddFile("/c.json", kTrainConfig);
  os.AddFile(
      "/comm.json",
      R"({"format":"trainscope.selftest.comm","results":[{"op":"all_reduce","bytes":1024,"busbw_gbps":3.5}]})");
  PlanRequest r;
  r.config = "/c.json";
  r.model.layers = 4;  // over the config's 2
  r.cluster.devices = 2;
  r.cluster.nodes = 2;
  r.cluster.device_memory_gb = 16;
  r.comm = "/comm.json";
  r.recompute = "none,full";
  r.tp = {1};
  absl::StatusOr<PlanOptions> o = ResolveOptions(&os, r);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->model.layers, 4);
  EXPECT_EQ(o->model.hidden, 64);
  EXPECT_EQ(o->model.mlp_ratio, 4);
  EXPECT_EQ(o->precision, Precision::kFp32);
  EXPECT_EQ(o->global_batch, 4 * 2 * 2);  // micro_batch x grad_accum x devices
  EXPECT_DOUBLE_EQ(o->cluster.intra_node_gbps, 3.5);
  EXPECT_DOUBLE_EQ(o->cluster.inter_node_gbps, 3.5);  // the ring crossed nodes: min(3.5, 12.5)
  EXPECT_EQ(o->cluster.bandwidth_source, "/comm.json");
  EXPECT_EQ(o->recompute, (std::vector<Recompute>{Recompute::kNone, Recompute::kFull}));
  EXPECT_EQ(o->tp, std::vector<int>{1});
  // A given intra-node bandwidth wins over the selftest's.
  r.intra_node_given = true;
  r.cluster.intra_node_gbps = 50;
  EXPECT_DOUBLE_EQ(ResolveOptions(&os, r)->cluster.intra_node_gbps, 50);
  // Bad values are named.
  r.recompute = "none,";
  EXPECT_EQ(ResolveOptions(&os, r).status().code(), absl::StatusCode::kInvalidArgument);
  r.recompute = "";
  r.precision = "fp8";
  EXPECT_NE(ResolveOptions(&os, r).status().message().find("fp8"), std::string::npos);
  r.precision = "";
  r.config = "/missing.json";
  EXPECT_FALSE(ResolveOptions(&os, r).ok());
}

}  // namespace
}  // namespace trainscope::plan
