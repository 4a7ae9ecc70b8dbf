// Non-finite classification (see diagnose/nonfinite.h).
#include "trainscope/diagnose/nonfinite.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "trainscope/core/stats.h"

namespace trainscope::diagnose {

const char* NonfinitePhaseName(NonfinitePhase p) {
  switch (p) {
    case NonfinitePhase::kForward:
      return "forward";
    case NonfinitePhase::kBackward:
      return "backward";
    case NonfinitePhase::kLoss:
      return "loss";
    case NonfinitePhase::kOptimizer:
      return "optimizer";
  }
  return "?";
}

absl::StatusOr<NonfinitePhase> ParseNonfinitePhase(std::string_view name) {
  for (NonfinitePhase p : {NonfinitePhase::kForward, NonfinitePhase::kBackward,
                           NonfinitePhase::kLoss, NonfinitePhase::kOptimizer}) {
    if (name == NonfinitePhaseName(p)) return p;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("non-finite phase \"", std::string(name),
                   "\": expected forward, backward, loss or optimizer"));
}

NonfiniteWording NonfiniteWording::Trainer() {
  return {"optim.lr",        "optim.warmup_steps", "optim.eps",
          "optim.grad_clip", "train.precision",    "the logits are finite"};
}

NonfiniteWording NonfiniteWording::UserLoop() {
  return {"the learning rate",           "the warm-up", "the optimizer's eps", "", "",
          "the model's output is finite"};
}

double GradNormJump(const std::vector<double>& norms) {
  std::vector<double> finite;
  finite.reserve(norms.size());
  for (double n : norms) {
    if (std::isfinite(n)) finite.push_back(n);
  }
  if (finite.size() < 3) return 0;
  const double last = finite.back();
  finite.pop_back();
  const double med = trainscope::Median(std::move(finite));
  return med > 0 ? last / med : 0;
}

LrJump FindLrJump(const std::vector<std::pair<int, double>>& history) {
  LrJump jump;
  for (size_t i = history.size() >= 3 ? history.size() - 3 : 0; i + 1 < history.size(); ++i) {
    if (history[i].second > 0 && history[i + 1].second / history[i].second > jump.ratio) {
      jump.ratio = history[i + 1].second / history[i].second;
      jump.step = history[i + 1].first;
    }
  }
  return jump;
}

namespace {

// "the backward gradient of module blocks.1.fc (parameter blocks.1.fc.bias) turned non-finite".
std::string WhatTurnedNonfinite(const NonfiniteEvidence& e) {
  const std::string module = e.module.empty() ? "an unknown module" : "module " + e.module;
  const std::string param = e.parameter.empty() ? "" : " (parameter " + e.parameter + ")";
  switch (e.phase) {
    case NonfinitePhase::kForward:
      return absl::StrCat("the forward output of ", module, " turned non-finite from finite input");
    case NonfinitePhase::kBackward:
      return absl::StrCat("the backward gradient of ", module, param, " turned non-finite");
    case NonfinitePhase::kLoss:
      return absl::StrCat("the loss turned non-finite from finite logits (", module, ")");
    case NonfinitePhase::kOptimizer:
      return absl::StrCat("the optimizer step made ", module, param, " non-finite");
  }
  return "";
}

}  // namespace

std::string NonfiniteTitle(const NonfiniteEvidence& e) {
  return absl::StrCat("non-finite values at step ", e.step, " on rank ", e.rank, ": ",
                      WhatTurnedNonfinite(e));
}

std::string NonfiniteEvidenceText(const NonfiniteEvidence& e) {
  const char* repro = !e.replayed      ? "not replayed"
                      : e.reproducible ? "reproducible"
                                       : "not reproducible";
  return absl::StrCat("phase ", NonfinitePhaseName(e.phase), ", ", repro);
}

namespace {

// The class, and what to change (the verdict's Finding::fix).
using ClassAndFix = std::pair<std::string, std::string>;

// The rules in the order of the header's list: evidence that explains the others comes first
// (a replay that did not reproduce says nothing about the model; weights that were already
// non-finite make every later symptom a consequence), then the causes with a number behind
// them (fp16 range, LR jump, grad-norm trend, diverged activations), then the phase alone.
ClassAndFix ApplyRules(const NonfiniteEvidence& e, const NonfiniteWording& w) {
  const std::string where = e.module.empty() ? std::string("the model") : e.module;
  if (e.replayed && !e.reproducible) {
    return {"transient",
            "the same batch from the same state did not turn non-finite again, so the cause is "
            "random (hardware, a race, uninitialised memory): run `trainscope selftest device` "
            "and resume from the last checkpoint"};
  }
  if (e.weights_nonfinite && e.phase != NonfinitePhase::kOptimizer) {
    return {
        "nonfinite_weight",
        absl::StrCat("the weights of ", where,
                     " were already non-finite before this step: resume from the last good "
                     "checkpoint and check what wrote them (a checkpoint load, memory errors)")};
  }
  if (e.input_nonfinite) {
    return {"bad_data",
            "the batch was already non-finite when it entered the model (before any operation "
            "ran): drop or repair the samples listed under \"samples\" and check the data "
            "pipeline"};
  }
  if (e.phase == NonfinitePhase::kForward && e.embedding_output) {
    return {"bad_data",
            "the step's input embeddings are non-finite with finite weights: drop or repair "
            "the samples listed under \"samples\" and check the data pipeline"};
  }
  if (e.fp16 && e.max_abs_activation > kFp16Max) {
    return {
        "fp16_overflow",
        absl::StrFormat("activations of %s reach %.3g, beyond fp16's 65504: train in bf16%s, "
                        "or keep %s in fp32",
                        where, e.max_abs_activation,
                        w.precision.empty() ? "" : absl::StrCat(" (", w.precision, ")"), where)};
  }
  if (e.lr_jump >= kLrJump) {
    return {"lr_too_high",
            absl::StrFormat("the learning rate jumped %.3gx at step %d: lower %s or lengthen %s "
                            "(check the LR schedule)",
                            e.lr_jump, e.lr_jump_step, w.lr, w.warmup)};
  }
  const double jump = GradNormJump(e.grad_norms);
  if (jump >= kGradNormJump) {
    return {"exploding_gradients",
            absl::StrFormat(
                "the gradient norm rose %.3gx over the recent median before this "
                "step: clip harder%s or lower %s",
                jump, w.grad_clip.empty() ? "" : absl::StrCat(" (lower ", w.grad_clip, ")"), w.lr)};
  }
  if (!e.fp16 && e.max_abs_activation >= kDivergedActivation) {
    return {"lr_too_high",
            absl::StrFormat("activations reached %.3g before turning non-finite, so the weights "
                            "diverged: lower %s (%.3g at this step) or clip harder%s",
                            e.max_abs_activation, w.lr, e.lr,
                            w.grad_clip.empty() ? "" : absl::StrCat(" (", w.grad_clip, ")"))};
  }
  if (e.phase == NonfinitePhase::kOptimizer) {
    return {"lr_too_high",
            absl::StrCat("finite gradients gave non-finite weights, so the update itself "
                         "overflowed: lower ",
                         w.lr, " (and check ", w.eps, " is not tiny)")};
  }
  if (e.phase == NonfinitePhase::kLoss) {
    return {"operator",
            absl::StrCat(w.output_finite,
                         " but the loss is not: check the targets (ids outside the vocabulary) "
                         "and the loss function")};
  }
  // "reproducibly" only when two replays said so: a step that was not replayed (the backward
  // is never replayed) must not be called reproducible in the same sentence.
  return {"operator",
          absl::StrCat("an operation in ", where, " turns finite ",
                       e.phase == NonfinitePhase::kBackward ? "gradients" : "input",
                       " into NaN/Inf on this batch",
                       e.replayed && e.reproducible ? ", reproducibly" : "",
                       ": inspect it (division, log, sqrt, softmax of an all -inf row); with "
                       "fp16, try bf16 or a larger initial loss scale")};
}

}  // namespace

NonfiniteVerdict ClassifyNonfinite(const NonfiniteEvidence& e, const NonfiniteWording& w) {
  ClassAndFix rule = ApplyRules(e, w);
  NonfiniteVerdict v;
  v.cls = std::move(rule.first);
  v.finding.severity = Severity::kError;
  v.finding.id = "nonfinite." + v.cls;
  v.finding.title = NonfiniteTitle(e);
  v.finding.evidence = NonfiniteEvidenceText(e);
  v.finding.fix = std::move(rule.second);
  v.finding.where = e.module;
  v.finding.rank = e.rank;
  return v;
}

}  // namespace trainscope::diagnose
