#include "trainscope/trace/trace.h"

#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "trace/analysis_internal.h"
#include "trace/trace_test_util.h"
#include "trainscope/trace/analysis.h"

namespace trainscope::trace {
namespace {

std::string DataDir() { return std::string(TS_SOURCE_DIR) + "/tests/data/trace"; }

using testing::TempDir;
using testing::WriteFile;

// A synthetic Kineto-like trace: `n` cpu ops with a launch and a kernel each, pretty-printed
// (one key per line) or on one line.
std::string MakeTrace(int n, bool pretty) {
  std::string nl = pretty ? "\n" : "";
  std::string s = "{" + nl + "\"schemaVersion\": 1," + nl +
                  "\"distributedInfo\": {\"backend\": \"nccl\", \"rank\": 3, \"world_size\": 4}," +
                  nl + "\"traceEvents\": [" + nl;
  for (int i = 0; i < n; ++i) {
    int64_t ts = 1000 + i * 100;
    s += absl::StrCat("{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"aten::op", i % 7,
                      "\", \"pid\": 1, \"tid\": 1,", nl, " \"ts\": ", ts,
                      ", \"dur\": 20, \"args\": {\"External id\": ", i + 1, ", \"Input Dims\": [[",
                      i % 3, ", 4]]}},", nl);
    s += absl::StrCat("{\"ph\": \"X\", \"cat\": \"cuda_runtime\", \"name\": \"cudaLaunchKernel\", ",
                      "\"pid\": 1, \"tid\": 1, \"ts\": ", ts + 5,
                      ", \"dur\": 4, \"args\": {\"correlation\": ", i + 1, "}},", nl);
    s += absl::StrCat("{\"ph\": \"s\", \"id\": ", i + 1,
                      ", \"pid\": 1, \"tid\": 1, \"ts\": ", ts + 5,
                      ", \"cat\": \"ac2g\", \"name\": \"ac2g\"},", nl);
    s += absl::StrCat("{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"gemm \\\"k\\\" ", i % 5,
                      "\", \"pid\": 0, \"tid\": 7, \"ts\": ", ts + 10,
                      ", \"dur\": 50.5, \"args\": {\"stream\": 7, \"correlation\": ", i + 1, "}}",
                      i + 1 < n ? "," : "", nl);
  }
  s += "]," + nl + "\"traceName\": \"x\"}" + nl;
  return s;
}

TEST(ParseUsToNs, ExactDecimal) {
  int64_t ns = 0;
  ASSERT_TRUE(ParseUsToNs("1704161511422904.204", &ns));
  EXPECT_EQ(ns, 1704161511422904204);
  ASSERT_TRUE(ParseUsToNs("12", &ns));
  EXPECT_EQ(ns, 12000);
  ASSERT_TRUE(ParseUsToNs("1.5", &ns));
  EXPECT_EQ(ns, 1500);
  ASSERT_TRUE(ParseUsToNs("-3.25\t", &ns));
  EXPECT_EQ(ns, -3250);
  ASSERT_TRUE(ParseUsToNs("1.5e3", &ns));
  EXPECT_EQ(ns, 1500000);
  EXPECT_FALSE(ParseUsToNs("abc", &ns));
  EXPECT_FALSE(ParseUsToNs("", &ns));
}

TEST(Classify, KernelNames) {
  EXPECT_EQ(ClassifyDeviceName("ncclDevKernel_AllReduce_Sum_f32_RING_LL"), DeviceKind::kComm);
  EXPECT_EQ(ClassifyDeviceName("ncclKernel_AllReduce"), DeviceKind::kComm);
  EXPECT_EQ(ClassifyAscendName("hcom_allReduce__123"), DeviceKind::kComm);
  EXPECT_EQ(ClassifyDeviceName("hcom_allReduce__123"), DeviceKind::kCompute);  // HTA: not comm
  EXPECT_EQ(ClassifyDeviceName("Memcpy HtoD (Pageable -> Device)"), DeviceKind::kMemory);
  EXPECT_EQ(ClassifyDeviceName("ampere_sgemm_128x64_tn"), DeviceKind::kCompute);
  // HTA's order: communication first (so "hipMemcpy..." is communication), then memory, then
  // its list of names that are neither compute nor memory ("other").
  EXPECT_EQ(ClassifyDeviceName("hipMemcpyAsync"), DeviceKind::kComm);
  EXPECT_EQ(ClassifyDeviceName("hccl_AllGather"), DeviceKind::kComm);
  EXPECT_EQ(ClassifyDeviceName("dma_read_0"), DeviceKind::kMemory);
  EXPECT_EQ(ClassifyDeviceName("memcpy"), DeviceKind::kCompute);  // HTA is case-sensitive
  for (const char* other :
       {"Stream Sync", "Context Sync", "Event Sync", "Stream Wait Event", "pe_exe_12", "job_exe",
        "packet_3", "cpum_exe_subgraph", "collective_subgraph_execution_7", "runFunction - x",
        "cudaLaunchKernel", "void copy_dma_kernel", "foo_Memset"})
    EXPECT_EQ(ClassifyDeviceName(other), DeviceKind::kOther) << other;
  EXPECT_EQ(RankFromFileName("/x/ddp_rank1.pt.trace.json"), 1);
  EXPECT_EQ(RankFromFileName("worker-12.json"), 12);
  EXPECT_EQ(RankFromFileName("trace.json"), -1);
}

TEST(ChromeReader, SameEventsForEveryWindowSizeAndLayout) {
  for (bool pretty : {true, false}) {
    std::string s = MakeTrace(300, pretty);
    int64_t want_kept = -1, want_dur = -1;
    for (size_t chunk : {size_t{64}, size_t{1000}, size_t{4096}, size_t{1} << 20}) {
      ReadOptions o;
      o.chunk_bytes = chunk;
      auto t = ParseChromeTrace(s, "mem.json", o);
      ASSERT_TRUE(t.ok()) << t.status();
      EXPECT_EQ(t->rank, 3);
      EXPECT_EQ(t->world_size, 4);
      EXPECT_EQ(t->stats.malformed, 0);
      EXPECT_FALSE(t->stats.truncated);
      EXPECT_EQ(t->stats.flow_events, 300);
      int64_t dur = 0;
      for (const Event& e : t->events) dur += e.dur_ns;
      if (want_kept < 0) {
        want_kept = t->stats.events_kept;
        want_dur = dur;
        EXPECT_EQ(want_kept, 900);
        EXPECT_EQ(want_dur, 300 * (20000 + 4000 + 50500));
      }
      EXPECT_EQ(t->stats.events_kept, want_kept) << "chunk " << chunk << " pretty " << pretty;
      EXPECT_EQ(dur, want_dur);
    }
  }
}

TEST(ChromeReader, EscapedNamesAndArgs) {
  auto t = ParseChromeTrace(MakeTrace(3, true), "mem.json");
  ASSERT_TRUE(t.ok());
  bool found = false;
  for (const Event& e : t->events) {
    if (t->strings.Get(e.name) == "gemm \"k\" 1") {
      found = true;
      EXPECT_EQ(e.stream, 7);
      EXPECT_EQ(e.correlation, 2u);
      EXPECT_TRUE(e.flags & kFlagDevice);
      EXPECT_EQ(e.dur_ns, 50500);
    }
    if (t->strings.Get(e.name) == "aten::op1") {
      EXPECT_EQ(t->strings.Get(e.input_dims), "[[1, 4]]");
    }
  }
  EXPECT_TRUE(found);
}

// Found by the mutation campaign: a distributedInfo object that is not valid JSON made the
// second field lookup of an ondemand document in error dereference a null parser.
TEST(ChromeReader, MalformedDistributedInfoIsIgnoredWithAWarning) {
  for (const char* info :
       {R"({"backend": "nk": 0, "world_size": 8})", R"({"rank": 1, "world_size")", R"([1, 2])",
        R"({"rank": {}, "world_size": []})"}) {
    std::string s =
        std::string(R"({"distributedInfo": )") + info +
        R"(, "traceEvents": [{"ph": "X", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 2,
                        "cat": "kernel", "args": {"stream": 7, "correlation": 1}}]})";
    auto t = ParseChromeTrace(s, "info.json");
    if (!t.ok()) continue;  // a top-level value the key scanner refuses is an error, not a crash
    EXPECT_EQ(t->world_size, 0) << info;
    EXPECT_EQ(t->stats.events_kept, 1) << info;
  }
  auto good = ParseChromeTrace(
      R"({"distributedInfo": {"rank": 3, "world_size": 8}, "traceEvents": []})", "good.json");
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ(good->rank, 3);
  EXPECT_EQ(good->world_size, 8);
}

