// torch_npu's SQLite export: ascend_pytorch_profiler_{rank}.db (msprof's tables plus the
// framework's) and analysis.db (msprof-analyze's per-rank tables). Schema as msprof-analyze reads
// it (msprof_analyze/prof_common/constant.py TABLE_*; prof_exports/*): times are ns integers
// (PYTORCH_API's as text), names are ids into STRING_IDS.
//   TASK(startNs, endNs, globalTaskId, streamId, ...) + COMPUTE_TASK_INFO(globalTaskId, name,
//     opType, taskType, inputShapes, inputDataTypes)         -> device compute tasks
//   COMMUNICATION_OP(opName, startNs, endNs, ...)            -> device communication ops
//   CANN_API(startNs, endNs, type, globalTid, name) + ENUM_API_TYPE -> host API calls, named as
//     trace_view.json names them ("AscendCL@aclopCompileAndExecute", "Node@launch")
//   PYTORCH_API(startNs, endNs, globalTid, name)             -> framework operators
//   STEP_TIME(id, startNs, endNs)                            -> ProfilerStep#id on the main thread
//                                                               (when PYTORCH_API lacks them)
//   OVERLAP_ANALYSIS(startNs, endNs, type)                   -> the Overlap Analysis lanes
//     (type 0 Computing, 1 Communication, 2 Communication(Not Overlapped), 3 Free: the order of
//     the lanes in trace_view.json; their sums equal StepTraceTime's columns)
//   AICORE_FREQ(freq), RANK_DEVICE_MAP(rankId), META_DATA(name, value)
//   analysis.db: StepTraceTime, CommAnalyzerTime, CommAnalyzerBandwidth, CommAnalyzerMatrix.
// A table that is absent, or lacks a column used here (another schema version), is skipped and
// named in AscendRankData::file_errors; the others are read.
#include <sqlite3.h>

#include <cctype>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "trace/ascend_rank.h"
#include "trainscope/core/json_text.h"

namespace trainscope::trace::internal {
namespace {

// An open read-only database; closed on destruction.
class Db {
 public:
  explicit Db(const std::string& path) {
    if (sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
      error_ = db_ ? sqlite3_errmsg(db_) : "cannot open";
      sqlite3_close(db_);
      db_ = nullptr;
    }
  }
  ~Db() { sqlite3_close(db_); }
  Db(const Db&) = delete;
  Db& operator=(const Db&) = delete;
  bool ok() const { return db_ != nullptr; }
  const std::string& error() const { return error_; }
  // Column names of `table`; empty when there is no such table (or the file is not SQLite).
  std::set<std::string> Columns(const std::string& table) {
    std::set<std::string> cols;
    Query(absl::StrCat("PRAGMA table_info(\"", table, "\")"), [&](sqlite3_stmt* s) {
      const unsigned char* n = sqlite3_column_text(s, 1);
      if (n) cols.insert(reinterpret_cast<const char*>(n));
    });
    return cols;
  }
  // Runs `sql`, calling `row` per result row. False (and error()) on an SQL error.
  template <typename F>
  bool Query(const std::string& sql, F row) {
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &st, nullptr) != SQLITE_OK) {
      error_ = sqlite3_errmsg(db_);
      sqlite3_finalize(st);
      return false;
    }
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) row(st);
    if (rc != SQLITE_DONE) error_ = sqlite3_errmsg(db_);
    sqlite3_finalize(st);
    return rc == SQLITE_DONE;
  }

 private:
  sqlite3* db_ = nullptr;
  std::string error_;
};

std::string DbText(sqlite3_stmt* s, int i) {
  const unsigned char* p = sqlite3_column_text(s, i);
  return p ? reinterpret_cast<const char*>(p) : "";
}

// Reads one database file into `t`; each table that cannot be read goes to `errors`.
class DbReader {
 public:
  DbReader(Db* db, std::string file, RankTrace* t) : db_(*db), file_(std::move(file)), t_(*t) {
    d_ = AscendData(t);
  }
  // True when `table` has every column of `cols`; otherwise names what is missing.
  bool Has(const std::string& table, std::initializer_list<const char*> cols) {
    std::set<std::string> have = db_.Columns(table);
    if (have.empty()) return false;  // absent tables are normal (profiler levels)
    std::vector<std::string> miss;
    for (const char* c : cols)
      if (!have.count(c)) miss.push_back(c);
    if (miss.empty()) return true;
    Error(absl::StrCat(table, ": no column ", absl::StrJoin(miss, ", "), " (schema ",
                       d_->schema_version.empty() ? "?" : d_->schema_version, ")"));
    return false;
  }
  void Error(const std::string& why) {
    d_->file_errors.push_back({file_, why});
    ++t_.stats.malformed;
    if (t_.stats.warnings.size() < 20) t_.stats.warnings.push_back(file_ + ": " + why);
  }
  bool Run(const std::string& table, const std::string& sql,
           const std::function<void(sqlite3_stmt*)>& row) {
    if (db_.Query(sql, row)) {
      ++tables_read_;
      return true;
    }
    Error(absl::StrCat(table, ": ", db_.error()));
    return false;
  }
  int tables_read() const { return tables_read_; }
  RankTrace& t() { return t_; }
  AscendRankData& d() { return *d_; }
  Db& db() { return db_; }

