// Readers (every format, NaN spellings, last record of a step, bad records), the flat JSON
// scanner, and the classifier on synthetic curves with a known shape (the real-run goldens
// are in tests/golden/diagnose).
#include "trainscope/diagnose/diagnose.h"

#include <cmath>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "diagnose/flat_json.h"
#include "gtest/gtest.h"
#include "trainscope/core/fake_os.h"
#include "trainscope/diagnose/curve.h"
#include "trainscope/diagnose/series.h"

namespace trainscope::diagnose {
namespace {

TEST(FlatJson, ScansScalarsSkipsNestedAcceptsNaN) {
  std::string err;
  int n = 0;
  double loss = 0, inf = 0;
  bool ok = internal::ScanFlatObject(
      R"({"step": 3, "loss": NaN, "x": {"a": [1, "}"]}, "s": "q\"}", "g": -Infinity})", &err,
      [&](std::string_view k, const internal::FlatValue& v) {
        ++n;
        if (k == "loss") loss = v.number;
        if (k == "g") inf = v.number;
        if (k == "x") {
          EXPECT_EQ(v.kind, internal::FlatValue::kNested);
        }
        if (k == "s") {
          EXPECT_EQ(v.text, "q\\\"}");
        }
      });
  ASSERT_TRUE(ok) << err;
  EXPECT_EQ(n, 5);
  EXPECT_TRUE(std::isnan(loss));
  EXPECT_TRUE(std::isinf(inf) && inf < 0);
  for (const char* bad : {"", "[1]", "{\"a\":}", "{\"a\":1,}", "{\"a\":1} x", "{\"a\":nan}",
                          "{\"a\":\"x", "{\"a\":1e}"}) {
    EXPECT_FALSE(internal::ScanFlatObject(bad, &err, [](auto, const auto&) {})) << bad;
  }
  EXPECT_EQ(internal::QuoteNonFiniteTokens(R"({"a": NaN, "b": "NaN x", "c": -Infinity})"),
            R"({"a": "NaN", "b": "NaN x", "c": "-Infinity"})");
}

TEST(Readers, CanonicalNames) {
  EXPECT_EQ(CanonicalMetric("global_step"), "step");
  EXPECT_EQ(CanonicalMetric("Iteration"), "step");
  EXPECT_EQ(CanonicalMetric("lm loss"), "loss");
  EXPECT_EQ(CanonicalMetric("train/loss"), "loss");
  EXPECT_EQ(CanonicalMetric("eval_loss"), "val_loss");
  EXPECT_EQ(CanonicalMetric("valid-loss"), "val_loss");
  EXPECT_EQ(CanonicalMetric("learning_rate"), "lr");
  EXPECT_EQ(CanonicalMetric("grad_norm"), "grad_norm");
  EXPECT_EQ(CanonicalMetric("tokens_per_s"), "");
}

TEST(Readers, JsonlLastRecordOfAStepWinsAndBadLinesCounted) {
  std::string text =
      "{\"iteration\": 1, \"train_loss\": 5.0}\n"
      "not json\n"
      "{\"iteration\": 2, \"train_loss\": 4.0, \"eval_loss\": 4.5}\n"
      "{\"iteration\": 2, \"train_loss\": 3.5}\n"
      "{\"iteration\": 3, \"train_loss\": NaN}\n"
      "{\"eval_runtime\": 0.3}\n";
  absl::StatusOr<Series> s = ParseSeries("m.jsonl", FileKind::kJsonl, text);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->loss.size(), 3u);
  EXPECT_EQ(s->loss[1].value, 3.5);
  EXPECT_TRUE(std::isnan(s->loss[2].value));
  EXPECT_EQ(s->val_loss.size(), 1u);
  EXPECT_EQ(s->repeated_steps, 1);
  EXPECT_EQ(s->bad_records, 1);
  EXPECT_EQ(s->first_bad.rfind("line 2:", 0), 0u) << s->first_bad;
}

