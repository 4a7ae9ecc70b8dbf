#include "trainscope/doctor/doctor.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "core/test_util.h"
#include "nlohmann/json.hpp"
#include "trainscope/doctor/interrupt.h"

namespace trainscope::doctor {
namespace {

using nlohmann::json;

std::string TempDir(const std::string& tag) { return test_util::TempDir("doctor_" + tag); }
using test_util::ReadFile;

// A part that prints `json_text` and exits with `code`.
Part ShellPart(const std::string& name, const std::string& json_text, int code,
               double budget = 10) {
  return Part{name,
              {"sh", "-c", "printf '%s\\n' '" + json_text + "'; exit " + std::to_string(code)},
              budget};
}

PartOutcome Outcome(const std::string& name, int exit_code, std::string out, std::string err = "") {
  PartOutcome o;
  o.name = name;
  o.argv = {"trainscope", name};
  o.started = true;
  o.exit_code = exit_code;
  o.out = std::move(out);
  o.err = std::move(err);
  return o;
}

const Check* Find(const std::vector<Check>& checks, const std::string& name) {
  for (const Check& c : checks)
    if (c.name == name) return &c;
  return nullptr;
}

TEST(Evaluate, PlaceholderVerbIsSkippedWithItsReason) {
  std::vector<Check> c = EvaluatePart(Outcome("comm", 2, "", "trainscope comm: not built yet\n"));
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].verdict, "skip");
  EXPECT_NE(c[0].value.find("not built yet"), std::string::npos);
}

TEST(Evaluate, TimeoutSkipsAndCrashFails) {
  PartOutcome t = Outcome("train", -1, "");
  t.timed_out = true;
  t.budget_s = 25;
  EXPECT_EQ(EvaluatePart(t)[0].verdict, "skip");
  EXPECT_NE(EvaluatePart(t)[0].value.find("timed out after 25 s"), std::string::npos);
  PartOutcome s = Outcome("comm", -1, "", "Segmentation fault\n");
  s.term_signal = SIGSEGV;
  EXPECT_EQ(EvaluatePart(s)[0].verdict, "fail");
  PartOutcome n;
  n.name = "device";
  n.skip_reason = "skipped by --skip";
  EXPECT_EQ(EvaluatePart(n)[0].verdict, "skip");
  EXPECT_EQ(EvaluatePart(Outcome("comm", 1, "not json", "boom"))[0].verdict, "fail");
}

TEST(Evaluate, CommWrongResultIsFailWithAdvice) {
  json j = {{"passed", false},
            {"reason", "allreduce sum wrong at 4096 bytes"},
            {"backend", "gloo"},
            {"world_size", 2},
            {"results",
             {{{"op", "allreduce"},
               {"dtype", "fp32"},
               {"bytes", 1024},
               {"busbw_gbps", 0.5},
               {"correct", true}},
              {{"op", "allreduce"},
               {"dtype", "fp32"},
               {"bytes", 4096},
               {"busbw_gbps", 0.9},
               {"correct", false}}}}};
  std::vector<Check> c = EvaluatePart(Outcome("comm", 1, j.dump()));
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].name, "comm");
  EXPECT_EQ(c[0].verdict, "fail");
  EXPECT_NE(c[0].value.find("1/2 sizes correct"), std::string::npos) << c[0].value;
  EXPECT_NE(c[0].finding.fix.find("wrong results"), std::string::npos);
  EXPECT_NE(c[0].value.find("allreduce sum wrong at 4096 bytes"), std::string::npos);
  j["passed"] = true;
  j["results"][1]["correct"] = true;
  c = EvaluatePart(Outcome("comm", 0, j.dump()));
  EXPECT_EQ(c[0].verdict, "pass");
  EXPECT_NE(c[0].value.find("busbw 0.90 GB/s"), std::string::npos) << c[0].value;
}

