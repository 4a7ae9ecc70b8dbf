// torch_npu per-rank folder, text export: the CSV and JSON files of ASCEND_PROFILER_OUTPUT and
// the two JSON files beside it. The SQLite export is read by ascend_db.cc.
#include "trace/ascend_rank.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "trace/ascend_rank_csv.h"
#include "trace/chrome_reader.h"
#include "trainscope/core/json_text.h"
#include "trainscope/core/os.h"
#include "trainscope/core/status.h"

namespace trainscope::trace::internal {
namespace {

// The SQLite export's main file: ascend_pytorch_profiler_{rank}.db (or without the rank).
bool IsProfilerDbName(const std::string& n) {
  return absl::StartsWith(n, "ascend_pytorch_profiler") && absl::EndsWith(n, ".db");
}

// ParseStats::events_kept-style bookkeeping of one bad file: named and counted, not fatal.
void FileError(RankTrace* t, const std::string& file, const absl::Status& s) {
  AscendRankData* d = AscendData(t);
  d->file_errors.push_back({file, std::string(s.message())});
  ++t->stats.malformed;
  if (t->stats.warnings.size() < 20)
    t->stats.warnings.push_back(absl::StrCat(file, ": not read: ", s.message()));
}

// Columns of `header` that are not in `known` (and not counters of the given prefixes).
void NoteUnknownColumns(const std::vector<std::string>& header, const std::set<std::string>& known,
                        std::initializer_list<const char*> prefixes, const std::string& file,
                        AscendRankData* d) {
  for (const std::string& h : header) {
    if (known.count(h)) continue;
    bool counter = false;
    for (const char* p : prefixes) counter |= absl::StartsWith(h, p);
    if (!counter) d->unknown_columns[file].push_back(h);
  }
}

absl::Status ReadOpStatisticCsv(const std::string& path, Os* os, RankTrace* t) {
  TS_ASSIGN_OR_RETURN(std::string text, SlurpFile(path, os));
  auto rows = ParseCsv(text);
  if (rows.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": line 1: empty"));
  const auto& h = rows[0];
  int c_type = CsvCol(h, {"OP Type"}), c_core = CsvCol(h, {"Core Type"}),
      c_count = CsvCol(h, {"Count"}), c_total = CsvCol(h, {"Total Time(us)"});
  if (c_type < 0 || c_total < 0)
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": line 1: not an op_statistic.csv (needs OP Type, Total Time(us))"));
  AscendRankData* d = AscendData(t);
  NoteUnknownColumns(h,
                     {"Device_id", "Model Name", "OP Type", "Core Type", "Count", "Total Time(us)",
                      "Min Time(us)", "Avg Time(us)", "Max Time(us)", "Ratio(%)"},
                     {}, "op_statistic.csv", d);
  for (size_t i = 1; i < rows.size(); ++i) {
    const auto& r = rows[i];
    if (r.size() <= 1 && (r.empty() || r[0].empty())) continue;
    bool ok = true, bad = false;
    AscendOpStat s;
    s.op_type = CsvCell(r, c_type);
    s.core_type = CsvCell(r, c_core);
    s.total_us = CsvNum(r, c_total, &ok, &bad);
    bool opt = true;
    s.count = static_cast<int64_t>(CsvNum(r, c_count, &opt, &bad));
    if (!ok || s.op_type.empty()) {
      CsvBadRow(t, &t->stats.malformed, path, static_cast<int64_t>(i + 1), "bad row");
      continue;
    }
    if (bad) {
      CsvBadRow(t, &t->stats.bad_values, path, static_cast<int64_t>(i + 1),
                "a count or time that is negative, non-finite or too large");
      continue;
    }
    d->op_stats.push_back(s);
  }
  return absl::OkStatus();
}

