// Unit tests of the gradient compressors (compression.h) on one rank (the collectives are
// the identity), and of the comm.compression config keys.
#include "train/compression.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "trainscope/train/config.h"

namespace trainscope::train {
namespace {

// One rank: an all-reduce leaves the buffer as it is, an all-gather copies it. Counts the
// payload it was handed, as the comm layer would see it.
Collectives CompressLoopback(int64_t* bytes) {
  Collectives c;
  c.world_size = 1;
  c.all_reduce = [bytes](torch::Tensor& buf, const std::string&) {
    *bytes += buf.numel() * static_cast<int64_t>(buf.element_size());
    return absl::OkStatus();
  };
  c.all_gather = [bytes](const torch::Tensor& send, torch::Tensor& recv, const std::string&) {
    *bytes += send.numel() * static_cast<int64_t>(send.element_size());
    recv.copy_(send);
    return absl::OkStatus();
  };
  return c;
}

// A rank-8 matrix with decaying singular directions plus a little noise (64 x 48).
torch::Tensor CompressLowRankPlusNoise(uint64_t seed) {
  torch::manual_seed(seed);
  torch::Tensor a = torch::randn({64, 8});
  torch::Tensor scale = torch::arange(8, 0, -1, torch::kFloat);  // 8, 7, ..., 1
  torch::Tensor b = torch::randn({8, 48});
  return torch::matmul(a * scale, b) + 0.01 * torch::randn({64, 48});
}

double CompressRelError(const torch::Tensor& approx, const torch::Tensor& exact) {
  return (approx - exact).norm().item<double>() / exact.norm().item<double>();
}

TEST(PowerSgdTest, ReconstructionErrorFallsWithRank) {
  const torch::Tensor m = CompressLowRankPlusNoise(3);
  std::vector<double> errors;
  for (int rank : {1, 2, 4, 8}) {
    PowerSgdCompressor c(rank, /*seed=*/11);
    torch::Tensor g = m.clone();
    int64_t bytes = 0;
    CompressStats stats;
    ASSERT_TRUE(c.Reduce({g}, CompressLoopback(&bytes), &stats).ok());
    errors.push_back(CompressRelError(g, m));
    // P (64 x r) and Q (48 x r) travel, nothing else.
    EXPECT_EQ(stats.comm_bytes, (64 + 48) * rank * 4) << "rank " << rank;
    EXPECT_EQ(bytes, stats.comm_bytes);
  }
  for (size_t i = 1; i < errors.size(); ++i) {
    EXPECT_LT(errors[i], errors[i - 1]) << "rank index " << i;
  }
  EXPECT_LT(errors.back(), 0.02);  // rank 8 captures a rank-8 signal up to the noise
  EXPECT_GT(errors.front(), 0.2);
}

TEST(PowerSgdTest, VectorsAndSmallMatricesTravelUncompressed) {
  PowerSgdCompressor c(4, 1);
  torch::Tensor bias = torch::randn({48});
  torch::Tensor small = torch::randn({6, 5});  // 30 < 2 x (6 + 5) x 4: not worth it
  const torch::Tensor bias0 = bias.clone(), small0 = small.clone();
  int64_t bytes = 0;
  CompressStats stats;
  ASSERT_TRUE(c.Reduce({bias, small}, CompressLoopback(&bytes), &stats).ok());
  EXPECT_TRUE(torch::equal(bias, bias0));
  EXPECT_TRUE(torch::equal(small, small0));
  EXPECT_EQ(c.elements_sent(), 48 + 30);
}

// With error feedback what is not sent now is sent later: the running sum of the
// compressed gradients differs from the running sum of the true ones by the current error
// only, so their relative difference goes to 0 as steps accumulate.
template <typename MakeCompressor>
void ExpectAccumulatedSumsConverge(MakeCompressor make, const char* what) {
  auto c = make();
  torch::manual_seed(5);
  const torch::Tensor mean = torch::randn({32, 24});
  torch::Tensor sum_true = torch::zeros({32, 24}), sum_sent = torch::zeros({32, 24});
  std::vector<double> rel;  // after 5, 25, 50, 100, 200 steps
  for (int t = 1; t <= 200; ++t) {
    torch::Tensor g = mean + 0.5 * torch::randn({32, 24});
    sum_true += g;
    int64_t bytes = 0;
    ASSERT_TRUE(c->Reduce({g}, CompressLoopback(&bytes), nullptr).ok());
    sum_sent += g;
    if (t == 5 || t == 25 || t == 50 || t == 100 || t == 200)
      rel.push_back(CompressRelError(sum_sent, sum_true));
  }
  for (size_t i = 1; i < rel.size(); ++i) EXPECT_LT(rel[i], rel[i - 1]) << what << " " << i;
  EXPECT_LT(rel.back(), 0.15 * rel.front()) << what;
  EXPECT_LT(rel.back(), 0.1) << what;
}

TEST(ErrorFeedbackTest, PowerSgdAccumulatedSumConverges) {
  ExpectAccumulatedSumsConverge([] { return std::make_unique<PowerSgdCompressor>(1, 2); },
                                "powersgd rank 1");
}

TEST(ErrorFeedbackTest, TopKAccumulatedSumConverges) {
  ExpectAccumulatedSumsConverge([] { return std::make_unique<TopKCompressor>(0.05); }, "topk 5%");
}

TEST(TopKTest, KeepsExactlyTheKLargest) {
  EXPECT_EQ(TopKCompressor::KeepCount(0.037, 1000), 37);
  EXPECT_EQ(TopKCompressor::KeepCount(0.01, 150), 2);  // ceil(1.5)
  EXPECT_EQ(TopKCompressor::KeepCount(1e-9, 10), 1);
  EXPECT_EQ(TopKCompressor::KeepCount(1.0, 10), 10);
  torch::manual_seed(9);
  torch::Tensor g = torch::randn({1000});
  const torch::Tensor g0 = g.clone();
  TopKCompressor c(0.037);
  int64_t bytes = 0;
  CompressStats stats;
  ASSERT_TRUE(c.Reduce({g}, CompressLoopback(&bytes), &stats).ok());
  EXPECT_EQ(g.ne(0).sum().item<int64_t>(), 37);
  // The kept values are the 37 largest in magnitude, unchanged.
  torch::Tensor top = std::get<1>(torch::topk(g0.abs(), 37));
  EXPECT_TRUE(torch::equal(g.index_select(0, top), g0.index_select(0, top)));
  EXPECT_EQ(stats.comm_bytes, 37 * (4 + 4));  // int32 index + fp32 value each
}

// A compressor's state exported after some steps and imported into a new one: both then
// reduce the next gradients bit for bit alike; a new one without the state does not (the
// check can fail).
template <typename MakeCompressor>
void ExpectStateRoundTrip(MakeCompressor make, const char* what) {
  auto grads_at = [](int t) {
    torch::manual_seed(100 + t);
    return std::vector<torch::Tensor>{torch::randn({32, 24}), torch::randn({24}),
                                      torch::randn({40, 16})};
  };
  auto a = make();
  int64_t bytes = 0;
  for (int t = 0; t < 3; ++t)
    ASSERT_TRUE(a->Reduce(grads_at(t), CompressLoopback(&bytes), nullptr).ok());
  std::map<std::string, torch::Tensor> state;
  for (const CompressorStateTensor& s : a->ExportState()) state[s.name] = s.tensor;
  ASSERT_FALSE(state.empty()) << what;
  auto b = make(), fresh = make();
  ASSERT_TRUE(b->ImportState(grads_at(3), state).ok()) << what;
  std::vector<torch::Tensor> ga = grads_at(3), gb = grads_at(3), gf = grads_at(3);
  ASSERT_TRUE(a->Reduce(ga, CompressLoopback(&bytes), nullptr).ok());
  ASSERT_TRUE(b->Reduce(gb, CompressLoopback(&bytes), nullptr).ok());
  ASSERT_TRUE(fresh->Reduce(gf, CompressLoopback(&bytes), nullptr).ok());
  bool fresh_differs = false;
  for (size_t i = 0; i < ga.size(); ++i) {
    EXPECT_TRUE(torch::equal(ga[i], gb[i])) << what << " tensor " << i;
    fresh_differs |= !torch::equal(ga[i], gf[i]);
  }
  EXPECT_TRUE(fresh_differs) << what;
  // A missing tensor or one of another shape is refused and changes nothing: c still
  // behaves as a new compressor.
  std::map<std::string, torch::Tensor> missing = state, reshaped = state;
  missing.erase(missing.begin());
  reshaped.begin()->second = torch::zeros({3});
  auto c = make();
  for (const auto* bad : {&missing, &reshaped}) {
    absl::Status st = c->ImportState(grads_at(3), *bad);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << what << " " << st;
  }
  std::vector<torch::Tensor> gc = grads_at(3);
  ASSERT_TRUE(c->Reduce(gc, CompressLoopback(&bytes), nullptr).ok());
  for (size_t i = 0; i < gc.size(); ++i)
    EXPECT_TRUE(torch::equal(gc[i], gf[i])) << what << " " << i;
  // Reset: as new.
  a->Reset();
  std::vector<torch::Tensor> gr = grads_at(3);
  ASSERT_TRUE(a->Reduce(gr, CompressLoopback(&bytes), nullptr).ok());
  for (size_t i = 0; i < gr.size(); ++i)
    EXPECT_TRUE(torch::equal(gr[i], gf[i])) << what << " " << i;
}

TEST(CompressorStateTest, PowerSgdRoundTrip) {
  ExpectStateRoundTrip([] { return std::make_unique<PowerSgdCompressor>(2, 3); }, "powersgd");
  PowerSgdCompressor c(2, 3);
  int64_t bytes = 0;
  std::vector<torch::Tensor> g{torch::randn({32, 24}), torch::randn({24})};
  ASSERT_TRUE(c.Reduce(g, CompressLoopback(&bytes), nullptr).ok());
  std::vector<CompressorStateTensor> st = c.ExportState();
  ASSERT_EQ(st.size(), 2u);  // the vector travels uncompressed: no state
  EXPECT_EQ(st[0].name, "compression.powersgd.0.q");
  EXPECT_FALSE(st[0].per_rank);
  EXPECT_EQ(st[0].tensor.sizes().vec(), (std::vector<int64_t>{24, 2}));
  EXPECT_EQ(st[1].name, "compression.powersgd.0.error");
  EXPECT_TRUE(st[1].per_rank);
}

TEST(CompressorStateTest, TopKRoundTrip) {
  ExpectStateRoundTrip([] { return std::make_unique<TopKCompressor>(0.05); }, "topk");
  TopKCompressor c(0.05);
  EXPECT_TRUE(c.ExportState().empty());  // before the first Reduce
}

TEST(CompressorStateTest, ResumeDecision) {
  using json = nlohmann::json;
  const json psgd = {{"kind", "powersgd"},
                     {"powersgd_rank", 4},
                     {"min_compression_rate", 2.0},
                     {"seed", 7},
                     {"world_size", 2}};
  const json saved = {{"settings", psgd}, {"files", {"compression.rank0.safetensors"}}};
  // Equal settings (after a trip through the file): restore, silently.
  CompressorResume d = DecideCompressorResume(json::parse(saved.dump()), psgd);
  EXPECT_TRUE(d.restore);
  EXPECT_EQ(d.warning, "");
  // No state in the checkpoint, other parameters, another kind, another world size: fresh,
  // one warning line that says why.
  json rank2 = psgd, world4 = psgd;
  rank2["powersgd_rank"] = 2;
  world4["world_size"] = 4;
  const json topk = {{"kind", "topk"}, {"topk_ratio", 0.01}, {"world_size", 2}};
  struct Case {
    json saved, current;
    const char* says;
  } cases[] = {
      {json(), psgd, "holds no gradient-compression state"},
      {saved, rank2, "is for powersgd (min_compression_rate 2.0, powersgd_rank 4, seed 7)"},
      {saved, topk, "this run uses topk (topk_ratio 0.01)"},
      {json{{"settings", world4}}, psgd, "is from 4 ranks, this run has 2"},
      {saved, json{{"kind", "none"}, {"world_size", 2}},
       "powersgd gradient-compression state is dropped"},
  };
  for (const Case& c : cases) {
    d = DecideCompressorResume(c.saved, c.current);
    EXPECT_FALSE(d.restore) << c.says;
    EXPECT_NE(d.warning.find(c.says), std::string::npos) << d.warning;
    EXPECT_EQ(d.warning.rfind("warning: resume: ", 0), 0u) << d.warning;
    EXPECT_EQ(d.warning.find('\n'), std::string::npos) << d.warning;
  }
  // Stateless either side: nothing lost, nothing said.
  d = DecideCompressorResume(json(), json{{"kind", "bf16"}, {"world_size", 2}});
  EXPECT_FALSE(d.restore);
  EXPECT_EQ(d.warning, "");
}

TEST(LowPrecisionTest, SixteenBitsHalveTheBytesAndPreDivide) {
  torch::manual_seed(4);
  torch::Tensor flat = 1000 * torch::randn({513});
  for (CompressionKind kind : {CompressionKind::kFp16, CompressionKind::kBf16}) {
    torch::Tensor low = LowPrecisionCast(flat, kind, /*world_size=*/4);
    EXPECT_EQ(low.numel() * low.element_size(), flat.numel() * flat.element_size() / 2);
    torch::Tensor back = torch::empty_like(flat);
    LowPrecisionRestore(low, back);
    EXPECT_LT(CompressRelError(back, flat / 4), kind == CompressionKind::kBf16 ? 8e-3 : 1e-3)
        << CompressionName(kind);
  }
}

TEST(LowPrecisionTest, PreDivisionAvoidsFp16Overflow) {
  // 60000 fits fp16 (max 65504); two ranks' sum would not. Divided first, it stays finite.
  torch::Tensor flat = torch::full({4}, 60000.0f);
  torch::Tensor low = LowPrecisionCast(flat, CompressionKind::kFp16, 2);
  torch::Tensor sum = low.to(torch::kFloat) * 2;  // what the all-reduce adds up
  EXPECT_TRUE(torch::isfinite(low).all().item<bool>());
  EXPECT_FLOAT_EQ(sum[0].item<float>(), 60000.0f);
}

TEST(CompressionConfigTest, ErrorsNameTheKey) {
  auto parse = [](const std::string& comm) {
    return ParseTrainConfig(R"({"data": {"corpus": ["x.txt"]}, "comm": )" + comm + "}", "c.json");
  };
  struct Case {
    const char* comm;
    const char* key;
  } cases[] = {
      {R"({"compression": "gzip"})", "\"comm.compression\": \"gzip\" is not none|fp16|bf16"},
      {R"({"powersgd_rank": 0})", "\"comm.powersgd_rank\": 0 is out of range"},
      {R"({"topk_ratio": 0})", "\"comm.topk_ratio\": 0 is out of range"},
      {R"({"topk_ratio": 1.5})", "\"comm.topk_ratio\": 1.5 is out of range"},
      {R"({"compression_warmup_steps": -1})", "\"comm.compression_warmup_steps\": -1"},
      {R"({"compresion": "bf16"})", "\"comm.compresion\""},
  };
  for (const Case& c : cases) {
    auto r = parse(c.comm);
    ASSERT_FALSE(r.ok()) << c.comm;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(c.key), std::string::npos) << r.status();
    EXPECT_NE(r.status().message().find("c.json"), std::string::npos) << r.status();
  }
  for (const char* name : {"none", "fp16", "bf16", "powersgd", "topk"}) {
    auto r = parse(std::string(R"({"compression": ")") + name +
                   R"(", "powersgd_rank": 2, "topk_ratio": 1, "compression_warmup_steps": 3})");
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->comm.compression, name);
    EXPECT_TRUE(ParseCompression(name).ok());
  }
  EXPECT_FALSE(ParseCompression("zstd").ok());
}

}  // namespace
}  // namespace trainscope::train
