// Diagnose (diagnose.h): expand the paths into files, read each as a metrics series or a
// trainscope report with findings, classify the curves, rank everything.
#include "trainscope/diagnose/diagnose.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "diagnose/facts.h"
#include "diagnose/flat_json.h"
#include "diagnose/rule_engine.h"
#include "diagnose/series_builder.h"
#include "nlohmann/json.hpp"
#include "trainscope/core/formats.h"
#include "trainscope/core/json_text.h"
#include "trainscope/core/run_dir.h"
#include "trainscope/core/run_dir_lock.h"
#include "trainscope/core/table.h"

namespace trainscope::diagnose {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Findings of a trainscope report; false when `doc` is not one diagnose reads.
bool DocumentFindings(const std::string& path, const json& doc, std::vector<Finding>* out) {
  if (!doc.is_object()) return false;
  std::string format = doc.value("format", "");
  auto str = [](const json& j, const char* k) {
    auto it = j.find(k);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  auto list = doc.find("findings");
  if (format == formats::kEnvCheck || format == formats::kTraceAnalysis) {
    if (list == doc.end() || !list->is_array()) return false;
    for (const json& f : *list) {
      if (!f.is_object()) continue;
      Finding x;
      if (!ParseSeverity(str(f, "severity"), &x.severity)) continue;
      bool env = format == formats::kEnvCheck;
      x.id = absl::StrCat(env ? "env." : "trace.", str(f, env ? "id" : "code"));
      x.title = str(f, "what");
      x.evidence = str(f, "evidence");
      x.fix = str(f, "fix");
      x.where = path;
      if (auto r = f.find("rank"); r != f.end() && r->is_number_integer()) x.rank = r->get<int>();
      out->push_back(std::move(x));
    }
    return true;
  }
  if (format == formats::kDoctor) {
    auto checks = doc.find("checks");
    if (checks == doc.end() || !checks->is_array()) return false;
    for (const json& c : *checks) {
      if (!c.is_object()) continue;
      std::string verdict = str(c, "verdict");
      if (verdict != "fail" && verdict != "warn") continue;
      Finding x;
      x.severity = verdict == "fail" ? Severity::kError : Severity::kWarning;
      x.id = absl::StrCat("doctor.", str(c, "name"));
      x.title = absl::StrCat("doctor check ", str(c, "name"), " ",
                             verdict == "fail" ? "failed" : "warned", ": ", str(c, "value"));
      x.evidence = absl::StrCat(str(c, "value"), " (expected ", str(c, "expected"), ")");
      x.fix = str(c, "advice");
      x.where = path;
      out->push_back(std::move(x));
    }
    return true;
  }
  // Hang analysis (hang/analysis.json): {"problem", "findings": [{"kind", "sentence", ...}]}.
  if (doc.contains("problem") && list != doc.end() && list->is_array()) {
    for (const json& f : *list) {
      if (!f.is_object()) continue;
      Finding x;
      std::string kind = str(f, "kind");
      x.severity = kind == "missing_dump" ? Severity::kWarning : Severity::kError;
      x.id = absl::StrCat("hang.", kind);
      x.title = str(f, "sentence");
      x.evidence = str(f, "evidence");
      x.fix = str(f, "fix");
      x.where = path;
      out->push_back(std::move(x));
    }
    return true;
  }
  return false;
}

struct Walk {
  std::vector<std::string> files;
  std::vector<SkippedFile>* skipped;
  std::vector<std::string> checkpoint_dirs;  // directories inside a checkpoints folder
  Os* os;                                    // the file system walked
};

// What the walk and the readers gather besides the report itself.
struct Evidence {
  EngineInput engine;
  std::vector<RankHash> hashes;
  std::vector<Finding> notes;  // healthy / too short curves, bad records: ranked after all
};

// The trainer's TensorBoard copy of its metrics (run_dir::TrainTensorBoardDir): train/tb/
// beside metrics.rank<R>.jsonl files holds the same steps, so it is listed as skipped rather
// than read as more runs.
bool IsTrainerTensorBoardCopy(const fs::path& dir, Os* os) {
  if (dir.filename() != run_dir::kTensorBoard || dir.parent_path().filename() != run_dir::kTrain)
    return false;
  absl::StatusOr<std::vector<std::string>> names = os->ListDir(dir.parent_path().string());
  for (const std::string& name : names.ok() ? *names : std::vector<std::string>()) {
    if (run_dir::IsTrainMetricsName(name)) return true;
  }
  return false;
}

void ListDir(const fs::path& dir, int depth, Walk* w) {
  std::vector<fs::path> entries;
  absl::StatusOr<std::vector<std::string>> names = w->os->ListDir(dir.string());
  for (const std::string& name : names.ok() ? *names : std::vector<std::string>())
    entries.push_back(dir / name);
  std::sort(entries.begin(), entries.end());
  for (const fs::path& p : entries) {
    if (w->os->IsDirectory(p.string())) {
      // A checkpoint is listed, not read: its tensor files can be gigabytes.
      if (p.parent_path().filename() == run_dir::kCheckpoints) {
        w->checkpoint_dirs.push_back(p.string());
        continue;
      }
      if (IsTrainerTensorBoardCopy(p, w->os)) {
        w->skipped->push_back(
            {p.string(), "the trainer's TensorBoard copy of the metrics files beside it"});
        continue;
      }
      if (depth < 8) ListDir(p, depth + 1, w);
    } else if (w->os->IsRegularFile(p.string())) {
      w->files.push_back(p.string());
    } else {
      w->skipped->push_back({p.string(), "not a regular file"});
    }
  }
}

// A trainscope JSON document that gives facts rather than findings; false when it is none.
bool DocumentFacts(const std::string& path, const json& doc, Facts* global) {
  std::string format = doc.value("format", "");
  if (format == formats::kDataScan) {
    CollectDataScanFacts(path, doc, global);
    return true;
  }
  if (format == formats::kEnvFingerprint) {
    CollectFingerprintFacts(path, doc, global);
    return true;
  }
  // `ckpt verify --json`: trainscope.ckpt.report since session 13, no format before.
  return (format == formats::kCkptReport || !doc.contains("format")) &&
         CollectCkptVerifyFacts(path, doc, global);
}

// The facts of one metrics series (`run`: those already read from its lines), and the info
// notes a curve rule does not cover.
void SeriesFacts(const Series& s, Facts run, const RunResult& r, Evidence* ev) {
  run["run.path"] = Value::String(r.path);
  run["run.format"] = Value::String(r.format);
  if (r.rank >= 0) run["run.rank"] = Value::Number(r.rank);
  if (!run.count("run.lr")) {
    double peak = NAN;
    for (const Point& p : s.lr)
      if (std::isfinite(p.value) && !(p.value <= peak)) peak = p.value;
    if (!std::isnan(peak)) run["run.lr"] = Value::Number(peak);
  }
  AddLrSafeZone(&run);
  run["curve.class"] = Value::String(r.curve.cls);
  run["curve.sentence"] = Value::String(r.curve.finding.title);
  run["curve.evidence"] = Value::String(r.curve.finding.evidence);
  run["curve.nan_after_divergence"] = Value::Bool(r.curve.nan_after_divergence);
  if (r.curve.first_bad_step >= 0)
    run["curve.first_bad_step"] = Value::Number(r.curve.first_bad_step);
  if (r.curve.nan_step >= 0) run["curve.nan_step"] = Value::Number(r.curve.nan_step);
  if (auto h = run.find("run.data_order_hash"); h != run.end() && h->second.kind == Value::kString)
    ev->hashes.push_back({fs::path(r.path).parent_path().string(), r.rank, h->second.text});
  ev->engine.runs.push_back(std::move(run));
  // Not problems, so not rules: the healthy verdict and a curve too short to judge.
  if (r.curve.cls == "healthy" || r.curve.cls == "too_short") {
    ev->notes.push_back(r.curve.finding);
  }
}

// A text log by its name: a rank's stdout.log / stderr.log under a launch's run directory,
// doctor's parts/<part>.stdout|.stderr, the thread stacks of a hang dump
// (hang/stacks.rank<R>.txt), and any *.log, *.out, *.err (what schedulers and launchers write).
bool IsTextLog(const std::string& path) {
  const std::string base = absl::AsciiStrToLower(fs::path(path).filename().string());
  for (const char* ext : {".log", ".out", ".err", ".stdout", ".stderr"})
    if (absl::EndsWith(base, ext)) return true;
  return run_dir::IsHangStacksName(base);
}

// Known files of a run directory (core/run_dir.h) that are neither logs nor documents: its
// lock and the hang dumps (`trainscope hang analyze` reads those); "" for any other file.
std::string RunDirFileKind(const std::string& path) {
  const std::string base = fs::path(path).filename().string();
  if (base == run_dir::kLockFile) return "lock";
  if (absl::StartsWith(base, run_dir::kHangDumpPrefix)) return "hang_dumps";
  return "";
}

// Megatron-LM iteration lines are looked for this far into a log: a rank's stdout starts
// with its arguments and setup, often past the 4 KiB DetectKind reads.
constexpr size_t kLogHeadBytes = size_t{1} << 20;

// "3 logs, 1 trainscope.launch document" (Report::not_needed).
std::string NotNeededText(const std::map<std::string, int>& not_needed) {
  std::vector<std::string> parts;
  for (const auto& [what, n] : not_needed) {
    const char* noun = what == "logs"         ? (n == 1 ? " log" : " logs")
                       : what == "lock"       ? " run-directory lock"
                       : what == "hang_dumps" ? (n == 1 ? " hang dump" : " hang dumps")
                                              : nullptr;
    parts.push_back(noun != nullptr
                        ? absl::StrCat(n, noun)
                        : absl::StrCat(n, " ", what, n == 1 ? " document" : " documents"));
  }
  return absl::StrJoin(parts, ", ");
}

// Reads one file into the report. `named`: given on the command line (an unknown kind is
// then an error, not a skip).
absl::Status ReadOne(const std::string& path, bool named, const Options& o, Report* rep,
                     Evidence* ev) {
  FileBytes bytes;
  if (!bytes.Open(path, o.os)) return absl::NotFoundError(absl::StrCat(path, ": cannot read"));
  const std::string_view text = bytes.view();
  json doc = json::value_t::discarded;  // the file as a JSON document, when parsed as one
  absl::Cleanup told = [&] {            // Options::on_file, whichever way the file is taken
    if (o.on_file) o.on_file(path, text, doc.is_discarded() ? nullptr : &doc);
  };
  FileKind kind = DetectKind(path, std::string(text.substr(0, 4096)));
  if (kind == FileKind::kUnknown && IsTextLog(path)) {
    if (internal::LooksLikeMegatronLog(text.substr(0, kLogHeadBytes))) {
      kind = FileKind::kMegatronLog;
    } else if (!named) {  // output without metrics lines: known, nothing to read
      ++rep->not_needed["logs"];
      return absl::OkStatus();
    }
  }
  if (const std::string known = RunDirFileKind(path);
      kind == FileKind::kUnknown && !named && !known.empty()) {
    ++rep->not_needed[known];
    return absl::OkStatus();
  }
  if (kind == FileKind::kUnknown) {
    std::string reason = "not a metrics log or a trainscope report with findings";
    if (absl::EndsWith(path, ".json")) {
      if (!ParseJsonText(text, kJsonMaxDepth, &doc, nullptr)) doc = json::value_t::discarded;
      std::vector<Finding> found;
      if (!doc.is_discarded() && DocumentFindings(path, doc, &found)) {
        rep->documents.push_back(path);
        for (Finding& f : found) ev->engine.documents.push_back(std::move(f));
        return absl::OkStatus();
      }
      if (!doc.is_discarded() && doc.is_object() && DocumentFacts(path, doc, &ev->engine.global)) {
        rep->documents.push_back(path);
        return absl::OkStatus();
      }
      if (!doc.is_discarded() && doc.is_object() && doc.contains("format")) {
        const std::string format = JsonValueOr(doc, "format", std::string("?"));
        if (!named && absl::StartsWith(format, "trainscope.")) {  // ours: known, no findings
          ++rep->not_needed[format];
          return absl::OkStatus();
        }
        reason = absl::StrCat("a ", format, " document (no findings to read)");
      }
    }
    if (named) return absl::InvalidArgumentError(absl::StrCat(path, ": ", reason));
    rep->skipped.push_back({path, reason});
    return absl::OkStatus();
  }
  // A trainscope metrics log is read twice: once for the series (ParseSeries, on up to four
  // threads for a big file), once for the facts its other records and fields carry. The
  // second pass runs alongside the first, so a big log costs about one pass of wall time.
  Facts line_facts;
  std::thread facts_pass;
  if (kind == FileKind::kTrainscopeMetrics) {
    if (text.size() >= (8u << 20)) {
      facts_pass = std::thread([&] { CollectMetricsFacts(text, &line_facts); });
    } else {
      CollectMetricsFacts(text, &line_facts);
    }
  }
  absl::StatusOr<Series> s = ParseSeries(path, kind, text);
  if (facts_pass.joinable()) facts_pass.join();
  if (!s.ok()) {
    if (named) return s.status();
    rep->skipped.push_back({path, std::string(s.status().message())});
    return absl::OkStatus();
  }
  RunResult r;
  r.path = path;
  r.format = s->format;
  r.rank = s->rank;
  r.loss_points = s->loss.size();
  r.val_points = s->val_loss.size();
  const std::vector<Point>& main = s->loss.empty() ? s->val_loss : s->loss;
  r.first_step = main.front().step;
  r.last_step = main.back().step;
  r.bad_records = s->bad_records;
  r.repeated_steps = s->repeated_steps;
  r.first_bad = s->first_bad;
  r.end_reason = s->end_reason;
  r.curve = ClassifyCurve(*s, o.curve);
  r.curve.finding.where = r.path;
  r.curve.finding.rank = r.rank;
  SeriesFacts(*s, std::move(line_facts), r, ev);
  if (r.bad_records > 0) {
    ev->notes.push_back({Severity::kInfo, "input.bad_records",
                         absl::StrCat(r.bad_records, " bad record(s) skipped in ", path),
                         absl::StrCat("first: ", r.first_bad), "check how the log was written",
                         path});
  }
  if (s->nan_iterations > 0 || s->skipped_iterations > 0) {  // Megatron-LM's own counters
    ev->notes.push_back(
        {Severity::kInfo, "input.megatron_iterations",
         absl::StrCat(s->nan_iterations, " NaN and ", s->skipped_iterations,
                      " skipped iteration(s) counted by Megatron in ",
                      fs::path(path).filename().string()),
         absl::StrCat("number of nan iterations: ", s->nan_iterations,
                      " in all; number of skipped iterations: ", s->skipped_iterations, " in all"),
         "NaN iterations give their steps a NaN loss (see the curve's nan_step); a few skipped "
         "iterations are fp16 loss-scale overflows, many mean the loss scale keeps collapsing",
         path});
  }
  rep->runs.push_back(std::move(r));
  return absl::OkStatus();
}

// Facts that join several inputs: device memory share, data order across ranks.
void JoinFacts(Evidence* ev) {
  auto total = ev->engine.global.find("env.device_mem_total_bytes");
  for (Facts& run : ev->engine.runs) {
    auto peak = run.find("run.device_mem_peak_bytes");
    if (total != ev->engine.global.end() && peak != run.end() && total->second.number > 0)
      run["run.device_mem_peak_share"] = Value::Number(peak->second.number / total->second.number);
  }
  CollectDataOrderFacts(ev->hashes, &ev->engine.global);
}

std::string Label(const Finding& f) {
  return f.rank >= 0 && !absl::StrContains(f.where, "rank")
             ? absl::StrCat(f.where, " (rank ", f.rank, ")")
             : f.where;
}

}  // namespace

bool Report::has_error() const { return CountFindings(findings, Severity::kError) > 0; }

absl::StatusOr<Report> Diagnose(const std::vector<std::string>& paths, const Options& o) {
  absl::StatusOr<RuleSet> rules = LoadRules(o.rules_file, o.os);
  if (!rules.ok()) return rules.status();
  Report rep;
  Evidence ev;
  for (const std::string& p : paths) {
    if (!o.os->FileExists(p))
      return absl::NotFoundError(absl::StrCat(p, ": no such file or directory"));
    if (o.os->IsDirectory(p)) {
      Walk w{{}, &rep.skipped, {}, o.os};
      ListDir(p, 0, &w);
      for (const std::string& f : w.files)
        if (absl::Status s = ReadOne(f, false, o, &rep, &ev); !s.ok()) return s;
      for (const std::string& d : w.checkpoint_dirs) {
        std::string name = fs::path(d).filename().string();
        CollectCheckpointDirFacts(
            d, name, o.os->FileExists((fs::path(d) / run_dir::kCheckpointManifest).string()),
            &ev.engine.global);
      }
      if (!w.checkpoint_dirs.empty())
        rep.documents.push_back(fs::path(w.checkpoint_dirs.front()).parent_path().string());
    } else if (absl::Status s = ReadOne(p, true, o, &rep, &ev); !s.ok()) {
      return s;
    }
  }
  if (rep.runs.empty() && rep.documents.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "no metrics logs or trainscope reports under ", absl::StrJoin(paths, " "), " (",
        rep.skipped.size(), " file(s) skipped",
        rep.not_needed.empty() ? "" : "; not needed: ", NotNeededText(rep.not_needed), ")"));
  }
  JoinFacts(&ev);
  std::vector<RankedFinding> ranked = ApplyRules(*rules, ev.engine);
  int last = static_cast<int>(rules->rules.size()) + 1;
  for (Finding& f : ev.notes) ranked.push_back({last, std::move(f)});
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const RankedFinding& a, const RankedFinding& b) {
                     if (a.finding.severity != b.finding.severity)
                       return a.finding.severity < b.finding.severity;
                     return a.order < b.order;
                   });
  for (RankedFinding& r : ranked) rep.findings.push_back(std::move(r.finding));
  return rep;
}

