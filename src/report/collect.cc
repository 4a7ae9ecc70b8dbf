// The parts of the report's data model (collect.h): what each run directory holds, read into
// the model (docs/formats.md "Report"); ReportCollector (collector.cc) assembles them. Each
// part is read by its own module's reader where one exists (diagnose for findings, hang for
// the flight-recorder dumps and their analysis); the documents other verbs wrote (data scan,
// trace analysis, doctor report, fingerprint) are read as they are, reduced to what the page
// draws. Files diagnose already read in the collection are taken from it (run_files.h), the
// others read through the Os given (ReportOptions::os), as are the folders listed; the
// profiler traces (trace::AnalyzePaths) and the metrics files (RankMetricsReader, which reads
// on incrementally) stream from their files, through the same Os. A part that is absent or
// unreadable is listed in "missing", never an error.
#include "report/collect.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "report/metrics.h"
#include "trainscope/ckpt/checkpoint.h"
#include "trainscope/core/formats.h"
#include "trainscope/core/json_text.h"
#include "trainscope/core/os.h"
#include "trainscope/core/run_dir.h"
#include "trainscope/diagnose/diagnose.h"
#include "trainscope/hang/analyze.h"
#include "trainscope/hang/dump.h"
#include "trainscope/report/report.h"
#include "trainscope/trace/analysis.h"

namespace trainscope::report {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr size_t kCollectMaxCollectives = 200;  // per rank, the last ones
constexpr size_t kCollectMaxTopOps = 15;
constexpr size_t kCollectMaxFingerprintRows = 120;

// The regular files in dir (not recursive) whose name satisfies pred (all when null), sorted
// by name.
std::vector<std::string> CollectFiles(const std::string& dir, Os* os,
                                      bool (*pred)(const std::string& name)) {
  std::vector<std::string> out;
  absl::StatusOr<std::vector<std::string>> names = os->ListDir(dir);
  if (!names.ok()) return out;
  for (const std::string& name : *names) {
    const std::string path = run_dir::Join(dir, name);
    if ((pred == nullptr || pred(name)) && os->IsRegularFile(path)) out.push_back(path);
  }
  return out;
}

// A path found under the run directory `dir` (run_dir::Join of it and more) as the page names
// it: relative to `dir`, by the folders it was found in (lexical: nothing is asked of the file
// system).
std::string CollectRelative(const std::string& path, const std::string& dir) {
  const std::string prefix = run_dir::Join(dir, "");
  if (path.size() > prefix.size() && path.compare(0, prefix.size(), prefix) == 0) {
    return fs::path(path.substr(prefix.size())).lexically_normal().string();
  }
  return fs::path(path)
      .lexically_normal()
      .lexically_relative(fs::path(dir).lexically_normal())
      .string();
}

bool IsJsonName(const std::string& n) { return absl::EndsWith(n, ".json"); }

void AddMissing(json* data, const std::string& run, const std::string& part,
                const std::string& why) {
  (*data)["missing"].push_back({{"run", run}, {"part", part}, {"reason", why}});
}

}  // namespace

