// Reading a trainscope metrics file for drawing, and min/max downsampling.
//
// A metrics file can hold millions of step records; they are parsed with simdjson's DOM
// parser (the other record types, a handful per run, with nlohmann). Every figure drawn is a
// record's own value: downsampling picks records, it never averages them.
#include "report/metrics.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <iterator>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "simdjson.h"
#include "trainscope/core/json_text.h"

namespace trainscope::report {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
// A value that was logged but is not finite (written as null): kept as a point, so its step is
// on the chart's axis and its markers are drawn, but drawn as a gap (SeriesToJson: null).
constexpr double kNonFinite = std::numeric_limits<double>::infinity();

// A number, or NaN for null, a missing key or another type.
double ReportNum(const simdjson::dom::element& obj, std::string_view key) {
  simdjson::dom::element v;
  if (obj[key].get(v) != simdjson::SUCCESS) return kNaN;
  double d = 0;
  if (v.get_double().get(d) == simdjson::SUCCESS) return d;
  int64_t i = 0;
  if (v.get_int64().get(i) == simdjson::SUCCESS) return static_cast<double>(i);
  return kNaN;
}

// 8 significant digits: what a float loss carries, and JSON stays short.
double ReportRound(double v) {
  if (!std::isfinite(v) || v == 0) return v;
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.8g", v);
  return std::strtod(buf, nullptr);
}

// The series columns of a rank, in the order of RankMetrics::Totals' arrays: the column, its
// name in the report, its key in a step record, and whether null there means a non-finite
// value (the writers' Finite()), not an unknown one.
struct ReportSeries {
  std::vector<double> RankMetrics::*column;
  const char* name;
  const char* key;
  bool null_is_nonfinite = false;
};
constexpr ReportSeries kReportSeries[9] = {
    {&RankMetrics::loss, "loss", "loss", true},
    {&RankMetrics::val_loss, "val_loss", "val_loss", true},
    {&RankMetrics::lr, "lr", "lr"},
    {&RankMetrics::grad_norm, "grad_norm", "grad_norm", true},
    {&RankMetrics::step_ms, "step_ms", "step_ms"},
    {&RankMetrics::tokens_per_s, "tokens_per_s", "tokens_per_s"},
    {&RankMetrics::comm_ms, "comm_ms", "comm_ms"},
    {&RankMetrics::host_rss_bytes, "host_rss_bytes", "host_rss_bytes"},
    {&RankMetrics::device_mem_bytes, "device_mem_bytes", "device_mem_allocated_bytes"}};

template <typename M>  // RankMetrics or const RankMetrics
auto ReportSeriesColumns(M& m) {
  std::vector<decltype(&(m.*kReportSeries[0].column))> cols;
  for (const ReportSeries& s : kReportSeries) cols.push_back(&(m.*s.column));
  return cols;
}

int RankFromFileName(const std::string& path) {
  std::string name = std::filesystem::path(path).filename().string();
  size_t p = name.find("rank");
  if (p == std::string::npos) return -1;
  int r = -1;
  if (std::sscanf(name.c_str() + p + 4, "%d", &r) != 1) return -1;
  return r;
}

std::string EventText(const nlohmann::json& j, const std::string& type) {
  if (type == "spike") {
    return absl::StrFormat("loss spike %.4g > threshold %.4g (median %.4g, rule %s)",
                           JsonValueOr(j, "loss", 0.0), JsonValueOr(j, "threshold", 0.0),
                           JsonValueOr(j, "median", 0.0), JsonValueOr(j, "rule", std::string()));
  }
  if (type == "nonfinite") {
    return absl::StrCat("non-finite values: phase ", JsonValueOr(j, "phase", std::string()),
                        ", module ", JsonValueOr(j, "module", std::string()), ", class ",
                        JsonValueOr(j, "class", std::string()));
  }
  if (type == "checkpoint") return "anomaly checkpoint " + JsonValueOr(j, "path", std::string());
  if (type == "loss_scale") {
    return absl::StrFormat("loss scale %g -> %g", JsonValueOr(j, "scale", 0.0),
                           JsonValueOr(j, "next_scale", 0.0));
  }
  if (type == "error") return JsonValueOr(j, "message", std::string());
  return type;
}

// One value of a user scalar at `step`: appended when the step is past the last one (a run
// going on), else put in its place, replacing a value logged for that step before.
void AddUserScalar(RankMetrics* m, std::string_view name, int64_t step, double v) {
  auto it = m->scalars.find(name);
  if (it == m->scalars.end()) {
    if (m->scalars.size() >= kMaxUserScalars) {
      ++m->scalars_dropped;
      return;
    }
    it = m->scalars.emplace(std::string(name), RankMetrics::UserScalar()).first;
  }
  RankMetrics::UserScalar& s = it->second;
  if (s.steps.empty() || step > s.steps.back()) {
    s.steps.push_back(step);
    s.values.push_back(v);
    return;
  }
  auto pos = std::lower_bound(s.steps.begin(), s.steps.end(), step);
  const size_t i = static_cast<size_t>(pos - s.steps.begin());
  if (*pos == step) {
    s.values[i] = v;
  } else {
    s.steps.insert(pos, step);
    s.values.insert(s.values.begin() + static_cast<std::ptrdiff_t>(i), v);
  }
}

// The numbers (and nulls: logged non-finite) of a record's "scalars" object; other values
// (strings, objects) are not drawable and left out.
void AddUserScalars(RankMetrics* m, const simdjson::dom::element& record, int64_t step) {
  simdjson::dom::object obj;
  if (record["scalars"].get(obj) != simdjson::SUCCESS) return;
  for (auto field : obj) {
    if (field.value.is_null()) {
      AddUserScalar(m, field.key, step, kNonFinite);
      continue;
    }
    double d = 0;
    int64_t i = 0;
    if (field.value.get_double().get(d) == simdjson::SUCCESS) {
      AddUserScalar(m, field.key, step, d);
    } else if (field.value.get_int64().get(i) == simdjson::SUCCESS) {
      AddUserScalar(m, field.key, step, static_cast<double>(i));
    } else if (bool b = false; field.value.get_bool().get(b) == simdjson::SUCCESS) {
      AddUserScalar(m, field.key, step, b ? 1.0 : 0.0);
    }
  }
}

}  // namespace

