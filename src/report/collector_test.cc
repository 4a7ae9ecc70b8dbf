// ReportCollector against CollectReportData: after each change a live run (or a user) can
// make to a run directory (lines appended, a line written in two parts, a resumed run writing
// earlier steps again, a file truncated, replaced or rewritten in place, a rank file appearing
// or disappearing, a document written), the incremental collection must equal a collection
// from scratch, and it must have parsed only what was appended.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "gtest/gtest.h"
#include "report/metrics.h"
#include "trainscope/core/fake_os.h"
#include "trainscope/report/report.h"

namespace trainscope::report {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string CollectorStepLine(int step, double loss, bool null_grad = false) {
  json j = {{"type", "step"},
            {"step", step},
            {"loss", loss},
            {"lr", 1e-3 * (1 + step % 7)},
            {"grad_norm", null_grad ? json() : json(1.0 + (step % 13) * 0.1)},
            {"step_ms", 20.0 + step % 5},
            {"tokens_per_s", 25600.0},
            {"comm_ms", 1.0},
            {"host_rss_bytes", 100000000 + step},
            {"phases_ms",
             {{"data_wait", 1.0},
              {"h2d", 0.5},
              {"forward", 6.0 + step % 3},
              {"backward", 10.0},
              {"comm_wait", 0.5 * (step % 2)},
              {"optimizer", 2.5}}}};
  return j.dump() + "\n";
}

std::string CollectorHeader(int rank) {
  return json({{"type", "header"},
               {"format", "trainscope.train_metrics"},
               {"version", 1},
               {"rank", rank},
               {"world_size", 2}})
             .dump() +
         "\n";
}

class CollectorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ts_collector_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "train");
    options_.max_points = 40;  // downsampled from the first appends on
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Metrics(int rank) const {
    return (dir_ / "train" / ("metrics.rank" + std::to_string(rank) + ".jsonl")).string();
  }
  void Append(int rank, const std::string& text) {
    std::ofstream(Metrics(rank), std::ios::app | std::ios::binary) << text;
  }
  void AppendSteps(int rank, int from, int to, double base = 5.0) {
    std::string text;
    for (int s = from; s <= to; ++s) text += CollectorStepLine(s, base - 0.001 * s);
    Append(rank, text);
  }

  // The incremental collection equals a collection from scratch.
  void ExpectSameAsFull(ReportCollector* c, const std::string& when) {
    absl::StatusOr<json> inc = c->Collect();
    absl::StatusOr<json> full = CollectReportData({dir_.string()}, options_);
    ASSERT_TRUE(inc.ok()) << when << ": " << inc.status();
    ASSERT_TRUE(full.ok()) << when << ": " << full.status();
    EXPECT_TRUE(*inc == *full) << when << ": " << json::diff(*full, *inc).dump().substr(0, 2000);
  }

  fs::path dir_;
  ReportOptions options_;
};

