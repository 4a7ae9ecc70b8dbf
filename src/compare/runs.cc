// Two runs compared by their metrics: the loss curves against their own noise, then the
// per-layer norms (runs.h). The readers are diagnose's; this file only aligns and judges.
#include "trainscope/compare/runs.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "trainscope/core/formats.h"
#include "trainscope/core/paths.h"
#include "trainscope/core/run_dir.h"
#include "trainscope/core/table.h"
#include "trainscope/diagnose/series.h"

namespace trainscope::compare {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The metrics file of a run: `path` itself when a file, else the lowest rank's
// metrics.rank<R>.jsonl in path/train or path.
absl::StatusOr<std::string> MetricsFileOf(const std::string& path) {
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) return path;
  if (!fs::is_directory(path, ec)) {
    return absl::NotFoundError(absl::StrCat(path, ": no such file or directory"));
  }
  for (const std::string& dir : {run_dir::Join(path, run_dir::kTrain), path}) {
    std::string best;
    int best_rank = -1;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      const std::string name = e.path().filename().string();
      if (!run_dir::IsTrainMetricsName(name)) continue;
      const int rank = run_dir::RankFromFileName(name);
      if (rank < 0) continue;
      if (best_rank < 0 || rank < best_rank) best_rank = rank, best = e.path().string();
    }
    if (!best.empty()) return best;
  }
  return absl::NotFoundError(
      absl::StrCat(path,
                   ": no metrics.rank<R>.jsonl in it or in its train/ (give a run "
                   "directory or a metrics log)"));
}

// The loss's step-to-step scatter: 1.4826 x the median absolute first difference, over
// sqrt(2) (the difference of two independent draws). Robust to spikes; the trend adds little
// per step.
double NoiseOf(const std::vector<diagnose::Point>& loss) {
  std::vector<double> d;
  for (size_t i = 1; i < loss.size(); ++i) {
    if (std::isfinite(loss[i].value) && std::isfinite(loss[i - 1].value))
      d.push_back(std::fabs(loss[i].value - loss[i - 1].value));
  }
  if (d.size() < 4) return 0;
  std::nth_element(d.begin(), d.begin() + d.size() / 2, d.end());
  return 1.4826 * d[d.size() / 2] / std::sqrt(2.0);
}

struct Aligned {
  int64_t step;
  double a, b;
};

std::vector<Aligned> Align(const std::vector<diagnose::Point>& a,
                           const std::vector<diagnose::Point>& b) {
  std::vector<Aligned> out;
  size_t j = 0;
  for (const auto& p : a) {  // both sorted by step
    while (j < b.size() && b[j].step < p.step) ++j;
    if (j < b.size() && b[j].step == p.step) out.push_back({p.step, p.value, b[j].value});
  }
  return out;
}

// The median of the finite differences a - b over the common steps [i - kHalf, i + kHalf]:
// a lone spike on one side does not move it, an offset of the curves does.
constexpr int kHalf = 2;  // a 5-step window

bool MedianDiffAround(const std::vector<Aligned>& c, size_t i, double* median, double* scale,
                      int* n) {
  const size_t lo = i >= kHalf ? i - kHalf : 0, hi = std::min(c.size(), i + kHalf + 1);
  std::vector<double> d;
  *scale = 0;
  for (size_t k = lo; k < hi; ++k) {
    if (!std::isfinite(c[k].a) || !std::isfinite(c[k].b)) continue;
    d.push_back(c[k].a - c[k].b);
    *scale = std::max({*scale, std::fabs(c[k].a), std::fabs(c[k].b)});
  }
  *n = static_cast<int>(d.size());
  if (d.empty()) return false;
  std::nth_element(d.begin(), d.begin() + d.size() / 2, d.end());
  *median = d[d.size() / 2];
  return true;
}

