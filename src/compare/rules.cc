// msprobe's pass / warning / error of each row (msprobe/core/compare/indicator_analysis:
// algorithm.py's checkers, run over the rows of one API or module; a row keeps its worst
// level). Inputs are the rows whose name lacks ".output." (parameters count as inputs).
//   every mode but md5: NaN/Inf in A's Max or Min while B's are finite -> error; dtype,
//     shape, requires_grad different -> error; a non-tensor scalar different -> error.
//   statistics: inputs' largest NormRelativeErr < 0.1 and an output's > 0.5 -> error; the
//     outputs' largest NormRelativeErr over 10x the inputs' (> 0.1 when the inputs' is 0)
//     -> warning on the first output.
//   tensor: inputs' smallest One Thousandth Err Ratio > 0.9 and the outputs' < 0.1 -> error;
//     inputs' smallest Cosine > 0.9 and 0.1 above the outputs' -> warning.
//   md5: CRC different -> error (warning when a side has none).
// Some APIs are skipped as msprobe skips them (empty, to, ... entirely; the inputs of
// all-gather / reduce-scatter style collectives).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compare/internal.h"

namespace trainscope::compare {
namespace {

int Level(const std::string& r) { return r == "error" ? 2 : r == "warning" ? 1 : 0; }

void Set(RowCompare* row, int level, const std::string& msg) {
  static const char* const kNames[] = {"pass", "warning", "error"};
  if (level > Level(row->result)) row->result = kNames[level];
  row->messages.push_back(msg);
}

bool InfOrNan(const std::string& t) {
  std::string s = t;
  std::transform(s.begin(), s.end(), s.begin(), ::tolower);
  return s == "inf" || s == "-inf" || s == "nan";
}

// A percentage column as a fraction (str2float): "12.5%" -> 0.125, other text 0 or inf.
double Fraction(const std::string& t) {
  std::string s = t;
  if (!s.empty() && s.back() == '%') s.pop_back();
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  return end && *end == '\0' && !s.empty() ? v / 100 : 0;
}

// get_min_or_max_value over rows: percentages as fractions, other text skipped.
double Extreme(const std::vector<RowCompare*>& rows, bool is_min, bool percent,
               const std::string& (*col)(const RowCompare&)) {
  double v = is_min ? 1.0 : 0.0;
  for (const RowCompare* r : rows) {
    const std::string& t = col(*r);
    double x;
    if (t == "Nan" || t == "N/A" || t.empty()) continue;
    if (percent && t.back() == '%') {
      x = Fraction(t);
    } else if (!percent) {
      char* end = nullptr;
      x = std::strtod(t.c_str(), &end);
      if (!end || *end != '\0') continue;
    } else {
      continue;  // "0", "inf": msprobe leaves a non-percentage text out
    }
    v = is_min ? std::min(v, x) : std::max(v, x);
  }
  return v;
}

const std::string& NormRel(const RowCompare& r) { return r.stat_text[7]; }
const std::string& Ratio1(const RowCompare& r) { return r.metric_text[4]; }
const std::string& Cosine(const RowCompare& r) { return r.metric_text[0]; }

}  // namespace

std::string DtypeText(const Tensor* t) {
  return !t || t->kind == Tensor::Kind::kNone ? "N/A" : t->dtype;
}

std::string NormalizedDtype(std::string d) {
  for (const char* prefix : {"torch.", "mindspore.", "numpy.", "np."}) {
    if (d.rfind(prefix, 0) == 0) {
      d = d.substr(std::strlen(prefix));
      break;
    }
  }
  std::transform(d.begin(), d.end(), d.begin(), [](unsigned char c) { return std::tolower(c); });
  if (d == "float") return "float32";  // MindSpore's mstype.float_ / torch.float
  if (d == "half") return "float16";
  if (d == "double") return "float64";
  if (d == "long") return "int64";
  if (d == "int") return "int32";
  return d;
}

std::string ShapeText(const Tensor* t) {
  if (!t || t->kind == Tensor::Kind::kNone) return "N/A";
  if (t->type == "slice") return "[]";
  std::string s = "[";
  for (size_t i = 0; i < t->shape.size(); ++i) absl::StrAppend(&s, i ? ", " : "", t->shape[i]);
  return s + "]";
}

std::string ReqGradText(const Tensor* t) {
  if (!t || t->requires_grad < 0) return "N/A";
  return t->requires_grad ? "True" : "False";
}

void ApplyResultRules(Mode mode, EntryCompare* e) {
  std::vector<RowCompare*> in, out, all;
  for (RowCompare& r : e->rows) {
    r.result = "pass";
    (r.a->name.find(".output.") == std::string::npos ? in : out).push_back(&r);
  }
  static const std::set<std::string> kAllIgnore = {"empty",
                                                   "empty_like",
                                                   "numpy",
                                                   "to",
                                                   "__setitem__",
                                                   "empty_with_format",
                                                   "new_empty_strided",
                                                   "new_empty",
                                                   "empty_strided"};
  static const std::set<std::string> kInputIgnore = {"_reduce_scatter_base", "_all_gather_base",
                                                     "all_to_all_single", "batch_isend_irecv"};
  std::string api;
  if (!in.empty()) {
    std::vector<std::string> parts = SplitName(in[0]->a->name);
    if (parts.size() >= 2) api = parts[1];
  }
  const bool all_ignore = kAllIgnore.count(api) > 0, input_ignore = kInputIgnore.count(api) > 0;
  if (!all_ignore) {
    if (!input_ignore) all = in;
    all.insert(all.end(), out.begin(), out.end());
  }
  if (mode == Mode::kMd5) {
    for (RowCompare* r : all) {
      const std::string ma = r->a->md5, mb = r->b ? r->b->md5 : "N/A";
      if (ma == mb) continue;
      if (ma.empty() || mb.empty() || ma == "N/A" || mb == "N/A")
        Set(r, 1, "warning: The parameter of NPU does not match the bench.");
      else
        Set(r, 2, "error: The CRC-32 value of NPU differs from that of the bench.");
    }
  } else {
    for (RowCompare* r : all) {  // InfNanErrChecker
      if (r->b && (InfOrNan(r->b->stat_text[0]) || InfOrNan(r->b->stat_text[1]))) continue;
      if (InfOrNan(r->a->stat_text[0]) || InfOrNan(r->a->stat_text[1]))
        Set(r, 2, "error: There is nan/inf/-inf in the maximum or minimum value of NPU.");
    }
    const bool skip_io = all_ignore || input_ignore;
    if (mode == Mode::kStatistics && !skip_io &&
        std::fabs(Extreme(in, false, true, NormRel)) < 0.1) {  // RelativeErrChecker
      for (RowCompare* r : out) {
        if (std::fabs(Fraction(NormRel(*r))) > 0.5)
          Set(r, 2, "error: The NormRelativeErr of output is greater than 0.5.");
      }
    }
    if (mode == Mode::kTensor && !skip_io && !out.empty() &&
        Extreme(in, true, false, Ratio1) > 0.9 && Extreme(out, true, false, Ratio1) < 0.1)
      Set(out[0], 2,
          "error: The input/parameters of One Thousandth Err Ratio > 0.9 while the output < 0.6.");
    for (RowCompare* r : all) {  // RequiresGradErrChecker
      if (r->b && ReqGradText(r->a) != ReqGradText(r->b))
        Set(r, 2, "error: The Required_Grad of NPU and Bench are inconsistent");
    }
    if (!skip_io) {
      for (RowCompare* r : in) {  // ParametersErrChecker
        if (!r->b || r->a->kind != Tensor::Kind::kValue || r->b->kind != Tensor::Kind::kValue)
          continue;
        if (DtypeText(r->a).find("class") == std::string::npos ||
            DtypeText(r->b).find("class") == std::string::npos || ShapeText(r->a) != "[]")
          continue;
        if (r->a->stat_text[0] != r->b->stat_text[0])
          Set(r, 2, "error: The scalar parameters of NPU and Bench are inconsistent.");
      }
    }
    for (RowCompare* r : all) {  // DTypeErrChecker, ShapeErrChecker
      if (!r->b) continue;
      const std::string& bn = r->b->name;
      if (bn.find("qkv") == std::string::npos && bn.find("gate_up") == std::string::npos &&
          NormalizedDtype(DtypeText(r->a)) != NormalizedDtype(DtypeText(r->b)))
        Set(r, 2, "error: The dtype of NPU and Bench are inconsistent.");
      if (ShapeText(r->a) != ShapeText(r->b))
        Set(r, 2, "error: The shape of NPU and Bench are inconsistent.");
    }
    if (mode == Mode::kStatistics && !skip_io && !out.empty()) {  // RelativeWarnChecker
      const double i = std::fabs(Extreme(in, false, true, NormRel));
      const double o = std::fabs(Extreme(out, false, true, NormRel));
      if ((i == 0 && o > 0.1) || (i != 0 && o / i > 10))
        Set(out[0], 1, "warning: The norm relative error of output is 10 times that of input.");
    }
    if (mode == Mode::kTensor && !skip_io && !out.empty()) {  // CosineWarnChecker
      const double i = Extreme(in, true, false, Cosine), o = Extreme(out, true, false, Cosine);
      if (i > 0.9 && i - o > 0.1)
        Set(out[0], 1,
            "warning: The input/parameters of Cosine > 0.9, and input/parameters - output > 0.1");
    }
  }
  e->result = "pass";
  for (const RowCompare& r : e->rows)
    if (Level(r.result) > Level(e->result)) e->result = r.result;
}

}  // namespace trainscope::compare
