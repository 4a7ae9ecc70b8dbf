// ReportCollector (report.h): the report's data model collected again and again, each part
// re-read only when the files it reads changed. The metrics part reads on from where it
// stopped (RankMetricsReader); every other part is a pure function of a few files, so what it
// produced is kept with a stamp of those files (name, size, modification time, inode) and
// produced again when the stamp differs. Diagnose, which reads the whole run, is the one
// part that also depends on the appended metrics lines: see CollectorOptions. Directories are
// listed and stat'ed through ReportOptions::os.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "report/collect.h"
#include "trainscope/core/formats.h"
#include "trainscope/core/run_dir.h"
#include "trainscope/report/report.h"

namespace trainscope::report {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr int kCollectorFindingsDepth = 9;  // diagnose walks 8 levels below the run
constexpr int kCollectorHangDepth = 4;

// "<path> <size> <mtime ns> <inode>", or "<path> -" when `st` is an error.
void CollectorStatLine(const std::string& p, const absl::StatusOr<FileInfo>& st, std::string* out) {
  if (!st.ok()) {
    absl::StrAppend(out, p, " -\n");
    return;
  }
  absl::StrAppend(out, p, " ", st->size_bytes, " ", st->mtime_ns, " ", st->inode, "\n");
}

void CollectorStatLine(const std::string& p, Os* os, std::string* out) {
  CollectorStatLine(p, os->Stat(p), out);
}

// Files a live run appends to on every step: the metrics files and the trainer's TensorBoard
// copy of them (train/tb/...).
bool CollectorIsAppended(const fs::path& dir, const fs::path& p) {
  const fs::path rel = p.lexically_relative(dir);
  auto it = rel.begin();
  if (it == rel.end() || *it != run_dir::kTrain) return false;
  if (++it == rel.end()) return false;
  const std::string first = it->string();
  if (first == run_dir::kTensorBoard) return true;
  return std::next(it) == rel.end() && run_dir::IsTrainMetricsName(first);
}

// A stamp of every entry under `dir` (sorted; directories with their own time, so a file
// created in a checkpoint step folder shows; a checkpoints folder's step folders are not
// entered: diagnose only lists them). Entries `appended` selects go to *appended instead.
void CollectorStamp(const std::string& dir, int depth, Os* os,
                    const std::function<bool(const fs::path&)>& appended, std::string* out,
                    std::string* appended_out) {
  absl::StatusOr<std::vector<std::string>> names = os->ListDir(dir);  // sorted
  if (!names.ok()) return;
  const bool in_checkpoints =
      fs::path(run_dir::Join(dir, "x")).parent_path().filename() == run_dir::kCheckpoints;
  for (const std::string& name : *names) {
    const std::string p = run_dir::Join(dir, name);
    const bool is_appended = appended && appended(p);
    const absl::StatusOr<FileInfo> st = os->Stat(p);
    CollectorStatLine(p, st, is_appended ? appended_out : out);
    if (depth > 0 && !is_appended && st.ok() && st->is_directory && !in_checkpoints) {
      CollectorStamp(p, depth - 1, os, appended, out, appended_out);
    }
  }
}

}  // namespace

std::string DirStamp(const std::string& dir, int depth, Os* os) {
  std::string out;
  CollectorStamp(dir, depth, os, nullptr, &out, nullptr);
  return out;
}

namespace {

// What CollectTraces reads: trace/'s documents and the profiler traces of every folder it
// looks in (the run directory's own files: only those named like a trace).
std::string CollectorTraceStamp(const std::string& dir, Os* os) {
  std::string out = DirStamp(run_dir::Join(dir, run_dir::kTrace), 0, os);
  for (const std::string& folder : ProfilerTraceFolders(dir, os)) {
    absl::StatusOr<std::vector<std::string>> names = os->ListDir(folder);  // sorted
    for (const std::string& n : names.ok() ? *names : std::vector<std::string>()) {
      if (IsProfilerTraceName(n)) CollectorStatLine(run_dir::Join(folder, n), os, &out);
    }
  }
  return out;
}

}  // namespace