TEST_F(CollectorTest, IncrementalEqualsFullAfterEveryKindOfChange) {
  Append(0, CollectorHeader(0));
  AppendSteps(0, 1, 30);
  Append(1, CollectorHeader(1));
  AppendSteps(1, 1, 30, 6.0);
  CollectorOptions every;
  every.findings_backoff = 0;
  ReportCollector c({dir_.string()}, options_, every);
  ExpectSameAsFull(&c, "first collection");

  // Appended lines, a spike record, a first null grad norm, a malformed line.
  AppendSteps(0, 31, 120);
  Append(0, json({{"type", "spike"}, {"step", 77}, {"rank", 0}, {"loss", 9.0}}).dump() + "\n");
  Append(0, CollectorStepLine(121, 4.0, /*null_grad=*/true) + "{not json\n");
  ExpectSameAsFull(&c, "appended");

  // A line written in two parts: first a piece that does not parse, then the rest.
  const std::string line = CollectorStepLine(31, 6.5);
  AppendSteps(1, 31, 60, 6.0);
  Append(1, line.substr(0, 25));
  ExpectSameAsFull(&c, "partial last line");
  const int64_t before = c.stats().metrics_bytes_parsed;
  Append(1, line.substr(25));
  ExpectSameAsFull(&c, "partial line completed");
  // Only the pending piece and the rest of the line were parsed (no re-read of the file).
  EXPECT_EQ(c.stats().metrics_bytes_parsed - before, static_cast<int64_t>(line.size()));

  // A last record whose newline comes later; then one continued by other bytes than a newline
  // (the line reads differently now: the file is read again from the start).
  Append(0, CollectorStepLine(122, 3.9).substr(0, CollectorStepLine(122, 3.9).size() - 1));
  ExpectSameAsFull(&c, "record without newline");
  Append(0, "\n");
  AppendSteps(0, 123, 130);
  ExpectSameAsFull(&c, "its newline");
  Append(0, CollectorStepLine(131, 3.8).substr(0, CollectorStepLine(131, 3.8).size() - 1));
  ExpectSameAsFull(&c, "record without newline again");
  const int64_t full_reads = c.stats().metrics_full_reads;
  Append(0, " trailing\n");
  ExpectSameAsFull(&c, "continued by other bytes");
  EXPECT_EQ(c.stats().metrics_full_reads, full_reads + 1);

  // A resumed run writes steps 50..70 again, then goes on: the later records win.
  AppendSteps(1, 50, 70, 7.0);
  AppendSteps(1, 32, 40, 8.0);
  ExpectSameAsFull(&c, "resumed run");

  // Truncated and rewritten shorter (same inode); replaced by another file (new inode);
  // rewritten in place with the same inode and more bytes than before.
  { std::ofstream(Metrics(0), std::ios::trunc) << CollectorHeader(0); }
  AppendSteps(0, 1, 10, 3.0);
  ExpectSameAsFull(&c, "truncated");
  {
    std::ofstream out(Metrics(1) + ".new");
    out << CollectorHeader(1);
    for (int s = 1; s <= 200; ++s) out << CollectorStepLine(s, 2.0 + 0.01 * s);
  }
  fs::rename(Metrics(1) + ".new", Metrics(1));
  ExpectSameAsFull(&c, "replaced");
  {
    std::ofstream out(Metrics(0), std::ios::trunc);
    out << CollectorHeader(0);
    for (int s = 1; s <= 300; ++s) out << CollectorStepLine(s, 1.0 + 0.01 * s);
  }
  ExpectSameAsFull(&c, "rewritten in place, longer");

  // A rank file appears, another one disappears; a doctor report and a fingerprint appear.
  Append(2, CollectorHeader(2));
  AppendSteps(2, 1, 50, 4.0);
  ExpectSameAsFull(&c, "new rank file");
  fs::remove(Metrics(1));
  ExpectSameAsFull(&c, "rank file removed");
  std::ofstream(dir_ / "report.json")
      << json({{"format", "trainscope.doctor"}, {"version", 1}, {"passed", true}}).dump();
  std::ofstream(dir_ / "fingerprint.json") << json({{"host", {{"cpus", 2}}}}).dump();
  ExpectSameAsFull(&c, "documents written");
}

// The file written in pieces of random sizes (cut anywhere: inside a line, inside a number,
// right before a newline), mixing in-order and repeated steps, events, blank and malformed
// lines: after every piece the reader that read on equals a reader that read the file once.
// The metrics reader reads through Os: a file in a FakeOs that grows (same inode) is read on
// from where it was, one replaced (a new inode) is read again from the start.
TEST(CollectorFakeOs, MetricsReaderOnAFakeOs) {
  FakeOs os;
  const std::string path = "/run/metrics.rank0.jsonl";
  os.AddFile(path, CollectorHeader(0) + CollectorStepLine(1, 5.0));
  RankMetricsReader reader(path, &os);
  ASSERT_TRUE(reader.Update());
  EXPECT_EQ(reader.metrics().rank, 0);
  EXPECT_EQ(reader.metrics().steps.size(), 1u);
  os.AppendToFile(path, CollectorStepLine(2, 4.5) + CollectorStepLine(3, 4.0));
  ASSERT_TRUE(reader.Update());
  EXPECT_EQ(reader.metrics().steps.size(), 3u);
  EXPECT_EQ(reader.full_reads(), 1);
  RankMetricsReader once("x", &os);
  ASSERT_TRUE(once.UpdateFromBytes(*os.ReadFile(path), 0, 0));
  EXPECT_EQ(RankMetricsToJson(reader.metrics(), 40), RankMetricsToJson(once.metrics(), 40));
  os.AddFile(path, CollectorHeader(0) + CollectorStepLine(7, 3.0));
  ASSERT_TRUE(reader.Update());
  EXPECT_EQ(reader.full_reads(), 2);
  EXPECT_EQ(reader.metrics().steps.size(), 1u);
  RankMetricsReader absent("/run/none.jsonl", &os);
  EXPECT_FALSE(absent.Update());
}