const std::vector<std::string>& PhaseNames() {
  static const std::vector<std::string> kNames = {"data_wait", "h2d",       "forward",
                                                  "backward",  "comm_wait", "optimizer"};
  return kNames;
}

std::vector<size_t> DownsampleMinMax(const std::vector<double>& y, size_t max_points,
                                     const std::vector<size_t>& keep) {
  std::vector<size_t> out;
  const size_t n = y.size();
  auto valid = [&](size_t i) { return i < n && !std::isnan(y[i]); };
  if (n <= std::max<size_t>(max_points, 2)) {
    for (size_t i = 0; i < n; ++i) {
      if (valid(i)) out.push_back(i);
    }
    return out;
  }
  // Buckets of consecutive points; the min and max of each, in index order.
  const size_t buckets = std::max<size_t>(max_points / 2, 1);
  for (size_t b = 0; b < buckets; ++b) {
    size_t lo = b * n / buckets, hi = (b + 1) * n / buckets;
    size_t imin = n, imax = n;
    for (size_t i = lo; i < hi; ++i) {
      if (!valid(i)) continue;
      if (imin == n || y[i] < y[imin]) imin = i;
      if (imax == n || y[i] > y[imax]) imax = i;
    }
    if (imin != n) out.push_back(imin);
    if (imax != n && imax != imin) out.push_back(imax);
  }
  for (size_t i = 0; i < n; ++i) {  // the first valid point
    if (valid(i)) {
      out.push_back(i);
      break;
    }
  }
  for (size_t i = n; i-- > 0;) {  // the last valid point
    if (valid(i)) {
      out.push_back(i);
      break;
    }
  }
  for (size_t i : keep) {
    if (valid(i)) out.push_back(i);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

nlohmann::json SeriesToJson(const std::vector<int64_t>& steps, const std::vector<double>& y,
                            size_t max_points, const std::vector<size_t>& keep) {
  nlohmann::json x = nlohmann::json::array(), v = nlohmann::json::array();
  size_t n_valid = 0;
  for (double d : y) n_valid += std::isnan(d) ? 0 : 1;
  for (size_t i : DownsampleMinMax(y, max_points, keep)) {
    x.push_back(steps[i]);
    v.push_back(std::isfinite(y[i]) ? nlohmann::json(ReportRound(y[i])) : nlohmann::json());
  }
  return {{"x", std::move(x)}, {"y", std::move(v)}, {"n", n_valid}};
}

// --- RankMetricsReader ---------------------------------------------------------------------
// The state after reading bytes [0, offset_) is exactly what a whole-file read of those bytes
// gives, so reading on from offset_ only needs the appended lines. Steps are kept sorted with
// the last record of a step winning: appended records that continue the steps are pushed at
// the end; any other batch (a resumed run writing earlier steps again) is sorted stably and
// merged, the batch winning ties, which is the whole-file read's stable sort over file order.

struct RankMetricsReader::Row {
  int64_t step;
  double v[9];
  double phase[6];
};

namespace {

constexpr size_t kReaderChunkBytes = 8u << 20;
constexpr size_t kReaderCheckBytes = 64;

// Up to n bytes at off; what could be read (a read error ends the bytes there).
std::string ReaderPread(const RandomAccessFile& f, uint64_t off, size_t n) {
  std::string out;
  f.Read(off, n, &out).IgnoreError();
  return out;
}

}  // namespace

RankMetricsReader::RankMetricsReader(std::string path, Os* os) : path_(std::move(path)), os_(os) {
  Reset();
}

void RankMetricsReader::Reset() {
  m_ = RankMetrics();
  m_.file = path_;
  m_.rank = RankFromFileName(path_);
  m_.phases.assign(PhaseNames().size(), {});
  offset_ = 0;
  open_line_ = false;
  lines_done_ = 0;
  tail_pending_ = false;
  tail_size_ = 0;
  head_.clear();
  last_.clear();
  first_nonfinite_seen_ = false;
}

bool RankMetricsReader::SameFileAsBefore(const RandomAccessFile& f, uint64_t dev, uint64_t ino,
                                         uint64_t size) {
  if (dev != dev_ || ino != ino_ || size < offset_) return false;
  if (offset_ == 0) return true;
  return ReaderPread(f, 0, head_.size()) == head_ &&
         ReaderPread(f, offset_ - last_.size(), last_.size()) == last_;
}

bool RankMetricsReader::Update() {
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> opened = os_->NewRandomAccessFile(path_);
  if (!opened.ok()) {
    Reset();
    m_.malformed_examples.push_back(path_ + ": cannot open");
    opened_ = false;
    ++version_;
    return false;
  }
  const RandomAccessFile& f = **opened;
  const uint64_t size = f.info().size_bytes, dev = f.info().device, ino = f.info().inode;
  bool fresh = !opened_ || !SameFileAsBefore(f, dev, ino, size);
  if (!fresh && size == offset_ + tail_size_) return true;  // nothing appended
  // A last line taken without its newline: the next byte must be that newline, else the
  // line went on and reads differently now.
  if (!fresh && open_line_ && size > offset_) {
    if (ReaderPread(f, offset_, 1) == "\n") {
      ++offset_;
      open_line_ = false;
    } else {
      fresh = true;
    }
  }
  if (fresh) {
    Reset();
    ++full_reads_;
  }
  return ReadOn(dev, ino, size, [&](uint64_t off, size_t n) { return ReaderPread(f, off, n); });
}

bool RankMetricsReader::UpdateFromBytes(std::string_view bytes, uint64_t dev, uint64_t ino) {
  Reset();
  ++full_reads_;
  return ReadOn(dev, ino, bytes.size(),
                [&](uint64_t off, size_t n) { return std::string(bytes.substr(off, n)); });
}

bool RankMetricsReader::ReadOn(uint64_t dev, uint64_t ino, uint64_t size,
                               const std::function<std::string(uint64_t, size_t)>& read) {
  opened_ = true;
  dev_ = dev;
  ino_ = ino;
  m_.lines = lines_done_;
  m_.truncated_last_line = false;
  tail_pending_ = false;
  tail_size_ = 0;
  simdjson::dom::parser parser;
  // The shared nesting limit (core/json_text.h): a line nested deeper is malformed, counted.
  // The capacity grows with the longest line (parse(..., realloc_if_needed=true)).
  if (parser.allocate(4096, kJsonMaxDepth) != simdjson::SUCCESS) return false;
  std::vector<Row> rows;
  std::string buf;  // bytes from offset_ not yet parsed
  uint64_t pos = offset_;
  while (pos < size) {
    std::string chunk = read(pos, std::min<uint64_t>(kReaderChunkBytes, size - pos));
    if (chunk.empty()) break;  // shrank while read: the next Update() sees it
    pos += chunk.size();
    buf += chunk;
    size_t start = 0;
    for (size_t nl; (nl = buf.find('\n', start)) != std::string::npos; start = nl + 1) {
      ParseLine(&parser, std::string_view(buf).substr(start, nl - start), false, &rows);
    }
    offset_ += start;
    bytes_parsed_ += static_cast<int64_t>(start);
    buf.erase(0, start);
    MergeRows(&rows);  // per chunk: a million-step file never holds all its rows twice
    rows.clear();
  }
  if (!buf.empty()) {  // a last line without newline
    bytes_parsed_ += static_cast<int64_t>(buf.size());
    if (ParseLine(&parser, buf, true, &rows)) {
      offset_ += buf.size();
      open_line_ = true;
    } else {
      tail_pending_ = true;
      tail_size_ = buf.size();
    }
  }
  MergeRows(&rows);
  UpdateTotals(&m_);
  lines_done_ = m_.lines;
  if (tail_pending_) {
    ++m_.lines;
    m_.truncated_last_line = true;  // a writer mid-line (a live or killed run)
  }
  head_ = read(0, std::min<uint64_t>(kReaderCheckBytes, offset_));
  const uint64_t n_last = std::min<uint64_t>(kReaderCheckBytes, offset_);
  last_ = read(offset_ - n_last, n_last);
  ++version_;
  return true;
}

bool RankMetricsReader::ParseLine(simdjson::dom::parser* parser, std::string_view line,
                                  bool unterminated, std::vector<Row>* rows) {
  RankMetrics* out = &m_;
  ++out->lines;
  if (line.empty()) return true;
  auto bad = [&](const std::string& why) {
    ++out->malformed;
    if (out->malformed_examples.size() < 5) {
      out->malformed_examples.push_back(absl::StrCat(path_, ":", out->lines, ": ", why));
    }
  };
  simdjson::dom::element doc;
  if (parser->parse(line.data(), line.size(), true).get(doc) != simdjson::SUCCESS ||
      !doc.is_object()) {
    if (unterminated) {
      --out->lines;  // not taken: read again when its newline arrives
      return false;
    }
    bad("not a JSON object");
    return true;
  }
  std::string_view type;
  if (doc["type"].get(type) != simdjson::SUCCESS) type = "step";  // user jobs' plain lines
  if (type == "step") {
    int64_t step = 0;
    simdjson::dom::element s;
    if (doc["step"].get(s) != simdjson::SUCCESS || s.get_int64().get(step) != simdjson::SUCCESS) {
      bad("step record without an integer \"step\"");
      return true;
    }
    const auto& phase_names = PhaseNames();
    Row r;
    r.step = step;
    for (size_t c = 0; c < std::size(kReportSeries); ++c) {
      r.v[c] = ReportNum(doc, kReportSeries[c].key);
      simdjson::dom::element v;
      if (kReportSeries[c].null_is_nonfinite &&
          doc[kReportSeries[c].key].get(v) == simdjson::SUCCESS && v.is_null())
        r.v[c] = kNonFinite;
    }
    simdjson::dom::element ph;
    bool has_phases = doc["phases_ms"].get(ph) == simdjson::SUCCESS && ph.is_object();
    for (size_t k = 0; k < phase_names.size(); ++k) {
      r.phase[k] = has_phases ? ReportNum(ph, phase_names[k]) : kNaN;
    }
    // Non-finite values are written as null (docs/formats.md); the first one is an event.
    bool null_loss = false;
    simdjson::dom::element lv;
    if (doc["loss"].get(lv) == simdjson::SUCCESS && lv.is_null()) null_loss = true;
    if (doc["grad_norm"].get(lv) == simdjson::SUCCESS && lv.is_null()) null_loss = true;
    if (null_loss && !first_nonfinite_seen_) {
      first_nonfinite_seen_ = true;
      out->events.push_back({{"kind", "first_nonfinite"},
                             {"step", step},
                             {"rank", out->rank},
                             {"text", "first non-finite loss or grad norm"}});
    }
    AddUserScalars(out, doc, step);
    rows->push_back(r);
    return true;
  }
  if (type == "scalars") {  // mon.log(step=..., ...): values logged after or between steps
    int64_t step = 0;
    simdjson::dom::element s;
    if (doc["step"].get(s) != simdjson::SUCCESS || s.get_int64().get(step) != simdjson::SUCCESS) {
      bad("scalars record without an integer \"step\"");
      return true;
    }
    AddUserScalars(out, doc, step);
    return true;
  }
  nlohmann::json j;
  if (!ParseJsonRecord(line, &j)) {  // simdjson passed it; the shared policy decides too
    bad("not a JSON object");
    return true;
  }
  const std::string t(type);
  if (t == "header") {
    out->rank = JsonValueOr(j, "rank", out->rank);
    out->world_size = JsonValueOr(j, "world_size", out->world_size);
  } else if (t == "end") {
    out->end_reason = JsonValueOr(j, "reason", std::string());
  } else if (t == "summary") {
    out->summary = j;
  } else if (t == "nonfinite") {
    NonfiniteStepRow(j, rows);
  }
  if (t == "spike" || t == "nonfinite" || t == "error" || t == "loss_scale" ||
      (t == "checkpoint" && JsonValueOr(j, "anomaly", false))) {
    out->events.push_back({{"kind", t == "checkpoint" ? "anomaly_checkpoint" : t},
                           {"step", JsonValueOr(j, "step", int64_t{0})},
                           {"rank", JsonValueOr(j, "rank", out->rank)},
                           {"text", EventText(j, t)}});
  }
  return true;
}

// The step a nonfinite record stops at, put on the axis as diagnose counts it: the trainer
// and trainscope.watch stop there without a step record, so that step's loss is the
// non-finite value (the next step's when the optimizer step made the weights non-finite after
// a finite loss). A step that has a record of its own keeps it.
void RankMetricsReader::NonfiniteStepRow(const nlohmann::json& j, std::vector<Row>* rows) {
  if (!j.contains("step") || !j["step"].is_number_integer()) return;
  const int64_t step =
      j["step"].get<int64_t>() + (JsonValueOr(j, "phase", std::string()) == "optimizer" ? 1 : 0);
  if (std::binary_search(m_.steps.begin(), m_.steps.end(), step)) return;
  for (const Row& r : *rows) {
    if (r.step == step) return;
  }
  Row r;
  r.step = step;
  std::fill(std::begin(r.v), std::end(r.v), kNaN);
  std::fill(std::begin(r.phase), std::end(r.phase), kNaN);
  r.v[0] = kNonFinite;  // loss
  rows->push_back(r);
}

void RankMetricsReader::MergeRows(std::vector<Row>* rows) {
  if (rows->empty()) return;
  const auto cols = ReportSeriesColumns(m_);
  const size_t n_phases = m_.phases.size();
  bool in_order = m_.steps.empty() || rows->front().step > m_.steps.back();
  for (size_t i = 1; in_order && i < rows->size(); ++i)
    in_order = (*rows)[i].step > (*rows)[i - 1].step;
  if (in_order) {  // the usual case: the run goes on
    for (const Row& r : *rows) {
      m_.steps.push_back(r.step);
      for (size_t c = 0; c < cols.size(); ++c) cols[c]->push_back(r.v[c]);
      for (size_t k = 0; k < n_phases; ++k) m_.phases[k].push_back(r.phase[k]);
    }
    return;
  }
  // The batch sorted, the last record of a step kept, then merged with the steps so far.
  std::stable_sort(rows->begin(), rows->end(),
                   [](const Row& a, const Row& b) { return a.step < b.step; });
  RankMetrics merged;
  merged.phases.assign(n_phases, {});
  const auto out_cols = ReportSeriesColumns(merged);
  const size_t n = m_.steps.size();
  size_t i = 0;
  for (size_t j = 0; j < rows->size(); ++j) {
    if (j + 1 < rows->size() && (*rows)[j + 1].step == (*rows)[j].step) continue;
    const Row& r = (*rows)[j];
    for (; i < n && m_.steps[i] <= r.step; ++i) {
      if (m_.steps[i] == r.step) continue;  // replaced by the later record
      merged.steps.push_back(m_.steps[i]);
      for (size_t c = 0; c < cols.size(); ++c) out_cols[c]->push_back((*cols[c])[i]);
      for (size_t k = 0; k < n_phases; ++k) merged.phases[k].push_back(m_.phases[k][i]);
    }
    merged.steps.push_back(r.step);
    for (size_t c = 0; c < cols.size(); ++c) out_cols[c]->push_back(r.v[c]);
    for (size_t k = 0; k < n_phases; ++k) merged.phases[k].push_back(r.phase[k]);
  }
  for (; i < n; ++i) {
    merged.steps.push_back(m_.steps[i]);
    for (size_t c = 0; c < cols.size(); ++c) out_cols[c]->push_back((*cols[c])[i]);
    for (size_t k = 0; k < n_phases; ++k) merged.phases[k].push_back(m_.phases[k][i]);
  }
  m_.steps = std::move(merged.steps);
  for (size_t c = 0; c < cols.size(); ++c) *cols[c] = std::move(*out_cols[c]);
  m_.phases = std::move(merged.phases);
  m_.totals = RankMetrics::Totals();  // steps moved: counted again
}

namespace {

// Counts steps [totals->upto, steps) into *totals.
void ExtendTotals(const RankMetrics& rm, RankMetrics::Totals* totals) {
  const RankMetrics* m = &rm;
  RankMetrics::Totals& t = *totals;
  const std::vector<const std::vector<double>*> cols = ReportSeriesColumns(*m);
  const size_t n = m->steps.size(), n_phases = m->phases.size();
  if (t.upto > n) t = RankMetrics::Totals();
  t.phase_sum.resize(n_phases, 0.0);
  t.phase_total.resize(n);
  for (size_t c = 0; c < cols.size(); ++c) {
    const std::vector<double>& y = *cols[c];
    for (size_t i = t.upto; i < n; ++i) {
      t.valid[c] += std::isnan(y[i]) ? 0 : 1;
      if (std::isfinite(y[i])) t.sum[c] += y[i], ++t.finite[c];
    }
  }
  for (size_t i = t.upto; i < n; ++i) {
    double total = 0;
    bool any = false;
    for (size_t k = 0; k < n_phases; ++k) {
      const double d = m->phases[k][i];
      if (!std::isnan(d)) total += d, any = true;
      t.phase_sum[k] += std::isfinite(d) ? d : 0;
    }
    t.phase_total[i] = any ? total : kNaN;
    // Busy time: the step less the wait for the other ranks in communication.
    if (n_phases > 4 && std::isfinite(m->step_ms[i]) && std::isfinite(m->phases[4][i]))
      t.busy_sum += m->step_ms[i] - m->phases[4][i], ++t.busy_n;
  }
  t.upto = n;
}

}  // namespace

void UpdateTotals(RankMetrics* m) { ExtendTotals(*m, &m->totals); }

nlohmann::json RankMetricsToJson(const RankMetrics& m, size_t max_points) {
  RankMetrics::Totals local;
  const RankMetrics::Totals* t = &m.totals;
  if (m.totals.upto != m.steps.size()) {  // not kept up to date by a reader: counted here
    ExtendTotals(m, &local);
    t = &local;
  }
  // Indices of the steps with an event: always drawn.
  std::vector<size_t> keep;
  for (const auto& e : m.events) {
    int64_t s = JsonValueOr(e, "step", int64_t{-1});
    auto it = std::lower_bound(m.steps.begin(), m.steps.end(), s);
    if (it != m.steps.end() && *it == s) keep.push_back(it - m.steps.begin());
  }
  nlohmann::json series = nlohmann::json::object();
  nlohmann::json means = nlohmann::json::object();
  const std::vector<const std::vector<double>*> cols = ReportSeriesColumns(m);
  for (size_t c = 0; c < cols.size(); ++c) {
    if (t->valid[c] == 0) continue;
    const char* name = kReportSeries[c].name;
    series[name] = SeriesToJson(m.steps, *cols[c], max_points, keep);
    if (t->finite[c]) means[name] = ReportRound(t->sum[c] / t->finite[c]);
  }
  // Phases share one x axis (they are drawn stacked): the points picked on their total.
  nlohmann::json phases = nlohmann::json::object();
  const auto& names = PhaseNames();
  std::vector<size_t> idx = DownsampleMinMax(t->phase_total, max_points, keep);
  if (!idx.empty()) {
    nlohmann::json x = nlohmann::json::array();
    for (size_t i : idx) x.push_back(m.steps[i]);
    phases["x"] = std::move(x);
    for (size_t k = 0; k < names.size(); ++k) {
      nlohmann::json v = nlohmann::json::array();
      for (size_t i : idx) {
        double d = m.phases[k][i];
        v.push_back(std::isfinite(d) ? nlohmann::json(ReportRound(d)) : nlohmann::json(0));
      }
      phases[names[k]] = std::move(v);
      means["phase." + names[k]] =
          m.steps.empty() ? 0.0 : ReportRound(t->phase_sum[k] / m.steps.size());
    }
    // Busy time: the step less the wait for the other ranks in communication. The rank the
    // others wait for has the longest busy time (its step time is the same as theirs).
    if (t->busy_n) means["busy_ms"] = ReportRound(t->busy_sum / t->busy_n);
  }
  // The user's scalars; a "val_loss" is the validation loss the loss chart draws when the
  // step records carry none (trainscope train's do).
  nlohmann::json scalars = nlohmann::json::object();
  for (const auto& [name, s] : m.scalars) {
    scalars[name] = SeriesToJson(s.steps, s.values, max_points);
    if (name == "val_loss" && !series.contains("val_loss")) series["val_loss"] = scalars[name];
  }
  return {{"rank", m.rank},
          {"world_size", m.world_size},
          {"scalars", std::move(scalars)},
          {"scalars_dropped", m.scalars_dropped},
          {"lines", m.lines},
          {"malformed", m.malformed},
          {"truncated_last_line", m.truncated_last_line},
          {"steps", m.steps.size()},
          {"first_step", m.steps.empty() ? 0 : m.steps.front()},
          {"last_step", m.steps.empty() ? 0 : m.steps.back()},
          {"end_reason", m.end_reason},
          {"series", std::move(series)},
          {"phases", std::move(phases)},
          {"means", std::move(means)}};
}

}  // namespace trainscope::report