// memory_record.csv (Total Allocated/Reserved(MB)) and npu_module_mem.csv (Total Reserved(MB)):
// the peaks. operator_memory.csv is per allocation: its rows are counted.
absl::Status ReadMemoryCsv(const std::string& path, const std::string& file, Os* os, RankTrace* t) {
  TS_ASSIGN_OR_RETURN(std::string text, SlurpFile(path, os));
  auto rows = ParseCsv(text);
  if (rows.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": line 1: empty"));
  const auto& h = rows[0];
  AscendRankData* d = AscendData(t);
  int c_alloc = CsvCol(h, {"Total Allocated(MB)"}), c_res = CsvCol(h, {"Total Reserved(MB)"});
  int c_ts = CsvCol(h, {"Timestamp(us)", "Allocation Time(us)"});
  if (c_ts < 0)
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": line 1: no Timestamp(us) or Allocation Time(us) column"));
  for (size_t i = 1; i < rows.size(); ++i) {
    const auto& r = rows[i];
    if (r.size() <= 1 && (r.empty() || r[0].empty())) continue;
    if (r.size() < h.size()) {
      CsvBadRow(t, &t->stats.malformed, path, static_cast<int64_t>(i + 1), "short row");
      continue;
    }
    ++d->memory_rows;
    bool ok = true, bad = false;
    double a = CsvNum(r, c_alloc, &ok, &bad), res = CsvNum(r, c_res, &ok, &bad);
    if (bad) continue;  // empty cells are normal here (APP rows without allocation)
    if (file == "npu_module_mem.csv") {
      d->peak_module_reserved_mb = std::max(d->peak_module_reserved_mb, res);
    } else if (file == "memory_record.csv") {
      d->peak_allocated_mb = std::max(d->peak_allocated_mb, a);
      d->peak_reserved_mb = std::max(d->peak_reserved_mb, res);
    }
  }
  return absl::OkStatus();
}

absl::Status ReadJsonFile(const std::string& path, Os* os, nlohmann::json* j) {
  TS_ASSIGN_OR_RETURN(std::string text, SlurpFile(path, os));
  TS_ASSIGN_OR_RETURN(*j, ParseJsonText(text, kJsonMaxDepth, path));
  if (!j->is_object())
    return absl::InvalidArgumentError(absl::StrCat(path, ": byte 0: not a JSON object"));
  return absl::OkStatus();
}

// The rated AI Core frequency of a device info file ("DeviceInfo": [{"aic_frequency": "1850",
// ...}], a string or a number, MHz); 0 when absent. msprof-analyze's advisor reads it from
// PROF_*/device_*/info.json.* (advisor/dataset/profiling/device_info.py).
double AicFrequencyMhz(const nlohmann::json& j) {
  auto it = j.find("DeviceInfo");
  if (it == j.end() || !it->is_array()) return 0;
  for (const nlohmann::json& dev : *it) {
    if (!dev.is_object() || !dev.contains("aic_frequency")) continue;
    const nlohmann::json& f = dev["aic_frequency"];
    double mhz = 0;
    if (f.is_number()) mhz = f.get<double>();
    if (f.is_string() && !absl::SimpleAtod(f.get<std::string>(), &mhz)) mhz = 0;
    if (mhz > 0 && mhz < 1e5) return mhz;
  }
  return 0;
}

// PROF_*/device_*/info.json.<n> (not the .done markers) of the msprof raw data beside
// ASCEND_PROFILER_OUTPUT: the rated AI Core frequency.
void ReadDeviceInfo(const std::string& parent, const std::string& prof, Os* os, RankTrace* t) {
  AscendRankData* d = AscendData(t);
  for (const std::string& dev : os->ListNames(parent + "/" + prof)) {
    const std::string dir = parent + "/" + prof + "/" + dev;
    if (!absl::StartsWith(dev, "device_") || !os->IsDirectory(dir)) continue;
    for (const std::string& n : os->ListNames(dir)) {
      if (!absl::StartsWith(n, "info.json.") || absl::EndsWith(n, "done")) continue;
      const std::string rel = prof + "/" + dev + "/" + n;
      nlohmann::json j;
      absl::Status s = ReadJsonFile(dir + "/" + n, os, &j);
      if (!s.ok()) {
        FileError(t, rel, s);
        continue;
      }
      if (double mhz = AicFrequencyMhz(j); mhz > 0 && d->aic_rated_mhz <= 0) {
        d->aic_rated_mhz = mhz;
        d->files_read.push_back(rel);
      }
    }
  }
}

