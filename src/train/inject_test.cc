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

TEST(Inject, NumericKinds) {
  auto f = ParseInjection("nan_forward:layer=1,step=3,rank=1");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->kind, InjectKind::kNanForward);
  EXPECT_EQ(f->layer, 1);
  EXPECT_EQ(f->step, 3);
  EXPECT_EQ(f->rank, 1);
  EXPECT_FALSE(IsCommFault(f->kind));
  EXPECT_TRUE(IsCommFault(InjectKind::kSleep));
  auto b = ParseInjection("nan_backward:layer=0,step=2");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->rank, -1);  // every rank
  EXPECT_TRUE(InjectionHits(*b, 0));
  EXPECT_TRUE(InjectionHits(*b, 5));
  EXPECT_FALSE(InjectionHits(*f, 0));
  auto w = ParseInjection("inf_weight:layer=2,step=4");
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->kind, InjectKind::kInfWeight);
  auto lr = ParseInjection("lr_spike:factor=1e6,step=5");
  ASSERT_TRUE(lr.ok()) << lr.status();
  EXPECT_EQ(lr->factor, 1e6);
  auto d = ParseInjection("nan_data:step=2");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->kind, InjectKind::kNanData);
  EXPECT_STREQ(InjectKindName(InjectKind::kLrSpike), "lr_spike");

  struct Case {
    const char* text;
    const char* says;
  } cases[] = {
      {"nan_forward:step=3", "missing key 'layer'"},
      {"nan_forward", "missing :layer, step, rank"},
      {"inf_weight:layer=1,step=2,rank=0", "unknown key 'rank' for inf_weight"},
      {"lr_spike:step=2", "missing key 'factor'"},
      {"lr_spike:factor=-2,step=2", "factor=-2 is not a positive number"},
      {"lr_spike:factor=inf,step=2", "factor=inf"},
      {"nan_data:step=2,layer=1", "unknown key 'layer' for nan_data"},
      {"nan_backward:layer=x,step=2", "layer=x"},
  };
  for (const Case& c : cases) {
    auto r = ParseInjection(c.text);
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(c.says)) << c.text;
  }
  // An every-rank injection clashes with any other at the same step.
  auto clash = ParseInjections({"nan_data:step=2", "nan_forward:layer=0,step=2,rank=1"});
  ASSERT_FALSE(clash.ok());
  EXPECT_THAT(std::string(clash.status().message()), HasSubstr("every rank at step 2"));
  auto list = ParseInjections({"nan_forward:layer=3,step=2"});
  ASSERT_TRUE(list.ok());
  EXPECT_TRUE(CheckInjections(*list, 1, 5, 4).ok());
  EXPECT_THAT(std::string(CheckInjections(*list, 1, 5, 3).message()),
              HasSubstr("layer 3 is not in this model of 3 layers"));
}

}  // namespace
}  // namespace trainscope::train
