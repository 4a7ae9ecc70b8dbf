#include <unistd.h>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "trainscope/core/check.h"
#include "trainscope/core/fake_os.h"
#include "trainscope/core/json_text.h"
#include "trainscope/core/os.h"
#include "trainscope/core/stats.h"
#include "trainscope/core/subprocess.h"
#include "trainscope/core/table.h"
#include "trainscope/core/utf8.h"

namespace trainscope {
namespace {

TEST(Subprocess, CapturesOutputAndExitCode) {
  auto r = RunProcess({"sh", "-c", "echo out; echo err >&2; exit 3"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->exited);
  EXPECT_EQ(r->exit_code, 3);
  EXPECT_EQ(r->out, "out\n");
  EXPECT_EQ(r->err, "err\n");
}

TEST(Subprocess, PassesArgvVerbatimAndStdin) {
  RunOptions opts;
  opts.stdin_data = "hello";
  opts.env["TS_TEST_VAR"] = "v 1";
  auto r =
      RunProcess({"sh", "-c", "cat; printf ' %s|%s' \"$1\" \"$TS_TEST_VAR\"", "x", "a b;c"}, opts);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->out, "hello a b;c|v 1");
}

TEST(Subprocess, TimesOutAndKillsTree) {
  RunOptions opts;
  opts.timeout = std::chrono::milliseconds(200);
  auto r = RunProcess({"sh", "-c", "sleep 30 & sleep 30"}, opts);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->timed_out);
  EXPECT_FALSE(r->ok());
  EXPECT_LT(r->wall_s, 5);
}

TEST(Subprocess, MissingProgramIsNotFound) {
  auto r = RunProcess({"trainscope-no-such-program"});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
}

TEST(FakeOs, FilesDirsProgramsEnv) {
  FakeOs os;
  os.AddFile("/etc/os-release", "ID=debian\n");
  os.AddFile("/sys/a/b", "1");
  EXPECT_EQ(*os.ReadFile("/etc/os-release"), "ID=debian\n");
  EXPECT_TRUE(os.FileExists("/sys/a"));
  EXPECT_EQ(os.ListDir("/sys").value(), std::vector<std::string>{"a"});
  EXPECT_FALSE(os.ReadFile("/nope").ok());
  RunResult rr;
  rr.exited = true;
  rr.exit_code = 0;
  rr.out = "x";
  os.AddProgram("nvidia-smi", rr);
  EXPECT_EQ(os.Run({"/usr/bin/nvidia-smi", "-q"}, {})->out, "x");
  EXPECT_FALSE(os.Run({"npu-smi"}, {}).ok());
  std::string v;
  EXPECT_FALSE(os.GetEnv("X", &v));
  os.SetEnv("X", "1");
  EXPECT_TRUE(os.GetEnv("X", &v));
}

TEST(Os, WriteFileAtomicCreatesDirs) {
  std::string dir = "/tmp/ts_core_test_" + std::to_string(getpid());
  ASSERT_TRUE(WriteFileAtomic(dir + "/a/b.txt", "data").ok());
  EXPECT_EQ(*Os::Default()->ReadFile(dir + "/a/b.txt"), "data");
  RunProcess({"rm", "-rf", dir}).IgnoreError();
}

// The file readers behave alike on the real machine and on the fake.
void CheckFileReaders(Os* os, const std::string& dir) {
  const std::string path = dir + "/f.txt";
  EXPECT_TRUE(os->IsDirectory(dir));
  EXPECT_FALSE(os->IsRegularFile(dir));
  EXPECT_TRUE(os->IsRegularFile(path));
  EXPECT_FALSE(os->IsDirectory(path));
  EXPECT_EQ(*os->FileSize(path), 10u);
  EXPECT_EQ(os->FileSize(dir + "/nope").status().code(), absl::StatusCode::kNotFound);
  auto seq = os->NewSequentialFile(path);
  ASSERT_TRUE(seq.ok()) << seq.status();
  std::string chunk, all;
  do {
    ASSERT_TRUE((*seq)->Read(4, &chunk).ok());
    EXPECT_LE(chunk.size(), 4u);
    all += chunk;
  } while (!chunk.empty());
  EXPECT_EQ(all, "0123456789");
  auto ra = os->NewRandomAccessFile(path);
  ASSERT_TRUE(ra.ok()) << ra.status();
  EXPECT_EQ((*ra)->info().size_bytes, 10u);
  ASSERT_TRUE((*ra)->Read(7, 100, &chunk).ok());
  EXPECT_EQ(chunk, "789");
  ASSERT_TRUE((*ra)->Read(20, 5, &chunk).ok());
  EXPECT_EQ(chunk, "");
  char buf[4];
  ASSERT_TRUE((*ra)->ReadExactly(2, 3, buf).ok());
  EXPECT_EQ(std::string(buf, 3), "234");
  absl::Status short_read = (*ra)->ReadExactly(8, 4, buf);
  EXPECT_EQ(short_read.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(short_read.message().find("byte 10"), std::string::npos) << short_read;
  EXPECT_EQ(os->NewRandomAccessFile(dir).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(os->NewRandomAccessFile(dir + "/nope").status().code(), absl::StatusCode::kNotFound);
  auto view = os->MapFile(path);
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ((*view)->data(), "0123456789");
  EXPECT_EQ(os->MapFile(dir + "/nope").status().code(), absl::StatusCode::kNotFound);
}

TEST(Os, FileReaders) {
  std::string dir = "/tmp/ts_core_readers_" + std::to_string(getpid());
  ASSERT_TRUE(WriteFileAtomic(dir + "/f.txt", "0123456789").ok());
  CheckFileReaders(Os::Default(), dir);
  RunProcess({"rm", "-rf", dir}).IgnoreError();
}

TEST(FakeOs, FileReaders) {
  FakeOs os;
  os.AddFile("/d/f.txt", "0123456789");
  CheckFileReaders(&os, "/d");
  // A replaced file is another inode; an open reader keeps the old bytes.
  auto before = os.NewRandomAccessFile("/d/f.txt");
  os.AddFile("/d/f.txt", "x");
  auto after = os.NewRandomAccessFile("/d/f.txt");
  EXPECT_NE((*before)->info().inode, (*after)->info().inode);
  EXPECT_EQ((*before)->info().size_bytes, 10u);
  os.AddDir("/e/f");
  EXPECT_TRUE(os.IsDirectory("/e"));
  EXPECT_TRUE(os.ListDir("/e/f")->empty());
}

TEST(Table, AlignsNumbersRight) {
  Table t({"name", "value"});
  t.AddRow({"a", "1.5"});
  t.AddRow({"longer", "100"});
  EXPECT_EQ(t.Render(), "name    value\n-------------\na         1.5\nlonger    100\n");
}

TEST(Format, Units) {
  EXPECT_EQ(FormatBytes(1536), "1.5 KiB");
  EXPECT_EQ(FormatCount(1234567), "1,234,567");
  EXPECT_EQ(FormatDouble(2.0 / 3, 3), "0.667");
}

TEST(Stats, SummaryPercentiles) {
  std::vector<double> v;
  for (int i = 1; i <= 100; ++i) v.push_back(i);
  Summary s = Summarize(v);
  EXPECT_EQ(s.count, 100);
  EXPECT_DOUBLE_EQ(s.mean, 50.5);
  EXPECT_DOUBLE_EQ(s.p50, 50);
  EXPECT_DOUBLE_EQ(s.p95, 95);
  EXPECT_DOUBLE_EQ(s.max, 100);
}

// The radix-sorted count summary gives the same bits as the double one (same sorted order,
// same summation order), across values that use every radix digit.
TEST(Stats, CountSummaryMatchesDoubleSummary) {
  uint64_t x = 12345;
  for (size_t n : {size_t{0}, size_t{1}, size_t{2}, size_t{999}, size_t{50000}}) {
    std::vector<uint32_t> counts;
    for (size_t i = 0; i < n; ++i) {
      x = x * 6364136223846793005ULL + 1442695040888963407ULL;
      const int shift = static_cast<int>((x >> 60) % 4) * 8;  // small and huge values
      counts.push_back(static_cast<uint32_t>(x >> 33) >> shift);
    }
    const Summary a = Summarize(counts);
    const Summary b = Summarize(std::vector<double>(counts.begin(), counts.end()));
    EXPECT_EQ(a.count, b.count);
    for (auto [u, v] : {std::pair{a.sum, b.sum},
                        {a.mean, b.mean},
                        {a.stddev, b.stddev},
                        {a.min, b.min},
                        {a.max, b.max},
                        {a.p50, b.p50},
                        {a.p90, b.p90},
                        {a.p95, b.p95},
                        {a.p99, b.p99}}) {
      EXPECT_EQ(u, v) << "n " << n;
    }
  }
}

TEST(Check, JsonRoundTrip) {
  const Check c = MakeCheck("device.cpu.load", "warn", "80% busy", "< 50% busy", "stop other jobs");
  const nlohmann::json j = CheckToJson(c);
  EXPECT_EQ(j["verdict"], "warn");
  EXPECT_EQ(j["advice"], "stop other jobs");
  const Check back = CheckFromJson(j);
  EXPECT_EQ(back.name, c.name);
  EXPECT_EQ(back.finding.fix, c.finding.fix);
  EXPECT_EQ(CheckFromJson(nlohmann::json{{"name", 5}}).name, "");  // wrong type: empty
}

TEST(Check, HoldsItsFinding) {
  const Check c = MakeCheck("device.cpu.load", "warn", "80% busy", "< 50% busy", "stop other jobs");
  EXPECT_EQ(c.finding.severity, Severity::kWarning);
  EXPECT_EQ(c.finding.id, "device.cpu.load");
  EXPECT_EQ(c.finding.title, "device.cpu.load warned: 80% busy");
  EXPECT_EQ(c.finding.evidence, "80% busy (expected < 50% busy)");
  EXPECT_EQ(c.finding.fix, "stop other jobs");
  EXPECT_EQ(c.finding.rank, -1);
  EXPECT_EQ(MakeCheck("comm", "fail", "wrong", "").finding.severity, Severity::kError);
  EXPECT_EQ(MakeCheck("comm", "fail", "wrong", "").finding.evidence, "wrong");
  EXPECT_EQ(MakeCheck("train", "pass", "ok", "").finding.severity, Severity::kInfo);
  EXPECT_EQ(MakeCheck("train", "skip", "n/a", "runs").finding.title, "train skipped: n/a");
}

TEST(Stats, Log2Histogram) {
  Log2Histogram h;
  h.Add(0);
  h.Add(1);
  h.Add(3);
  h.Add(1000, 7);
  EXPECT_EQ(h.total(), 10u);
  EXPECT_EQ(h.ApproxPercentile(50), 1023u);
  EXPECT_EQ(h.ToJson().size(), 4u);
}

}  // namespace
}  // namespace trainscope

namespace trainscope {
namespace {

TEST(WrapText, BreaksAtSpacesWithLeadIndentAndNewlines) {
  EXPECT_EQ(WrapText("aaa bbb ccc", 7), "aaa bbb\nccc\n");
  EXPECT_EQ(WrapText("aaa bbb ccc", 9, "- ", "  "), "- aaa bbb\n  ccc\n");
  EXPECT_EQ(WrapText("averyverylongword x", 5), "averyverylongword\nx\n");  // stands alone
  EXPECT_EQ(WrapText("one\n\ntwo", 80), "one\n\ntwo\n");                    // blank line kept
}

// Error messages quote input values through Excerpt: a 1M-character field is one short line.
TEST(Excerpt, ShortWholeLongCutAtACharacter) {
  EXPECT_EQ(Excerpt("abc"), "abc");
  EXPECT_EQ(Excerpt(std::string(60, 'a')), std::string(60, 'a'));
  EXPECT_EQ(Excerpt(std::string(1 << 20, 'x')), std::string(60, 'x') + "... (1048576 bytes)");
  // "é" is 2 bytes: 4 bytes allow two of them, 5 bytes still two (no half character).
  EXPECT_EQ(Excerpt("\xC3\xA9\xC3\xA9\xC3\xA9", 5), "\xC3\xA9\xC3\xA9... (6 bytes)");
  EXPECT_EQ(Excerpt("\xFF\xFF", 1), "\xEF\xBF\xBD... (2 bytes)");
}

// ParseJsonText never throws: syntax errors, a number beyond a double (nlohmann's
// out_of_range, which once escaped the hang reader as an internal error) and deep nesting
// all come back with the byte where parsing stopped.
TEST(ParseJsonText, ErrorsWithByteOffsets) {
  nlohmann::json j;
  JsonTextError e;
  ASSERT_TRUE(ParseJsonText(R"({"a": [1, 2.5]})", 8, &j, &e));
  EXPECT_EQ(j["a"][1], 2.5);
  EXPECT_FALSE(ParseJsonText(R"({"a": 1e309})", 8, &j, &e));
  EXPECT_FALSE(e.too_deep);
  EXPECT_EQ(e.byte, 6u);  // where the number starts
  EXPECT_NE(e.what.find("number overflow parsing '1e309'"), std::string::npos) << e.what;
  EXPECT_FALSE(ParseJsonText(R"({"a": 1} x)", 8, &j, &e));
  EXPECT_EQ(e.byte, 10u);
  EXPECT_FALSE(ParseJsonText(std::string(100000, '[') + std::string(100000, ']'), 300, &j, &e));
  EXPECT_TRUE(e.too_deep);
  EXPECT_EQ(e.byte, 300u);
  // An unterminated string of 1M characters: nlohmann quotes the token, we quote 160 bytes.
  EXPECT_FALSE(ParseJsonText("\"" + std::string(1 << 20, 'x'), 8, &j, &e));
  EXPECT_LT(e.what.size(), 200u);
  auto s = ParseJsonText(std::string(R"({"a": 1e309})"), 8, std::string("f.json"));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.status().message(),
            "f.json: not valid JSON at byte 6: [json.exception.out_of_range.406] number overflow "
            "parsing '1e309'");
}

// The number policy: an integer literal must fit int64 or uint64 (nlohmann would round one
// beyond to a double); the bounds themselves, and numbers with a fraction or an exponent, or
// digits inside strings, are accepted. Deep nesting is reported before a number.
TEST(JsonValueOr, MembersOfAnotherTypeReadAsAbsent) {
  const auto j = nlohmann::json::parse(R"({"rank": {"a": 1}, "seq": [], "id": 5, "ok": true,
      "big": 4294967296, "neg": -1, "x": 1.5, "s": "t"})");
  EXPECT_EQ(JsonValueOr(j, "rank", -1), -1);
  EXPECT_EQ(JsonValueOr(j, "seq", int64_t{7}), 7);
  EXPECT_EQ(JsonValueOr(j, "id", ""), "");
  EXPECT_EQ(JsonValueOr(j, "s", ""), "t");
  EXPECT_TRUE(JsonValueOr(j, "ok", false));
  EXPECT_FALSE(JsonValueOr(j, "id", false));
  EXPECT_EQ(JsonValueOr(j, "big", 0), 0);  // beyond int
  EXPECT_EQ(JsonValueOr(j, "big", int64_t{0}), 4294967296);
  EXPECT_EQ(JsonValueOr(j, "neg", uint32_t{9}), 9u);  // negative for an unsigned type
  EXPECT_EQ(JsonValueOr(j, "x", 0), 0);               // a fraction is no integer
  EXPECT_DOUBLE_EQ(JsonValueOr(j, "id", 0.0), 5.0);   // any number is a double
  EXPECT_EQ(JsonValueOr(j, "missing", 3), 3);
  EXPECT_EQ(JsonValueOr(nlohmann::json::array(), "rank", 3), 3);  // not an object
  EXPECT_TRUE(JsonValueOr(j, "seq", nlohmann::json()).is_array());
}

TEST(ParseJsonText, IntegersBeyond64BitsAreRefused) {
  nlohmann::json j;
  JsonTextError e;
  ASSERT_TRUE(ParseJsonText(R"([18446744073709551615, -9223372036854775808, 1.5e300,
                               "123456789012345678901234567890", 99999999999999999999.5])",
                            kJsonMaxDepth, &j, &e));
  EXPECT_EQ(j[0].get<uint64_t>(), 18446744073709551615u);
  EXPECT_EQ(j[1].get<int64_t>(), INT64_MIN);
  EXPECT_FALSE(ParseJsonText(R"({"n": 18446744073709551616})", kJsonMaxDepth, &j, &e));
  EXPECT_TRUE(e.out_of_range);
  EXPECT_EQ(e.byte, 6u);
  EXPECT_EQ(e.what, "number out of range: integer '18446744073709551616' does not fit in 64 bits");
  EXPECT_FALSE(ParseJsonText("[-9223372036854775809]", kJsonMaxDepth, &j, &e));
  EXPECT_EQ(e.byte, 1u);
  EXPECT_FALSE(ParseJsonText("[1," + std::string(400, '7') + "]", kJsonMaxDepth, &j, &e));
  EXPECT_TRUE(e.out_of_range);
  EXPECT_LT(e.what.size(), 120u);  // the literal is quoted short
  EXPECT_FALSE(ParseJsonText(R"([{"a": 1e309}])", kJsonMaxDepth, &j, &e));
  EXPECT_TRUE(e.out_of_range);
  EXPECT_EQ(e.byte, 7u);
  EXPECT_FALSE(ParseJsonText("[1e400, " + std::string(100000, '[') + std::string(100000, ']') + "]",
                             kJsonMaxDepth, &j, &e));
  EXPECT_TRUE(e.too_deep);
  EXPECT_FALSE(e.out_of_range);
  EXPECT_EQ(e.byte, 8u + kJsonMaxDepth - 1);
  // Record streams: a malformed line is a false, never an exception.
  EXPECT_FALSE(ParseJsonRecord(R"({"step": 1, "loss": 1e309})", &j));
  EXPECT_FALSE(ParseJsonRecord(std::string(100000, '{'), &j));
  EXPECT_TRUE(ParseJsonRecord(R"({"step": 1, "loss": 1e-400})", &j));
  EXPECT_EQ(j["loss"].get<double>(), 0.0);
}

}  // namespace
}  // namespace trainscope
