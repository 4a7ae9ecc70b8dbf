// The loss-curve classifier (curve.h). Robust statistics only: a running median smooths the
// curve, the median absolute deviation (MAD) of the residuals is the noise, medians of the
// first and last windows are the start and end levels, and a Spearman rank correlation tells
// a sustained rise from oscillation. Every threshold is a ratio to the start level, to the
// drop, or to the noise (docs/metrics.md "Loss-curve classes").
#include "trainscope/diagnose/curve.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "trainscope/core/stats.h"

namespace trainscope::diagnose {
namespace {

// The median, NaN for no values (a curve statistic of nothing is undefined, not 0).
double MedianOrNan(std::vector<double> v) {
  return v.empty() ? NAN : trainscope::Median(std::move(v));
}

double MedianOf(const std::vector<double>& x, size_t begin, size_t end) {
  return MedianOrNan(std::vector<double>(x.begin() + begin, x.begin() + end));
}

// Centered running median of odd width w (shrinking at the ends).
std::vector<double> RunningMedian(const std::vector<double>& x, size_t w) {
  size_t n = x.size(), h = w / 2;
  std::vector<double> out(n), buf;
  for (size_t i = 0; i < n; ++i) {
    size_t lo = i >= h ? i - h : 0, hi = std::min(n, i + h + 1);
    buf.assign(x.begin() + lo, x.begin() + hi);
    size_t mid = buf.size() / 2;
    std::nth_element(buf.begin(), buf.begin() + mid, buf.end());
    out[i] = buf[mid];
  }
  return out;
}

// Spearman rank correlation of x[begin..end) with its index (ties ranked by position).
double TrendRho(const std::vector<double>& x, size_t begin, size_t end) {
  size_t m = end - begin;
  if (m < 3) return 0;
  std::vector<size_t> order(m);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return x[begin + a] < x[begin + b]; });
  std::vector<double> rank(m);
  for (size_t r = 0; r < m; ++r) rank[order[r]] = static_cast<double>(r);
  double d2 = 0;
  for (size_t i = 0; i < m; ++i) d2 += (rank[i] - i) * (rank[i] - i);
  double md = static_cast<double>(m);
  return 1 - 6 * d2 / (md * (md * md - 1));
}

struct Stats {
  size_t n = 0, w = 0, k = 0;
  std::vector<double> s;  // smoothed
  double first = 0;       // median of the first 3 values: the level before any explosion
  double start = 0, end = 0, min = 0, max = 0, scale = 1;
  size_t imin = 0;
};

Stats Describe(const std::vector<double>& x) {
  Stats st;
  st.n = x.size();
  st.w = std::clamp<size_t>(st.n / 20, 5, 51) | 1;
  st.k = std::max<size_t>(3, std::min<size_t>(st.n / 20, st.n));
  st.s = RunningMedian(x, st.w);
  st.start = MedianOf(x, 0, std::min(st.k, st.n));
  st.first = MedianOf(x, 0, std::min<size_t>(3, st.n));
  st.end = MedianOf(x, st.n - std::min(st.k, st.n), st.n);
  st.imin = static_cast<size_t>(std::min_element(st.s.begin(), st.s.end()) - st.s.begin());
  st.min = st.s[st.imin];
  st.max = *std::max_element(st.s.begin(), st.s.end());
  st.scale = std::max(std::fabs(st.start), 1e-12);
  return st;
}

// Long runs: the trend classes look at bin medians (at most kTrendPoints bins), so that the
// smoothing window spans a fixed share of the run whatever its length, at O(n) cost.
constexpr size_t kTrendPoints = 2000;

struct Trend {
  std::vector<double> x;
  std::vector<int64_t> steps;  // the step of each trend point (a bin's middle value)
  size_t bin = 1;              // raw values per trend point
  size_t raw_points = 0;       // the values binned
};

Trend MakeTrend(const std::vector<double>& x, const std::vector<int64_t>& steps) {
  Trend t;
  t.raw_points = x.size();
  if (x.size() <= 2 * kTrendPoints) {
    t.x = x;
    t.steps = steps;
    return t;
  }
  t.bin = (x.size() + kTrendPoints - 1) / kTrendPoints;
  for (size_t b = 0; b < x.size(); b += t.bin) {
    size_t e = std::min(x.size(), b + t.bin);
    t.x.push_back(MedianOf(x, b, e));
    t.steps.push_back(steps[b + (e - b) / 2]);
  }
  return t;
}