struct ReportCollector::State {
  // What one part produced: its keys of the run's object and its "missing" entries.
  struct Part {
    bool valid = false;
    std::string stamp;  // of the files it read
    json run = json::object();
    json missing = json::array();
  };

  struct Run {
    Run(std::string dir_path, std::string run_name, Os* os)
        : dir(dir_path), name(std::move(run_name)), files(std::move(dir_path), os) {}
    std::string dir, name;
    MetricsCache metrics;
    RunFiles files;  // what diagnose read in the current collection
    Part findings, hang, data_scans, traces, compares, checkpoints, doctor_env;
    std::string findings_appended;  // the appended files' stamp when findings were made
    std::chrono::steady_clock::time_point diagnosed_at;
    double diagnose_s = 0;
    bool findings_stale = false;  // appended lines not diagnosed yet (backoff)
  };
  // Constant after construction.
  ReportOptions options;
  CollectorOptions collector_options;
  std::vector<Run> runs;
  // Changed by Collect().
  Stats stats;

  void Findings(Run* r);
};

namespace {

// Produces the part again (into a fresh object) when `stamp` differs from the last one.
void CollectorRefresh(ReportCollector::State::Part* part, std::string stamp, int64_t* rereads,
                      const std::function<void(json* run, json* data)>& collect) {
  if (part->valid && part->stamp == stamp) return;
  json run = json::object();
  json data = {{"missing", json::array()}};
  collect(&run, &data);
  part->valid = true;
  part->stamp = std::move(stamp);
  part->run = std::move(run);
  part->missing = std::move(data["missing"]);
  ++*rereads;
}

void CollectorApply(const ReportCollector::State::Part& part, json* run, json* data) {
  for (const auto& [key, value] : part.run.items()) (*run)[key] = value;
  for (const json& m : part.missing) (*data)["missing"].push_back(m);
}

}  // namespace

void ReportCollector::State::Findings(Run* r) {
  std::string other, appended;
  CollectorStamp(
      r->dir, kCollectorFindingsDepth, options.os,
      [r](const fs::path& p) { return CollectorIsAppended(r->dir, p); }, &other, &appended);
  const auto now = std::chrono::steady_clock::now();
  if (r->findings.valid && r->findings.stamp == other) {
    r->findings_stale = appended != r->findings_appended;
    if (!r->findings_stale) return;
    const double since_s = std::chrono::duration<double>(now - r->diagnosed_at).count();
    if (since_s < collector_options.findings_backoff * r->diagnose_s) return;
  }
  r->findings_stale = false;
  r->findings.valid = false;
  Os* os = options.os;
  CollectorRefresh(&r->findings, std::move(other), &stats.diagnoses,
                   [r, os](json* run, json* data) {
                     CollectFindings(r->dir, r->name, os, &r->files, &r->metrics, run, data);
                   });
  r->findings_appended = std::move(appended);
  r->diagnosed_at = std::chrono::steady_clock::now();
  r->diagnose_s = std::chrono::duration<double>(r->diagnosed_at - now).count();
}

ReportCollector::ReportCollector(std::vector<std::string> run_dirs, ReportOptions options,
                                 CollectorOptions collector_options)
    : state_(std::make_unique<State>()) {
  state_->options = std::move(options);
  state_->collector_options = collector_options;
  std::vector<std::string> names;
  for (std::string& dir : run_dirs) {
    std::string name = fs::path(dir).lexically_normal().filename().string();
    if (name.empty()) name = fs::path(dir).lexically_normal().parent_path().filename().string();
    if (std::count(names.begin(), names.end(), name)) name = absl::StrCat(name, "#", names.size());
    names.push_back(name);
    state_->runs.emplace_back(std::move(dir), std::move(name), state_->options.os);
  }
}

ReportCollector::~ReportCollector() = default;

ReportCollector::Stats ReportCollector::stats() const {
  Stats s = state_->stats;
  for (const State::Run& r : state_->runs) {
    s.metrics_bytes_parsed += r.metrics.bytes_parsed;
    s.metrics_full_reads += r.metrics.full_reads;
    s.files_from_diagnose += r.files.taken();
    s.files_read += r.files.read();
  }
  return s;
}

