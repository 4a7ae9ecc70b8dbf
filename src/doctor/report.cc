// Doctor's outputs: report.json ("trainscope.doctor" v1, docs/formats.md "Doctor report"),
// the summary table printed to the terminal, and report.md.
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "trainscope/core/formats.h"
#include "trainscope/core/run_dir.h"
#include "trainscope/core/table.h"
#include "trainscope/doctor/doctor.h"

namespace trainscope::doctor {

nlohmann::json ReportToJson(const Report& r) {
  using nlohmann::json;
  json checks = json::array();
  for (const Check& c : r.checks) {
    json one = CheckToJson(c);
    one["part"] = c.part;
    checks.push_back(std::move(one));
  }
  json parts = json::array();
  for (const PartOutcome& o : r.parts) {
    json p{{"name", o.name},
           {"argv", o.argv},
           {"started", o.started},
           {"budget_s", o.budget_s},
           {"wall_s", o.wall_s},
           {"timed_out", o.timed_out},
           {"stdout_file", absl::StrCat(run_dir::kParts, "/", o.name, ".stdout")},
           {"stderr_file", absl::StrCat(run_dir::kParts, "/", o.name, ".stderr")}};
    p["exit_code"] = o.started && o.term_signal == 0 ? json(o.exit_code) : json(nullptr);
    p["signal"] = o.term_signal ? json(o.term_signal) : json(nullptr);
    p["skip_reason"] = o.skip_reason;
    parts.push_back(p);
  }
  json findings = json::array();
  for (const Finding& f : r.findings) findings.push_back(FindingToJson(f));
  return json{{"format", formats::kDoctor},
              {"version", 1},
              {"passed", r.failures == 0 && !r.interrupted},
              {"interrupted", r.interrupted},
              {"run_dir", r.run_dir},
              {"wall_s", r.wall_s},
              {"summary",
               {{"pass", r.passes}, {"warn", r.warnings}, {"fail", r.failures}, {"skip", r.skips}}},
              {"checks", checks},
              {"findings", findings},
              {"parts", parts}};
}

namespace {

std::string Verdict(const std::string& v) {
  if (v == "fail") return "FAIL";
  if (v == "warn") return "warn";
  return v;
}

std::string Summary(const Report& r) {
  std::string s = absl::StrCat(r.passes, " pass, ", r.warnings, " warn, ", r.failures, " fail, ",
                               r.skips, " skip in ", FormatDouble(r.wall_s, 1), " s");
  if (r.interrupted) return absl::StrCat("doctor: INTERRUPTED (", s, ")");
  return absl::StrCat("doctor: ", r.failures ? "FAILED" : "PASSED", " (", s, ")");
}

}  // namespace

std::string RenderTable(const Report& r, bool wide) {
  std::string out;
  if (wide) {
    Table t({"check", "verdict", "value", "expected", "advice"});
    for (const Check& c : r.checks)
      t.AddRow({c.name, Verdict(c.verdict), c.value, c.expected, c.finding.fix});
    out = t.Render(1000);
  } else {
    // check (up to 24) + verdict + value (up to 80) + gaps: under 120 columns.
    Table t({"check", "verdict", "value"});
    for (const Check& c : r.checks) t.AddRow({c.name, Verdict(c.verdict), c.value});
    out = t.Render(80);
    std::string notes;
    for (const Check& c : r.checks) {
      if (c.verdict != "fail" && c.verdict != "warn") continue;
      std::string text = c.finding.fix;
      if (!c.expected.empty()) text = absl::StrCat("expected ", c.expected, ". ", text);
      absl::StrAppend(&notes, WrapText(absl::StrCat(c.name, ": ", text), 120, "", "    "));
    }
    if (!notes.empty()) absl::StrAppend(&out, "\n", notes);
  }
  absl::StrAppend(&out, "\n", Summary(r), "\nreport: ", r.run_dir, "/", run_dir::kDoctorReportMd,
                  "\n");
  // It ends with diagnose's findings, one sentence each, most severe first: those beyond the
  // checks above (e.g. the baseline run's loss curve); the checks' own are listed already.
  int shown = 0;
  for (const Finding& f : r.findings) {
    if (f.severity == Severity::kInfo) continue;
    if (!wide && absl::StartsWith(f.id, "doctor.")) continue;
    if (shown++ == 0) out += "\ndiagnose:\n";
    absl::StrAppend(
        &out, WrapText(absl::StrCat(SeverityName(f.severity), ": ", f.title, " (", f.id, ")"), 120,
                       "  ", "      "));
    if (!f.fix.empty()) absl::StrAppend(&out, WrapText("fix: " + f.fix, 120, "    ", "      "));
  }
  return out;
}

std::string RenderMarkdown(const Report& r) {
  auto cell = [](const std::string& s) {
    return absl::StrReplaceAll(s, {{"|", "\\|"}, {"\n", " "}});
  };
  std::string md = "# trainscope doctor report\n\n";
  absl::StrAppend(&md, Summary(r), "\n\n");
  md += "| check | verdict | value | expected | advice |\n|---|---|---|---|---|\n";
  for (const Check& c : r.checks) {
    absl::StrAppend(&md, "| ", cell(c.name), " | ", Verdict(c.verdict), " | ", cell(c.value), " | ",
                    cell(c.expected), " | ", cell(c.finding.fix), " |\n");
  }
  if (!r.findings.empty()) {
    md += "\n## Diagnosis\n\n| severity | finding | evidence | fix |\n|---|---|---|---|\n";
    for (const Finding& f : r.findings) {
      absl::StrAppend(&md, "| ", SeverityName(f.severity), " | ", cell(f.title), " (`", f.id,
                      "`) | ", cell(f.evidence), " | ", cell(f.fix), " |\n");
    }
  }
  md +=
      "\n## Parts\n\n| part | command | exit | time | budget | note |\n|---|---|---|---|---|---|\n";
  for (const PartOutcome& o : r.parts) {
    std::string exit = !o.started      ? "-"
                       : o.term_signal ? absl::StrCat("signal ", o.term_signal)
                       : o.timed_out   ? "timed out"
                                       : absl::StrCat(o.exit_code);
    absl::StrAppend(&md, "| ", o.name, " | `", cell(absl::StrJoin(o.argv, " ")), "` | ", exit,
                    " | ", FormatDouble(o.wall_s, 1), " s | ", FormatDouble(o.budget_s, 0), " s | ",
                    cell(o.skip_reason), " |\n");
  }
  md +=
      "\nEach part's output is in `parts/<part>.stdout` and `parts/<part>.stderr`; the "
      "machine's fingerprint in `fingerprint.json`.\n";
  return md;
}

}  // namespace trainscope::doctor
