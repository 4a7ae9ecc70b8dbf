// The data verbs end to end (verbs.h) on the golden fixtures: format names, --strict, the
// verdicts that become exit codes, and errors before anything is read.
#include "trainscope/data/verbs.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainscope::data {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

const std::string kData = std::string(TS_SOURCE_DIR) + "/tests/data/data/";

TEST(ParseInputFormatTest, TheFourNames) {
  EXPECT_EQ(*ParseInputFormat("auto"), InputFormat::kAuto);
  EXPECT_EQ(*ParseInputFormat("jsonl"), InputFormat::kJsonl);
  EXPECT_EQ(*ParseInputFormat("text"), InputFormat::kText);
  EXPECT_EQ(*ParseInputFormat("megatron"), InputFormat::kMegatron);
  auto bad = ParseInputFormat("csv");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(), "format 'csv': expected auto, jsonl, text or megatron");
}

CorpusRun Small() {
  CorpusRun run;
  run.inputs = {kData + "small.jsonl"};
  return run;
}

ScanOptions OneThread() {
  ScanOptions o;
  o.threads = 1;
  o.progress = false;
  o.near_dup = false;
  o.language = false;
  return o;
}

TEST(VerbsTest, StrictTurnsTheFirstBadRecordIntoTheError) {
  auto lenient = RunScanVerb(Small(), OneThread());
  ASSERT_TRUE(lenient.ok()) << lenient.status();
  EXPECT_EQ(lenient->strict_error, "");
  EXPECT_THAT(lenient->output, HasSubstr("bad records:"));

  CorpusRun strict = Small();
  strict.strict = true;
  strict.json = true;
  auto r = RunScanVerb(strict, OneThread());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->strict_error, StartsWith("3 bad record(s); first: "));
  EXPECT_THAT(r->strict_error, HasSubstr("small.jsonl:13: invalid_json"));
  EXPECT_THAT(r->output, StartsWith("{"));  // the report still comes first
}

TEST(VerbsTest, FailOnDecidesTheScanVerdict) {
  ScanOptions o = OneThread();
  o.fail_duplicates = 0;  // any duplicate or noisy document is a problem
  o.fail_noise = 0;
  auto r = RunScanVerb(Small(), o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->problems);
  o.fail = false;  // --fail-on none
  r = RunScanVerb(Small(), o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->problems);
}

TEST(VerbsTest, ErrorsBeforeAnythingIsRead) {
  CorpusRun run = Small();
  run.tokenizer = kData;  // a directory
  auto tok = RunScanVerb(run, OneThread());
  EXPECT_EQ(tok.status().code(), absl::StatusCode::kInvalidArgument) << tok.status();

  CorpusRun missing;
  missing.inputs = {kData + "nope.jsonl"};
  EXPECT_FALSE(RunScanVerb(missing, OneThread()).ok());

  auto dir = RunStatsVerb(kData, /*json=*/false);
  EXPECT_EQ(dir.status().code(), absl::StatusCode::kInvalidArgument) << dir.status();
}

TEST(VerbsTest, StatsAndCompareVerdicts) {
  auto stats = RunStatsVerb(kData + "features.csv", /*json=*/true);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_THAT(stats->output, StartsWith("{"));
  EXPECT_EQ(stats->strict_error, "");

  CompareOptions co;
  co.language = false;
  auto same = RunCompareVerb(kData + "small.jsonl", kData + "small.jsonl", CorpusRun(), co);
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_FALSE(same->problems);  // a corpus covers itself
}

}  // namespace
}  // namespace trainscope::data
