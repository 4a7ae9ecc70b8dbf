// Batch-size probe decisions on synthetic measurements (train/probe.h), and the child-run
// side on a fake OS (the real child runs are in probe_test.py).
#include "trainscope/train/probe.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "core/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "trainscope/core/fake_os.h"

namespace trainscope::train {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr double kMB = 1e6;

// A synthetic trainer: memory base + slope x micro-batch; a step is fixed + per-sequence
// forward/backward time plus a fixed optimizer time. Records the candidates it was asked for.
struct FakeTrainer {
  double base_bytes = 50 * kMB, slope_bytes = 50 * kMB;
  double fb_fixed_ms = 20, fb_per_seq_ms = 10, optimizer_ms = 5;
  int seq_len = 128;
  std::vector<int> asked;
  ProbeMeasurement operator()(int mb) {
    asked.push_back(mb);
    ProbeMeasurement m;
    m.ok = true;
    m.steps = 5;
    m.peak_memory_bytes = base_bytes + slope_bytes * mb;
    m.memory_source = "host_rss";
    m.step_ms = fb_fixed_ms + fb_per_seq_ms * mb + optimizer_ms;
    m.optimizer_ms = optimizer_ms;
    m.tokens_per_s = 1000.0 * mb * seq_len / m.step_ms;
    return m;
  }
};

TrainConfig ProbeConfig(int micro_batch, int grad_accum) {
  TrainConfig c;
  c.model.seq_len = 128;
  c.train.micro_batch = micro_batch;
  c.train.grad_accum = grad_accum;
  return c;
}

std::function<double(int)> PerSequence(double bytes) {
  return [bytes](int mb) { return bytes * mb; };
}

TEST(ProbeCandidates, GrowThroughDivisorsOfThePerRankBatch) {
  std::vector<int> seq;
  for (int c = 1; c != 0; c = NextCandidate(64, c)) seq.push_back(c);
  EXPECT_THAT(seq, ElementsAre(1, 2, 4, 8, 16, 32, 64));
  seq.clear();
  for (int c = 1; c != 0; c = NextCandidate(24, c)) seq.push_back(c);
  EXPECT_THAT(seq, ElementsAre(1, 2, 4, 8, 12, 24));  // never more than doubling
  EXPECT_EQ(NextCandidate(7, 1), 7);                  // a prime: the only divisor above
  EXPECT_EQ(NextCandidate(7, 7), 0);
}

TEST(ProbeCandidates, FirstIsTheSmallestWithinTheAccumulationCapLoweredByTheEstimate) {
  EXPECT_EQ(FirstCandidate(256, 16, -1, nullptr), 16);  // 256 / 16 = 16 accumulation steps
  EXPECT_EQ(FirstCandidate(8, 16, -1, nullptr), 1);
  EXPECT_EQ(FirstCandidate(24, 16, -1, nullptr), 2);  // 24 / 2 = 12 <= 16
  // Estimate 1 MB per sequence, safe limit 10 MB: at most 5 MB to start: 16 -> 8 -> 4.
  EXPECT_EQ(FirstCandidate(256, 16, 10 * kMB, PerSequence(kMB)), 4);
  EXPECT_EQ(FirstCandidate(256, 16, 0.1 * kMB, PerSequence(kMB)), 1);  // never below 1
}

TEST(ProbeMemory, PredictsFromTheMeasuredSlopeFlooredByHalfTheEstimate) {
  auto row = [](int mb, double peak) {
    ProbeRow r;
    r.micro_batch = mb;
    r.ran = true;
    r.m.ok = true;
    r.m.peak_memory_bytes = peak;
    return r;
  };
  // One measurement: the estimate's slope (10 MB / sequence).
  EXPECT_DOUBLE_EQ(PredictMemory({row(2, 100 * kMB)}, 4, PerSequence(10 * kMB)), 120 * kMB);
  // Two: the measured slope (30 MB / sequence) when above half the estimate's.
  EXPECT_DOUBLE_EQ(PredictMemory({row(2, 100 * kMB), row(4, 160 * kMB)}, 8, PerSequence(10 * kMB)),
                   280 * kMB);
  // A flat measurement (RSS noise) is floored at half the estimate's slope.
  EXPECT_DOUBLE_EQ(PredictMemory({row(2, 100 * kMB), row(4, 99 * kMB)}, 8, PerSequence(10 * kMB)),
                   99 * kMB + 4 * 5 * kMB);
  // Without an estimate, one measurement scales proportionally.
  EXPECT_DOUBLE_EQ(PredictMemory({row(2, 100 * kMB)}, 4, nullptr), 200 * kMB);
  // Failed rows do not count.
  ProbeRow failed = row(8, 0);
  failed.m.ok = false;
  EXPECT_DOUBLE_EQ(PredictMemory({row(2, 100 * kMB), failed}, 4, nullptr), 200 * kMB);
}

TEST(ProbeLoop, StopsBeforeTheLimitAndRecommends) {
  FakeTrainer t;  // 50 MB + 50 MB / sequence
  ProbeOptions o;
  // Global batch 64: the first candidate within 16 accumulation steps is 4 (estimate 60 MB /
  // sequence: 240 MB, under half the safe limit of 720 MB).
  auto r = RunProbe(ProbeConfig(8, 8), o, static_cast<int64_t>(800 * kMB), "test",
                    PerSequence(60 * kMB), std::ref(t));
  ASSERT_TRUE(r.ok()) << r.status();
  // 4: 250 MB; 8 predicted 250 + 4 x 60 = 490, measured 450; 16 predicted 450 + 8 x 50 =
  // 850 > 720: not run.
  EXPECT_THAT(t.asked, ElementsAre(4, 8));
  ASSERT_EQ(r->rows.size(), 3u);
  EXPECT_FALSE(r->rows[2].ran);
  EXPECT_EQ(r->rows[2].micro_batch, 16);
  EXPECT_DOUBLE_EQ(r->rows[2].predicted_memory_bytes, 850 * kMB);
  EXPECT_THAT(r->rows[2].verdict, HasSubstr("skipped"));
  EXPECT_THAT(r->stop_reason, HasSubstr("micro-batch 16 not run"));
  EXPECT_EQ(r->micro_batch, 8);
  EXPECT_EQ(r->accum, 8);
  EXPECT_FALSE(r->accum_over_cap);
  EXPECT_EQ(r->recommended, 1);
  EXPECT_EQ(r->rows[1].verdict, "recommended");
  EXPECT_DOUBLE_EQ(r->rows[1].relative, 1.0);
  // Projected tokens/s of micro-batch 4 x 16: 16 x 4 x 128 / (16 x 60 + 5) ms.
  EXPECT_NEAR(r->rows[0].projected_tokens_per_s, 1000.0 * 64 * 128 / 965, 1e-6);
  EXPECT_THAT(r->verdict, HasSubstr("micro-batch 8 with accumulation 8"));
}

TEST(ProbeLoop, StopsWhenThroughputStopsImproving) {
  FakeTrainer t;
  t.fb_fixed_ms = 0;  // time exactly proportional to the batch: no gain from a larger one
  t.optimizer_ms = 0;
  auto r = RunProbe(ProbeConfig(16, 1), ProbeOptions(), int64_t{100000} * 1000000, "test",
                    PerSequence(kMB), std::ref(t));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(t.asked, ElementsAre(1, 2));
  EXPECT_THAT(r->stop_reason, HasSubstr("projected tokens/s at micro-batch 2"));
  EXPECT_EQ(r->micro_batch, 2);  // within 5% of the best: the larger one
  EXPECT_EQ(r->accum, 8);
}

TEST(ProbeLoop, RunsToThePerRankBatch) {
  FakeTrainer t;
  t.fb_fixed_ms = 200;  // a large fixed cost: every doubling pays
  ProbeOptions o;
  o.ranks = 2;
  auto r = RunProbe(ProbeConfig(4, 2), o, int64_t{100000} * 1000000, "test", PerSequence(kMB),
                    std::ref(t));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->global_batch, 16);  // 4 x 2 x 2 ranks
  EXPECT_EQ(r->per_rank_batch, 8);
  EXPECT_THAT(t.asked, ElementsAre(1, 2, 4, 8));
  EXPECT_THAT(r->stop_reason, HasSubstr("reached the per-rank batch 8"));
  EXPECT_EQ(r->micro_batch, 8);
  EXPECT_EQ(r->accum, 1);
}