 private:
  Db& db_;
  std::string file_;
  RankTrace& t_;
  AscendRankData* d_;
  int tables_read_ = 0;
};

void ReadMeta(DbReader* r) {
  if (!r->Has("META_DATA", {"name", "value"})) return;
  r->Run("META_DATA", "SELECT name, value FROM META_DATA", [&](sqlite3_stmt* s) {
    std::string n = DbText(s, 0), v = DbText(s, 1);
    if (n == "SCHEMA_VERSION") r->d().schema_version = v;
    if (n == "ENV_VARIABLES") {
      nlohmann::json j;
      if (ParseJsonRecord(v, &j) && j.is_object())
        for (auto it = j.begin(); it != j.end(); ++it)
          if (it.value().is_string()) r->d().env[it.key()] = it.value().get<std::string>();
    }
  });
  if (r->Has("RANK_DEVICE_MAP", {"rankId"})) {
    r->Run("RANK_DEVICE_MAP", "SELECT rankId FROM RANK_DEVICE_MAP LIMIT 1", [&](sqlite3_stmt* s) {
      int64_t rank = sqlite3_column_int64(s, 0);
      if (sqlite3_column_type(s, 0) == SQLITE_INTEGER && rank >= 0 && rank < kMaxRank &&
          r->t().rank < 0) {
        r->t().rank = static_cast<int>(rank);
        r->t().rank_source = "profiler_info";
      }
    });
  }
}

// An event from a row's [start, end) ns; false (counted) when the times are not usable.
bool DbMakeEvent(DbReader* r, sqlite3_stmt* s, int c_start, int c_end, Event* e) {
  const int64_t a = sqlite3_column_int64(s, c_start), b = sqlite3_column_int64(s, c_end);
  if (a < kMinTsNs || a > kMaxTsNs) {
    ++r->t().stats.bad_ts;
    return false;
  }
  if (b < a || b - a > kMaxDurNs) {
    ++r->t().stats.negative_or_huge_dur;
    return false;
  }
  e->ts_ns = a;
  e->dur_ns = b - a;
  return true;
}

void ReadTasks(DbReader* r, const std::map<int64_t, std::string>& str) {
  auto S = [&](int64_t id) {
    auto it = str.find(id);
    return it == str.end() ? std::string() : it->second;
  };
  RankTrace& t = r->t();
  if (r->Has("TASK", {"startNs", "endNs", "globalTaskId", "streamId"}) &&
      r->Has("COMPUTE_TASK_INFO",
             {"globalTaskId", "name", "opType", "taskType", "inputShapes", "inputDataTypes"})) {
    const uint32_t pid = t.strings.Intern("Ascend Hardware");
    r->Run("TASK",
           "SELECT t.startNs, t.endNs, t.streamId, c.name, c.opType, c.taskType, c.inputShapes, "
           "c.inputDataTypes FROM TASK t JOIN COMPUTE_TASK_INFO c ON c.globalTaskId = "
           "t.globalTaskId ORDER BY t.startNs",
           [&](sqlite3_stmt* s) {
             ++t.stats.events_seen;
             Event e;
             if (!DbMakeEvent(r, s, 0, 1, &e)) return;
             const std::string name = S(sqlite3_column_int64(s, 3));
             const std::string type = S(sqlite3_column_int64(s, 4));
             const std::string core = S(sqlite3_column_int64(s, 5));
             const std::string shapes = S(sqlite3_column_int64(s, 6));
             const std::string dtypes = S(sqlite3_column_int64(s, 7));
             e.name = t.strings.Intern(name);
             e.pid = pid;
             e.stream = static_cast<int32_t>(sqlite3_column_int64(s, 2));
             e.tid = t.strings.Intern(std::to_string(e.stream));
             e.flags = kFlagDevice;
             e.kind = ClassifyAscendName(name);
             if (core == "AI_CPU") e.flags |= kFlagAiCpu;
             if (absl::StrContains(dtypes, "DOUBLE")) e.flags |= kFlagFloat64;
             if (!shapes.empty() && shapes != "N/A") e.input_dims = t.strings.Intern(shapes);
             AddKernelFacts(name, type, core, dtypes, shapes, e.dur_ns / 1e3, &r->d());
             t.events.push_back(e);
             ++t.stats.events_kept;
           });
  }
  if (r->Has("COMMUNICATION_OP", {"opName", "startNs", "endNs"})) {
    const uint32_t pid = t.strings.Intern("Communication");
    const uint32_t tid = t.strings.Intern("HCCL");
    r->Run("COMMUNICATION_OP", "SELECT startNs, endNs, opName FROM COMMUNICATION_OP",
           [&](sqlite3_stmt* s) {
             ++t.stats.events_seen;
             Event e;
             if (!DbMakeEvent(r, s, 0, 1, &e)) return;
             e.name = t.strings.Intern(S(sqlite3_column_int64(s, 2)));
             e.pid = pid;
             e.tid = tid;
             e.flags = kFlagDevice;
             e.kind = DeviceKind::kComm;
             t.events.push_back(e);
             ++t.stats.events_kept;
           });
  }
}