TEST(Evaluate, TrainEnvAndDevice) {
  json train = {{"passed", false},
                {"reason", "loss did not fall: 10.4 -> 10.5"},
                {"loss_start", 10.4},
                {"loss_end", 10.5},
                {"tokens_per_s", 12345.0},
                {"mfu", 0.021},
                {"steps", 40},
                {"seconds", 20}};
  std::vector<Check> c = EvaluatePart(Outcome("train", 1, train.dump()));
  EXPECT_EQ(c[0].verdict, "fail");
  EXPECT_NE(c[0].value.find("12,345 tokens/s"), std::string::npos) << c[0].value;
  EXPECT_NE(c[0].value.find("loss did not fall"), std::string::npos);
  EXPECT_NE(c[0].finding.fix.find("learning rate"), std::string::npos);
  EXPECT_EQ(c[0].expected, "loss falls, run completes");
  train["target_loss"] = 2.7;
  EXPECT_EQ(EvaluatePart(Outcome("train", 1, train.dump()))[0].expected,
            "loss < 2.70, run completes");

  json env = {{"format", "trainscope.env.check"},
              {"findings",
               {{{"severity", "error"},
                 {"id", "nccl_version"},
                 {"what", "NCCL too old"},
                 {"evidence", "2.10"},
                 {"fix", "upgrade NCCL"}},
                {{"severity", "warning"},
                 {"id", "omp"},
                 {"what", "OMP_NUM_THREADS unset"},
                 {"evidence", ""},
                 {"fix", "set it"}},
                {{"severity", "info"}, {"id", "x"}, {"what", "fine"}}}},
              {"errors", 1},
              {"warnings", 1},
              {"passed", false}};
  c = EvaluatePart(Outcome("env", 1, env.dump()));
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(Find(c, "env.check")->verdict, "fail");
  EXPECT_NE(Find(c, "env.check")->finding.fix.find("upgrade NCCL"), std::string::npos);
  EXPECT_EQ(Find(c, "env.nccl_version")->verdict, "fail");
  EXPECT_EQ(Find(c, "env.omp")->verdict, "warn");

  json dev = {{"passed", true},
              {"checks",
               {{{"name", "device.cpu.triad"},
                 {"verdict", "pass"},
                 {"value", "1 GB/s"},
                 {"expected", ">= 0.5"},
                 {"advice", ""}}}}};
  c = EvaluatePart(Outcome("device", 0, "log line\n" + dev.dump()));
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].name, "device.cpu.triad");
  EXPECT_EQ(c[0].part, "device");
}

// A device report as `selftest device --json` writes it on a 2-core Zen 4 guest: the fp32
// matmul judged against 2 x 2.60 GHz x 32 FLOP/cycle.
json DeviceReportWithCpuPeak() {
  return {{"passed", true},
          {"benchmarks",
           {{{"name", "matmul_fp32"},
             {"device", "cpu"},
             {"unit", "GFLOP/s"},
             {"value", 170.0},
             {"peak", 166.0},
             {"peak_formula", "2 cores x 2.60 GHz x 32 FLOP/cycle"}},
            {{"name", "matmul_bf16"},
             {"device", "cpu"},
             {"unit", "GFLOP/s"},
             {"value", 380.0},
             {"peak", 332.0}},
            {{"name", "matmul_bf16"},
             {"device", "nvidia1"},
             {"unit", "TFLOP/s"},
             {"value", 700.0},
             {"peak", 989.0}}}},
          {"checks",
           {{{"name", "device.cpu.matmul_fp32"},
             {"verdict", "pass"},
             {"value", "170.0 GFLOP/s = 102% of est. peak 166"},
             {"expected", ">= 30% of est. peak"},
             {"advice", ""}}}}};
}

