// --inject parsing (train/inject.h).
#include "trainscope/train/inject.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainscope::train {
namespace {

using ::testing::HasSubstr;

TEST(Inject, ParsesEveryKind) {
  auto i = ParseInjection("skip_collective:rank=1,step=5");
  ASSERT_TRUE(i.ok()) << i.status();
  EXPECT_EQ(i->kind, InjectKind::kSkipCollective);
  EXPECT_EQ(i->rank, 1);
  EXPECT_EQ(i->step, 5);
  EXPECT_EQ(ParseInjection("wrong_op:step=2,rank=0")->kind, InjectKind::kWrongOp);
  EXPECT_EQ(ParseInjection("wrong_size:rank=3,step=1")->kind, InjectKind::kWrongSize);
  EXPECT_EQ(ParseInjection("wrong_dtype:rank=3,step=1")->kind, InjectKind::kWrongDtype);
  auto s = ParseInjection("sleep:rank=1,step=3,seconds=2.5");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->seconds, 2.5);
  auto e = ParseInjection("exit:rank=1,step=3,code=7");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->code, 7);
  EXPECT_EQ(ParseInjection("exit:rank=1,step=3")->code, 1);
  EXPECT_STREQ(InjectKindName(InjectKind::kWrongDtype), "wrong_dtype");
}

TEST(Inject, ErrorsNameTheBadPart) {
  struct Case {
    const char* text;
    const char* says;
  } cases[] = {
      {"skip:rank=1,step=5", "unknown kind 'skip'"},
      {"wrong_op", "missing :rank=R,step=S"},
      {"wrong_op:rank=1", "missing key 'step'"},
      {"wrong_op:rank=1,step=0", "step=0 is not an integer in 1.."},
      {"wrong_op:rank=-1,step=2", "rank=-1"},
      {"wrong_op:rank=x,step=2", "rank=x"},
      {"wrong_op:rank=1,step=2,seconds=3", "unknown key 'seconds' for wrong_op"},
      {"wrong_op:rank=1,step=2,rank=2", "key 'rank' given twice"},
      {"wrong_op:rank=1,,step=2", "'' is not key=value"},
      {"sleep:rank=1,step=2", "missing key 'seconds'"},
      {"sleep:rank=1,step=2,seconds=nan", "seconds=nan"},
      {"exit:rank=1,step=2,code=256", "code=256"},
      {"exit:rank=1,step=2,stp=3", "unknown key 'stp'"},
  };
  for (const Case& c : cases) {
    auto r = ParseInjection(c.text);
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(c.says)) << c.text;
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(c.text));
  }
}

TEST(Inject, ListAndRunChecks) {
  auto two = ParseInjections({"skip_collective:rank=1,step=5", "sleep:rank=0,step=5,seconds=1"});
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two->size(), 2u);
  auto dup = ParseInjections({"skip_collective:rank=1,step=5", "exit:rank=1,step=5"});
  ASSERT_FALSE(dup.ok());
  EXPECT_THAT(std::string(dup.status().message()), HasSubstr("already has"));
  EXPECT_TRUE(CheckInjections(*two, 2, 5).ok());
  EXPECT_THAT(std::string(CheckInjections(*two, 1, 5).message()), HasSubstr("not in this run"));
  EXPECT_THAT(std::string(CheckInjections(*two, 2, 4).message()), HasSubstr("after the run"));
}

}  // namespace
}  // namespace trainscope::train
