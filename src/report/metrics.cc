// Reading a trainscope metrics file for drawing, and min/max downsampling.
//
// A metrics file can hold millions of step records; they are parsed with simdjson's DOM
// parser (the other record types, a handful per run, with nlohmann). Every figure drawn is a
// record's own value: downsampling picks records, it never averages them.
#include "report/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "simdjson.h"

namespace trainscope::report {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

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
                           j.value("loss", 0.0), j.value("threshold", 0.0), j.value("median", 0.0),
                           j.value("rule", std::string()));
  }
  if (type == "nonfinite") {
    return absl::StrCat("non-finite values: phase ", j.value("phase", std::string()), ", module ",
                        j.value("module", std::string()), ", class ",
                        j.value("class", std::string()));
  }
  if (type == "checkpoint") return "anomaly checkpoint " + j.value("path", std::string());
  if (type == "loss_scale") {
    return absl::StrFormat("loss scale %g -> %g", j.value("scale", 0.0),
                           j.value("next_scale", 0.0));
  }
  if (type == "error") return j.value("message", std::string());
  return type;
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

bool ReadRankMetrics(const std::string& path, RankMetrics* out) {
  *out = RankMetrics();
  out->file = path;
  out->rank = RankFromFileName(path);
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    out->malformed_examples.push_back(path + ": cannot open");
    return false;
  }
  // Raw step records, in file order; sorted and de-duplicated at the end.
  struct Row {
    int64_t step;
    double v[10];
    double phase[6];
  };
  std::vector<Row> rows;
  const auto& phase_names = PhaseNames();
  simdjson::dom::parser parser;
  std::string line;
  bool first_nonfinite_seen = false;
  auto bad = [&](const std::string& why) {
    ++out->malformed;
    if (out->malformed_examples.size() < 5) {
      out->malformed_examples.push_back(absl::StrCat(path, ":", out->lines, ": ", why));
    }
  };
  while (std::getline(in, line)) {
    ++out->lines;
    const bool no_newline = in.eof();
    if (line.empty()) continue;
    simdjson::dom::element doc;
    if (parser.parse(line.data(), line.size(), true).get(doc) != simdjson::SUCCESS ||
        !doc.is_object()) {
      if (no_newline) {
        out->truncated_last_line = true;  // a writer mid-line (a live or killed run)
      } else {
        bad("not a JSON object");
      }
      continue;
    }
    std::string_view type;
    if (doc["type"].get(type) != simdjson::SUCCESS) type = "step";  // user jobs' plain lines
    if (type == "step") {
      int64_t step = 0;
      simdjson::dom::element s;
      if (doc["step"].get(s) != simdjson::SUCCESS || s.get_int64().get(step) != simdjson::SUCCESS) {
        bad("step record without an integer \"step\"");
        continue;
      }
      Row r;
      r.step = step;
      r.v[0] = ReportNum(doc, "loss");
      r.v[1] = ReportNum(doc, "val_loss");
      r.v[2] = ReportNum(doc, "lr");
      r.v[3] = ReportNum(doc, "grad_norm");
      r.v[4] = ReportNum(doc, "step_ms");
      r.v[5] = ReportNum(doc, "tokens_per_s");
      r.v[6] = ReportNum(doc, "comm_ms");
      r.v[7] = ReportNum(doc, "host_rss_bytes");
      r.v[8] = ReportNum(doc, "device_mem_allocated_bytes");
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
      if (null_loss && !first_nonfinite_seen) {
        first_nonfinite_seen = true;
        out->events.push_back({{"kind", "first_nonfinite"},
                               {"step", step},
                               {"rank", out->rank},
                               {"text", "first non-finite loss or grad norm"}});
      }
      rows.push_back(r);
      continue;
    }
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    const std::string t(type);
    if (t == "header") {
      out->rank = j.value("rank", out->rank);
      out->world_size = j.value("world_size", out->world_size);
    } else if (t == "end") {
      out->end_reason = j.value("reason", std::string());
    } else if (t == "summary") {
      out->summary = j;
    } else if (t == "spike" || t == "nonfinite" || t == "error" || t == "loss_scale" ||
               (t == "checkpoint" && j.value("anomaly", false))) {
      out->events.push_back({{"kind", t == "checkpoint" ? "anomaly_checkpoint" : t},
                             {"step", j.value("step", int64_t{0})},
                             {"rank", j.value("rank", out->rank)},
                             {"text", EventText(j, t)}});
    }
  }
  // The last record of a step wins (a resumed run appends its steps again).
  std::stable_sort(rows.begin(), rows.end(),
                   [](const Row& a, const Row& b) { return a.step < b.step; });
  std::vector<std::vector<double>*> cols = {
      &out->loss,      &out->val_loss,       &out->lr,
      &out->grad_norm, &out->step_ms,        &out->tokens_per_s,
      &out->comm_ms,   &out->host_rss_bytes, &out->device_mem_bytes};
  out->phases.assign(phase_names.size(), {});
  for (size_t i = 0; i < rows.size(); ++i) {
    if (i + 1 < rows.size() && rows[i + 1].step == rows[i].step) continue;
    out->steps.push_back(rows[i].step);
    for (size_t c = 0; c < cols.size(); ++c) cols[c]->push_back(rows[i].v[c]);
    for (size_t k = 0; k < phase_names.size(); ++k) out->phases[k].push_back(rows[i].phase[k]);
  }
  return true;
}

