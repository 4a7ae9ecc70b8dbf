// JoinFromEnvironment and WatchdogOptionsForRun (join.h, watchdog.h) on a fake environment;
// the pure parts of the self-test job (selftest_job.h): the ranks' command line, where the
// test runs, usage errors.
#include "trainscope/comm/selftest_job.h"

#include <chrono>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainscope/comm/join.h"
#include "trainscope/comm/watchdog.h"
#include "trainscope/core/fake_os.h"
#include "trainscope/core/run_dir.h"

namespace trainscope::comm {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(JoinFromEnvironmentTest, AWorldOfOneNeedsNoCommunicatorUnlessAsked) {
  FakeOs os;
  JoinRequest req;
  req.join_alone = false;
  req.timeout = std::chrono::milliseconds(1500);
  int calls = 0;
  req.before_connect = [&calls](const JoinOptions& jo) {
    ++calls;
    EXPECT_EQ(jo.comm.timeout, std::chrono::milliseconds(1500));  // the request's, already
    return absl::OkStatus();
  };
  auto w = JoinFromEnvironment(req, &os);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(w->options.launcher, Launcher::kNone);
  EXPECT_EQ(w->options.comm.world_size, 1);
  EXPECT_EQ(w->comm, nullptr);
}

TEST(JoinFromEnvironmentTest, TheRequestTimeoutWinsOverTheEnvironment) {
  FakeOs os;
  os.SetEnv("TRAINSCOPE_COMM_TIMEOUT_S", "7");
  JoinRequest req;
  req.join_alone = false;
  auto w = JoinFromEnvironment(req, &os);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->options.comm.timeout, std::chrono::milliseconds(7000));
  req.timeout = std::chrono::milliseconds(250);
  w = JoinFromEnvironment(req, &os);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->options.comm.timeout, std::chrono::milliseconds(250));
}

TEST(JoinFromEnvironmentTest, ErrorsBeforeConnectingComeBackUnchanged) {
  FakeOs os;
  os.SetEnv("RANK", "x");
  os.SetEnv("WORLD_SIZE", "2");
  JoinRequest req;
  bool called = false;
  req.before_connect = [&called](const JoinOptions&) {
    called = true;
    return absl::OkStatus();
  };
  auto bad_env = JoinFromEnvironment(req, &os);
  EXPECT_EQ(bad_env.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad_env.status().message()), HasSubstr("RANK"));
  EXPECT_FALSE(called);

  FakeOs alone;
  req.before_connect = [](const JoinOptions&) { return absl::FailedPreconditionError("no"); };
  auto refused = JoinFromEnvironment(req, &alone);
  EXPECT_EQ(refused.status(), absl::FailedPreconditionError("no"));
}

TEST(JoinFromEnvironmentTest, AWorldOfOneJoinsAndGetsARunWatchdog) {
  FakeOs os;
  JoinRequest req;
  req.defaults.backend = "gloo";
  req.timeout = std::chrono::milliseconds(5000);
  auto w = JoinFromEnvironment(req, &os);
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_NE(w->comm, nullptr);
  EXPECT_EQ(w->comm->world_size(), 1);
  EXPECT_FALSE(WatchdogOptionsForRun(*w->comm, "").has_value());  // nowhere to dump
  auto wo = WatchdogOptionsForRun(*w->comm, "/runs/a");
  if (w->comm->flight_recorder() == nullptr) {
    EXPECT_FALSE(wo.has_value());
    return;
  }
  ASSERT_TRUE(wo.has_value());
  EXPECT_EQ(wo->recorder, w->comm->flight_recorder());
  EXPECT_EQ(wo->rank, 0);
  EXPECT_EQ(wo->timeout, std::chrono::milliseconds(5000));
  EXPECT_EQ(wo->dump_path, run_dir::HangDumpPath("/runs/a", 0));
  EXPECT_EQ(wo->stacks_path, run_dir::HangStacksPath("/runs/a", 0));
  EXPECT_FALSE(wo->on_timeout);  // the caller's
}

SelftestJobOptions Job() {
  SelftestJobOptions o;
  o.self = "/bin/trainscope";
  o.backend = "gloo";
  o.selftest.sizes = {8, 1024};
  o.selftest.iters = 3;
  o.selftest.warmup = 1;
  o.selftest.seconds_per_size = 0.5;
  o.selftest.slow_rank_ratio = 0;
  o.ops_flag = "all_reduce,broadcast";
  o.dtype_flag = "bf16";
  o.check_dtypes_flag = "all";
  return o;
}

TEST(SelftestJobTest, RankArgvCarriesEveryFlagWithExplicitSizes) {
  EXPECT_THAT(SelftestRankArgv(Job()),
              ElementsAre("/bin/trainscope", "selftest", "comm", "--backend", "gloo", "--ops",
                          "all_reduce,broadcast", "--sizes", "8,1024", "--iters", "3", "--warmup",
                          "1", "--dtype", "bf16", "--check-dtypes", "all", "--seconds-per-size",
                          "0.5", "--slow-rank-ratio", "0"));
  SelftestJobOptions o = Job();
  o.selftest.min_busbw_gbps = 1.5;
  o.timeout_s = 20;
  o.selftest.inject_error_rank = 1;
  o.inject_crash_rank = 0;
  o.json = true;
  std::vector<std::string> a = SelftestRankArgv(o);
  EXPECT_THAT(std::vector<std::string>(a.end() - 9, a.end()),
              ElementsAre("--min-busbw", "1.5", "--timeout-s", "20", "--inject-error", "1",
                          "--inject-crash", "0", "--json"));
}

TEST(SelftestJobTest, WhereTheTestRuns) {
  FakeOs none;
  SelftestJobOptions o = Job();
  EXPECT_FALSE(InLaunchedWorld(&none));
  EXPECT_FALSE(SelftestRunsHere(o, &none));  // 2 ranks to start
  o.nranks = 1;
  EXPECT_TRUE(SelftestRunsHere(o, &none));  // one gloo rank: nothing to start
  o.backend = "mpi";
  EXPECT_FALSE(SelftestRunsHere(o, &none));

  FakeOs launched;
  launched.SetEnv("RANK", "0");
  launched.SetEnv("WORLD_SIZE", "2");
  EXPECT_TRUE(InLaunchedWorld(&launched));
  EXPECT_TRUE(SelftestRunsHere(o, &launched));
  o.sweep_env.push_back({"NCCL_ALGO", {"ring", "tree"}});
  EXPECT_FALSE(SelftestRunsHere(o, &launched));  // a sweep always starts its own runs

  FakeOs malformed;  // the rank then says what is wrong
  malformed.SetEnv("RANK", "one");
  malformed.SetEnv("WORLD_SIZE", "2");
  EXPECT_TRUE(InLaunchedWorld(&malformed));
}

TEST(SelftestJobTest, BackendErrorsAreUsageErrors) {
  absl::Status st = CheckSelftestBackend("ucx");
  EXPECT_TRUE(IsSelftestUsageError(st));
  EXPECT_EQ(st.message(), "unknown backend 'ucx' (expected gloo, mpi or nccl)");
  EXPECT_TRUE(CheckSelftestBackend("gloo").ok());
  EXPECT_TRUE(CheckSelftestBackend("mpi").ok());
  EXPECT_FALSE(IsSelftestUsageError(absl::InvalidArgumentError("x")));
  const std::string b = DefaultSelftestBackend();
  EXPECT_TRUE(b == "gloo" || b == "nccl") << b;
}

}  // namespace
}  // namespace trainscope::comm
