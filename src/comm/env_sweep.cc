// RunEnvSweep: one child self-test per value of a variable, scored by its large-size busbw.
#include "trainscope/comm/env_sweep.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "nlohmann/json.hpp"
#include "trainscope/core/formats.h"
#include "trainscope/core/json_text.h"
#include "trainscope/core/table.h"

namespace trainscope::comm {

using nlohmann::json;

namespace {

bool SweepVarNameOk(const std::string& name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) return false;
  for (char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  }
  return true;
}

// Why a run failed, in one line from its stderr: a rank's own error (the launcher quotes the
// failed rank's last lines as "  | ..."), else the first "error:" line (the CLI's verdict),
// else the last non-empty line; at most 200 characters.
std::string SweepWhy(const RunResult& r) {
  std::string rank_error, first_error, last;
  for (absl::string_view line : absl::StrSplit(r.err, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) continue;
    last = std::string(line);
    if (!absl::StrContains(line, "error:")) continue;
    if (first_error.empty()) first_error = last;
    if (rank_error.empty() && absl::ConsumePrefix(&line, "|")) {
      line = absl::StripLeadingAsciiWhitespace(line);
      absl::ConsumePrefix(&line, "trainscope selftest comm: ");
      rank_error = std::string(line);
    }
  }
  std::string pick = !rank_error.empty() ? rank_error : !first_error.empty() ? first_error : last;
  if (pick.empty()) {
    pick = r.timed_out ? "timed out"
           : r.exited  ? absl::StrCat("exited with code ", r.exit_code, " and no message")
                       : absl::StrCat("killed by signal ", r.term_signal);
  }
  if (pick.size() > 200) pick = pick.substr(0, 197) + "...";
  return pick;
}

std::string SweepGbps(double v) { return FormatDouble(v, v < 10 ? 3 : 2); }

}  // namespace

absl::StatusOr<EnvSweepSpec> ParseEnvSweepSpec(const std::string& text) {
  size_t eq = text.find('=');
  if (eq == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("--sweep-env '", text, "': expected VAR=v1,v2,..."));
  }
  EnvSweepSpec spec;
  spec.var = text.substr(0, eq);
  if (!SweepVarNameOk(spec.var)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--sweep-env '", text, "': '", spec.var, "' is not a variable name"));
  }
  std::set<std::string> seen;
  for (absl::string_view v : absl::StrSplit(text.substr(eq + 1), ',')) {
    std::string value(v);
    if (seen.insert(value).second) spec.values.push_back(value);
  }
  if (text.size() == eq + 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--sweep-env '", text, "': no values after '='"));
  }
  return spec;
}

absl::Status ScoreSelftestJson(const std::string& json_text, EnvSweepRun* run) {
  json doc;
  if (!ParseJsonText(json_text, kJsonMaxDepth, &doc, nullptr) || !doc.is_object() ||
      doc.value("format", json()) != formats::kSelftestComm ||
      !doc.value("results", json()).is_array()) {
    return absl::InvalidArgumentError("not a selftest comm --json document");
  }
  // Mean over ops of busbw, per size.
  std::map<size_t, std::pair<double, int>> by_size;
  for (const json& row : doc["results"]) {
    if (!row.value("bytes", json()).is_number_unsigned() ||
        !row.value("busbw_gbps", json()).is_number()) {
      return absl::InvalidArgumentError("a result without bytes or busbw_gbps");
    }
    auto& [sum, n] = by_size[row["bytes"].get<size_t>()];
    sum += row["busbw_gbps"].get<double>();
    ++n;
  }
  run->sizes.clear();
  run->busbw_gbps.clear();
  const size_t skip = by_size.size() / 2;  // the smaller half
  size_t i = 0;
  double total = 0;
  for (const auto& [bytes, acc] : by_size) {
    if (i++ < skip) continue;
    run->sizes.push_back(bytes);
    run->busbw_gbps.push_back(acc.first / acc.second);
    total += acc.first / acc.second;
  }
  run->score_gbps = run->sizes.empty() ? 0 : total / run->sizes.size();
  const bool passed = doc.value("passed", false);
  run->ok = passed && !run->sizes.empty();
  if (!passed) {
    std::string reason =
        doc.value("reason", json()).is_string() ? doc["reason"].get<std::string>() : std::string();
    run->error = reason.empty() ? "the self-test failed" : reason;
  } else if (run->sizes.empty()) {
    run->error = "the self-test measured no size";
  }
  return absl::OkStatus();
}