TEST(ProbeLoop, FlagsAccumulationOverTheCap) {
  FakeTrainer t;
  t.slope_bytes = 100 * kMB;
  // Global batch 256: 16 would keep accumulation at 16, but the estimate (100 MB / sequence)
  // starts at 4; 4: 450 MB, 8: 850 MB (accumulation 32), 16 predicted 1650 MB > 900 MB.
  auto r = RunProbe(ProbeConfig(256, 1), ProbeOptions(), static_cast<int64_t>(1000 * kMB), "test",
                    PerSequence(100 * kMB), std::ref(t));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(t.asked, ElementsAre(4, 8));
  EXPECT_TRUE(r->accum_over_cap);
  EXPECT_EQ(r->micro_batch, 8);
  EXPECT_EQ(r->accum, 32);
  EXPECT_THAT(r->verdict, HasSubstr("accumulation 32 > 16"));
  EXPECT_THAT(r->verdict, HasSubstr("per-token cost rises"));
}

TEST(ProbeLoop, AFailedFirstCandidateMeansNothingFits) {
  std::vector<int> asked;
  CandidateRunner killed = [&asked](int mb) {
    asked.push_back(mb);
    ProbeMeasurement m;
    m.failure = "killed by signal 9 (SIGKILL): out of memory?";
    return m;
  };
  auto r = RunProbe(ProbeConfig(4, 1), ProbeOptions(), static_cast<int64_t>(1000 * kMB), "test",
                    PerSequence(kMB), killed);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(asked, ElementsAre(1));
  EXPECT_EQ(r->recommended, -1);
  EXPECT_EQ(r->micro_batch, 0);
  EXPECT_THAT(r->rows[0].verdict, HasSubstr("out of memory?"));
  EXPECT_THAT(r->verdict, HasSubstr("even micro-batch 1 does not fit"));
  // The table stays within 120 columns; the whole failure follows it.
  const std::string table = RenderProbeReport(*r);
  for (absl::string_view line : absl::StrSplit(table, '\n')) {
    EXPECT_LE(line.size(), 120u) << line;
  }
  EXPECT_THAT(table, HasSubstr("micro-batch 1: killed by signal 9 (SIGKILL): out of memory?"));
  // A measured first candidate over the safe share does not fit either.
  FakeTrainer t;
  auto over = RunProbe(ProbeConfig(4, 1), ProbeOptions(), static_cast<int64_t>(100 * kMB), "test",
                       nullptr, std::ref(t));
  ASSERT_TRUE(over.ok());
  EXPECT_EQ(over->rows[0].verdict, "over the safe limit");
  EXPECT_EQ(over->recommended, -1);
}

