// Unit tests of the root cause across process groups (root_cause.cc): NCCL-layout dumps with
// pg_config, pipeline send/recv (which torch's gloo recorder does not record, so the gloo job of
// tests/hang_multigroup_test.py cannot show them), all_to_all with per-rank sizes, a missing
// dump, a cycle of waits.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "hang/hang_test_util.h"
#include "trainscope/hang/analyze.h"
#include "trainscope/hang/dump.h"

namespace trainscope::hang {
namespace {

using nlohmann::json;
using testing::Analyze;
using testing::DumpJson;
using testing::E;

// 4 ranks: tensor groups "1" [0,1] and "2" [2,3], pipeline groups "3" [0,2] and "4" [1,3],
// expert group "5" [0..3].
json Config() {
  json c = json::object();
  auto add = [&](const std::string& name, const std::string& desc, const std::string& ranks) {
    c[name] = {{"name", name}, {"desc", desc}, {"ranks", ranks}};
  };
  add("0", "default_pg", "[0, 1, 2, 3]");
  add("1", "tp", "[0, 1]");
  add("2", "tp", "[2, 3]");
  add("3", "pp", "[0, 2]");
  add("4", "pp", "[1, 3]");
  add("5", "ep", "[0, 1, 2, 3]");
  return c;
}

E Op(const std::string& op, const std::string& pg, const std::string& desc, int64_t seq,
     const std::string& state = "completed", int64_t in = 8, int64_t out = 8) {
  E e;
  e.op = op;
  e.pg = pg;
  e.pg_desc = desc;
  e.seq = seq;
  e.state = state;
  e.in = {{in}};
  e.out = {{out}};
  return e;
}

E P2p(const std::string& op, const std::string& pg, int64_t p2p_seq, const std::string& state) {
  E e = Op(op, pg, "pp", -1, state, 16, 16);
  e.p2p_seq = p2p_seq;
  return e;
}

// One step that completed everywhere: the expert all_to_all with per-rank splits (sizes
// differ between ranks), the tensor all_reduce, the pipeline transfer.
std::vector<E> FirstStep(int rank) {
  const std::string tp = rank < 2 ? "1" : "2", pp = rank % 2 == 0 ? "3" : "4";
  std::vector<E> v = {Op("all_to_all", "5", "ep", 1, "completed", 4 + rank, 10 - rank),
                      Op("all_reduce", tp, "tp", 1)};
  v.push_back(rank < 2 ? P2p("send 0->1", pp, 1, "completed")
                       : P2p("recv 0->1", pp, 1, "completed"));
  return v;
}

std::vector<json> Job(bool with_rank1) {
  std::vector<json> docs;
  for (int r = 0; r < 4; ++r) {
    if (r == 1 && !with_rank1) continue;
    std::vector<E> v = FirstStep(r);
    // Step 2: the all_to_all completes; rank 1 then stops (no tensor all_reduce #2), rank 0
    // waits for it there; the second stage waits for the first in recv.
    v.push_back(Op("all_to_all", "5", "ep", 2, "completed", 4 + r, 10 - r));
    if (r == 0 || r == 2 || r == 3)
      v.push_back(Op("all_reduce", r < 2 ? "1" : "2", "tp", 2, r == 0 ? "started" : "completed"));
    if (r >= 2) v.push_back(P2p("recv 0->1", r == 2 ? "3" : "4", 2, "started"));
    docs.push_back(DumpJson(r, v, 4, 0, Config()));
  }
  return docs;
}

TEST(HangRootCause, PipelineWaitsLeadToTheStoppedRank) {
  Report r = Analyze(Job(true));
  json j = ReportToJson(r);
  EXPECT_EQ(r.root_ranks, std::vector<int>({1})) << j.dump(2);
  ASSERT_GE(r.findings.size(), 3u) << j.dump(2);
  EXPECT_TRUE(r.findings[0].root);
  EXPECT_EQ(r.findings[0].culprit_ranks, std::vector<int>({1})) << j.dump(2);
  EXPECT_EQ(r.findings[0].pg, "1");
  // The pending receives are consequences: rank 2 waits for rank 0, which waits for rank 1.
  bool recv_on_2 = false;
  for (const HangFinding& f : r.findings) {
    EXPECT_NE(f.kind, FindingKind::kSizeMismatch) << f.finding.title;
    if (f.root) continue;
    EXPECT_EQ(f.consequence_of, std::vector<int>({1})) << f.finding.title;
    if (f.op == "recv" && f.waiting_ranks == std::vector<int>({2})) {
      recv_on_2 = true;
      EXPECT_NE(f.consequence.find("because of rank 1"), std::string::npos) << f.consequence;
    }
  }
  EXPECT_TRUE(recv_on_2) << j.dump(2);
  EXPECT_EQ(j["root_ranks"], json::array({1}));
  EXPECT_NE(r.root_cause.find("rank 1 (waits for no other rank)"), std::string::npos)
      << r.root_cause;
}

TEST(HangRootCause, MissingDumpIsTheRootNotTheWaiters) {
  Report r = Analyze(Job(false));
  EXPECT_EQ(r.root_ranks, std::vector<int>({1})) << ReportToJson(r).dump(2);
  ASSERT_FALSE(r.findings.empty());
  EXPECT_EQ(r.findings[0].kind, FindingKind::kMissingDump);
  EXPECT_EQ(r.findings[0].culprit_ranks, std::vector<int>({1}));
  EXPECT_NE(r.root_cause.find("left no dump"), std::string::npos) << r.root_cause;
}

// The expert all_to_all lacks rank 3's dump; the others, in it with different sizes each,
// are no size mismatch (PyTorch's fr_trace leaves all_to_all sizes undecided too).
TEST(HangRootCause, AllToAllSizesAreNeverAMismatch) {
  std::vector<json> docs;
  for (int r = 0; r < 3; ++r) {
    std::vector<E> v = FirstStep(r);
    v.push_back(Op("all_to_all_single", "5", "ep", 2, "started", 3 + 2 * r, 11 - r));
    docs.push_back(DumpJson(r, v, 4, 0, Config()));
  }
  Report r = Analyze(docs);
  for (const HangFinding& f : r.findings)
    EXPECT_NE(f.kind, FindingKind::kSizeMismatch) << f.finding.title;
  EXPECT_EQ(r.root_ranks, std::vector<int>({3})) << ReportToJson(r).dump(2);
  ASSERT_FALSE(r.findings.empty());
  EXPECT_EQ(r.findings[0].culprit_ranks, std::vector<int>({3}));
  EXPECT_EQ(r.findings[0].waiting_ranks, std::vector<int>({0, 1, 2}));
}

// Rank 0 waits in group 1 for rank 1, which waits in group 4 for rank 3, which waits in
// group 2 for rank 2, which waits in group 3 for rank 0: a cycle, every rank a root; and the
// healthy job has none.
TEST(HangRootCause, CycleAndHealthy) {
  std::vector<json> docs;
  const char* wait_in[] = {"1", "4", "3", "2"};  // rank -> the group it is stuck in (#2)
  for (int r = 0; r < 4; ++r) {
    std::vector<E> v = {Op("all_reduce", r < 2 ? "1" : "2", "tp", 1),
                        Op("all_reduce", r % 2 == 0 ? "3" : "4", "pp", 1),
                        Op("all_reduce", wait_in[r], "x", 2, "started")};
    docs.push_back(DumpJson(r, v, 4, 0, Config()));
  }
  Report r = Analyze(docs);
  EXPECT_EQ(r.root_ranks, std::vector<int>({0, 1, 2, 3})) << ReportToJson(r).dump(2);
  EXPECT_NE(r.root_cause.find("wait for one another"), std::string::npos) << r.root_cause;

  std::vector<json> healthy;
  for (int r = 0; r < 4; ++r) healthy.push_back(DumpJson(r, FirstStep(r), 4, 0, Config()));
  Report h = Analyze(healthy);
  EXPECT_TRUE(h.findings.empty()) << ReportToJson(h).dump(2);
  EXPECT_TRUE(h.root_ranks.empty());
  EXPECT_EQ(h.root_cause, "");
  EXPECT_EQ(ReportToJson(h)["root_ranks"], json::array());
}

// Ranks 1 and 3 never joined all_reduce #2 of the default group that ranks 0 and 2 are in; rank
// 3 waits in tensor group 2 for rank 2 (which is in #2 already), rank 1 waits for no one: the
// first finding blames rank 1 alone, rank 3 is named as waiting elsewhere.
TEST(HangRootCause, FirstFindingBlamesOnlyRoots) {
  std::vector<json> docs;
  for (int r = 0; r < 4; ++r) {
    std::vector<E> v = {Op("all_reduce", "0", "default_pg", 1)};
    if (r % 2 == 0) v.push_back(Op("all_reduce", "0", "default_pg", 2, "started"));
    if (r == 3) v.push_back(Op("all_reduce", "2", "tp", 1, "started"));
    if (r == 2) v.push_back(Op("all_reduce", "5", "ep", 1));
    docs.push_back(DumpJson(r, v, 4, 0, Config()));
  }
  Report r = Analyze(docs);
  json j = ReportToJson(r);
  EXPECT_EQ(r.root_ranks, std::vector<int>({1})) << j.dump(2);
  ASSERT_FALSE(r.findings.empty());
  EXPECT_TRUE(r.findings[0].root);
  EXPECT_EQ(r.findings[0].culprit_ranks, std::vector<int>({1})) << j.dump(2);
  EXPECT_NE(r.findings[0].finding.title.find("rank 3 waits elsewhere"), std::string::npos)
      << r.findings[0].finding.title;
}

}  // namespace
}  // namespace trainscope::hang
