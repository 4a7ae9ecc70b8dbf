// Readers of training-metric logs into Series (series.h): trainscope metrics JSONL, generic
// JSONL, CSV/TSV, HuggingFace trainer_state.json. Each reader collects (step, metric, value)
// records; Finish() orders them by step and keeps the last record of a step.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "diagnose/flat_json.h"
#include "nlohmann/json.hpp"
#include "trainscope/core/formats.h"
#include "trainscope/diagnose/series.h"

namespace trainscope::diagnose {
namespace {

using internal::FlatValue;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

enum Metric { kLoss, kVal, kLr, kGrad, kNumMetrics };

Metric MetricIndex(const std::string& canonical) {
  if (canonical == "loss") return kLoss;
  if (canonical == "val_loss") return kVal;
  if (canonical == "lr") return kLr;
  if (canonical == "grad_norm") return kGrad;
  return kNumMetrics;
}

// Collects points in file order; Finish sorts them and keeps the last one of each step.
class Builder {
 public:
  Builder(const std::string& path, const char* format) {
    s_.path = path;
    s_.format = format;
  }
  Series& series() { return s_; }

  // The step of the next record: the given one, or one past the last.
  int64_t NextStep(bool has_step, double step) {
    if (has_step && std::isfinite(step)) {
      last_step_ = static_cast<int64_t>(step);
    } else {
      ++last_step_;
    }
    return last_step_;
  }
  void Add(Metric m, int64_t step, double v) { pts_[m].push_back({step, v}); }
  void Bad(int64_t line, const std::string& why) {
    ++s_.bad_records;
    if (s_.first_bad.empty()) s_.first_bad = absl::StrCat("line ", line, ": ", why);
  }

  absl::StatusOr<Series> Finish() {
    std::vector<Point>* out[kNumMetrics] = {&s_.loss, &s_.val_loss, &s_.lr, &s_.grad_norm};
    for (int m = 0; m < kNumMetrics; ++m) {
      std::vector<Point>& v = pts_[m];
      std::stable_sort(v.begin(), v.end(),
                       [](const Point& a, const Point& b) { return a.step < b.step; });
      // The last record of a step wins (stable sort kept file order within a step).
      for (size_t i = 0; i < v.size(); ++i) {
        if (i + 1 < v.size() && v[i + 1].step == v[i].step) {
          if (m == kLoss || m == kVal) ++s_.repeated_steps;
          continue;
        }
        out[m]->push_back(v[i]);
      }
    }
    if (s_.loss.empty() && s_.val_loss.empty()) {
      std::string why =
          s_.first_bad.empty() ? "" : absl::StrCat(" (first bad record: ", s_.first_bad, ")");
      return absl::InvalidArgumentError(
          absl::StrCat(s_.path, ": no loss values (", s_.format, ", ", s_.records,
                       " records; expected a loss or validation-loss column/key)", why));
    }
    return std::move(s_);
  }