TEST(ProbeLoop, RejectsBadOptions) {
  FakeTrainer t;
  ProbeOptions o;
  o.ranks = 3;  // 8 x 1 x 3 = 24 is fine; a global batch of 16 on 3 ranks is not
  o.global_batch = 16;
  auto r = RunProbe(ProbeConfig(8, 1), o, 1 << 30, "test", nullptr, std::ref(t));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("not a multiple of the 3 ranks"));
  ProbeOptions w;
  w.warmup_steps = 5;  // not under steps
  EXPECT_FALSE(RunProbe(ProbeConfig(8, 1), w, 1 << 30, "test", nullptr, std::ref(t)).ok());
  EXPECT_TRUE(t.asked.empty());
}

TEST(ProbeReport, JsonAndTable) {
  FakeTrainer t;
  auto r = RunProbe(ProbeConfig(8, 8), ProbeOptions(), static_cast<int64_t>(800 * kMB), "test",
                    PerSequence(60 * kMB), std::ref(t));
  ASSERT_TRUE(r.ok());
  nlohmann::json j = ProbeReportToJson(*r);
  EXPECT_EQ(j["format"], "trainscope.train_probe");
  EXPECT_EQ(j["candidates"].size(), 3u);
  EXPECT_EQ(j["candidates"][0]["peak_memory_bytes"], 250 * kMB);
  EXPECT_FALSE(j["candidates"][2].contains("peak_memory_bytes"));  // not run
  EXPECT_EQ(j["recommended"]["micro_batch"], 8);
  EXPECT_EQ(j["recommended"]["accum"], 8);
  const std::string table = RenderProbeReport(*r);
  for (absl::string_view line : absl::StrSplit(table, '\n')) {
    EXPECT_LE(line.size(), 120u) << line;
  }
  EXPECT_THAT(table, HasSubstr("recommended"));
  EXPECT_THAT(table, HasSubstr("verdict: micro-batch 8"));
}