TEST(ChromeReader, TruncatedAnywhereNeverCrashes) {
  std::string s = MakeTrace(40, true);
  int64_t full = ParseChromeTrace(s, "m").value().stats.events_kept;
  size_t start = s.find("traceEvents") + 20;
  for (size_t cut = start; cut < s.size(); cut += 37) {
    ReadOptions o;
    o.chunk_bytes = 256;
    auto t = ParseChromeTrace(std::string_view(s).substr(0, cut), "cut.json", o);
    ASSERT_TRUE(t.ok()) << cut << " " << t.status();
    EXPECT_LE(t->stats.events_kept, full);
    if (cut < s.find("\"traceName\"") - 5) {
      EXPECT_TRUE(t->stats.truncated) << cut;
      EXPECT_GT(t->stats.truncated_at_byte, 0);
    }
  }
  // Cut inside the header: an error naming the byte.
  auto h = ParseChromeTrace(std::string_view(s).substr(0, 30), "head.json");
  EXPECT_FALSE(h.ok());
}

TEST(ChromeReader, BadRecordsAreCountedNotFatal) {
  std::string s =
      "[\n"
      "{\"ph\": \"X\", \"name\": \"a\", \"ts\": 1, \"dur\": 2, \"pid\": 1, \"tid\": 1},\n"
      "{\"ph\": \"X\", \"name\": \"bad\", \"ts\": 1, \"dur\": oops},\n"
      "{\"ph\": \"X\", \"name\": \"unclosed, \"ts\": 1, \"dur\": 2},\n"
      "{\"ph\": \"X\", \"name\": \"nots\", \"dur\": 2},\n"
      "{\"ph\": \"X\", \"cat\": \"weird_cat\", \"name\": \"w\", \"ts\": 5, \"dur\": 1, "
      "\"pid\": 1, \"tid\": 1},\n"
      "{\"ph\": \"X\", \"name\": \"early\", \"ts\": 0, \"dur\": 1, \"pid\": 1, \"tid\": 1},\n"
      "{\"ph\": \"X\", \"name\": \"big\", \"ts\": \"7.5\", \"dur\": 1, \"pid\": 1, \"tid\": 1, "
      "\"args\": {\"correlation\": 1152921504606846977}},\n"
      "{\"ph\": \"f\", \"id\": 9007199254740993, \"ts\": 1},\n"
      "{\"ph\": \"X\", \"name\": \"neg\", \"ts\": 1, \"dur\": -5},\n"
      "{\"ph\": \"X\", \"name\": \"last\", \"ts\": 9, \"dur\": 1, \"pid\": 1, \"tid\": 1}\n"
      "]\n";
  for (size_t chunk : {size_t{32}, size_t{1} << 20}) {
    ReadOptions o;
    o.chunk_bytes = chunk;
    auto t = ParseChromeTrace(s, "bad.json", o);
    ASSERT_TRUE(t.ok()) << t.status();
    const ParseStats& st = t->stats;
    EXPECT_EQ(st.malformed, 2) << chunk;
    EXPECT_EQ(st.missing_fields, 1);
    EXPECT_EQ(st.unknown_category, 1);
    EXPECT_EQ(st.unknown_categories.at("weird_cat"), 1);
    EXPECT_EQ(st.out_of_order, 1);
    EXPECT_EQ(st.ids_above_2p53, 2);
    EXPECT_EQ(st.negative_or_huge_dur, 1);
    EXPECT_EQ(st.events_kept, 5);
    EXPECT_FALSE(st.truncated);
    EXPECT_FALSE(st.warnings.empty());
    EXPECT_NE(st.warnings[0].find("byte "), std::string::npos);
    bool big = false;
    for (const Event& e : t->events)
      if (t->strings.Get(e.name) == "big") {
        big = true;
        EXPECT_EQ(e.correlation, 1152921504606846977u);  // exact, not via double
        EXPECT_EQ(e.ts_ns, 7500);
      }
    EXPECT_TRUE(big);
  }
}