TEST(Evaluate, MfuAndTheMatmulCheckShareOnePeak) {
  const json dev = DeviceReportWithCpuPeak();
  MfuPeak p = MfuPeakFromDeviceReport(dev, "cpu", "fp32");
  EXPECT_DOUBLE_EQ(p.flops, 166e9);
  EXPECT_EQ(p.check, "device.cpu.matmul_fp32");
  EXPECT_EQ(p.formula, "2 cores x 2.60 GHz x 32 FLOP/cycle");
  EXPECT_DOUBLE_EQ(MfuPeakFromDeviceReport(dev, "cpu", "bf16").flops, 332e9);
  EXPECT_DOUBLE_EQ(MfuPeakFromDeviceReport(dev, "cuda:1", "bf16").flops, 989e12);
  EXPECT_EQ(MfuPeakFromDeviceReport(dev, "cuda:1", "bf16").check, "device.nvidia1.matmul_bf16");
  EXPECT_DOUBLE_EQ(MfuPeakFromDeviceReport(dev, "cuda:0", "bf16").flops, 0);  // no such card
  EXPECT_DOUBLE_EQ(MfuPeakFromDeviceReport(dev, "cuda:1", "fp32").flops, 0);  // no fp32 peak
  EXPECT_DOUBLE_EQ(MfuPeakFromDeviceReport(json::object(), "cpu", "fp32").flops, 0);

  // The train part measured its own peak (mfu 0.05 against 332 GFLOP/s); doctor shows MFU
  // against the device part's 166 GFLOP/s, the peak its matmul check used.
  json train = {{"passed", true},
                {"loss_start", 5.5},
                {"loss_end", 2.0},
                {"target_loss", 2.1},
                {"steps", 100},
                {"tokens_per_s", 5000.0},
                {"mfu", 0.05},
                {"peak_flops", 332e9},
                {"peak_source", "measured"},
                {"model_flops_per_s", 16.6e9},
                {"device", "cpu"},
                {"precision", "fp32"}};
  PartOutcome device = Outcome("device", 0, dev.dump());
  std::vector<Check> c = EvaluatePart(Outcome("train", 0, train.dump()), &device);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_NE(c[0].value.find("MFU 10.0% of 166 GFLOP/s"), std::string::npos) << c[0].value;
  EXPECT_EQ(c[0].expected,
            "loss < 2.10, run completes; MFU against device.cpu.matmul_fp32's peak (2 cores x "
            "2.60 GHz x 32 FLOP/cycle)");
  // Without a device part (skipped, or it timed out), the train part's own figure.
  c = EvaluatePart(Outcome("train", 0, train.dump()));
  EXPECT_NE(c[0].value.find("MFU 5.0%"), std::string::npos) << c[0].value;
  device.timed_out = true;
  c = EvaluatePart(Outcome("train", 0, train.dump()), &device);
  EXPECT_NE(c[0].value.find("MFU 5.0%"), std::string::npos) << c[0].value;
}

TEST(RunDoctor, TrainMfuUsesTheDevicePartsPeak) {
  Options opt;
  opt.run_dir = TempDir("mfu");
  json train = {{"passed", true},     {"loss_start", 5.5},         {"loss_end", 2.0},
                {"mfu", 0.05},        {"model_flops_per_s", 83e9}, {"device", "cpu"},
                {"precision", "fp32"}};
  opt.parts = {ShellPart("device", DeviceReportWithCpuPeak().dump(), 0),
               ShellPart("train", train.dump(), 0)};
  absl::StatusOr<Report> r = RunDoctor(opt);
  ASSERT_TRUE(r.ok()) << r.status();
  const Check* t = Find(r->checks, "train");
  ASSERT_NE(t, nullptr);
  EXPECT_NE(t->value.find("MFU 50.0% of 166 GFLOP/s"), std::string::npos) << t->value;
  ASSERT_NE(Find(r->checks, "device.cpu.matmul_fp32"), nullptr);
  EXPECT_NE(Find(r->checks, "device.cpu.matmul_fp32")->value.find("peak 166"), std::string::npos);
}

