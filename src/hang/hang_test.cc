// Unit tests of the hang analysis: reading dumps, and the verdicts for the faults the
// trainer injects (skip, wrong op / size / dtype, sleep, exit) with 2 ranks (no majority)
// and 4, sub-groups, wrapped buffers and bad inputs.
#include <cstdlib>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "hang/analysis_internal.h"
#include "hang/hang_test_util.h"
#include "trainscope/hang/analyze.h"
#include "trainscope/hang/dump.h"

namespace trainscope::hang {
namespace {

using nlohmann::json;
using testing::AddSteps;
using testing::Analyze;
using testing::DumpJson;
using testing::E;

void ExpectFinding(const Report& r, FindingKind kind, std::vector<int> culprits, int64_t seq) {
  ASSERT_FALSE(r.findings.empty()) << ReportToJson(r).dump(2);
  const HangFinding& f = r.findings[0];
  EXPECT_EQ(FindingKindName(f.kind), std::string(FindingKindName(kind))) << f.finding.title;
  EXPECT_EQ(f.culprit_ranks, culprits) << f.finding.title << " / " << f.finding.evidence;
  EXPECT_EQ(f.collective_seq_id, seq) << f.finding.title;
  EXPECT_TRUE(r.problem);
  EXPECT_FALSE(f.finding.title.empty());
  EXPECT_FALSE(f.finding.fix.empty());
}

TEST(HangRead, SniffsJsonPickleAndJunk) {
  json d = DumpJson(0, {E{}}, 2);
  ReadResult ok = ReadDumpBytes(d.dump(), "x");
  EXPECT_EQ(ok.outcome, ReadOutcome::kDump);
  EXPECT_EQ(ok.dump.rank, 0);
  EXPECT_EQ(ok.dump.entries.size(), 1u);
  EXPECT_EQ(ok.dump.entries[0].op, "all_reduce");
  EXPECT_EQ(ok.dump.entries[0].backend, "nccl");

  // PyTorch's duration_ms (CUDA-event timing when enabled) is kept; null (timing off) is none.
  json timed = DumpJson(0, {E{}, E{}}, 2);
  timed["entries"][0]["duration_ms"] = 1.5;
  timed["entries"][1]["duration_ms"] = nullptr;
  ReadResult t = ReadDumpBytes(timed.dump(), "x");
  ASSERT_EQ(t.outcome, ReadOutcome::kDump) << t.reason;
  EXPECT_DOUBLE_EQ(t.dump.entries[0].duration_ms, 1.5);
  EXPECT_EQ(t.dump.entries[1].duration_ms, 0);

  std::string text = d.dump();
  ReadResult cut = ReadDumpBytes(text.substr(0, text.size() / 2), "x");
  EXPECT_EQ(cut.outcome, ReadOutcome::kCorrupt);
  EXPECT_NE(cut.reason.find("at byte"), std::string::npos) << cut.reason;

  EXPECT_EQ(ReadDumpBytes("hello", "x").outcome, ReadOutcome::kNotADump);
  EXPECT_EQ(ReadDumpBytes("", "x").outcome, ReadOutcome::kNotADump);
  EXPECT_EQ(ReadDumpBytes("{\"a\": 1}", "x").outcome, ReadOutcome::kNotADump);
  // Pickles are read with core/pickle.h: a dict that is no dump is skipped, a broken
  // pickle is a corrupt dump whose reason names the byte and opcode.
  EXPECT_EQ(ReadDumpBytes(std::string("\x80\x02}q\x00.", 6), "x").outcome, ReadOutcome::kNotADump);
  ReadResult bad = ReadDumpBytes(std::string("\x80\x02}q\x00(X\x07\x00\x00\x00"
                                             "entr",
                                             15),
                                 "x");
  EXPECT_EQ(bad.outcome, ReadOutcome::kCorrupt);
  EXPECT_NE(bad.reason.find("pickle: byte 6: BINUNICODE: needs 7 bytes"), std::string::npos)
      << bad.reason;
}

// tests/data/pickle/fr_skipped holds tests/data/hang/skipped's dumps as pickles (PyTorch's
// protocol 2 and Python's protocol 4): the verdict must be the same.
TEST(HangRead, PickleDumpsGiveTheJsonVerdict) {
  const char* src = std::getenv("TS_SOURCE_DIR");
  const std::string root = src ? src : TS_SOURCE_DIR;
  auto pickled = AnalyzePaths({root + "/tests/data/pickle/fr_skipped"});
  auto json_dumps = AnalyzePaths({root + "/tests/data/hang/skipped"});
  ASSERT_TRUE(pickled.ok()) << pickled.status();
  ASSERT_TRUE(json_dumps.ok()) << json_dumps.status();
  EXPECT_EQ(pickled->details["inputs"]["dumps"], 2) << pickled->details["inputs"].dump();
  ASSERT_FALSE(json_dumps->findings.empty());
  EXPECT_EQ(ReportToJson(*pickled)["findings"], ReportToJson(*json_dumps)["findings"]);
  for (const json& r : pickled->details["ranks"]) EXPECT_EQ(r.value("format", ""), "pickle");
}

TEST(HangRead, RankFromNameAndLenientTypes) {
  json d = DumpJson(0, {E{}}, 2);
  d.erase("rank");
  d["entries"][0]["collective_seq_id"] = "7";  // strings, as fr_trace's tests write
  d["entries"][0]["input_dtypes"] = "float32";
  d["entries"][0]["profiling_name"] = "gloo:send 0->1";
  auto a = ParseDump(d, "/tmp/x/nccl_trace_rank_12");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->rank, 12);
  EXPECT_EQ(a->rank_source, "name");
  EXPECT_EQ(a->entries[0].collective_seq_id, 7);
  EXPECT_EQ(a->entries[0].input_dtypes, std::vector<std::string>{"float32"});
  EXPECT_TRUE(a->entries[0].is_p2p);
  EXPECT_EQ(a->entries[0].src, 0);
  EXPECT_EQ(a->entries[0].dst, 1);
  auto b = ParseDump(d, "flight_recorder.rank3.json");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->rank, 3);
  EXPECT_FALSE(ParseDump(d, "no_rank_here").ok());
  d["entries"][0]["profiling_name"] = "hccl:recv 3<-0";
  auto c = ParseDump(d, "r1");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->entries[0].src, 0);
  EXPECT_EQ(c->entries[0].dst, 3);
  d["entries"][0]["record_id"] = json::array();
  EXPECT_FALSE(ParseDump(d, "r1").ok());
}