// Random byte corruption (deterministic): reading and analysing never crash (ASan/UBSan in CI).
TEST(ChromeReader, RandomCorruptionNeverCrashes) {
  std::string base = MakeTrace(30, true);
  uint64_t x = 88172645463325252ull;
  auto next = [&] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  const char kBytes[] = "{}[]\",:\\\n 0-e.";
  for (int iter = 0; iter < 300; ++iter) {
    std::string s = base;
    int flips = 1 + static_cast<int>(next() % 6);
    for (int k = 0; k < flips; ++k) s[next() % s.size()] = kBytes[next() % (sizeof(kBytes) - 1)];
    if (next() % 3 == 0) s.resize(next() % s.size());
    ReadOptions o;
    o.chunk_bytes = 64 + next() % 2000;
    auto t = ParseChromeTrace(s, "fuzz.json", o);
    if (!t.ok()) continue;
    EXPECT_LE(t->stats.events_kept, 90);
    std::vector<RankTrace> v;
    v.push_back(std::move(*t));
    Report rep = AnalyzeRanks(&v);
    EXPECT_FALSE(ReportToText(rep).empty());
  }
}

TEST(ChromeReader, NotATrace) {
  auto t = ParseChromeTrace("hello", "x.json");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(std::string(t.status().message()).find("byte 0"), std::string::npos);
  EXPECT_FALSE(ParseChromeTrace("{\"a\": 1}", "x.json").ok());
  EXPECT_FALSE(ParseChromeTrace("", "x.json").ok());
  // 100,000 nested arrays as the event list (the JSON Array Format), or in it: the element
  // is a malformed event, counted, in constant stack; nothing usable is left.
  for (const std::string& deep :
       {std::string(100000, '[') + std::string(100000, ']'),
        "{\"traceEvents\": " + std::string(100000, '[') + std::string(100000, ']') + "}"}) {
    auto d = ParseChromeTrace(deep, "deep.json");
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_EQ(d->stats.events_kept, 0);
    EXPECT_EQ(d->stats.malformed, 1);
    ASSERT_EQ(d->stats.warnings.size(), 1u);
    EXPECT_NE(d->stats.warnings[0].find(": malformed event skipped"), std::string::npos);
  }
}

TEST(ChromeReader, GzipFile) {
  std::string dir = TempDir();
  std::string path = dir + "/rank2.trace.json.gz";
  std::string s = MakeTrace(50, true);
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  gzwrite(f, s.data(), static_cast<unsigned>(s.size()));
  gzclose(f);
  auto t = ReadRankTrace(path);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->stats.events_kept, 150);
  EXPECT_EQ(t->stats.bytes, static_cast<int64_t>(s.size()));
  EXPECT_FALSE(ReadRankTrace(dir + "/missing.json").ok());
}

// A gzip trace of many read-ahead blocks (the inflating thread runs ahead of the parser)
// reads as the same bytes parsed in memory; a corrupt gzip stream (bad CRC) is an error that
// names a byte offset, after the data before it.
TEST(ChromeReader, GzipReadAheadKeepsOrderAndReportsErrors) {
  std::string dir = TempDir();
  std::string s = MakeTrace(40000, true);
  ASSERT_GT(s.size(), size_t{4} << 20);
  std::string gz = dir + "/big.trace.json.gz";
  gzFile f = gzopen(gz.c_str(), "wb1");
  ASSERT_NE(f, nullptr);
  gzwrite(f, s.data(), static_cast<unsigned>(s.size()));
  gzclose(f);
  auto from_file = ReadRankTrace(gz);
  ASSERT_TRUE(from_file.ok()) << from_file.status();
  auto in_memory = ParseChromeTrace(s, "big.trace.json");
  ASSERT_TRUE(in_memory.ok()) << in_memory.status();
  EXPECT_EQ(from_file->stats.bytes, static_cast<int64_t>(s.size()));
  EXPECT_EQ(from_file->stats.events_kept, in_memory->stats.events_kept);
  ASSERT_EQ(from_file->events.size(), in_memory->events.size());
  for (size_t i = 0; i < from_file->events.size(); ++i) {
    ASSERT_EQ(from_file->events[i].ts_ns, in_memory->events[i].ts_ns) << i;
    ASSERT_EQ(from_file->events[i].dur_ns, in_memory->events[i].dur_ns) << i;
  }
  // Flip a byte of the CRC (the trailer's first 4 bytes).
  std::ifstream in(gz, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  bytes[bytes.size() - 8] ^= 0x5a;
  std::string bad = dir + "/bad.trace.json.gz";
  std::ofstream(bad, std::ios::binary) << bytes;
  auto t = ReadRankTrace(bad);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(std::string(t.status().message()).find("byte "), std::string::npos) << t.status();
}

TEST(Intervals, UnionIntersectComplement) {
  using internal::Interval;
  auto u = internal::Union({{5, 10}, {0, 3}, {2, 4}, {10, 12}});
  ASSERT_EQ(u.size(), 2u);
  EXPECT_EQ(internal::Length(u), 4 + 7);
  EXPECT_EQ(internal::IntersectLength(u, {{3, 6}}), 2);
  EXPECT_EQ(internal::LengthIn(u, 1, 11), 3 + 6);
  auto c = internal::Complement(u, -1, 13);
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(internal::Length(c), 1 + 1 + 1);
}

// Device trace with known intervals: compute [0,100) and [150,250), comm [200,300);
// kernel_time 300, idle 50, compute 200, non-compute 50; overlap 50/100.
TEST(Analysis, HtaDefinitionsOnKnownTrace) {
  std::string s = R"([
{"ph":"X","cat":"user_annotation","name":"ProfilerStep#7","pid":1,"tid":1,"ts":0,"dur":400},
{"ph":"X","cat":"cpu_op","name":"aten::mm","pid":1,"tid":1,"ts":1,"dur":10},
{"ph":"X","cat":"kernel","name":"sgemm","pid":0,"tid":7,"ts":0,"dur":100,"args":{"stream":7}},
{"ph":"X","cat":"kernel","name":"sgemm","pid":0,"tid":7,"ts":150,"dur":100,"args":{"stream":7}},
{"ph":"X","cat":"kernel","name":"ncclDevKernel_AllReduce","pid":0,"tid":9,"ts":200,"dur":100,"args":{"stream":9}}
])";
  auto t = ParseChromeTrace(s, "rank0.json");
  ASSERT_TRUE(t.ok());
  RankResult r = AnalyzeRank(&*t);
  EXPECT_EQ(r.basis, "device");
  ASSERT_EQ(r.steps.size(), 1u);
  EXPECT_EQ(r.steps[0].step, 7);
  EXPECT_DOUBLE_EQ(r.kernel_time_us, 300);
  EXPECT_DOUBLE_EQ(r.idle_us, 50);
  EXPECT_DOUBLE_EQ(r.compute_us, 200);
  EXPECT_NEAR(r.non_compute_pct, 100.0 * 50 / 300, 1e-9);
  ASSERT_TRUE(r.comm_comp_overlap_pct.has_value());
  EXPECT_DOUBLE_EQ(*r.comm_comp_overlap_pct, 50.0);
  EXPECT_DOUBLE_EQ(r.steps[0].gap_pct, 100.0 * 150 / 400);
  EXPECT_TRUE(r.steps[0].gap_flagged);
  EXPECT_DOUBLE_EQ(r.steps[0].comm_us, 100);
}

