// Private to the report module: the parts of the report's data model, one function per part
// of a run directory, each writing its keys into the run's object and what is absent into
// data["missing"]. ReportCollector (collector.cc) calls them and keeps what they produced
// until the files they read change. CollectFindings (diagnose) runs first in a collection;
// the parts after it take the files it read from `files` (run_files.h) instead of reading
// them again.
// Every file is listed and read through the `os` the functions take (ReportOptions::os).
// Thread-compatible: a MetricsCache is used by one thread at a time.
#ifndef TRAINSCOPE_REPORT_COLLECT_H_
#define TRAINSCOPE_REPORT_COLLECT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "report/metrics.h"
#include "report/run_files.h"

namespace trainscope::report {

// The metrics files of one run directory, each with its incremental reader and the drawable
// JSON of its last version.
struct MetricsCache {
  struct File {
    File(std::string path, Os* os) : reader(std::move(path), os) {}
    RankMetricsReader reader;
    int64_t json_version = -1;  // reader.version() that `json` was made from
    nlohmann::json json;        // RankMetricsToJson + "file"
    bool taken = false;         // read from diagnose's bytes in this collection (RunFiles)
  };
  std::map<std::string, File> files;  // by path; files that disappeared are dropped
  int64_t bytes_parsed = 0;           // by all readers, ever
  int64_t full_reads = 0;             // files read from their start
};

// Train metrics (keys "ranks", "events", "summary", "stragglers"): every
// train/metrics.rank<R>.jsonl, read on from where `cache` left it (a file RunFiles::Take
// parsed in this collection is not read again).
void CollectMetrics(const std::string& dir, const std::string& name, size_t max_points, Os* os,
                    MetricsCache* cache, nlohmann::json* run, nlohmann::json* data);
// Diagnose's findings over the whole run directory ("findings", "pins"); every file it reads
// goes to files->Take (and the metrics files into `metrics`' readers).
void CollectFindings(const std::string& dir, const std::string& name, Os* os, RunFiles* files,
                     MetricsCache* metrics, nlohmann::json* run, nlohmann::json* data);
// The flight recorder's dumps ("hang"), from hang/, read by the hang module's reader
// (hang/dump.h) and analysed as `trainscope hang analyze RUN/hang` would.
void CollectHang(const std::string& dir, const std::string& name, Os* os, RunFiles* files,
                 nlohmann::json* run, nlohmann::json* data);
// Data scan reports under data/ ("data_scans").
void CollectDataScans(const std::string& dir, const std::string& name, Os* os, RunFiles* files,
                      nlohmann::json* run, nlohmann::json* data);
// Trace analyses under trace/, and torch.profiler traces found in the run directory
// analysed ("traces": {"file", "source": "analysis" | "profiler", "ranks", "stragglers",
// "trace_files" for profiler traces}).
void CollectTraces(const std::string& dir, const std::string& name, Os* os, RunFiles* files,
                   nlohmann::json* run, nlohmann::json* data);
// `trainscope compare --json` reports saved under compare/ ("compares": {"file", "kind"
// (dumps | runs), "matched", "diverged", "first_divergence", "findings"}).
void CollectCompares(const std::string& dir, Os* os, RunFiles* files, nlohmann::json* run);
// torch.profiler's trace file names: *.pt.trace.json, *.pt.trace.json.gz.
bool IsProfilerTraceName(const std::string& name);
// The folders whose profiler traces the report analyses: the run directory, trace/ and
// profiler/ (run_dir::kProfiler) and their direct subfolders (those that exist), in that order.
std::vector<std::string> ProfilerTraceFolders(const std::string& dir, Os* os);
// The checkpoint folders under checkpoints/ ("checkpoints": [{"step", "path", "anomaly",
// "complete", "incomplete", "problems"}], oldest first); nothing when there are none.
void CollectCheckpoints(const std::string& dir, Os* os, nlohmann::json* run);
// The doctor report and the environment fingerprint ("doctor", "fingerprint").
void CollectDoctorAndEnv(const std::string& dir, const std::string& name, Os* os, RunFiles* files,
                         nlohmann::json* run, nlohmann::json* data);
// A stamp of the tree under `dir`, `depth` levels down: every entry's path, size,
// modification time (ns) and inode, sorted; a checkpoints folder's step folders are listed,
// not entered (the fake's modification times are 0). Equal stamps: nothing the report reads
// has changed.
std::string DirStamp(const std::string& dir, int depth, Os* os);

// The names of the page's sections that have evidence, in page order.
nlohmann::json CollectSections(const nlohmann::json& data);

}  // namespace trainscope::report

#endif  // TRAINSCOPE_REPORT_COLLECT_H_
