// torch_npu's HCCL dumps: the op from the frames, and Ascend's three timeout classes.
#include "hang/hccl_dump.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "hang/hang_test_util.h"

namespace trainscope::hang {
namespace {

using nlohmann::json;
using testing::E;

// An HCCL entry as torch_npu writes it: profiling_name "", the op in frames[0].
json HcclEntry(const std::string& op, int64_t seq, const std::string& state, int64_t record_id,
               int64_t completed_ns = 0) {
  E e;
  e.op = op;
  e.seq = seq;
  e.state = state;
  e.pg = "0";
  e.pg_desc = "";
  json j = testing::EntryJson(e, record_id, "hccl");
  j["profiling_name"] = "";
  j["process_group"] = {"group_name_0", ""};
  j["frames"] = json::array(
      {{{"name", op}, {"filename", "/x/torch/distributed/distributed_c10d.py"}, {"line", 2806}},
       {{"name", "train_step"}, {"filename", "train.py"}, {"line", 61}}});
  if (completed_ns > 0) j["time_discovered_completed_ns"] = completed_ns;
  return j;
}

json HcclDump(int world, std::vector<json> entries) {
  std::string ranks = "[";
  for (int r = 0; r < world; ++r) ranks += (r ? ", " : "") + std::to_string(r);
  return {{"version", "2.4"},
          {"pg_config",
           {{"group_name_0", {{"name", "group_name_0"}, {"desc", ""}, {"ranks", ranks + "]"}}}}},
          {"entries", entries}};
}

Report AnalyzeHccl(const std::vector<json>& docs) {
  std::vector<Dump> dumps;
  for (size_t i = 0; i < docs.size(); ++i) {
    auto d = ParseDump(docs[i], "/tmp/hccl_trace_rank_" + std::to_string(i));
    EXPECT_TRUE(d.ok()) << d.status();
    if (d.ok()) dumps.push_back(*d);
  }
  return AnalyzeDumps(std::move(dumps), InputCounts{}, AnalyzeOptions{});
}

TEST(HcclOpFromFrames, TakesTheC10dFunctionOnly) {
  json f = json::array({{{"name", "all_gather_into_tensor"}}, {{"name", "train"}}});
  EXPECT_EQ(internal::HcclOpFromFrames(f), "all_gather_into_tensor");
  // pg.allreduce(t) called directly: the innermost frame is the caller, not an op.
  EXPECT_EQ(internal::HcclOpFromFrames(json::array({{{"name", "test_long"}}})), "");
  EXPECT_EQ(internal::HcclOpFromFrames(json::array()), "");
  EXPECT_EQ(internal::HcclOpFromFrames(json::array({1})), "");
  EXPECT_EQ(internal::HcclOpFromFrames(json()), "");
}

TEST(HcclDump, DetectedByNameKeyOrBackend) {
  auto d = ParseDump(HcclDump(2, {HcclEntry("barrier", 1, "completed", 0)}), "x/hccl_trace_rank_1");
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->hccl);
  EXPECT_EQ(d->entries[0].op, "barrier");
  auto n = ParseDump(testing::DumpJson(0, {E{}}, 1), "nccl_trace_rank_0");
  ASSERT_TRUE(n.ok());
  EXPECT_FALSE(n->hccl);
  json with_state = testing::DumpJson(0, {E{}}, 1);
  with_state["hccl_comm_state"] = json::object();
  EXPECT_TRUE(ParseDump(with_state, "dump_0")->hccl);
}

// Class 1, as test_timeout_dumps_on_stuck_ranks leaves it: rank 0 waits in #2, rank 1
// completed #1 and never issued #2.
TEST(HcclTimeoutClasses, ComputeStuckReplacesNotJoined) {
  Report r = AnalyzeHccl({HcclDump(2, {HcclEntry("all_reduce", 1, "completed", 0, 10),
                                       HcclEntry("all_reduce", 2, "scheduled", 1)}),
                          HcclDump(2, {HcclEntry("all_reduce", 1, "completed", 0, 11)})});
  ASSERT_EQ(r.findings.size(), 1u);
  const HangFinding& f = r.findings[0];
  EXPECT_EQ(f.kind, FindingKind::kComputeStuck);
  EXPECT_EQ(f.culprit_ranks, std::vector<int>{1});
  EXPECT_EQ(f.waiting_ranks, std::vector<int>{0});
  EXPECT_EQ(f.collective_seq_id, 2);
  EXPECT_NE(f.finding.title.find("rank 1 was still computing after all_reduce"), std::string::npos);
  EXPECT_NE(f.finding.fix.find("hccl_trace_rank_1_py_traceback"), std::string::npos);
  EXPECT_NE(r.root_cause.find("still computing"), std::string::npos);
  EXPECT_EQ(r.details["hccl_timeout"][0]["class"], "compute_stuck");
  EXPECT_EQ(FindingsFrom(r)[0].id, "hang.compute_stuck");
  EXPECT_EQ(f.finding.id, "hang.compute_stuck");
  EXPECT_EQ(FindingsFrom(r)[0].title, f.finding.title);
}

TEST(HcclTimeoutClasses, AllCompletedIsALongTaskAfterTheLatest) {
  Report r = AnalyzeHccl({HcclDump(2, {HcclEntry("all_reduce", 1, "completed", 0, 10),
                                       HcclEntry("broadcast", 2, "completed", 1, 30)}),
                          HcclDump(2, {HcclEntry("all_reduce", 1, "completed", 0, 11),
                                       HcclEntry("broadcast", 2, "completed", 1, 40)})});
  ASSERT_EQ(r.findings.size(), 1u);
  EXPECT_EQ(r.findings[0].kind, FindingKind::kLongTaskAfterCollective);
  EXPECT_EQ(r.findings[0].op, "broadcast");
  EXPECT_TRUE(r.findings[0].culprit_ranks.empty());
  EXPECT_EQ(FindingsFrom(r)[0].severity, Severity::kWarning);
}

TEST(HcclTimeoutClasses, AllPendingInOneCollectiveTimedOut) {
  // "started" (TORCH_HCCL_ENABLE_TIMING) counts as pending like "scheduled".
  Report r = AnalyzeHccl({HcclDump(2, {HcclEntry("all_reduce", 1, "completed", 0, 10),
                                       HcclEntry("all_gather", 2, "started", 1)}),
                          HcclDump(2, {HcclEntry("all_reduce", 1, "completed", 0, 11),
                                       HcclEntry("all_gather", 2, "started", 1)})});
  ASSERT_EQ(r.findings.size(), 1u);
  EXPECT_EQ(r.findings[0].kind, FindingKind::kCollectiveTimeout);
  EXPECT_EQ(r.findings[0].waiting_ranks, (std::vector<int>{0, 1}));
  EXPECT_NE(r.findings[0].finding.fix.find("HCCL_EXEC_TIMEOUT"), std::string::npos);
}

TEST(HcclTimeoutClasses, PendingInDifferentCollectivesIsUnrecognized) {
  // A type mismatch at #2: the existing finding stands, Ascend's rule recognises nothing.
  Report r = AnalyzeHccl({HcclDump(2, {HcclEntry("all_reduce", 1, "completed", 0, 10),
                                       HcclEntry("all_gather", 2, "scheduled", 1)}),
                          HcclDump(2, {HcclEntry("all_reduce", 1, "completed", 0, 11),
                                       HcclEntry("broadcast", 2, "scheduled", 1)})});
  ASSERT_FALSE(r.findings.empty());
  EXPECT_EQ(r.findings[0].kind, FindingKind::kTypeMismatch);
  EXPECT_EQ(r.details["hccl_timeout"][0]["class"], "unrecognized");
}

TEST(HcclTimeoutClasses, NcclDumpsAreLeftAlone) {
  std::vector<E> a = {E{}}, b = {E{}};
  Report r = testing::Analyze({testing::DumpJson(0, a, 2), testing::DumpJson(1, b, 2)});
  EXPECT_TRUE(r.findings.empty());
  EXPECT_FALSE(r.details.contains("hccl_timeout"));
}

}  // namespace
}  // namespace trainscope::hang