// Train metrics: one entry per rank, plus stragglers by mean step time.
void CollectMetrics(const std::string& dir, const std::string& name, size_t max_points, Os* os,
                    MetricsCache* cache, json* run, json* data) {
  std::vector<std::string> files =
      CollectFiles(run_dir::Join(dir, run_dir::kTrain), os,
                   [](const std::string& n) { return run_dir::IsTrainMetricsName(n); });
  for (auto it = cache->files.begin(); it != cache->files.end();) {  // files gone
    it = std::binary_search(files.begin(), files.end(), it->first) ? std::next(it)
                                                                   : cache->files.erase(it);
  }
  if (files.empty()) {
    AddMissing(data, name, "metrics", "no " + run_dir::TrainMetricsPattern());
    return;
  }
  for (const std::string& file : files) {
    MetricsCache::File& f = cache->files.try_emplace(file, file, os).first->second;
    const int64_t parsed = f.reader.bytes_parsed(), full = f.reader.full_reads();
    const bool ok = f.taken || f.reader.Update();  // taken: parsed from diagnose's bytes
    f.taken = false;
    cache->bytes_parsed += f.reader.bytes_parsed() - parsed;
    cache->full_reads += f.reader.full_reads() - full;
    const RankMetrics& m = f.reader.metrics();
    if (!ok) {
      AddMissing(data, name, "metrics", m.malformed_examples.front());
      continue;
    }
    if (f.json_version != f.reader.version()) {
      f.json = RankMetricsToJson(m, max_points);
      f.json["file"] = CollectRelative(file, dir);
      f.json_version = f.reader.version();
    }
    (*run)["ranks"].push_back(f.json);
    for (const json& e : m.events) (*run)["events"].push_back(e);
    (*data)["malformed"] = (*data)["malformed"].get<int64_t>() + m.malformed;
    for (const std::string& ex : m.malformed_examples) (*data)["malformed_lines"].push_back(ex);
    if (!m.summary.is_null() && !run->contains("summary")) (*run)["summary"] = m.summary;
  }
  std::sort((*run)["ranks"].begin(), (*run)["ranks"].end(),
            [](const json& a, const json& b) { return a["rank"] < b["rank"]; });
  // Stragglers: a rank whose mean busy time (step time less comm wait; the step time when
  // there are no phases) is 15% above the median of the ranks' means. In data-parallel
  // training every rank's step takes as long as the slowest; the others wait in comm_wait.
  auto busy = [](const json& r) -> double {
    const json& m = r["means"];
    return JsonValueOr(m, "busy_ms", JsonValueOr(m, "step_ms", -1.0));
  };
  std::vector<double> means;
  for (const json& r : (*run)["ranks"]) {
    if (busy(r) >= 0) means.push_back(busy(r));
  }
  if (means.size() >= 2) {
    std::vector<double> sorted = means;
    std::sort(sorted.begin(), sorted.end());
    double median = sorted[sorted.size() / 2];
    if (sorted.size() % 2 == 0) median = (sorted[sorted.size() / 2 - 1] + median) / 2;
    for (const json& r : (*run)["ranks"]) {
      double v = busy(r);
      if (v >= 0 && median > 0 && v > 1.15 * median) {
        (*run)["stragglers"].push_back(
            {{"rank", r["rank"]}, {"mean_busy_ms", v}, {"median_busy_ms", median}});
      }
    }
  }
}

// Diagnose's findings over the whole run directory, and its curve verdicts pinned at their
// steps (spikes, first NaN, first bad step).
void CollectFindings(const std::string& dir, const std::string& name, Os* os, RunFiles* files,
                     MetricsCache* metrics, json* run, json* data) {
  diagnose::Options options;
  options.os = os;
  options.on_file = [files, metrics](const std::string& path, std::string_view bytes,
                                     const json* doc) { files->Take(path, bytes, doc, metrics); };
  absl::StatusOr<diagnose::Report> rep = diagnose::Diagnose({dir}, options);
  if (!rep.ok()) {
    AddMissing(data, name, "findings", std::string(rep.status().message()));
    return;
  }
  for (const Finding& f : rep->findings) (*run)["findings"].push_back(FindingToJson(f));
  for (const diagnose::RunResult& r : rep->runs) {
    auto pin = [&](int64_t step, const std::string& kind) {
      if (step < 0) return;
      (*run)["pins"].push_back(
          {{"kind", kind}, {"step", step}, {"rank", r.rank}, {"text", r.curve.finding.title}});
    };
    pin(r.curve.first_bad_step, "first_bad");
    pin(r.curve.nan_step, "nan");
    for (int64_t s : r.curve.spike_steps) pin(s, "curve_spike");
  }
}