TEST(Readers, TrainscopeMetricsNullLossIsNonFinite) {
  std::string text =
      "{\"type\":\"header\",\"format\":\"trainscope.train_metrics\",\"version\":1,\"rank\":2}\n"
      "{\"type\":\"step\",\"step\":1,\"loss\":5.5,\"lr\":0.001,\"phases_ms\":{\"forward\":1}}\n"
      "{\"type\":\"layer_norms\",\"step\":1,\"layers\":[{\"name\":\"a\",\"weight_norm\":1}]}\n"
      "{\"type\":\"step\",\"step\":2,\"loss\":null,\"lr\":0.001}\n"
      "{\"type\":\"end\",\"reason\":\"error\",\"step\":2,\"rank\":2}\n";
  EXPECT_EQ(DetectKind("train/metrics.rank2.jsonl", text), FileKind::kTrainscopeMetrics);
  absl::StatusOr<Series> s = ParseSeries("x", FileKind::kTrainscopeMetrics, text);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->rank, 2);
  ASSERT_EQ(s->loss.size(), 2u);
  EXPECT_TRUE(std::isnan(s->loss[1].value));
  EXPECT_EQ(s->lr.size(), 2u);
  EXPECT_EQ(s->end_reason, "error");
}

// The trainer stops at a non-finite step with a "nonfinite" record instead of a step record:
// that step's loss is non-finite (the next step's when the optimizer phase made the weights
// non-finite after a finite loss).
TEST(Readers, TrainscopeNonfiniteRecordIsTheNonFiniteLoss) {
  auto text = [](const char* phase) {
    return absl::StrCat(
        "{\"type\":\"header\",\"format\":\"trainscope.train_metrics\",\"version\":1,\"rank\":0}\n"
        "{\"type\":\"step\",\"step\":1,\"loss\":5.5}\n"
        "{\"type\":\"step\",\"step\":2,\"loss\":5.1}\n"
        "{\"type\":\"nonfinite\",\"step\":3,\"rank\":0,\"phase\":\"",
        phase, "\",\"module\":\"blocks.0.fc\",\"class\":\"bad_data\"}\n",
        "{\"type\":\"end\",\"reason\":\"error\",\"step\":3,\"rank\":0}\n");
  };
  absl::StatusOr<Series> fwd = ParseSeries("x", FileKind::kTrainscopeMetrics, text("forward"));
  ASSERT_TRUE(fwd.ok()) << fwd.status();
  ASSERT_EQ(fwd->loss.size(), 3u);
  EXPECT_EQ(fwd->loss[2].step, 3);
  EXPECT_TRUE(std::isnan(fwd->loss[2].value));
  absl::StatusOr<Series> opt = ParseSeries("x", FileKind::kTrainscopeMetrics, text("optimizer"));
  ASSERT_TRUE(opt.ok()) << opt.status();
  ASSERT_EQ(opt->loss.size(), 3u);
  EXPECT_EQ(opt->loss[2].step, 4);
}

TEST(Readers, CsvAndTrainerState) {
  std::string csv = "Step,\"Train Loss\",val_loss,lr\n1,5.0,,0.1\n2,nan,4.0,0.1\n3,x,4,1\n";
  EXPECT_EQ(DetectKind("a.csv", csv), FileKind::kCsv);
  EXPECT_EQ(DetectKind("a.csv", "a,b\n1,2\n"), FileKind::kUnknown);
  absl::StatusOr<Series> s = ParseSeries("a.csv", FileKind::kCsv, csv);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->loss.size(), 2u);
  EXPECT_TRUE(std::isnan(s->loss[1].value));
  EXPECT_EQ(s->val_loss.size(), 1u);
  EXPECT_EQ(s->bad_records, 1);

  std::string hf = R"({"global_step": 3, "log_history": [
    {"epoch": 0.1, "grad_norm": 1.5, "learning_rate": 0.001, "loss": 5.1, "step": 1},
    {"epoch": 0.2, "eval_loss": 4.9, "eval_runtime": 0.1, "step": 1},
    {"epoch": 0.3, "grad_norm": NaN, "learning_rate": 0.001, "loss": NaN, "step": 2},
    {"step": 2, "train_loss": 4.0, "train_runtime": 10.0}]})";
  EXPECT_EQ(DetectKind("trainer_state.json", hf), FileKind::kTrainerState);
  s = ParseSeries("trainer_state.json", FileKind::kTrainerState, hf);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->loss.size(), 2u);
  EXPECT_TRUE(std::isnan(s->loss[1].value));
  ASSERT_EQ(s->val_loss.size(), 1u);
  EXPECT_EQ(s->val_loss[0].value, 4.9);
  EXPECT_FALSE(ParseSeries("t.json", FileKind::kTrainerState, "{\"log_history\": 3}").ok());
  EXPECT_FALSE(ParseSeries("e.jsonl", FileKind::kJsonl, "{\"a\": 1}\n").ok());
}

