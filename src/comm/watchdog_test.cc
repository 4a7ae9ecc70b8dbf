// Watchdog tests: the stall rule on fake entries, the message, and the thread on a real
// recorder with short timeouts (firing once, dumps on request, failed ops, clean stop).
#include "trainscope/comm/watchdog.h"

#include <time.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace trainscope::comm {
namespace {

int64_t MonoNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

FlightEntry Entry(int64_t id, int64_t seq, int64_t created_ns, bool retired,
                  const char* error = "") {
  FlightEntry e;
  e.record_id = id;
  e.collective_seq_id = seq;
  e.op = OpType::kAllReduce;
  e.time_created_ns = created_ns;
  e.retired = retired;
  if (retired && error[0] == '\0') e.time_discovered_completed_ns = created_ns + 1;
  std::snprintf(e.error, sizeof(e.error), "%s", error);
  return e;
}

std::vector<ProcessGroupInfo> Groups() {
  ProcessGroupInfo g;
  g.ranks = {0, 1};
  return {g};
}

TEST(FindStall, NothingWhileOpsAreYoungOrDone) {
  const int64_t s = 1000000000;
  std::vector<FlightEntry> es = {Entry(0, 1, 1 * s, true), Entry(1, 2, 10 * s, false)};
  EXPECT_FALSE(FindStall(es, Groups(), 12 * s, 3 * s).has_value());
  EXPECT_FALSE(FindStall({}, Groups(), 12 * s, 3 * s).has_value());
}

TEST(FindStall, OldestLateOpAndFailedOps) {
  const int64_t s = 1000000000;
  std::vector<FlightEntry> es = {Entry(0, 1, 1 * s, true), Entry(1, 2, 2 * s, false),
                                 Entry(2, 3, 3 * s, false)};
  auto st = FindStall(es, Groups(), 10 * s, 3 * s);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->entry.collective_seq_id, 2);
  EXPECT_FALSE(st->failed);
  EXPECT_EQ(st->age_ns, 8 * s);
  EXPECT_EQ(st->pg_name, "0");
  EXPECT_EQ(st->pg_desc, "default_pg");
  es[1].retired = true;
  std::snprintf(es[1].error, sizeof(es[1].error), "peer left");
  st = FindStall(es, Groups(), 4 * s, 30 * s);  // failed: at once, whatever the timeout
  ASSERT_TRUE(st.has_value());
  EXPECT_TRUE(st->failed);
  EXPECT_EQ(st->entry.collective_seq_id, 2);
}

TEST(DescribeStall, OneLineNamingOpGroupSeqCallerAndTime) {
  Stall s;
  s.entry = Entry(5, 17, 1, false);
  std::snprintf(s.entry.caller, sizeof(s.entry.caller), "step 5 grad bucket 0");
  s.pg_name = "0";
  s.pg_desc = "default_pg";
  s.age_ns = 10'000'000'000;
  EXPECT_EQ(DescribeStall(1, s),
            "rank 1: all_reduce #17 (group 0 default_pg, caller 'step 5 grad bucket 0') not "
            "completed after 10.0 s");
  s.failed = true;
  std::snprintf(s.entry.error, sizeof(s.entry.error), "connection closed by peer");
  EXPECT_EQ(DescribeStall(0, s),
            "rank 0: all_reduce #17 (group 0 default_pg, caller 'step 5 grad bucket 0') failed "
            "after 10.0 s: connection closed by peer");
}

class WatchdogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("ts_watchdog_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    FlightRecorderOptions ro;
    ro.capacity = 16;
    ro.rank = 1;
    ro.world_size = 2;
    recorder_ = *FlightRecorder::Create(ro);
    ProcessGroupInfo g;
    g.ranks = {0, 1};
    g.backend = "gloo";
    pg_ = *recorder_->RegisterProcessGroup(g);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  WatchdogOptions Options(std::chrono::milliseconds timeout) {
    WatchdogOptions o;
    o.recorder = recorder_;
    o.rank = 1;
    o.timeout = timeout;
    o.poll = std::chrono::milliseconds(10);
    o.dump_path = (dir_ / "hang/flight_recorder.rank1.json").string();
    o.stacks_path = (dir_ / "hang/stacks.rank1.txt").string();
    o.on_timeout = [this](const std::string& m) {
      std::lock_guard<std::mutex> lock(mu_);
      messages_.push_back(m);
    };
    return o;
  }
  int64_t Issue(int64_t seq) {
    FlightOp op;
    op.pg_id = pg_;
    op.collective_seq_id = seq;
    op.op = OpType::kAllReduce;
    op.input_numel = op.output_numel = 4;
    op.enqueue_mono_ns = MonoNs();
    return recorder_->RecordScheduled(op);
  }
  std::vector<std::string> Messages() {
    std::lock_guard<std::mutex> lock(mu_);
    return messages_;
  }
  bool WaitFor(const std::function<bool()>& pred, int ms = 5000) {
    for (int i = 0; i < ms && !pred(); i += 5) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return pred();
  }

  std::filesystem::path dir_;
  std::shared_ptr<FlightRecorder> recorder_;
  int pg_ = 0;
  std::mutex mu_;
  std::vector<std::string> messages_;
};