TEST(HangRead, AbsurdIdsAreCorruptAndFarApartIdsAreCheap) {
  json d = DumpJson(0, {E{}}, 2);
  d["entries"][0]["collective_seq_id"] = 9223372036854775807LL;
  EXPECT_FALSE(ParseDump(d, "r0").ok());
  // Ids 2^40 apart: the walk visits the ids held, not the range between them.
  E a, b;
  a.seq = 1;
  b.seq = int64_t{1} << 40;
  b.state = "started";
  Report r = Analyze({DumpJson(0, {a, b}, 2), DumpJson(1, {a}, 2)});
  ASSERT_TRUE(r.problem);
  EXPECT_EQ(r.findings[0].collective_seq_id, int64_t{1} << 40);
}

TEST(HangRead, RankList) {
  EXPECT_EQ(*ParseRankList("[0, 1, 2]"), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(*ParseRankList("[]"), std::vector<int>{});
  EXPECT_FALSE(ParseRankList("[0, 1").ok());
  EXPECT_FALSE(ParseRankList("0, 1").ok());
  EXPECT_FALSE(ParseRankList("[a]").ok());
}

TEST(HangAnalysis, HealthyHasNoFinding) {
  std::vector<E> e;
  int64_t seq = 1;
  AddSteps(&e, &seq, 1, 5, {100, 200});
  Report r = Analyze({DumpJson(0, e, 2), DumpJson(1, e, 2)});
  EXPECT_FALSE(r.problem) << ReportToJson(r).dump(2);
  EXPECT_EQ(r.details["ranks"].size(), 2u);
  EXPECT_NE(FormatReportText(r).find("No hang cause found"), std::string::npos);
}

// sleep past the timeout: the sleeping rank never issued the collective the others are in.
TEST(HangAnalysis, RankBehindNeverJoined) {
  for (int culprit : {0, 1}) {
    std::vector<E> ahead, behind;
    int64_t s1 = 1, s2 = 1;
    AddSteps(&ahead, &s1, 1, 4, {100, 200});
    AddSteps(&behind, &s2, 1, 4, {100, 200});
    AddSteps(&ahead, &s1, 5, 5, {100}, true, "started");
    std::vector<json> docs = {DumpJson(0, culprit == 0 ? behind : ahead, 2),
                              DumpJson(1, culprit == 1 ? behind : ahead, 2)};
    Report r = Analyze(docs);
    ExpectFinding(r, FindingKind::kNotJoined, {culprit}, 9);
    EXPECT_EQ(r.findings[0].waiting_ranks, std::vector<int>{1 - culprit});
    EXPECT_EQ(r.findings[0].caller, "step 5 grad bucket 0");
    EXPECT_NE(
        r.findings[0].finding.title.find("never joined all_reduce #9 of group 0 (default_pg)"),
        std::string::npos)
        << r.findings[0].finding.title;
  }
}

// skip_collective with 2 ranks: the skipping rank's #k is the others' #k+1.
TEST(HangAnalysis, SkippedCollectiveTwoRanks) {
  for (bool callers : {true, false}) {
    for (int culprit : {0, 1}) {
      std::vector<E> good, bad;
      int64_t s1 = 1, s2 = 1;
      AddSteps(&good, &s1, 1, 4, {100, 200, 300}, callers);
      AddSteps(&bad, &s2, 1, 4, {100, 200, 300}, callers);
      // Step 5: the good rank blocks in bucket 0; the bad one skipped it and is in bucket 1.
      E g;
      g.seq = 13;
      g.in = g.out = {{100}};
      g.state = "started";
      if (callers) g.caller = "step 5 grad bucket 0";
      good.push_back(g);
      E b = g;
      b.in = b.out = {{200}};
      if (callers) b.caller = "step 5 grad bucket 1";
      bad.push_back(b);
      Report r = Analyze(
          {DumpJson(0, culprit == 0 ? bad : good, 2), DumpJson(1, culprit == 1 ? bad : good, 2)});
      ExpectFinding(r, FindingKind::kNotJoined, {culprit}, 13);
      EXPECT_NE(r.findings[0].finding.title.find("skipped"), std::string::npos)
          << r.findings[0].finding.title;
    }
  }
}

// One step of history (no repeating pattern yet): the call-site order decides.
TEST(HangAnalysis, SkipDecidedByCallSiteOrderAfterOneStep) {
  for (int culprit : {0, 1}) {
    std::vector<E> good, bad;
    int64_t s1 = 1, s2 = 1;
    AddSteps(&good, &s1, 1, 1, {100, 200});
    AddSteps(&bad, &s2, 1, 1, {100, 200});
    E loss;
    loss.in = loss.out = {{2}};
    loss.seq = 3;
    loss.caller = "step 1 loss all_reduce";
    good.push_back(loss);
    bad.push_back(loss);
    E g;
    g.seq = 4;
    g.in = g.out = {{100}};
    g.state = "started";
    g.caller = "step 2 grad bucket 0";
    good.push_back(g);
    E b = loss;
    b.seq = 4;
    b.state = "started";
    b.caller = "step 2 loss all_reduce";
    bad.push_back(b);
    Report r = Analyze(
        {DumpJson(0, culprit == 0 ? bad : good, 2), DumpJson(1, culprit == 1 ? bad : good, 2)});
    ExpectFinding(r, FindingKind::kNotJoined, {culprit}, 4);
  }
}

// The same skip while the good rank ran ahead asynchronously: the direct shift shows it.
TEST(HangAnalysis, SkippedCollectiveAsyncShift) {
  std::vector<E> good, bad;
  int64_t s1 = 1, s2 = 1;
  AddSteps(&good, &s1, 1, 1, {100, 200, 300}, false);
  AddSteps(&bad, &s2, 1, 1, {100, 200, 300}, false);
  AddSteps(&good, &s1, 2, 2, {100, 200, 300}, false, "scheduled");
  AddSteps(&bad, &s2, 2, 2, {200, 300}, false, "scheduled");
  Report r = Analyze({DumpJson(0, good, 2), DumpJson(1, bad, 2)});
  ExpectFinding(r, FindingKind::kNotJoined, {1}, 4);
}

struct Wrong {
  FindingKind kind;
  E change;
};

// wrong_op / wrong_size / wrong_dtype on either of 2 ranks, and on one of 4.
TEST(HangAnalysis, WrongOpSizeDtype) {
  E op;
  op.op = "all_gather";
  op.out = {{200}};
  E size;
  size.in = size.out = {{150}};
  E dtype;
  dtype.dtype = "Half";
  for (const Wrong& w :
       {Wrong{FindingKind::kTypeMismatch, op}, Wrong{FindingKind::kSizeMismatch, size},
        Wrong{FindingKind::kDtypeMismatch, dtype}}) {
    for (int world : {2, 4}) {
      for (int culprit : {0, world - 1}) {
        std::vector<std::vector<E>> ranks(world);
        for (auto& e : ranks) {
          int64_t s = 1;
          AddSteps(&e, &s, 1, 4, {100, 200});
          AddSteps(&e, &s, 5, 5, {100}, true, "started");
        }
        E& bad = ranks[culprit].back();
        bad.op = w.change.op;
        bad.dtype = w.change.dtype;
        if (w.kind == FindingKind::kSizeMismatch) bad.in = bad.out = {{150}};
        if (w.kind == FindingKind::kTypeMismatch) bad.out = {{100 * world}};
        std::vector<json> docs;
        for (int r = 0; r < world; ++r) docs.push_back(DumpJson(r, ranks[r], world));
        Report r = Analyze(docs);
        SCOPED_TRACE(std::string(FindingKindName(w.kind)) + " world " + std::to_string(world) +
                     " culprit " + std::to_string(culprit));
        ExpectFinding(r, w.kind, {culprit}, 9);
        EXPECT_EQ(r.findings[0].caller, "step 5 grad bucket 0");
        EXPECT_EQ(r.findings[0].waiting_ranks.size(), static_cast<size_t>(world - 1));
      }
    }
  }
}

// With neither callers nor history, a tie falls back to the lowest rank and says so.
TEST(HangAnalysis, TieWithoutEvidenceSaysItGuessed) {
  E a;
  E b;
  b.in = b.out = {{8}};
  Report r = Analyze({DumpJson(0, {a}, 2), DumpJson(1, {b}, 2)});
  ExpectFinding(r, FindingKind::kSizeMismatch, {1}, 1);
  EXPECT_NE(r.findings[0].finding.evidence.find("guess"), std::string::npos);
}

TEST(HangAnalysis, StateMismatch) {
  std::vector<E> a, b;
  int64_t s1 = 1, s2 = 1;
  AddSteps(&a, &s1, 1, 2, {100});
  AddSteps(&b, &s2, 1, 2, {100});
  AddSteps(&a, &s1, 3, 3, {100}, true, "started");
  AddSteps(&b, &s2, 3, 3, {100}, true, "scheduled");
  Report r = Analyze({DumpJson(0, a, 2), DumpJson(1, b, 2)});
  ExpectFinding(r, FindingKind::kStateMismatch, {1}, 3);
}

// exit: the rank died and left no dump while the others wait.
TEST(HangAnalysis, MissingDump) {
  std::vector<E> a;
  int64_t s = 1;
  AddSteps(&a, &s, 1, 3, {100});
  AddSteps(&a, &s, 4, 4, {100}, true, "started");
  Report r = Analyze({DumpJson(0, a, 4), DumpJson(1, a, 4), DumpJson(3, a, 4)});
  ExpectFinding(r, FindingKind::kMissingDump, {2}, 4);
  EXPECT_EQ(r.findings[0].waiting_ranks, (std::vector<int>{0, 1, 3}));
  EXPECT_NE(r.findings[0].finding.title.find("incomplete"), std::string::npos);
}

// torch 2.15's gloo dumps: pg_config {"": ...} (the group registered before it was named),
// entries that stay "scheduled", progress only in pg_status. The culprit's dump is lost:
// the others wait in #5 (not in #1, the first id they share), and there is no group "".
TEST(HangAnalysis, TorchGlooDumps) {
  std::vector<E> a;
  int64_t s = 1;
  AddSteps(&a, &s, 1, 5, {100}, false, "scheduled");
  json cfg = {{"", {{"name", ""}, {"desc", ""}, {"ranks", "[0, 1, 2, 3]"}}}};
  json st = {{"0",
              {{"last_enqueued_collective", 5},
               {"last_started_collective", -1},
               {"last_completed_collective", 4}}}};
  std::vector<json> docs;
  for (int r : {0, 1, 2}) docs.push_back(DumpJson(r, a, 4, 0, cfg));  // rank 3's dump lost
  for (json& d : docs) d["pg_status"] = st;
  Report r = Analyze(docs);
  ExpectFinding(r, FindingKind::kMissingDump, {3}, 5);
  EXPECT_EQ(r.findings[0].waiting_ranks, (std::vector<int>{0, 1, 2}));
  json details = ReportToJson(r)["details"];
  ASSERT_EQ(details["groups"].size(), 1u) << details["groups"].dump();
  EXPECT_EQ(details["groups"][0]["pg"], "0");
  EXPECT_EQ(details["groups"][0]["missing_ranks"], json::array({3}));
}

TEST(HangAnalysis, WrappedBuffersAreAligned) {
  std::vector<E> all;
  int64_t s = 1;
  AddSteps(&all, &s, 1, 10, {100, 200});
  std::vector<E> tail0(all.begin() + 3, all.end()), tail1(all.begin() + 9, all.end());
  Report r = Analyze({DumpJson(0, tail0, 2, 3), DumpJson(1, tail1, 2, 9)});
  EXPECT_FALSE(r.problem) << ReportToJson(r).dump(2);
  // A mismatch after the overlap still shows.
  tail1.back().dtype = "Half";
  tail1.back().state = tail0.back().state = "started";
  r = Analyze({DumpJson(0, tail0, 2, 3), DumpJson(1, tail1, 2, 9)});
  ExpectFinding(r, FindingKind::kDtypeMismatch, {1}, 20);
}

TEST(HangAnalysis, SubGroup) {
  json cfg = {{"0", {{"name", "0"}, {"desc", "default_pg"}, {"ranks", "[0, 1, 2]"}}},
              {"1", {{"name", "1"}, {"desc", "tp"}, {"ranks", "[0, 2]"}}}};
  json cfg1 = {{"0", cfg["0"]}};
  auto sub = [](int64_t seq, int64_t size, const std::string& state) {
    E e;
    e.pg = "1";
    e.pg_desc = "tp";
    e.seq = seq;
    e.in = e.out = {{size}};
    e.state = state;
    return e;
  };
  std::vector<E> r0 = {E{}, sub(1, 10, "completed"), sub(2, 10, "started")};
  std::vector<E> r2 = {E{}, sub(1, 10, "completed"), sub(2, 12, "started")};
  std::vector<E> r1 = {E{}};
  Report r = Analyze(
      {DumpJson(0, r0, 3, 0, cfg), DumpJson(1, r1, 3, 0, cfg1), DumpJson(2, r2, 3, 0, cfg)});
  ASSERT_EQ(r.findings.size(), 1u) << ReportToJson(r).dump(2);
  EXPECT_EQ(r.findings[0].pg, "1");
  EXPECT_EQ(r.findings[0].pg_desc, "tp");
  EXPECT_EQ(r.findings[0].kind, FindingKind::kSizeMismatch);
  EXPECT_EQ(r.findings[0].collective_seq_id, 2);
}

TEST(HangAnalysis, MembershipDisagreementIsCounted) {
  json cfg_a = {{"0", {{"name", "0"}, {"desc", "default_pg"}, {"ranks", "[0, 1, 2]"}}}};
  json cfg_b = {{"0", {{"name", "0"}, {"desc", "default_pg"}, {"ranks", "[0, 2]"}}}};
  Report r = Analyze({DumpJson(0, {E{}}, 3, 0, cfg_a), DumpJson(1, {E{}}, 3, 0, cfg_a),
                      DumpJson(2, {E{}}, 3, 0, cfg_b)});
  EXPECT_FALSE(r.problem) << ReportToJson(r).dump(2);
  const json& m = r.details["inputs"]["membership_disagreements"];
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0]["ranks"], json::array({2}));
}