TEST(Analysis, RealDdpRunNamesSlowRankAndDataLoading) {
  std::vector<RankTrace> traces;
  for (int r : {0, 1}) {
    auto t = ReadRankTrace(absl::StrCat(DataDir(), "/ddp_rank", r, ".pt.trace.json"));
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(t->format, "chrome-list");
    EXPECT_EQ(t->rank, r);
    traces.push_back(std::move(*t));
  }
  Report rep = AnalyzeRanks(&traces);
  ASSERT_EQ(rep.ranks.size(), 2u);
  EXPECT_EQ(rep.ranks[0].basis, "host");
  // Steps 1-4 in the trace; HTA's default drops the last one (include_last_profiler_step).
  EXPECT_EQ(rep.ranks[0].steps.size(), 3u);
  ASSERT_EQ(rep.stragglers.size(), 1u);
  EXPECT_EQ(rep.stragglers[0].rank, 1);
  EXPECT_EQ(rep.stragglers[0].cause, "data_loading");
  bool named = false;
  for (const Finding& f : rep.findings)
    if (f.id == "straggler" && f.title.find("rank 1") != std::string::npos &&
        f.title.find("data loading") != std::string::npos)
      named = true;
  EXPECT_TRUE(named);
  nlohmann::json j = ReportToJson(rep);
  EXPECT_EQ(j["ranks"][1]["steps"], nlohmann::json({1, 2, 3}));
  EXPECT_TRUE(j["ranks"][0]["temporal_breakdown"].contains("idle_pct"));
  nlohmann::json ex = ExportChromeTrace(rep);
  EXPECT_GT(ex["traceEvents"].size(), 10u);
  EXPECT_NE(ReportToText(rep).find("straggler"), std::string::npos);
}

// torch.profiler's schedule(repeat=2) writes two files per rank, one per window: a rank is
// one process, so each rank is reported once, with its windows by time (not by path) and its
// steps over all of them; nothing is skipped.
TEST(AnalyzePaths, OneRankPerProcessNotPerProfilerWindow) {
  auto window = [](int rank, int64_t t0) {
    return absl::StrCat(R"({"distributedInfo": {"backend": "gloo", "rank": )", rank,
                        R"(, "world_size": 2}, "traceEvents": [
{"ph":"X","cat":"user_annotation","name":"ProfilerStep#)",
                        t0, R"(","pid":1,"tid":1,"ts":)", t0,
                        R"(,"dur":100},
{"ph":"X","cat":"cpu_op","name":"aten::mm","pid":1,"tid":1,"ts":)",
                        t0 + 10, R"(,"dur":20}]})");
  };
  std::string dir = TempDir();
  WriteFile(dir + "/a.pt.trace.json", window(0, 5000));  // later window, earlier path
  WriteFile(dir + "/b.pt.trace.json", window(0, 1000));
  WriteFile(dir + "/c.pt.trace.json", window(1, 1000));
  auto rep = AnalyzePaths({dir});
  ASSERT_TRUE(rep.ok()) << rep.status();
  ASSERT_EQ(rep->ranks.size(), 2u);
  const RankResult& r0 = rep->ranks[0];
  EXPECT_EQ(r0.rank, 0);
  EXPECT_EQ(r0.path, dir + "/b.pt.trace.json");
  ASSERT_EQ(r0.windows.size(), 2u);
  EXPECT_EQ(r0.windows[0].path, dir + "/b.pt.trace.json");
  EXPECT_EQ(r0.windows[1].path, dir + "/a.pt.trace.json");
  EXPECT_EQ(r0.windows[1].steps, std::vector<int64_t>{5000});
  EXPECT_DOUBLE_EQ(r0.windows[1].start_us, 4000);
  ASSERT_EQ(r0.steps.size(), 2u);
  EXPECT_EQ(r0.steps[0].step, 1000);
  EXPECT_EQ(r0.steps[1].step, 5000);
  EXPECT_DOUBLE_EQ(r0.kernel_time_us, 200);  // the two steps, not the time between them
  EXPECT_EQ(rep->ranks[1].rank, 1);
  EXPECT_EQ(rep->ranks[1].windows.size(), 1u);
  EXPECT_TRUE(rep->skipped.empty());
  EXPECT_NE(ReportToText(*rep).find("rank 0: 2 windows"), std::string::npos);
}