// The curves part at the first common step where one is finite and the other not, or where
// the median of their differences over the 5 steps around it exceeds sigmas x the noise of
// such a median (1.2533 x the difference's noise over sqrt(n)), there and at the next
// sustain - 1 steps. Two runs fed the same batches share the batches' scatter, so this is
// conservative for them; a floor at float32's resolution keeps noiseless curves from calling
// rounding a divergence.
void JudgeLoss(const std::vector<Aligned>& common, const RunsOptions& o, RunsReport* r) {
  const double noise = std::sqrt(r->noise_a * r->noise_a + r->noise_b * r->noise_b);
  auto apart = [&](size_t i, double* thr) {
    double median, scale;
    int n;
    if (!MedianDiffAround(common, i, &median, &scale, &n)) return false;
    *thr = std::max(o.sigmas * 1.2533 * noise / std::sqrt(static_cast<double>(n)), 1e-6 * scale);
    return std::fabs(median) > *thr;
  };
  for (size_t i = 0; i < common.size(); ++i) {
    const Aligned& x = common[i];
    const bool fa = std::isfinite(x.a), fb = std::isfinite(x.b);
    double thr = 0;
    bool differs = false;
    std::string kind = "loss";
    if (fa != fb) {
      differs = true, kind = "nonfinite";
    } else if (fa && apart(i, &thr)) {
      differs = true;
      for (size_t k = i + 1; k < common.size() && k < i + static_cast<size_t>(o.sustain); ++k) {
        double t2;
        if (!apart(k, &t2)) differs = false;
      }
    }
    if (!differs) continue;
    // The window around i reaches kHalf steps ahead: the curves part at the first step in it
    // whose own values differ (a rerun from the same state agrees exactly until then).
    size_t at = i;
    if (kind == "loss") {
      for (size_t k = i; k < common.size() && k <= i + kHalf; ++k) {
        const Aligned& y = common[k];
        if (std::fabs(y.a - y.b) > 1e-6 * std::max(std::fabs(y.a), std::fabs(y.b))) {
          at = k;
          break;
        }
      }
    }
    r->diverge_step = common[at].step;
    r->diverge_kind = at == 0 && kind == "loss" ? "first_step" : kind;
    r->loss_a = common[at].a, r->loss_b = common[at].b;
    r->threshold = thr;
    return;
  }
}

using LayerTable = std::map<int64_t, std::map<std::string, std::pair<double, double>>>;

// The layer_norms records of a trainscope metrics file: step -> name -> (weight, grad).
LayerTable ReadLayerNorms(const std::string& path) {
  LayerTable t;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.find("\"layer_norms\"") == std::string::npos) continue;
    json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || j.value("type", "") != "layer_norms" || !j.contains("step") ||
        !j["step"].is_number_integer() || !j.contains("layers") || !j["layers"].is_array())
      continue;  // counted by diagnose's reader as the file's bad records
    auto& row = t[j["step"].get<int64_t>()];
    for (const json& l : j["layers"]) {
      if (!l.is_object() || !l.contains("name") || !l["name"].is_string()) continue;
      auto num = [&](const char* k) {
        return l.contains(k) && l[k].is_number() ? l[k].get<double>() : std::nan("");
      };
      row[l["name"].get<std::string>()] = {num("weight_norm"), num("grad_norm")};
    }
  }
  return t;
}

void JudgeLayers(const LayerTable& a, const LayerTable& b, const RunsOptions& o, RunsReport* r) {
  for (const auto& [step, la] : a) {
    auto it = b.find(step);
    if (it == b.end()) continue;
    ++r->layer_steps_compared;
    std::vector<LayerDiff> diffs;
    for (const auto& [name, va] : la) {
      auto jt = it->second.find(name);
      if (jt == it->second.end()) continue;
      const std::pair<double, double>& vb = jt->second;
      for (int f = 0; f < 2; ++f) {
        const double x = f ? va.second : va.first, y = f ? vb.second : vb.first;
        if (std::isnan(x) && std::isnan(y)) continue;
        const double rel = x == y ? 0 : std::fabs(x - y) / std::max(std::fabs(y), 1e-30);
        if (!(rel <= o.layer_rtol)) {  // NaN on one side differs too
          diffs.push_back({name, f ? "grad_norm" : "weight_norm", x, y, rel});
        }
      }
    }
    if (diffs.empty()) continue;
    std::stable_sort(diffs.begin(), diffs.end(), [](const LayerDiff& p, const LayerDiff& q) {
      return p.relative > q.relative;  // NaN (non-finite on one side) sorts as not greater
    });
    r->layer_step = step;
    r->layers = std::move(diffs);
    return;
  }
}

// The op dumps of `run` (`trainscope train --dump`: <run>/dump), "" when it has none.
std::string DumpsOf(const std::string& run) {
  const std::string d = run_dir::Join(run, run_dir::kDump);
  return IsDirectory(d) ? d : "";
}

