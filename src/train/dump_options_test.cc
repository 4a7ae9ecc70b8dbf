// `train --dump STEPS`: the step list's forms ("3", "1,4", "2-5"), their sorting and merging,
// and the one-line refusals (a range backwards or too long, a step < 1, INT_MAX as an end).
#include <climits>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainscope/train/dump.h"

namespace trainscope::train {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ParseDumpStepsTest, ListsRangesSortedWithoutRepeats) {
  auto one = ParseDumpSteps("3");
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_THAT(*one, ElementsAre(3));
  auto mixed = ParseDumpSteps("7,2-4,3");
  ASSERT_TRUE(mixed.ok()) << mixed.status();
  EXPECT_THAT(*mixed, ElementsAre(2, 3, 4, 7));
  const std::string max = std::to_string(INT_MAX);
  auto last = ParseDumpSteps(max + "-" + max);  // the loop must not step past INT_MAX
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_THAT(*last, ElementsAre(INT_MAX));
}

TEST(ParseDumpStepsTest, BadFormsNameThePart) {
  for (const char* bad : {"", "0", "-1", "5-2", "a", "1,,2", "1-100002", "2-x"}) {
    auto r = ParseDumpSteps(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("--dump: \"")) << bad;
  }
}

}  // namespace
}  // namespace trainscope::train
