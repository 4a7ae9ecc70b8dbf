// Readers of training-metric logs into Series (series.h): trainscope metrics JSONL, generic
// JSONL, CSV/TSV, HuggingFace trainer_state.json; TensorBoard event files (tensorboard.cc) and
// Megatron-LM text logs (megatron_log.cc) are dispatched from here. Each reader collects
// (step, metric, value) records; SeriesBuilder::Finish orders them by step and keeps the last
// record of a step.

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "diagnose/flat_json.h"
#include "diagnose/series_builder.h"
#include "nlohmann/json.hpp"
#include "trainscope/core/formats.h"
#include "trainscope/core/json_text.h"
#include "trainscope/diagnose/series.h"

namespace trainscope::diagnose {
namespace internal {

Metric MetricIndex(std::string_view canonical) {
  if (canonical == "loss") return kLoss;
  if (canonical == "val_loss") return kVal;
  if (canonical == "lr") return kLr;
  if (canonical == "grad_norm") return kGrad;
  return kNumMetrics;
}

SeriesBuilder::SeriesBuilder(std::string_view path, const char* format) {
  s_.path = std::string(path);
  s_.format = format;
}

int64_t SeriesBuilder::NextStep(bool has_step, double step) {
  // Steps are kept within +-2^52 so that a garbage step (1e300) overflows neither the
  // conversion nor the next record's +1.
  constexpr double kMaxStep = 4503599627370496.0;  // 2^52: differences of steps fit too
  if (has_step && std::isfinite(step)) {
    last_step_ = static_cast<int64_t>(std::clamp(step, -kMaxStep, kMaxStep));
  } else if (last_step_ < static_cast<int64_t>(kMaxStep)) {
    ++last_step_;
  }
  return last_step_;
}

void SeriesBuilder::Reserve(size_t n) {
  for (std::vector<Point>& v : pts_) v.reserve(n);
}

void SeriesBuilder::Bad(std::string_view where, std::string_view why) {
  ++s_.bad_records;
  if (s_.first_bad.empty()) s_.first_bad = absl::StrCat(std::string(where), ": ", std::string(why));
}

void SeriesBuilder::BadLine(int64_t line, std::string_view why) {
  if (s_.bad_records++ == 0) s_.first_bad = absl::StrCat("line ", line, ": ", std::string(why));
}

absl::StatusOr<Series> SeriesBuilder::Finish(const char* what_names) {
  std::vector<Point>* out[kNumMetrics] = {&s_.loss, &s_.val_loss, &s_.lr, &s_.grad_norm};
  auto by_step = [](const Point& a, const Point& b) { return a.step < b.step; };
  for (int m = 0; m < kNumMetrics; ++m) {
    std::vector<Point>& v = pts_[m];
    // Logs are nearly always in step order already: sort only when not.
    if (!std::is_sorted(v.begin(), v.end(), by_step)) std::stable_sort(v.begin(), v.end(), by_step);
    // The last record of a step wins (stable sort kept file order within a step).
    out[m]->reserve(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      if (i + 1 < v.size() && v[i + 1].step == v[i].step) {
        if (m == kLoss || m == kVal) ++s_.repeated_steps;
        continue;
      }
      out[m]->push_back(v[i]);
    }
    std::vector<Point>().swap(v);
  }
  if (s_.loss.empty() && s_.val_loss.empty()) {
    std::string why =
        s_.first_bad.empty() ? "" : absl::StrCat(" (first bad record: ", s_.first_bad, ")");
    return absl::InvalidArgumentError(absl::StrCat(s_.path, ": no loss values (", s_.format, ", ",
                                                   s_.records, " records; expected a loss or ",
                                                   "validation-loss ", what_names, ")", why));
  }
  return std::move(s_);
}

}  // namespace internal

namespace {

using internal::FlatValue;
using internal::kGrad;
using internal::kLoss;
using internal::kLr;
using internal::kNumMetrics;
using internal::kVal;
using internal::Metric;
using internal::MetricIndex;
using internal::SeriesBuilder;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Lines of `text` with their 1-based numbers; the last line may lack its newline.
template <typename Fn>
void ForEachLine(std::string_view text, Fn fn) {
  size_t pos = 0;
  int64_t line = 0;
  const char* base = text.data();
  while (pos < text.size()) {
    const void* nl = std::memchr(base + pos, '\n', text.size() - pos);
    size_t end =
        nl == nullptr ? text.size() : static_cast<size_t>(static_cast<const char*>(nl) - base);
    ++line;
    std::string_view l(base + pos, end - pos);
    if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
    fn(line, l);
    pos = end + 1;
  }
}

bool IsBlank(std::string_view l) {
  return std::all_of(l.begin(), l.end(), [](char c) { return c == ' ' || c == '\t'; });
}

// What a JSONL key means to the reader: a Metric, or one of these.
enum JsonlKeyCode : int8_t {
  kJsonlIgnore = -1,
  kJsonlStep = kNumMetrics + 1,
  kJsonlType,
  kJsonlPhase,
  kJsonlReason,
  kJsonlRank,
};

// The code of each key seen, found again by a direct-mapped table over the key's length and
// three of its characters (a metrics log repeats the same dozen keys on every line), with a
// list behind it.
class JsonlKeyCache {
 public:
  explicit JsonlKeyCache(bool trainscope) : trainscope_(trainscope) { slot_.fill(-1); }

