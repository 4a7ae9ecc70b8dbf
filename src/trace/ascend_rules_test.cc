// The Ascend rules (ascend_rules.h): each fires on a real sample with its evidence and stays
// quiet on one without it (tests/data/trace/ascend_*, provenance in tests/data/README.md); the
// thresholds of the rules no public sample reaches are checked on their details; and no
// finding of any Ascend sample gives CUDA's advice.
#include "trace/ascend_rules.h"

#include <dirent.h>

#include <filesystem>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "trace/trace_test_util.h"
#include "trainscope/trace/analysis.h"

namespace trainscope::trace {
namespace {

std::string RulesData(const std::string& p) {
  return absl::StrCat(TS_SOURCE_DIR, "/tests/data/trace/", p);
}

std::set<std::string> RuleCodes(const std::string& sample) {
  auto rep = AnalyzePaths({RulesData(sample)});
  EXPECT_TRUE(rep.ok()) << rep.status();
  std::set<std::string> out;
  if (!rep.ok()) return out;
  for (const Finding& f : FindingsFrom(*rep)) out.insert(f.id);
  return out;
}

struct RuleExpect {
  const char* sample;
  std::vector<const char*> fire, quiet;
};

TEST(AscendRules, FireOnEvidenceQuietWithout) {
  const std::vector<RuleExpect> cases = {
      // msprof-analyze's advisor test input: 7 AI_CPU Cast tasks over 20 us.
      {"ascend_aicpu", {"ai_cpu"}, {"op_compile", "small_packets", "dynamic_shape"}},
      // msinsight level-1 text export: 19 online compilations (9% of the step), every task
      // dynamic, two all-reduce SDMA transfers of 28+ MB under 14.4 GB/s; no AI CPU task,
      // no small packet, 2 of 191 launches followed by a stream sync, dataloader under 10 ms,
      // its two AI Core Freq counter samples at a constant 1800 MHz.
      {"ascend_text/rank0_ascend_pt",
       {"op_compile", "dynamic_shape", "low_bandwidth"},
       {"ai_cpu", "small_packets", "synchronize_stream", "slow_dataloader", "rdma_retransmission",
        "aicore_frequency", "files_not_read"}},
      // The same model's SQLite export: compilations (18% of the step), SDMA under the
      // baseline; a constant 1800 MHz AI Core clock.
      {"ascend_db/rank0_ascend_pt",
       {"op_compile", "low_bandwidth"},
       {"ai_cpu", "aicore_frequency", "synchronize_stream", "files_not_read"}},
      // msinsight's server test rank: 4 of 6 RDMA ops under 1 MB (2 of 11 SDMA: under 20%);
      // its large SDMA transfers at or above 14.4 GB/s; no OP State column, few shapes per type.
      {"ascend_comm/test_rank_0",
       {"small_packets", "ai_cpu"},
       {"op_compile", "rdma_retransmission", "low_bandwidth", "dynamic_shape"}},
  };
  for (const RuleExpect& c : cases) {
    std::set<std::string> codes = RuleCodes(c.sample);
    for (const char* f : c.fire) EXPECT_TRUE(codes.count(f)) << c.sample << " should have " << f;
    for (const char* q : c.quiet)
      EXPECT_FALSE(codes.count(q)) << c.sample << " should not have " << q;
  }
}

TEST(AscendRules, SmallPacketsNameTheTransport) {
  auto rep = AnalyzePaths({RulesData("ascend_comm/test_rank_0")});
  ASSERT_TRUE(rep.ok()) << rep.status();
  int n = 0;
  for (const Finding& f : rep->ranks[0].findings) {
    if (f.id != "small_packets") continue;
    ++n;
    EXPECT_NE(f.title.find("RDMA"), std::string::npos) << f.title;
    EXPECT_NE(f.fix.find("HCCL_BUFFSIZE"), std::string::npos);
  }
  EXPECT_EQ(n, 1);  // SDMA: 2 of 11 small, not over 20%
}

// The rules no public per-rank sample reaches, at and around their advisor thresholds.
TEST(AscendRules, ThresholdsOfTheOtherRules) {
  auto run = [](nlohmann::json a) {
    RankResult r;
    r.rank = 2;
    r.device = "npu";
    r.details["ascend"] = std::move(a);
    internal::AscendFindings(AnalyzeOptions{}, &r);
    std::set<std::string> codes;
    for (const Finding& f : r.findings) codes.insert(f.id);
    return codes;
  };
  nlohmann::json sync = {{"synchronize_stream", 10}, {"node_launch", 10}, {"co_occurrence", 5}};
  sync["co_occurrence_ratio"] = 0.5;  // synchronize.yaml: over 0.5
  EXPECT_FALSE(run({{"synchronize_stream", sync}}).count("synchronize_stream"));
  sync["co_occurrence_ratio"] = 0.6;
  EXPECT_TRUE(run({{"synchronize_stream", sync}}).count("synchronize_stream"));
  nlohmann::json dl = {{"events", 3}, {"max_us", 12000.0}, {"events_over_threshold", 1}};
  EXPECT_TRUE(run({{"dataloader", dl}}).count("slow_dataloader"));
  dl["events_over_threshold"] = 0;
  EXPECT_FALSE(run({{"dataloader", dl}}).count("slow_dataloader"));
  nlohmann::json fq = {{"samples", 3}, {"max_mhz", 1800}, {"min_mhz", 1600}, {"samples_below", 1}};
  EXPECT_TRUE(run({{"aicore_freq", fq}}).count("aicore_frequency"));
  // RDMA: a transit over 4000 ms alone is not enough (an op of at least 4000 ms too, which
  // CommEvidence records as "retransmission").
  nlohmann::json rdma = {{"ops_under_baseline", 0},
                         {"max_transit_ms", 4100.0},
                         {"max_transit_op", "hcom_send@1"},
                         {"small_ratio", 0.0}};
  EXPECT_FALSE(
      run({{"communication", {{"transports", {{"RDMA", rdma}}}}}}).count("rdma_retransmission"));
  rdma["retransmission"] = {{"ops", 1}, {"max_transit_ms", 4100.0}, {"op", "hcom_send@1"}};
  EXPECT_TRUE(
      run({{"communication", {{"transports", {{"RDMA", rdma}}}}}}).count("rdma_retransmission"));
  // Not an Ascend trace: no Ascend rule.
  RankResult cuda;
  cuda.device = "cuda";
  cuda.details["ascend"] = {{"dataloader", {{"events_over_threshold", 1}, {"max_us", 2e4}}}};
  internal::AscendFindings(AnalyzeOptions{}, &cuda);
  EXPECT_TRUE(cuda.findings.empty());
}

// A torch_npu folder whose trace_view.json has the AI Core frequency as counter events (ph "C",
// as msprof-analyze's advisor tests write them), with and without the device info's rated
// frequency (PROF_*/device_*/info.json.0 aic_frequency).
std::string FreqFolder(const std::string& name, const std::vector<int>& mhz, int rated) {
  namespace fs = std::filesystem;
  const std::string dir = testing::TempDir() + "/" + name + "_ascend_pt";
  fs::create_directories(dir + "/ASCEND_PROFILER_OUTPUT");
  std::string tv =
      "[{\"name\":\"process_name\",\"pid\":9,\"tid\":0,\"ph\":\"M\","
      "\"args\":{\"name\":\"AI Core Freq\"}},"
      "{\"ph\":\"X\",\"name\":\"ProfilerStep#1\",\"pid\":1,\"tid\":1,"
      "\"ts\":\"1699529623106000.000\",\"dur\":5000}";
  for (size_t i = 0; i < mhz.size(); ++i)
    tv += absl::StrCat(",{\"name\":\"AI Core Freq\",\"ts\":\"16995296231060", i, "0.061\",",
                       "\"pid\":9,\"tid\":0,\"args\":{\"MHz\":", mhz[i], "},\"ph\":\"C\"}");
  testing::WriteFile(dir + "/ASCEND_PROFILER_OUTPUT/trace_view.json", tv + "]");
  testing::WriteFile(dir + "/profiler_info_0.json", "{\"rank_id\": 0}");
  if (rated > 0) {
    fs::create_directories(dir + "/PROF_000001_20240415174447255_OAANHDOMMJMHGIFC/device_0");
    testing::WriteFile(dir + "/PROF_000001_20240415174447255_OAANHDOMMJMHGIFC/device_0/info.json.0",
                       absl::StrCat("{\"DeviceInfo\": [{\"id\": 0, \"ai_core_num\": 25, "
                                    "\"aic_frequency\": \"",
                                    rated, "\"}]}"));
  }
  return dir;
}

TEST(AscendRules, FrequencyCountersOfTraceView) {
  auto analyse = [](const std::string& dir, nlohmann::json* freq) {
    auto rep = AnalyzePaths({dir});
    EXPECT_TRUE(rep.ok()) << rep.status();
    std::vector<Finding> out;
    if (!rep.ok() || rep->ranks.empty()) return out;
    *freq = rep->ranks[0].details["ascend"].value("aicore_freq", nlohmann::json());
    for (const Finding& f : rep->ranks[0].findings)
      if (f.id == "aicore_frequency") out.push_back(f);
    return out;
  };
  nlohmann::json fq;
  // Against the highest sample: 1600 is 11% under 1800.
  std::vector<Finding> f = analyse(FreqFolder("drop", {1800, 1800, 1600, 1800}, 0), &fq);
  EXPECT_EQ(fq["samples"], 4);
  EXPECT_EQ(fq["samples_below"], 1);
  EXPECT_FALSE(fq.contains("rated_mhz"));
  ASSERT_EQ(f.size(), 1u);
  EXPECT_NE(f[0].title.find("drops to 1600 MHz (max 1800 MHz)"), std::string::npos) << f[0].title;
  // A flat clock stays quiet without a rating, and at 1800 against a rated 1850 (2.7% under).
  EXPECT_TRUE(analyse(FreqFolder("flat", {1750, 1750, 1750}, 0), &fq).empty());
  EXPECT_EQ(fq["samples_below"], 0);
  EXPECT_TRUE(analyse(FreqFolder("flat_rated", {1800, 1800}, 1850), &fq).empty());
  EXPECT_EQ(fq["rated_mhz"], 1850.0);
  // A flat 1750 under a rated 1850 (5.4% under) is a drop the maximum alone cannot show.
  f = analyse(FreqFolder("low_rated", {1750, 1750, 1750}, 1850), &fq);
  EXPECT_EQ(fq["samples_below"], 3);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_NE(f[0].title.find("(rated 1850.0 MHz)"), std::string::npos) << f[0].title;
  EXPECT_NE(f[0].evidence.find("rated frequency"), std::string::npos) << f[0].evidence;
}

// Every Ascend sample (tests/data/trace/ascend*): no CUDA, NCCL or Nsight advice.
TEST(AscendRules, NoCudaAdviceOnAscendTraces) {
  std::vector<std::string> samples;
  DIR* d = opendir(RulesData("").c_str());
  ASSERT_NE(d, nullptr);
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n.rfind("ascend", 0) == 0) samples.push_back(n);
  }
  closedir(d);
  ASSERT_GE(samples.size(), 5u);
  int analysed = 0;
  for (const std::string& s : samples) {
    auto rep = AnalyzePaths({RulesData(s)});
    if (!rep.ok()) continue;  // a cluster folder another reader handles
    ++analysed;
    for (const Finding& f : FindingsFrom(*rep)) {
      for (const std::string& text : {f.title, f.evidence, f.fix}) {
        for (const char* word : {"CUDA", "cuda", "NCCL", "nccl", "nsys", "Nsight", "CUPTI"})
          EXPECT_EQ(text.find(word), std::string::npos) << s << ": " << f.id << ": " << text;
      }
    }
  }
  EXPECT_GE(analysed, 5);
}

}  // namespace
}  // namespace trainscope::trace
