// Progress writes only to the sink the executable set: library code alone prints nothing.
#include "trainscope/core/progress.h"

#include <stdlib.h>

#include <cstdio>
#include <string>
#include <thread>

#include "gtest/gtest.h"

namespace trainscope {
namespace {

std::string ReadAll(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string s;
  char buf[256];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), f)) > 0;) s.append(buf, n);
  return s;
}

TEST(Progress, PrintsNothingWithoutASinkAndToTheSinkOnceSet) {
  ASSERT_EQ(setenv("TRAINSCOPE_PROGRESS", "1", 1), 0);
  unsetenv("TRAINSCOPE_NO_PROGRESS");
  std::FILE* saved = ProgressSink();
  SetProgressSink(nullptr);
  {
    Progress p("quiet", 10, /*unit_bytes=*/false);
    EXPECT_FALSE(p.enabled());
  }
  std::FILE* sink = std::tmpfile();
  ASSERT_NE(sink, nullptr);
  SetProgressSink(sink);
  {
    Progress p("work", 10, /*unit_bytes=*/false);
    EXPECT_TRUE(p.enabled());
    std::this_thread::sleep_for(std::chrono::milliseconds(1100));  // one line a second
    p.Set(5);
  }
  const std::string out = ReadAll(sink);
  EXPECT_NE(out.find("work: 5 / 10  50%"), std::string::npos) << out;
  EXPECT_EQ(out.back(), '\n');  // the destructor ends the line
  // TRAINSCOPE_NO_PROGRESS=1 wins over a sink.
  ASSERT_EQ(setenv("TRAINSCOPE_NO_PROGRESS", "1", 1), 0);
  EXPECT_FALSE(Progress("off", 1, false).enabled());
  unsetenv("TRAINSCOPE_NO_PROGRESS");
  unsetenv("TRAINSCOPE_PROGRESS");
  SetProgressSink(saved);
  std::fclose(sink);
}

}  // namespace
}  // namespace trainscope