// CANN_API and PYTORCH_API as host events; STEP_TIME as ProfilerStep#N on the framework thread
// with the most operators (where torch_npu's trace_view.json puts them).
void ReadApis(DbReader* r, const std::map<int64_t, std::string>& str) {
  auto S = [&](int64_t id) {
    auto it = str.find(id);
    return it == str.end() ? std::string() : it->second;
  };
  RankTrace& t = r->t();
  std::map<int64_t, std::string> level;  // ENUM_API_TYPE id -> "AscendCL", "Node", ...
  if (r->Has("ENUM_API_TYPE", {"id", "name"})) {
    r->Run("ENUM_API_TYPE", "SELECT id, name FROM ENUM_API_TYPE", [&](sqlite3_stmt* s) {
      std::string n = DbText(s, 1);
      if (n == "acl") n = "AscendCL";
      if (!n.empty()) n[0] = static_cast<char>(toupper(static_cast<unsigned char>(n[0])));
      level[sqlite3_column_int64(s, 0)] = n;
    });
  }
  if (r->Has("CANN_API", {"startNs", "endNs", "type", "globalTid", "name"})) {
    const uint32_t pid = t.strings.Intern("CANN");
    r->Run("CANN_API", "SELECT startNs, endNs, type, globalTid, name FROM CANN_API",
           [&](sqlite3_stmt* s) {
             ++t.stats.events_seen;
             Event e;
             if (!DbMakeEvent(r, s, 0, 1, &e)) return;
             auto lv = level.find(sqlite3_column_int64(s, 2));
             const std::string prefix = lv == level.end() ? "" : lv->second + "@";
             e.name = t.strings.Intern(prefix + S(sqlite3_column_int64(s, 4)));
             e.pid = pid;
             e.tid = t.strings.Intern(std::to_string(sqlite3_column_int64(s, 3)));
             e.cat = Category::kRuntime;
             t.events.push_back(e);
             ++t.stats.events_kept;
           });
  }
  std::map<uint32_t, int64_t> per_thread;
  bool has_steps = false;  // PYTORCH_API has the ProfilerStep#N annotations itself
  if (r->Has("PYTORCH_API", {"startNs", "endNs", "globalTid", "name"})) {
    const uint32_t pid = t.strings.Intern("Python");
    r->Run("PYTORCH_API", "SELECT startNs, endNs, globalTid, name FROM PYTORCH_API",
           [&](sqlite3_stmt* s) {
             ++t.stats.events_seen;
             Event e;
             if (!DbMakeEvent(r, s, 0, 1, &e)) return;
             e.name = t.strings.Intern(S(sqlite3_column_int64(s, 3)));
             e.pid = pid;
             e.tid = t.strings.Intern(std::to_string(sqlite3_column_int64(s, 2)));
             e.cat = Category::kCpuOp;
             ++per_thread[e.tid];
             has_steps |= absl::StartsWith(t.strings.Get(e.name), "ProfilerStep#");
             t.events.push_back(e);
             ++t.stats.events_kept;
           });
  }
  if (!has_steps && r->Has("STEP_TIME", {"id", "startNs", "endNs"})) {
    uint32_t tid = t.strings.Intern("main");
    int64_t best = 0;
    for (const auto& [id, n] : per_thread)
      if (n > best) best = n, tid = id;
    const uint32_t pid = t.strings.Intern("Python");
    r->Run("STEP_TIME", "SELECT startNs, endNs, id FROM STEP_TIME", [&](sqlite3_stmt* s) {
      Event e;
      if (!DbMakeEvent(r, s, 0, 1, &e)) return;
      e.name = t.strings.Intern(absl::StrCat("ProfilerStep#", sqlite3_column_int64(s, 2)));
      e.pid = pid;
      e.tid = tid;
      e.cat = Category::kUserAnnotation;
      t.events.push_back(e);
      ++t.stats.events_kept;
    });
  }
}

