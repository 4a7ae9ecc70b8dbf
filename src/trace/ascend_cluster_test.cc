// The Ascend cluster view (ascend_cluster.h): readers on real msprof-analyze / msinsight files
// (tests/data/trace/ascend_cluster) and on damaged copies, and msprof-analyze's rules on them.
#include "trace/ascend_cluster.h"

#include <string>

#include "gtest/gtest.h"

namespace trainscope::trace::internal {
namespace {

std::string ClusterData(const std::string& p) {
  return std::string(TS_SOURCE_DIR) + "/tests/data/trace/ascend_cluster/" + p;
}

TEST(AscendCluster, SplitsClusterOutputsFromRankFolders) {
  ClusterPaths p =
      SplitClusterPaths({ClusterData("advisor8"), ClusterData("pp4_folders"),
                         ClusterData("pp16/cluster_analysis_output/cluster_step_trace_time.csv")});
  ASSERT_EQ(p.outputs.size(), 2u);
  EXPECT_EQ(p.outputs[0], ClusterData("advisor8") + "/cluster_analysis_output");
  EXPECT_EQ(p.outputs[1], ClusterData("pp16/cluster_analysis_output"));
  EXPECT_EQ(p.rank_parents, std::vector<std::string>{ClusterData("pp4_folders")});
  EXPECT_EQ(p.rest, std::vector<std::string>{ClusterData("pp4_folders")});  // its ranks, per rank
  EXPECT_TRUE(p.with_ranks.empty());
  EXPECT_FALSE(ReadClusterPaths(p).ok());  // one cluster at a time
}

TEST(AscendCluster, EightRankAdvisorSampleNamesRankOne) {
  auto in = ReadClusterOutput(ClusterData("advisor8/cluster_analysis_output"));
  ASSERT_TRUE(in.ok()) << in.status();
  ASSERT_EQ(in->rows.size(), 8u);
  ASSERT_EQ(in->stages.size(), 1u);
  EXPECT_EQ(in->stages[0].ranks.size(), 8u);
  EXPECT_DOUBLE_EQ(in->rows[1].free_us, 1488610.0587500026);
  EXPECT_EQ(ClusterRankTraces(*in).size(), 8u);
  Report rep;
  AnalyzeCluster(*in, {}, &rep);
  EXPECT_EQ(rep.cluster["slow_rank"]["rank"], 1);
  EXPECT_EQ(rep.cluster["slow_rank"]["cause"], "free");
  const auto& dims = rep.cluster["slow_rank"]["dimensions"];
  EXPECT_FALSE(dims[0]["flagged"]);  // computing: 1.6 ms of a 1.7 s step
  EXPECT_TRUE(dims[1]["flagged"]);
  EXPECT_EQ(dims[1]["max_rank"], 5);
  EXPECT_EQ(dims[2]["max_rank"], 1);
  ASSERT_FALSE(rep.findings.empty());
  EXPECT_EQ(rep.findings[0].id, "slow_rank");
  EXPECT_EQ(rep.findings[0].rank, 1);
}

TEST(AscendCluster, PipelineStageThatWaitsIsNamed) {
  auto in = ReadClusterOutput(ClusterData("pp16/cluster_analysis_output"));
  ASSERT_TRUE(in.ok()) << in.status();
  EXPECT_EQ(in->rows.size(), 16u);
  Report rep;
  AnalyzeCluster(*in, {}, &rep);
  bool bubble = false;
  for (const Finding& f : rep.findings)
    if (f.id == "pipeline_bubble") {
      bubble = true;
      EXPECT_NE(f.title.find("(8, 9, 10, 11, 12, 13, 14, 15) waits"), std::string::npos);
    }
  EXPECT_TRUE(bubble);
  EXPECT_NEAR(rep.cluster["stages"][1]["bubble_pct"].get<double>(), 48.97, 0.01);
}

TEST(AscendCluster, RankFoldersGiveMsprofStages) {
  auto in = ReadRankFolders(ClusterData("pp4_folders"));
  ASSERT_TRUE(in.ok()) << in.status();
  EXPECT_EQ(in->rows.size(), 4u);
  ASSERT_EQ(in->stages.size(), 2u);  // pp groups (0, 2), (1, 3): stages (0, 1), (2, 3)
  EXPECT_EQ(in->stages[0].ranks, (std::vector<int>{0, 1}));
  EXPECT_EQ(in->stages[1].ranks, (std::vector<int>{2, 3}));
  EXPECT_DOUBLE_EQ(in->stages[0].max.comm_not_overlapped_us, 441708.37999999995);
  EXPECT_TRUE(in->links.empty());  // per-rank matrices name group-local ranks
}

TEST(AscendCluster, BadRecordsAreCountedPerFile) {
  ClusterInput in;
  ParseClusterStepTraceCsv(
      "Step,Type,Index,Computing,Communication(Not Overlapped),Free\n"
      "1,rank,0,10,20,30\n1,rank,x,10,20,30\n1,stage,\"(0, 1)\",10,20,30\n1,rank,1,10,-5,30\n"
      "1,rank,2,10",
      "c.csv", &in);
  ASSERT_EQ(in.files.size(), 1u);
  EXPECT_EQ(in.files[0].records, 2);
  EXPECT_EQ(in.files[0].bad_records, 3);
  EXPECT_EQ(in.rows.size(), 1u);
  EXPECT_EQ(in.stages.size(), 1u);
  const std::string comm =
      "{\"(0, 1)\": {\"step1\": {\"op@1\": {\"0\": {\"Communication Time Info\": "
      "{\"Elapse Time(ms)\": 2, \"Transit Time(ms)\": 1, \"Wait Time(ms)\": 1}}, "
      "\"1\": {}}}}}";
  ParseClusterCommJson(comm, "comm.json", &in);
  EXPECT_EQ(in.files[1].records, 1);
  EXPECT_EQ(in.files[1].bad_records, 1);
  ParseClusterMatrixJson("{\"g\": {", "m.json", &in);
  EXPECT_EQ(in.files[2].bad_records, 1);
  EXPECT_NE(in.files[2].problems[0].find("not valid JSON"), std::string::npos);
}

TEST(AscendCluster, NothingReadableIsAnError) {
  auto in = ReadClusterOutput(ClusterData("bad/unreadable/cluster_analysis_output"));
  ASSERT_FALSE(in.ok());
  EXPECT_NE(std::string(in.status().message()).find("line 1"), std::string::npos);
}

}  // namespace
}  // namespace trainscope::trace::internal