// The noise of single values: 1.4826 x MAD of the first differences / sqrt(2) (a trend moves
// little from one value to the next; an isolated spike moves two differences only).
double DiffSigma(const std::vector<double>& x) {
  if (x.size() < 3) return 0;
  std::vector<double> d(x.size() - 1);
  for (size_t i = 1; i < x.size(); ++i) d[i - 1] = x[i] - x[i - 1];
  double med = MedianOrNan(d);
  for (double& v : d) v = std::fabs(v - med);
  return 1.4826 * MedianOrNan(d) / std::sqrt(2.0);
}

// The median of the `w` values centered on i (shrinking at the ends).
double LocalMedian(const std::vector<double>& x, size_t i, size_t w) {
  size_t h = w / 2, lo = i >= h ? i - h : 0, hi = std::min(x.size(), i + h + 1);
  return MedianOf(x, lo, hi);
}

void Ev(CurveResult* r, const char* name, double v) { r->evidence.emplace_back(name, v); }

// A sustained rise after the minimum: large enough, and ranked increasing.
// A curve that exploded before its minimum is unstable, not diverging.
bool Rising(const Stats& st, const CurveOptions& o, double* rho) {
  *rho = 0;
  if (st.n - st.imin < 2 * st.w) return false;
  double explode = st.first + (o.explode_ratio - 1) * std::max(std::fabs(st.first), 1e-12);
  if (std::any_of(st.s.begin(), st.s.begin() + st.imin, [&](double v) { return v > explode; }))
    return false;
  *rho = TrendRho(st.s, st.imin, st.n);
  return st.end - st.min > o.diverge_rise * st.scale && *rho > 0.8;
}

constexpr char kFixNotLearning[] =
    "raise the learning rate (it may be orders of magnitude too low); check that the parameters "
    "are trainable (requires_grad, the optimizer's parameter groups), that fp16 gradients do not "
    "underflow (a larger initial loss scale), and that labels line up with the inputs (shifted "
    "by one token)";
constexpr char kFixPlateau[] =
    "the loss stopped falling while it was still dropping fast: check the learning-rate schedule "
    "(a decay or drop far too early), parameters frozen part-way, or a data stream that ran out "
    "and repeats; resume from a checkpoint before the stall with the intended schedule";
constexpr char kFixPlateauSchedule[] =
    "the learning-rate schedule ended while the loss was still falling: make the decay span the "
    "whole run (the scheduler's total steps = the run's steps; check warm-up and decay lengths "
    "and the floor, min_lr about 10% of the peak); resume from a checkpoint before the LR fell "
    "with the intended schedule";
constexpr char kFixDiverging[] =
    "lower the learning rate (2-10x), add or lengthen the warm-up and clip gradients (max_norm "
    "near the 90th percentile of unclipped norms); restart from a checkpoint before the first "
    "bad step";
constexpr char kFixUnstable[] =
    "the learning rate is too high for this model and batch: lower it 3-10x, add warm-up and "
    "gradient clipping, then restart";
constexpr char kFixSpikes[] =
    "isolated bad batches: inspect the batches of the spike steps (trainscope data scan for "
    "noise and duplicates); restart from a checkpoint about 100 steps before a spike and skip "
    "those batches; gradient clipping limits the damage";
constexpr char kFixOverfitting[] =
    "first suspect duplicate-heavy data (run trainscope data scan: exact and near duplicates); "
    "then more data, regularisation (dropout, weight decay) or stopping at the best validation "
    "step";
constexpr char kFixNan[] =
    "a non-finite loss with no warning sign before it points at the data or one operation: "
    "inspect the batch of that step (trainscope data scan), replay the step with non-finite "
    "checks (trainscope train localises the module), look for log/div/sqrt of zero and fp16 "
    "overflow";

std::string Num(double v) { return absl::StrFormat("%.4g", v); }

// Theil-Sen slope of x[begin..end) against `steps` (loss per step): the median of the pairwise
// slopes, robust to the spikes a least-squares fit would follow. Long segments are strided to
// at most kSlopePoints points (O(kSlopePoints^2)).
constexpr size_t kSlopePoints = 256;