TEST(Readers, AscendOutputDirectory) {
  std::string dir = TempDir() + "/host_123_ascend_pt";
  ASSERT_EQ(system(("mkdir -p " + dir + "/ASCEND_PROFILER_OUTPUT").c_str()), 0);
  WriteFile(dir + "/profiler_info_5.json", "{}");
  std::string out = dir + "/ASCEND_PROFILER_OUTPUT";
  WriteFile(out + "/trace_view.json",
            "[{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":800,\"tid\":0,\"args\":{\"name\":"
            "\"Ascend Hardware\"}},\n"
            "{\"name\":\"ProfilerStep#3\",\"ph\":\"X\",\"pid\":100,\"tid\":1,\"ts\":"
            "\"1704161511422000.000\",\"dur\":1000},\n"
            "{\"name\":\"aclnnMatmul\",\"ph\":\"X\",\"pid\":800,\"tid\":3,\"ts\":"
            "\"1704161511422100.500\",\"dur\":300,\"args\":{\"Stream Id\":3}},\n"
            "{\"name\":\"hcom_allReduce_1\",\"ph\":\"X\",\"pid\":800,\"tid\":4,\"ts\":"
            "\"1704161511422300.500\",\"dur\":200,\"args\":{\"Stream Id\":4}}]\n");
  WriteFile(out + "/step_trace_time.csv",
            "Device_id,Step,Computing,Communication(Not Overlapped),Overlapped,Communication,Free,"
            "Stage,Bubble,Communication(Not Overlapped and Exclude Receive),Preparing\n"
            "0,3,600,100,100,200,300,1000,0,100,50\n");
  WriteFile(out + "/kernel_details.csv",
            "Step Id,Model ID,Task ID,Stream ID,Name,Type,OP State,Accelerator Core,Start "
            "Time(us),Duration(us),Input Shapes,Input Data Types\n"
            "3,1,1,3,aclnnMatmul,MatMulV2,dynamic,AI_CORE,\"1704161511422100.5\t\",300.25,"
            "\"\"\"81920,4096;8192,512\"\"\",DT_BF16;DT_BF16\n"
            "3,1,2,3,aclnnCast,Cast,static,AI_CPU,\"1704161511422500.5\t\",30,\"\"\"4\"\"\","
            "DT_DOUBLE\n");
  auto paths = ExpandTracePaths({dir});
  ASSERT_TRUE(paths.ok());
  ASSERT_EQ(paths->size(), 1u);
  auto t = ReadRankTrace((*paths)[0]);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->format, "ascend");
  EXPECT_EQ(t->rank, 5);
  ASSERT_EQ(t->ascend_steps.size(), 1u);
  EXPECT_DOUBLE_EQ(t->ascend_steps[0].preparing_us, 50);
  RankResult r = AnalyzeRank(&*t);
  EXPECT_EQ(r.basis, "device");  // the timeline has the ProfilerStep: HTA definitions
  ASSERT_EQ(r.steps.size(), 1u);
  EXPECT_EQ(r.steps[0].step, 3);
  ASSERT_TRUE(r.comm_comp_overlap_pct.has_value());
  EXPECT_DOUBLE_EQ(*r.comm_comp_overlap_pct, 50.0);  // [300.5,400.75) of [300.5,500.5)
  EXPECT_EQ(r.details["suspects"]["ai_cpu_tasks"][0]["name"], "aclnnCast");
  EXPECT_EQ(r.details["suspects"]["float64"][0]["name"], "aclnnCast");
  // step_trace_time.csv alone: torch_npu's own definitions.
  auto csv = ReadRankTrace(out + "/step_trace_time.csv");
  ASSERT_TRUE(csv.ok());
  RankResult rc = AnalyzeRank(&*csv);
  EXPECT_EQ(rc.basis, "ascend");
  EXPECT_DOUBLE_EQ(rc.idle_pct, 30.0);
  EXPECT_DOUBLE_EQ(rc.compute_pct, 60.0);
  EXPECT_DOUBLE_EQ(*rc.comm_comp_overlap_pct, 50.0);
}

TEST(Readers, PhaseLog) {
  std::string dir = TempDir();
  WriteFile(dir + "/rank1.metrics.jsonl",
            "{\"step\": 1, \"phases\": {\"data_wait_ms\": 30, \"forward_ms\": 10, "
            "\"backward_ms\": 20, \"comm_wait_ms\": 5, \"optimizer_ms\": 5}}\n"
            "not json\n"
            "{\"step\": 2, \"data_wait_ms\": 2, \"forward_ms\": 10, \"backward_ms\": 20, "
            "\"optimizer_ms\": 8}\n");
  auto t = ReadRankTrace(dir + "/rank1.metrics.jsonl");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->rank, 1);
  EXPECT_EQ(t->stats.malformed, 1);
  // The shared JSON policy: a line with a number out of range or nested 100,000 deep is a
  // malformed record, counted, and the lines around it are read.
  WriteFile(dir + "/rank2.metrics.jsonl",
            "{\"step\": 1, \"forward_ms\": 1e309}\n{\"step\": 2, \"forward_ms\": "
            "18446744073709551616}\n" +
                std::string(100000, '[') + std::string(100000, ']') +
                "\n{\"step\": 3, \"forward_ms\": 10, \"backward_ms\": 20}\n");
  auto policy = ReadRankTrace(dir + "/rank2.metrics.jsonl");
  ASSERT_TRUE(policy.ok()) << policy.status();
  EXPECT_EQ(policy->stats.malformed, 3);
  EXPECT_EQ(policy->stats.warnings.size(), 3u);
  RankResult r = AnalyzeRank(&*t);
  EXPECT_EQ(r.basis, "phase-log");
  ASSERT_EQ(r.steps.size(), 2u);
  EXPECT_DOUBLE_EQ(r.steps[0].step_us, 70000);
  EXPECT_DOUBLE_EQ(r.steps[0].gap_pct, 100.0 * 35 / 70);
  EXPECT_TRUE(r.steps[0].gap_flagged);
  EXPECT_FALSE(r.steps[1].gap_flagged);
  EXPECT_DOUBLE_EQ(r.steps[0].host_us.at("data_loading"), 30000);
}

