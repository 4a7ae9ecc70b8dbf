// Finding JSON round trip and ordering; the run-directory names; the format list.
#include "trainscope/core/finding.h"

#include <set>
#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "trainscope/core/formats.h"
#include "trainscope/core/run_dir.h"

namespace trainscope {
namespace {

TEST(Finding, JsonRoundTrip) {
  Finding f{Severity::kWarning, "curve.loss_spikes", "the loss spikes", "3 spikes", "skip batches"};
  f.where = "run.csv step 120";
  f.rank = 2;
  nlohmann::json j = FindingToJson(f);
  EXPECT_EQ(j["severity"], "warning");
  EXPECT_EQ(j["where"], "run.csv step 120");
  EXPECT_EQ(j["rank"], 2);
  absl::StatusOr<Finding> back = FindingFromJson(j);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->severity, f.severity);
  EXPECT_EQ(back->id, f.id);
  EXPECT_EQ(back->title, f.title);
  EXPECT_EQ(back->evidence, f.evidence);
  EXPECT_EQ(back->fix, f.fix);
  EXPECT_EQ(back->where, f.where);
  EXPECT_EQ(back->rank, 2);
  // Empty where and rank -1 are left out, and read back as such.
  Finding g{Severity::kInfo, "x", "y"};
  nlohmann::json gj = FindingToJson(g);
  EXPECT_FALSE(gj.contains("where"));
  EXPECT_FALSE(gj.contains("rank"));
  EXPECT_EQ(FindingFromJson(gj)->rank, -1);
}

TEST(Finding, FromJsonRejectsBadSeverityAndMissingId) {
  EXPECT_FALSE(FindingFromJson({{"severity", "fatal"}, {"id", "a"}, {"title", "b"}}).ok());
  EXPECT_FALSE(FindingFromJson({{"severity", "error"}, {"title", "b"}}).ok());
  EXPECT_FALSE(FindingFromJson(nlohmann::json::array()).ok());
}

// A rule table's constant row becomes a finding once its evidence is known.
TEST(Finding, ToFindingFillsTheRowsParts) {
  constexpr FindingText kRow = {Severity::kWarning, "nccl.shm_disabled", "SHM is off",
                                "Unset NCCL_SHM_DISABLE."};
  const Finding f = ToFinding(kRow, "NCCL_SHM_DISABLE=1", "env");
  EXPECT_EQ(f.severity, Severity::kWarning);
  EXPECT_EQ(f.id, "nccl.shm_disabled");
  EXPECT_EQ(f.title, "SHM is off");
  EXPECT_EQ(f.evidence, "NCCL_SHM_DISABLE=1");
  EXPECT_EQ(f.fix, "Unset NCCL_SHM_DISABLE.");
  EXPECT_EQ(f.where, "env");
  EXPECT_EQ(f.rank, -1);
}

TEST(Finding, SortKeepsOrderWithinSeverity) {
  std::vector<Finding> v = {{Severity::kInfo, "i1", ""},
                            {Severity::kError, "e1", ""},
                            {Severity::kWarning, "w1", ""},
                            {Severity::kError, "e2", ""}};
  SortFindings(&v);
  EXPECT_EQ(v[0].id, "e1");
  EXPECT_EQ(v[1].id, "e2");
  EXPECT_EQ(v[2].id, "w1");
  EXPECT_EQ(v[3].id, "i1");
  EXPECT_EQ(CountFindings(v, Severity::kError), 2);
}

TEST(RunDir, NamesAndPaths) {
  // 2026-01-02 03:04:05 UTC.
  EXPECT_EQ(run_dir::RunDirName("doctor", 1767323045, 42), "runs/doctor-20260102-030405-42");
  EXPECT_EQ(run_dir::TrainMetricsPath("/r", 3), "/r/train/metrics.rank3.jsonl");
  EXPECT_EQ(run_dir::HangDumpPath("/r/", 0), "/r/hang/flight_recorder.rank0.json");
  EXPECT_EQ(run_dir::HangStacksPath("r", 1), "r/hang/stacks.rank1.txt");
  EXPECT_EQ(run_dir::RankLogDir("r", 7), "r/rank7");
  EXPECT_EQ(run_dir::Join("", "train"), "train");
  EXPECT_EQ(run_dir::TrainConfigPath("r"), "r/train/config.json");
  EXPECT_EQ(run_dir::TrainSummaryPath("r"), "r/train/summary.json");
  EXPECT_EQ(run_dir::HangAnalysisPath("r"), "r/hang/analysis.json");
  EXPECT_EQ(run_dir::CheckpointStepDir(run_dir::CheckpointsDir("r"), 6), "r/checkpoints/step-6");
  EXPECT_EQ(run_dir::AnomalyStepDir("c", 7), "c/anomaly-step-7");
  EXPECT_TRUE(run_dir::IsCheckpointStepName("step-12"));
  EXPECT_TRUE(run_dir::IsCheckpointStepName("anomaly-step-7"));
  EXPECT_FALSE(run_dir::IsCheckpointStepName("step-4.tmp-99"));
  EXPECT_FALSE(run_dir::IsCheckpointStepName("step-"));
  EXPECT_TRUE(run_dir::IsHangDumpName("flight_recorder.rank3.json"));
  EXPECT_FALSE(run_dir::IsHangDumpName("flight_recorder.rank3.txt"));
  EXPECT_TRUE(run_dir::IsHangStacksName("stacks.rank0.txt"));
  EXPECT_EQ(run_dir::RankFromFileName("metrics.rank12.jsonl"), 12);
  EXPECT_EQ(run_dir::RankFromFileName("metrics.jsonl"), -1);
}

TEST(Formats, ListIsSortedUniqueAndFindable) {
  std::set<std::string> names;
  std::string prev;
  for (const formats::Format& f : formats::kFormats) {
    EXPECT_EQ(std::string(f.name).rfind("trainscope.", 0), 0u) << f.name;
    EXPECT_TRUE(names.insert(f.name).second) << f.name;
    EXPECT_LT(prev, f.name);
    prev = f.name;
    EXPECT_GE(f.version, 1);
  }
  ASSERT_NE(formats::FindFormat("trainscope.train_metrics"), nullptr);
  EXPECT_EQ(formats::FindFormat("trainscope.train_metrics")->version, 1);
  EXPECT_EQ(formats::FindFormat("trainscope.nope"), nullptr);
}

}  // namespace
}  // namespace trainscope