bool ReportCollector::findings_pending() const {
  return std::any_of(state_->runs.begin(), state_->runs.end(),
                     [](const State::Run& r) { return r.findings_stale; });
}

absl::StatusOr<json> ReportCollector::Collect() {
  State& st = *state_;
  if (st.runs.empty()) return absl::InvalidArgumentError("no run directory given");
  Os* os = st.options.os;
  for (const State::Run& r : st.runs) {
    const absl::StatusOr<FileInfo> info = os->Stat(r.dir);
    if (!info.ok()) return absl::NotFoundError(r.dir + ": no such directory");
    if (!info->is_directory) return absl::InvalidArgumentError(r.dir + ": not a directory");
  }
  ++st.stats.collections;
  json data = {
      {"format", formats::kReportData}, {"version", 1},   {"runs", json::array()},
      {"missing", json::array()},       {"malformed", 0}, {"malformed_lines", json::array()}};
  const size_t max_points = static_cast<size_t>(std::max(st.options.max_points, 16));
  for (State::Run& r : st.runs) {
    json run = {{"name", r.name},
                {"ranks", json::array()},
                {"events", json::array()},
                {"pins", json::array()},
                {"findings", json::array()}};
    st.Findings(&r);  // first: the parts below take the files it read (RunFiles)
    CollectMetrics(r.dir, r.name, max_points, os, &r.metrics, &run, &data);
    CollectorApply(r.findings, &run, &data);
    const std::string& dir = r.dir;
    const std::string& name = r.name;
    RunFiles* files = &r.files;
    int64_t* rereads = &st.stats.parts_read;
    CollectorRefresh(&r.hang, DirStamp(run_dir::Join(dir, run_dir::kHang), kCollectorHangDepth, os),
                     rereads, [&](json* j, json* d) { CollectHang(dir, name, os, files, j, d); });
    CollectorApply(r.hang, &run, &data);
    CollectorRefresh(&r.data_scans, DirStamp(run_dir::Join(dir, run_dir::kData), 0, os), rereads,
                     [&](json* j, json* d) { CollectDataScans(dir, name, os, files, j, d); });
    CollectorApply(r.data_scans, &run, &data);
    CollectorRefresh(&r.traces, CollectorTraceStamp(dir, os), rereads,
                     [&](json* j, json* d) { CollectTraces(dir, name, os, files, j, d); });
    CollectorApply(r.traces, &run, &data);
    CollectorRefresh(&r.compares, DirStamp(run_dir::Join(dir, run_dir::kCompare), 0, os), rereads,
                     [&](json* j, json*) { CollectCompares(dir, os, files, j); });
    CollectorApply(r.compares, &run, &data);
    CollectorRefresh(&r.checkpoints, DirStamp(run_dir::Join(dir, run_dir::kCheckpoints), 0, os),
                     rereads, [&](json* j, json*) { CollectCheckpoints(dir, os, j); });
    CollectorApply(r.checkpoints, &run, &data);
    std::string doc_stamp;
    CollectorStatLine(run_dir::Join(dir, run_dir::kDoctorReportJson), os, &doc_stamp);
    CollectorStatLine(run_dir::Join(dir, run_dir::kFingerprint), os, &doc_stamp);
    CollectorRefresh(&r.doctor_env, std::move(doc_stamp), rereads,
                     [&](json* j, json* d) { CollectDoctorAndEnv(dir, name, os, files, j, d); });
    CollectorApply(r.doctor_env, &run, &data);
    r.files.Clear();
    data["runs"].push_back(std::move(run));
  }
  std::string title = st.options.title;
  if (title.empty()) {
    title = "trainscope report: ";
    for (size_t i = 0; i < st.runs.size(); ++i) title += (i ? ", " : "") + st.runs[i].name;
  }
  data["title"] = title;
  data["sections"] = CollectSections(data);
  return data;
}

absl::StatusOr<json> CollectReportData(const std::vector<std::string>& run_dirs,
                                       const ReportOptions& options) {
  CollectorOptions every_time;
  every_time.findings_backoff = 0;
  ReportCollector collector(run_dirs, options, every_time);
  return collector.Collect();
}

}  // namespace trainscope::report
