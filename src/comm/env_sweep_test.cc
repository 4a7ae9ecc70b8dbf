// The env sweep's logic with a fake runner: spec parsing, scoring a selftest document, the
// best/worst choice, failed runs recorded rather than ending the sweep, and the outputs.
#include "trainscope/comm/env_sweep.h"

#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace trainscope::comm {
namespace {

using nlohmann::json;

// A selftest comm document: all_reduce and all_gather at 1 KiB, 1 MiB and 4 MiB, busbw
// `scale` times (1, 10, 20) for all_reduce and half that for all_gather.
std::string SweepDoc(double scale, bool passed = true) {
  json rows = json::array();
  for (const char* op : {"all_reduce", "all_gather"}) {
    const double f = std::string(op) == "all_reduce" ? 1.0 : 0.5;
    rows.push_back({{"op", op}, {"bytes", 1024}, {"busbw_gbps", scale * 1 * f}});
    rows.push_back({{"op", op}, {"bytes", 1 << 20}, {"busbw_gbps", scale * 10 * f}});
    rows.push_back({{"op", op}, {"bytes", 4 << 20}, {"busbw_gbps", scale * 20 * f}});
  }
  return json({{"format", "trainscope.selftest.comm"},
               {"passed", passed},
               {"reason", passed ? "" : "all_reduce: 1 wrong element"},
               {"results", rows}})
      .dump();
}

TEST(EnvSweep, ParsesSpecs) {
  auto s = ParseEnvSweepSpec("NCCL_ALGO=Ring,Tree,Ring");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->var, "NCCL_ALGO");
  EXPECT_EQ(s->values, (std::vector<std::string>{"Ring", "Tree"}));
  s = ParseEnvSweepSpec("X=,1");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->values, (std::vector<std::string>{"", "1"}));
  for (const char* bad : {"NCCL_ALGO", "=Ring", "NCCL_ALGO=", "1X=a", "A-B=1", ""}) {
    auto r = ParseEnvSweepSpec(bad);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << bad;
    EXPECT_NE(r.status().message().find("--sweep-env"), std::string::npos) << r.status();
  }
}

TEST(EnvSweep, ScoresTheLargestHalfOfTheSizes) {
  EnvSweepRun run;
  ASSERT_TRUE(ScoreSelftestJson(SweepDoc(1), &run).ok());
  // 3 sizes: the smaller 1 is skipped; per size the mean over ops (x 0.75).
  EXPECT_EQ(run.sizes, (std::vector<size_t>{1 << 20, 4 << 20}));
  ASSERT_EQ(run.busbw_gbps.size(), 2u);
  EXPECT_DOUBLE_EQ(run.busbw_gbps[0], 7.5);
  EXPECT_DOUBLE_EQ(run.busbw_gbps[1], 15);
  EXPECT_DOUBLE_EQ(run.score_gbps, 11.25);
  EXPECT_TRUE(run.ok);
  EXPECT_FALSE(ScoreSelftestJson("{}", &run).ok());
  EXPECT_FALSE(ScoreSelftestJson("not json", &run).ok());
  ASSERT_TRUE(ScoreSelftestJson(SweepDoc(1, false), &run).ok());
  EXPECT_FALSE(run.ok);
  EXPECT_EQ(run.error, "all_reduce: 1 wrong element");
}

// A fake measuring program: its busbw scales with the swept value; "bad" fails like a rank
// whose interface is missing; "slow" never ends (timed out); "wrong" reports wrong results.
absl::StatusOr<RunResult> FakeSelftest(const std::vector<std::string>& argv, const RunOptions& ro) {
  EXPECT_EQ(argv.front(), "trainscope");
  EXPECT_EQ(ro.env.size(), 1u);
  const std::string value = ro.env.begin()->second;
  RunResult r;
  r.exited = true;
  r.wall_s = 1.5;
  if (value == "bad") {
    r.exit_code = 1;
    r.err =
        "progress\ntrainscope selftest comm: error: rank 0 (pid 7) exited with code 1\n"
        "  | trainscope selftest comm: error: gloo rendezvous failed on rank 0: Unable to find "
        "address for: bad\nrank logs kept in /tmp/x\n";
  } else if (value == "slow") {
    r.exited = false;
    r.timed_out = true;
    r.term_signal = 15;
  } else if (value == "wrong") {
    r.exit_code = 1;
    r.out = SweepDoc(100, false);
  } else {
    r.exit_code = 0;
    r.out = SweepDoc(std::stod(value));
  }
  return r;
}

