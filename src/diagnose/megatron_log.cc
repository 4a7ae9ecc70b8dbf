// Megatron-LM text logs (series.h). The training loop prints one line per logging interval,
//   [2024-05-01 12:00:00] iteration      100/  500000 | consumed samples: 3200 | elapsed time
//   per iteration (ms): 512.3 | learning rate: 1.500E-04 | global batch size:    32 | lm loss:
//   7.123456E+00 | loss scale: 1.0 | grad norm: 2.345 | number of skipped iterations:   0 |
//   number of nan iterations:   0 |
// and the evaluation one block per evaluation,
//   validation loss at iteration 1000 | lm loss value: 5.1E+00 | lm loss PPL: 1.6E+02 |
// Everything else (the arguments dump, timers, warnings, launcher prefixes such as
// "[default0]:") is not a record. Keys map like column names; "lm loss value" is the
// validation loss. Megatron leaves a NaN iteration out of the interval's mean loss and counts
// it instead, so an interval with one gets a NaN loss at its step.
#include <charconv>
#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "diagnose/series_builder.h"

namespace trainscope::diagnose::internal {
namespace {

std::string_view MegatronTrim(std::string_view s) {
  while (!s.empty() && absl::ascii_isspace(static_cast<unsigned char>(s.front())))
    s.remove_prefix(1);
  while (!s.empty() && absl::ascii_isspace(static_cast<unsigned char>(s.back())))
    s.remove_suffix(1);
  return s;
}

// Digits at `*pos` in `s` (after spaces) as a number; advances *pos.
bool MegatronInteger(std::string_view s, size_t* pos, int64_t* out) {
  size_t p = *pos;
  while (p < s.size() && s[p] == ' ') ++p;
  auto r = std::from_chars(s.data() + p, s.data() + s.size(), *out);
  if (r.ec != std::errc() || r.ptr == s.data() + p) return false;
  *pos = static_cast<size_t>(r.ptr - s.data());
  return true;
}

// "iteration <N>/ <M> |": the iteration number and the offset after the first '|'.
bool MegatronIterationLine(std::string_view l, int64_t* iteration, size_t* rest) {
  size_t at = l.find("iteration ");
  if (at == std::string_view::npos) return false;
  size_t p = at + 10;
  int64_t total;
  if (!MegatronInteger(l, &p, iteration)) return false;
  while (p < l.size() && l[p] == ' ') ++p;
  if (p >= l.size() || l[p] != '/') return false;
  ++p;
  if (!MegatronInteger(l, &p, &total)) return false;
  while (p < l.size() && l[p] == ' ') ++p;
  if (p >= l.size() || l[p] != '|') return false;
  *rest = p + 1;
  return true;
}

constexpr std::string_view kMegatronValidation = "validation loss at ";

// A field's number: Megatron prints %.6E, plain decimals, and nan / inf for non-finite.
bool MegatronNumber(std::string_view v, double* out) {
  v = MegatronTrim(v);
  if (v.empty()) return false;
  if (v.front() == '+') v.remove_prefix(1);
  auto r = std::from_chars(v.data(), v.data() + v.size(), *out);
  if (r.ec == std::errc::result_out_of_range) {
    *out = v.front() == '-' ? -INFINITY : INFINITY;
    return true;
  }
  return r.ec == std::errc() && r.ptr == v.data() + v.size();
}

// Calls fn(key, value) for each "key: value" field of `fields` ("a: 1 | b: 2 |").
template <typename Fn>
void ForEachMegatronField(std::string_view fields, Fn fn) {
  size_t pos = 0;
  while (pos < fields.size()) {
    size_t bar = fields.find('|', pos);
    std::string_view f = fields.substr(pos, bar == std::string_view::npos ? bar : bar - pos);
    pos = bar == std::string_view::npos ? fields.size() : bar + 1;
    size_t colon = f.rfind(':');
    if (colon == std::string_view::npos) continue;
    fn(MegatronTrim(f.substr(0, colon)), f.substr(colon + 1));
  }
}

}  // namespace

bool LooksLikeMegatronLog(std::string_view head) {
  if (head.find("------------------------ arguments ------------------------") !=
      std::string_view::npos)
    return true;
  if (head.find(kMegatronValidation) != std::string_view::npos) return true;
  size_t pos = 0;
  while (pos < head.size()) {
    size_t nl = head.find('\n', pos);
    std::string_view l = head.substr(pos, nl == std::string_view::npos ? nl : nl - pos);
    pos = nl == std::string_view::npos ? head.size() : nl + 1;
    int64_t it;
    size_t rest;
    if (MegatronIterationLine(l, &it, &rest)) return true;
  }
  return false;
}

absl::StatusOr<Series> ParseMegatronLog(std::string_view path, std::string_view text) {
  SeriesBuilder b(path, "megatron_log");
  Series& s = b.series();
  int64_t line_no = 0, last_iteration = 0;
  bool any_iteration = false;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    std::string_view l = text.substr(pos, nl == std::string_view::npos ? nl : nl - pos);
    pos = nl == std::string_view::npos ? text.size() : nl + 1;
    ++line_no;
    int64_t iteration;
    size_t rest;
    if (MegatronIterationLine(l, &iteration, &rest)) {
      ++s.records;
      any_iteration = true;
      last_iteration = iteration;
      double vals[kNumMetrics];
      bool has[kNumMetrics] = {false, false, false, false};
      int64_t nan_iterations = 0;
      bool bad = false;
      ForEachMegatronField(l.substr(rest), [&](std::string_view key, std::string_view value) {
        std::string k = absl::AsciiStrToLower(std::string(key));
        double d;
        if (k == "number of skipped iterations" || k == "number of nan iterations") {
          if (!MegatronNumber(value, &d) || !(d >= 0 && d < 1e12)) {
            bad = true;
            return;
          }
          (k == "number of nan iterations" ? nan_iterations : s.skipped_iterations) +=
              static_cast<int64_t>(d);
          return;
        }
        Metric m = MetricIndex(CanonicalMetric(k));
        if (m == kNumMetrics) return;
        if (!MegatronNumber(value, &d)) {
          bad = true;
          return;
        }
        has[m] = true;
        vals[m] = d;
      });
      if (bad) {
        b.BadLine(line_no, "a field is not a number");
        continue;
      }
      s.nan_iterations += nan_iterations;
      if (nan_iterations > 0) {
        has[kLoss] = true;
        vals[kLoss] = NAN;
      }
      for (int m = 0; m < kNumMetrics; ++m)
        if (has[m]) b.Add(static_cast<Metric>(m), iteration, vals[m]);
      continue;
    }
    size_t v = l.find(kMegatronValidation);
    if (v == std::string_view::npos) continue;
    // "validation loss at iteration N [on validation set] | ..." or "validation loss at the
    // end of training for val data | ..." (the last iteration); test data is not validation.
    std::string_view what = l.substr(v + kMegatronValidation.size());
    size_t bar = what.find('|');
    if (bar == std::string_view::npos) continue;
    int64_t step;
    size_t p = 0;
    if (what.substr(0, 10) == "iteration ") {
      p = 10;
      if (!MegatronInteger(what, &p, &step)) continue;
    } else if (what.substr(0, bar).find("val data") != std::string_view::npos && any_iteration) {
      step = last_iteration;
    } else {
      continue;
    }
    ++s.records;
    bool bad = false, found = false;
    double val = 0;
    ForEachMegatronField(what.substr(bar + 1), [&](std::string_view key, std::string_view value) {
      std::string k = absl::AsciiStrToLower(std::string(key));
      if (!(k.size() > 6 && k.compare(k.size() - 6, 6, " value") == 0) || found) return;
      if (CanonicalMetric(k.substr(0, k.size() - 6)) != "loss") return;
      if (!MegatronNumber(value, &val)) {
        bad = true;
        return;
      }
      found = true;
    });
    if (bad) {
      b.BadLine(line_no, "a validation loss that is not a number");
    } else if (found) {
      b.Add(kVal, step, val);
    }
  }
  return b.Finish("field (lm loss)");
}

}  // namespace trainscope::diagnose::internal