// What to run next for the first op that differs at `step`.
std::string DumpAdvice(int64_t step, const std::string& dump_a, const std::string& dump_b) {
  if (!dump_a.empty() && !dump_b.empty()) {
    return absl::StrCat("both runs have op dumps, run `trainscope compare ", dump_a, " ", dump_b,
                        "` (dump step ", step, " if theirs are of other steps)");
  }
  return absl::StrCat("dump both at step ", step, " (`trainscope train --dump ", step,
                      "`, trainscope.dump or msprobe) and run trainscope compare on the dumps");
}

void AddFindings(const std::string& dump_a, const std::string& dump_b, RunsReport* r) {
  if (r->diverge_step >= 0) {
    Finding f;
    f.severity = Severity::kError;
    f.id = "compare.loss_divergence";
    f.where = absl::StrCat("step ", r->diverge_step);
    f.evidence = absl::StrCat("step ", r->diverge_step, ": loss ", FormatDouble(r->loss_a, 6),
                              " vs ", FormatDouble(r->loss_b, 6), ", noise ",
                              FormatDouble(r->noise_a, 6), " / ", FormatDouble(r->noise_b, 6));
    if (r->diverge_kind == "first_step") {
      f.title = absl::StrCat("the loss curves differ from their first common step (",
                             r->diverge_step, "), beyond their noise");
      f.fix =
          "the runs did not start alike: align the data order, the seed and the initial "
          "checkpoint, then compare again";
    } else {
      f.title = absl::StrCat(
          "the loss curves part at step ", r->diverge_step,
          r->diverge_kind == "nonfinite" ? " (one turns non-finite)" : ", beyond their noise");
      f.fix = absl::StrCat("the runs compute differently from step ", r->diverge_step, ": ",
                           DumpAdvice(r->diverge_step, dump_a, dump_b),
                           "; the layer named below is where to look");
    }
    r->findings.push_back(std::move(f));
  }
  if (r->layer_step >= 0 && !r->layers.empty()) {
    const LayerDiff& d = r->layers.front();
    Finding f;
    f.severity = Severity::kError;
    f.id = "compare.layer_divergence";
    f.where = d.layer;
    f.title =
        absl::StrCat("the first per-layer norm to part is ", d.layer, "'s ", d.field, " at step ",
                     r->layer_step, " (", r->layers_differing, " norms differ there)");
    f.evidence = absl::StrCat(d.field, " ", FormatDouble(d.a, 6), " vs ", FormatDouble(d.b, 6),
                              ", relative ", FormatDouble(d.relative, 6));
    f.fix = absl::StrCat("compare that layer's forward and backward op by op: ",
                         DumpAdvice(r->layer_step, dump_a, dump_b),
                         "; a dtype or fused kernel of that module is the usual cause");
    r->findings.push_back(std::move(f));
  }
}

}  // namespace

bool LooksLikeRun(const std::string& path) {
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) return fs::path(path).filename() != "dump.json";
  return MetricsFileOf(path).ok();
}

absl::StatusOr<RunsReport> CompareRuns(const std::string& a, const std::string& b,
                                       const RunsOptions& o) {
  RunsReport r;
  auto fa = MetricsFileOf(a);
  if (!fa.ok()) return fa.status();
  auto fb = MetricsFileOf(b);
  if (!fb.ok()) return fb.status();
  auto sa = diagnose::ReadSeries(*fa);
  if (!sa.ok()) return sa.status();
  auto sb = diagnose::ReadSeries(*fb);
  if (!sb.ok()) return sb.status();
  for (const auto* s : {&*sa, &*sb}) {
    if (s->loss.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(s->path, ": no loss values to compare"));
    }
  }
  r.path_a = *fa, r.path_b = *fb;
  r.format_a = sa->format, r.format_b = sb->format;
  r.bad_records_a = sa->bad_records, r.bad_records_b = sb->bad_records;
  r.noise_a = NoiseOf(sa->loss), r.noise_b = NoiseOf(sb->loss);
  const std::vector<Aligned> common = Align(sa->loss, sb->loss);
  r.steps_compared = static_cast<int64_t>(common.size());
  if (!common.empty()) r.first_step = common.front().step, r.last_step = common.back().step;
  JudgeLoss(common, o, &r);
  if (sa->format == "trainscope_metrics" && sb->format == "trainscope_metrics") {
    JudgeLayers(ReadLayerNorms(*fa), ReadLayerNorms(*fb), o, &r);
  }
  r.layers_differing = static_cast<int64_t>(r.layers.size());
  if (r.layers.size() > static_cast<size_t>(std::max(o.top, 1)))
    r.layers.resize(std::max(o.top, 1));
  r.diverged = r.diverge_step >= 0 || r.layer_step >= 0;
  AddFindings(DumpsOf(a), DumpsOf(b), &r);
  return r;
}