TEST(HangAnalysis, P2pReceiverNeverPosted) {
  E send;
  send.op = "send 0->1";
  send.state = "started";
  send.p2p_seq = 1;
  send.seq = 1;
  Report r = Analyze({DumpJson(0, {E{}, send}, 2), DumpJson(1, {E{}}, 2)});
  ASSERT_TRUE(r.problem) << ReportToJson(r).dump(2);
  EXPECT_EQ(r.findings[0].kind, FindingKind::kNotJoined);
  EXPECT_EQ(r.findings[0].culprit_ranks, std::vector<int>{1});
  EXPECT_EQ(r.findings[0].p2p_seq_id, 1);
  EXPECT_EQ(ReportToJson(r)["findings"][0].count("collective_seq_id"), 0u);
}

TEST(HangAnalysis, CapAndTextFits120Columns) {
  std::vector<E> a, b;
  for (int i = 1; i <= 30; ++i) {
    E x;
    x.seq = i;
    x.pg = std::to_string(i % 3);
    a.push_back(x);
    x.in = x.out = {{1}};
    b.push_back(x);
  }
  json cfg;
  for (int g = 0; g < 3; ++g)
    cfg[std::to_string(g)] = {{"name", std::to_string(g)}, {"desc", "d"}, {"ranks", "[0, 1]"}};
  Report r = Analyze({DumpJson(0, a, 2, 0, cfg), DumpJson(1, b, 2, 0, cfg)}, 2);
  EXPECT_EQ(r.findings.size(), 2u);
  std::string text = FormatReportText(r);
  size_t start = text.find("rank");
  for (size_t pos = start; pos < text.size();) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    EXPECT_LE(nl - pos, 120u) << text.substr(pos, nl - pos);
    pos = nl + 1;
  }
}

TEST(HangAnalysis, DuplicateRankIsCounted) {
  Report r = Analyze({DumpJson(0, {E{}}, 2), DumpJson(0, {E{}}, 2), DumpJson(1, {E{}}, 2)});
  EXPECT_FALSE(r.problem);
  EXPECT_EQ(r.details["inputs"]["corrupt"].size(), 1u);
}

TEST(HangPaths, Layout) {
  EXPECT_EQ(DumpPath("/run", 3), "/run/hang/flight_recorder.rank3.json");
  EXPECT_EQ(StacksPath("/run/", 0), "/run/hang/stacks.rank0.txt");
  EXPECT_FALSE(AnalyzePaths({"/nonexistent/trainscope/hang"}).ok());
}

}  // namespace
}  // namespace trainscope::hang