nlohmann::json RankMetricsToJson(const RankMetrics& m, size_t max_points) {
  // Indices of the steps with an event: always drawn.
  std::vector<size_t> keep;
  for (const auto& e : m.events) {
    int64_t s = e.value("step", int64_t{-1});
    auto it = std::lower_bound(m.steps.begin(), m.steps.end(), s);
    if (it != m.steps.end() && *it == s) keep.push_back(it - m.steps.begin());
  }
  nlohmann::json series = nlohmann::json::object();
  const std::vector<std::pair<const char*, const std::vector<double>*>> named = {
      {"loss", &m.loss},
      {"val_loss", &m.val_loss},
      {"lr", &m.lr},
      {"grad_norm", &m.grad_norm},
      {"step_ms", &m.step_ms},
      {"tokens_per_s", &m.tokens_per_s},
      {"comm_ms", &m.comm_ms},
      {"host_rss_bytes", &m.host_rss_bytes},
      {"device_mem_bytes", &m.device_mem_bytes}};
  nlohmann::json means = nlohmann::json::object();
  for (const auto& [name, y] : named) {
    nlohmann::json s = SeriesToJson(m.steps, *y, max_points, keep);
    if (s["n"].get<size_t>() == 0) continue;
    double sum = 0;
    size_t n = 0;
    for (double v : *y) {
      if (std::isfinite(v)) sum += v, ++n;
    }
    if (n) means[name] = ReportRound(sum / n);
    series[name] = std::move(s);
  }
  // Phases share one x axis (they are drawn stacked): the points picked on their total.
  nlohmann::json phases = nlohmann::json::object();
  const auto& names = PhaseNames();
  std::vector<double> total(m.steps.size(), kNaN);
  for (size_t i = 0; i < m.steps.size(); ++i) {
    double t = 0;
    bool any = false;
    for (size_t k = 0; k < names.size(); ++k) {
      if (!std::isnan(m.phases[k][i])) t += m.phases[k][i], any = true;
    }
    if (any) total[i] = t;
  }
  std::vector<size_t> idx = DownsampleMinMax(total, max_points, keep);
  if (!idx.empty()) {
    nlohmann::json x = nlohmann::json::array();
    for (size_t i : idx) x.push_back(m.steps[i]);
    phases["x"] = std::move(x);
    for (size_t k = 0; k < names.size(); ++k) {
      nlohmann::json v = nlohmann::json::array();
      double sum = 0;
      for (size_t i : idx) {
        double d = m.phases[k][i];
        v.push_back(std::isfinite(d) ? nlohmann::json(ReportRound(d)) : nlohmann::json(0));
      }
      for (double d : m.phases[k]) sum += std::isfinite(d) ? d : 0;
      phases[names[k]] = std::move(v);
      means["phase." + names[k]] = m.steps.empty() ? 0.0 : ReportRound(sum / m.steps.size());
    }
    // Busy time: the step less the wait for the other ranks in communication. The rank the
    // others wait for has the longest busy time (its step time is the same as theirs).
    const std::vector<double>& wait = m.phases[4];  // comm_wait
    double busy = 0;
    size_t n = 0;
    for (size_t i = 0; i < m.steps.size(); ++i) {
      if (std::isfinite(m.step_ms[i]) && std::isfinite(wait[i]))
        busy += m.step_ms[i] - wait[i], ++n;
    }
    if (n) means["busy_ms"] = ReportRound(busy / n);
  }
  return {{"rank", m.rank},
          {"world_size", m.world_size},
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