  int8_t Code(std::string_view key) {
    size_t h = Hash(key);
    int s = slot_[h];
    if (s >= 0 && entries_[s].key == key) return entries_[s].code;
    for (size_t i = 0; i < entries_.size(); ++i) {
      if (entries_[i].key == key) {
        slot_[h] = static_cast<int>(i);
        return entries_[i].code;
      }
    }
    entries_.push_back({std::string(key), Classify(key)});
    slot_[h] = static_cast<int>(entries_.size() - 1);
    return entries_.back().code;
  }

 private:
  struct Entry {
    std::string key;
    int8_t code;
  };
  static size_t Hash(std::string_view k) {
    if (k.empty()) return 0;
    return (k.size() * 31 + static_cast<unsigned char>(k[0]) * 7 +
            static_cast<unsigned char>(k[k.size() / 2]) * 3 +
            static_cast<unsigned char>(k.back())) %
           kSlots;
  }
  int8_t Classify(std::string_view key) const {
    if (trainscope_) {
      if (key == "type") return kJsonlType;
      if (key == "phase") return kJsonlPhase;
      if (key == "reason") return kJsonlReason;
      if (key == "rank") return kJsonlRank;
    }
    std::string c = CanonicalMetric(std::string(key));
    if (c == "step") return kJsonlStep;
    Metric m = MetricIndex(c);
    return m == kNumMetrics ? static_cast<int8_t>(kJsonlIgnore) : static_cast<int8_t>(m);
  }

