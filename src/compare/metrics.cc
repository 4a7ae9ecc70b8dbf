// Metrics of a matched row pair, as msprobe's compare computes and prints them
// (msprobe/core/compare: acc_compare.py CalcStatsDiff, npy_compare.py ValidateTensor,
// algorithm/builtin_algorithm/alg_*.py), and our divergence measure.
//
// Statistics mode, per statistic (Max, Min, Mean, Norm): equal texts give "0"; two numbers
// give A - B and |A - B| / |B| * 100 "%" ("inf" when B is 0); NaN on either side "Nan";
// an infinity "inf" / "-inf"; N/A stays N/A; anything else "Diff".
// Tensor mode: Cosine (1.0 when both norms are <= float64 eps; "Nan" when one is), EucDist
// = ||A - B||2, MaxAbsErr = max |A - B|, MaxRelativeErr = max |A - B| / |B| and the share
// of elements with that relative error under 0.001 / 0.005, where a zero in B adds the
// dtype's eps to both sides, and the arithmetic is float32 unless a side is float64 or an
// integer (numpy's result_type with float32). NaN/Inf at the same positions on both sides
// count as 0; elsewhere the row is "N/A". 0-d tensors: only MaxAbsErr and MaxRelativeErr;
// one-element tensors: no Cosine. Values are rounded to 12 decimals (and Cosine above
// 0.9999 to 6), msprobe's format_value.
#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "compare/internal.h"

namespace trainscope::compare {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double Format12(double v) { return std::isfinite(v) ? std::round(v * 1e12) / 1e12 : v; }

enum class ValType { kNum, kNan, kInf, kNegInf, kNa, kOther };

ValType Classify(const std::string& t) {
  std::string s = t;
  std::transform(s.begin(), s.end(), s.begin(), ::tolower);
  if (s == "nan" || s == "none") return ValType::kNan;
  if (s == "inf") return ValType::kInf;
  if (s == "-inf") return ValType::kNegInf;
  if (s == "n/a") return ValType::kNa;
  if (s == "true" || s == "false") return ValType::kOther;
  char* end = nullptr;
  std::strtod(t.c_str(), &end);
  return !t.empty() && end && *end == '\0' ? ValType::kNum : ValType::kOther;
}

// One statistic's "diff" and "relative error" columns (CalcStatsDiff.calc_summary_diff).
void StatColumns(const std::string& a, const std::string& b, std::string* diff, std::string* rel,
                 double* diff_v, double* rel_v) {
  *diff_v = *rel_v = kNaN;
  if (a == b) {
    *diff = *rel = "0";
    *diff_v = *rel_v = 0;
    return;
  }
  const ValType ta = Classify(a), tb = Classify(b);
  auto set = [&](const char* d) { *diff = *rel = d; };
  if (ta == ValType::kNa || tb == ValType::kNa) return set("N/A");
  if (ta == ValType::kNum && tb == ValType::kNum) {
    const double x = std::strtod(a.c_str(), nullptr), y = std::strtod(b.c_str(), nullptr);
    *diff_v = x - y;
    *diff = PyFloat(x - y);
    if (y != 0) {
      *rel_v = std::fabs((x - y) / y);
      *rel = PyFloat(std::fabs((x - y) / y * 100)) + "%";
    } else {
      *rel = "inf";
      *rel_v = HUGE_VAL;
    }
    return;
  }
  const bool numeric_a = ta != ValType::kOther, numeric_b = tb != ValType::kOther;
  if (!numeric_a || !numeric_b) return set("Diff");
  if (ta == ValType::kNan || tb == ValType::kNan) return set("Nan");
  if (ta == ValType::kInf || tb == ValType::kNegInf) return set("inf");
  return set("-inf");
}

bool FloatDtype(const std::string& d) {
  return d.find("float") != std::string::npos && d.find("float64") == std::string::npos;
}

// |n - b| / |b| with eps added on both sides where b is 0 (get_relative_err), in T.
template <class T>
inline double RelativeError(double n, double b) {
  const T eps = std::numeric_limits<T>::epsilon();
  T x = static_cast<T>(n), y = static_cast<T>(b);
  if (y == 0) x += eps, y += eps;
  return static_cast<double>(std::fabs(static_cast<T>((x - y) / y)));
}

// The divergence measure of statistics: |A - B| / max(|A|, |B|) of Max, Min and Norm, and of
// Mean against max(|A|, |B|, B's root mean square), so that a mean near zero does not blow up.
double StatsError(const Tensor& a, const Tensor& b) {
  double e = 0;
  uint64_t numel = 1;
  for (int64_t d : b.shape) numel *= d > 0 ? static_cast<uint64_t>(d) : 1;
  const double rms = b.has_stats[3] ? std::fabs(b.stats[3]) / std::sqrt(double(numel)) : 0;
  for (int i = 0; i < 4; ++i) {
    if (a.stat_text[i] == b.stat_text[i]) continue;
    if (a.has_stats[i] != b.has_stats[i]) return HUGE_VAL;
    if (!a.has_stats[i]) continue;
    const double x = a.stats[i], y = b.stats[i];
    if (std::isnan(x) && std::isnan(y)) continue;
    if (!std::isfinite(x) || !std::isfinite(y)) {
      if (x != y) return HUGE_VAL;
      continue;
    }
    double scale = std::max(std::fabs(x), std::fabs(y));
    if (i == 2) scale = std::max(scale, rms);
    if (scale > 0) e = std::max(e, std::fabs(x - y) / scale);
  }
  return e;
}

// Twice the unit roundoff of a float dtype (its relative spacing), -1 for a non-float one.
double CastTolerance(const std::string& dtype) {
  if (dtype.find("bfloat16") != std::string::npos) return std::ldexp(1.0, -8);
  if (dtype.find("float16") != std::string::npos) return std::ldexp(1.0, -11);
  if (dtype.find("float32") != std::string::npos) return std::ldexp(1.0, -24);
  if (dtype.find("float64") != std::string::npos) return std::ldexp(1.0, -53);
  return -1;
}

}  // namespace