TEST_F(CollectorTest, ReaderAfterEveryPieceEqualsAOneShotRead) {
  std::string text = CollectorHeader(0);
  std::mt19937 rng(7);
  for (int i = 0; i < 300; ++i) {
    const int step = i % 50 == 49 ? i - 20 : i;  // every 50 lines a resumed step
    text += CollectorStepLine(step, 5.0 - 0.01 * i, i == 77);
    if (i % 37 == 0) text += "\n";
    if (i % 61 == 0) text += "{not json\n";
    if (i % 43 == 0) text += json({{"type", "spike"}, {"step", step}, {"loss", 9.0}}).dump() + "\n";
  }
  const std::string path = Metrics(0);
  std::ofstream(path, std::ios::trunc).close();
  RankMetricsReader reader(path);
  size_t pos = 0;
  int pieces = 0;
  while (pos < text.size()) {
    size_t n = std::min<size_t>(text.size() - pos, 1 + rng() % 400);
    const size_t nl = text.find('\n', pos + 1);
    if (pieces % 3 == 2 && nl != std::string::npos) n = nl - pos;  // a line without newline
    Append(0, text.substr(pos, n));
    pos += n;
    ++pieces;
    ASSERT_TRUE(reader.Update());
    RankMetricsReader once(path);
    ASSERT_TRUE(once.Update());
    const json a = RankMetricsToJson(reader.metrics(), 40);
    const json b = RankMetricsToJson(once.metrics(), 40);
    ASSERT_TRUE(a == b) << "after " << pos << " bytes: " << json::diff(b, a).dump().substr(0, 1500);
    EXPECT_EQ(reader.metrics().events, once.metrics().events);
    EXPECT_EQ(reader.metrics().malformed_examples, once.metrics().malformed_examples);
  }
  EXPECT_GT(pieces, 100);
  EXPECT_EQ(reader.full_reads(), 1);  // never read again from the start
  EXPECT_LT(reader.bytes_parsed(), static_cast<int64_t>(text.size()) * 2);
}

// The shared JSON policy (core/json_text.h) in the metrics reader: a number out of range
// (1e309, 2^64) and nesting past 64 levels (65, and 100,000) are malformed lines, counted,
// never a crash; the good lines around them are read.
TEST_F(CollectorTest, OutOfRangeNumbersAndDeepNestingAreMalformedLines) {
  std::string text = CollectorHeader(0) + CollectorStepLine(1, 5.0);
  text += "{\"type\": \"step\", \"step\": 2, \"loss\": 1e309}\n";
  text += "{\"type\": \"step\", \"step\": 18446744073709551616, \"loss\": 4.0}\n";
  text += "{\"type\": \"spike\", \"step\": 3, \"loss\": 1e309}\n";
  text += R"({"type": "summary", "x": )" + std::string(65, '[') + std::string(65, ']') + "}\n";
  text += std::string(100000, '{') + "\n";
  text += CollectorStepLine(4, 4.5);
  Append(0, text);
  RankMetricsReader reader(Metrics(0));
  ASSERT_TRUE(reader.Update());
  EXPECT_EQ(reader.metrics().malformed, 5);
  EXPECT_TRUE(reader.metrics().events.empty());  // the spike with 1e309 is not an event
  const json j = RankMetricsToJson(reader.metrics(), 40);
  EXPECT_EQ(j.dump().find("1e309"), std::string::npos);
  EXPECT_NE(j.dump().find("\"last_step\":4"), std::string::npos) << j.dump().substr(0, 400);
}

// The cost of a refresh is what was appended: 100 lines parsed, not the file again.
TEST_F(CollectorTest, RefreshParsesOnlyTheAppendedBytes) {
  Append(0, CollectorHeader(0));
  AppendSteps(0, 1, 2000);
  ReportCollector c({dir_.string()}, options_);
  ASSERT_TRUE(c.Collect().ok());
  const int64_t first = c.stats().metrics_bytes_parsed;
  EXPECT_EQ(first, static_cast<int64_t>(fs::file_size(Metrics(0))));
  AppendSteps(0, 2001, 2100);
  ASSERT_TRUE(c.Collect().ok());
  EXPECT_EQ(c.stats().metrics_bytes_parsed - first,
            static_cast<int64_t>(fs::file_size(Metrics(0))) - first);
  EXPECT_EQ(c.stats().metrics_full_reads, 1);
  // Nothing changed: nothing parsed, no part read again.
  const ReportCollector::Stats s = c.stats();
  ASSERT_TRUE(c.Collect().ok());
  EXPECT_EQ(c.stats().metrics_bytes_parsed, s.metrics_bytes_parsed);
  EXPECT_EQ(c.stats().parts_read, s.parts_read);
  EXPECT_EQ(c.stats().diagnoses, s.diagnoses);
}

