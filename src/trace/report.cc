// The report of `trainscope trace analyze`: JSON, text, and a Chrome-trace export.
#include <cmath>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "trace/ascend_cluster.h"
#include "trainscope/core/formats.h"
#include "trainscope/core/table.h"
#include "trainscope/core/utf8.h"
#include "trainscope/trace/analysis.h"

namespace trainscope::trace {
namespace {

double R2(double v) { return std::round(v * 100.0) / 100.0; }

nlohmann::json FindingJson(const Finding& f) {
  return {{"severity", SeverityName(f.severity)},
          {"code", f.id},
          {"rank", f.rank},
          {"what", f.title},
          {"evidence", f.evidence},
          {"fix", f.fix}};
}

nlohmann::json RankJson(const RankResult& r) {
  nlohmann::json j;
  j["rank"] = r.rank;
  j["path"] = r.path;
  j["format"] = r.format;
  j["rank_source"] = r.rank_source;
  j["basis"] = r.basis;
  j["device"] = r.device;
  // The files of the rank (several with a repeating profiler schedule), by file name: the
  // directory is in "path".
  j["windows"] = nlohmann::json::array();
  for (const WindowResult& w : r.windows)
    j["windows"].push_back({{"file", std::filesystem::path(w.path).filename().string()},
                            {"steps", w.steps},
                            {"start_us", R2(w.start_us)},
                            {"end_us", R2(w.end_us)},
                            {"mean_step_us", R2(w.mean_step_us)}});
  j["steps"] = nlohmann::json::array();
  nlohmann::json per_step = nlohmann::json::array();
  for (const auto& s : r.steps) {
    j["steps"].push_back(s.step);
    nlohmann::json host = nlohmann::json::object();
    for (const auto& [k, v] : s.host_us) host[k + "_us"] = R2(v);
    per_step.push_back({{"step", s.step},
                        {"step_us", R2(s.step_us)},
                        {"iteration_gap_us", R2(s.gap_us)},
                        {"iteration_gap_pct", R2(s.gap_pct)},
                        {"iteration_gap_flagged", s.gap_flagged},
                        {"device_busy_us", R2(s.device_busy_us)},
                        {"comm_us", R2(s.comm_us)},
                        {"host_breakdown", host}});
  }
  j["per_step"] = per_step;
  j["iteration_gap_pct"] = nlohmann::json::array();
  for (const auto& s : r.steps) j["iteration_gap_pct"].push_back(R2(s.gap_pct));
  j["mean_step_us"] = R2(r.MeanStepUs());
  j["temporal_breakdown"] = {{"basis", r.basis},
                             {"idle_pct", R2(r.idle_pct)},
                             {"compute_pct", R2(r.compute_pct)},
                             {"non_compute_pct", R2(r.non_compute_pct)},
                             {"idle_us", R2(r.idle_us)},
                             {"compute_us", R2(r.compute_us)},
                             {"non_compute_us", R2(r.non_compute_us)},
                             {"kernel_time_us", R2(r.kernel_time_us)}};
  j["comm_comp_overlap_pct"] =
      r.comm_comp_overlap_pct ? nlohmann::json(R2(*r.comm_comp_overlap_pct)) : nlohmann::json();
  for (auto it = r.details.begin(); it != r.details.end(); ++it) j[it.key()] = it.value();
  j["findings"] = nlohmann::json::array();
  for (const auto& f : r.findings) j["findings"].push_back(FindingJson(f));
  j["parse"] = r.parse;
  return j;
}

std::string F1(double v) { return absl::StrFormat("%.1f", v); }
std::string Ms(double us) { return absl::StrFormat("%.2f", us / 1e3); }

}  // namespace

std::vector<Finding> FindingsFrom(const Report& rep) {
  std::vector<Finding> out = rep.findings;
  for (const RankResult& r : rep.ranks) out.insert(out.end(), r.findings.begin(), r.findings.end());
  return out;
}

nlohmann::json ReportToJson(const Report& rep) {
  nlohmann::json j;
  j["format"] = formats::kTraceAnalysis;
  j["version"] = 1;
  j["ranks"] = nlohmann::json::array();
  for (const auto& r : rep.ranks) j["ranks"].push_back(RankJson(r));
  j["stragglers"] = nlohmann::json::array();
  for (const auto& s : rep.stragglers) {
    j["stragglers"].push_back({{"rank", s.rank},
                               {"votes", s.votes},
                               {"steps_compared", s.steps_compared},
                               {"comm_us", R2(s.comm_us)},
                               {"others_comm_us", R2(s.others_comm_us)},
                               {"step_us", R2(s.step_us)},
                               {"cause", s.cause},
                               {"cause_us", R2(s.cause_us)},
                               {"others_cause_us", R2(s.others_cause_us)}});
  }
  j["findings"] = nlohmann::json::array();
  for (const auto& f : rep.findings) j["findings"].push_back(FindingJson(f));
  for (const auto& r : rep.ranks)
    for (const auto& f : r.findings) j["findings"].push_back(FindingJson(f));
  j["skipped"] = nlohmann::json::array();
  for (const auto& f : rep.skipped)
    j["skipped"].push_back({{"path", f.path}, {"reason", f.reason}});
  if (!rep.cluster.is_null()) j["cluster"] = rep.cluster;
  SanitizeUtf8(&j);
  return j;
}

std::string ReportToText(const Report& rep) {
  std::string out;
  Table side({"rank", "basis", "steps", "step ms", "gap %", "compute %", "non-compute %", "idle %",
              "overlap %", "data ms/step", "comm ms/step", "events"});
  for (const auto& r : rep.ranks) {
    side.AddRow({std::to_string(r.rank), r.basis, std::to_string(r.steps.size()),
                 Ms(r.MeanStepUs()), F1([&] {
                   double g = 0, s = 0;
                   for (const auto& x : r.steps) {
                     g += x.gap_us;
                     s += x.step_us;
                   }
                   return s > 0 ? 100 * g / s : 0;
                 }()),
                 F1(r.compute_pct), F1(r.non_compute_pct), F1(r.idle_pct),
                 r.comm_comp_overlap_pct ? F1(*r.comm_comp_overlap_pct) : "-",
                 Ms(r.MeanHostUs("data_loading")), Ms(r.MeanCommUs()),
                 FormatCount(r.parse["events_kept"].get<int64_t>())});
  }
  out +=
      "Time breakdown per rank (HTA temporal breakdown over device events; basis host = the "
      "main thread's steps)\n";
  out += side.Render();
  for (const auto& r : rep.ranks) {
    if (r.windows.size() > 1) {
      out += absl::StrCat("\nrank ", r.rank, ": ", r.windows.size(), " windows (", r.format,
                          ", one process)\n");
      for (const WindowResult& w : r.windows)
        out += absl::StrCat("  ", w.path, ": steps ", absl::StrJoin(w.steps, ","), ", ",
                            Ms(w.start_us), "-", Ms(w.end_us), " ms, mean step ",
                            Ms(w.mean_step_us), " ms\n");
    } else {
      out += absl::StrCat("\nrank ", r.rank, " (", r.path, ", ", r.format, ")\n");
    }
    Table steps({"step", "step ms", "gap ms", "gap %", "", "data", "forward", "backward",
                 "optimizer", "comm", "comm wait", "host idle"});
    for (const auto& s : r.steps) {
      auto h = [&](const char* k) {
        auto it = s.host_us.find(k);
        return it == s.host_us.end() ? std::string("-") : Ms(it->second);
      };
      steps.AddRow({std::to_string(s.step), Ms(s.step_us), Ms(s.gap_us), F1(s.gap_pct),
                    s.gap_flagged ? "GAP" : "", h("data_loading"), h("forward"), h("backward"),
                    h("optimizer"), h("communication"), h("comm_wait"), h("host_idle")});
    }
    out += steps.Render();
    if (r.details.contains("top_operators")) {
      Table ops({"top operators", "count", "total ms", "self ms", "mean us", "p95 us"});
      int n = 0;
      for (const auto& o : r.details["top_operators"]["by_total"]) {
        if (n++ == 5) break;
        ops.AddRow({o["name"].get<std::string>(), FormatCount(o["count"].get<int64_t>()),
                    Ms(o["total_us"].get<double>()), Ms(o["self_us"].get<double>()),
                    F1(o["mean_us"].get<double>()), F1(o["p95_us"].get<double>())});
      }
      if (ops.num_rows()) out += ops.Render();
    }
    if (r.details.contains("top_kernels")) {
      Table ks({"top kernels", "count", "total ms", "mean us", "p95 us"});
      int n = 0;
      for (const auto& o : r.details["top_kernels"]) {
        if (n++ == 5) break;
        ks.AddRow({o["name"].get<std::string>(), FormatCount(o["count"].get<int64_t>()),
                   Ms(o["total_us"].get<double>()), F1(o["mean_us"].get<double>()),
                   F1(o["p95_us"].get<double>())});
      }
      out += ks.Render();
    }
    if (r.details.contains("kernel_types") && r.details["kernel_types"].is_object()) {
      // HTA's kernel-type table (exclusive time per set of overlapping types).
      const nlohmann::json& kt = r.details["kernel_types"];
      std::string line = "kernel types (HTA):";
      for (const auto& row : kt["types"])
        absl::StrAppend(&line, " ", row["kernel_type"].get<std::string>(), " ",
                        F1(row["pct"].get<double>()), "% (", Ms(row["time_us"].get<double>()),
                        " ms);");
      absl::StrAppend(&line, " OTHER (outside HTA's table) ", Ms(kt["other_us"].get<double>()),
                      " ms, ", F1(kt["other_pct_of_kernel_time"].get<double>()),
                      "% of kernel time\n");
      out += line;
    }
    if (HasBadRecords(r.stats)) out += absl::StrCat("input: ", DescribeBadRecords(r.stats), "\n");
  }
  out += internal::ClusterToText(rep.cluster);
  std::vector<const Finding*> all;
  for (const auto& f : rep.findings) all.push_back(&f);
  for (const auto& r : rep.ranks)
    for (const auto& f : r.findings) all.push_back(&f);
  out += absl::StrCat("\nFindings (", all.size(), ")\n");
  for (const Finding* f : all) {
    out += absl::StrCat("  [", SeverityName(f->severity), "] ", f->title,
                        "\n      evidence: ", f->evidence, "\n      fix: ", f->fix, "\n");
  }
  if (all.empty()) out += "  none\n";
  if (!rep.skipped.empty()) {
    out += absl::StrCat("\nSkipped (", rep.skipped.size(), ")\n");
    for (const SkippedFile& f : rep.skipped) out += absl::StrCat("  ", f.reason, "\n");
  }
  return out;
}

nlohmann::json ExportChromeTrace(const Report& rep) {
  nlohmann::json ev = nlohmann::json::array();
  for (const auto& r : rep.ranks) {
    ev.push_back({{"ph", "M"},
                  {"name", "process_name"},
                  {"pid", r.rank},
                  {"tid", 0},
                  {"args", {{"name", absl::StrCat("rank ", r.rank, " (", r.basis, ")")}}}});
    ev.push_back({{"ph", "M"},
                  {"name", "thread_name"},
                  {"pid", r.rank},
                  {"tid", 1},
                  {"args", {{"name", "steps"}}}});
    ev.push_back({{"ph", "M"},
                  {"name", "thread_name"},
                  {"pid", r.rank},
                  {"tid", 2},
                  {"args", {{"name", "host phases (summed, in order)"}}}});
    for (const auto& s : r.steps) {
      nlohmann::json args = {{"step_us", R2(s.step_us)},
                             {"iteration_gap_pct", R2(s.gap_pct)},
                             {"comm_us", R2(s.comm_us)},
                             {"device_busy_us", R2(s.device_busy_us)}};
      ev.push_back({{"ph", "X"},
                    {"cat", "step"},
                    {"pid", r.rank},
                    {"tid", 1},
                    {"name", absl::StrCat("step ", s.step, s.gap_flagged ? " (gap)" : "")},
                    {"ts", R2(s.start_us)},
                    {"dur", R2(s.step_us)},
                    {"args", args}});
      double t = s.start_us;
      for (const auto& [k, v] : s.host_us) {
        if (v <= 0) continue;
        ev.push_back({{"ph", "X"},
                      {"cat", "phase"},
                      {"pid", r.rank},
                      {"tid", 2},
                      {"name", k},
                      {"ts", R2(t)},
                      {"dur", R2(v)}});
        t += v;
      }
    }
    for (const auto& f : r.findings) {
      ev.push_back({{"ph", "i"},
                    {"s", "p"},
                    {"pid", r.rank},
                    {"tid", 1},
                    {"ts", 0},
                    {"name", f.title},
                    {"args", {{"evidence", f.evidence}, {"fix", f.fix}}}});
    }
  }
  for (const auto& f : rep.findings) {
    int pid = f.rank >= 0 ? f.rank : 0;
    ev.push_back({{"ph", "i"},
                  {"s", "g"},
                  {"pid", pid},
                  {"tid", 1},
                  {"ts", 0},
                  {"name", f.title},
                  {"args", {{"evidence", f.evidence}, {"fix", f.fix}}}});
  }
  nlohmann::json out = {{"traceEvents", std::move(ev)},
                        {"displayTimeUnit", "ms"},
                        {"otherData", {{"format", formats::kTraceExport}, {"version", 1}}}};
  SanitizeUtf8(&out);
  return out;
}

}  // namespace trainscope::trace
