// The trace readers go through Os (ReadOptions::os, AnalyzePathsOptions::os): Chrome traces,
// plain and gzip'd, held in a FakeOs read as the same files on disk, and the gzip reader
// (zlib's inflate on the chunks of a SequentialFile) keeps gzread's rules.
#include <zlib.h>

#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "trace/trace_test_util.h"
#include "trainscope/core/fake_os.h"
#include "trainscope/trace/analysis.h"
#include "trainscope/trace/trace.h"

namespace trainscope::trace {
namespace {

using testing::TempDir;
using testing::WriteFile;

// A small Kineto trace of rank `rank`: `steps` ProfilerStep annotations, each with a cpu op,
// its launch and its kernel.
std::string OsTestTrace(int rank, int steps) {
  std::string s = absl::StrCat("{\"distributedInfo\": {\"rank\": ", rank,
                               ", \"world_size\": 2},\n\"traceEvents\": [\n");
  for (int i = 0; i < steps; ++i) {
    const int64_t ts = 1000 + i * 1000;
    absl::StrAppend(&s, "{\"ph\": \"X\", \"cat\": \"user_annotation\", \"name\": \"ProfilerStep#",
                    i, "\", \"pid\": 1, \"tid\": 1, \"ts\": ", ts, ", \"dur\": 900},\n");
    absl::StrAppend(&s, "{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"aten::mm\", \"pid\": 1, ",
                    "\"tid\": 1, \"ts\": ", ts + 10,
                    ", \"dur\": 100, \"args\": {\"External id\": ", i + 1, "}},\n");
    absl::StrAppend(&s,
                    "{\"ph\": \"X\", \"cat\": \"cuda_runtime\", \"name\": \"cudaLaunchKernel\",",
                    " \"pid\": 1, \"tid\": 1, \"ts\": ", ts + 20,
                    ", \"dur\": 5, \"args\": {\"correlation\": ", i + 1, "}},\n");
    absl::StrAppend(&s, "{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"gemm\", \"pid\": 0, ",
                    "\"tid\": 7, \"ts\": ", ts + 30, ", \"dur\": ", 300 + 10 * (i % 3),
                    ", \"args\": {\"stream\": 7, \"correlation\": ", i + 1, "}}",
                    i + 1 < steps ? "," : "", "\n");
  }
  s += "],\n\"traceName\": \"os\"}\n";
  return s;
}

// `data` as one gzip member (zlib's deflate with the gzip wrapper).
std::string GzipMember(const std::string& data) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&z, data.size()) + 64, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

// AnalyzePaths over files in a FakeOs gives the same report as over the same bytes on disk,
// under the same paths: a plain trace, a gzip'd one, and their folder.
TEST(TraceOs, AnalyzePathsOnAFakeOsMatchesDisk) {
  const std::string dir = TempDir() + "/ranks";
  std::filesystem::create_directories(dir);
  const std::string plain = dir + "/rank0.trace.json";
  const std::string gz = dir + "/rank1.trace.json.gz";
  const std::string gz_bytes = GzipMember(OsTestTrace(1, 6));
  WriteFile(plain, OsTestTrace(0, 5));
  WriteFile(gz, gz_bytes);
  FakeOs fake;
  fake.AddFile(plain, OsTestTrace(0, 5));
  fake.AddFile(gz, gz_bytes);
  AnalyzePathsOptions on_fake;
  on_fake.os = &fake;
  for (const std::vector<std::string>& paths :
       {std::vector<std::string>{plain}, std::vector<std::string>{gz},
        std::vector<std::string>{dir}}) {
    absl::StatusOr<Report> disk = AnalyzePaths(paths);
    ASSERT_TRUE(disk.ok()) << disk.status();
    absl::StatusOr<Report> mem = AnalyzePaths(paths, on_fake);
    ASSERT_TRUE(mem.ok()) << mem.status();
    EXPECT_EQ(ReportToJson(*mem).dump(), ReportToJson(*disk).dump()) << paths[0];
    EXPECT_FALSE(disk->ranks.empty());
  }
  // The disk's files are not the fake's: a path only on disk is missing there.
  const absl::Status missing = AnalyzePaths({dir + "/other.json"}, on_fake).status();
  EXPECT_TRUE(absl::IsNotFound(missing)) << missing;
  WriteFile(dir + "/only_on_disk.json", OsTestTrace(0, 2));
  EXPECT_TRUE(absl::IsNotFound(AnalyzePaths({dir + "/only_on_disk.json"}, on_fake).status()));
}

// gzread's rules, kept by the inflating reader: members that follow one another are one
// stream, bytes after the last member are ignored, a file cut inside a member is a truncated
// trace (a warning, not an error), corrupt data an error naming a byte offset.
TEST(TraceOs, GzipMembersTrailersAndTruncation) {
  const std::string text = OsTestTrace(0, 40);
  absl::StatusOr<RankTrace> want = ParseChromeTrace(text, "/t/want.json");
  ASSERT_TRUE(want.ok()) << want.status();
  const size_t half = text.size() / 2;
  const std::string one = GzipMember(text);
  FakeOs fake;
  fake.AddFile("/t/members.json.gz",
               GzipMember(text.substr(0, half)) + GzipMember(text.substr(half)) + "trailing bytes");
  fake.AddFile("/t/cut.json.gz", one.substr(0, one.size() / 2));
  std::string bad = one;
  bad[bad.size() - 8] ^= 0x5a;  // the CRC
  fake.AddFile("/t/bad.json.gz", bad);
  ReadOptions opt;
  opt.os = &fake;
  absl::StatusOr<RankTrace> members = ReadRankTrace("/t/members.json.gz", opt);
  ASSERT_TRUE(members.ok()) << members.status();
  EXPECT_EQ(members->stats.bytes, static_cast<int64_t>(text.size()));
  ASSERT_EQ(members->events.size(), want->events.size());
  for (size_t i = 0; i < want->events.size(); ++i)
    EXPECT_EQ(members->events[i].ts_ns, want->events[i].ts_ns) << i;
  absl::StatusOr<RankTrace> cut = ReadRankTrace("/t/cut.json.gz", opt);
  ASSERT_TRUE(cut.ok()) << cut.status();
  EXPECT_TRUE(cut->stats.truncated);
  EXPECT_LT(cut->events.size(), want->events.size());
  absl::StatusOr<RankTrace> corrupt = ReadRankTrace("/t/bad.json.gz", opt);
  ASSERT_FALSE(corrupt.ok());
  EXPECT_EQ(corrupt.status().message(),
            absl::StrCat("/t/bad.json.gz: byte ", text.size(), ": incorrect data check"));
  EXPECT_EQ(ReadRankTrace("/t/absent.json", opt).status().message(),
            "/t/absent.json: no such file");
}

}  // namespace
}  // namespace trainscope::trace