double RobustSlope(const std::vector<double>& x, const std::vector<int64_t>& steps, size_t begin,
                   size_t end) {
  size_t stride = std::max<size_t>(1, (end - begin + kSlopePoints - 1) / kSlopePoints);
  std::vector<size_t> idx;
  for (size_t i = begin; i < end; i += stride) idx.push_back(i);
  std::vector<double> slopes;
  for (size_t a = 0; a < idx.size(); ++a)
    for (size_t b = a + 1; b < idx.size(); ++b) {
      double dt = static_cast<double>(steps[idx[b]] - steps[idx[a]]);
      if (dt > 0) slopes.push_back((x[idx[b]] - x[idx[a]]) / dt);
    }
  return MedianOrNan(std::move(slopes));
}

// The standard error of a least-squares slope over the steps of [begin, end) for values with
// independent noise `sigma`: sigma / sqrt(sum (t - mean t)^2).
double SlopeError(const std::vector<int64_t>& steps, size_t begin, size_t end, double sigma) {
  double mean = 0, ss = 0;
  for (size_t i = begin; i < end; ++i) mean += static_cast<double>(steps[i]);
  mean /= static_cast<double>(end - begin);
  for (size_t i = begin; i < end; ++i) ss += std::pow(static_cast<double>(steps[i]) - mean, 2);
  return ss > 0 ? sigma / std::sqrt(ss) : INFINITY;
}

// A plateau the learning-rate schedule causes (docs/metrics.md "Loss-curve classes"): the LR
// falls below lr_fall_share of its peak and stays there for at least lr_tail_share of the run,
// while the loss, which was still falling just before the LR fell under half its peak
// (significantly: >= 3 standard errors; and a lot: >= plateau_pre_share of the total drop over
// that segment), then falls at less than plateau_post_share of that rate.
// A converged run (no significant fall before the decay), a schedule that ends with the run
// and a cosine to the usual floor of 10% never qualify. On a verdict fills r and returns true.
bool SchedulePlateau(const Series& series, const Trend& trend, const Stats& st, double sigma,
                     const CurveOptions& o, CurveResult* r) {
  std::vector<Point> lr;
  for (const Point& p : series.lr)
    if (std::isfinite(p.value)) lr.push_back(p);
  if (lr.size() < static_cast<size_t>(o.min_points)) return false;
  size_t ipeak = 0;
  for (size_t i = 1; i < lr.size(); ++i)
    if (lr[i].value > lr[ipeak].value) ipeak = i;
  double peak = lr[ipeak].value;
  if (!(peak > 0)) return false;
  // The fall: the first step after which the LR stays under lr_fall_share x peak.
  size_t ifall = lr.size();
  while (ifall > ipeak + 1 && lr[ifall - 1].value < o.lr_fall_share * peak) --ifall;
  if (ifall == lr.size()) return false;
  size_t ihalf = ipeak;
  while (ihalf < ifall && lr[ihalf].value > 0.5 * peak) ++ihalf;
  // Trend indices of those steps.
  auto at = [&](int64_t s) {
    return static_cast<size_t>(std::lower_bound(trend.steps.begin(), trend.steps.end(), s) -
                               trend.steps.begin());
  };
  const size_t n = st.n, tfall = at(lr[ifall].step), thalf = at(lr[ihalf].step);
  size_t tail_min = std::max<size_t>(2 * st.w, static_cast<size_t>(o.lr_tail_share * n));
  if (tfall >= n || n - tfall < tail_min) return false;
  // The rate it had: over the fifth of the run before the LR fell under half its peak (after
  // the warm-up, whose fast early fall would exaggerate it).
  size_t pre_len = std::max<size_t>(2 * st.w, n / 5);
  size_t pre_begin = std::max(thalf > pre_len ? thalf - pre_len : 0, at(lr[ipeak].step));
  if (thalf < pre_begin + st.w) return false;
  double pre = RobustSlope(trend.x, trend.steps, pre_begin, thalf);
  double post = RobustSlope(trend.x, trend.steps, tfall, n);
  // A trend point is the median of `bin` values: its noise is about sqrt(pi / 2) x sigma /
  // sqrt(bin) (a median's efficiency); a raw value's is sigma.
  double point_sigma =
      trend.bin > 1 ? 1.2533 * sigma / std::sqrt(static_cast<double>(trend.bin)) : sigma;
  double se = SlopeError(trend.steps, pre_begin, thalf, point_sigma);
  // Falling, significantly (3 standard errors) and a lot (the generic rule's share of the
  // total drop over the segment), then at less than plateau_post_share of that rate.
  double total = st.start - std::min(st.end, st.min);
  double pre_fall = -pre * static_cast<double>(trend.steps[thalf - 1] - trend.steps[pre_begin]);
  if (!(pre < -3 * se) || !(pre_fall >= o.plateau_pre_share * total) ||
      !(post > o.plateau_post_share * pre))
    return false;
  double final_lr = lr.back().value;
  Ev(r, "lr_peak", peak);
  Ev(r, "lr_peak_step", static_cast<double>(lr[ipeak].step));
  Ev(r, "lr_fall_step", static_cast<double>(lr[ifall].step));
  Ev(r, "lr_final", final_lr);
  Ev(r, "lr_final_share", final_lr / peak);
  Ev(r, "loss_slope_before", pre);
  Ev(r, "loss_slope_before_se", se);
  Ev(r, "fall_before_share", pre_fall / total);
  Ev(r, "loss_slope_after", post);
  Ev(r, "slope_after_share", post / pre);
  r->cls = "plateau";
  r->first_bad_step = lr[ifall].step;
  r->finding.severity = Severity::kWarning;
  std::string by = final_lr > 0 ? absl::StrCat(", ", Num(peak / final_lr), "x lower") : "";
  r->finding.title = absl::StrCat(
      "the loss stalls from step ", r->first_bad_step, ", where the learning rate fell below ",
      Num(100 * o.lr_fall_share), "% of its peak (", Num(peak), " at step ", lr[ipeak].step, " -> ",
      Num(final_lr), " at the end", by, "): the loss fell ", Num(-pre),
      " per step before the LR halved and ", Num(-post), " per step after");
  r->finding.fix = kFixPlateauSchedule;
  return true;
}