// trainscope train's run directory: DIR/train/metrics.rank<R>.jsonl (docs/formats.md).
TEST(Readers, TrainerRunDirectory) {
  std::string dir = TempDir();
  ASSERT_EQ(system(("mkdir -p " + dir + "/train").c_str()), 0);
  WriteFile(dir + "/train/config.json", "{\"format\": \"trainscope.train_config\"}");
  for (int rank : {0, 1}) {
    std::string lines = absl::StrCat(
        "{\"type\": \"header\", \"format\": \"trainscope.train_metrics\", \"version\": 1, ",
        "\"rank\": ", rank, ", \"world_size\": 2}\n");
    for (int step = 1; step <= 4; ++step) {
      double data = rank == 1 ? 25 : 1, wait = rank == 1 ? 0.5 : 24;
      absl::StrAppend(&lines, "{\"type\": \"step\", \"step\": ", step,
                      ", \"loss\": 3.2, \"step_ms\": ", 60 + data + wait,
                      ", \"phases_ms\": {\"data_wait\": ", data,
                      ", \"h2d\": 1, \"forward\": 20, \"backward\": 30, \"comm_wait\": ", wait,
                      ", \"optimizer\": 9}, \"comm_ms\": 12}\n");
      absl::StrAppend(&lines, "{\"type\": \"layer_norms\", \"step\": ", step,
                      ", \"layers\": []}\n");
    }
    lines += "{\"type\": \"summary\", \"steps\": 4}\n";
    WriteFile(absl::StrCat(dir, "/train/metrics.rank", rank, ".jsonl"), lines);
  }
  auto paths = ExpandTracePaths({dir});
  ASSERT_TRUE(paths.ok()) << paths.status();
  ASSERT_EQ(paths->size(), 2u);
  std::vector<RankTrace> traces;
  for (const auto& p : *paths) {
    auto t = ReadRankTrace(p);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(t->stats.missing_fields, 0);
    EXPECT_EQ(t->world_size, 2);
    traces.push_back(std::move(*t));
  }
  Report rep = AnalyzeRanks(&traces);
  ASSERT_EQ(rep.ranks[1].steps.size(), 4u);
  EXPECT_DOUBLE_EQ(rep.ranks[1].steps[0].step_us, 85500);
  ASSERT_EQ(rep.stragglers.size(), 1u);
  EXPECT_EQ(rep.stragglers[0].rank, 1);
  EXPECT_EQ(rep.stragglers[0].cause, "data_loading");
}

// One X event with `fields` spliced in (later keys win over none: each field appears once).
std::string OneEvent(const std::string& fields) {
  return "[\n{\"ph\": \"X\", \"name\": \"e\", " + fields + "}\n]\n";
}
std::string Fields(const std::string& ts, const std::string& dur, const std::string& pid,
                   const std::string& tid, const std::string& extra = "") {
  return "\"ts\": " + ts + ", \"dur\": " + dur + ", \"pid\": " + pid + ", \"tid\": " + tid + extra;
}
int64_t Counter(const ParseStats& st, const std::string& name) {
  for (const auto& [n, v] : BadRecordCounts(st))
    if (n == name) return v;
  ADD_FAILURE() << "no counter " << name;
  return -1;
}

