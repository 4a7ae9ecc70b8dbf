// Profiler windows of one process are one rank; annotations are not operators; advice fits the
// trace's device (issue 33 part 4).
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "trace/trace_test_util.h"
#include "trainscope/trace/analysis.h"
#include "trainscope/trace/trace.h"

namespace trainscope::trace {
namespace windows_test {
namespace {

using testing::TempDir;
using testing::WriteFile;

// One tensorboard_trace_handler window of a process without distributedInfo: `steps`
// ProfilerSteps of 1000 us from `first` on, each with one aten::mm. `step_us` sets the length of
// the window's steps (windows of one process differ: the first one is cold).
std::string Window(const std::string& host, int pid, int first, int steps, int step_us = 1000) {
  std::string s =
      absl::StrCat(R"({"schemaVersion": 1, "host_name": ")", host, R"(", "traceEvents": [)");
  for (int k = 0; k < steps; ++k) {
    int64_t ts = int64_t{first + k} * 10'000;
    absl::StrAppend(&s, k ? "," : "", R"({"ph":"X","cat":"user_annotation","name":"ProfilerStep#)",
                    first + k, R"(","pid":)", pid, R"(,"tid":)", pid, R"(,"ts":)", ts, R"(,"dur":)",
                    step_us, R"(},{"ph":"X","cat":"cpu_op","name":"aten::mm","pid":)", pid,
                    R"(,"tid":)", pid, R"(,"ts":)", ts + 10, R"(,"dur":)", step_us / 2, "}");
  }
  return s + "]}";
}

// The user's bug: four windows of one process were ranks 0-3 with a "step times differ across
// ranks" finding. They are one rank with four windows; each window's last step is left out as
// HTA does per file.
TEST(Windows, FourWindowsOfOneProcessAreOneRank) {
  std::string dir = TempDir();
  for (int w = 0; w < 4; ++w)
    WriteFile(absl::StrCat(dir, "/vm_28866.", 100 + w, ".pt.trace.json"),
              Window("vm", 28866, 2 + 4 * w, 2, w == 0 ? 3000 : 1000));
  auto rep = AnalyzePaths({dir});
  ASSERT_TRUE(rep.ok()) << rep.status();
  ASSERT_EQ(rep->ranks.size(), 1u);
  const RankResult& r = rep->ranks[0];
  EXPECT_EQ(r.rank, 0);
  EXPECT_EQ(r.device, "cpu");
  ASSERT_EQ(r.windows.size(), 4u);
  std::vector<int64_t> steps;
  for (const StepResult& s : r.steps) steps.push_back(s.step);
  EXPECT_EQ(steps, (std::vector<int64_t>{2, 6, 10, 14}));
  EXPECT_EQ(r.windows[2].steps, std::vector<int64_t>{10});
  EXPECT_DOUBLE_EQ(r.windows[0].mean_step_us, 3000);
  EXPECT_DOUBLE_EQ(r.MeanStepUs(), 1500);
  EXPECT_TRUE(rep->findings.empty());  // no cross-rank finding between windows
  EXPECT_TRUE(rep->stragglers.empty());
  nlohmann::json j = ReportToJson(*rep);
  ASSERT_EQ(j["ranks"][0]["windows"].size(), 4u);
  EXPECT_EQ(j["ranks"][0]["windows"][1]["file"], "vm_28866.101.pt.trace.json");
  EXPECT_EQ(j["ranks"][0]["windows"][1]["steps"], nlohmann::json({6}));
  EXPECT_DOUBLE_EQ(j["ranks"][0]["windows"][1]["start_us"].get<double>(), 40'000);
}

// Processes are told apart by host and pid: another pid, or the same pid on another host, is
// another rank.
TEST(Windows, OtherProcessesAreOtherRanks) {
  std::string dir = TempDir();
  WriteFile(dir + "/a.json", Window("h1", 7, 1, 1));
  WriteFile(dir + "/b.json", Window("h1", 7, 5, 1));
  WriteFile(dir + "/c.json", Window("h1", 8, 1, 1));
  WriteFile(dir + "/d.json", Window("h2", 7, 1, 1));
  auto rep = AnalyzePaths({dir});
  ASSERT_TRUE(rep.ok()) << rep.status();
  ASSERT_EQ(rep->ranks.size(), 3u);
  EXPECT_EQ(rep->ranks[0].windows.size(), 2u);
  EXPECT_EQ(rep->ranks[1].windows.size(), 1u);
  EXPECT_EQ(rep->ranks[2].windows.size(), 1u);
}

// ProfilerStep#N and record_function ranges enclose operators; they are not operators, even
// with the last step kept and in a legacy trace without categories.
TEST(Annotations, AreNotTopOperators) {
  const std::string legacy = R"([
{"ph":"X","name":"ProfilerStep#3","pid":1,"tid":1,"ts":0,"dur":1000},
{"ph":"X","name":"## forward ##","pid":1,"tid":1,"ts":10,"dur":500},
{"ph":"X","name":"aten::mm","pid":1,"tid":1,"ts":20,"dur":100},
{"ph":"X","name":"Optimizer.step#AdamW.step","pid":1,"tid":1,"ts":600,"dur":300},
{"ph":"X","name":"aten::add_","pid":1,"tid":1,"ts":610,"dur":50}])";
  auto t = ParseChromeTrace(legacy, "legacy.json");
  ASSERT_TRUE(t.ok()) << t.status();
  AnalyzeOptions opt;
  opt.include_last_step = true;
  RankResult r = AnalyzeRank(&*t, opt);
  std::vector<std::string> names;
  for (const auto& row : r.details["top_operators"]["by_total"])
    names.push_back(row["name"].get<std::string>());
  EXPECT_EQ(names, (std::vector<std::string>{"aten::mm", "aten::add_"}));
}

// A host-bound step (large gap, host idle) whose advice must fit the device: `extra` adds a
// device kernel (CUDA) or names the NPU process.
RankResult HostBound(const std::string& extra) {
  std::string s = R"({"traceEvents": [
{"ph":"X","cat":"user_annotation","name":"ProfilerStep#1","pid":1,"tid":1,"ts":0,"dur":1000},
{"ph":"X","cat":"cpu_op","name":"aten::linear","pid":1,"tid":1,"ts":10,"dur":100},
{"ph":"X","cat":"cpu_op","name":"autograd::engine::evaluate_function: MmBackward0","pid":1,
 "tid":1,"ts":200,"dur":100})" +
                  extra + "]}";
  auto t = ParseChromeTrace(s, "t.json");
  EXPECT_TRUE(t.ok()) << t.status();
  return AnalyzeRank(&*t);
}

