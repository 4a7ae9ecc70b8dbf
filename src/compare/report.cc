// The compare report as JSON, as a table people read, as msprobe's csv, and as findings.
#include <algorithm>
#include <cmath>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compare/internal.h"
#include "trainscope/core/formats.h"
#include "trainscope/core/table.h"

namespace trainscope::compare {
namespace {

using nlohmann::json;

json Num(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

std::string Label(const PairReport& p) {
  return p.a.step.empty() ? p.a.rank : p.a.step + "/" + p.a.rank;
}

json RowJson(Mode mode, const RowCompare& r) {
  json j = {{"name", r.a->name},
            {"b_name", r.b ? json(r.b->name) : json()},
            {"state", StateName(r.a->state)},
            {"dtype", {DtypeText(r.a), DtypeText(r.b)}},
            {"shape", {ShapeText(r.a), ShapeText(r.b)}},
            {"requires_grad", {ReqGradText(r.a), ReqGradText(r.b)}},
            {"stats_a", json::array()},
            {"stats_b", json::array()}};
  for (int i = 0; i < 4; ++i) {
    j["stats_a"].push_back(r.a->stat_text[i]);
    j["stats_b"].push_back(r.b ? r.b->stat_text[i] : "N/A");
  }
  static const char* const kStat[] = {"max_diff", "min_diff", "mean_diff", "norm_diff",
                                      "max_rel",  "min_rel",  "mean_rel",  "norm_rel"};
  for (int i = 0; i < 8; ++i) j[kStat[i]] = r.stat_text[i];
  if (mode == Mode::kTensor) {
    static const char* const kMetric[] = {"cosine",
                                          "euc_dist",
                                          "max_abs_err",
                                          "max_rel_err",
                                          "one_thousandth_ratio",
                                          "five_thousandths_ratio"};
    for (int i = 0; i < 6; ++i) j[kMetric[i]] = r.metric_text[i];
    j["data_name"] = {r.a->data_name, r.b ? r.b->data_name : ""};
  }
  if (mode == Mode::kMd5) j["md5"] = {r.a->md5, r.b ? r.b->md5 : "N/A"};
  j["error"] = Num(r.error);
  j["differs"] = r.differs;
  j["result"] = r.result;
  j["messages"] = r.messages;
  if (!r.notes.empty()) j["notes"] = r.notes;
  return j;
}

json EntryJson(const PairReport& p, const EntryCompare& e) {
  json rows = json::array();
  for (const RowCompare& r : e.rows) rows.push_back(RowJson(p.mode, r));
  return {{"name", e.a->name},
          {"b_name", e.b ? json(e.b->name) : json()},
          {"match", e.b ? json(e.how) : json()},
          {"step", p.a.step},
          {"rank", p.a.rank},
          {"result", e.result},
          {"input_error", Num(e.input_error)},
          {"output_error", Num(e.output_error)},
          {"inputs_differ", e.inputs_differ},
          {"outputs_differ", e.outputs_differ},
          {"rows", std::move(rows)}};
}

// json.dumps of a list of strings (Python's ", " separator), as msprobe writes Err_message.
std::string PyList(const std::vector<std::string>& items) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i)
    absl::StrAppend(&out, i ? ", " : "", json(items[i]).dump());
  return out + "]";
}

std::string Csv(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

// The frame of the user's code: the last one outside site-packages, else the first.
std::string UserFrame(const std::vector<std::string>& stack) {
  for (auto it = stack.rbegin(); it != stack.rend(); ++it)
    if (it->find("site-packages") == std::string::npos) return *it;
  return stack.empty() ? "" : stack.front();
}

std::string Short(double v) {
  if (!std::isfinite(v)) return std::isnan(v) ? "nan" : "inf";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3g", v);
  return buf;
}

}  // namespace

std::vector<Finding> FindingsFrom(const Report& report) {
  std::vector<Finding> out;
  for (const PairReport& p : report.pairs) {
    if (p.tensor_files_missing + p.tensor_files_unreadable > 0) {
      Finding f;
      f.severity = Severity::kWarning;
      f.id = "compare.tensor_files";
      f.title = absl::StrCat(p.tensor_files_missing, " tensor files missing and ",
                             p.tensor_files_unreadable, " unreadable");
      f.evidence = absl::StrJoin(p.tensor_file_errors, "; ");
      f.fix = "those rows are compared by their statistics only";
      f.where = Label(p);
      out.push_back(std::move(f));
    }
  }
  if (report.first_pair) {
    const FirstDivergence& d = report.first_pair->first;
    Finding f;
    f.severity = Severity::kError;
    f.id = d.kind == "input" ? "compare.inputs_differ" : "compare.divergence";
    f.title = absl::StrCat("first divergence: ", d.name, " (", d.kind, ")");
    f.evidence = absl::StrCat("input error ", Short(d.entry->input_error), ", output error ",
                              Short(d.entry->output_error));
    f.fix = d.meaning;
    f.where = Label(*report.first_pair);
    out.push_back(std::move(f));
  }
  return out;
}

json ReportToJson(const Report& report) {
  json unmatched_a = json::array(), unmatched_b = json::array(), entries = json::array();
  json pairs = json::array();
  const bool many = report.pairs.size() > 1;
  for (const PairReport& p : report.pairs) {
    const std::string pre = many ? Label(p) + ":" : "";
    for (const std::string& n : p.unmatched_a) unmatched_a.push_back(pre + n);
    for (const std::string& n : p.unmatched_b) unmatched_b.push_back(pre + n);
    for (const EntryCompare& e : p.entries) entries.push_back(EntryJson(p, e));
    pairs.push_back({{"a", p.a.dir},
                     {"b", p.b.dir},
                     {"step", p.a.step},
                     {"rank", p.a.rank},
                     {"mode", ModeName(p.mode)},
                     {"framework", {p.a.framework, p.b.framework}},
                     {"entries", {p.a.entries.size(), p.b.entries.size()}},
                     {"truncated_entries", {p.a.truncated_entries, p.b.truncated_entries}},
                     {"matched", p.matched},
                     {"tensor_files_missing", p.tensor_files_missing},
                     {"tensor_files_unreadable", p.tensor_files_unreadable}});
  }
  json first = nullptr;
  if (report.first_pair) {
    const PairReport& p = *report.first_pair;
    const FirstDivergence& d = p.first;
    json metrics = EntryJson(p, *d.entry);
    first = {{"name", d.name},       {"b_name", d.b_name},
             {"kind", d.kind},       {"module", d.module.empty() ? json() : json(d.module)},
             {"stack", d.stack},     {"step", d.step},
             {"rank", d.rank},       {"communication", d.communication},
             {"meaning", d.meaning}, {"metrics", std::move(metrics)}};
  }
  json findings = json::array();
  for (const Finding& f : report.findings) findings.push_back(FindingToJson(f));
  return {{"format", formats::kCompare},
          {"version", 1},
          {"mode", report.pairs.empty() ? "" : ModeName(report.pairs[0].mode)},
          {"matched", report.matched},
          {"unmatched", {{"a", std::move(unmatched_a)}, {"b", std::move(unmatched_b)}}},
          {"diverged", report.diverged},
          {"first_divergence", std::move(first)},
          {"entries", std::move(entries)},
          {"inputs",
           {{"pairs", std::move(pairs)},
            {"unpaired_a", report.unpaired_a},
            {"unpaired_b", report.unpaired_b}}},
          {"findings", std::move(findings)}};
}

std::string FormatReportText(const Report& report, int top) {
  std::string out;
  size_t ua = 0, ub = 0;
  for (const PairReport& p : report.pairs) ua += p.unmatched_a.size(), ub += p.unmatched_b.size();
  const PairReport& p0 = report.pairs.front();
  absl::StrAppend(&out, "compare: ", ModeName(p0.mode), " mode, ", report.pairs.size(),
                  report.pairs.size() == 1 ? " pair of dumps: " : " pairs of dumps: ",
                  report.matched, " entries matched, ", ua, " unmatched in A, ", ub, " in B\n");
  if (!report.first_pair) {
    out += "no divergence: every matched tensor agrees\n";
  } else {
    const PairReport& p = *report.first_pair;
    const FirstDivergence& d = p.first;
    absl::StrAppend(&out, "\nfirst divergence: ", d.name, " (", d.kind, ") in ", Label(p), "\n");
    if (!d.module.empty()) absl::StrAppend(&out, "  module: ", d.module, "\n");
    if (!d.stack.empty()) {
      std::string frame = UserFrame(d.stack);
      std::replace(frame.begin(), frame.end(), '\n', ' ');
      absl::StrAppend(&out, "  called at: ", frame.substr(0, 108), "\n");
    }
    Table t({"row", "dtype A", "dtype B", "norm A", "norm B", "error", "result"});
    for (const RowCompare& r : d.entry->rows) {
      if (r.a->kind != Tensor::Kind::kTensor) continue;
      t.AddRow({r.a->suffix, DtypeText(r.a), DtypeText(r.b), r.a->stat_text[3],
                r.b ? r.b->stat_text[3] : "N/A", Short(r.error), r.result});
    }
    out += "\n" + t.Render(40);
  }
  // The worst matched entries by output error, grouped by their module.
  std::vector<std::pair<const PairReport*, const EntryCompare*>> worst;
  for (const PairReport& p : report.pairs)
    for (const EntryCompare& e : p.entries)
      if (e.b && (e.output_error > 0 || e.result != "pass")) worst.emplace_back(&p, &e);
  std::stable_sort(worst.begin(), worst.end(), [](const auto& x, const auto& y) {
    return x.second->output_error > y.second->output_error;
  });
  if (worst.size() > static_cast<size_t>(top)) worst.resize(top);
  if (!worst.empty()) {
    std::map<std::string, std::vector<const EntryCompare*>> by_module;
    std::vector<std::string> modules;
    for (const auto& [p, e] : worst) {
      auto it = p->a.parent.find(e->a->name);
      std::string m = it == p->a.parent.end() || it->second.empty() ? "(top)" : it->second;
      if (!by_module.count(m)) modules.push_back(m);
      by_module[m].push_back(e);
    }
    Table t({"module", "entry", "input error", "output error", "result"});
    for (const std::string& m : modules) {
      bool first_row = true;
      for (const EntryCompare* e : by_module[m]) {
        t.AddRow({first_row ? m : "", e->a->name, Short(e->input_error), Short(e->output_error),
                  e->result});
        first_row = false;
      }
    }
    absl::StrAppend(&out, "\nworst ", worst.size(), " entries by output error:\n", t.Render(44));
  }
  if (report.first_pair) out += "\n" + WrapText(report.first_pair->first.meaning, 118);
  bool header = false;
  for (const Finding& f : report.findings) {
    if (f.severity == Severity::kError) continue;
    if (!header) out += "\nnotes:\n";
    header = true;
    out += WrapText(f.title + (f.evidence.empty() ? "" : ": " + f.evidence), 118, "  ", "    ");
  }
  return out;
}

std::string ReportToCsv(const Report& report) {
  static const char* const kBasic[] = {
      "NPU Name",         "Bench Name",         "NPU Dtype",         "Bench Dtype",
      "NPU Tensor Shape", "Bench Tensor Shape", "NPU Requires_grad", "Bench Requires_grad"};
  static const char* const kStats[] = {"Max diff",        "Min diff",       "Mean diff",
                                       "L2norm diff",     "MaxRelativeErr", "MinRelativeErr",
                                       "MeanRelativeErr", "NormRelativeErr"};
  static const char* const kTensor[] = {"Cosine",
                                        "EucDist",
                                        "MaxAbsErr",
                                        "MaxRelativeErr",
                                        "One Thousandth Err Ratio",
                                        "Five Thousandths Err Ratio"};
  static const char* const kSummary[] = {"NPU max",   "NPU min",   "NPU mean",   "NPU l2norm",
                                         "Bench max", "Bench min", "Bench mean", "Bench l2norm"};
  const Mode mode = report.pairs.empty() ? Mode::kStatistics : report.pairs[0].mode;
  std::vector<std::string> head(std::begin(kBasic), std::end(kBasic));
  if (mode == Mode::kStatistics) head.insert(head.end(), std::begin(kStats), std::end(kStats));
  if (mode == Mode::kTensor) head.insert(head.end(), std::begin(kTensor), std::end(kTensor));
  if (mode == Mode::kMd5) {
    head.insert(head.end(), {"NPU MD5", "BENCH MD5"});
  } else {
    head.insert(head.end(), std::begin(kSummary), std::end(kSummary));
  }
  head.insert(head.end(), {"Requires_grad Consistent", "Result", "Err_message", "NPU_Stack_Info"});
  if (mode == Mode::kTensor) head.insert(head.end(), {"Data_name", "Dirty Valid Len"});
  std::string out;
  for (size_t i = 0; i < head.size(); ++i) absl::StrAppend(&out, i ? "," : "", head[i]);
  out += "\n";
  auto stat = [](const std::string& s) { return s == "inf" || s == "-inf" ? " " + s : s; };
  for (const PairReport& p : report.pairs) {
    for (const EntryCompare& e : p.entries) {
      for (size_t k = 0; k < e.rows.size(); ++k) {
        const RowCompare& r = e.rows[k];
        std::vector<std::string> c = {r.a->name,        r.b ? r.b->name : "N/A",
                                      DtypeText(r.a),   r.b ? DtypeText(r.b) : "N/A",
                                      ShapeText(r.a),   r.b ? ShapeText(r.b) : "N/A",
                                      ReqGradText(r.a), r.b ? ReqGradText(r.b) : "N/A"};
        if (mode == Mode::kStatistics)
          for (int i = 0; i < 8; ++i) c.push_back(r.stat_text[i]);
        if (mode == Mode::kTensor)
          for (int i = 0; i < 6; ++i) c.push_back(r.metric_text[i]);
        if (mode == Mode::kMd5) {
          c.push_back(r.a->md5.empty() ? "N/A" : r.a->md5);
          c.push_back(r.b && !r.b->md5.empty() ? r.b->md5 : "N/A");
        } else {
          for (int i = 0; i < 4; ++i) c.push_back(stat(r.a->stat_text[i]));
          for (int i = 0; i < 4; ++i) c.push_back(r.b ? stat(r.b->stat_text[i]) : "N/A");
        }
        c.push_back(ReqGradText(r.a) == (r.b ? ReqGradText(r.b) : "N/A") ? "True" : "False");
        c.push_back(r.result);
        c.push_back(PyList(r.messages));
        auto st = p.a.stack.find(e.a->name);
        c.push_back(k == 0 && st != p.a.stack.end() ? json(st->second).dump() : "None");
        if (mode == Mode::kTensor) {
          const std::string na = r.a->data_name.empty() ? "-1" : r.a->data_name;
          const std::string nb = r.b && !r.b->data_name.empty() ? r.b->data_name : "-1";
          c.push_back("['" + na + "', '" + nb + "']");
          c.push_back("[-1, -1]");
        }
        for (size_t i = 0; i < c.size(); ++i) absl::StrAppend(&out, i ? "," : "", Csv(c[i]));
        out += "\n";
      }
    }
  }
  return out;
}

}  // namespace trainscope::compare
