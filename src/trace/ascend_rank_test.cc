// torch_npu per-rank readers on real samples (tests/data/trace/ascend_*, provenance in
// tests/data/README.md): the text export, the SQLite export, and bad input.
#include "trace/ascend_rank.h"

#include <sqlite3.h>

#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "trace/ascend_rank_csv.h"
#include "trace/trace_test_util.h"
#include "trainscope/trace/analysis.h"

namespace trainscope::trace {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;
using testing::WriteFile;

std::string RankData(const std::string& p) {
  return absl::StrCat(TS_SOURCE_DIR, "/tests/data/trace/", p);
}

bool RankContains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

// Copies a sample folder into a scratch directory (to damage its files).
std::string RankCopySample(const std::string& sample) {
  const std::string dir = TempDir() + "/rank0_ascend_pt";
  fs::copy(RankData(sample), dir, fs::copy_options::recursive);
  return dir;
}

TEST(AscendRank, TextExportEveryFile) {
  auto t = ReadRankTrace(RankData("ascend_text/rank0_ascend_pt"));
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_NE(t->ascend, nullptr);
  const AscendRankData& d = *t->ascend;
  EXPECT_EQ(t->rank, 0);
  EXPECT_EQ(t->rank_source, "profiler_info");
  for (const char* f :
       {"trace_view.json", "kernel_details.csv", "op_statistic.csv", "step_trace_time.csv",
        "communication.json", "communication_matrix.json", "memory_record.csv",
        "npu_module_mem.csv", "profiler_info_0.json", "profiler_metadata.json"})
    EXPECT_TRUE(RankContains(d.files_read, f)) << f;
  EXPECT_EQ(d.unknown_files, std::vector<std::string>{"api_statistic.csv"});
  EXPECT_TRUE(d.file_errors.empty());
  // trace_view.json's "AI Core Freq" counter events (ph "C"); no device info: no rating.
  EXPECT_EQ(d.aicore_freq_mhz, (std::vector<int64_t>{1800, 1800}));
  EXPECT_EQ(d.aic_rated_mhz, 0);
  ASSERT_EQ(t->ascend_steps.size(), 1u);
  EXPECT_EQ(t->ascend_steps[0].step, 50);
  EXPECT_NEAR(t->ascend_steps[0].preparing_us, 17902.5, 1e-9);
  // communication.json: 4 all-reduce ops of step50 ("Total Op Info" skipped), HCCS and SDMA.
  ASSERT_EQ(d.comm_ops.size(), 4u);
  EXPECT_EQ(d.comm_ops[0].step, "step50");
  EXPECT_NEAR(d.comm_ops[0].elapse_ms, 79.08952021875, 1e-9);
  EXPECT_NEAR(d.comm_ops[0].wait_ratio, 0.9594, 1e-12);
  bool hccs = false;
  for (const AscendTransport& x : d.comm_ops[0].transports)
    if (x.transport == "HCCS") {
      hccs = true;
      EXPECT_NEAR(x.bandwidth_gbps, 15.7676, 1e-9);
    }
  EXPECT_TRUE(hccs);
  EXPECT_EQ(d.links.size(), 48u);
  EXPECT_EQ(d.op_stats.size(), 33u);
  EXPECT_EQ(d.op_state_dynamic, 187);
  EXPECT_EQ(d.kernel_tasks, 187);
  EXPECT_GT(d.peak_reserved_mb, 2000);
  EXPECT_EQ(d.env.size(), 8u);
}

// The Overlap Analysis lanes are msprof's own breakdown: their sums equal step_trace_time.csv,
// and `trace analyze` reports them as the rank's breakdown.
TEST(AscendRank, OverlapLanesEqualStepTraceTime) {
  for (const char* s : {"ascend_text/rank0_ascend_pt", "ascend_db/rank0_ascend_pt"}) {
    auto rep = AnalyzePaths({RankData(s)});
    ASSERT_TRUE(rep.ok()) << rep.status();
    const RankResult& r = rep->ranks.at(0);
    const auto& ov = r.details["ascend"]["overlap_analysis"];
    const auto& st = r.details["ascend_step_trace"][0];
    EXPECT_NEAR(ov["computing_us"].get<double>(), st["computing_us"].get<double>(), 1e-6) << s;
    EXPECT_NEAR(ov["communication_not_overlapped_us"].get<double>(),
                st["communication_not_overlapped_us"].get<double>(), 1e-6)
        << s;
    EXPECT_NEAR(ov["communication_us"].get<double>(), st["communication_us"].get<double>(), 1e-6)
        << s;
    EXPECT_NEAR(ov["free_us"].get<double>(), st["free_us"].get<double>(), 1e-6) << s;
    EXPECT_NEAR(r.compute_us, st["computing_us"].get<double>(), 1e-6) << s;
    EXPECT_NEAR(r.idle_us, st["free_us"].get<double>(), 1e-6) << s;
    EXPECT_EQ(r.details["ascend"]["breakdown_source"], "Overlap Analysis");
  }
}

TEST(AscendRank, SqliteExport) {
  auto t = ReadRankTrace(RankData("ascend_db/rank0_ascend_pt"));
  ASSERT_TRUE(t.ok()) << t.status();
  const AscendRankData& d = *t->ascend;
  EXPECT_EQ(d.export_type, "db");
  EXPECT_EQ(d.schema_version, "1.0.0");
  EXPECT_TRUE(d.file_errors.empty()) << d.file_errors[0].second;
  EXPECT_EQ(t->rank, 0);
  ASSERT_EQ(t->ascend_steps.size(), 1u);  // analysis.db StepTraceTime
  EXPECT_EQ(t->ascend_steps[0].step, 50);
  EXPECT_NEAR(t->ascend_steps[0].computing_us, 8903.431, 1e-9);
  EXPECT_NEAR(d.ov_computing_us, 8903.431, 1e-6);  // OVERLAP_ANALYSIS type 0
  EXPECT_NEAR(d.ov_free_us, 25258.144, 1e-6);
  EXPECT_EQ(d.kernel_tasks, 187);  // the same run's text export has 187 too
  ASSERT_EQ(d.comm_ops.size(), 4u);
  EXPECT_FALSE(d.comm_ops[0].transports.empty());
  EXPECT_EQ(d.aicore_freq_mhz, (std::vector<int64_t>{1800, 1800, 1800}));
  int compiles = 0, steps = 0;
  for (const Event& e : t->events) {
    compiles += t->strings.Get(e.name) == "AscendCL@aclopCompileAndExecute";
    steps += t->strings.Get(e.name) == "ProfilerStep#50";
  }
  EXPECT_EQ(compiles, 19);
  EXPECT_EQ(steps, 1);
}

TEST(AscendRank, ExpandFindsRankFolders) {
  auto p = ExpandTracePaths({RankData("ascend_db")});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(*p, std::vector<std::string>{RankData("ascend_db/rank0_ascend_pt")});
}

// A truncated CSV keeps its complete rows; the cut row is counted.
TEST(AscendRank, TruncatedCsvKeepsRows) {
  const std::string dir = RankCopySample("ascend_comm/test_rank_0");
  const std::string kd = dir + "/ASCEND_PROFILER_OUTPUT/kernel_details.csv";
  auto text = internal::SlurpFile(kd);
  ASSERT_TRUE(text.ok());
  const size_t rows = std::count(text->begin(), text->end(), '\n');
  fs::resize_file(kd, text->size() / 2);
  auto t = ReadRankTrace(dir);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_GT(t->ascend->kernel_tasks, 0);
  EXPECT_LT(t->ascend->kernel_tasks, static_cast<int64_t>(rows));
  EXPECT_GT(t->stats.malformed + t->stats.missing_fields + t->stats.bad_dur + t->stats.bad_ts, 0);
  EXPECT_EQ(t->ascend->comm_ops.size(), 28u);  // the other files are whole
}

// A column this reader does not know (a newer torch_npu) is listed, the row still read.
TEST(AscendRank, UnknownColumnsListed) {
  const std::string dir = RankCopySample("ascend_text/rank0_ascend_pt");
  const std::string p = dir + "/ASCEND_PROFILER_OUTPUT/step_trace_time.csv";
  auto text = internal::SlurpFile(p);
  ASSERT_TRUE(text.ok());
  std::string t2 = *text;
  const size_t nl = t2.find('\n');
  t2.insert(nl, ",Dispatch Free(us)");
  t2.insert(t2.find('\n', nl + 19), ",12.5");
  WriteFile(p, t2);
  auto t = ReadRankTrace(dir);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->ascend->unknown_columns["step_trace_time.csv"],
            std::vector<std::string>{"Dispatch Free(us)"});
  ASSERT_EQ(t->ascend_steps.size(), 1u);
  EXPECT_NEAR(t->ascend_steps[0].free_us, 25744.05, 1e-6);
}

