// ReportSummary over a hand-made data model: the counts (ranks, points drawn, findings by
// severity) and the extras drawn beyond the fixed charts.
#include <string>

#include "gtest/gtest.h"
#include "trainscope/report/report.h"

namespace trainscope::report {
namespace {

using nlohmann::json;

TEST(ReportSummaryTest, CountsPointsFindingsAndExtras) {
  const json series = {{"x", {1, 2, 3}}, {"y", {1.0, 2.0, 3.0}}};
  const json rank = {{"series", {{"loss", series}, {"lr", series}}},
                     // "loss" is drawn on the loss chart already; "acc" on its own chart.
                     {"scalars", {{"loss", series}, {"acc", {{"x", {1, 2}}}}}}};
  const json data = {
      {"runs",
       {{{"name", "a"},
         {"ranks", {rank, rank}},
         {"findings", {{{"severity", "warning"}}, {{"severity", "error"}}, json::object()}},
         {"checkpoints", {{{"step", 10}, {"anomaly", false}, {"complete", true}}}},
         {"traces", {{{"file", "t.json"}, {"source", "analysis"}, {"ranks", {1, 2}}}}}}}},
      {"sections", {"summary", "loss"}},
      {"missing", json::array()},
      {"malformed", 3}};
  const json s = ReportSummary(data, "/out/report.html", 1234);
  EXPECT_EQ(s["format"], "trainscope.report");
  EXPECT_EQ(s["output"], "/out/report.html");
  EXPECT_EQ(s["html_bytes"], 1234);
  EXPECT_EQ(s["runs"], 1);
  EXPECT_EQ(s["ranks"], 2);
  EXPECT_EQ(s["points_drawn"], 2 * (3 + 3 + 2));
  EXPECT_EQ(s["findings"], json({{"error", 1}, {"warning", 1}, {"info", 1}}));
  EXPECT_EQ(s["malformed"], 3);
  EXPECT_EQ(s["scalars"], json({"acc", "loss"}));
  ASSERT_EQ(s["checkpoints"].size(), 1u);
  EXPECT_EQ(s["checkpoints"][0]["run"], "a");
  ASSERT_EQ(s["traces"].size(), 1u);
  EXPECT_EQ(s["traces"][0]["ranks"], 2);
  EXPECT_EQ(s["traces"][0]["trace_files"], 0);
  EXPECT_EQ(s["compares"], json::array());
}

}  // namespace
}  // namespace trainscope::report