// profiler_info_{rank}.json ("rank_id") and profiler_metadata.json (ENV_VARIABLES,
// distributed_args.world_size) beside ASCEND_PROFILER_OUTPUT; PROF_*/ for the device info.
void ReadInfoFiles(const std::string& parent, Os* os, RankTrace* t) {
  AscendRankData* d = AscendData(t);
  for (const std::string& n : os->ListNames(parent)) {
    const std::string path = parent + "/" + n;
    if (absl::StartsWith(n, "PROF_") && os->IsDirectory(path)) {
      ReadDeviceInfo(parent, n, os, t);
    } else if (absl::StartsWith(n, "profiler_info") && absl::EndsWith(n, ".json")) {
      nlohmann::json j;
      absl::Status s = ReadJsonFile(path, os, &j);
      if (!s.ok()) {
        FileError(t, n, s);
        continue;
      }
      d->files_read.push_back(n);
      if (double mhz = AicFrequencyMhz(j); mhz > 0) d->aic_rated_mhz = mhz;
      int r = -1, v = -1;
      auto it = j.find("rank_id");
      if (it != j.end() && it->is_number_integer() && it->get<int64_t>() >= 0 &&
          it->get<int64_t>() < kMaxRank) {
        r = static_cast<int>(it->get<int64_t>());
      } else if (n.size() > 19 && absl::SimpleAtoi(n.substr(14, n.size() - 19), &v) && v >= 0 &&
                 v < kMaxRank) {
        r = v;
      }
      if (r >= 0 && t->rank < 0) {
        t->rank = r;
        t->rank_source = "profiler_info";
      }
    } else if (n == "profiler_metadata.json") {
      nlohmann::json j;
      absl::Status s = ReadJsonFile(path, os, &j);
      if (!s.ok()) {
        FileError(t, n, s);
        continue;
      }
      d->files_read.push_back(n);
      if (j.contains("ENV_VARIABLES") && j["ENV_VARIABLES"].is_object())
        for (auto it = j["ENV_VARIABLES"].begin(); it != j["ENV_VARIABLES"].end(); ++it)
          if (it.value().is_string()) d->env[it.key()] = it.value().get<std::string>();
      if (j.contains("distributed_args") && j["distributed_args"].is_object()) {
        const auto& a = j["distributed_args"];
        if (a.contains("world_size") && a["world_size"].is_number_integer()) {
          int64_t w = a["world_size"].get<int64_t>();
          if (w > 0 && w <= kMaxRank) t->world_size = static_cast<int>(w);
        }
      }
    }
  }
}

// One file of ASCEND_PROFILER_OUTPUT by name; false when this reader does not use it.
bool ReadOutputFile(const std::string& out_dir, const std::string& n, bool has_device, Os* os,
                    RankTrace* t, absl::Status* status) {
  const std::string p = out_dir + "/" + n;
  if (n == "kernel_details.csv") {
    *status = ReadKernelDetailsCsv(p, has_device, t, os);
  } else if (n == "step_trace_time.csv") {
    *status = ReadStepTraceCsv(p, t, os);
  } else if (n == "op_statistic.csv") {
    *status = ReadOpStatisticCsv(p, os, t);
  } else if (n == "memory_record.csv" || n == "npu_module_mem.csv" || n == "operator_memory.csv") {
    *status = ReadMemoryCsv(p, n, os, t);
  } else if (n == "communication.json" || n == "communication_matrix.json") {
    absl::StatusOr<std::string> text = SlurpFile(p, os);
    const int64_t missing_before = AscendData(t)->comm_missing_keys;
    if (!text.ok()) {
      *status = text.status();
    } else if (n == "communication.json") {
      *status = ParseCommunicationJson(*text, p, AscendData(t));
    } else {
      *status = ParseCommunicationMatrixJson(*text, p, AscendData(t));
    }
    const int64_t missing = AscendData(t)->comm_missing_keys - missing_before;
    if (missing > 0) {
      t->stats.missing_fields += missing;
      if (t->stats.warnings.size() < 20)
        t->stats.warnings.push_back(
            absl::StrCat(n, ": ", missing, " ops, links or fields missing or not numbers"));
    }
  } else {
    return false;
  }
  return true;
}

}  // namespace

