// Spike rule, the non-finite record and the loss scaler (train/anomaly.h).
#include "trainscope/train/anomaly.h"

#include <cmath>
#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace trainscope::train {
namespace {

using ::testing::HasSubstr;

TEST(Spike, MadRuleFlagsAJumpButNotNoiseOrADecline) {
  SpikeOptions o;
  o.window = 50;
  o.min_samples = 10;
  SpikeDetector d(o);
  // A declining curve with +-1% noise: never a spike.
  for (int i = 0; i < 60; ++i) {
    const double loss = 5.0 - 0.02 * i + 0.05 * ((i * 7) % 3 - 1);
    SpikeVerdict v = d.Observe(loss);
    EXPECT_FALSE(v.spike) << i << " " << loss << " > " << v.threshold;
    if (i < 10) {
      EXPECT_EQ(v.threshold, 0) << "no verdict before min_samples";
    }
  }
  SpikeVerdict v = d.Observe(9.0);
  EXPECT_TRUE(v.spike);
  EXPECT_GT(v.threshold, v.median);
  EXPECT_LT(v.threshold, 9.0);
  EXPECT_EQ(v.samples, 50);
  // The spike stayed out of the window: the same jump again is flagged again.
  EXPECT_TRUE(d.Observe(9.0).spike);
  // Non-finite values are the non-finite check's business.
  EXPECT_FALSE(d.Observe(std::numeric_limits<double>::quiet_NaN()).spike);
  EXPECT_FALSE(d.Observe(std::numeric_limits<double>::infinity()).spike);
}

TEST(Spike, MadRuleFloorsSigmaOnAFlatCurve) {
  SpikeOptions o;
  o.min_samples = 5;
  SpikeDetector d(o);
  for (int i = 0; i < 10; ++i) d.Observe(2.0);
  // MAD is 0; the floor (1% of the median, times k = 7) puts the threshold at 2.14.
  SpikeVerdict small = d.Observe(2.1);
  EXPECT_FALSE(small.spike);
  EXPECT_NEAR(small.threshold, 2.14, 1e-9);
  EXPECT_TRUE(d.Observe(2.2).spike);
}

TEST(Spike, MegatronRuleFreezesTheMaxOfTheFirstSamples) {
  SpikeOptions o;
  o.rule = "megatron";
  o.min_samples = 3;
  SpikeDetector d(o);
  EXPECT_FALSE(d.Observe(3.0).spike);
  EXPECT_FALSE(d.Observe(-4.0).spike);  // |loss| sets the max
  EXPECT_FALSE(d.Observe(2.0).spike);
  SpikeVerdict v = d.Observe(39.0);
  EXPECT_FALSE(v.spike);
  EXPECT_EQ(v.threshold, 40.0);
  EXPECT_TRUE(d.Observe(40.0).spike);
  EXPECT_FALSE(d.Observe(1.0).spike);
}

TEST(Spike, OffAndValidation) {
  SpikeOptions o;
  o.rule = "off";
  SpikeDetector d(o);
  for (int i = 0; i < 30; ++i) d.Observe(1.0);
  EXPECT_FALSE(d.Observe(1e9).spike);
  EXPECT_TRUE(ValidateSpikeOptions(SpikeOptions()).ok());
  SpikeOptions bad;
  bad.rule = "sigma";
  EXPECT_THAT(std::string(ValidateSpikeOptions(bad).message()), HasSubstr("anomaly.spike_rule"));
  bad = SpikeOptions();
  bad.window = 1;
  EXPECT_THAT(std::string(ValidateSpikeOptions(bad).message()), HasSubstr("spike_window"));
  bad = SpikeOptions();
  bad.factor = 1;
  EXPECT_FALSE(ValidateSpikeOptions(bad).ok());
}

NonfiniteEvidence Base() {
  NonfiniteEvidence e;
  e.step = 7;
  e.rank = 1;
  e.ranks = {1};
  e.phase = NonfinitePhase::kForward;
  e.module = "blocks.0.fc";
  e.replayed = true;
  e.reproducible = true;
  e.lr = 1e-3;
  e.prev_lr = 1e-3;
  e.grad_norms = {1.0, 1.1, 0.9, 1.0};
  return e;
}

// The rules themselves (every class, both wordings) are tested with the code, in
// src/diagnose/nonfinite_test.cc; here: the trainer's record and sentence around a verdict.

TEST(Classify, RecordAndSentence) {
  NonfiniteEvidence e = Base();
  e.phase = NonfinitePhase::kBackward;
  e.module = "blocks.1.fc_proj";
  e.parameter = "blocks.1.fc_proj.bias";
  e.sample_ids = {4, 9};
  NonfiniteVerdict v = ClassifyNonfinite(e);
  nlohmann::json j = NonfiniteToJson(e, v);
  EXPECT_EQ(j["type"], "nonfinite");
  EXPECT_EQ(j["step"], 7);
  EXPECT_EQ(j["rank"], 1);
  EXPECT_EQ(j["phase"], "backward");
  EXPECT_EQ(j["module"], "blocks.1.fc_proj");
  EXPECT_EQ(j["parameter"], "blocks.1.fc_proj.bias");
  EXPECT_EQ(j["class"], "operator");
  EXPECT_EQ(j["reproducible"], true);
  EXPECT_EQ(j["samples"], nlohmann::json::array({4, 9}));
  e.replayed = false;
  EXPECT_TRUE(NonfiniteToJson(e, v)["reproducible"].is_null());
  const std::string s = NonfiniteSentence(e, v);
  EXPECT_THAT(s, HasSubstr("step 7"));
  EXPECT_THAT(s, HasSubstr("rank 1"));
  EXPECT_THAT(s, HasSubstr("blocks.1.fc_proj"));
  EXPECT_THAT(s, HasSubstr("phase backward"));
  EXPECT_EQ(s.find('\n'), std::string::npos);
}

TEST(LossScaler, GrowsAfterCleanStepsAndBacksOffOnOverflow) {
  LossScalerOptions o;
  o.initial_scale = 1024;
  o.growth_interval = 3;
  LossScaler s(o);
  EXPECT_FALSE(s.Update(false));
  EXPECT_FALSE(s.Update(false));
  EXPECT_EQ(s.scale(), 1024);
  EXPECT_FALSE(s.Update(false));
  EXPECT_EQ(s.scale(), 2048);
  EXPECT_TRUE(s.Update(true));  // skipped, halved, clean count restarts
  EXPECT_EQ(s.scale(), 1024);
  EXPECT_FALSE(s.Update(false));
  EXPECT_FALSE(s.Update(false));
  EXPECT_TRUE(s.Update(true));
  EXPECT_EQ(s.scale(), 512);
  EXPECT_EQ(s.skipped_steps(), 2);
  EXPECT_EQ(s.backoffs(), 2);
  EXPECT_EQ(s.growths(), 1);
}

TEST(LossScaler, HysteresisAndFloor) {
  LossScalerOptions o;
  o.initial_scale = 8;
  o.growth_interval = 2;
  o.hysteresis = 2;
  o.min_scale = 2;
  LossScaler s(o);
  EXPECT_TRUE(s.Update(true));  // first overflow: hysteresis absorbs it
  EXPECT_EQ(s.scale(), 8);
  EXPECT_TRUE(s.Update(true));  // second: backs off
  EXPECT_EQ(s.scale(), 4);
  EXPECT_TRUE(s.Update(true));  // hysteresis is refilled only by a growth
  EXPECT_EQ(s.scale(), 2);
  EXPECT_FALSE(s.stuck_at_min());
  EXPECT_TRUE(s.Update(true));
  EXPECT_EQ(s.scale(), 2);  // floored
  EXPECT_TRUE(s.stuck_at_min());
  EXPECT_FALSE(s.Update(false));
  EXPECT_FALSE(s.stuck_at_min());
  EXPECT_FALSE(s.Update(false));
  EXPECT_EQ(s.scale(), 4);
  EXPECT_TRUE(s.Update(true));  // refilled: absorbed
  EXPECT_EQ(s.scale(), 4);
  EXPECT_EQ(s.skipped_steps(), 5);
}

TEST(LossScaler, Validation) {
  EXPECT_TRUE(ValidateLossScalerOptions(LossScalerOptions()).ok());
  LossScalerOptions o;
  o.backoff_factor = 1;
  EXPECT_THAT(std::string(ValidateLossScalerOptions(o).message()),
              HasSubstr("fp16.backoff_factor"));
  o = LossScalerOptions();
  o.initial_scale = std::numeric_limits<double>::quiet_NaN();
  EXPECT_FALSE(ValidateLossScalerOptions(o).ok());
  o = LossScalerOptions();
  o.min_scale = 1e9;
  EXPECT_FALSE(ValidateLossScalerOptions(o).ok());
}

}  // namespace
}  // namespace trainscope::train