nlohmann::json RunsReportToJson(const RunsReport& r) {
  auto num = [](double v) { return std::isfinite(v) ? json(v) : json(nullptr); };
  json first = nullptr;
  if (r.diverge_step >= 0) {
    first = {{"step", r.diverge_step},
             {"kind", r.diverge_kind},
             {"loss_a", num(r.loss_a)},
             {"loss_b", num(r.loss_b)},
             {"threshold", r.threshold}};
  }
  json layer_first = nullptr;
  if (r.layer_step >= 0) {
    json rows = json::array();
    for (const LayerDiff& d : r.layers) {
      rows.push_back({{"layer", d.layer},
                      {"field", d.field},
                      {"a", num(d.a)},
                      {"b", num(d.b)},
                      {"relative", num(d.relative)}});
    }
    layer_first = {{"step", r.layer_step}, {"count", r.layers_differing}, {"differing", rows}};
  }
  json findings = json::array();
  for (const Finding& f : r.findings) findings.push_back(FindingToJson(f));
  return {{"format", formats::kCompare},
          {"version", 1},
          {"kind", "runs"},
          {"a", {{"file", r.path_a}, {"format", r.format_a}, {"bad_records", r.bad_records_a}}},
          {"b", {{"file", r.path_b}, {"format", r.format_b}, {"bad_records", r.bad_records_b}}},
          {"matched", r.steps_compared},
          {"steps", {{"first", r.first_step}, {"last", r.last_step}}},
          {"noise", {{"a", r.noise_a}, {"b", r.noise_b}}},
          {"first_divergence", first},
          {"layers", {{"steps_compared", r.layer_steps_compared}, {"first", layer_first}}},
          {"diverged", r.diverged},
          {"findings", findings}};
}

std::string FormatRunsText(const RunsReport& r, int top) {
  std::string out = absl::StrCat(
      "compare: two runs, ", r.steps_compared, " common steps (", r.first_step, "-", r.last_step,
      "); loss noise ", FormatDouble(r.noise_a, 6), " (A) and ", FormatDouble(r.noise_b, 6),
      " (B)\n  A: ", r.path_a, "\n  B: ", r.path_b, "\n\n");
  if (r.diverge_step < 0) {
    absl::StrAppend(&out, "the loss curves agree within their noise\n");
  } else {
    absl::StrAppend(&out, "the loss curves part at step ", r.diverge_step, " (", r.diverge_kind,
                    "): ", FormatDouble(r.loss_a, 6), " vs ", FormatDouble(r.loss_b, 6),
                    ", threshold ", FormatDouble(r.threshold, 6), "\n");
  }
  if (r.layer_step < 0) {
    absl::StrAppend(&out, r.layer_steps_compared > 0
                              ? "the per-layer norms agree at every common step\n"
                              : "no per-layer norms on both sides (trainscope metrics only)\n");
  } else {
    absl::StrAppend(&out, "\nper-layer norms first differ at step ", r.layer_step, " (",
                    r.layers_differing, " of them; the largest first):\n");
    Table t({"layer", "norm", "A", "B", "relative"});
    int n = 0;
    for (const LayerDiff& d : r.layers) {
      if (n++ >= top) break;
      t.AddRow({d.layer, d.field, FormatDouble(d.a, 6), FormatDouble(d.b, 6),
                FormatDouble(d.relative, 6)});
    }
    absl::StrAppend(&out, t.Render(48));
  }
  for (const Finding& f : r.findings) {
    absl::StrAppend(&out, "\n[", SeverityName(f.severity), "] ", f.id, ": ", f.title,
                    "\n  fix: ", f.fix, "\n");
  }
  return out;
}

}  // namespace trainscope::compare