AscendRankData* AscendData(RankTrace* t) {
  if (!t->ascend) t->ascend = std::make_shared<AscendRankData>();
  return t->ascend.get();
}

std::string AscendOutputDir(const std::string& dir, Os* os) {
  if (os->IsDirectory(dir + "/ASCEND_PROFILER_OUTPUT")) return dir + "/ASCEND_PROFILER_OUTPUT";
  if (os->IsRegularFile(dir + "/trace_view.json") ||
      os->IsRegularFile(dir + "/step_trace_time.csv") ||
      os->IsRegularFile(dir + "/kernel_details.csv"))
    return dir;
  for (const std::string& n : os->ListNames(dir))
    if (IsProfilerDbName(n) && os->IsRegularFile(dir + "/" + n)) return dir;
  return "";
}

absl::Status ReadAscendDir(const std::string& dir, const std::string& out_dir,
                           const ReadOptions& opt, RankTrace* t) {
  t->format = "ascend";
  Os* os = opt.os;
  AscendRankData* d = AscendData(t);
  d->export_type = "text";
  std::vector<std::string> names = os->ListNames(out_dir);
  bool any = false;
  // trace_view.json first: whether the timeline has the device tasks decides how
  // kernel_details.csv rows are used.
  if (std::find(names.begin(), names.end(), "trace_view.json") != names.end()) {
    const std::string p = out_dir + "/trace_view.json";
    auto src = OpenByteSource(p, os);
    absl::Status s = src.ok() ? ReadChromeTrace(src->get(), p, opt, t) : src.status();
    t->format = "ascend";
    if (s.ok()) {
      d->files_read.push_back("trace_view.json");
      any = true;
    } else {
      FileError(t, "trace_view.json", s);
    }
  }
  const bool has_device = std::any_of(t->events.begin(), t->events.end(),
                                      [](const Event& e) { return e.flags & kFlagDevice; });
  std::string db, analysis_db;
  for (const std::string& n : names) {
    if (n == "trace_view.json" || os->IsDirectory(out_dir + "/" + n)) continue;
    if (IsProfilerDbName(n)) {
      db = n;
      continue;
    }
    if (n == "analysis.db") {
      analysis_db = n;
      continue;
    }
    absl::Status s;
    if (!ReadOutputFile(out_dir, n, has_device, os, t, &s)) {
      if (absl::StartsWith(n, "profiler_info") || n == "profiler_metadata.json") continue;
      d->unknown_files.push_back(n);
      continue;
    }
    if (s.ok()) {
      d->files_read.push_back(n);
      any = true;
    } else {
      FileError(t, n, s);
    }
  }
  // The SQLite export: read when the text export is not there (newer torch_npu writes only
  // the .db); beside a text export it is listed as not used.
  if (!db.empty()) {
    if (!any) {
      d->export_type = "db";
      absl::Status s = ReadAscendDb(out_dir + "/" + db,
                                    analysis_db.empty() ? "" : out_dir + "/" + analysis_db, t);
      if (s.ok()) {
        d->files_read.push_back(db);
        if (!analysis_db.empty()) d->files_read.push_back(analysis_db);
        any = true;
      } else {
        FileError(t, db, s);
      }
    } else {
      d->unknown_files.push_back(db);
      if (!analysis_db.empty()) d->unknown_files.push_back(analysis_db);
    }
  } else if (!analysis_db.empty()) {
    d->unknown_files.push_back(analysis_db);
  }
  const std::string parent = out_dir == dir ? dir + "/.." : dir;
  ReadInfoFiles(parent, os, t);
  if (!any) {
    std::vector<std::string> why;
    for (const auto& [f, e] : d->file_errors) why.push_back(e);
    return absl::InvalidArgumentError(absl::StrCat(
        dir, ": nothing readable in ", out_dir,
        why.empty() ? " (no trace_view.json, kernel_details.csv, step_trace_time.csv or .db)"
                    : absl::StrCat(": ", absl::StrJoin(why, "; "))));
  }
  return absl::OkStatus();
}

}  // namespace trainscope::trace::internal