TEST(RunDoctor, FailingPartGivesFailAdviceExitOneAndReportFiles) {
  Options opt;
  opt.run_dir = TempDir("fail");
  opt.parts = {
      ShellPart("fingerprint", R"({"host":{"hostname":"x"},"cpu":{}})", 0),
      ShellPart("comm",
                R"({"passed":false,"reason":"allreduce wrong","backend":"gloo","world_size":2,)"
                R"("results":[{"op":"allreduce","bytes":4096,"busbw_gbps":1,"correct":false}]})",
                1),
      Part{"train", {"sh", "-c", "echo 'trainscope train: not built yet' >&2; exit 2"}, 10},
  };
  std::vector<std::string> lines;
  opt.on_progress = [&](const std::string& l) { lines.push_back(l); };
  absl::StatusOr<Report> r = RunDoctor(opt);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code(), 1);
  EXPECT_EQ(r->failures, 1);
  EXPECT_EQ(Find(r->checks, "comm")->verdict, "fail");
  EXPECT_FALSE(Find(r->checks, "comm")->finding.fix.empty());
  EXPECT_EQ(Find(r->checks, "train")->verdict, "skip");
  EXPECT_EQ(Find(r->checks, "env.fingerprint")->verdict, "pass");
  EXPECT_EQ(lines.size(), 6u);
  json j = json::parse(ReadFile(opt.run_dir + "/report.json"));
  EXPECT_EQ(j["format"], "trainscope.doctor");
  EXPECT_FALSE(j["passed"].get<bool>());
  for (const json& c : j["checks"]) {
    for (const char* k : {"name", "verdict", "value", "expected", "advice"}) {
      EXPECT_TRUE(c.contains(k)) << k;
    }
  }
  std::string md = ReadFile(opt.run_dir + "/report.md");
  EXPECT_NE(md.find("| comm | FAIL |"), std::string::npos) << md;
  EXPECT_NE(ReadFile(opt.run_dir + "/fingerprint.json").find("hostname"), std::string::npos);
  EXPECT_NE(ReadFile(opt.run_dir + "/parts/train.stderr").find("not built yet"), std::string::npos);
  EXPECT_NE(RenderTable(*r).find("doctor: FAILED"), std::string::npos);
}

TEST(RunDoctor, BudgetsSkipAndExtraArgs) {
  Options opt;
  opt.run_dir = TempDir("budget");
  opt.parts = {Part{"train", {"sleep", "20"}, 0.5}, ShellPart("device", R"({"passed":true})", 0),
               Part{"comm", {"sh", "-c", "echo \"{\\\"passed\\\":$0}\""}, 5}};
  opt.extra_args["comm"] = {"true"};  // becomes $0 of the script
  opt.skip = {"device"};
  auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<Report> r = RunDoctor(opt);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(8));
  EXPECT_EQ(Find(r->checks, "train")->verdict, "skip");
  EXPECT_NE(Find(r->checks, "train")->value.find("timed out"), std::string::npos);
  EXPECT_EQ(Find(r->checks, "device")->value, "skipped by --skip");
  EXPECT_EQ(Find(r->checks, "comm")->verdict, "pass");
  EXPECT_EQ(r->exit_code(), 0);

  // A total budget that is used up skips the remaining parts.
  opt.parts = {Part{"train", {"sleep", "20"}, 10}, ShellPart("comm", R"({"passed":true})", 0)};
  opt.skip.clear();
  opt.total_budget_s = 5.5;
  r = RunDoctor(opt);
  ASSERT_TRUE(r.ok());
  EXPECT_NE(Find(r->checks, "comm")->value.find("budget"), std::string::npos)
      << Find(r->checks, "comm")->value;
}

TEST(RunDoctor, UnwritableRunDirIsAnError) {
  Options opt;
  opt.run_dir = "/proc/self/no/such/dir";
  opt.parts = {ShellPart("comm", "{}", 0)};
  EXPECT_FALSE(RunDoctor(opt).ok());
}

bool Alive(pid_t pid) {
  std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  if (stat.empty()) return false;
  size_t close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] != 'Z';
}

// A part that leaves a process behind in its own session: doctor kills it after the part.
TEST(RunDoctor, StrayProcessesOfAPartAreKilled) {
  InterruptHandler interrupts;  // subreaper, so the orphan stays our descendant
  std::string dir = TempDir("stray");
  std::string pidfile = dir + "/pid";
  Options opt;
  opt.run_dir = dir;
  opt.parts = {
      Part{"comm",
           {"sh", "-c", "setsid sleep 30 >/dev/null 2>&1 & echo $! > " + pidfile + "; echo '{}'"},
           10}};
  absl::StatusOr<Report> r = RunDoctor(opt);
  ASSERT_TRUE(r.ok());
  pid_t pid = std::atoi(ReadFile(pidfile).c_str());
  ASSERT_GT(pid, 0);
  EXPECT_FALSE(Alive(pid));
}