 private:
  Series s_;
  std::vector<Point> pts_[kNumMetrics];
  int64_t last_step_ = 0;
};

// Lines of `text` with their 1-based numbers; the last line may lack its newline.
template <typename Fn>
void ForEachLine(const std::string& text, Fn fn) {
  size_t pos = 0;
  int64_t line = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    size_t end = nl == std::string::npos ? text.size() : nl;
    ++line;
    std::string_view l(text.data() + pos, end - pos);
    if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
    fn(line, l);
    pos = end + 1;
  }
}

bool IsBlank(std::string_view l) {
  return std::all_of(l.begin(), l.end(), [](char c) { return c == ' ' || c == '\t'; });
}

absl::StatusOr<Series> ParseJsonl(const std::string& path, const std::string& text,
                                  bool trainscope) {
  Builder b(path, trainscope ? "trainscope_metrics" : "jsonl");
  Series& s = b.series();
  std::string error;
  // Per-key canonical names, cached (a log repeats the same few keys on every line).
  std::vector<std::pair<std::string, std::string>> cache;
  auto canonical = [&](std::string_view key) -> const std::string& {
    for (const auto& [k, c] : cache)
      if (k == key) return c;
    cache.emplace_back(std::string(key), CanonicalMetric(std::string(key)));
    return cache.back().second;
  };
  ForEachLine(text, [&](int64_t line, std::string_view l) {
    if (IsBlank(l)) return;
    ++s.records;
    bool has_step = false;
    double step = 0, vals[kNumMetrics];
    bool has[kNumMetrics] = {false, false, false, false};
    std::string_view type, phase;
    bool ok = internal::ScanFlatObject(l, &error, [&](std::string_view key, const FlatValue& v) {
      if (trainscope && key == "type" && v.kind == FlatValue::kString) {
        type = v.text;
        return;
      }
      if (trainscope && key == "phase" && v.kind == FlatValue::kString) {
        phase = v.text;
        return;
      }
      if (trainscope && key == "reason" && v.kind == FlatValue::kString) {
        s.end_reason = std::string(v.text);  // kept only for the end record (below)
        return;
      }
      if (trainscope && key == "rank" && v.kind == FlatValue::kNumber)
        s.rank = static_cast<int>(v.number);
      const std::string& c = canonical(key);
      if (c.empty()) return;
      if (c == "step") {
        if (v.kind == FlatValue::kNumber) {
          has_step = true;
          step = v.number;
        }
        return;
      }
      Metric m = MetricIndex(c);
      if (v.kind == FlatValue::kNumber) {
        has[m] = true;
        vals[m] = v.number;
      } else if (v.kind == FlatValue::kNull && trainscope && m == kLoss) {
        has[m] = true;  // trainscope writes a non-finite loss as null
        vals[m] = kNaN;
      } else if (v.kind == FlatValue::kString) {
        // "NaN" / "inf" as strings (some loggers quote them).
        double d;
        std::string t = absl::AsciiStrToLower(std::string(v.text));
        if (t == "nan")
          d = kNaN;
        else if (t == "inf" || t == "infinity")
          d = std::numeric_limits<double>::infinity();
        else
          return;
        has[m] = true;
        vals[m] = d;
      }
    });
    if (!ok) {
      b.Bad(line, error);
      return;
    }
    if (trainscope) {
      if (type != "end") s.end_reason.clear();
      if (type == "end") return;
      if (type == "nonfinite" && has_step) {
        // The trainer stops at a non-finite step without a step record: the loss of that
        // step is the non-finite value (of the next one when the optimizer step made the
        // weights non-finite after a finite loss).
        b.Add(kLoss, b.NextStep(true, phase == "optimizer" ? step + 1 : step), kNaN);
        return;
      }
      if (type != "step") return;  // header, layer_norms, spike, error, summary
    }
    if (!has[kLoss] && !has[kVal] && !has[kLr] && !has[kGrad]) return;
    int64_t st = b.NextStep(has_step, step);
    for (int m = 0; m < kNumMetrics; ++m)
      if (has[m]) b.Add(static_cast<Metric>(m), st, vals[m]);
  });
  return b.Finish();
}

// The fields of a CSV row; a quoted field loses its quotes (a doubled quote inside is one).
void SplitRow(std::string_view l, char sep, std::vector<std::string>* out) {
  out->clear();
  std::string f;
  bool quoted = false;
  for (size_t i = 0; i < l.size(); ++i) {
    char c = l[i];
    if (quoted) {
      if (c == '"' && i + 1 < l.size() && l[i + 1] == '"') {
        f += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        f += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == sep) {
      out->push_back(std::move(f));
      f.clear();
    } else {
      f += c;
    }
  }
  out->push_back(std::move(f));
}

// A CSV number: "" is missing (false); nan / inf in any case are non-finite values.
bool CsvNumber(std::string_view f, double* out, bool* bad) {
  while (!f.empty() && f.front() == ' ') f.remove_prefix(1);
  while (!f.empty() && f.back() == ' ') f.remove_suffix(1);
  if (f.empty()) return false;
  if (f.front() == '+') f.remove_prefix(1);
  auto r = std::from_chars(f.data(), f.data() + f.size(), *out);
  if (r.ec == std::errc::result_out_of_range) {
    *out = f.front() == '-' ? -std::numeric_limits<double>::infinity()
                            : std::numeric_limits<double>::infinity();
    return true;
  }
  if (r.ec != std::errc() || r.ptr != f.data() + f.size()) {
    *bad = true;
    return false;
  }
  return true;
}

absl::StatusOr<Series> ParseCsv(const std::string& path, const std::string& text) {
  Builder b(path, "csv");
  Series& s = b.series();
  char sep = ',';
  std::vector<int> col_metric;  // per column: Metric, -1 ignored, -2 step
  bool header_done = false;
  std::vector<std::string> unq;
  absl::Status header_error;
  ForEachLine(text, [&](int64_t line, std::string_view l) {
    if (IsBlank(l) || !header_error.ok()) return;
    if (!header_done) {
      if (l.find('\t') != std::string_view::npos && l.find(',') == std::string_view::npos)
        sep = '\t';
      SplitRow(l, sep, &unq);
      for (const std::string& name : unq) {
        std::string c = CanonicalMetric(name);
        col_metric.push_back(c == "step" ? -2 : c.empty() ? -1 : static_cast<int>(MetricIndex(c)));
      }
      header_done = true;
      return;
    }
    ++s.records;
    SplitRow(l, sep, &unq);
    const std::vector<std::string>& f = unq;
    if (f.size() != col_metric.size()) {
      b.Bad(line, absl::StrCat(f.size(), " fields, the header has ", col_metric.size()));
      return;
    }
    bool has_step = false, bad = false;
    double step = 0, vals[kNumMetrics];
    bool has[kNumMetrics] = {false, false, false, false};
    for (size_t k = 0; k < f.size(); ++k) {
      int m = col_metric[k];
      if (m == -1) continue;
      double d;
      bool field_bad = false;
      if (!CsvNumber(f[k], &d, &field_bad)) {
        if (field_bad) bad = true;
        continue;
      }
      if (m == -2) {
        has_step = true;
        step = d;
      } else {
        has[m] = true;
        vals[m] = d;
      }
    }
    if (bad) {
      b.Bad(line, "a field is not a number");
      return;
    }
    if (!has[kLoss] && !has[kVal] && !has[kLr] && !has[kGrad]) return;
    int64_t st = b.NextStep(has_step, step);
    for (int m = 0; m < kNumMetrics; ++m)
      if (has[m]) b.Add(static_cast<Metric>(m), st, vals[m]);
  });
  return b.Finish();
}

double JsonNumber(const nlohmann::json& v, bool* ok) {
  *ok = true;
  if (v.is_number()) return v.get<double>();
  if (v.is_string()) {
    const std::string& t = v.get_ref<const std::string&>();
    if (t == "NaN") return kNaN;
    if (t == "Infinity") return std::numeric_limits<double>::infinity();
    if (t == "-Infinity") return -std::numeric_limits<double>::infinity();
  }
  *ok = false;
  return 0;
}

absl::StatusOr<Series> ParseTrainerState(const std::string& path, const std::string& text) {
  Builder b(path, "trainer_state");
  Series& s = b.series();
  nlohmann::json doc = nlohmann::json::parse(internal::QuoteNonFiniteTokens(text), nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  }
  auto hist = doc.find("log_history");
  if (hist == doc.end() || !hist->is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": no log_history array"));
  }
  int64_t index = 0;
  for (const nlohmann::json& e : *hist) {
    ++index;
    ++s.records;
    if (!e.is_object()) {
      b.Bad(index, "log_history entry is not an object");
      continue;
    }
    if (e.contains("train_runtime")) continue;  // the end-of-training summary (mean loss)
    bool has_step = false, ok;
    double step = 0;
    if (auto it = e.find("step"); it != e.end()) {
      step = JsonNumber(*it, &ok);
      has_step = ok;
    }
    bool any = false;
    double vals[kNumMetrics];
    bool has[kNumMetrics] = {false, false, false, false};
    for (auto it = e.begin(); it != e.end(); ++it) {
      std::string c = CanonicalMetric(it.key());
      if (c.empty() || c == "step") continue;
      double d = JsonNumber(it.value(), &ok);
      if (!ok) continue;
      Metric m = MetricIndex(c);
      has[m] = true;
      vals[m] = d;
      any = true;
    }
    if (!any) continue;
    int64_t st = b.NextStep(has_step, step);
    for (int m = 0; m < kNumMetrics; ++m)
      if (has[m]) b.Add(static_cast<Metric>(m), st, vals[m]);
  }
  (void)index;
  return b.Finish();
}

}  // namespace