void TensorMetrics(const TensorData& a, const TensorData& b, double metric[6],
                   std::vector<std::string>* messages, double* scale) {
  for (int i = 0; i < 6; ++i) metric[i] = kNaN;
  if (a.values.empty() || b.values.empty()) {
    messages->push_back("This is empty data, can not compare.");
    return;
  }
  if (a.shape != b.shape || a.values.size() != b.values.size()) {
    messages->push_back("Shape of NPU and bench tensor do not match. Skipped.");
    return;
  }
  // One pass, no copies (a dump holds gigabytes): NaN / Inf at the same positions count as
  // 0, anywhere else the row cannot be compared; the relative error |n - b| / |b| (eps added
  // to both where b is 0, msprobe's get_relative_err) in float for float dtypes, as msprobe
  // computes it in the tensors' numpy dtype.
  const bool as_float = FloatDtype(a.dtype) && FloatDtype(b.dtype);
  double dot = 0, na = 0, nb = 0, dist = 0, max_abs = 0, max_rel = 0, peak = 0;
  size_t under1 = 0, under5 = 0;
  const double* pa = a.values.data();
  const double* pb = b.values.data();
  const size_t count = a.values.size();
  for (size_t i = 0; i < count; ++i) {
    double x = pa[i], y = pb[i];
    if (!std::isfinite(x) || !std::isfinite(y)) {
      const bool same =
          (std::isnan(x) && std::isnan(y)) || (std::isinf(x) && std::isinf(y) && x == y);
      if (!same) {
        messages->push_back("The position of inf or nan in NPU and bench Tensor do not match.");
        return;
      }
      x = y = 0;
    }
    dot += x * y, na += x * x, nb += y * y;
    peak = std::max({peak, std::fabs(x), std::fabs(y)});
    const double d = x - y;
    dist += d * d;
    max_abs = std::max(max_abs, std::fabs(d));
    const double r = as_float ? RelativeError<float>(x, y) : RelativeError<double>(x, y);
    max_rel = std::max(max_rel, r);
    under1 += r < 0.001;
    under5 += r < 0.005;
  }
  const bool scalar = a.shape.empty();
  if (scalar) {
    messages->push_back(
        "This is type of 0-d tensor, can not calculate 'Cosine', 'EucDist', "
        "'One Thousandth Err Ratio' and 'Five Thousandths Err Ratio'. ");
  } else if (a.dtype != b.dtype) {
    messages->push_back("Dtype of NPU and bench tensor do not match.");
  }
  if (scale != nullptr) *scale = peak;
  na = std::sqrt(na), nb = std::sqrt(nb);
  metric[2] = Format12(max_abs);
  metric[3] = Format12(max_rel);
  if (scalar) return;
  const double eps = std::numeric_limits<double>::epsilon();
  if (count == 1) {
    messages->push_back("This is a 1-d tensor of length 1.");
  } else if (na <= eps && nb <= eps) {
    metric[0] = 1.0;
  } else if (na <= eps) {
    messages->push_back(
        "Cannot compare by Cosine Similarity, All the data is Zero in npu dump data.");
  } else if (nb <= eps) {
    messages->push_back(
        "Cannot compare by Cosine Similarity, All the data is Zero in Bench dump data.");
  } else {
    double cos = Format12(dot / (na * nb));
    if (cos > 0.9999) cos = std::round(cos * 1e6) / 1e6;
    metric[0] = cos;
  }
  metric[1] = std::sqrt(dist);
  metric[4] = Format12(double(under1) / count);
  metric[5] = Format12(double(under5) / count);
}