// Loss spikes: a step that jumps far above the previous value and the local median (width
// kSpikeWindow) starts a spike; the steps right after it that stay as far above their own
// local median, at least half the first step's excess (a second bad batch, not the first
// one's fading after-effect), up to kMaxSpikeRun steps, belong to it (still that high after
// them: a shelf, no spike). The spike counts when at least 2 of the 3 values after its last
// step are back within 3 sigma of their median (it recovers). Every step of every spike is
// returned. Candidates are O(n) over the run.
std::vector<int64_t> FindSpikes(const std::vector<double>& x, const std::vector<int64_t>& xs,
                                double sigma, const CurveOptions& o) {
  constexpr size_t kSpikeWindow = 21, kMaxSpikeRun = 5;
  std::vector<int64_t> out;
  auto excess = [&](size_t i) {
    double local = LocalMedian(x, i, kSpikeWindow);
    double e = x[i] - local;
    return e > o.spike_sigmas * sigma && e > o.spike_min_rel * std::fabs(local) ? e : 0.0;
  };
  for (size_t i = kSpikeWindow / 2; i < x.size(); ++i) {
    if (x[i] - x[i - 1] <= o.spike_jump_sigmas * sigma) continue;
    double first = excess(i);
    if (first <= 0) continue;
    size_t last = i;
    while (last + 1 < x.size() && last + 1 - i < kMaxSpikeRun && excess(last + 1) >= 0.5 * first)
      ++last;
    // Still as high after kMaxSpikeRun steps: a shelf, not bad batches.
    bool shelf = last + 1 < x.size() && excess(last + 1) >= 0.5 * first;
    size_t back = 0, seen = 0;
    for (size_t j = last + 1; j < x.size() && j <= last + 3; ++j, ++seen)
      back += x[j] - LocalMedian(x, j, kSpikeWindow) < 3 * sigma;
    if (!shelf && back >= std::min<size_t>(2, seen)) {
      for (size_t j = i; j <= last; ++j) out.push_back(xs[j]);
    }
    i = last;
  }
  return out;
}

