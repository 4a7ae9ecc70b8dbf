// The Ascend cluster view (ascend_cluster.h): readers on real msprof-analyze / msinsight files
// (tests/data/trace/ascend_cluster) and on damaged copies, and msprof-analyze's rules on them.
#include "trace/ascend_cluster.h"

#include <filesystem>
#include <string>

#include "gtest/gtest.h"
#include "trainscope/core/fake_os.h"

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

// Every regular file under the sample folder `rel`, copied into `os` under "/data/<rel>".
void CopyIntoFakeOs(const std::string& rel, FakeOs* os) {
  const std::string root = ClusterData(rel);
  for (const auto& e : std::filesystem::recursive_directory_iterator(root)) {
    if (!e.is_regular_file()) continue;
    const std::string path = e.path().string();
    os->AddFile("/data/" + rel + path.substr(root.size()), *Os::Default()->ReadFile(path));
  }
}

// The cluster readers go through Os: the samples copied into a FakeOs read as from disk.
TEST(AscendCluster, ReadersRunOnAFakeOs) {
  FakeOs os;
  CopyIntoFakeOs("advisor8", &os);
  CopyIntoFakeOs("pp4_folders", &os);
  ClusterPaths p = SplitClusterPaths({"/data/advisor8", "/data/pp4_folders"}, &os);
  EXPECT_EQ(p.outputs, std::vector<std::string>{"/data/advisor8/cluster_analysis_output"});
  EXPECT_EQ(p.rank_parents, std::vector<std::string>{"/data/pp4_folders"});
  EXPECT_FALSE(ReadClusterPaths(p, &os).ok());  // one cluster at a time
  auto fake = ReadClusterOutput("/data/advisor8/cluster_analysis_output", &os);
  auto real = ReadClusterOutput(ClusterData("advisor8/cluster_analysis_output"));
  ASSERT_TRUE(fake.ok()) << fake.status();
  ASSERT_TRUE(real.ok()) << real.status();
  ASSERT_EQ(fake->rows.size(), 8u);
  EXPECT_DOUBLE_EQ(fake->rows[1].free_us, real->rows[1].free_us);
  EXPECT_EQ(fake->comm.size(), real->comm.size());
  auto folders = ReadRankFolders("/data/pp4_folders", &os);
  auto real_folders = ReadRankFolders(ClusterData("pp4_folders"));
  ASSERT_TRUE(folders.ok()) << folders.status();
  ASSERT_TRUE(real_folders.ok());
  EXPECT_EQ(folders->rows.size(), real_folders->rows.size());
  EXPECT_EQ(folders->stages.size(), real_folders->stages.size());
  EXPECT_FALSE(ReadClusterOutput("/data/none", &os).ok());
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

// RDMA retransmission across ranks (advisor communication_retransmission_checker.py): an op's
// RDMA transit over 4000 ms counts only when its shortest elapse over the ranks is at least
// 4000 ms; the cluster's finding replaces the per-rank ones of the ranks it covers.
TEST(AscendCluster, RdmaRetransmissionNeedsEveryRankSlow) {
  auto rec = [](const std::string& op, int rank, double elapse_ms, double rdma_ms) {
    ClusterCommRecord c;
    c.group = "(0, 1)";
    c.step = 3;
    c.op = op;
    c.rank = rank;
    c.elapse_ms = elapse_ms;
    c.transit_ms = rdma_ms;
    c.transport["RDMA"] = {16.0, rdma_ms};
    return c;
  };
  ClusterInput in;
  in.source = "cluster_analysis_output";
  // Both ranks spent over 4 s in the op and rank 0's RDMA transit took 4.2 s: retransmission.
  in.comm.push_back(rec("hcom_allReduce__1", 0, 4500, 4200));
  in.comm.push_back(rec("hcom_allReduce__1", 1, 4300, 120));
  // Rank 1 left this one after 0.9 s: the ranks were out of step, not a lost packet.
  in.comm.push_back(rec("hcom_allReduce__2", 0, 5000, 4800));
  in.comm.push_back(rec("hcom_allReduce__2", 1, 900, 150));
  ClusterCommRecord total = rec("Total Op Info", 1, 9000, 9000);
  total.total = true;
  in.comm.push_back(total);
  Report rep;
  for (int r : {0, 1, 2}) {
    RankResult rr;
    rr.rank = r;
    Finding f;
    f.id = "rdma_retransmission";
    f.rank = r;
    rr.findings.push_back(f);
    rep.ranks.push_back(rr);
  }
  AnalyzeCluster(in, {}, &rep);
  EXPECT_TRUE(rep.ranks[0].findings.empty());
  EXPECT_TRUE(rep.ranks[1].findings.empty());
  EXPECT_EQ(rep.ranks[2].findings.size(), 1u);  // not in the communication records
  int n = 0;
  for (const Finding& f : rep.findings) {
    if (f.id != "rdma_retransmission") continue;
    ++n;
    EXPECT_EQ(f.rank, 0);
    EXPECT_NE(f.title.find("1 communication op retransmitted over RDMA (ranks 0)"),
              std::string::npos)
        << f.title;
    EXPECT_NE(f.evidence.find("hcom_allReduce__1 of group (0, 1), step 3"), std::string::npos)
        << f.evidence;
    EXPECT_NE(f.evidence.find("shortest elapse over its ranks 4300.0 ms"), std::string::npos)
        << f.evidence;
  }
  EXPECT_EQ(n, 1);
  // Rank 1's elapse under 4000 ms in the first op too: nothing.
  in.comm[1].elapse_ms = 3999;
  Report quiet;
  AnalyzeCluster(in, {}, &quiet);
  for (const Finding& f : quiet.findings) EXPECT_NE(f.id, "rdma_retransmission");
}

}  // namespace
}  // namespace trainscope::trace::internal