// Every field read with the "raw token" pattern: a value of the wrong type or out of range is
// counted under its own name (and nothing else), never read as a made-up value.
TEST(ChromeReader, FieldsOfTheWrongTypeOrOutOfRangeAreCounted) {
  struct Case {
    std::string fields;
    const char* counter;  // nullptr: valid
    bool kept;
  };
  const std::string ok_ts = "10", ok_dur = "5", ok_id = "1";
  const std::vector<Case> cases = {
      // Valid edge cases: fractional times, 64-bit pid/tid limits, string pids.
      {Fields("10.5", "0.25", "1", "1"), nullptr, true},
      {Fields("\"1704161511422904.204\"", "5", "1", "1"), nullptr, true},
      {Fields(ok_ts, ok_dur, "-9223372036854775808", "18446744073709551615"), nullptr, true},
      {Fields(ok_ts, ok_dur, "\"Spans\"", "\"stream 7\""), nullptr, true},
      {Fields(ok_ts, ok_dur, "null", "null"), nullptr, true},
      {Fields(ok_ts, ok_dur, ok_id, ok_id, ", \"args\": {\"correlation\": 18446744073709551615}"),
       nullptr, true},
      {Fields(ok_ts, ok_dur, ok_id, ok_id, ", \"args\": {\"stream\": \"7\"}"), nullptr, true},
      {Fields(ok_ts, ok_dur, ok_id, ok_id, ", \"args\": null"), nullptr, true},
      // A value the reader does not read is skipped at any depth, in constant stack (the
      // ondemand side of the JSON policy in core/json_text.h).
      {Fields(ok_ts, ok_dur, ok_id, ok_id,
              ", \"args\": {\"x\": " + std::string(100000, '[') + std::string(100000, ']') + "}"),
       nullptr, true},
      // ts
      {Fields("1e309", ok_dur, ok_id, ok_id), "bad_ts", false},
      {Fields("\"x\"", ok_dur, ok_id, ok_id), "bad_ts", false},
      {Fields("{}", ok_dur, ok_id, ok_id), "bad_ts", false},
      {Fields("[]", ok_dur, ok_id, ok_id), "bad_ts", false},
      {Fields("18446744073709551616", ok_dur, ok_id, ok_id), "bad_ts", false},
      {Fields("9e15", ok_dur, ok_id, ok_id), "bad_ts", false},  // > 2^62 ns
      {Fields("-1e300", ok_dur, ok_id, ok_id), "bad_ts", false},
      {Fields("\"nan\"", ok_dur, ok_id, ok_id), "bad_ts", false},
      // dur
      {Fields(ok_ts, "1e309", ok_id, ok_id), "bad_dur", false},
      {Fields(ok_ts, "{}", ok_id, ok_id), "bad_dur", false},
      {Fields(ok_ts, "\"x\"", ok_id, ok_id), "bad_dur", false},
      {Fields(ok_ts, "18446744073709551616", ok_id, ok_id), "bad_dur", false},
      {Fields(ok_ts, "-1", ok_id, ok_id), "negative_or_huge_dur", false},
      {Fields(ok_ts, "1e15", ok_id, ok_id), "negative_or_huge_dur", false},
      // pid / tid
      {Fields(ok_ts, ok_dur, ok_id, "18446744073709551616"), "bad_pid_tid", false},
      {Fields(ok_ts, ok_dur, "-9223372036854775809", ok_id), "bad_pid_tid", false},
      {Fields(ok_ts, ok_dur, "1.5", ok_id), "bad_pid_tid", false},
      {Fields(ok_ts, ok_dur, "{}", ok_id), "bad_pid_tid", false},
      {Fields(ok_ts, ok_dur, ok_id, "[]"), "bad_pid_tid", false},
      {Fields(ok_ts, ok_dur, ok_id, "1e3"), "bad_pid_tid", false},
      // cat
      {Fields(ok_ts, ok_dur, ok_id, ok_id, ", \"cat\": {}"), "bad_category", false},
      {Fields(ok_ts, ok_dur, ok_id, ok_id, ", \"cat\": 5"), "bad_category", false},
      {Fields(ok_ts, ok_dur, ok_id, ok_id, ", \"cat\": [\"kernel\"]"), "bad_category", false},
      // args: the event stays, the field is ignored
      {Fields(ok_ts, ok_dur, ok_id, ok_id, ", \"args\": {\"correlation\": -1}"), "bad_args", true},
      {Fields(ok_ts, ok_dur, ok_id, ok_id, ", \"args\": {\"correlation\": 18446744073709551616}"),
       "bad_args", true},
      {Fields(ok_ts, ok_dur, ok_id, ok_id, ", \"args\": {\"correlation\": 1e309}"), "bad_args",
       true},
      {Fields(ok_ts, ok_dur, ok_id, ok_id, ", \"args\": {\"External id\": {}}"), "bad_args", true},
      {Fields(ok_ts, ok_dur, ok_id, ok_id, ", \"args\": {\"External id\": \"x\"}"), "bad_args",
       true},
      {Fields(ok_ts, ok_dur, ok_id, ok_id, ", \"args\": {\"stream\": 1e10}"), "bad_args", true},
      {Fields(ok_ts, ok_dur, ok_id, ok_id, ", \"args\": {\"stream\": 7.5}"), "bad_args", true},
      {Fields(ok_ts, ok_dur, ok_id, ok_id, ", \"args\": [1, 2]"), "bad_args", true},
  };
  const char* kNames[] = {"malformed", "missing_fields",       "bad_ts",
                          "bad_dur",   "bad_pid_tid",          "bad_category",
                          "bad_args",  "negative_or_huge_dur", "unknown_category"};
  for (const Case& c : cases) {
    auto t = ParseChromeTrace(OneEvent(c.fields), "fields.json");
    ASSERT_TRUE(t.ok()) << c.fields << ": " << t.status();
    for (const char* n : kNames)
      EXPECT_EQ(Counter(t->stats, n), c.counter && std::string(n) == c.counter ? 1 : 0)
          << c.fields << ": " << n;
    EXPECT_EQ(t->stats.events_kept, c.kept ? 1 : 0) << c.fields;
    // ids above 2^53 are kept exactly but still reported (a double-based tool would corrupt them).
    EXPECT_EQ(HasBadRecords(t->stats), c.counter != nullptr || t->stats.ids_above_2p53 > 0)
        << c.fields;
    if (c.fields.find("18446744073709551615}") != std::string::npos) {
      EXPECT_EQ(t->events[0].correlation, 18446744073709551615u);
      EXPECT_EQ(t->stats.ids_above_2p53, 1);
    }
    if (c.kept && c.counter) {  // the ignored field reads as "none"
      EXPECT_EQ(t->events[0].correlation, 0u) << c.fields;
      EXPECT_EQ(t->events[0].external_id, 0u) << c.fields;
      EXPECT_EQ(t->events[0].stream, -1) << c.fields;
    }
  }
}

// Two ids beyond 2^64 used to saturate to the same value and pair a kernel with the wrong launch.
TEST(ChromeReader, OverflowingIdsDoNotPair) {
  auto t = ParseChromeTrace(
      "[\n{\"ph\": \"X\", \"name\": \"a\", \"ts\": 1, \"dur\": 1, \"args\": {\"correlation\": "
      "18446744073709551617}},\n{\"ph\": \"X\", \"name\": \"b\", \"ts\": 2, \"dur\": 1, "
      "\"args\": {\"correlation\": 18446744073709551618}}\n]\n",
      "ids.json");
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->events.size(), 2u);
  EXPECT_EQ(t->events[0].correlation, 0u);
  EXPECT_EQ(t->events[1].correlation, 0u);
  EXPECT_EQ(t->stats.bad_args, 2);
}

TEST(ChromeReader, DescribeBadRecords) {
  ParseStats st;
  EXPECT_FALSE(HasBadRecords(st));
  EXPECT_EQ(DescribeBadRecords(st),
            "0 malformed, 0 missing fields, 0 unknown category, 0 out of order, 0 ids above 2^53");
  st.bad_pid_tid = 2;
  st.negative_launch_delay = 1;
  st.truncated = true;
  st.truncated_at_byte = 77;
  EXPECT_TRUE(HasBadRecords(st));
  EXPECT_EQ(DescribeBadRecords(st),
            "0 malformed, 0 missing fields, 0 unknown category, 0 out of order, 0 ids above "
            "2^53, 2 bad pid/tid, 1 negative launch delay, truncated at byte 77");
}