namespace {

// One rank's dump as the page draws it: its last collectives, times from t0 (the earliest
// creation time over the drawn dumps). Each entry's duration is the dump's duration_ms
// (PyTorch's CUDA-event timing, when enabled), else for our completed entries the discovered
// completion less the discovered start (comm/flight_recorder.cc writes the same), else 0.
json CollectHangRank(const hang::Dump& d, int64_t t0) {
  json entries = json::array();
  const size_t n = d.entries.size();
  for (size_t i = n > kCollectMaxCollectives ? n - kCollectMaxCollectives : 0; i < n; ++i) {
    const hang::Entry& e = d.entries[i];
    std::string op = e.profiling_name;
    if (size_t p = op.find(':'); p != std::string::npos) op = op.substr(p + 1);
    const int64_t t = e.time_created_ns;
    const bool timed = d.ours && e.state == "completed";
    entries.push_back({{"seq", e.collective_seq_id},
                       {"pg", e.pg_id},
                       {"op", op},
                       {"t_ms", t0 >= 0 && t > 0 ? (t - t0) / 1e6 : 0.0},
                       {"dur_ms", e.duration_ms > 0 ? e.duration_ms
                                  : timed ? (e.time_completed_ns - e.time_started_ns) / 1e6
                                          : 0.0},
                       {"state", e.state},
                       {"caller", e.caller}});
  }
  return {{"rank", d.rank}, {"entries", std::move(entries)}};
}

}  // namespace

// The flight recorder: per rank, the last collectives; the stuck ones from the analysis.
// Every file of hang/ is read once, by the hang module's reader, and the dumps read are
// analysed (hang::AnalyzeDumps) as `hang analyze RUN/hang` reads that folder; the dumps named
// flight_recorder.rank<R>.json are drawn, and such a file that is no usable dump is missing.
void CollectHang(const std::string& dir, const std::string& name, Os* os, RunFiles* files,
                 json* run, json* data) {
  const std::string hang_dir = run_dir::Join(dir, run_dir::kHang);
  const std::vector<std::string> paths = CollectFiles(hang_dir, os, nullptr);
  auto named = [](const std::string& p) {
    return run_dir::IsHangDumpName(fs::path(p).filename().string());
  };
  if (std::none_of(paths.begin(), paths.end(), named)) {
    AddMissing(data, name, "flight_recorder", "no " + run_dir::HangDumpPattern());
    return;
  }
  std::vector<hang::Dump> dumps;
  std::vector<size_t> drawn;  // indices into dumps
  hang::InputCounts counts;
  for (const std::string& f : paths) {
    ++counts.files_read;
    absl::StatusOr<std::string> bytes = files->ReadFile(f);
    hang::ReadResult r;
    if (bytes.ok()) {
      r = hang::ReadDumpBytes(*bytes, f);
    } else {
      r.outcome = hang::ReadOutcome::kCorrupt;
      r.reason = std::string(bytes.status().message());
    }
    if (r.outcome == hang::ReadOutcome::kDump) {
      r.dump.file = f;
      if (named(f)) drawn.push_back(dumps.size());
      dumps.push_back(std::move(r.dump));
      continue;
    }
    (r.outcome == hang::ReadOutcome::kCorrupt ? counts.corrupt : counts.skipped)
        .push_back({f, r.reason});
    if (named(f)) AddMissing(data, name, "flight_recorder", f + ": " + r.reason);
  }
  int64_t t0 = -1;
  for (size_t i : drawn) {
    for (const hang::Entry& e : dumps[i].entries) {
      if (e.time_created_ns > 0 && (t0 < 0 || e.time_created_ns < t0)) t0 = e.time_created_ns;
    }
  }
  json hang = {{"ranks", json::array()}, {"stuck", json::array()}};
  for (size_t i : drawn) hang["ranks"].push_back(CollectHangRank(dumps[i], t0));
  if (dumps.empty()) {
    AddMissing(data, name, "hang_analysis",
               absl::StrCat(hang_dir, ": no flight recorder dump found (", counts.files_read,
                            " files read)"));
  } else {
    json aj = hang::ReportToJson(hang::AnalyzeDumps(std::move(dumps), std::move(counts), {}));
    for (const json& f : JsonValueOr(aj, "findings", json::array())) {
      hang["stuck"].push_back({{"kind", JsonValueOr(f, "kind", "")},
                               {"pg", JsonValueOr(f, "pg", "")},
                               {"seq", JsonValueOr(f, "collective_seq_id", int64_t{-1})},
                               {"op", JsonValueOr(f, "op", "")},
                               {"culprit_ranks", JsonValueOr(f, "culprit_ranks", json::array())},
                               {"waiting_ranks", JsonValueOr(f, "waiting_ranks", json::array())},
                               {"sentence", JsonValueOr(f, "sentence", "")}});
    }
  }
  (*run)["hang"] = std::move(hang);
}