void RankEnvSweepRuns(EnvSweepVariable* v) {
  v->best = v->worst = -1;
  v->best_vs_worst = v->best_vs_first = 0;
  for (int i = 0; i < static_cast<int>(v->runs.size()); ++i) {
    if (!v->runs[i].ok) continue;
    if (v->best < 0 || v->runs[i].score_gbps > v->runs[v->best].score_gbps) v->best = i;
    if (v->worst < 0 || v->runs[i].score_gbps < v->runs[v->worst].score_gbps) v->worst = i;
  }
  if (v->best < 0) return;
  const double best = v->runs[v->best].score_gbps;
  const double worst = v->runs[v->worst].score_gbps;
  if (worst > 0) v->best_vs_worst = best / worst;
  if (!v->runs.empty() && v->runs[0].ok && v->runs[0].score_gbps > 0) {
    v->best_vs_first = best / v->runs[0].score_gbps;
  }
}

absl::StatusOr<EnvSweepReport> RunEnvSweep(const EnvSweepOptions& options) {
  if (options.argv.empty()) return absl::InvalidArgumentError("env sweep: no command to run");
  if (options.specs.empty()) return absl::InvalidArgumentError("env sweep: no --sweep-env");
  for (const EnvSweepSpec& s : options.specs) {
    if (s.values.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("env sweep: ", s.var, " has no values"));
    }
  }
  auto runner = options.runner ? options.runner
                               : [](const std::vector<std::string>& argv, const RunOptions& ro) {
                                   return RunProcess(argv, ro);
                                 };
  EnvSweepReport report;
  report.argv = options.argv;
  for (const EnvSweepSpec& spec : options.specs) {
    EnvSweepVariable var;
    var.var = spec.var;
    for (const std::string& value : spec.values) {
      EnvSweepRun run;
      run.var = spec.var;
      run.value = value;
      RunOptions ro;
      ro.timeout = options.run_timeout;
      ro.kill_grace = std::chrono::milliseconds(3000);  // the child stops its own ranks
      ro.env[spec.var] = value;
      absl::StatusOr<RunResult> r = runner(options.argv, ro);
      if (!r.ok()) return r.status();  // the measuring program itself cannot start
      run.wall_s = r->wall_s;
      // Exit 0 = passed, 1 = the check found problems (its JSON says which); anything else,
      // or no document, is a failed run.
      absl::Status scored = absl::UnknownError("");
      if (!r->timed_out && r->exited && (r->exit_code == 0 || r->exit_code == 1)) {
        scored = ScoreSelftestJson(r->out, &run);
      }
      if (!scored.ok()) {
        run.ok = false;
        run.error = r->timed_out ? absl::StrCat("timed out after ", ro.timeout.count() / 1000, " s")
                                 : SweepWhy(*r);
      }
      if (!run.ok) ++report.failed_runs;
      if (options.on_run) options.on_run(run);
      var.runs.push_back(std::move(run));
    }
    RankEnvSweepRuns(&var);
    report.variables.push_back(std::move(var));
  }
  return report;
}