TEST(EnvSweep, PicksTheBestAndRecordsFailures) {
  EnvSweepOptions o;
  o.argv = {"trainscope", "selftest", "comm", "--json"};
  o.specs = {{"A", {"2", "bad", "4", "1", "wrong"}}, {"B", {"slow", "3"}}};
  o.runner = FakeSelftest;
  std::vector<std::string> seen;
  o.on_run = [&seen](const EnvSweepRun& r) { seen.push_back(r.var + "=" + r.value); };
  auto rep = RunEnvSweep(o);
  ASSERT_TRUE(rep.ok()) << rep.status();
  // Each variable separately, not crossed.
  EXPECT_EQ(seen,
            (std::vector<std::string>{"A=2", "A=bad", "A=4", "A=1", "A=wrong", "B=slow", "B=3"}));
  ASSERT_EQ(rep->variables.size(), 2u);
  const EnvSweepVariable& a = rep->variables[0];
  EXPECT_EQ(a.runs[a.best].value, "4");
  EXPECT_EQ(a.runs[a.worst].value, "1");
  EXPECT_DOUBLE_EQ(a.best_vs_worst, 4);
  EXPECT_DOUBLE_EQ(a.best_vs_first, 2);
  EXPECT_FALSE(a.runs[1].ok);
  EXPECT_EQ(a.runs[1].error,
            "error: gloo rendezvous failed on rank 0: Unable to find address for: bad");
  EXPECT_FALSE(a.runs[4].ok);  // wrong results never win, whatever their bandwidth
  const EnvSweepVariable& b = rep->variables[1];
  EXPECT_EQ(b.runs[b.best].value, "3");
  EXPECT_EQ(b.best, b.worst);
  EXPECT_DOUBLE_EQ(b.best_vs_first, 0);  // the first value failed
  EXPECT_NE(b.runs[0].error.find("timed out"), std::string::npos) << b.runs[0].error;
  EXPECT_EQ(rep->failed_runs, 3);
  EXPECT_FALSE(rep->passed());

  const std::string text = RenderEnvSweep(*rep);
  EXPECT_NE(text.find("best: A=4 at 45.00 GB/s, 4.00x the worst (1), 2.00x the first value (2)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("A=bad: error: gloo rendezvous failed"), std::string::npos) << text;
  EXPECT_NE(text.find("3 run(s) FAILED"), std::string::npos);
  for (absl::string_view line : absl::StrSplit(text, '\n')) EXPECT_LE(line.size(), 120u) << line;

  const json j = EnvSweepJson(*rep);
  EXPECT_EQ(j["format"], "trainscope.selftest.comm_sweep");
  EXPECT_EQ(j["variables"][0]["best"], "4");
  EXPECT_EQ(j["variables"][0]["worst"], "1");
  EXPECT_EQ(j["variables"][1]["runs"][0]["ok"], false);
  EXPECT_EQ(j["failed_runs"], 3);
}

TEST(EnvSweep, EveryRunFailing) {
  EnvSweepOptions o;
  o.argv = {"trainscope"};
  o.specs = {{"A", {"bad"}}};
  o.runner = FakeSelftest;
  auto rep = RunEnvSweep(o);
  ASSERT_TRUE(rep.ok());
  EXPECT_EQ(rep->variables[0].best, -1);
  EXPECT_NE(RenderEnvSweep(*rep).find("best: none (every run failed)"), std::string::npos);
  EXPECT_TRUE(EnvSweepJson(*rep)["variables"][0]["best"].is_null());
}

TEST(EnvSweep, BadOptionsAndAProgramThatCannotStart) {
  EnvSweepOptions o;
  EXPECT_TRUE(absl::IsInvalidArgument(RunEnvSweep(o).status()));
  o.argv = {"/nonexistent/trainscope"};
  EXPECT_TRUE(absl::IsInvalidArgument(RunEnvSweep(o).status()));
  o.specs = {{"A", {"1"}}};
  EXPECT_TRUE(absl::IsNotFound(RunEnvSweep(o).status()));  // the real runner
}

}  // namespace
}  // namespace trainscope::comm