TEST(ProbeHost, LimitIsTheSmallerOfMemAvailableAndTheCgroupRoom) {
  FakeOs os;
  os.AddFile("/proc/meminfo", "MemTotal: 32000000 kB\nMemAvailable:   2000000 kB\n");
  std::string source;
  EXPECT_EQ(HostMemoryLimitBytes(&os, &source), int64_t{2000000} * 1024);
  EXPECT_EQ(source, "MemAvailable");
  os.AddFile("/sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");  // none
  EXPECT_EQ(HostMemoryLimitBytes(&os, &source), int64_t{2000000} * 1024);
  os.AddFile("/sys/fs/cgroup/memory.max", "1000000000\n");
  os.AddFile("/sys/fs/cgroup/memory.current", "400000000\n");
  EXPECT_EQ(HostMemoryLimitBytes(&os, &source), 600000000);
  EXPECT_THAT(source, HasSubstr("cgroup"));
}

TEST(ProbeHost, DeviceLimitIsTheFreeMemoryNvidiaSmiReports) {
  FakeOs os;
  RunResult smi;
  smi.exited = true;
  smi.exit_code = 0;
  smi.out = "143771, 771\n";  // MiB
  os.AddProgram("nvidia-smi", smi);
  std::string source;
  EXPECT_EQ(DeviceMemoryLimitBytes(&os, 0, &source), int64_t{143000} * 1024 * 1024);
  EXPECT_THAT(os.runs().back(), ElementsAre("nvidia-smi", "--query-gpu=memory.total,memory.used",
                                            "--format=csv,noheader,nounits", "-i", "0"));
  // cuda:1 of CUDA_VISIBLE_DEVICES=5,3 is physical GPU 3; beyond the list there is none.
  os.SetEnv("CUDA_VISIBLE_DEVICES", "5,3");
  EXPECT_GT(DeviceMemoryLimitBytes(&os, 1, &source), 0);
  EXPECT_EQ(os.runs().back().back(), "3");
  EXPECT_EQ(source, "nvidia-smi memory.total - memory.used, GPU 3");
  EXPECT_EQ(DeviceMemoryLimitBytes(&os, 2, &source), -1);
  FakeOs none;  // no nvidia-smi
  EXPECT_EQ(DeviceMemoryLimitBytes(&none, 0, &source), -1);
}

std::string ProbeTempDir() { return test_util::TempDir("probe_test"); }

TEST(ProbeBatch, ReportsAKilledChildAsItsRow) {
  FakeOs os;
  RunResult killed;
  killed.term_signal = 9;
  os.AddProgram("/bin/trainscope", killed);
  ProbeOptions o;
  o.binary = "/bin/trainscope";
  o.work_dir = ProbeTempDir();
  o.memory_limit_bytes = int64_t{1} << 30;
  TrainConfig c = ProbeConfig(4, 1);
  c.model.vocab = 300;
  auto r = ProbeBatch(c, o, &os);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(os.runs().size(), 1u);
  EXPECT_THAT(os.runs()[0],
              ElementsAre("/bin/trainscope", "train", "--config", o.work_dir + "/mb1/config.json",
                          "--run-dir", o.work_dir + "/mb1", "--json"));
  EXPECT_EQ(r->rows[0].m.failure, "killed by signal 9 (SIGKILL): out of memory?");
  EXPECT_EQ(r->recommended, -1);
  // The child's config: its micro-batch, accumulation 1, the probe's steps.
  std::FILE* f = std::fopen((o.work_dir + "/mb1/config.json").c_str(), "r");
  ASSERT_NE(f, nullptr);
  nlohmann::json cfg = nlohmann::json::parse(f);
  std::fclose(f);
  EXPECT_EQ(cfg["train"]["micro_batch"], 1);
  EXPECT_EQ(cfg["train"]["grad_accum"], 1);
  EXPECT_EQ(cfg["train"]["steps"], 5);
  EXPECT_EQ(cfg["checkpoint"]["every_steps"], 0);
  std::filesystem::remove_all(o.work_dir);
}