namespace {

// Documents under a folder (or at the top) recognised by their "format".
std::vector<std::pair<std::string, json>> CollectDocs(const std::string& dir,
                                                      const std::string& format, Os* os,
                                                      RunFiles* files) {
  std::vector<std::pair<std::string, json>> out;
  for (const std::string& f : CollectFiles(dir, os, IsJsonName)) {
    std::string why;
    if (IsProfilerTraceName(fs::path(f).filename().string())) continue;  // a raw trace
    json j = files->ReadJson(f, &why);
    if (j.is_object() && JsonValueOr(j, "format", "") == format) out.emplace_back(f, std::move(j));
  }
  return out;
}

}  // namespace

void CollectCompares(const std::string& dir, Os* os, RunFiles* files, json* run) {
  for (auto& [file, j] :
       CollectDocs(run_dir::Join(dir, run_dir::kCompare), formats::kCompare, os, files)) {
    json first = JsonValueOr(j, "first_divergence", json());
    if (first.is_object()) first.erase("metrics");  // the page shows where, not every figure
    (*run)["compares"].push_back(
        {{"file", CollectRelative(file, dir)},
         {"kind", JsonValueOr(j, "kind", std::string("dumps"))},
         {"matched", JsonValueOr(j, "matched", int64_t{0})},
         {"diverged", first.is_object() || JsonValueOr(j, "diverged", false)},
         {"first_divergence", first},
         {"findings", JsonValueOr(j, "findings", json::array())}});
  }
}

void CollectDataScans(const std::string& dir, const std::string& name, Os* os, RunFiles* files,
                      json* run, json* data) {
  for (auto& [file, j] :
       CollectDocs(run_dir::Join(dir, run_dir::kData), formats::kDataScan, os, files)) {
    json lengths = json::object();
    for (const char* k : {"chars", "tokens"}) {
      if (j.contains("length") && j["length"].contains(k)) {
        lengths[k] = JsonValueOr(j["length"][k], "histogram_log2", json::array());
      }
    }
    (*run)["data_scans"].push_back(
        {{"file", CollectRelative(file, dir)},
         {"docs", JsonValueOr(j, "docs", int64_t{0})},
         {"exact_duplicate_ratio", JsonValueOr(j, "exact_duplicate_ratio", 0.0)},
         {"near_duplicate_ratio", JsonValueOr(j, "near_duplicate_ratio", 0.0)},
         {"length_histograms", std::move(lengths)},
         {"batch_duplicates", JsonValueOr(j, "batch_duplicates", json::object())}});
  }
  if (!run->contains("data_scans")) {
    AddMissing(data, name, "data_scan",
               absl::StrCat("no ", formats::kDataScan, " document under ", run_dir::kData, "/"));
  }
}

namespace {

// A trace analysis (format trainscope.trace.analysis) reduced to what the page draws.
json CollectTraceEntry(const std::string& file, const std::string& source, const json& j) {
  json ranks = json::array();
  for (const json& r : JsonValueOr(j, "ranks", json::array())) {
    json top = json::array();
    if (r.contains("top_operators")) {
      for (const json& op : JsonValueOr(r["top_operators"], "by_total", json::array())) {
        if (top.size() >= kCollectMaxTopOps) break;
        top.push_back(op);
      }
    }
    ranks.push_back({{"rank", JsonValueOr(r, "rank", -1)},
                     {"temporal_breakdown", JsonValueOr(r, "temporal_breakdown", json::object())},
                     {"top_operators", std::move(top)}});
  }
  return {{"file", file},
          {"source", source},
          {"ranks", std::move(ranks)},
          {"stragglers", JsonValueOr(j, "stragglers", json::array())}};
}

}  // namespace

bool IsProfilerTraceName(const std::string& n) {
  return absl::EndsWith(n, ".pt.trace.json") || absl::EndsWith(n, ".pt.trace.json.gz");
}

