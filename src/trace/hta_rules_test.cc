// HTA's rules (hta_rules.cc): rounding, the step filter, the merge and the kernel-type table,
// each against a figure worked out by hand and checked with HTA itself.
#include <string>

#include "gtest/gtest.h"
#include "trace/analysis_internal.h"
#include "trainscope/trace/analysis.h"
#include "trainscope/trace/trace.h"

namespace trainscope::trace {
namespace {

using internal::Interval;

RankTrace Parse(const std::string& events) {
  auto t = ParseChromeTrace("{\"traceEvents\": [" + events + "]}", "test.json");
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : RankTrace();
}

TEST(HtaRules, RoundingGoesThroughDoubleAsHtaDoes) {
  // At epoch-scale timestamps a double has a 0.25 us grid: 1704161511422904.1 reads as
  // ...904.0, so HTA's ceil gives ...904 (not ...905); the end 904.1 + 2.3 = 906.4 floors to 906.
  RankTrace t = Parse(R"({"ph":"X","cat":"kernel","name":"k","pid":1,"tid":7,
      "ts":1704161511422904.1,"dur":2.3,"args":{"stream":7}},
      {"ph":"X","cat":"kernel","name":"k","pid":1,"tid":7,"ts":20.7,"dur":0.5,
      "args":{"stream":7}})");
  ASSERT_TRUE(t.fractional_ts);
  internal::RoundTimesLikeHta(&t);
  EXPECT_EQ(t.events[0].ts_ns, 1704161511422904LL * 1000);
  EXPECT_EQ(t.events[0].dur_ns, 2000);
  EXPECT_EQ(t.events[1].ts_ns, 21000);  // 20.7 -> 21, end 21.2 -> 21: dur 0
  EXPECT_EQ(t.events[1].dur_ns, 0);
  internal::RoundTimesLikeHta(&t);  // idempotent
  EXPECT_EQ(t.events[0].dur_ns, 2000);
}

TEST(HtaRules, IntegerTraceIsNotRounded) {
  RankTrace t = Parse(R"({"ph":"X","cat":"kernel","name":"k","pid":1,"tid":7,"ts":10,
      "dur":5,"args":{"stream":7}})");
  EXPECT_FALSE(t.fractional_ts);
}

TEST(HtaRules, MergeKeepsEmptyAndInvertedIntervalsAsHtaDoes) {
  auto m = internal::MergeLikeHta({{31, 40}, {11, 15}, {21, 21}, {51, 50}, {12, 14}});
  ASSERT_EQ(m.size(), 4u);
  EXPECT_EQ(m[0], (Interval{11, 15}));
  EXPECT_EQ(m[1], (Interval{21, 21}));
  EXPECT_EQ(m[3], (Interval{51, 50}));  // a lone inverted interval counts -1, as in HTA
}

TEST(HtaRules, StepFilterDropsLastStepAndUnlaunchedDeviceEvents) {
  const std::string ev = R"(
    {"ph":"X","cat":"user_annotation","name":"ProfilerStep#1","pid":0,"tid":1,"ts":0,"dur":100},
    {"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":0,"tid":1,"ts":10,"dur":1,
     "args":{"correlation":1}},
    {"ph":"X","cat":"user_annotation","name":"ProfilerStep#2","pid":0,"tid":1,"ts":100,"dur":100},
    {"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":0,"tid":1,"ts":110,"dur":1,
     "args":{"correlation":2}},
    {"ph":"X","cat":"kernel","name":"a","pid":1,"tid":7,"ts":20,"dur":10,
     "args":{"stream":7,"correlation":1}},
    {"ph":"X","cat":"kernel","name":"orphan","pid":1,"tid":7,"ts":40,"dur":10,
     "args":{"stream":7,"correlation":77}},
    {"ph":"X","cat":"kernel","name":"b","pid":1,"tid":7,"ts":120,"dur":10,
     "args":{"stream":7,"correlation":2}},
    {"ph":"X","cat":"kernel","name":"no_corr","pid":1,"tid":7,"ts":50,"dur":10,
     "args":{"stream":7}})";
  RankTrace t = Parse(ev);
  EXPECT_EQ(internal::CountStepNames(t), 2);
  std::vector<bool> kept = internal::HtaKeptEvents(t, false);
  // Step 1, its launch and kernel a stay; step 2 (the last), its launch and kernel b go; the
  // orphan goes; a device event without a correlation id is a host event for HTA's filter and
  // stays because it starts before the last step.
  EXPECT_EQ(kept, (std::vector<bool>{true, true, false, false, true, false, false, true}));
  kept = internal::HtaKeptEvents(t, true);
  EXPECT_EQ(kept, (std::vector<bool>{true, true, true, true, true, false, true, true}));
  RankResult r = AnalyzeRank(&t);
  EXPECT_EQ(r.steps.size(), 1u);
  EXPECT_DOUBLE_EQ(r.kernel_time_us, 40);  // a [20,30] and no_corr [50,60]
  EXPECT_DOUBLE_EQ(r.idle_us, 20);
}

TEST(HtaRules, KernelTypeTableSplitsOverlaps) {
  // compute [0,100], comm [60,170], memory [200,210], other [300,320] (ns).
  nlohmann::json j =
      internal::KernelTypeBreakdown({{0, 100}}, {{60, 170}}, {{200, 210}}, {{300, 320}}, 400);
  ASSERT_EQ(j["types"].size(), 4u);
  EXPECT_EQ(j["types"][0]["kernel_type"], "COMMUNICATION");  // 70 ns, largest first
  EXPECT_EQ(j["types"][1]["kernel_type"], "COMPUTATION");    // 60
  EXPECT_EQ(j["types"][2]["kernel_type"], "COMPUTATION overlapping COMMUNICATION");  // 40
  EXPECT_EQ(j["types"][3]["kernel_type"], "MEMORY");                                 // 10
  EXPECT_EQ(j["types"][3]["pct"], 5.6);  // 10 / 180, to 0.1 as HTA
  EXPECT_EQ(j["total_us"], 0.18);
  EXPECT_EQ(j["other_us"], 0.02);
  EXPECT_EQ(j["other_pct_of_kernel_time"], 5.0);
}

}  // namespace
}  // namespace trainscope::trace