// A noisy power-law decay, as a healthy run gives.
Series Healthy(unsigned seed, int n = 300) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> noise(0, 0.05);
  Series s;
  for (int i = 1; i <= n; ++i) {
    double v = 2.0 + 3.5 / std::sqrt(1.0 + i / 5.0);
    s.loss.push_back({i, v * (1 + noise(rng))});
    if (i % 20 == 0) s.val_loss.push_back({i, v * 1.05});
  }
  return s;
}

TEST(Curve, HealthyIsHealthyForManySeedsAndScales) {
  for (unsigned seed = 1; seed <= 20; ++seed) {
    Series s = Healthy(seed);
    CurveResult r = ClassifyCurve(s);
    EXPECT_EQ(r.cls, "healthy") << "seed " << seed << ": " << r.finding.title << " "
                                << EvidenceText(r);
    for (Point& p : s.loss) p.value *= 1000;  // scale-free
    for (Point& p : s.val_loss) p.value *= 1000;
    EXPECT_EQ(ClassifyCurve(s).cls, "healthy") << "seed " << seed << " x1000";
  }
}

TEST(Curve, LongRunsUseBinsAndStayHealthy) {
  Series s = Healthy(9, 50000);
  CurveResult r = ClassifyCurve(s);
  EXPECT_EQ(r.cls, "healthy") << r.finding.title << " " << EvidenceText(r);
  EXPECT_EQ(r.finding.id, "curve.healthy");
  EXPECT_EQ(r.finding.severity, Severity::kInfo);
  EXPECT_EQ(r.finding.evidence, EvidenceText(r));
  // A spike in a long run is still found at its own step.
  s.loss[30000].value *= 3;
  r = ClassifyCurve(s);
  EXPECT_EQ(r.cls, "loss_spikes") << EvidenceText(r);
  EXPECT_EQ(r.spike_steps, (std::vector<int64_t>{30001}));
}

TEST(Curve, EachClass) {
  Series nan = Healthy(1);
  for (Point& p : nan.loss)
    if (p.step >= 150) p.value = NAN;
  CurveResult r = ClassifyCurve(nan);
  EXPECT_EQ(r.cls, "nan_fixed_step");
  EXPECT_EQ(r.nan_step, 150);

  Series spikes = Healthy(2);
  spikes.loss[99].value *= 2;
  spikes.loss[199].value *= 2;
  r = ClassifyCurve(spikes);
  EXPECT_EQ(r.cls, "loss_spikes") << EvidenceText(r);
  EXPECT_EQ(r.spike_steps, (std::vector<int64_t>{100, 200}));

  Series flat = Healthy(3);
  for (Point& p : flat.loss) p.value = 5.5 + 0.05 * std::sin(p.step);
  EXPECT_EQ(ClassifyCurve(flat).cls, "not_learning");

  Series grow = Healthy(4);
  for (Point& p : grow.loss)
    if (p.step > 60) p.value *= std::pow(1.02, p.step - 60);
  r = ClassifyCurve(grow);
  EXPECT_EQ(r.cls, "diverging") << EvidenceText(r);
  EXPECT_FALSE(r.nan_after_divergence);
  for (Point& p : grow.loss)
    if (p.step > 280) p.value = NAN;
  r = ClassifyCurve(grow);
  EXPECT_EQ(r.cls, "diverging");
  EXPECT_TRUE(r.nan_after_divergence);

  Series jumpy = Healthy(5);
  for (Point& p : jumpy.loss)
    if (p.step > 3) p.value = 60 + 30 * std::sin(p.step * 1.7);
  EXPECT_EQ(ClassifyCurve(jumpy).cls, "unstable");

  Series over = Healthy(6);
  for (Point& p : over.val_loss)
    if (p.step > 100) p.value += 0.01 * (p.step - 100);
  r = ClassifyCurve(over);
  EXPECT_EQ(r.cls, "overfitting") << EvidenceText(r);
  EXPECT_NEAR(static_cast<double>(r.first_bad_step), 100, 20);  // the robust minimum

  Series stall = Healthy(7);
  for (Point& p : stall.loss) {
    double v = p.step <= 60 ? 5.5 - 0.04 * p.step : 3.1;
    p.value = v * (1 + 0.01 * std::sin(p.step * 2.3));
  }
  r = ClassifyCurve(stall);
  EXPECT_EQ(r.cls, "plateau") << EvidenceText(r);
}