  static constexpr size_t kSlots = 128;
  bool trainscope_;
  std::array<int, kSlots> slot_;
  std::vector<Entry> entries_;
};

// A metric's value from a JSONL member: a number, null (trainscope's non-finite loss), or
// "NaN" / "inf" quoted (some loggers quote them). False when the member carries no value.
bool JsonlMetricValue(FlatValue& v, bool trainscope, Metric m, double* out) {
  if (v.kind == FlatValue::kNumber) {
    if (!internal::DecodeFlatNumber(&v)) return false;
    *out = v.number;
    return true;
  }
  if (v.kind == FlatValue::kNull && trainscope && m == kLoss) {
    *out = kNaN;
    return true;
  }
  if (v.kind == FlatValue::kString) {
    std::string t = absl::AsciiStrToLower(std::string(v.text));
    if (t == "nan") {
      *out = kNaN;
      return true;
    }
    if (t == "inf" || t == "infinity") {
      *out = std::numeric_limits<double>::infinity();
      return true;
    }
  }
  return false;
}

// One line's values, parsed by a chunk's thread, numbered into steps by the merge.
struct JsonlRecord {
  double step;
  bool has_step;
  bool has[kNumMetrics];
  double vals[kNumMetrics];
};

// What one chunk of lines yields; merged in file order.
struct JsonlChunk {
  std::string_view text;
  std::vector<JsonlRecord> records;
  int64_t lines = 0, parsed = 0, bad = 0, first_bad_line = 0;
  std::string first_bad;
  int rank = -1;
  bool any_good = false;   // a line that parsed (decides the end reason)
  std::string end_reason;  // the last good line's, when it is an "end" record
};

void ParseJsonlChunk(bool trainscope, JsonlChunk* c) {
  std::string error;
  JsonlKeyCache keys(trainscope);
  c->records.reserve(c->text.size() / 96 + 16);
  ForEachLine(c->text, [&](int64_t line, std::string_view l) {
    c->lines = line;
    if (IsBlank(l)) return;
    ++c->parsed;
    JsonlRecord r{0, false, {false, false, false, false}, {0, 0, 0, 0}};
    std::string_view type, phase, reason;
    bool ok = internal::ScanFlatObjectLazy(l, &error, [&](std::string_view key, FlatValue& v) {
      int8_t code = keys.Code(key);
      switch (code) {
        case kJsonlIgnore:
          return;
        case kJsonlType:
          if (v.kind == FlatValue::kString) type = v.text;
          return;
        case kJsonlPhase:
          if (v.kind == FlatValue::kString) phase = v.text;
          return;
        case kJsonlReason:
          if (v.kind == FlatValue::kString) reason = v.text;
          return;
        case kJsonlRank:
          if (v.kind == FlatValue::kNumber && internal::DecodeFlatNumber(&v) && v.number >= 0 &&
              v.number < (1 << 30))
            c->rank = static_cast<int>(v.number);
          return;
        case kJsonlStep:
          if (v.kind == FlatValue::kNumber && internal::DecodeFlatNumber(&v)) {
            r.has_step = true;
            r.step = v.number;
          }
          return;
        default: {
          Metric m = static_cast<Metric>(code);
          if (JsonlMetricValue(v, trainscope, m, &r.vals[m])) r.has[m] = true;
        }
      }
    });
    // The line count of the chunk is only known at its end; lines are numbered in the merge.
    if (!ok) {
      if (c->bad++ == 0) {
        c->first_bad_line = line;
        c->first_bad = error;
      }
      return;
    }
    c->any_good = true;
    if (trainscope) {
      c->end_reason = type == "end" ? std::string(reason) : std::string();
      if (type == "end") return;
      if (type == "nonfinite" && r.has_step) {
        // The trainer stops at a non-finite step without a step record: the loss of that
        // step is the non-finite value (of the next one when the optimizer step made the
        // weights non-finite after a finite loss).
        JsonlRecord nf{phase == "optimizer" ? r.step + 1 : r.step,
                       true,
                       {true, false, false, false},
                       {kNaN, 0, 0, 0}};
        c->records.push_back(nf);
        return;
      }
      if (type != "step") return;  // header, layer_norms, spike, error, summary
    }
    if (!r.has[kLoss] && !r.has[kVal] && !r.has[kLr] && !r.has[kGrad]) return;
    c->records.push_back(r);
  });
}

// JSONL is parsed in chunks of whole lines, on up to kJsonlMaxThreads threads for a big file
// (a 1M-line metrics log is ~400 MB); records are then numbered into steps in file order, so
// the result is the same as one pass (readers_test checks it).
constexpr int kJsonlMaxThreads = 4;
constexpr size_t kJsonlBytesPerThread = 32 << 20;

absl::StatusOr<Series> ParseJsonl(std::string_view path, std::string_view text, bool trainscope,
                                  int chunks) {
  SeriesBuilder b(path, trainscope ? "trainscope_metrics" : "jsonl");
  Series& s = b.series();
  std::vector<JsonlChunk> parts(static_cast<size_t>(std::max(1, chunks)));
  size_t begin = 0;
  for (size_t k = 0; k < parts.size(); ++k) {
    size_t end = k + 1 == parts.size() ? text.size() : text.size() * (k + 1) / parts.size();
    if (end < begin) end = begin;
    if (end < text.size()) {
      size_t nl = text.find('\n', end);
      end = nl == std::string_view::npos ? text.size() : nl + 1;
    }
    parts[k].text = text.substr(begin, end - begin);
    begin = end;
  }
  if (parts.size() == 1) {
    ParseJsonlChunk(trainscope, &parts[0]);
  } else {
    std::vector<std::thread> threads;
    for (size_t k = 1; k < parts.size(); ++k)
      threads.emplace_back(ParseJsonlChunk, trainscope, &parts[k]);
    ParseJsonlChunk(trainscope, &parts[0]);
    for (std::thread& t : threads) t.join();
  }
  size_t total = 0;
  for (const JsonlChunk& c : parts) total += c.records.size();
  b.Reserve(total);
  int64_t line_base = 0;
  for (JsonlChunk& c : parts) {
    s.records += c.parsed;
    if (c.bad > 0) {
      b.BadLine(line_base + c.first_bad_line, c.first_bad);
      s.bad_records += c.bad - 1;
    }
    if (c.rank >= 0) s.rank = c.rank;
    if (c.any_good) s.end_reason = c.end_reason;
    for (const JsonlRecord& r : c.records) {
      int64_t st = b.NextStep(r.has_step, r.step);
      for (int m = 0; m < kNumMetrics; ++m)
        if (r.has[m]) b.Add(static_cast<Metric>(m), st, r.vals[m]);
    }
    std::vector<JsonlRecord>().swap(c.records);
    // A chunk ends with a newline (but the last), so line numbers continue across chunks.
    line_base += c.lines;
  }
  return b.Finish();
}

absl::StatusOr<Series> ParseJsonl(std::string_view path, std::string_view text, bool trainscope) {
  int threads = static_cast<int>(
      std::min<size_t>({static_cast<size_t>(kJsonlMaxThreads),
                        static_cast<size_t>(std::max(1u, std::thread::hardware_concurrency())),
                        text.size() / kJsonlBytesPerThread + 1}));
  return ParseJsonl(path, text, trainscope, threads);
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

absl::StatusOr<Series> ParseCsv(std::string_view path, std::string_view text) {
  SeriesBuilder b(path, "csv");
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
      b.BadLine(line, absl::StrCat(f.size(), " fields, the header has ", col_metric.size()));
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
      b.BadLine(line, "a field is not a number");
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

absl::StatusOr<Series> ParseTrainerState(std::string_view path, std::string_view text) {
  SeriesBuilder b(path, "trainer_state");
  Series& s = b.series();
  absl::StatusOr<nlohmann::json> parsed =
      ParseJsonText(internal::QuoteNonFiniteTokens(text), kJsonMaxDepth, std::string(path));
  if (!parsed.ok()) return parsed.status();
  nlohmann::json doc = *std::move(parsed);
  if (!doc.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(path), ": not a JSON object"));
  }
  auto hist = doc.find("log_history");
  if (hist == doc.end() || !hist->is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(path), ": no log_history array"));
  }
  int64_t index = 0;
  for (const nlohmann::json& e : *hist) {
    ++index;
    ++s.records;
    if (!e.is_object()) {
      b.BadLine(index, "log_history entry is not an object");
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

namespace internal {
absl::StatusOr<Series> ParseJsonlInChunks(std::string_view path, std::string_view text,
                                          bool trainscope, int chunks) {
  return ParseJsonl(path, text, trainscope, chunks);
}
}  // namespace internal

bool ReadWholeFile(const std::string& path, std::string* out, Os* os) {
  absl::StatusOr<std::string> bytes = os->ReadFile(path);
  if (!bytes.ok()) return false;
  *out = *std::move(bytes);
  return true;
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
    case FileKind::kTensorBoard:
      return "tensorboard";
    case FileKind::kMegatronLog:
      return "megatron_log";
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
      {"lm_loss_validation", "val_loss"},  // Megatron-LM's TensorBoard tag
      {"lr", "lr"},
      {"learning_rate", "lr"},
      {"train_learning_rate", "lr"},  // HF Trainer's TensorBoard tag train/learning_rate
      {"train_lr", "lr"},
      {"grad_norm", "grad_norm"},
      {"gradient_norm", "grad_norm"},
      {"grad_norm_total", "grad_norm"},
      {"global_grad_norm", "grad_norm"},
      {"train_grad_norm", "grad_norm"},
  };
  for (const auto& [k, v] : kNames)
    if (n == k) return v;
  return "";
}

FileKind DetectKind(const std::string& path, const std::string& head) {
  std::string base = absl::AsciiStrToLower(BaseName(path));
  // TensorBoard names its files events.out.tfevents.<time>.<host>[.<pid>.<n>][suffix].
  if (absl::StrContains(base, "tfevents")) return FileKind::kTensorBoard;
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
  if (absl::EndsWith(base, ".log") || absl::EndsWith(base, ".txt") ||
      absl::EndsWith(base, ".out") || absl::EndsWith(base, ".err")) {
    if (internal::LooksLikeMegatronLog(head)) return FileKind::kMegatronLog;
  }
  return FileKind::kUnknown;
}

absl::StatusOr<Series> ParseSeries(std::string_view path, FileKind kind, std::string_view text) {
  switch (kind) {
    case FileKind::kTrainscopeMetrics:
      return ParseJsonl(path, text, true);
    case FileKind::kJsonl:
      return ParseJsonl(path, text, false);
    case FileKind::kCsv:
      return ParseCsv(path, text);
    case FileKind::kTrainerState:
      return ParseTrainerState(path, text);
    case FileKind::kTensorBoard:
      return internal::ParseTensorBoard(path, text);
    case FileKind::kMegatronLog:
      return internal::ParseMegatronLog(path, text);
    case FileKind::kUnknown:
      break;
  }
  return absl::InvalidArgumentError(absl::StrCat(std::string(path), ": not a metrics file"));
}

bool FileBytes::Open(const std::string& path, Os* os) {
  absl::StatusOr<std::unique_ptr<FileBytesView>> bytes = os->MapFile(path);
  if (!bytes.ok()) return false;
  bytes_ = *std::move(bytes);
  return true;
}

absl::StatusOr<Series> ReadSeries(const std::string& path, Os* os) {
  FileBytes bytes;
  if (!bytes.Open(path, os)) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  const std::string_view text = bytes.view();
  FileKind kind = DetectKind(path, std::string(text.substr(0, 4096)));
  if (kind == FileKind::kUnknown) {
    return absl::InvalidArgumentError(absl::StrCat(
        path,
        ": not a metrics file diagnose reads (metrics JSONL, CSV with a loss column, "
        "trainer_state.json, trainscope metrics.rank<R>.jsonl, TensorBoard events.out.tfevents.*, "
        "a Megatron-LM log)"));
  }
  return ParseSeries(path, kind, text);
}

}  // namespace trainscope::diagnose
