#include "trainscope/core/stacks.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "gtest/gtest.h"

// Exported (the test binary is linked with ENABLE_EXPORTS) so that dladdr can name it.
extern "C" __attribute__((noinline)) void TsStacksTestBlockedInRead(int fd,
                                                                    std::atomic<bool>* entered) {
  entered->store(true);
  char c;
  while (::read(fd, &c, 1) < 0 && errno == EINTR) {
  }
  asm volatile("");  // not a tail call: keep this frame on the stack
}

namespace trainscope {
namespace {

TEST(Stacks, WithoutHandlerOnlyTheCallingThread) {
  if (StackDumpSignal() != 0) GTEST_SKIP() << "handler installed by an earlier test";
  ThreadStacks s = CollectThreadStacks(std::chrono::milliseconds(200));
  EXPECT_NE(s.note.find("no stack-dump handler"), std::string::npos);
  ASSERT_FALSE(s.threads.empty());
  int current = 0;
  for (const ThreadStack& t : s.threads) {
    if (t.current) {
      ++current;
      EXPECT_FALSE(t.frames.empty());
    }
  }
  EXPECT_EQ(current, 1);
}

TEST(Stacks, RefusesNonRealtimeSignal) { EXPECT_FALSE(InstallStackDumpHandler(SIGUSR1).ok()); }

TEST(Stacks, BlockedThreadShowsItsFunctionAndName) {
  ASSERT_TRUE(InstallStackDumpHandler(SIGRTMIN + 3).ok());
  ASSERT_TRUE(InstallStackDumpHandler(SIGRTMIN + 3).ok());  // idempotent
  EXPECT_FALSE(InstallStackDumpHandler(SIGRTMIN + 4).ok());
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  std::atomic<bool> entered{false};
  std::thread t([&] {
    pthread_setname_np(pthread_self(), "ts-blocked");
    TsStacksTestBlockedInRead(p[0], &entered);
  });
  while (!entered.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // in read() by now
  ThreadStacks s = CollectThreadStacks(std::chrono::seconds(2));
  std::string text = FormatThreadStacks(s);
  ASSERT_EQ(::write(p[1], "x", 1), 1);  // the read survived the signal (SA_RESTART)
  t.join();
  ::close(p[0]);
  ::close(p[1]);
  bool found = false;
  for (const ThreadStack& th : s.threads) {
    if (th.name != "ts-blocked") continue;
    EXPECT_TRUE(th.note.empty()) << th.note;
    for (const std::string& f : th.frames) {
      if (f.find("TsStacksTestBlockedInRead") != std::string::npos) found = true;
    }
  }
  EXPECT_TRUE(found) << text;
  EXPECT_NE(text.find("(ts-blocked)"), std::string::npos) << text;
  // A second collection works too (slots are reused).
  ThreadStacks again = CollectThreadStacks(std::chrono::seconds(2));
  EXPECT_FALSE(again.threads.empty());
}

}  // namespace
}  // namespace trainscope