// JSON with missing keys: the op without its time block is counted, the others kept.
TEST(AscendRank, CommunicationJsonMissingKeys) {
  AscendRankData d;
  const std::string j = R"J({"step1": {"collective": {
      "a@1": {"Communication Time Info": {"Elapse Time(ms)": 2, "Transit Time(ms)": 1,
              "Wait Time(ms)": 1, "Synchronization Time(ms)": 0, "Idle Time(ms)": 0,
              "Wait Time Ratio": 0.5, "Synchronization Time Ratio": 0}},
      "b@1": {"Communication Bandwidth Info": {}},
      "c@1": {"Communication Time Info": {"Elapse Time(ms)": "x"}}}, "p2p": []}})J";
  ASSERT_TRUE(internal::ParseCommunicationJson(j, "communication.json", &d).ok());
  ASSERT_EQ(d.comm_ops.size(), 1u);
  EXPECT_EQ(d.comm_ops[0].name, "a@1");
  EXPECT_EQ(d.comm_missing_keys, 1 + 7);
  AscendRankData e;
  EXPECT_FALSE(internal::ParseCommunicationJson("{\"step1\": 3", "c.json", &e).ok());
  EXPECT_FALSE(internal::ParseCommunicationMatrixJson("[]", "m.json", &e).ok());
}