// A non-finite loss at nan_step (trend: the finite values before it): diverging with
// nan_after_divergence when a warning sign came first (a sustained rise, the level far above
// the first values, or grad norm blown up 10x), else nan_fixed_step.
void ClassifyNonFinite(const Series& series, const Trend& trend, int64_t nan_step,
                       const CurveOptions& o, CurveResult* r) {
  auto ts = [&](size_t i) { return trend.steps[std::min(i, trend.steps.size() - 1)]; };
  const size_t finite = trend.raw_points;
  r->nan_step = nan_step;
  Ev(r, "nan_step", static_cast<double>(r->nan_step));
  Ev(r, "finite_points_before", static_cast<double>(finite));
  double gn_ratio = 0;
  {
    // Grad norm before the NaN vs the run's median grad norm: a blow-up is a warning sign.
    std::vector<double> g, last;
    for (const Point& p : series.grad_norm) {
      if (p.step >= r->nan_step || !std::isfinite(p.value)) continue;
      g.push_back(p.value);
    }
    if (g.size() >= 10) {
      size_t t = std::max<size_t>(3, g.size() / 20);
      double base = MedianOf(g, 0, g.size() - t), tail = MedianOf(g, g.size() - t, g.size());
      if (base > 0) gn_ratio = tail / base;
      Ev(r, "grad_norm_tail_over_median", gn_ratio);
    }
  }
  double rho = 0;
  bool rising = false;
  if (finite >= 10) {
    Stats st = Describe(trend.x);
    rising = Rising(st, o, &rho) || st.end > st.first + (o.explode_ratio - 1) * st.scale;
    Ev(r, "window", static_cast<double>(st.w));
    Ev(r, "start", st.start);
    Ev(r, "min", st.min);
    Ev(r, "end_before_nan", st.end);
    Ev(r, "rise_rho", rho);
    if (rising) r->first_bad_step = ts(st.imin);
  }
  if (rising || gn_ratio > 10) {
    r->cls = "diverging";
    r->nan_after_divergence = true;
    if (r->first_bad_step < 0) r->first_bad_step = r->nan_step;
    r->finding.severity = Severity::kError;
    r->finding.title = absl::StrCat("the loss grew from step ", r->first_bad_step,
                                    " and turned non-finite at step ", r->nan_step);
    r->finding.fix = kFixDiverging;
  } else {
    r->cls = "nan_fixed_step";
    r->first_bad_step = r->nan_step;
    r->finding.severity = Severity::kError;
    r->finding.title = absl::StrCat("the loss turned non-finite at step ", r->nan_step,
                                    " with no warning sign before it");
    r->finding.fix = kFixNan;
  }
}

// Validation loss rising from its minimum while the training loss keeps falling.
bool Overfitting(const Series& series, const Trend& trend, const Stats& st, const CurveOptions& o,
                 CurveResult* r) {
  auto ts = [&](size_t i) { return trend.steps[std::min(i, trend.steps.size() - 1)]; };
  const size_t n = st.n;
  std::vector<Point> val;
  for (const Point& p : series.val_loss)
    if (std::isfinite(p.value)) val.push_back(p);
  if (!series.loss.empty() && val.size() >= 5) {
    // The minimum of a 3-point running median: one lucky evaluation is not the minimum.
    std::vector<double> vv;
    for (const Point& p : val) vv.push_back(p.value);
    std::vector<double> vs = RunningMedian(vv, 3);
    size_t j = 0;
    for (size_t i = 1; i < val.size(); ++i)
      if (vs[i] < vs[j]) j = i;
    size_t after = val.size() - 1 - j;
    if (after >= 2) {
      std::vector<double> tail;
      for (size_t i = val.size() - std::min<size_t>(3, after); i < val.size(); ++i)
        tail.push_back(val[i].value);
      double vend = MedianOrNan(tail), vmin = vs[j];
      double vscale = std::max(std::fabs(vmin), 1e-12);
      // Training level at the validation minimum vs at the end.
      size_t ti = 0;
      while (ti + 1 < n && ts(ti) < val[j].step) ++ti;
      double train_fall = (st.s[ti] - st.end) / st.scale;
      Ev(r, "val_min", vmin);
      Ev(r, "val_min_step", static_cast<double>(val[j].step));
      Ev(r, "val_end", vend);
      Ev(r, "val_rise_share", (vend - vmin) / vscale);
      Ev(r, "train_fall_share_since", train_fall);
      if ((vend - vmin) / vscale > o.overfit_rise && train_fall > o.overfit_train_fall) {
        r->cls = "overfitting";
        r->first_bad_step = val[j].step;
        r->finding.severity = Severity::kWarning;
        r->finding.title =
            absl::StrCat("validation loss rises from ", Num(vmin), " at step ", val[j].step, " to ",
                         Num(vend), " while the training loss keeps falling");
        r->finding.fix = kFixOverfitting;
        return true;
      }
    }
  }
  return false;
}

