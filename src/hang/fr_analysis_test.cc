// The scenarios of PyTorch's own analyser tests (test/distributed/flight_recorder/
// test_fr_analysis.py in pytorch/pytorch), reproduced: the same entries must give the same
// verdict. fr_trace's pairwise Op.match results map onto internal::MatchOps; its end-to-end
// build_db cases onto the walk (fr_trace's cases leave collective_seq_id at 0 for every
// entry and walk the record order; here the ids are numbered as PyTorch numbers them:
// one id per collective, shared by the ops of a coalesced group).
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "hang/analysis_internal.h"
#include "hang/hang_test_util.h"

namespace trainscope::hang {
namespace {

using internal::MatchOps;
using internal::MatchState;
using nlohmann::json;
using testing::E;

// fr_trace's create_one_event: dtypes are the single string "float32".
Entry Event(const std::string& op, std::vector<std::vector<int64_t>> in,
            std::vector<std::vector<int64_t>> out, const std::string& state = "scheduled",
            const std::string& out_dtype = "float32") {
  Entry e;
  e.profiling_name = "nccl:" + op;
  e.op = op;
  e.backend = "nccl";
  e.input_sizes = std::move(in);
  e.output_sizes = std::move(out);
  e.input_dtypes = {"float32"};
  if (!out_dtype.empty()) e.output_dtypes = {out_dtype};
  e.state = state;
  return e;
}

TEST(FrTraceMatchOneEvent, PairwiseStates) {
  const int pg = 2;  // membership {0, 1}
  Entry e1 = Event("all_reduce", {{4, 4}}, {{4, 4}});
  EXPECT_EQ(MatchOps(e1, e1, pg, nullptr), MatchState::kFullyMatched);
  Entry e2 = Event("all_gather", {{4, 4}}, {{4, 4}});
  EXPECT_EQ(MatchOps(e1, e2, pg, nullptr), MatchState::kTypeMismatch);
  Entry e3 = Event("all_to_all", {{4, 4}}, {{4, 4}});
  EXPECT_EQ(MatchOps(e3, e3, pg, nullptr), MatchState::kUndecided);
  Entry e5 = Event("all_reduce", {{5, 4}}, {{4, 4}});
  EXPECT_EQ(MatchOps(e1, e5, pg, nullptr), MatchState::kSizeMismatch);
  Entry e6 = Event("all_reduce", {{4, 4}}, {{5, 4}});
  EXPECT_EQ(MatchOps(e1, e6, pg, nullptr), MatchState::kSizeMismatch);
  Entry e7 = Event("all_reduce", {{4, 4}}, {{5, 4}});
  EXPECT_EQ(MatchOps(e7, e7, pg, nullptr), MatchState::kSizeMismatch);
  Entry e9 = Event("all_reduce", {{4, 4}}, {{4, 4}}, "completed");
  EXPECT_EQ(MatchOps(e1, e9, pg, nullptr), MatchState::kStateMismatch);
  Entry e10 = Event("all_reduce", {{4, 4}}, {{4, 4}}, "completed", "float16");
  EXPECT_EQ(MatchOps(e10, e9, pg, nullptr), MatchState::kDtypeMismatch);
  Entry e11 = Event("gather", {{4, 4}}, {{4, 4}, {4, 4}}, "completed");
  Entry e12 = Event("gather", {{4, 4}}, {{}}, "completed", "");
  EXPECT_EQ(MatchOps(e11, e12, pg, nullptr), MatchState::kFullyMatched);
  Entry e13 = Event("gather", {{4, 4}}, {{4, 4}}, "completed", "");
  EXPECT_EQ(MatchOps(e11, e13, pg, nullptr), MatchState::kFullyMatched);
}

TEST(FrTraceMatchOneEvent, EveryCollectiveMatchesItself) {
  const char* kCollectives[] = {"broadcast",
                                "_broadcast_oop",
                                "reduce",
                                "_reduce_oop",
                                "all_gather",
                                "all_gather_single",
                                "all_gather_v",
                                "all_reduce",
                                "_all_gather_base",
                                "all_gather_into_tensor_coalesced",
                                "reduce_scatter",
                                "reduce_scatter_single",
                                "reduce_scatter_v",
                                "reduce_scatter_tensor_coalesced",
                                "_reduce_scatter_base",
                                "gather",
                                "scatter",
                                "all_to_all",
                                "all_to_all_single",
                                "all_to_all_v_single",
                                "all_reduce_barrier",
                                "barrier",
                                "split",
                                "new_window",
                                "allreduce_coalesced",
                                "ALLGATHER_coalesced",
                                "REDUCE_SCATTER_coalesced"};
  for (const std::string op : kCollectives) {
    std::vector<std::vector<int64_t>> in = {{4, 4}}, out = {{4, 4}};
    if (op == "reduce_scatter" || op == "_reduce_scatter_base" ||
        op == "reduce_scatter_tensor_coalesced")
      out = {{8}};
    if (op == "all_gather" || op == "_all_gather_base" || op == "all_gather_into_tensor_coalesced")
      out = {{32}};
    Entry e = Event(op, in, out);
    MatchState want = op == "all_to_all" ? MatchState::kUndecided : MatchState::kFullyMatched;
    EXPECT_EQ(MatchOps(e, e, 2, nullptr), want) << op;
  }
}

TEST(FrTraceOpBackend, PrefixesAreAccepted) {
  // fr_trace accepts nccl, ncclx, gloo, xccl (and refuses others); we read any prefix.
  for (const char* backend : {"nccl", "ncclx", "gloo", "xccl", "hccl"}) {
    json d = testing::DumpJson(0, {E{}}, 1);
    d["entries"][0]["profiling_name"] = std::string(backend) + ":all_reduce";
    auto dump = ParseDump(d, "r0");
    ASSERT_TRUE(dump.ok());
    EXPECT_EQ(dump->entries[0].op, "all_reduce");
    EXPECT_EQ(dump->entries[0].backend, backend);
  }
}

// LOADED_FR_DETAIL_TEMPLATE: group "0" [0, 1] on both ranks, and sub group "1" that is [0]
// on rank 0 and [1] on rank 1 (two one-rank groups of the same name).
json Template(int rank, const std::vector<E>& entries) {
  json cfg = {{"0", {{"name", "0"}, {"desc", "default_pg"}, {"ranks", "[0, 1]"}}},
              {"1", {{"name", "1"}, {"desc", "sub_pg"}, {"ranks", rank == 0 ? "[0]" : "[1]"}}}};
  json d = testing::DumpJson(rank, entries, 2, 0, cfg);
  d["version"] = "2.8";
  return d;
}

E Op(const std::string& op, int64_t seq, std::vector<std::vector<int64_t>> in,
     std::vector<std::vector<int64_t>> out, const std::string& pg = "0") {
  E e;
  e.op = op;
  e.seq = seq;
  e.in = std::move(in);
  e.out = std::move(out);
  e.pg = pg;
  e.pg_desc = pg == "0" ? "default" : "sub_pg";
  return e;
}

// Case 1: matched all_reduce on the default group and on the two one-rank sub groups.
TEST(FrTraceBuildDb, Case1MatchedWithSubGroups) {
  std::vector<E> e = {Op("all_reduce", 1, {{4, 4}}, {{4, 4}}),
                      Op("all_reduce", 1, {{5, 5}}, {{5, 5}}, "1")};
  Report r = testing::Analyze({Template(0, e), Template(1, e)});
  EXPECT_FALSE(r.problem) << ReportToJson(r).dump(2);
  EXPECT_TRUE(r.details["inputs"]["membership_disagreements"].empty());
  EXPECT_EQ(r.details["groups"].size(), 3u);  // "0", "1" of rank 0, "1" of rank 1
}

// Case 2: a matched allreduce_coalesced.
TEST(FrTraceBuildDb, Case2AllreduceCoalesced) {
  std::vector<E> e = {Op("allreduce_coalesced", 1, {{4, 4}}, {{4, 4}})};
  EXPECT_FALSE(testing::Analyze({Template(0, e), Template(1, e)}).problem);
}

// Case 3: two broadcasts coalesced (one sequence id) and their closing entry.
TEST(FrTraceBuildDb, Case3CoalescedBroadcasts) {
  std::vector<E> e = {Op("broadcast", 1, {{4, 4}}, {{4, 4}}),
                      Op("broadcast", 1, {{4, 4}}, {{4, 4}}), Op("coalesced", 1, {{}}, {{}})};
  EXPECT_FALSE(testing::Analyze({Template(0, e), Template(1, e)}).problem);
}

// Case 4: the second op of a coalesced group differs in size: not matched, at that group.
TEST(FrTraceBuildDb, Case4CoalescedSizeMismatch) {
  std::vector<E> a = {Op("_broadcast_oop", 1, {{4, 4}}, {{4, 4}}),
                      Op("_broadcast_oop", 1, {{5, 5}}, {{5, 5}}),
                      Op("ALLGATHER_coalesced", 1, {{}}, {{}})};
  std::vector<E> b = {Op("_broadcast_oop", 1, {{4, 4}}, {{4, 4}}),
                      Op("_broadcast_oop", 1, {{4, 4}}, {{4, 4}}),
                      Op("ALLGATHER_coalesced", 1, {{}}, {{}})};
  Report r = testing::Analyze({Template(0, a), Template(1, b)});
  ASSERT_TRUE(r.problem);
  EXPECT_EQ(r.findings[0].kind, FindingKind::kSizeMismatch);
  EXPECT_EQ(r.findings[0].op, "_broadcast_oop");
  EXPECT_EQ(r.findings[0].collective_seq_id, 1);
}

// Case 5: a matched coalesced group of _reduce_oop.
TEST(FrTraceBuildDb, Case5CoalescedReduce) {
  std::vector<E> e = {Op("_reduce_oop", 1, {{4, 4}}, {{4, 4}}),
                      Op("_reduce_oop", 1, {{4, 4}}, {{4, 4}}),
                      Op("REDUCE_SCATTER_coalesced", 1, {{}}, {{}})};
  EXPECT_FALSE(testing::Analyze({Template(0, e), Template(1, e)}).problem);
}

// Case 6: rank 1 has a completed coalesced group rank 0's buffer lacks: a completed
// collective had every rank in it, so fr_trace passes it (pass_check True) and so do we.
TEST(FrTraceBuildDb, Case6CompletedOnOneRankOnly) {
  std::vector<E> a = {Op("all_reduce", 1, {{4, 4}}, {{4, 4}})};
  std::vector<E> b = {
      Op("all_reduce", 1, {{4, 4}}, {{4, 4}}), Op("_reduce_oop", 2, {{4, 4}}, {{4, 4}}),
      Op("_reduce_oop", 2, {{4, 4}}, {{4, 4}}), Op("REDUCE_SCATTER_coalesced", 2, {{}}, {{}})};
  Report r = testing::Analyze({Template(0, a), Template(1, b)});
  EXPECT_FALSE(r.problem) << ReportToJson(r).dump(2);
  // Not completed, it is a rank that never joined.
  for (int i = 1; i < 4; ++i) b[i].state = "scheduled";
  r = testing::Analyze({Template(0, a), Template(1, b)});
  ASSERT_TRUE(r.problem);
  EXPECT_EQ(r.findings[0].kind, FindingKind::kNotJoined);
  EXPECT_EQ(r.findings[0].culprit_ranks, std::vector<int>{0});
  EXPECT_EQ(r.findings[0].collective_seq_id, 2);
}

}  // namespace
}  // namespace trainscope::hang