// A bad trace_view.json is named and counted; the CSVs are still read.
TEST(AscendRank, BadFileIsNamedOthersRead) {
  const std::string dir = RankCopySample("ascend_text/rank0_ascend_pt");
  WriteFile(dir + "/ASCEND_PROFILER_OUTPUT/trace_view.json", "");
  WriteFile(dir + "/ASCEND_PROFILER_OUTPUT/communication.json", "{\"step");
  auto t = ReadRankTrace(dir);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_GE(t->ascend->file_errors.size(), 1u);
  bool named = false;
  for (const auto& [f, why] : t->ascend->file_errors) named |= f == "communication.json";
  EXPECT_TRUE(named);
  EXPECT_EQ(t->ascend_steps.size(), 1u);
  EXPECT_GT(t->stats.malformed, 0);
  auto rep = AnalyzePaths({dir});
  ASSERT_TRUE(rep.ok()) << rep.status();
  bool finding = false;
  for (const Finding& f : rep->ranks[0].findings) finding |= f.id == "files_not_read";
  EXPECT_TRUE(finding);
}

// Nothing readable left: an error naming the folder and each file's reason.
TEST(AscendRank, NothingReadableIsAnError) {
  const std::string dir = TempDir() + "/x_ascend_pt/ASCEND_PROFILER_OUTPUT";
  fs::create_directories(dir);
  WriteFile(dir + "/step_trace_time.csv", "Step,Other\n1,2\n");
  WriteFile(dir + "/ascend_pytorch_profiler_0.db", "not sqlite at all");
  auto t = ReadRankTrace(fs::path(dir).parent_path().string());
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("step_trace_time.csv"), std::string::npos) << t.status();
}

void RankExec(sqlite3* db, const char* sql) {
  char* err = nullptr;
  ASSERT_EQ(sqlite3_exec(db, sql, nullptr, nullptr, &err), SQLITE_OK) << err;
}

// A .db of another schema version: the tables it cannot read are named, the rest kept.
TEST(AscendRank, DbOfAnotherSchemaVersion) {
  const std::string dir = TempDir() + "/r_ascend_pt/ASCEND_PROFILER_OUTPUT";
  fs::create_directories(dir);
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir + "/ascend_pytorch_profiler_3.db").c_str(), &db), SQLITE_OK);
  RankExec(
      db,
      "CREATE TABLE META_DATA(name TEXT, value TEXT);"
      "INSERT INTO META_DATA VALUES('SCHEMA_VERSION', '9.0.0');"
      "CREATE TABLE STRING_IDS(id INTEGER PRIMARY KEY, value TEXT);"
      "INSERT INTO STRING_IDS VALUES(1, 'MatMul'), (2, 'AI_CORE'), (3, 'aclopCompileAndExecute');"
      "CREATE TABLE TASK(begin INTEGER, finish INTEGER, globalTaskId INTEGER);"
      "CREATE TABLE COMPUTE_TASK_INFO(globalTaskId INTEGER, name INTEGER);"
      "CREATE TABLE ENUM_API_TYPE(id INTEGER, name TEXT); INSERT INTO ENUM_API_TYPE "
      "VALUES(20000, 'acl');"
      "CREATE TABLE CANN_API(startNs INTEGER, endNs INTEGER, type INTEGER, globalTid INTEGER,"
      " name INTEGER); INSERT INTO CANN_API VALUES(1000, 3000, 20000, 7, 3);");
  sqlite3_close(db);
  auto t = ReadRankTrace(fs::path(dir).parent_path().string());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->ascend->schema_version, "9.0.0");
  ASSERT_FALSE(t->ascend->file_errors.empty());
  EXPECT_EQ(t->ascend->file_errors[0].first, "ascend_pytorch_profiler_3.db");
  EXPECT_NE(t->ascend->file_errors[0].second.find("TASK: no column startNs, endNs"),
            std::string::npos)
      << t->ascend->file_errors[0].second;
  ASSERT_EQ(t->events.size(), 1u);
  EXPECT_EQ(t->strings.Get(t->events[0].name), "AscendCL@aclopCompileAndExecute");
  EXPECT_EQ(t->events[0].dur_ns, 2000);
}

}  // namespace
}  // namespace trainscope::trace