void ReadOverlapAndFreq(DbReader* r) {
  AscendRankData& d = r->d();
  if (r->Has("OVERLAP_ANALYSIS", {"startNs", "endNs", "type"})) {
    double sum[4] = {0, 0, 0, 0};
    bool any = false;
    r->Run("OVERLAP_ANALYSIS",
           "SELECT type, SUM(endNs - startNs) FROM OVERLAP_ANALYSIS GROUP BY type",
           [&](sqlite3_stmt* s) {
             int64_t ty = sqlite3_column_int64(s, 0);
             if (ty < 0 || ty > 3) return;
             sum[ty] = sqlite3_column_double(s, 1) / 1e3;
             any = true;
           });
    if (any) {
      d.ov_computing_us = sum[0];
      d.ov_comm_us = sum[1];
      d.ov_comm_not_overlapped_us = sum[2];
      d.ov_free_us = sum[3];
    }
  }
  if (r->Has("AICORE_FREQ", {"freq"})) {
    r->Run("AICORE_FREQ", "SELECT freq FROM AICORE_FREQ", [&](sqlite3_stmt* s) {
      if (d.aicore_freq_mhz.size() < 100000)
        d.aicore_freq_mhz.push_back(sqlite3_column_int64(s, 0));
    });
  }
}

// analysis.db: msprof-analyze's per-rank tables (the same figures as step_trace_time.csv and
// communication.json).
void ReadAnalysisDb(DbReader* r) {
  RankTrace& t = r->t();
  AscendRankData& d = r->d();
  if (r->Has("StepTraceTime", {"step", "computing", "communication_not_overlapped", "overlapped",
                               "communication", "free", "stage", "bubble"})) {
    const bool prep = r->db().Columns("StepTraceTime").count("preparing") > 0;
    r->Run("StepTraceTime",
           absl::StrCat("SELECT step, computing, communication_not_overlapped, overlapped, "
                        "communication, free, stage, bubble, ",
                        prep ? "preparing" : "0", " FROM StepTraceTime"),
           [&](sqlite3_stmt* s) {
             AscendStepRow a;
             int64_t step = -1;
             a.step = absl::SimpleAtoi(DbText(s, 0), &step) && step >= 0 ? step : -1;
             double* f[] = {&a.computing_us,  &a.comm_not_overlapped_us,
                            &a.overlapped_us, &a.comm_us,
                            &a.free_us,       &a.stage_us,
                            &a.bubble_us,     &a.preparing_us};
             for (int i = 0; i < 8; ++i) {
               double v = sqlite3_column_double(s, i + 1);
               if (!(v >= 0 && v <= kMaxDurNs / 1e3)) {
                 ++t.stats.bad_values;
                 return;
               }
               *f[i] = v;
             }
             t.ascend_steps.push_back(a);
           });
  }
  std::map<std::string, size_t> op_index;  // step|type|op -> comm_ops index
  if (r->Has("CommAnalyzerTime",
             {"hccl_op_name", "group_name", "elapse_time", "transit_time", "wait_time",
              "synchronization_time", "idle_time", "step", "type"})) {
    r->Run("CommAnalyzerTime",
           "SELECT hccl_op_name, group_name, elapse_time, transit_time, wait_time, "
           "synchronization_time, idle_time, step, type FROM CommAnalyzerTime",
           [&](sqlite3_stmt* s) {
             AscendCommOp c;
             c.name = absl::StrCat(DbText(s, 0), "@", DbText(s, 1));
             c.elapse_ms = sqlite3_column_double(s, 2);
             c.transit_ms = sqlite3_column_double(s, 3);
             c.wait_ms = sqlite3_column_double(s, 4);
             c.sync_ms = sqlite3_column_double(s, 5);
             c.idle_ms = sqlite3_column_double(s, 6);
             c.step = DbText(s, 7);
             c.type = DbText(s, 8);
             // communication.json's ratios: wait / (wait + transit), sync / (sync + transit).
             if (c.wait_ms + c.transit_ms > 0)
               c.wait_ratio = c.wait_ms / (c.wait_ms + c.transit_ms);
             if (c.sync_ms + c.transit_ms > 0)
               c.sync_ratio = c.sync_ms / (c.sync_ms + c.transit_ms);
             op_index[c.step + "|" + c.type + "|" + c.name] = d.comm_ops.size();
             d.comm_ops.push_back(std::move(c));
           });
  }
  if (r->Has("CommAnalyzerBandwidth",
             {"hccl_op_name", "group_name", "transport_type", "transit_size", "transit_time",
              "bandwidth", "large_packet_ratio", "step", "type"})) {
    // One row per (op, transport, packet size): the op's totals repeat on each row.
    std::set<std::string> seen;
    r->Run("CommAnalyzerBandwidth",
           "SELECT hccl_op_name, group_name, transport_type, transit_size, transit_time, "
           "bandwidth, large_packet_ratio, step, type FROM CommAnalyzerBandwidth",
           [&](sqlite3_stmt* s) {
             const std::string op = absl::StrCat(DbText(s, 0), "@", DbText(s, 1));
             const std::string key = DbText(s, 7) + "|" + DbText(s, 8) + "|" + op;
             auto it = op_index.find(key);
             if (it == op_index.end() || !seen.insert(key + "|" + DbText(s, 2)).second) return;
             AscendTransport x{DbText(s, 2), sqlite3_column_double(s, 3),
                               sqlite3_column_double(s, 4), sqlite3_column_double(s, 5),
                               sqlite3_column_double(s, 6)};
             d.comm_ops[it->second].transports.push_back(x);
           });
  }
  if (r->Has("CommAnalyzerMatrix",
             {"hccl_op_name", "group_name", "src_rank", "dst_rank", "transport_type",
              "transit_size", "transit_time", "bandwidth", "step"})) {
    r->Run("CommAnalyzerMatrix",
           "SELECT hccl_op_name, group_name, src_rank, dst_rank, transport_type, transit_size, "
           "transit_time, bandwidth, step FROM CommAnalyzerMatrix",
           [&](sqlite3_stmt* s) {
             AscendLink l{DbText(s, 8),
                          absl::StrCat(DbText(s, 0), "@", DbText(s, 1)),
                          absl::StrCat(DbText(s, 2), "-", DbText(s, 3)),
                          DbText(s, 4),
                          sqlite3_column_double(s, 5),
                          sqlite3_column_double(s, 6),
                          sqlite3_column_double(s, 7)};
             d.links.push_back(std::move(l));
           });
  }
}

