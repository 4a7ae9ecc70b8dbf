// The shared safetensors reader: the dtype table, a valid header, and the structured error of
// each rule (the messages are the callers': ckpt_test and feature_stats_test pin those).
#include "trainscope/core/safetensors.h"

#include <cstring>
#include <string>

#include "gtest/gtest.h"

namespace trainscope::safetensors {
namespace {

// A whole file: the 8-byte length, `header`, then `data_bytes` zero bytes.
std::string File(const std::string& header, size_t data_bytes) {
  std::string f(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) f[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return f + header + std::string(data_bytes, '\0');
}

absl::StatusOr<ReadResult> Read(const std::string& file, const ParseOptions& o = {}) {
  return ReadHeader(
      file.size(),
      [&](uint64_t at, size_t n, char* buf) {
        if (at + n > file.size()) return absl::DataLossError("short");
        std::memcpy(buf, file.data() + at, n);
        return absl::OkStatus();
      },
      o);
}

HeaderError ParseError(const std::string& header, uint64_t data_bytes, const ParseOptions& o = {}) {
  Header h;
  HeaderError e;
  EXPECT_FALSE(ParseHeader(header, 8 + header.size() + data_bytes, o, &h, &e)) << header;
  return e;
}

TEST(SafetensorsDType, Table) {
  ASSERT_NE(FindDType("BF16"), nullptr);
  EXPECT_EQ(FindDType("BF16")->bits, 16);
  EXPECT_EQ(FindDType("BF16")->kind, 'b');
  EXPECT_STREQ(FindDType("BF16")->numpy, "bfloat16");
  EXPECT_EQ(FindDType("F4")->bits, 4);
  EXPECT_EQ(FindDType("F8_E4M3")->kind, 0);
  EXPECT_STREQ(FindDType("BOOL")->numpy, "bool");
  EXPECT_EQ(FindDType("F128"), nullptr);
}

TEST(SafetensorsReader, ReadsAValidFile) {
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]},)"
      R"("a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})";
  auto r = Read(File(header, 12));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->ok()) << static_cast<int>(r->error.problem);
  EXPECT_EQ(r->header.data_start, 8 + header.size());
  ASSERT_EQ(r->header.tensors.size(), 2u);
  EXPECT_EQ(r->header.tensors[0].name, "a");
  EXPECT_EQ(r->header.tensors[1].count, 2u);
  EXPECT_EQ(r->header.tensors[1].begin, 4u);
  EXPECT_STREQ(r->header.tensors[1].info->name, "F32");
  EXPECT_EQ(r->header.metadata.at("format"), "pt");
}

TEST(SafetensorsReader, LengthProblems) {
  auto r = Read("1234");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->error.problem, HeaderProblem::kTooShort);
  std::string f = File("{}", 0);
  f[7] = 1;  // N >= 2^56
  r = Read(f);
  EXPECT_EQ(r->error.problem, HeaderProblem::kLengthOverLimit);
  f = File("{}", 0);
  f[0] = 9;
  r = Read(f);
  EXPECT_EQ(r->error.problem, HeaderProblem::kLengthPastEnd);
  EXPECT_EQ(r->error.header_bytes, 9u);
  EXPECT_EQ(r->error.byte, 8u);
}

TEST(SafetensorsReader, StructuredErrors) {
  HeaderError e = ParseError("{\"a\":", 0);
  EXPECT_EQ(e.problem, HeaderProblem::kJson);
  EXPECT_EQ(e.byte, 8 + e.json.byte);
  EXPECT_EQ(ParseError("[]", 0).problem, HeaderProblem::kNotObject);
  EXPECT_EQ(ParseError(R"({"__metadata__":1})", 0).problem, HeaderProblem::kMetadataNotObject);
  e = ParseError(R"({"__metadata__":{"k":1}})", 0);
  EXPECT_EQ(e.problem, HeaderProblem::kMetadataNotString);
  EXPECT_EQ(e.key, "k");
  e = ParseError(R"({"t":[]})", 0);
  EXPECT_EQ(e.problem, HeaderProblem::kEntryNotObject);
  EXPECT_EQ(e.found, "an array");
  e = ParseError(R"({"t":{"dtype":"F32"}})", 0);
  EXPECT_EQ(e.problem, HeaderProblem::kFieldMissing);
  EXPECT_EQ(e.field, "shape");
  e = ParseError(R"({"t":{"dtype":"F32","shape":[1,-2]}})", 0);
  EXPECT_EQ(e.problem, HeaderProblem::kDimension);
  EXPECT_EQ(e.dimension, 1u);
  EXPECT_EQ(e.found, "a negative number");
  EXPECT_EQ(e.tensor.name, "t");
  e = ParseError(R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,8]}})", 4);
  EXPECT_EQ(e.problem, HeaderProblem::kOffsetsPastEnd);
  EXPECT_EQ(e.data_len, 4u);
  e = ParseError(R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,4]}})", 4);
  EXPECT_EQ(e.problem, HeaderProblem::kSizeMismatch);
  EXPECT_EQ(e.want_bytes, 12u);
  EXPECT_EQ(ParseError(R"({"t":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}})", 2).problem,
            HeaderProblem::kPartialBytes);
}

TEST(SafetensorsReader, CountOverflowOfUnknownDTypesIsAnOption) {
  const std::string header =
      R"({"t":{"dtype":"X9","shape":[4294967296,4294967296],"data_offsets":[0,4]}})";
  EXPECT_EQ(ParseError(header, 4).problem, HeaderProblem::kCountOverflow);
  Header h;
  HeaderError e;
  EXPECT_TRUE(ParseHeader(header, 8 + header.size() + 4, ParseOptions{false}, &h, &e));
  EXPECT_EQ(h.tensors[0].info, nullptr);
}

TEST(SafetensorsReader, TilingErrors) {
  HeaderError e = ParseError(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                             R"("b":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}})",
                             4);
  EXPECT_EQ(e.problem, HeaderProblem::kOverlap);
  EXPECT_EQ(e.tensor.name, "b");
  EXPECT_EQ(e.other.name, "a");
  e = ParseError(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}})", 4);
  EXPECT_EQ(e.problem, HeaderProblem::kGap);
  EXPECT_EQ(e.at, 0u);
  const std::string header = R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})";
  e = ParseError(header, 4);
  EXPECT_EQ(e.problem, HeaderProblem::kTrailing);
  EXPECT_EQ(e.at, 2u);
  EXPECT_EQ(e.byte, 8 + header.size() + 2);
}

}  // namespace
}  // namespace trainscope::safetensors