std::vector<Finding> FindingsFrom(const Report& report) { return report.findings; }

json ReportToJson(const Report& rep) {
  json j;
  j["format"] = formats::kDiagnose;
  j["version"] = 1;
  j["findings"] = json::array();
  for (const Finding& f : rep.findings) j["findings"].push_back(FindingToJson(f));
  j["runs"] = json::array();
  for (const RunResult& r : rep.runs) {
    json ev = json::object();
    for (const auto& [k, v] : r.curve.evidence) ev[k] = v;
    json c = {
        {"class", r.curve.cls},
        {"first_bad_step", r.curve.first_bad_step >= 0 ? json(r.curve.first_bad_step) : json()},
        {"evidence", ev},
        {"fix", r.curve.finding.fix}};
    if (r.curve.nan_step >= 0) c["nan_step"] = r.curve.nan_step;
    if (r.curve.cls == "diverging") c["nan_after_divergence"] = r.curve.nan_after_divergence;
    if (r.curve.cls == "loss_spikes") c["spike_steps"] = r.curve.spike_steps;
    json x = {{"path", r.path},
              {"format", r.format},
              {"loss_points", r.loss_points},
              {"val_points", r.val_points},
              {"first_step", r.first_step},
              {"last_step", r.last_step},
              {"bad_records", r.bad_records},
              {"repeated_steps", r.repeated_steps},
              {"curve", std::move(c)}};
    if (r.rank >= 0) x["rank"] = r.rank;
    if (!r.end_reason.empty()) x["end_reason"] = r.end_reason;
    j["runs"].push_back(std::move(x));
  }
  j["documents"] = rep.documents;
  j["skipped"] = json::array();
  for (const SkippedFile& s : rep.skipped)
    j["skipped"].push_back({{"path", s.path}, {"reason", s.reason}});
  j["not_needed"] = rep.not_needed;
  j["errors"] = CountFindings(rep.findings, Severity::kError);
  j["warnings"] = CountFindings(rep.findings, Severity::kWarning);
  return j;
}