// A kernel that starts before its launch call ends (clock skew, broken correlation): counted,
// and its delay is not in the percentiles.
TEST(Analysis, NegativeLaunchDelayIsCountedAndExcluded) {
  auto trace = [](int64_t kernel2_ts) {
    return absl::StrCat(
        "[\n{\"ph\": \"X\", \"cat\": \"user_annotation\", \"name\": \"ProfilerStep#1\", \"pid\": "
        "1, \"tid\": 1, \"ts\": 0, \"dur\": 1000},\n",
        "{\"ph\": \"X\", \"cat\": \"cuda_runtime\", \"name\": \"cudaLaunchKernel\", \"pid\": 1, "
        "\"tid\": 1, \"ts\": 20, \"dur\": 8, \"args\": {\"correlation\": 1}},\n",
        "{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"k1\", \"pid\": 0, \"tid\": 7, \"ts\": "
        "100, \"dur\": 50, \"args\": {\"correlation\": 1, \"stream\": 7}},\n",
        "{\"ph\": \"X\", \"cat\": \"cuda_runtime\", \"name\": \"cudaLaunchKernel\", \"pid\": 1, "
        "\"tid\": 1, \"ts\": 510, \"dur\": 8, \"args\": {\"correlation\": 2}},\n",
        "{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"k2\", \"pid\": 0, \"tid\": 7, \"ts\": ",
        kernel2_ts, ", \"dur\": 50, \"args\": {\"correlation\": 2, \"stream\": 7}}\n]\n");
  };
  auto analyze = [](const std::string& s) {
    auto t = ParseChromeTrace(s, "launch.json");
    EXPECT_TRUE(t.ok()) << t.status();
    return AnalyzeRank(&*t);
  };
  RankResult good = analyze(trace(600));  // delays 72 and 82 us
  const auto& gl = good.details["fragmentation"]["launch"];
  EXPECT_EQ(gl["launches"], 2);
  EXPECT_EQ(gl["launch_delay_p50_us"], 72.0);
  EXPECT_EQ(gl["negative_launch_delays"], 0);
  EXPECT_EQ(good.stats.negative_launch_delay, 0);

  for (int64_t ts : {505, 515}) {  // before the launch starts; inside the launch call
    RankResult r = analyze(trace(ts));
    const auto& l = r.details["fragmentation"]["launch"];
    EXPECT_EQ(l["launches"], 2) << ts;  // both durations are still measurements
    EXPECT_EQ(l["launch_delay_p50_us"], 72.0) << ts;
    EXPECT_EQ(l["launch_delay_p95_us"], 72.0) << ts;
    EXPECT_EQ(l["negative_launch_delays"], 1) << ts;
    EXPECT_EQ(r.stats.negative_launch_delay, 1) << ts;
    EXPECT_EQ(r.parse["negative_launch_delay"], 1) << ts;
    bool finding = false;
    for (const Finding& f : r.findings) finding |= f.id == "negative_launch_delay";
    EXPECT_TRUE(finding) << ts;
  }
  // Every delay negative: no percentile at all rather than a made-up one.
  std::string s = trace(505);
  s.replace(s.find("\"ts\": 100,"), 10, "\"ts\": 10,");
  RankResult none = analyze(s);
  const auto& nl = none.details["fragmentation"]["launch"];
  EXPECT_TRUE(nl["launch_delay_p50_us"].is_null());
  EXPECT_TRUE(nl["launch_delay_p95_us"].is_null());
  EXPECT_EQ(nl["negative_launch_delays"], 2);
}

TEST(Readers, PhaseLogAndCsvValuesOutOfRangeAreCounted) {
  std::string dir = TempDir();
  WriteFile(dir + "/rank0.jsonl",
            "{\"step\": 1, \"rank\": 4294967296, \"phases_ms\": {\"forward\": 10}}\n"
            "{\"step\": 1e300, \"phases_ms\": {\"forward\": 10}}\n"
            "{\"step\": 2.5, \"phases_ms\": {\"forward\": 10}}\n"
            "{\"step\": 3, \"phases_ms\": {\"forward\": -4}}\n"
            "{\"step\": 4, \"phases_ms\": {\"forward\": 1e308}}\n"
            "{\"step\": 5, \"forward_ms\": 12}\n");
  auto t = ReadRankTrace(dir + "/rank0.jsonl");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->stats.bad_values, 4);
  ASSERT_EQ(t->phase_steps.size(), 2u);
  EXPECT_EQ(t->phase_steps[1].step, 5);
  EXPECT_EQ(t->rank, 0);  // 2^32 is not a rank: the file name's 0 is used

  WriteFile(dir + "/step_trace_time.csv",
            "Step,Computing,Communication(Not Overlapped),Overlapped,Communication,Free\n"
            "1,100,10,5,15,20\n"
            "2,nan,10,5,15,20\n"
            "3,100,-10,5,15,20\n"
            "4.5,100,10,5,15,20\n"
            "5,100,10,inf,15,20\n"
            "6,x,10,5,15,20\n");
  auto c = ReadRankTrace(dir + "/step_trace_time.csv");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->stats.bad_values, 4);
  EXPECT_EQ(c->stats.malformed, 1);
  ASSERT_EQ(c->ascend_steps.size(), 1u);

  WriteFile(dir + "/kernel_details.csv",
            "Name,Type,Accelerator Core,Start Time(us),Duration(us),Stream ID\n"
            "MatMul,MatMul,AI_CORE,1000,10,3\n"
            "\xff\xfe bad name,MatMul,AI_CORE,1020,10,3\n"
            "MatMul,MatMul,AI_CORE,1e309,10,3\n"
            "MatMul,MatMul,AI_CORE,1040,x,3\n"
            "MatMul,MatMul,AI_CORE,1060,-3,3\n"
            "MatMul,MatMul,AI_CORE,N/A,3,3\n");
  auto k = ReadRankTrace(dir + "/kernel_details.csv");
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ(k->stats.bad_ts, 1);
  EXPECT_EQ(k->stats.bad_dur, 1);
  EXPECT_EQ(k->stats.negative_or_huge_dur, 1);
  EXPECT_EQ(k->stats.missing_fields, 1);
  EXPECT_EQ(k->events.size(), 2u);
  // A name that is not UTF-8 reaches the JSON report as U+FFFD (dump() would throw otherwise).
  std::vector<RankTrace> v;
  v.push_back(std::move(*k));
  Report rep = AnalyzeRanks(&v);
  std::string json = ReportToJson(rep).dump();
  EXPECT_NE(json.find("\xEF\xBF\xBD\xEF\xBF\xBD bad name"), std::string::npos);
  EXPECT_FALSE(ExportChromeTrace(rep).dump().empty());
}

}  // namespace
}  // namespace trainscope::trace