// A fast drop that stops dead well above where it was heading, whatever the cause.
bool StallPlateau(const Trend& trend, const Stats& st, const CurveOptions& o, CurveResult* r) {
  auto ts = [&](size_t i) { return trend.steps[std::min(i, trend.steps.size() - 1)]; };
  const size_t n = st.n;
  double total = st.start - std::min(st.end, st.min);
  for (size_t k = st.w; total > 0 && k * 10 <= n * 6 && n - k >= 2 * st.w; ++k) {
    double pre = st.s[k - st.w] - st.s[k];
    double post = st.s[k] - st.end;
    if (pre >= o.plateau_pre_share * total && post < o.plateau_post_share * pre) {
      Ev(r, "stall_step", static_cast<double>(ts(k)));
      Ev(r, "drop_before_share", pre / total);
      Ev(r, "drop_after_share", post / total);
      r->cls = "plateau";
      r->first_bad_step = ts(k);
      r->finding.severity = Severity::kWarning;
      r->finding.title = absl::StrCat("the loss stalls at ", Num(st.s[k]), " from step ", ts(k),
                                      " after falling ", Num(pre), " in the ", ts(k) - ts(k - st.w),
                                      " steps before; it then moves only ", Num(post));
      r->finding.fix = kFixPlateau;
      return true;
    }
  }
  return false;
}

// The loss_spikes verdict when FindSpikes finds any.
bool SpikeVerdict(const std::vector<double>& x, const std::vector<int64_t>& xs, double sigma,
                  const CurveOptions& o, CurveResult* r) {
  r->spike_steps = FindSpikes(x, xs, sigma, o);
  if (r->spike_steps.empty()) return false;
  Ev(r, "spikes", static_cast<double>(r->spike_steps.size()));
  r->cls = "loss_spikes";
  r->first_bad_step = r->spike_steps[0];
  r->finding.severity = Severity::kWarning;
  std::vector<std::string> s;
  for (size_t i = 0; i < r->spike_steps.size() && i < 8; ++i)
    s.push_back(absl::StrCat(r->spike_steps[i]));
  if (r->spike_steps.size() > 8) s.push_back("...");
  r->finding.title = absl::StrCat(r->spike_steps.size(), " loss spike(s) that recover, at step(s) ",
                                  absl::StrJoin(s, ", "));
  r->finding.fix = kFixSpikes;
  return true;
}

}  // namespace

std::string EvidenceText(const CurveResult& r) {
  std::vector<std::string> parts;
  for (const auto& [k, v] : r.evidence) parts.push_back(absl::StrCat(k, " ", Num(v)));
  if (!r.spike_steps.empty())
    parts.push_back(absl::StrCat("spike_steps [", absl::StrJoin(r.spike_steps, ", "), "]"));
  return absl::StrJoin(parts, ", ");
}