TEST_F(WatchdogTest, FiresOnceWithDumpAndStacksOnDisk) {
  auto w = Watchdog::Start(Options(std::chrono::milliseconds(200)));
  ASSERT_TRUE(w.ok()) << w.status();
  int64_t done = Issue(1);
  recorder_->RecordStarted(done, MonoNs());
  recorder_->RecordCompleted(done, MonoNs(), absl::OkStatus());
  int64_t id = Issue(2);
  recorder_->RecordStarted(id, MonoNs());
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(WaitFor([&] { return !Messages().empty(); }));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(s, 0.15);
  EXPECT_LT(s, 2.0);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto m = Messages();
  ASSERT_EQ(m.size(), 1u);  // once
  EXPECT_EQ(m[0].rfind("rank 1: all_reduce #2 (group 0 default_pg) not completed after 0.", 0), 0u)
      << m[0];
  EXPECT_TRUE((*w)->fired());
  EXPECT_EQ((*w)->CheckNow(), m[0]);
  std::ifstream dump(dir_ / "hang/flight_recorder.rank1.json");
  auto j = nlohmann::json::parse(dump);
  EXPECT_EQ(j["entries"].size(), 2u);
  std::ifstream stacks(dir_ / "hang/stacks.rank1.txt");
  std::stringstream ss;
  ss << stacks.rdbuf();
  EXPECT_NE(ss.str().find("thread "), std::string::npos);
}

TEST_F(WatchdogTest, FailedOpFiresWithoutWaitingForTheTimeout) {
  auto w = Watchdog::Start(Options(std::chrono::seconds(60)));
  ASSERT_TRUE(w.ok());
  int64_t id = Issue(1);
  recorder_->RecordStarted(id, MonoNs());
  recorder_->RecordCompleted(id, MonoNs(), absl::UnavailableError("peer 0 left"));
  std::string m = (*w)->CheckNow();  // the caller's synchronous path
  EXPECT_NE(m.find("all_reduce #1 (group 0 default_pg) failed after"), std::string::npos) << m;
  EXPECT_NE(m.find("peer 0 left"), std::string::npos) << m;
  EXPECT_TRUE(std::filesystem::exists(dir_ / "hang/flight_recorder.rank1.json"));
  EXPECT_EQ(Messages().size(), 1u);
}

TEST_F(WatchdogTest, DumpsOnRequestWithoutFiring) {
  std::atomic<int> counter{0};
  WatchdogOptions o = Options(std::chrono::seconds(60));
  o.dump_request = &counter;
  auto w = Watchdog::Start(o);
  ASSERT_TRUE(w.ok());
  Issue(1);  // pending, young
  (*w)->RequestDump();
  ASSERT_TRUE(WaitFor([&] { return (*w)->dumps() == 1; }));
  EXPECT_TRUE(std::filesystem::exists(dir_ / "hang/flight_recorder.rank1.json"));
  EXPECT_TRUE(std::filesystem::exists(dir_ / "hang/stacks.rank1.txt"));
  counter.fetch_add(1);  // as a SIGUSR1 handler would
  ASSERT_TRUE(WaitFor([&] { return (*w)->dumps() == 2; }));
  EXPECT_FALSE((*w)->fired());
  EXPECT_TRUE(Messages().empty());
}

TEST_F(WatchdogTest, StopsPromptlyAndRefusesBadOptions) {
  auto w = Watchdog::Start(Options(std::chrono::seconds(600)));
  ASSERT_TRUE(w.ok());
  const auto t0 = std::chrono::steady_clock::now();
  w->reset();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));
  WatchdogOptions bad = Options(std::chrono::seconds(1));
  bad.recorder = nullptr;
  EXPECT_FALSE(Watchdog::Start(bad).ok());
  bad = Options(std::chrono::milliseconds(0));
  EXPECT_FALSE(Watchdog::Start(bad).ok());
}

}  // namespace
}  // namespace trainscope::comm