bool ReadWholeFile(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return false;
  std::streamoff size = in.tellg();
  if (size < 0) return false;
  out->resize(static_cast<size_t>(size));
  in.seekg(0);
  in.read(out->data(), size);
  // A file that changed size while read (a log still being written): keep what was read.
  out->resize(static_cast<size_t>(in.gcount()));
  return !in.bad();
}

namespace {

std::string BaseName(const std::string& path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

const char* FileKindName(FileKind kind) {
  switch (kind) {
    case FileKind::kTrainscopeMetrics:
      return "trainscope_metrics";
    case FileKind::kJsonl:
      return "jsonl";
    case FileKind::kCsv:
      return "csv";
    case FileKind::kTrainerState:
      return "trainer_state";
    case FileKind::kUnknown:
      break;
  }
  return "unknown";
}

std::string CanonicalMetric(const std::string& name) {
  std::string n;
  n.reserve(name.size());
  for (char c : name) {
    if (c == ' ' || c == '-' || c == '/' || c == '.') c = '_';
    n += absl::ascii_tolower(static_cast<unsigned char>(c));
  }
  static const std::pair<const char*, const char*> kNames[] = {
      {"step", "step"},
      {"iteration", "step"},
      {"iter", "step"},
      {"global_step", "step"},
      {"steps", "step"},
      {"trainer_global_step", "step"},
      {"loss", "loss"},
      {"train_loss", "loss"},
      {"lm_loss", "loss"},
      {"training_loss", "loss"},
      {"train_lm_loss", "loss"},
      {"loss_train", "loss"},
      {"val_loss", "val_loss"},
      {"eval_loss", "val_loss"},
      {"valid_loss", "val_loss"},
      {"validation_loss", "val_loss"},
      {"val_lm_loss", "val_loss"},
      {"loss_val", "val_loss"},
      {"test_loss", "val_loss"},
      {"lr", "lr"},
      {"learning_rate", "lr"},
      {"grad_norm", "grad_norm"},
      {"gradient_norm", "grad_norm"},
      {"grad_norm_total", "grad_norm"},
      {"global_grad_norm", "grad_norm"},
  };
  for (const auto& [k, v] : kNames)
    if (n == k) return v;
  return "";
}

FileKind DetectKind(const std::string& path, const std::string& head) {
  std::string base = absl::AsciiStrToLower(BaseName(path));
  size_t first = head.find_first_not_of(" \t\r\n");
  char c0 = first == std::string::npos ? '\0' : head[first];
  if (absl::EndsWith(base, ".jsonl") || absl::EndsWith(base, ".ndjson")) {
    if (c0 != '{') return FileKind::kUnknown;
    std::string_view line1(head);
    line1 = line1.substr(0, line1.find('\n'));
    if (line1.find(std::string("\"") + formats::kTrainMetrics + "\"") != std::string_view::npos)
      return FileKind::kTrainscopeMetrics;
    return FileKind::kJsonl;
  }
  if (absl::EndsWith(base, ".json")) {
    if (c0 == '{' && head.find("\"log_history\"") != std::string::npos)
      return FileKind::kTrainerState;
    return FileKind::kUnknown;
  }
  if (absl::EndsWith(base, ".csv") || absl::EndsWith(base, ".tsv")) {
    // The header must name a loss column.
    std::string line1 = head.substr(0, head.find('\n'));
    std::vector<std::string> unq;
    char sep =
        line1.find('\t') != std::string::npos && line1.find(',') == std::string::npos ? '\t' : ',';
    SplitRow(line1, sep, &unq);
    for (const std::string& f : unq) {
      std::string c = CanonicalMetric(f);
      if (c == "loss" || c == "val_loss") return FileKind::kCsv;
    }
    return FileKind::kUnknown;
  }
  return FileKind::kUnknown;
}

absl::StatusOr<Series> ParseSeries(const std::string& path, FileKind kind,
                                   const std::string& text) {
  switch (kind) {
    case FileKind::kTrainscopeMetrics:
      return ParseJsonl(path, text, true);
    case FileKind::kJsonl:
      return ParseJsonl(path, text, false);
    case FileKind::kCsv:
      return ParseCsv(path, text);
    case FileKind::kTrainerState:
      return ParseTrainerState(path, text);
    case FileKind::kUnknown:
      break;
  }
  return absl::InvalidArgumentError(absl::StrCat(path, ": not a metrics file"));
}

absl::StatusOr<Series> ReadSeries(const std::string& path) {
  std::string text;
  if (!ReadWholeFile(path, &text)) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  FileKind kind = DetectKind(path, text.substr(0, 4096));
  if (kind == FileKind::kUnknown) {
    return absl::InvalidArgumentError(
        absl::StrCat(path,
                     ": not a metrics file diagnose reads (metrics JSONL, CSV with a loss column, "
                     "trainer_state.json, trainscope metrics.rank<R>.jsonl)"));
  }
  return ParseSeries(path, kind, text);
}

}  // namespace trainscope::diagnose