std::string DbBase(const std::string& p) {
  size_t s = p.rfind('/');
  return s == std::string::npos ? p : p.substr(s + 1);
}

}  // namespace

absl::Status ReadAscendDb(const std::string& db_path, const std::string& analysis_db,
                          RankTrace* t) {
  t->format = "ascend";
  AscendData(t)->export_type = "db";
  int tables = 0;
  {
    Db db(db_path);
    if (!db.ok())
      return absl::InvalidArgumentError(absl::StrCat(db_path, ": byte 0: ", db.error()));
    DbReader r(&db, DbBase(db_path), t);
    if (db.Columns("STRING_IDS").empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(db_path, ": byte 0: not a torch_npu profiler database (",
                       db.error().empty() ? "no STRING_IDS table" : db.error(), ")"));
    }
    std::map<int64_t, std::string> str;
    if (!r.Has("STRING_IDS", {"id", "value"})) {
      return absl::InvalidArgumentError(absl::StrCat(db_path, ": STRING_IDS without id, value"));
    }
    r.Run("STRING_IDS", "SELECT id, value FROM STRING_IDS",
          [&](sqlite3_stmt* s) { str[sqlite3_column_int64(s, 0)] = DbText(s, 1); });
    ReadMeta(&r);
    ReadTasks(&r, str);
    ReadApis(&r, str);
    ReadOverlapAndFreq(&r);
    tables += r.tables_read();
  }
  if (!analysis_db.empty()) {
    Db db(analysis_db);
    if (!db.ok()) {
      AscendData(t)->file_errors.push_back({DbBase(analysis_db), db.error()});
      ++t->stats.malformed;
    } else {
      DbReader r(&db, DbBase(analysis_db), t);
      ReadAnalysisDb(&r);
      tables += r.tables_read();
    }
  }
  if (t->events.empty() && t->ascend_steps.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        db_path, ": no usable rows (", tables, " tables read; schema ",
        AscendData(t)->schema_version.empty() ? "unknown" : AscendData(t)->schema_version, ")"));
  }
  return absl::OkStatus();
}

}  // namespace trainscope::trace::internal
