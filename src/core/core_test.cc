#include <unistd.h>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "trainscope/core/fake_os.h"
#include "trainscope/core/os.h"
#include "trainscope/core/stats.h"
#include "trainscope/core/subprocess.h"
#include "trainscope/core/table.h"

namespace trainscope {
namespace {

TEST(Subprocess, CapturesOutputAndExitCode) {
  auto r = RunProcess({"sh", "-c", "echo out; echo err >&2; exit 3"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->exited);
  EXPECT_EQ(r->exit_code, 3);
  EXPECT_EQ(r->out, "out\n");
  EXPECT_EQ(r->err, "err\n");
}

TEST(Subprocess, PassesArgvVerbatimAndStdin) {
  RunOptions opts;
  opts.stdin_data = "hello";
  opts.env["TS_TEST_VAR"] = "v 1";
  auto r = RunProcess({"sh", "-c", "cat; printf ' %s|%s' \"$1\" \"$TS_TEST_VAR\"", "x", "a b;c"},
                      opts);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->out, "hello a b;c|v 1");
}

TEST(Subprocess, TimesOutAndKillsTree) {
  RunOptions opts;
  opts.timeout = std::chrono::milliseconds(200);
  auto r = RunProcess({"sh", "-c", "sleep 30 & sleep 30"}, opts);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->timed_out);
  EXPECT_FALSE(r->ok());
  EXPECT_LT(r->wall_s, 5);
}

TEST(Subprocess, MissingProgramIsNotFound) {
  auto r = RunProcess({"trainscope-no-such-program"});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
}

TEST(FakeOs, FilesDirsProgramsEnv) {
  FakeOs os;
  os.AddFile("/etc/os-release", "ID=debian\n");
  os.AddFile("/sys/a/b", "1");
  EXPECT_EQ(*os.ReadFile("/etc/os-release"), "ID=debian\n");
  EXPECT_TRUE(os.FileExists("/sys/a"));
  EXPECT_EQ(os.ListDir("/sys").value(), std::vector<std::string>{"a"});
  EXPECT_FALSE(os.ReadFile("/nope").ok());
  RunResult rr;
  rr.exited = true;
  rr.exit_code = 0;
  rr.out = "x";
  os.AddProgram("nvidia-smi", rr);
  EXPECT_EQ(os.Run({"/usr/bin/nvidia-smi", "-q"}, {})->out, "x");
  EXPECT_FALSE(os.Run({"npu-smi"}, {}).ok());
  std::string v;
  EXPECT_FALSE(os.GetEnv("X", &v));
  os.SetEnv("X", "1");
  EXPECT_TRUE(os.GetEnv("X", &v));
}

TEST(Os, WriteFileAtomicCreatesDirs) {
  std::string dir = "/tmp/ts_core_test_" + std::to_string(getpid());
  ASSERT_TRUE(WriteFileAtomic(dir + "/a/b.txt", "data").ok());
  EXPECT_EQ(*Os::Default()->ReadFile(dir + "/a/b.txt"), "data");
  RunProcess({"rm", "-rf", dir}).IgnoreError();
}

TEST(Table, AlignsNumbersRight) {
  Table t({"name", "value"});
  t.AddRow({"a", "1.5"});
  t.AddRow({"longer", "100"});
  EXPECT_EQ(t.Render(), "name    value\n-------------\na         1.5\nlonger    100\n");
}

TEST(Format, Units) {
  EXPECT_EQ(FormatBytes(1536), "1.5 KiB");
  EXPECT_EQ(FormatCount(1234567), "1,234,567");
  EXPECT_EQ(FormatDouble(2.0 / 3, 3), "0.667");
}

TEST(Stats, SummaryPercentiles) {
  std::vector<double> v;
  for (int i = 1; i <= 100; ++i) v.push_back(i);
  Summary s = Summarize(v);
  EXPECT_EQ(s.count, 100);
  EXPECT_DOUBLE_EQ(s.mean, 50.5);
  EXPECT_DOUBLE_EQ(s.p50, 50);
  EXPECT_DOUBLE_EQ(s.p95, 95);
  EXPECT_DOUBLE_EQ(s.max, 100);
}

TEST(Stats, Log2Histogram) {
  Log2Histogram h;
  h.Add(0);
  h.Add(1);
  h.Add(3);
  h.Add(1000, 7);
  EXPECT_EQ(h.total(), 10u);
  EXPECT_EQ(h.ApproxPercentile(50), 1023u);
  EXPECT_EQ(h.ToJson().size(), 4u);
}

}  // namespace
}  // namespace trainscope