void CompareRow(Mode mode, const Dump& da, const Dump& db, const Options& options, RowCompare* row,
                PairReport* report) {
  for (double& x : row->diff) x = kNaN;
  for (double& x : row->rel) x = kNaN;
  for (double& x : row->metric) x = kNaN;
  const Tensor& a = *row->a;
  auto nonfinite = [](const Tensor& t) {
    for (int i : {0, 1})
      if (t.has_stats[i] && !std::isfinite(t.stats[i])) return true;
    return false;
  };
  row->nonfinite_a = nonfinite(a);
  if (!row->b) {
    for (std::string& s : row->stat_text) s = "N/A";
    for (std::string& s : row->metric_text) s = "N/A";
    return;
  }
  const Tensor& b = *row->b;
  row->nonfinite_b = nonfinite(b);
  for (int i = 0; i < 4; ++i) {
    StatColumns(a.stat_text[i], b.stat_text[i], &row->stat_text[i], &row->stat_text[4 + i],
                &row->diff[i], &row->rel[i]);
  }
  row->error = StatsError(a, b);
  // A float tensor in another float dtype carries that dtype's rounding: within it, an input
  // still agrees (the op that runs in the narrower dtype is the one to blame).
  if (a.kind == Tensor::Kind::kTensor && a.shape != b.shape) row->error = HUGE_VAL;
  if (a.kind == Tensor::Kind::kTensor && a.dtype != b.dtype) {
    const double ca = CastTolerance(a.dtype), cb = CastTolerance(b.dtype);
    if (ca < 0 || cb < 0) row->error = HUGE_VAL;
    row->cast_tolerance = std::max(ca, cb);
  }
  if (mode == Mode::kMd5 && a.kind == Tensor::Kind::kTensor)
    row->error = a.md5 == b.md5 ? 0 : HUGE_VAL;
  bool cosine_low = false;
  if (mode == Mode::kTensor && a.kind == Tensor::Kind::kTensor) {
    const char* fill = "N/A";
    if (a.data_name.empty() || b.data_name.empty()) {
      fill = "No real data";
      row->notes.push_back(a.data_name.empty() ? "NPU does not have data file."
                                               : "Bench does not have data file.");
    } else {
      auto read = [&](const Dump& d, const Tensor& t) {
        const std::string dir = d.dir + "/dump_tensor_data";
        auto data = ReadTensorFile(dir + "/" + t.data_name);
        if (!data.ok()) {
          if (absl::IsNotFound(data.status()))
            ++report->tensor_files_missing;
          else
            ++report->tensor_files_unreadable;
          if (report->tensor_file_errors.size() < 5)
            report->tensor_file_errors.push_back(std::string(data.status().message()));
        }
        return data;
      };
      auto ta = read(da, a), tb = read(db, b);
      if (ta.ok() && tb.ok()) {
        row->tensors_read = true;
        double scale = 0;  // the largest magnitude of either side (the loop's own pass)
        TensorMetrics(*ta, *tb, row->metric, &row->notes, &scale);
        if (!std::isnan(row->metric[2])) {
          row->error = scale > 0 ? row->metric[2] / scale : 0;
          cosine_low = row->metric[0] < options.cosine;
        }
      } else {
        fill = "No data";
        row->notes.push_back("Dump file: " + a.data_name + " or " + b.data_name +
                             " not found or read failed.");
      }
    }
    auto said = [&](const char* what) {
      for (const std::string& m : row->notes)
        if (m.find(what) != std::string::npos) return true;
      return false;
    };
    if (row->tensors_read) {
      fill = said("Shape of NPU")      ? "shape unmatched"
             : said("position of inf") ? "N/A"
             : said("empty data")      ? "unsupported"
                                       : nullptr;
    }
    const bool cos_nan = said("Cosine Similarity");
    for (int i = 0; i < 6; ++i) {
      if (!std::isnan(row->metric[i])) {
        row->metric_text[i] = PyFloat(row->metric[i]);
      } else {
        row->metric_text[i] = fill ? fill : (i == 0 && cos_nan) ? "Nan" : "unsupported";
      }
    }
  } else {
    for (std::string& s : row->metric_text) s = "unsupported";
  }
  const bool input = a.state == State::kInput || a.state == State::kParameters;
  row->differs =
      row->error > (input ? std::max(options.rtol, row->cast_tolerance) : options.rtol) ||
      cosine_low;
}

}  // namespace trainscope::compare