// The means drawn beside the charts come from running totals kept as steps are appended (and
// counted again after a resumed run rewrote steps): checked against sums taken here over the
// records that won (the last of each step).
TEST_F(CollectorTest, MeansOverTheWinningRecordsAfterAppendsAndAResume) {
  Append(0, CollectorHeader(0));
  AppendSteps(0, 1, 100);
  ReportCollector c({dir_.string()}, options_);
  ASSERT_TRUE(c.Collect().ok());
  AppendSteps(0, 101, 150);
  AppendSteps(0, 40, 60, 9.0);  // resumed from step 40: these records win
  absl::StatusOr<json> j = c.Collect();
  ASSERT_TRUE(j.ok()) << j.status();
  double loss = 0, step_ms = 0, forward = 0, busy = 0;
  for (int s = 1; s <= 150; ++s) {
    loss += (s >= 40 && s <= 60 ? 9.0 : 5.0) - 0.001 * s;
    step_ms += 20.0 + s % 5;
    forward += 6.0 + s % 3;
    busy += 20.0 + s % 5 - 0.5 * (s % 2);
  }
  const json& means = (*j)["runs"][0]["ranks"][0]["means"];
  EXPECT_EQ((*j)["runs"][0]["ranks"][0]["steps"], 150);
  EXPECT_NEAR(means["loss"].get<double>(), loss / 150, 1e-6);
  EXPECT_NEAR(means["step_ms"].get<double>(), step_ms / 150, 1e-6);
  EXPECT_NEAR(means["phase.forward"].get<double>(), forward / 150, 1e-6);
  EXPECT_NEAR(means["busy_ms"].get<double>(), busy / 150, 1e-6);
  EXPECT_FALSE(means.contains("val_loss"));
  EXPECT_FALSE((*j)["runs"][0]["ranks"][0]["series"].contains("val_loss"));
}

// Findings: appended metrics lines alone wait for the backoff; any other file diagnoses now.
TEST_F(CollectorTest, FindingsWaitForTheBackoffUnlessAnotherFileChanged) {
  Append(0, CollectorHeader(0));
  AppendSteps(0, 1, 100);
  CollectorOptions never;
  never.findings_backoff = 1e12;
  ReportCollector c({dir_.string()}, options_, never);
  ASSERT_TRUE(c.Collect().ok());
  EXPECT_EQ(c.stats().diagnoses, 1);
  AppendSteps(0, 101, 200);
  absl::StatusOr<json> j = c.Collect();
  ASSERT_TRUE(j.ok());
  EXPECT_EQ(c.stats().diagnoses, 1);
  EXPECT_EQ((*j)["runs"][0]["ranks"][0]["steps"], 200);  // the metrics are current
  EXPECT_TRUE(c.findings_pending());  // so serve collects again even if nothing changes
  ASSERT_TRUE(c.Collect().ok());
  EXPECT_TRUE(c.findings_pending());
  EXPECT_EQ(c.stats().diagnoses, 1);
  std::ofstream(dir_ / "report.json")
      << json({{"format", "trainscope.doctor"}, {"version", 1}, {"passed", true}}).dump();
  ASSERT_TRUE(c.Collect().ok());
  EXPECT_EQ(c.stats().diagnoses, 2);
  EXPECT_FALSE(c.findings_pending());

  CollectorOptions every;
  every.findings_backoff = 0;
  ReportCollector d({dir_.string()}, options_, every);
  ASSERT_TRUE(d.Collect().ok());
  AppendSteps(0, 201, 210);
  ASSERT_TRUE(d.Collect().ok());
  EXPECT_EQ(d.stats().diagnoses, 2);
  EXPECT_FALSE(d.findings_pending());
}

}  // namespace
}  // namespace trainscope::report
