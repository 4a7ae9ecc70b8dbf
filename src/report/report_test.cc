// The report's data model on small run directories written here: what is read, what is
// listed as missing, malformed lines counted, downsampling that keeps extremes, two runs
// overlaid, and the HTML page embedding everything.
#include "trainscope/report/report.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "report/metrics.h"
#include "trainscope/ckpt/checkpoint.h"
#include "trainscope/core/fake_os.h"
#include "trainscope/core/json_text.h"

namespace trainscope::report {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class ReportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("ts_report_test_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  // A run directory with `ranks` metrics files of `steps` steps; a loss spike at spike_step.
  std::string MakeRun(const std::string& name, int ranks, int steps, int spike_step,
                      const std::vector<std::string>& extra_lines = {}) {
    fs::path dir = root_ / name;
    fs::create_directories(dir / "train");
    for (int r = 0; r < ranks; ++r) {
      std::ofstream f(dir / "train" / ("metrics.rank" + std::to_string(r) + ".jsonl"));
      f << json({{"type", "header"},
                 {"format", "trainscope.train_metrics"},
                 {"version", 1},
                 {"rank", r},
                 {"world_size", ranks}})
               .dump()
        << "\n";
      for (int s = 1; s <= steps; ++s) {
        double loss = s == spike_step ? 50.0 : 5.0 - 0.001 * s;
        json rec = {{"type", "step"},
                    {"step", s},
                    {"loss", loss},
                    {"lr", 0.001},
                    {"grad_norm", 1.0},
                    {"step_ms", 10.0 + r * 5},
                    {"tokens_per_s", 1000.0},
                    {"comm_ms", 1.0},
                    {"host_rss_bytes", 1000000 + s},
                    {"device_mem_allocated_bytes", nullptr},
                    {"phases_ms",
                     {{"data_wait", 1.0},
                      {"h2d", 0.5},
                      {"forward", 3.0},
                      {"backward", 4.0},
                      {"comm_wait", 1.0},
                      {"optimizer", 0.5}}}};
        f << rec.dump() << "\n";
        if (s == spike_step) {
          f << json({{"type", "spike"},
                     {"step", s},
                     {"rank", r},
                     {"loss", loss},
                     {"rule", "mad"},
                     {"threshold", 9.0},
                     {"median", 5.0}})
                   .dump()
            << "\n";
        }
      }
      for (const std::string& l : extra_lines) f << l << "\n";
      f << json({{"type", "end"}, {"reason", "done"}, {"step", steps}, {"rank", r}}).dump() << "\n";
    }
    return dir.string();
  }

  fs::path root_;
};

TEST_F(ReportTest, NonexistentDirIsNotFound) {
  auto data = CollectReportData({(root_ / "nope").string()}, {});
  ASSERT_FALSE(data.ok());
  EXPECT_EQ(data.status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ReportTest, EmptyDirListsEveryPartMissing) {
  fs::create_directories(root_ / "empty");
  auto data = CollectReportData({(root_ / "empty").string()}, {});
  ASSERT_TRUE(data.ok()) << data.status();
  std::vector<std::string> parts;
  for (const json& m : (*data)["missing"]) parts.push_back(m["part"]);
  for (const char* p :
       {"metrics", "flight_recorder", "data_scan", "trace", "doctor", "fingerprint"}) {
    EXPECT_NE(std::find(parts.begin(), parts.end(), p), parts.end()) << p;
  }
  EXPECT_EQ((*data)["sections"], json::array({"summary"}));
}

TEST_F(ReportTest, MalformedLinesCountedNotFatal) {
  std::string dir = MakeRun("bad", 1, 20, -1, {"{not json", "[1, 2]", R"({"type": "step"})"});
  auto data = CollectReportData({dir}, {});
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ((*data)["malformed"], 3);
  ASSERT_EQ((*data)["malformed_lines"].size(), 3u);
  EXPECT_NE((*data)["malformed_lines"][0].get<std::string>().find("metrics.rank0.jsonl:22"),
            std::string::npos)
      << (*data)["malformed_lines"][0];
  const json& rank = (*data)["runs"][0]["ranks"][0];
  EXPECT_EQ(rank["steps"], 20);
  EXPECT_EQ(rank["series"]["loss"]["n"], 20);
}

TEST_F(ReportTest, SpikeIsAnEventAndSectionsFollowEvidence) {
  std::string dir = MakeRun("spiky", 2, 30, 17);
  auto data = CollectReportData({dir}, {});
  ASSERT_TRUE(data.ok()) << data.status();
  const json& run = (*data)["runs"][0];
  ASSERT_EQ(run["ranks"].size(), 2u);
  bool spike = false;
  for (const json& e : run["events"]) spike |= e["kind"] == "spike" && e["step"] == 17;
  EXPECT_TRUE(spike) << run["events"];
  for (const char* s : {"loss", "lr", "grad_norm", "phases", "ranks", "memory"}) {
    EXPECT_NE(std::find((*data)["sections"].begin(), (*data)["sections"].end(), s),
              (*data)["sections"].end())
        << s;
  }
  // Rank 1 takes 15 ms a step against rank 0's 10: a straggler.
  ASSERT_EQ(run["stragglers"].size(), 1u) << run;
  EXPECT_EQ(run["stragglers"][0]["rank"], 1);
  EXPECT_EQ(run["ranks"][0]["phases"]["x"].size(), 30u);
}

TEST_F(ReportTest, FlightRecorderDoctorAndFingerprint) {
  std::string dir = MakeRun("hung", 2, 5, -1);
  const char* src = std::getenv("TS_SOURCE_DIR");
  ASSERT_NE(src, nullptr) << "TS_SOURCE_DIR not set (ctest sets it)";
  fs::copy(fs::path(src) / "tests/data/hang/run_dir/hang", fs::path(dir) / "hang",
           fs::copy_options::recursive);
  std::ofstream(fs::path(dir) / "report.json")
      << json({{"format", "trainscope.doctor"},
               {"version", 1},
               {"passed", false},
               {"summary", {{"pass", 1}, {"fail", 1}}},
               {"checks", json::array({{{"name", "comm"}, {"verdict", "fail"}, {"value", "x"}}})}})
             .dump();
  std::ofstream(fs::path(dir) / "fingerprint.json")
      << json({{"format", "trainscope.env.fingerprint"}, {"host", {{"kernel", "6.1"}}}}).dump();
  auto data = CollectReportData({dir}, {});
  ASSERT_TRUE(data.ok()) << data.status();
  const json& run = (*data)["runs"][0];
  ASSERT_TRUE(run.contains("hang")) << (*data)["missing"];
  EXPECT_EQ(run["hang"]["ranks"].size(), 2u);
  // The fixture: rank 1 never joined all_reduce #3.
  ASSERT_EQ(run["hang"]["stuck"].size(), 1u) << run["hang"];
  EXPECT_EQ(run["hang"]["stuck"][0]["seq"], 3);
  EXPECT_EQ(run["hang"]["stuck"][0]["culprit_ranks"], json::array({1}));
  EXPECT_EQ(run["doctor"]["checks"][0]["verdict"], "fail");
  EXPECT_EQ(run["fingerprint"][1], json::array({"host.kernel", "6.1"}));
  for (const char* s : {"flight_recorder", "doctor", "fingerprint"}) {
    EXPECT_NE(std::find((*data)["sections"].begin(), (*data)["sections"].end(), s),
              (*data)["sections"].end())
        << s;
  }
}

// Diagnose reads every file of the run; the parts take what it read instead of reading it
// again (RunFiles), and the page is what it was.
TEST_F(ReportTest, EachFileIsReadOnce) {
  std::string dir = MakeRun("once", 2, 5, -1);
  const char* src = std::getenv("TS_SOURCE_DIR");
  ASSERT_NE(src, nullptr) << "TS_SOURCE_DIR not set (ctest sets it)";
  fs::copy(fs::path(src) / "tests/data/hang/run_dir/hang", fs::path(dir) / "hang",
           fs::copy_options::recursive);  // two dumps, two stacks files
  std::ofstream(fs::path(dir) / "report.json")
      << json({{"format", "trainscope.doctor"}, {"passed", true}, {"checks", json::array()}});
  std::ofstream(fs::path(dir) / "fingerprint.json")
      << json({{"format", "trainscope.env.fingerprint"}, {"host", {{"kernel", "6.1"}}}});
  CollectorOptions every_time;
  every_time.findings_backoff = 0;
  ReportCollector collector({dir}, {}, every_time);
  auto data = collector.Collect();
  ASSERT_TRUE(data.ok()) << data.status();
  const ReportCollector::Stats s = collector.stats();
  EXPECT_EQ(s.files_read, 0);
  EXPECT_EQ(s.files_from_diagnose, 2 + 4 + 2);  // metrics, hang/, doctor report, fingerprint
  EXPECT_EQ(s.metrics_full_reads, 2);
  const json& run = (*data)["runs"][0];
  EXPECT_EQ(run["ranks"].size(), 2u);
  EXPECT_EQ(run["hang"]["stuck"].size(), 1u) << run["hang"];
  EXPECT_TRUE(run["doctor"]["passed"].get<bool>());
  EXPECT_EQ(run["fingerprint"][1], json::array({"host.kernel", "6.1"}));
  // Appended lines: read on from where the bytes diagnose gave ended, not from the start.
  std::ofstream(fs::path(dir) / "train" / "metrics.rank0.jsonl", std::ios::app)
      << R"({"type": "step", "step": 6, "loss": 1.0})"
      << "\n";
  ASSERT_TRUE(collector.Collect().ok());
  EXPECT_EQ(collector.stats().metrics_full_reads, 2);
  auto full = CollectReportData({dir}, {});
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_EQ((*full)["runs"][0]["ranks"][0]["steps"], 6);
}

TEST_F(ReportTest, MetricsFromBytesEqualTheFileRead) {
  std::string dir = MakeRun("bytes", 1, 7, 3, {"{not json"});
  const std::string file = (fs::path(dir) / "train" / "metrics.rank0.jsonl").string();
  std::ofstream(file, std::ios::app) << R"({"type": "step", "step": 8, "lo)";  // mid-line
  std::ifstream in(file, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  RankMetricsReader from_file(file), from_bytes(file);
  ASSERT_TRUE(from_file.Update());
  ASSERT_TRUE(from_bytes.UpdateFromBytes(bytes, 0, 0));
  EXPECT_EQ(RankMetricsToJson(from_bytes.metrics(), 100),
            RankMetricsToJson(from_file.metrics(), 100));
  EXPECT_EQ(from_bytes.metrics().events, from_file.metrics().events);
  EXPECT_EQ(from_bytes.metrics().malformed_examples, from_file.metrics().malformed_examples);
  EXPECT_EQ(from_bytes.bytes_parsed(), from_file.bytes_parsed());
  // Unknown identity (0, 0): the next Update() reads the file from the start.
  ASSERT_TRUE(from_bytes.Update());
  EXPECT_EQ(from_bytes.full_reads(), 2);
  EXPECT_EQ(RankMetricsToJson(from_bytes.metrics(), 100),
            RankMetricsToJson(from_file.metrics(), 100));
}

TEST_F(ReportTest, TruncatedLastLineIsNotMalformed) {
  std::string dir = MakeRun("live", 1, 5, -1);
  std::ofstream(fs::path(dir) / "train" / "metrics.rank0.jsonl", std::ios::app)
      << R"({"type": "step", "step": 6, "lo)";
  auto data = CollectReportData({dir}, {});
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ((*data)["malformed"], 0);
  EXPECT_EQ((*data)["runs"][0]["ranks"][0]["truncated_last_line"], true);
  EXPECT_EQ((*data)["runs"][0]["ranks"][0]["steps"], 5);
}

TEST(ReportDownsampleTest, KeepsExtremesAndFirstLast) {
  std::vector<double> y(100000);
  for (size_t i = 0; i < y.size(); ++i) y[i] = std::sin(i * 0.001);
  y[54321] = 1e6;   // a spike
  y[77777] = -1e6;  // a dip
  y[100] = std::nan("");
  std::vector<size_t> idx = DownsampleMinMax(y, 1000, {12345});
  EXPECT_LE(idx.size(), 1000u + 3);
  EXPECT_TRUE(std::is_sorted(idx.begin(), idx.end()));
  auto has = [&](size_t i) { return std::find(idx.begin(), idx.end(), i) != idx.end(); };
  EXPECT_TRUE(has(54321));
  EXPECT_TRUE(has(77777));
  EXPECT_TRUE(has(0));
  EXPECT_TRUE(has(99999));
  EXPECT_TRUE(has(12345));  // kept on request (an anomaly step)
  EXPECT_FALSE(has(100));   // NaN: never drawn
  // Short series: every point.
  EXPECT_EQ(DownsampleMinMax({1, 2, 3}, 1000).size(), 3u);
}

TEST_F(ReportTest, LargeSeriesDrawnPointsAreRecords) {
  std::string dir = MakeRun("long", 1, 20000, 15000);
  ReportOptions o;
  o.max_points = 500;
  auto data = CollectReportData({dir}, o);
  ASSERT_TRUE(data.ok()) << data.status();
  const json& loss = (*data)["runs"][0]["ranks"][0]["series"]["loss"];
  EXPECT_EQ(loss["n"], 20000);
  EXPECT_LE(loss["x"].size(), 510u);
  // The spike's own value at its own step, not an average.
  bool found = false;
  for (size_t i = 0; i < loss["x"].size(); ++i) {
    if (loss["x"][i] == 15000) found = loss["y"][i] == 50.0;
  }
  EXPECT_TRUE(found);
}

TEST_F(ReportTest, TwoRunsOverlay) {
  std::string a = MakeRun("run_a", 1, 10, -1), b = MakeRun("run_b", 2, 12, 5);
  auto data = CollectReportData({a, b}, {});
  ASSERT_TRUE(data.ok()) << data.status();
  ASSERT_EQ((*data)["runs"].size(), 2u);
  EXPECT_EQ((*data)["runs"][0]["name"], "run_a");
  EXPECT_EQ((*data)["runs"][1]["name"], "run_b");
  EXPECT_EQ((*data)["runs"][1]["ranks"].size(), 2u);
  EXPECT_EQ((*data)["title"], "trainscope report: run_a, run_b");
  std::string html = RenderReportHtml(*data, {});
  EXPECT_NE(html.find("run_b"), std::string::npos);
}

TEST_F(ReportTest, HtmlIsSelfContained) {
  std::string dir =
      MakeRun("html", 1, 5, -1, {R"({"type": "error", "step": 3, "message": "</script><b>x"})"});
  auto data = CollectReportData({dir}, {});
  ASSERT_TRUE(data.ok()) << data.status();
  std::string html = RenderReportHtml(*data, {});
  // The chart library is inside (dygraphs' bundle names its modules), without its source map
  // comment (a browser's developer tools would fetch the map).
  EXPECT_NE(html.find("dygraphs/src/dygraph.js"), std::string::npos);
  EXPECT_EQ(html.find("sourceMappingURL"), std::string::npos);
  EXPECT_EQ(html.find("src=\"http"), std::string::npos);
  EXPECT_EQ(html.find("href=\"http"), std::string::npos);
  // Data can not close the data element early.
  size_t data_start = html.find("<script id=\"ts-data\"");
  size_t data_end = html.find("</script>", data_start);
  EXPECT_EQ(html.substr(data_start, data_end - data_start).find("</"), std::string::npos);
  ReportOptions live;
  live.live = true;
  EXPECT_NE(RenderReportHtml(*data, live).find("window.TS_LIVE = true"), std::string::npos);
}

// A metrics file from lines (the header first), at <dir>/train/metrics.rank0.jsonl.
std::string WriteMetrics(const fs::path& dir, const std::vector<json>& records) {
  fs::create_directories(dir / "train");
  std::ofstream f(dir / "train" / "metrics.rank0.jsonl");
  f << json({{"type", "header"},
             {"format", "trainscope.train_metrics"},
             {"version", 1},
             {"rank", 0},
             {"world_size", 1}})
           .dump()
    << "\n";
  for (const json& r : records) f << r.dump() << "\n";
  return dir.string();
}

json StepRecord(int step, json loss, json scalars = nullptr) {
  json r = {{"type", "step"}, {"step", step}, {"loss", loss}, {"lr", 0.1}, {"step_ms", 1.0}};
  if (!scalars.is_null()) r["scalars"] = scalars;
  return r;
}

// mon.log(accuracy=...) inside steps, mon.log(step=s, val_loss=...) after them (out of
// order and twice for a step: the last value wins), a non-finite value and a string.
TEST_F(ReportTest, UserScalarsAreSeriesInAndAfterSteps) {
  std::vector<json> recs;
  for (int s = 1; s <= 10; ++s) {
    recs.push_back(StepRecord(
        s, 1.0 / s,
        {{"accuracy", s == 7 ? json(nullptr) : json(s / 10.0)}, {"note", "text"}, {"seen", s}}));
    if (s == 5) {
      recs.push_back({{"type", "scalars"}, {"step", 5}, {"scalars", {{"val_loss", 2.0}}}});
      recs.push_back({{"type", "scalars"}, {"step", 5}, {"scalars", {{"val_loss", 1.5}}}});
      recs.push_back({{"type", "scalars"}, {"step", 3}, {"scalars", {{"val_loss", 2.5}}}});
    }
  }
  recs.push_back({{"type", "scalars"}, {"scalars", {{"val_loss", 1.0}}}});  // no step
  auto data = CollectReportData({WriteMetrics(root_ / "user", recs)}, {});
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ((*data)["malformed"], 1);
  const json& rank = (*data)["runs"][0]["ranks"][0];
  const json& acc = rank["scalars"]["accuracy"];
  ASSERT_EQ(acc["x"].size(), 10u) << acc;  // step 7 on the axis, drawn as a gap
  EXPECT_TRUE(acc["y"][6].is_null());
  EXPECT_EQ(acc["y"][9], 1.0);
  EXPECT_EQ(rank["scalars"]["seen"]["y"][2], 3.0);
  EXPECT_FALSE(rank["scalars"].contains("note"));
  EXPECT_EQ(rank["scalars"]["val_loss"]["x"], json::array({3, 5}));
  EXPECT_EQ(rank["scalars"]["val_loss"]["y"], json::array({2.5, 1.5}));
  EXPECT_EQ(rank["series"]["val_loss"], rank["scalars"]["val_loss"]);  // on the loss chart
  const json& sections = (*data)["sections"];
  for (const char* want : {"loss", "val_loss", "scalars"}) {
    EXPECT_NE(std::find(sections.begin(), sections.end(), want), sections.end()) << want;
  }
}

// The trainer and watch stop at a non-finite step without a step record: the step is on the
// loss axis (a null point) all the same, as diagnose counts it; optimizer phase: the next one.
TEST_F(ReportTest, NonfiniteStepIsOnTheLossAxis) {
  for (const char* phase : {"forward", "optimizer"}) {
    std::vector<json> recs;
    for (int s = 1; s <= 5; ++s) recs.push_back(StepRecord(s, s == 3 ? json(nullptr) : json(1.0)));
    const int at = std::string(phase) == "optimizer" ? 5 : 6;
    recs.push_back({{"type", "nonfinite"}, {"step", at}, {"rank", 0}, {"phase", phase}});
    auto data = CollectReportData({WriteMetrics(root_ / phase, recs)}, {});
    ASSERT_TRUE(data.ok()) << data.status();
    const json& loss = (*data)["runs"][0]["ranks"][0]["series"]["loss"];
    EXPECT_EQ(loss["x"], json::array({1, 2, 3, 4, 5, 6})) << phase;
    EXPECT_TRUE(loss["y"][2].is_null());
    EXPECT_TRUE(loss["y"][5].is_null());
    EXPECT_EQ(loss["y"][4], 1.0) << phase;  // a step's own record is kept
  }
}

// Checkpoints saved into the run directory are listed (marks), and torch.profiler traces in
// profiler/ are analysed without a saved analysis.
TEST_F(ReportTest, CheckpointsAndProfilerTracesAreCollected) {
  const fs::path dir = WriteMetrics(root_ / "run", {StepRecord(1, 1.0), StepRecord(2, 0.5)});
  for (int64_t step : {2, 1}) {
    ckpt::CheckpointData c;
    c.step = step;
    ASSERT_TRUE(ckpt::WriteCheckpoint((dir / "checkpoints").string(), c).ok());
  }
  fs::create_directories(dir / "checkpoints" / "step-3.tmp-1");  // an unfinished save
  fs::create_directories(dir / "profiler");
  const char* src = std::getenv("TS_SOURCE_DIR");  // ts_add_test sets it
  ASSERT_NE(src, nullptr);
  fs::copy_file(std::string(src) + "/tests/data/trace/kineto_rank0.pt.trace.json",
                dir / "profiler" / "host_1.123.pt.trace.json");
  auto data = CollectReportData({dir.string()}, {});
  ASSERT_TRUE(data.ok()) << data.status();
  const json& run = (*data)["runs"][0];
  ASSERT_EQ(run["checkpoints"].size(), 3u) << run["checkpoints"];
  EXPECT_EQ(run["checkpoints"][0]["step"], 1);
  EXPECT_EQ(run["checkpoints"][0]["path"], "checkpoints/step-1");
  EXPECT_TRUE(run["checkpoints"][1]["complete"]);
  EXPECT_FALSE(run["checkpoints"][2]["complete"]);
  EXPECT_TRUE(run["checkpoints"][2]["incomplete"]);
  ASSERT_EQ(run["traces"].size(), 1u) << run;
  EXPECT_EQ(run["traces"][0]["source"], "profiler");
  EXPECT_EQ(run["traces"][0]["file"], "profiler");
  EXPECT_EQ(run["traces"][0]["trace_files"], json::array({"profiler/host_1.123.pt.trace.json"}));
  ASSERT_EQ(run["traces"][0]["ranks"].size(), 1u);
  EXPECT_FALSE(run["traces"][0]["ranks"][0]["top_operators"].empty());
  for (const json& m : (*data)["missing"]) EXPECT_NE(m["part"], "trace") << m;
}

// The report reads through ReportOptions::os: a run directory (metrics of two ranks, hang
// dumps, a compare report, a data scan, checkpoints, a profiler trace, the doctor report and
// the fingerprint, from tests/data) copied byte for byte into a FakeOs at the same path gives
// the data model the directory on disk gives, with the directory on disk gone.
TEST_F(ReportTest, RunDirectoryOnAFakeOsGivesTheSameData) {
  const char* src = std::getenv("TS_SOURCE_DIR");  // ts_add_test sets it
  ASSERT_NE(src, nullptr) << "TS_SOURCE_DIR not set (ctest sets it)";
  const fs::path data_dir = fs::path(src) / "tests/data";
  const fs::path dir = root_ / "faked";
  fs::create_directories(dir);
  for (const char* part : {"report/spike_run/train", "hang/run_dir/hang",
                           "report/compare_run/compare", "ckpt/run/checkpoints"}) {
    fs::copy(data_dir / part, dir / fs::path(part).filename(), fs::copy_options::recursive);
  }
  fs::create_directories(dir / "profiler");
  fs::copy_file(data_dir / "trace/kineto_rank0.pt.trace.json",
                dir / "profiler" / "kineto_rank0.pt.trace.json");
  fs::create_directories(dir / "data");
  std::ofstream(dir / "data" / "scan.json")
      << json({{"format", "trainscope.data.scan"}, {"docs", 10}, {"exact_duplicate_ratio", 0.1}});
  std::ofstream(dir / "report.json")
      << json({{"format", "trainscope.doctor"}, {"passed", true}, {"checks", json::array()}});
  std::ofstream(dir / "fingerprint.json")
      << json({{"format", "trainscope.env.fingerprint"}, {"host", {{"kernel", "6.1"}}}});

  FakeOs os;
  for (const fs::directory_entry& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_directory()) {
      os.AddDir(e.path().string());
      continue;
    }
    std::ifstream in(e.path(), std::ios::binary);
    os.AddFile(e.path().string(),
               std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()));
  }
  absl::StatusOr<json> on_disk = CollectReportData({dir.string()}, {});
  ASSERT_TRUE(on_disk.ok()) << on_disk.status();
  fs::remove_all(dir);
  ReportOptions options;
  options.os = &os;
  absl::StatusOr<json> on_fake = CollectReportData({dir.string()}, options);
  ASSERT_TRUE(on_fake.ok()) << on_fake.status();
  EXPECT_EQ(*on_fake, *on_disk) << "fake: " << on_fake->dump(1) << "\ndisk: " << on_disk->dump(1);
  // Every part was read (the comparison is not between two empty models).
  const json& run = (*on_fake)["runs"][0];
  EXPECT_EQ(run["ranks"].size(), 2u);
  EXPECT_EQ(run["hang"]["ranks"].size(), 2u);
  for (const char* key :
       {"compares", "data_scans", "checkpoints", "traces", "doctor", "fingerprint", "findings"}) {
    EXPECT_FALSE(JsonValueOr(run, key, json::array()).empty())
        << key << " " << (*on_fake)["missing"];
  }
  // And the directory that is in no Os is NotFound, as on disk.
  EXPECT_EQ(CollectReportData({(root_ / "nope").string()}, options).status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace trainscope::report