// An LR series: peak 1e-3 after a 10-step warm-up, then `decay(step)` x peak.
template <typename F>
void SetLr(Series* s, F decay) {
  s->lr.clear();
  for (const Point& p : s->loss)
    s->lr.push_back({p.step, 1e-3 * (p.step <= 10 ? p.step / 10.0 : decay(p.step))});
}

TEST(Curve, ScheduleThatEndsEarlyIsAPlateauAtTheLrFall) {
  for (unsigned seed = 1; seed <= 10; ++seed) {
    Series s = Healthy(seed);
    // The LR decays linearly to 0 at step 150 of 300; the loss follows the healthy curve
    // while the LR is high, then stops where the LR reached ~0.
    SetLr(&s, [](int64_t t) { return std::max(0.0, (150.0 - t) / 140); });
    std::mt19937 rng(100 + seed);
    std::normal_distribution<double> noise(0, 0.05);
    double frozen = 2.0 + 3.5 / std::sqrt(1.0 + 140 / 5.0);
    for (Point& p : s.loss)
      if (p.step > 140) p.value = frozen * (1 + noise(rng));
    CurveResult r = ClassifyCurve(s);
    ASSERT_EQ(r.cls, "plateau") << "seed " << seed << ": " << EvidenceText(r);
    EXPECT_EQ(r.first_bad_step, 144);  // 1e-3 x 6/140 < 5% of the peak from step 144 on
    EXPECT_NE(EvidenceText(r).find("lr_fall_step 144, lr_final 0"), std::string::npos);
    EXPECT_NE(r.finding.title.find("fell below 5% of its peak (0.001 at step 10 -> 0 at the end)"),
              std::string::npos)
        << r.finding.title;
  }
}

TEST(Curve, ScheduleThatEndsEarlyInALongRunUsesBins) {
  // 50,000 steps (25 values a trend point): the loss falls linearly while the LR decays to 0
  // at step 25,000, then stays where it was.
  Series s;
  std::mt19937 rng(5);
  std::normal_distribution<double> noise(0, 0.05);
  for (int i = 1; i <= 50000; ++i)
    s.loss.push_back({i, (5 - 3 * std::min(i, 24000) / 24000.0) * (1 + noise(rng))});
  SetLr(&s, [](int64_t t) { return std::max(0.0, (25000.0 - t) / 24990); });
  CurveResult r = ClassifyCurve(s);
  ASSERT_EQ(r.cls, "plateau") << EvidenceText(r);
  EXPECT_EQ(r.first_bad_step, 23751);  // (25000 - t) / 24990 < 5% from step 23751 on
  EXPECT_NE(EvidenceText(r).find("bin 25"), std::string::npos) << EvidenceText(r);
}