TEST(ProbeBatch, ReadsTheChildsResultAndMetrics) {
  FakeOs os;
  // Five steps: two warm-up (slow), then 10, 12, 11 ms with 1 ms optimizer; 128 tokens each.
  std::string metrics = "{\"type\":\"header\"}\n";
  const double ms[] = {100, 50, 10, 12, 11};
  for (int s = 1; s <= 5; ++s) {
    metrics += nlohmann::json({{"type", "step"},
                               {"step", s},
                               {"step_ms", ms[s - 1]},
                               {"tokens", 128},
                               {"phases_ms", {{"optimizer", 1.0}}},
                               {"host_rss_bytes", 1000},
                               {"device_mem_peak_bytes", nullptr}})
                   .dump() +
               "\n";
  }
  os.AddFile("/run/metrics.rank0.jsonl", metrics);
  RunResult done;
  done.exited = true;
  done.exit_code = 0;
  done.out = R"({"metrics_path": "/run/metrics.rank0.jsonl", "peak_rss_bytes": 300000000})";
  os.AddProgram("/bin/trainscope", done);
  ProbeOptions o;
  o.binary = "/bin/trainscope";
  o.work_dir = ProbeTempDir();
  o.memory_limit_bytes = int64_t{1} << 40;
  TrainConfig c = ProbeConfig(2, 1);
  c.model.vocab = 300;
  auto r = ProbeBatch(c, o, &os);
  ASSERT_TRUE(r.ok()) << r.status();
  // Per-rank batch 2: candidates 1 and 2 (a canned child: the same figures for both).
  ASSERT_EQ(r->rows.size(), 2u);
  const ProbeMeasurement& m = r->rows[0].m;
  EXPECT_TRUE(m.ok);
  EXPECT_EQ(m.steps, 5);
  EXPECT_DOUBLE_EQ(m.step_ms, 11);  // median of the steps after the warm-up
  EXPECT_DOUBLE_EQ(m.optimizer_ms, 1);
  EXPECT_NEAR(m.tokens_per_s, 128 / 0.011, 1e-6);
  EXPECT_DOUBLE_EQ(m.peak_memory_bytes, 3e8);
  EXPECT_EQ(m.memory_source, "host_rss");
  std::filesystem::remove_all(o.work_dir);
}

TEST(ProbeBatch, ABadInputExitIsAUsageErrorButAMemoryRefusalIsARow) {
  FakeOs os;
  RunResult bad;
  bad.exited = true;
  bad.exit_code = 2;
  bad.err = "trainscope train: error: /x/corpus.txt: not found\nhint: check the path\n";
  os.AddProgram("/bin/trainscope", bad);
  ProbeOptions o;
  o.binary = "/bin/trainscope";
  o.work_dir = ProbeTempDir();
  o.memory_limit_bytes = int64_t{1} << 30;
  TrainConfig c = ProbeConfig(2, 1);
  c.model.vocab = 300;
  auto r = ProbeBatch(c, o, &os);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("corpus.txt: not found"));
  FakeOs os2;
  bad.err =
      "trainscope train: error: c.json: model.layers=4: needs ~9 GiB, 1 GiB available "
      "(MemAvailable); estimate: ... (docs/metrics.md, \"Trainer memory estimate\")\n";
  os2.AddProgram("/bin/trainscope", bad);
  auto refused = ProbeBatch(c, o, &os2);
  ASSERT_TRUE(refused.ok()) << refused.status();
  EXPECT_THAT(refused->rows[0].verdict, HasSubstr("failed: exit 2"));
  EXPECT_EQ(refused->recommended, -1);
  std::filesystem::remove_all(o.work_dir);
}

}  // namespace
}  // namespace trainscope::train
