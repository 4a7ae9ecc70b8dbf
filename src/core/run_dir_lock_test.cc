// core/run_dir_lock.h: the flock on <run dir>/LOCK (two descriptors in one process conflict
// as two processes do), release on close and on death, stale records, joining by job id.
#include "trainscope/core/run_dir_lock.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "core/test_util.h"
#include "gtest/gtest.h"

namespace trainscope::run_dir {
namespace {

class RunDirLockTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test_util::TempDir("lock_test") + "/run"; }
  void TearDown() override {
    std::filesystem::remove_all(std::filesystem::path(dir_).parent_path());
  }
  std::string ReadLock() {
    std::ifstream in(dir_ + "/LOCK");
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  std::string dir_;
};

TEST_F(RunDirLockTest, SecondDescriptorIsRefusedNamingTheHolder) {
  LockOptions o;
  o.command = "trainscope train --run-dir x";
  absl::StatusOr<RunDirLock> first = LockRunDir(dir_, o);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(first->holds());
  EXPECT_EQ(ReadLock(), "pid " + std::to_string(::getpid()) +
                            "\ncommand trainscope train --run-dir x\njob -\n");
  absl::StatusOr<RunDirLock> second = LockRunDir(dir_, {});
  ASSERT_FALSE(second.ok());
  EXPECT_TRUE(IsRunDirInUse(second.status()));
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(std::string(second.status().message()),
            dir_ + " is in use by pid " + std::to_string(::getpid()) +
                " (trainscope train --run-dir x); wait for it to end or use another run "
                "directory");
}

TEST_F(RunDirLockTest, ReleasedOnCloseAndOnMove) {
  {
    absl::StatusOr<RunDirLock> a = LockRunDir(dir_, {});
    ASSERT_TRUE(a.ok());
    RunDirLock moved = *std::move(a);
    EXPECT_TRUE(moved.holds());
    EXPECT_FALSE(LockRunDir(dir_, {}).ok());
  }
  absl::StatusOr<RunDirLock> b = LockRunDir(dir_, {});
  ASSERT_TRUE(b.ok()) << b.status();
  b->Release();
  EXPECT_FALSE(b->holds());
  EXPECT_TRUE(LockRunDir(dir_, {}).ok());
}

TEST_F(RunDirLockTest, StaleRecordOfADeadProcessDoesNotBlock) {
  // A child takes the lock and dies without releasing it (_exit, as a crash would).
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    LockOptions o;
    o.command = "dead writer";
    absl::StatusOr<RunDirLock> l = LockRunDir(dir_, o);
    ::_exit(l.ok() ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_NE(ReadLock().find("command dead writer"), std::string::npos);
  absl::StatusOr<RunDirLock> l = LockRunDir(dir_, {});
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_NE(ReadLock().find("pid " + std::to_string(::getpid()) + "\n"), std::string::npos);
}

TEST_F(RunDirLockTest, HeldByALiveChildIsRefused) {
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(ready[0]);
    absl::StatusOr<RunDirLock> l = LockRunDir(dir_, {});
    char c = l.ok() ? '1' : '0';
    (void)!::write(ready[1], &c, 1);
    ::pause();
    ::_exit(0);
  }
  ::close(ready[1]);
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ASSERT_EQ(c, '1');
  absl::StatusOr<RunDirLock> l = LockRunDir(dir_, {});
  ASSERT_FALSE(l.ok());
  EXPECT_NE(std::string(l.status().message()).find("pid " + std::to_string(child) + " ("),
            std::string::npos)
      << l.status();
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  ::close(ready[0]);
  EXPECT_TRUE(LockRunDir(dir_, {}).ok());  // released by the holder's death
}

TEST_F(RunDirLockTest, SameJobJoinsOtherJobIsRefused) {
  LockOptions job_a;
  job_a.job_id = "launch/h/1";
  absl::StatusOr<RunDirLock> holder = LockRunDir(dir_, job_a);
  ASSERT_TRUE(holder.ok());
  absl::StatusOr<RunDirLock> rank = LockRunDir(dir_, job_a);
  ASSERT_TRUE(rank.ok()) << rank.status();
  EXPECT_FALSE(rank->holds());
  EXPECT_EQ(rank->holder().pid, ::getpid());
  LockOptions job_b;
  job_b.job_id = "launch/h/2";
  EXPECT_TRUE(IsRunDirInUse(LockRunDir(dir_, job_b).status()));
  EXPECT_TRUE(IsRunDirInUse(LockRunDir(dir_, {}).status()));
}

TEST_F(RunDirLockTest, IncompleteRecordIsWaitedForThenRefused) {
  // A holder that took the flock but has not written its record: a bounded re-read.
  absl::StatusOr<RunDirLock> holder = LockRunDir(dir_, {});
  ASSERT_TRUE(holder.ok());
  std::ofstream(dir_ + "/LOCK", std::ios::trunc) << "pid 12";
  LockOptions o;
  o.record_wait = std::chrono::milliseconds(50);
  absl::StatusOr<RunDirLock> l = LockRunDir(dir_, o);
  ASSERT_FALSE(l.ok());
  EXPECT_TRUE(IsRunDirInUse(l.status()));
  EXPECT_NE(std::string(l.status().message()).find("names none yet"), std::string::npos);
}

TEST(LockRecordTest, RoundTripsAndRejectsPartialRecords) {
  LockHolder h{42, "a\nb", "rdzv/x:1"};
  std::string text = FormatLockRecord(h);
  EXPECT_EQ(text, "pid 42\ncommand a b\njob rdzv/x:1\n");
  absl::StatusOr<LockHolder> p = ParseLockRecord(text);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->pid, 42);
  EXPECT_EQ(p->command, "a b");
  EXPECT_EQ(p->job_id, "rdzv/x:1");
  EXPECT_FALSE(ParseLockRecord("pid 42\ncommand a b\n").ok());
  EXPECT_FALSE(ParseLockRecord("pid 42\ncommand a b\njob x").ok());
  EXPECT_FALSE(ParseLockRecord("").ok());
}

TEST(JobIdTest, FromTheLaunchersEnvironment) {
  EXPECT_EQ(JobIdFromEnvironment({}, "h"), "");
  EXPECT_EQ(JobIdFromEnvironment({{"TRAINSCOPE_JOB_ID", "launch/h/7"}}, "h"), "launch/h/7");
  // One process with a rendezvous exported is no job.
  EXPECT_EQ(JobIdFromEnvironment(
                {{"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"}, {"WORLD_SIZE", "1"}}, "h"),
            "");
  EXPECT_EQ(JobIdFromEnvironment(
                {{"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"}, {"WORLD_SIZE", "2"}}, "h"),
            "rdzv/h/127.0.0.1:29500");
  EXPECT_EQ(JobIdFromEnvironment(
                {{"MASTER_ADDR", "node0"}, {"MASTER_PORT", "29500"}, {"WORLD_SIZE", "8"}}, "h"),
            "rdzv/node0:29500");
  EXPECT_EQ(
      JobIdFromEnvironment(
          {{"SLURM_JOB_ID", "5"}, {"SLURM_STEP_ID", "0"}, {"SLURM_STEP_NUM_TASKS", "4"}}, "h"),
      "slurm/5.0");
  EXPECT_EQ(JobIdFromEnvironment({{"PMIX_NAMESPACE", "ns"}, {"OMPI_COMM_WORLD_SIZE", "2"}}, "h"),
            "pmix/ns");
}

}  // namespace
}  // namespace trainscope::run_dir