std::string ReportToText(const Report& rep) {
  std::string out;
  for (const Finding& f : rep.findings) {
    absl::StrAppend(&out, SeverityName(f.severity), ": ", Label(f), ": ", f.title, " (", f.id,
                    ").\n");
  }
  if (!rep.runs.empty()) {
    Table t({"run", "format", "steps", "class", "first bad step"});
    for (const RunResult& r : rep.runs) {
      std::string cls = r.curve.cls;
      if (r.curve.nan_after_divergence) cls += " + nan";
      t.AddRow({r.rank >= 0 && !absl::StrContains(r.path, "rank")
                    ? absl::StrCat(r.path, " rank ", r.rank)
                    : r.path,
                r.format, absl::StrCat(r.first_step, "-", r.last_step), cls,
                r.curve.first_bad_step >= 0 ? absl::StrCat(r.curve.first_bad_step) : "-"});
    }
    absl::StrAppend(&out, "\n", t.Render(60));
  }
  bool any = false;
  for (const Finding& f : rep.findings) {
    if (f.severity == Severity::kInfo && f.fix.empty()) continue;
    if (!any) out += "\n";
    any = true;
    absl::StrAppend(&out, "[", SeverityName(f.severity), "] ", f.id, " ", Label(f),
                    "\n  evidence: ", f.evidence, "\n");
    if (!f.fix.empty()) absl::StrAppend(&out, "  fix: ", f.fix, "\n");
  }
  if (!rep.skipped.empty()) {
    absl::StrAppend(&out, "\nSkipped (", rep.skipped.size(), ")\n");
    for (const SkippedFile& s : rep.skipped)
      absl::StrAppend(&out, "  ", s.path, ": ", s.reason, "\n");
  }
  if (!rep.not_needed.empty()) {
    absl::StrAppend(&out, "\nNot needed: ", NotNeededText(rep.not_needed),
                    " (nothing to diagnose in them)\n");
  }
  int e = CountFindings(rep.findings, Severity::kError),
      w = CountFindings(rep.findings, Severity::kWarning);
  absl::StrAppend(&out, "\n", e, " error(s), ", w, " warning(s) over ", rep.runs.size(),
                  " run(s) and ", rep.documents.size(), " report(s)\n");
  return out;
}

}  // namespace trainscope::diagnose