TEST(Curve, ConvergedBeforeTheDecayOrFullLengthSchedulesAreNoPlateau) {
  for (unsigned seed = 1; seed <= 10; ++seed) {
    // Converged by step ~100 (exp decay), then the LR drops 100x at step 150.
    Series converged = Healthy(seed);
    std::mt19937 rng(200 + seed);
    std::normal_distribution<double> noise(0, 0.02);
    for (Point& p : converged.loss)
      p.value = (2.0 + 3.5 * std::exp(-p.step / 20.0)) * (1 + noise(rng));
    SetLr(&converged, [](int64_t t) { return t < 150 ? 1.0 : 0.01; });
    CurveResult r = ClassifyCurve(converged);
    EXPECT_EQ(r.cls, "healthy") << "seed " << seed << ": " << EvidenceText(r);
    // A cosine to 10% of the peak, and a cosine to 0, each over the whole run.
    Series cosine = Healthy(seed);
    for (double floor : {0.1, 0.0}) {
      SetLr(&cosine, [floor](int64_t t) {
        return floor + (1 - floor) * 0.5 * (1 + std::cos(M_PI * (t - 10) / 290.0));
      });
      r = ClassifyCurve(cosine);
      EXPECT_EQ(r.cls, "healthy") << "seed " << seed << " floor " << floor << ": "
                                  << EvidenceText(r);
    }
  }
}

TEST(Curve, ConsecutiveSpikesListEveryStep) {
  Series s = Healthy(2);
  s.loss[99].value *= 2;  // steps 100 and 101: two bad batches in a row
  s.loss[100].value *= 2;
  s.loss[199].value *= 2;
  CurveResult r = ClassifyCurve(s);
  EXPECT_EQ(r.cls, "loss_spikes") << EvidenceText(r);
  EXPECT_EQ(r.spike_steps, (std::vector<int64_t>{100, 101, 200}));
  EXPECT_NE(EvidenceText(r).find("spikes 3, spike_steps [100, 101, 200]"), std::string::npos)
      << EvidenceText(r);
  EXPECT_NE(r.finding.title.find("at step(s) 100, 101, 200"), std::string::npos) << r.finding.title;

  // One bad batch whose after-effect fades (the next step under half its excess): one step.
  Series fade = Healthy(2);
  fade.loss[99].value *= 2;
  fade.loss[100].value *= 1.4;
  EXPECT_EQ(ClassifyCurve(fade).spike_steps, (std::vector<int64_t>{100}));

  // Six high steps in a row are no isolated spike (more than 5 consecutive steps).
  Series shelf = Healthy(2);
  for (int i = 99; i < 105; ++i) shelf.loss[i].value *= 2;
  EXPECT_TRUE(ClassifyCurve(shelf).spike_steps.empty());
}

// Diagnose walks and reads through Options::os: a run directory that exists only in a FakeOs
// (metrics, a data scan, an incomplete checkpoint) gives the findings it gives on disk.
TEST(Diagnose, RunDirectoryOnAFakeOs) {
  FakeOs os;
  os.AddFile("/run/checkpoints/step-5/manifest.json", "{}");
  os.AddFile("/run/checkpoints/step-10/model.safetensors", "x");
  os.AddFile("/run/data/scan.json",
             R"({"format": "trainscope.data.scan", "version": 1, "docs": 100,
                 "exact_duplicate_ratio": 0.3, "near_duplicate_ratio": 0.3,
                 "near_dup": {"enabled": true}, "noise": {"enabled": true, "flagged_docs": 0}})");
  std::string csv = "step,loss,val_loss\n";
  for (int i = 1; i <= 200; ++i) {
    absl::StrAppend(&csv, i, ",", 3.0 / std::sqrt(1.0 + i / 5.0) + 0.01 * std::sin(i * 1.3), ",");
    if (i % 10 == 0) absl::StrAppend(&csv, i <= 60 ? 2.0 - 0.005 * i : 1.7 + 0.004 * (i - 60));
    csv += "\n";
  }
  os.AddFile("/run/metrics.csv", csv);
  Options o;
  o.os = &os;
  absl::StatusOr<Report> rep = Diagnose({"/run"}, o);
  ASSERT_TRUE(rep.ok()) << rep.status();
  std::vector<std::string> ids;
  for (const Finding& f : rep->findings) ids.push_back(f.id);
  EXPECT_EQ(ids, (std::vector<std::string>{"data.duplicates", "curve.overfitting",
                                           "framework.checkpoint_incomplete"}));
  ASSERT_EQ(rep->runs.size(), 1u);
  EXPECT_EQ(rep->runs[0].path, "/run/metrics.csv");
  EXPECT_EQ(Diagnose({"/nope"}, o).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace trainscope::diagnose