namespace {

// The class and its numbers, title, fix and severity (ClassifyCurve adds the rest).
CurveResult Classify(const Series& series, const CurveOptions& o) {
  CurveResult r;
  const std::vector<Point>& pts = series.loss.empty() ? series.val_loss : series.loss;
  size_t i_nan = pts.size();
  for (size_t i = 0; i < pts.size(); ++i) {
    if (!std::isfinite(pts[i].value)) {
      i_nan = i;
      break;
    }
  }
  std::vector<double> x;
  std::vector<int64_t> xs;
  x.reserve(i_nan);
  xs.reserve(i_nan);
  for (size_t i = 0; i < i_nan; ++i) {
    x.push_back(pts[i].value);
    xs.push_back(pts[i].step);
  }
  auto step = [&](size_t i) { return pts[std::min(i, pts.size() - 1)].step; };
  Trend trend = MakeTrend(x, xs);
  // The step of trend point i.
  auto ts = [&](size_t i) { return trend.steps[std::min(i, trend.steps.size() - 1)]; };

  // --- a non-finite loss: after a rise (diverging), or out of the blue (fixed step) ---
  if (i_nan < pts.size()) {
    ClassifyNonFinite(series, trend, pts[i_nan].step, o, &r);
    return r;
  }

  if (x.size() < static_cast<size_t>(o.min_points)) {
    r.cls = "too_short";
    r.finding.title = absl::StrCat("only ", x.size(), " loss values: too few to judge the curve");
    Ev(&r, "points", static_cast<double>(x.size()));
    return r;
  }

  Stats st = Describe(trend.x);
  const double sigma = std::max(DiffSigma(x), 1e-3 * st.scale);
  Ev(&r, "points", static_cast<double>(x.size()));
  if (trend.bin > 1) Ev(&r, "bin", static_cast<double>(trend.bin));
  Ev(&r, "window", static_cast<double>(st.w));
  Ev(&r, "start", st.start);
  Ev(&r, "end", st.end);
  Ev(&r, "min", st.min);
  Ev(&r, "noise_sigma", sigma);
  Ev(&r, "drop_share", (st.start - st.end) / st.scale);

  // --- diverging: a sustained rise after the minimum ---
  double rho = 0;
  if (Rising(st, o, &rho)) {
    Ev(&r, "rise_rho", rho);
    Ev(&r, "rise_share", (st.end - st.min) / st.scale);
    r.cls = "diverging";
    r.first_bad_step = ts(st.imin);
    r.finding.severity = Severity::kError;
    r.finding.title = absl::StrCat("the loss grows from step ", r.first_bad_step, ": ", Num(st.min),
                                   " -> ", Num(st.end));
    r.finding.fix = kFixDiverging;
    return r;
  }

  // --- unstable: explodes far above the start level (and does not grow steadily) ---
  double explode = st.first + (o.explode_ratio - 1) * std::max(std::fabs(st.first), 1e-12);
  if (st.max > explode) {
    size_t first = 0;
    while (first < x.size() && x[first] <= explode) ++first;
    Ev(&r, "first", st.first);
    Ev(&r, "max_over_first", st.max / std::max(std::fabs(st.first), 1e-12));
    Ev(&r, "rise_rho", rho);
    r.cls = "unstable";
    r.first_bad_step = step(first);
    r.finding.severity = Severity::kError;
    r.finding.title =
        absl::StrCat("the loss explodes from step ", r.first_bad_step, " to ",
                     Num(st.max / st.scale), "x its start and oscillates (end ", Num(st.end), ")");
    r.finding.fix = kFixUnstable;
    return r;
  }

  // --- not_learning: flat from the start ---
  if (st.start - st.end < o.not_learning_drop * st.scale &&
      st.start - st.min < 2 * o.not_learning_drop * st.scale) {
    r.cls = "not_learning";
    r.first_bad_step = ts(0);
    r.finding.severity = Severity::kError;
    r.finding.title = absl::StrCat("the loss does not fall: ", Num(st.start), " -> ", Num(st.end),
                                   " over ", x.size(), " values");
    r.finding.fix = kFixNotLearning;
    return r;
  }

  // --- overfitting: validation rises from its minimum while training loss keeps falling ---
  if (Overfitting(series, trend, st, o, &r)) return r;

  // --- plateau: the LR schedule fell to ~0 while the loss was still falling ---
  if (SchedulePlateau(series, trend, st, sigma, o, &r)) return r;

  // --- plateau: a fast drop that stops dead well above where it was heading ---
  if (StallPlateau(trend, st, o, &r)) return r;

  // --- loss spikes: jumps far above the local median that recover (every step listed) ---
  if (SpikeVerdict(x, xs, sigma, o, &r)) return r;

  r.cls = "healthy";
  r.finding.severity = Severity::kInfo;
  r.finding.title = absl::StrCat("the loss curve looks healthy: ", Num(st.start), " -> ",
                                 Num(st.end), " over ", x.size(), " values");
  return r;
}

}  // namespace

CurveResult ClassifyCurve(const Series& series, const CurveOptions& o) {
  CurveResult r = Classify(series, o);
  r.finding.id = absl::StrCat("curve.", r.cls);
  r.finding.evidence = EvidenceText(r);
  return r;
}

}  // namespace trainscope::diagnose
