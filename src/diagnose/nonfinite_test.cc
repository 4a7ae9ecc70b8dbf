// Non-finite classification (diagnose/nonfinite.h): every rule and its order, the thresholds
// at their edges, the two wordings, the LR-jump and grad-norm helpers, phase names.
#include "trainscope/diagnose/nonfinite.h"

#include <cmath>
#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainscope::diagnose {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

NonfiniteEvidence NonfiniteBaseEvidence() {
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

TEST(NonfiniteClassify, EachRule) {
  NonfiniteEvidence e = NonfiniteBaseEvidence();
  EXPECT_EQ(ClassifyNonfinite(e).cls, "operator");

  e = NonfiniteBaseEvidence();
  e.reproducible = false;
  EXPECT_EQ(ClassifyNonfinite(e).cls, "transient");

  e = NonfiniteBaseEvidence();
  e.weights_nonfinite = true;
  EXPECT_EQ(ClassifyNonfinite(e).cls, "nonfinite_weight");

  e = NonfiniteBaseEvidence();
  e.module = "wte";
  e.embedding_output = true;
  EXPECT_EQ(ClassifyNonfinite(e).cls, "bad_data");
  EXPECT_THAT(ClassifyNonfinite(e).finding.fix, HasSubstr("samples"));
  EXPECT_EQ(ClassifyNonfinite(e).finding.id, "nonfinite.bad_data");
  EXPECT_EQ(ClassifyNonfinite(e).finding.severity, Severity::kError);
  EXPECT_EQ(ClassifyNonfinite(e).finding.where, "wte");
  EXPECT_EQ(ClassifyNonfinite(e).finding.title, NonfiniteTitle(e));

  e = NonfiniteBaseEvidence();
  e.module = "0";
  e.input_nonfinite = true;  // a NaN feature in the batch: data, not the first operation
  EXPECT_EQ(ClassifyNonfinite(e).cls, "bad_data");
  EXPECT_THAT(ClassifyNonfinite(e).finding.fix, HasSubstr("samples"));

  // "reproducibly" only for a step that two replays reproduced (issue 33: a backward that was
  // not replayed was called reproducible).
  e = NonfiniteBaseEvidence();
  EXPECT_THAT(ClassifyNonfinite(e).finding.fix, HasSubstr("reproducibly"));
  e.phase = NonfinitePhase::kBackward;
  e.replayed = false;
  EXPECT_EQ(ClassifyNonfinite(e).cls, "operator");
  EXPECT_THAT(ClassifyNonfinite(e).finding.fix, Not(HasSubstr("reproducibl")));

  e = NonfiniteBaseEvidence();
  e.fp16 = true;
  e.max_abs_activation = 70000;
  EXPECT_EQ(ClassifyNonfinite(e).cls, "fp16_overflow");
  EXPECT_THAT(ClassifyNonfinite(e).finding.fix, HasSubstr("bf16"));
  e.fp16 = false;  // the same magnitude is no overflow in fp32
  EXPECT_EQ(ClassifyNonfinite(e).cls, "operator");
  e.max_abs_activation = 1e28;  // but this is divergence
  EXPECT_EQ(ClassifyNonfinite(e).cls, "lr_too_high");
  EXPECT_THAT(ClassifyNonfinite(e).finding.fix, HasSubstr("diverged"));

  e = NonfiniteBaseEvidence();
  e.phase = NonfinitePhase::kOptimizer;
  e.replayed = false;
  EXPECT_EQ(ClassifyNonfinite(e).cls, "lr_too_high");  // the update itself overflowed
  EXPECT_THAT(ClassifyNonfinite(e).finding.fix, HasSubstr("update itself"));

  e = NonfiniteBaseEvidence();  // forward at the step after an LR jump
  e.lr_jump = 1e30;
  e.lr_jump_step = 6;
  EXPECT_EQ(ClassifyNonfinite(e).cls, "lr_too_high");
  EXPECT_THAT(ClassifyNonfinite(e).finding.fix, HasSubstr("jumped 1e+30x at step 6"));
  e.lr_jump = 4;  // under 5x: a schedule, not a jump
  EXPECT_EQ(ClassifyNonfinite(e).cls, "operator");

  e = NonfiniteBaseEvidence();
  e.phase = NonfinitePhase::kBackward;
  e.grad_norms = {1.0, 1.2, 0.8, 1.1, 30.0};
  EXPECT_EQ(ClassifyNonfinite(e).cls, "exploding_gradients");
  EXPECT_NEAR(GradNormJump(e.grad_norms), 30.0 / 1.05, 1e-9);
  e.grad_norms = {1.0, 30.0};  // too short a history for a trend
  EXPECT_EQ(ClassifyNonfinite(e).cls, "operator");

  e = NonfiniteBaseEvidence();
  e.phase = NonfinitePhase::kLoss;
  EXPECT_THAT(ClassifyNonfinite(e).finding.fix, HasSubstr("targets"));
}

// First match wins: each earlier rule's evidence added to a later rule's keeps the earlier
// class.
TEST(NonfiniteClassify, RuleOrder) {
  NonfiniteEvidence e = NonfiniteBaseEvidence();
  e.phase = NonfinitePhase::kBackward;
  e.grad_norms = {1.0, 1.0, 1.0, 50.0};
  EXPECT_EQ(ClassifyNonfinite(e).cls, "exploding_gradients");
  e.lr_jump = 8;
  e.lr_jump_step = 7;
  EXPECT_EQ(ClassifyNonfinite(e).cls, "lr_too_high");
  e.fp16 = true;
  e.max_abs_activation = 1e5;
  EXPECT_EQ(ClassifyNonfinite(e).cls, "fp16_overflow");
  e.phase = NonfinitePhase::kForward;
  e.embedding_output = true;
  EXPECT_EQ(ClassifyNonfinite(e).cls, "bad_data");
  e.weights_nonfinite = true;
  EXPECT_EQ(ClassifyNonfinite(e).cls, "nonfinite_weight");
  e.reproducible = false;
  EXPECT_EQ(ClassifyNonfinite(e).cls, "transient");
  // Weights non-finite after the optimizer step are that step's doing, not an earlier one's.
  e = NonfiniteBaseEvidence();
  e.phase = NonfinitePhase::kOptimizer;
  e.replayed = false;
  e.weights_nonfinite = true;
  EXPECT_EQ(ClassifyNonfinite(e).cls, "lr_too_high");
  // An embedding output outside the forward phase is no evidence of bad data.
  e = NonfiniteBaseEvidence();
  e.phase = NonfinitePhase::kBackward;
  e.embedding_output = true;
  EXPECT_EQ(ClassifyNonfinite(e).cls, "operator");
}

TEST(NonfiniteClassify, ThresholdEdges) {
  NonfiniteEvidence e = NonfiniteBaseEvidence();
  e.fp16 = true;
  e.max_abs_activation = kFp16Max;  // fp16's largest value is still in range
  EXPECT_EQ(ClassifyNonfinite(e).cls, "operator");
  e.max_abs_activation = std::nextafter(kFp16Max, 1e9);
  EXPECT_EQ(ClassifyNonfinite(e).cls, "fp16_overflow");

  e = NonfiniteBaseEvidence();
  e.lr_jump = kLrJump;
  EXPECT_EQ(ClassifyNonfinite(e).cls, "lr_too_high");
  e.lr_jump = std::nextafter(kLrJump, 0.0);
  EXPECT_EQ(ClassifyNonfinite(e).cls, "operator");

  e = NonfiniteBaseEvidence();
  e.grad_norms = {2.0, 2.0, 2.0, 2.0 * kGradNormJump};
  EXPECT_EQ(ClassifyNonfinite(e).cls, "exploding_gradients");
  e.grad_norms.back() = std::nextafter(2.0 * kGradNormJump, 0.0);
  EXPECT_EQ(ClassifyNonfinite(e).cls, "operator");

  e = NonfiniteBaseEvidence();
  e.max_abs_activation = kDivergedActivation;
  EXPECT_EQ(ClassifyNonfinite(e).cls, "lr_too_high");
  e.max_abs_activation = std::nextafter(kDivergedActivation, 0.0);
  EXPECT_EQ(ClassifyNonfinite(e).cls, "operator");
}

// The trainer's fixes name its config keys, byte for byte as before the rules moved here
// (the goldens and the nonfinite matrix test read them); a user's loop gets plain words.
TEST(NonfiniteClassify, Wordings) {
  const NonfiniteWording trainer = NonfiniteWording::Trainer();
  const NonfiniteWording user = NonfiniteWording::UserLoop();
  NonfiniteEvidence e = NonfiniteBaseEvidence();
  e.fp16 = true;
  e.max_abs_activation = 70000;
  EXPECT_EQ(ClassifyNonfinite(e, trainer).finding.fix,
            "activations of blocks.0.fc reach 7e+04, beyond fp16's 65504: train in bf16 "
            "(train.precision), or keep blocks.0.fc in fp32");
  EXPECT_EQ(ClassifyNonfinite(e, user).finding.fix,
            "activations of blocks.0.fc reach 7e+04, beyond fp16's 65504: train in bf16, or "
            "keep blocks.0.fc in fp32");

  e = NonfiniteBaseEvidence();
  e.lr_jump = 10;
  e.lr_jump_step = 6;
  EXPECT_EQ(ClassifyNonfinite(e).finding.fix,
            "the learning rate jumped 10x at step 6: lower optim.lr or lengthen "
            "optim.warmup_steps (check the LR schedule)");
  EXPECT_EQ(ClassifyNonfinite(e, user).finding.fix,
            "the learning rate jumped 10x at step 6: lower the learning rate or lengthen the "
            "warm-up (check the LR schedule)");

  e = NonfiniteBaseEvidence();
  e.grad_norms = {1.0, 1.0, 1.0, 20.0};
  EXPECT_EQ(ClassifyNonfinite(e).finding.fix,
            "the gradient norm rose 20x over the recent median before this step: clip harder "
            "(lower optim.grad_clip) or lower optim.lr");
  EXPECT_EQ(ClassifyNonfinite(e, user).finding.fix,
            "the gradient norm rose 20x over the recent median before this step: clip harder "
            "or lower the learning rate");

  e = NonfiniteBaseEvidence();
  e.max_abs_activation = 3e12;
  EXPECT_EQ(ClassifyNonfinite(e).finding.fix,
            "activations reached 3e+12 before turning non-finite, so the weights diverged: "
            "lower optim.lr (0.001 at this step) or clip harder (optim.grad_clip)");
  EXPECT_EQ(ClassifyNonfinite(e, user).finding.fix,
            "activations reached 3e+12 before turning non-finite, so the weights diverged: "
            "lower the learning rate (0.001 at this step) or clip harder");

  e = NonfiniteBaseEvidence();
  e.phase = NonfinitePhase::kOptimizer;
  e.replayed = false;
  EXPECT_EQ(ClassifyNonfinite(e).finding.fix,
            "finite gradients gave non-finite weights, so the update itself overflowed: lower "
            "optim.lr (and check optim.eps is not tiny)");
  EXPECT_EQ(ClassifyNonfinite(e, user).finding.fix,
            "finite gradients gave non-finite weights, so the update itself overflowed: lower "
            "the learning rate (and check the optimizer's eps is not tiny)");

  e = NonfiniteBaseEvidence();
  e.phase = NonfinitePhase::kLoss;
  EXPECT_EQ(ClassifyNonfinite(e).finding.fix,
            "the logits are finite but the loss is not: check the targets (ids outside the "
            "vocabulary) and the loss function");
  EXPECT_EQ(ClassifyNonfinite(e, user).finding.fix,
            "the model's output is finite but the loss is not: check the targets (ids outside "
            "the vocabulary) and the loss function");

  // Classes never depend on the wording; fixes that name no setting are the same in both.
  e = NonfiniteBaseEvidence();
  e.phase = NonfinitePhase::kBackward;
  e.module = "";
  EXPECT_EQ(ClassifyNonfinite(e, user).finding.fix, ClassifyNonfinite(e, trainer).finding.fix);
  EXPECT_THAT(ClassifyNonfinite(e).finding.fix,
              HasSubstr("an operation in the model turns finite gradients into NaN/Inf"));
  for (const NonfiniteWording& w : {trainer, user}) {
    EXPECT_THAT(ClassifyNonfinite(e, w).finding.fix, Not(HasSubstr("  ")));
  }
}

TEST(NonfiniteClassify, GradNormJumpIgnoresNonfiniteNorms) {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(GradNormJump({}), 0);
  EXPECT_EQ(GradNormJump({1.0, 30.0}), 0);
  EXPECT_EQ(GradNormJump({0.0, 0.0, 5.0}), 0);  // a zero median: no ratio
  EXPECT_DOUBLE_EQ(GradNormJump({1.0, 3.0, 12.0}), 6.0);
  EXPECT_DOUBLE_EQ(GradNormJump({1.0, nan, 3.0, inf, 12.0, -inf}), 6.0);
  EXPECT_EQ(GradNormJump({nan, 1.0, inf, 30.0}), 0);  // two finite norms: too short
}

TEST(NonfiniteClassify, FindLrJumpLooksAtTheLastThreeSteps) {
  LrJump j = FindLrJump({});
  EXPECT_EQ(j.ratio, 0);
  EXPECT_EQ(j.step, 0);
  j = FindLrJump({{5, 1e-3}});
  EXPECT_EQ(j.ratio, 0);
  // A warm-up: the largest rise of the last two pairs.
  j = FindLrJump({{1, 1e-4}, {2, 2e-4}, {3, 8e-4}});
  EXPECT_DOUBLE_EQ(j.ratio, 4);
  EXPECT_EQ(j.step, 3);
  // A 10x jump three pairs back is out of the window.
  j = FindLrJump({{1, 1e-4}, {2, 1e-3}, {3, 1e-3}, {4, 1.5e-3}});
  EXPECT_DOUBLE_EQ(j.ratio, 1.5);
  EXPECT_EQ(j.step, 4);
  // A decay is the largest ratio of its steps (under 1: no jump); the first of equal ones.
  j = FindLrJump({{1, 1e-3}, {2, 5e-4}, {3, 2.5e-4}});
  EXPECT_DOUBLE_EQ(j.ratio, 0.5);
  EXPECT_EQ(j.step, 2);
  // A zero LR before a rise is skipped.
  j = FindLrJump({{1, 0.0}, {2, 1e-3}, {3, 1e-2}});
  EXPECT_DOUBLE_EQ(j.ratio, 10);
  EXPECT_EQ(j.step, 3);
}

TEST(NonfiniteClassify, PhaseNames) {
  for (NonfinitePhase p : {NonfinitePhase::kForward, NonfinitePhase::kBackward,
                           NonfinitePhase::kLoss, NonfinitePhase::kOptimizer}) {
    absl::StatusOr<NonfinitePhase> parsed = ParseNonfinitePhase(NonfinitePhaseName(p));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, p);
  }
  absl::StatusOr<NonfinitePhase> bad = ParseNonfinitePhase("Forward");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("\"Forward\""));
  EXPECT_FALSE(ParseNonfinitePhase("").ok());
}

}  // namespace
}  // namespace trainscope::diagnose