std::vector<std::string> ProfilerTraceFolders(const std::string& dir, Os* os) {
  std::vector<std::string> out = {dir};
  for (const char* sub : {run_dir::kTrace, run_dir::kProfiler}) {
    const std::string top = run_dir::Join(dir, sub);
    if (!os->IsDirectory(top)) continue;
    out.push_back(top);
    absl::StatusOr<std::vector<std::string>> names = os->ListDir(top);  // sorted
    for (const std::string& n : names.ok() ? *names : std::vector<std::string>()) {
      if (os->IsDirectory(run_dir::Join(top, n))) out.push_back(run_dir::Join(top, n));
    }
  }
  return out;
}

// The analyses other verbs saved under trace/, then the torch.profiler traces found in the
// run directory (ProfilerTraceFolders), each folder's analysed as `trace analyze FILES...`
// would (trace::AnalyzePaths, default options): one entry per folder.
void CollectTraces(const std::string& dir, const std::string& name, Os* os, RunFiles* files,
                   json* run, json* data) {
  for (auto& [file, j] :
       CollectDocs(run_dir::Join(dir, run_dir::kTrace), formats::kTraceAnalysis, os, files)) {
    (*run)["traces"].push_back(CollectTraceEntry(CollectRelative(file, dir), "analysis", j));
  }
  for (const std::string& folder : ProfilerTraceFolders(dir, os)) {
    std::vector<std::string> files = CollectFiles(folder, os, IsProfilerTraceName);
    if (files.empty()) continue;
    const std::string rel = CollectRelative(folder, dir);
    trace::AnalyzePathsOptions trace_options;
    trace_options.os = os;
    absl::StatusOr<trace::Report> rep = trace::AnalyzePaths(files, trace_options);
    if (!rep.ok()) {
      AddMissing(data, name, "trace", std::string(rep.status().message()));
      continue;
    }
    json entry = CollectTraceEntry(rel == "." ? "" : rel, "profiler", trace::ReportToJson(*rep));
    for (const std::string& f : files) entry["trace_files"].push_back(CollectRelative(f, dir));
    (*run)["traces"].push_back(std::move(entry));
  }
  if (!run->contains("traces")) {
    AddMissing(data, name, "trace",
               absl::StrCat("no ", formats::kTraceAnalysis, " document under ", run_dir::kTrace,
                            "/ and no profiler trace (*.pt.trace.json) in the run directory, ",
                            run_dir::kTrace, "/ or ", run_dir::kProfiler, "/"));
  }
}

// Checkpoint folders under checkpoints/ (trainscope train's and trainscope.checkpoint.save's):
// structure checked (manifest, files and sizes), hashes not (the page marks them; `ckpt
// verify` checks them).
void CollectCheckpoints(const std::string& dir, Os* os, json* run) {
  for (const std::string& path :
       ckpt::ListCheckpointDirs(run_dir::Join(dir, run_dir::kCheckpoints), os)) {
    ckpt::CheckResult c = ckpt::CheckCheckpoint(path, /*hash=*/false, {}, os);
    if (c.step < 0) continue;
    json problems = json::array();
    for (const ckpt::Problem& p : c.problems) problems.push_back(p.problem);
    (*run)["checkpoints"].push_back({{"step", c.step},
                                     {"path", CollectRelative(path, dir)},
                                     {"anomaly", c.anomaly},
                                     {"complete", c.complete},
                                     {"incomplete", c.incomplete},
                                     {"problems", std::move(problems)}});
  }
  if (run->contains("checkpoints")) {  // oldest first, as the steps are drawn
    std::sort((*run)["checkpoints"].begin(), (*run)["checkpoints"].end(),
              [](const json& a, const json& b) { return a["step"] < b["step"]; });
  }
}

namespace {

// Leaves of a JSON document as "a.b.c" -> value rows, at most kCollectMaxFingerprintRows.
void CollectFlatten(const json& j, const std::string& prefix, json* rows) {
  if (rows->size() >= kCollectMaxFingerprintRows) return;
  if (j.is_object()) {
    for (const auto& [k, v] : j.items())
      CollectFlatten(v, prefix.empty() ? k : prefix + "." + k, rows);
  } else if (j.is_array()) {
    if (j.size() <= 4 &&
        std::all_of(j.begin(), j.end(), [](const json& v) { return v.is_primitive(); })) {
      rows->push_back({prefix, j.dump()});
    } else {
      rows->push_back({prefix, absl::StrCat("[", j.size(), " items]")});
    }
  } else {
    rows->push_back({prefix, j.is_string() ? j.get<std::string>() : j.dump()});
  }
}

}  // namespace