// Child mode of the SIGINT test: a fresh process (exec'd by the test below) runs doctor
// with a part that starts processes in several groups, and exits with doctor's code.
TEST(DoctorChild, RunUntilInterrupted) {
  const char* pidfile = std::getenv("TS_DOCTOR_CHILD_PIDFILE");
  if (pidfile == nullptr) GTEST_SKIP() << "helper for Interrupt.SigintLeavesNoStrayProcesses";
  InterruptHandler interrupts(std::chrono::milliseconds(300));
  Options opt;
  opt.run_dir = std::string(pidfile) + ".run";
  std::string p = pidfile;
  opt.parts = {Part{"comm",
                    {"sh", "-c",
                     "echo $$ >> " + p + "; sleep 60 & echo $! >> " + p +
                         "; setsid sh -c 'echo $$ >> " + p + "; sleep 60' & wait"},
                    60},
               ShellPart("train", R"({"passed":true})", 0)};
  absl::StatusOr<Report> r = RunDoctor(opt);
  std::_Exit(r.ok() ? r->exit_code() : 3);
}

TEST(Interrupt, SigintLeavesNoStrayProcesses) {
  std::string dir = TempDir("sigint");
  std::string pidfile = dir + "/pids";
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    setenv("TS_DOCTOR_CHILD_PIDFILE", pidfile.c_str(), 1);
    execl("/proc/self/exe", "doctor_test", "--gtest_filter=DoctorChild.RunUntilInterrupted",
          static_cast<char*>(nullptr));
    std::_Exit(127);
  }
  // Wait until the part's three processes have written their pids.
  std::vector<pid_t> pids;
  for (int i = 0; i < 500 && pids.size() < 3; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    pids.clear();
    std::istringstream in(ReadFile(pidfile));
    for (pid_t p; in >> p;) pids.push_back(p);
  }
  ASSERT_EQ(pids.size(), 3u);
  for (pid_t p : pids) EXPECT_TRUE(Alive(p)) << p;
  kill(child, SIGINT);
  int status = 0;
  pid_t w = 0;
  for (int i = 0; i < 500 && w == 0; ++i) {
    w = waitpid(child, &status, WNOHANG);
    if (w == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (w == 0) {
    kill(child, SIGKILL);
    waitpid(child, &status, 0);
    FAIL() << "doctor did not finish after SIGINT";
  }
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 130);
  for (pid_t p : pids) EXPECT_FALSE(Alive(p)) << "stray process " << p;
  // The report is still written, the interrupted part and the rest marked skip.
  json j = json::parse(ReadFile(pidfile + ".run/report.json"));
  EXPECT_TRUE(j["interrupted"].get<bool>());
  EXPECT_EQ(j["checks"][0]["verdict"], "skip");
  EXPECT_EQ(j["checks"][1]["value"], "not run: interrupted");
}

}  // namespace
}  // namespace trainscope::doctor

namespace trainscope::doctor {
namespace {

TEST(DoctorFindings, FailedAndWarnedChecksBecomeFindings) {
  std::vector<Check> checks = {
      {MakeCheck("comm", "fail", "9/10 correct", "every size correct", "do not train"), "comm"},
      {MakeCheck("env", "warn", "OMP_NUM_THREADS unset", "", "set it"), "env"},
      {MakeCheck("device", "pass", "ok", ""), "device"},
      {MakeCheck("train", "skip", "", ""), "train"}};
  std::vector<Finding> f = FindingsFrom(checks);
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[0].severity, Severity::kError);
  EXPECT_EQ(f[0].id, "doctor.comm");
  EXPECT_EQ(f[0].title, "comm failed: 9/10 correct");
  EXPECT_EQ(f[0].evidence, "9/10 correct (expected every size correct)");
  EXPECT_EQ(f[0].fix, "do not train");
  EXPECT_EQ(f[1].severity, Severity::kWarning);
  EXPECT_EQ(f[1].evidence, "OMP_NUM_THREADS unset");
}

}  // namespace
}  // namespace trainscope::doctor