std::string RenderEnvSweep(const EnvSweepReport& report) {
  std::string out;
  for (const EnvSweepVariable& v : report.variables) {
    // The scored sizes of the first run that has them (every run uses the same sizes).
    std::vector<size_t> sizes;
    for (const EnvSweepRun& r : v.runs) {
      if (!r.sizes.empty()) {
        sizes = r.sizes;
        break;
      }
    }
    constexpr size_t kMaxSizeColumns = 5;
    const size_t first_col = sizes.size() > kMaxSizeColumns ? sizes.size() - kMaxSizeColumns : 0;
    std::vector<std::string> header = {"value", "result"};
    for (size_t i = first_col; i < sizes.size(); ++i) {
      header.push_back(absl::StrCat("busbw@", FormatBytes(static_cast<double>(sizes[i]))));
    }
    header.push_back("score GB/s");
    header.push_back("vs best");
    header.push_back("wall s");
    Table t(std::move(header));
    std::vector<std::string> errors;
    const double best = v.best >= 0 ? v.runs[v.best].score_gbps : 0;
    for (int i = 0; i < static_cast<int>(v.runs.size()); ++i) {
      const EnvSweepRun& r = v.runs[i];
      std::vector<std::string> row = {r.value.empty() ? "\"\"" : r.value,
                                      r.ok ? (i == v.best ? "ok (best)" : "ok") : "FAILED"};
      for (size_t c = first_col; c < sizes.size(); ++c) {
        auto it = std::find(r.sizes.begin(), r.sizes.end(), sizes[c]);
        row.push_back(it == r.sizes.end() ? "-" : SweepGbps(r.busbw_gbps[it - r.sizes.begin()]));
      }
      row.push_back(r.ok ? SweepGbps(r.score_gbps) : "-");
      row.push_back(r.ok && best > 0 ? absl::StrCat(FormatDouble(100 * r.score_gbps / best, 1), "%")
                                     : "-");
      row.push_back(FormatDouble(r.wall_s, 1));
      t.AddRow(std::move(row));
      if (!r.ok) errors.push_back(absl::StrCat("  ", v.var, "=", r.value, ": ", r.error));
    }
    absl::StrAppend(&out, "sweep ", v.var, " (", v.runs.size(),
                    " values; score: mean busbw over the largest half of the sizes)\n",
                    t.Render(40));
    for (const std::string& e : errors) absl::StrAppend(&out, e, "\n");
    if (v.best < 0) {
      absl::StrAppend(&out, "best: none (every run failed)\n\n");
      continue;
    }
    const EnvSweepRun& b = v.runs[v.best];
    absl::StrAppend(&out, "best: ", v.var, "=", b.value, " at ", SweepGbps(b.score_gbps), " GB/s");
    if (v.worst >= 0 && v.worst != v.best) {
      absl::StrAppend(&out, ", ", FormatDouble(v.best_vs_worst, 2), "x the worst (",
                      v.runs[v.worst].value, ")");
    }
    if (v.best != 0 && v.best_vs_first > 0) {
      absl::StrAppend(&out, ", ", FormatDouble(v.best_vs_first, 2), "x the first value (",
                      v.runs[0].value, ")");
    }
    if (v.worst == v.best) absl::StrAppend(&out, " (the only value that ran)");
    absl::StrAppend(&out, "\n\n");
  }
  absl::StrAppend(&out, report.failed_runs == 0
                            ? "every run passed\n"
                            : absl::StrCat(report.failed_runs, " run(s) FAILED\n"));
  return out;
}

json EnvSweepJson(const EnvSweepReport& report) {
  json j;
  j["format"] = kEnvSweepFormat;
  j["version"] = 1;
  j["argv"] = report.argv;
  j["passed"] = report.passed();
  j["failed_runs"] = report.failed_runs;
  json vars = json::array();
  for (const EnvSweepVariable& v : report.variables) {
    json runs = json::array();
    for (const EnvSweepRun& r : v.runs) {
      runs.push_back({{"value", r.value},
                      {"ok", r.ok},
                      {"error", r.error},
                      {"wall_s", r.wall_s},
                      {"sizes", r.sizes},
                      {"busbw_gbps", r.busbw_gbps},
                      {"score_gbps", r.score_gbps}});
    }
    vars.push_back({{"var", v.var},
                    {"best", v.best >= 0 ? json(v.runs[v.best].value) : json()},
                    {"worst", v.worst >= 0 ? json(v.runs[v.worst].value) : json()},
                    {"best_vs_worst", v.best_vs_worst},
                    {"best_vs_first", v.best_vs_first},
                    {"runs", std::move(runs)}});
  }
  j["variables"] = std::move(vars);
  return j;
}

}  // namespace trainscope::comm