std::string GapFix(const RankResult& r) {
  for (const Finding& f : r.findings)
    if (f.id == "iteration_gap" || f.id == "device_idle") return f.fix;
  return "(no gap finding)";
}

TEST(Advice, FitsTheDevice) {
  RankResult cpu = HostBound("");
  EXPECT_EQ(cpu.device, "cpu");
  EXPECT_EQ(GapFix(cpu).find("CUDA"), std::string::npos) << GapFix(cpu);
  EXPECT_NE(GapFix(cpu).find("torch.compile"), std::string::npos) << GapFix(cpu);
  RankResult cuda = HostBound(R"(,
{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":20,"dur":5,
 "args":{"correlation":1}},
{"ph":"X","cat":"kernel","name":"gemm","pid":0,"tid":7,"ts":30,"dur":50,
 "args":{"correlation":1,"stream":7}})");
  EXPECT_EQ(cuda.device, "cuda");
  EXPECT_NE(GapFix(cuda).find("CUDA graphs"), std::string::npos) << GapFix(cuda);
  RankResult npu = HostBound(R"(,
{"ph":"M","name":"process_name","pid":2,"tid":0,"args":{"name":"Ascend Hardware"}})");
  EXPECT_EQ(npu.device, "npu");
  EXPECT_EQ(GapFix(npu).find("CUDA"), std::string::npos) << GapFix(npu);
  EXPECT_NE(GapFix(npu).find("TASK_QUEUE_ENABLE"), std::string::npos) << GapFix(npu);
}

// AdamW(foreach=False) runs div > add_ > addcdiv_ once per parameter inside Optimizer.step:
// the advice is the multi-tensor/fused optimizer, not a fused LayerNorm; the same sequence
// outside the optimizer keeps the fused-kernel advice.
std::string FusionFixOf(bool in_optimizer) {
  std::string s = R"({"traceEvents": [
{"ph":"X","cat":"user_annotation","name":"ProfilerStep#1","pid":1,"tid":1,"ts":0,"dur":10000})";
  if (in_optimizer)
    s += R"(,{"ph":"X","cat":"user_annotation","name":"Optimizer.step#AdamW.step","pid":1,
"tid":1,"ts":5,"dur":9000})";
  const char* ops[] = {"aten::div", "aten::add_", "aten::addcdiv_"};
  for (int k = 0; k < 6; ++k)
    for (int o = 0; o < 3; ++o)
      absl::StrAppend(&s, R"(,{"ph":"X","cat":"cpu_op","name":")", ops[o],
                      R"(","pid":1,"tid":1,"ts":)", 10 + k * 100 + o * 30, R"(,"dur":20})");
  auto t = ParseChromeTrace(s + "]}", "adamw.json");
  EXPECT_TRUE(t.ok()) << t.status();
  RankResult r = AnalyzeRank(&*t);
  for (const Finding& f : r.findings)
    if (f.id == "fusion") return f.fix + " | " + f.evidence;
  return "(no fusion finding)";
}

TEST(Advice, OptimizerChainGetsOptimizerAdvice) {
  std::string opt = FusionFixOf(true);
  EXPECT_NE(opt.find("foreach=True"), std::string::npos) << opt;
  EXPECT_NE(opt.find("AdamW.step"), std::string::npos) << opt;
  EXPECT_EQ(opt.find("LayerNorm"), std::string::npos) << opt;
  std::string plain = FusionFixOf(false);
  EXPECT_NE(plain.find("fused kernel"), std::string::npos) << plain;
}

}  // namespace
}  // namespace windows_test
}  // namespace trainscope::trace