void CollectDoctorAndEnv(const std::string& dir, const std::string& name, Os* os, RunFiles* files,
                         json* run, json* data) {
  std::string why;
  std::string doctor_path = run_dir::Join(dir, run_dir::kDoctorReportJson);
  if (os->FileExists(doctor_path)) {
    json d = files->ReadJson(doctor_path, &why);
    if (d.is_object() && JsonValueOr(d, "format", "") == formats::kDoctor) {
      (*run)["doctor"] = {{"passed", JsonValueOr(d, "passed", false)},
                          {"summary", JsonValueOr(d, "summary", json::object())},
                          {"checks", JsonValueOr(d, "checks", json::array())}};
    } else {
      AddMissing(data, name, "doctor",
                 doctor_path + ": " + (why.empty() ? "not a doctor report" : why));
    }
  } else {
    AddMissing(data, name, "doctor", absl::StrCat("no ", run_dir::kDoctorReportJson));
  }
  std::string fp_path = run_dir::Join(dir, run_dir::kFingerprint);
  if (os->FileExists(fp_path)) {
    json f = files->ReadJson(fp_path, &why);
    if (f.is_object()) {
      json rows = json::array();
      CollectFlatten(f, "", &rows);
      (*run)["fingerprint"] = std::move(rows);
    } else {
      AddMissing(data, name, "fingerprint", fp_path + ": " + why);
    }
  } else {
    AddMissing(data, name, "fingerprint", absl::StrCat("no ", run_dir::kFingerprint));
  }
}

// The names of the page's sections that have evidence, in page order.
json CollectSections(const json& data) {
  auto any = [&](const std::function<bool(const json&)>& has) {
    return std::any_of(data["runs"].begin(), data["runs"].end(), has);
  };
  auto series = [&](const char* s) {
    return any([&](const json& r) {
      for (const json& k : JsonValueOr(r, "ranks", json::array())) {
        if (k["series"].contains(s)) return true;
      }
      return false;
    });
  };
  json out = json::array({"summary"});
  if (any([](const json& r) { return !JsonValueOr(r, "findings", json::array()).empty(); })) {
    out.push_back("findings");
  }
  for (const char* s : {"loss", "val_loss", "lr", "grad_norm"}) {
    if (series(s)) out.push_back(s);
  }
  if (any([](const json& r) {
        // A watch loop that never calls mon.phase logs all-zero phases: nothing to draw.
        for (const json& k : JsonValueOr(r, "ranks", json::array())) {
          const json phases = JsonValueOr(k, "phases", json::object());
          if (!phases.contains("x")) continue;
          for (const auto& [n, v] : phases.items()) {
            if (n == "x" || !v.is_array()) continue;
            for (const json& x : v) {
              if (x.is_number() && x.get<double>() > 0) return true;
            }
          }
        }
        return false;
      })) {
    out.push_back("phases");
  }
  if (any([](const json& r) { return JsonValueOr(r, "ranks", json::array()).size() >= 2; })) {
    out.push_back("ranks");
  }
  if (any([](const json& r) {
        for (const json& k : JsonValueOr(r, "ranks", json::array())) {
          const json logged = JsonValueOr(k, "scalars", json::object());
          for (const auto& [n, v] : logged.items()) {
            if (!k["series"].contains(n)) return true;  // not drawn on another chart
          }
        }
        return false;
      })) {
    out.push_back("scalars");
  }
  if (series("host_rss_bytes") || series("device_mem_bytes")) out.push_back("memory");
  const std::vector<std::pair<const char*, const char*>> parts = {
      {"hang", "flight_recorder"}, {"data_scans", "data_scan"}, {"traces", "trace"},
      {"compares", "compare"},     {"doctor", "doctor"},        {"fingerprint", "fingerprint"}};
  for (const auto& part : parts) {
    const char* key = part.first;  // (a structured binding cannot be captured in C++17)
    if (any([key](const json& r) { return r.contains(key); })) out.push_back(part.second);
  }
  return out;
}

}  // namespace trainscope::report
