// `data stats` on hostile files: every size a header declares is checked against the file
// before reading, nothing crashes, blocks forever or grows without bound, and a header
// that does not match its data never yields statistics.
#include "trainscope/data/feature_stats.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TS_SANITIZER_SHADOW_MEMORY 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
#define TS_SANITIZER_SHADOW_MEMORY 1
#endif
#endif

namespace trainscope::data {
namespace {

std::string FsTmp(const std::string& name) { return ::testing::TempDir() + "/fs_" + name; }

void WriteFsFile(const std::string& path, const std::string& data) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(data.data(), static_cast<std::streamsize>(data.size()));
  ASSERT_TRUE(f.good()) << path;
}

// A .npy file (format 1.0) with the given header dict and raw data.
std::string Npy(const std::string& dict, const std::string& data) {
  std::string header = dict;
  while ((10 + header.size() + 1) % 64) header += ' ';
  header += '\n';
  std::string out = "\x93NUMPY\x01";
  out += '\0';
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  return out + header + data;
}

std::string NpyShape(const std::string& descr, const std::string& shape, const std::string& data) {
  return Npy("{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }", data);
}

std::string Floats(std::vector<float> v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

// A .safetensors file: 8-byte little-endian header length, the header, the data.
std::string Safetensors(const std::string& header, const std::string& data) {
  uint64_t n = header.size();
  return std::string(reinterpret_cast<const char*>(&n), 8) + header + data;
}

std::string Message(const absl::StatusOr<FeatureReport>& r) {
  return std::string(r.status().message());
}

// Runs `check` in a child process with a wall-clock limit (alarm) and, outside
// sanitizer builds, a 2 GiB address-space limit, so that a regression that reads forever,
// blocks or allocates without bound fails this test instead of hanging it or taking the
// machine's memory. Returns true when the child exited 0 (check passed).
bool InChild(const std::function<bool()>& check, unsigned seconds) {
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    alarm(seconds);
#if !defined(TS_SANITIZER_SHADOW_MEMORY)  // ASan/TSan/MSan reserve terabytes of address space
    rlimit lim{rlim_t{2} << 30, rlim_t{2} << 30};
    setrlimit(RLIMIT_AS, &lim);
#endif
    _exit(check() ? 0 : 1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// ---- .npy

TEST(FeatureStatsNpy, ShapeOfTwoToThe64MinusOneIsAnErrorNotACrash) {
  const std::string p = FsTmp("max_dim.npy");
  WriteFsFile(p, NpyShape("<f4", "(18446744073709551615,)", Floats({1, 2})));
  auto r = FeatureStatsOfFile(p);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(Message(r).find(p + ": header: shape (18446744073709551615,) of float32: the byte "
                                "size overflows 64 bits"),
            std::string::npos)
      << r.status();
}

TEST(FeatureStatsNpy, OverflowingElementCountIsAnError) {
  const std::string p = FsTmp("overflow.npy");
  // 2^32 * 2^32 wraps to 0 elements in 64 bits: "fits" any file without the check.
  WriteFsFile(p, NpyShape("<f4", "(4294967296, 4294967296)", ""));
  auto r = FeatureStatsOfFile(p);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(Message(r).find("shape (4294967296, 4294967296) of float32: the element count "
                            "overflows 64 bits"),
            std::string::npos)
      << r.status();
  WriteFsFile(p, NpyShape("<f4", "(99999999999999999999,)", ""));
  r = FeatureStatsOfFile(p);
  EXPECT_NE(Message(r).find("header: shape: dimension 0 does not fit 64 bits"), std::string::npos)
      << r.status();
}

TEST(FeatureStatsNpy, EmptyArrayWithHugeLastAxisAllocatesNothing) {
  const std::string p = FsTmp("empty_wide.npy");
  WriteFsFile(p, NpyShape("<f4", "(0, 9223372036854775807)", ""));
  EXPECT_TRUE(InChild(
      [&] {
        auto r = FeatureStatsOfFile(p);
        return r.ok() && r->arrays.size() == 1 && r->arrays[0].features.empty() &&
               !r->findings.empty() && r->findings[0].find("has no elements") != std::string::npos;
      },
      20));
}

TEST(FeatureStatsNpy, DeclaredSizeMustMatchTheFileExactly) {
  const std::string p = FsTmp("sizes.npy");
  WriteFsFile(p, NpyShape("<f4", "(2,)", Floats({1, 2, 3})));  // 4 trailing bytes
  auto r = FeatureStatsOfFile(p);
  ASSERT_FALSE(r.ok()) << "statistics from a header that does not match the file";
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(Message(r).find("trailing bytes: shape (2,) of float32 needs 8 bytes, file has 12 "
                            "after the header"),
            std::string::npos)
      << r.status();

  WriteFsFile(p, NpyShape("<f4", "(100,)", Floats({1})));
  r = FeatureStatsOfFile(p);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(Message(r).find("data ends early: shape (100,) of float32 needs 400 bytes, file has 4 "
                            "after the header"),
            std::string::npos)
      << r.status();

  // The shape that matches gives statistics.
  WriteFsFile(p, NpyShape("<f4", "(3,)", Floats({1, 2, 3})));
  r = FeatureStatsOfFile(p);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_DOUBLE_EQ(r->arrays[0].features[0].mean, 2);
}

TEST(FeatureStatsNpy, MalformedHeadersNameTheField) {
  const std::string p = FsTmp("hdr.npy");
  struct Case {
    std::string file, expect;
  };
  const std::vector<Case> cases = {
      {NpyShape("<u16", "(1,)", std::string(16, '\0')), "descr: '<u16': unsupported dtype"},
      {NpyShape("<i3", "(1,)", std::string(3, '\0')), "descr: '<i3': unsupported dtype"},
      {NpyShape("|O", "(1,)", std::string(8, '\0')), "descr: '|O': object arrays"},
      {NpyShape("<f4", "(3, -1)", ""), "header: shape: dimension 1 is not a non-negative integer"},
      {Npy("{'descr': '<f4', 'fortran_order': False, }", ""), "header: missing 'shape'"},
      {Npy("{'descr': '<f4', 'fortran_order': 0, 'shape': (1,), }", Floats({1})),
       "header: fortran_order: expected True or False"},
      {Npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}", Floats({1})),
       "header: unknown key 'x'"},
      {Npy("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,)}", Floats({1})),
       "descr: structured dtypes"},
      {Npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1,) 'x'}", Floats({1})),
       "header: expected ',' or '}'"},
  };
  for (const Case& c : cases) {
    WriteFsFile(p, c.file);
    auto r = FeatureStatsOfFile(p);
    ASSERT_FALSE(r.ok()) << c.expect;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
    EXPECT_EQ(Message(r).rfind(p + ": ", 0), 0u) << r.status();
    EXPECT_NE(Message(r).find(c.expect), std::string::npos) << r.status();
  }
  // A header length beyond the file, and one beyond the cap.
  std::string big = "\x93NUMPY\x02";
  big += '\0';
  big += std::string("\xff\xff\xff\x7f", 4);
  WriteFsFile(p, big + "{}");
  auto r = FeatureStatsOfFile(p);
  EXPECT_NE(Message(r).find("byte 8: header length 2147483647 exceeds the limit"),
            std::string::npos)
      << r.status();
}

// ---- safetensors

TEST(FeatureStatsSafetensors, HostileHeadersAreOneLineErrorsNamingTensorAndField) {
  const std::string p = FsTmp("bad.safetensors");
  const std::string w24 = Floats({1, 2, 3, 4, 5, 6});
  struct Case {
    std::string header, data, expect;
  };
  const std::vector<Case> cases = {
      {R"({"w":{"dtype":5,"shape":[3,2],"data_offsets":[0,24]}})", w24,
       "tensor 'w': dtype: expected a string, found a number"},
      {R"({"w":{"dtype":"F32","shape":[3,-2],"data_offsets":[0,24]}})", w24,
       "tensor 'w': shape: dimension 1 is a negative number, not a non-negative integer"},
      {R"({"w":{"dtype":"F32","shape":[3,2.0],"data_offsets":[0,24]}})", w24,
       "tensor 'w': shape: dimension 1 is a fractional number"},
      {R"({"w":[1,2,3]})", w24,
       "tensor 'w': expected an object with dtype, shape and data_offsets, found an array"},
      {R"({"w":{"dtype":"F32","shape":[3,2],"data_offsets":[0.5,24]}})", w24,
       "tensor 'w': data_offsets: expected [begin, end], two non-negative integers"},
      {R"({"w":{"dtype":"F32","shape":[3,2],"data_offsets":"0-24"}})", w24,
       "tensor 'w': data_offsets: expected [begin, end]"},
      {R"({"w":{"dtype":"F32","shape":[3,2],"data_offsets":[24,0]}})", w24,
       "tensor 'w': data_offsets: [24, 0] ends before it begins"},
      {R"({"w":{"dtype":"F32","shape":[3,2],"data_offsets":[0,48]}})", w24,
       "tensor 'w': data_offsets: [0, 48] ends past the data section (24 bytes after the header)"},
      {R"({"w":{"dtype":"F32","shape":[3,2],"data_offsets":[0,20]}})", w24,
       "tensor 'w': shape [3, 2] of F32 needs 24 bytes, data_offsets [0, 20] span 20"},
      {R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,24]}})", w24,
       "tensor 'w': shape [4294967296, 4294967296] of F32: the element count overflows 64 bits"},
      {R"({"w":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,24]}})", w24,
       "of F32: the byte size overflows 64 bits"},
      {R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
       R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
       w24, "data_offsets [8, 16] overlap tensor 'a' [0, 16]"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
       R"("b":{"dtype":"F32","shape":[2],"data_offsets":[16,24]}})",
       w24, "tensor 'b': data_offsets [16, 24] leave a gap: bytes [8, 16)"},
      {R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", w24,
       "trailing bytes: the tensors end at offset 8 but the data section has 24 bytes"},
      {R"({"w":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}})", w24.substr(0, 2),
       "shape [3] of F4 is not a whole number of bytes"},
      {R"({"__metadata__":{"k":1},"w":{"dtype":"F32","shape":[6],"data_offsets":[0,24]}})", w24,
       "__metadata__: expected an object of strings"},
      {R"({"w":{"dtype":"F32","shape":[6],"data_offsets":[0,24],"x":1e309}})", w24,
       "header is not valid JSON: number overflow parsing '1e309'"},
      {R"({"w":{"dtype":"F32","shape":[6],"data_offsets":[0,18446744073709551616]}})", w24,
       "byte 58: header is not valid JSON: number out of range: integer '18446744073709551616' "
       "does not fit in 64 bits"},
      {"{\"w\":" + std::string(1000, '[') + std::string(1000, ']') + "}", "",
       "header nested deeper than 64 levels"},
      {R"([1,2])", "", "byte 8: header is not a JSON object"},
  };
  for (const Case& c : cases) {
    WriteFsFile(p, Safetensors(c.header, c.data));
    absl::StatusOr<FeatureReport> r;
    ASSERT_NO_THROW(r = FeatureStatsOfFile(p)) << c.header;
    ASSERT_FALSE(r.ok()) << c.header;
    EXPECT_NE(r.status().code(), absl::StatusCode::kInternal);
    EXPECT_EQ(Message(r).rfind(p + ": ", 0), 0u) << r.status();
    EXPECT_EQ(Message(r).find('\n'), std::string::npos) << r.status();
    EXPECT_NE(Message(r).find(c.expect), std::string::npos) << r.status();
  }
}

TEST(FeatureStatsSafetensors, HeaderLengthChecks) {
  const std::string p = FsTmp("len.safetensors");
  std::string f = Safetensors("{}", "");
  uint64_t n = 1000;
  std::memcpy(f.data(), &n, 8);
  WriteFsFile(p, f);
  auto r = FeatureStatsOfFile(p);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(Message(r).find("byte 8: header of 1000 bytes runs past the end (the file has 10)"),
            std::string::npos)
      << r.status();
  n = ~uint64_t{0};
  std::memcpy(f.data(), &n, 8);
  WriteFsFile(p, f);
  r = FeatureStatsOfFile(p);
  EXPECT_NE(Message(r).find("header length 18446744073709551615 exceeds the format's limit of "
                            "100000000 bytes"),
            std::string::npos)
      << r.status();
}

TEST(FeatureStatsSafetensors, ValidFilesAndDtypesNotDecoded) {
  const std::string p = FsTmp("ok.safetensors");
  // Offsets out of name order are fine as long as they tile the data section.
  std::string data = Floats({1, 2, 3, 4});
  data += std::string("\x01\x00\x02\x00", 4);  // U16 [1, 2]
  data += std::string("\x7f\x7f", 2);          // F8_E4M3 [2]
  data += std::string("\xab", 1);              // unknown dtype Q8 [1]
  WriteFsFile(p, Safetensors(R"({"z":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},)"
                             R"("a":{"dtype":"U16","shape":[2],"data_offsets":[16,20]},)"
                             R"("f8":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[20,22]},)"
                             R"("q":{"dtype":"Q8","shape":[1],"data_offsets":[22,23]},)"
                             R"("e":{"dtype":"F32","shape":[0,3],"data_offsets":[23,23]}})",
                             data));
  auto r = FeatureStatsOfFile(p);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->arrays.size(), 5u);
  EXPECT_EQ(r->arrays[0].name, "a");
  EXPECT_EQ(r->arrays[0].dtype, "uint16");
  EXPECT_DOUBLE_EQ(r->arrays[0].features[0].mean, 1.5);
  EXPECT_EQ(r->arrays[1].name, "e");
  EXPECT_TRUE(r->arrays[1].features.empty());
  EXPECT_EQ(r->arrays[2].dtype, "F8_E4M3");
  EXPECT_TRUE(r->arrays[2].features.empty());
  // A tensor is one population: [[1, 2], [3, 4]] has one mean, and no normalisation advice.
  ASSERT_EQ(r->arrays[4].features.size(), 1u);
  EXPECT_DOUBLE_EQ(r->arrays[4].features[0].mean, 2.5);
  EXPECT_DOUBLE_EQ(r->arrays[4].features[0].min, 1);
  EXPECT_DOUBLE_EQ(r->arrays[4].features[0].max, 4);
  EXPECT_EQ(r->arrays[4].features[0].suggest, "");
  EXPECT_FALSE(FeatureReportToJson(*r)["arrays"][4]["features"][0].contains("normalize"));
  EXPECT_EQ(FeatureReportToText(*r).find("normalise"), std::string::npos);
  EXPECT_EQ(NonFiniteCount(*r), 0u);
  std::string all;
  for (const auto& f : r->findings) all += f + "\n";
  EXPECT_NE(all.find("tensor 'f8' is F8_E4M3: not decoded"), std::string::npos) << all;
  EXPECT_NE(all.find("tensor 'q' is Q8: a dtype unknown to trainscope"), std::string::npos) << all;
  EXPECT_NE(all.find("tensor 'e' has no elements (shape [0, 3])"), std::string::npos) << all;
}

// ---- CSV

TEST(FeatureStatsCsv, InvalidUtf8SurvivesJsonOutput) {
  const std::string p = FsTmp("utf8.csv");
  WriteFsFile(p, "caf\xe9,ok\xff\xfe\n1,2\n3,4\n");
  auto r = FeatureStatsOfFile(p);
  ASSERT_TRUE(r.ok()) << r.status();
  std::string out;
  ASSERT_NO_THROW(out = FeatureReportToJson(*r).dump(2));
  auto back = nlohmann::json::parse(out);
  EXPECT_EQ(back["arrays"][0]["features"][0]["name"], "caf\xEF\xBF\xBD");
  EXPECT_EQ(back["arrays"][0]["features"][1]["name"], "ok\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_DOUBLE_EQ(back["arrays"][0]["features"][1]["mean"].get<double>(), 3);
}

TEST(FeatureStatsCsv, LineEndingsLfCrlfAndCrOnly) {
  for (const char* eol : {"\n", "\r\n", "\r"}) {
    const std::string p = FsTmp("eol.csv");
    std::string text;
    for (const char* line : {"a,b", "1,10", "2,20", "", "3,30"}) text += std::string(line) + eol;
    WriteFsFile(p, text);
    auto r = FeatureStatsOfFile(p);
    ASSERT_TRUE(r.ok()) << r.status();
    const auto& a = r->arrays[0];
    ASSERT_EQ(a.features.size(), 2u) << "eol " << int(eol[0]);
    EXPECT_EQ(a.shape[0], 3u);
    EXPECT_EQ(a.features[0].name, "a");
    EXPECT_DOUBLE_EQ(a.features[1].mean, 20);
    // Line numbers count \r\n once: the ragged row is on line 6.
    WriteFsFile(p, text + "4" + eol);
    r = FeatureStatsOfFile(p);
    EXPECT_NE(Message(r).find(p + ":6: 1 fields, header has 2"), std::string::npos) << r.status();
  }
}

TEST(FeatureStatsCsv, QuotedFieldsPerRfc4180) {
  const std::string p = FsTmp("quoted.csv");
  WriteFsFile(p,
              "id,\"name, full\",\"x\"\r\n"
              "1,\"Smith, \"\"Jo\"\"\",2.5\r\n"
              "2,\"two\r\nlines\",3.5\r\n"
              "3,plain,\" 4.5 \"\r\n"
              "4,\"\",5.5\r\n"
              "5\r\n");
  auto r = FeatureStatsOfFile(p);
  ASSERT_FALSE(r.ok());
  // The ragged row is reported on its own line, after a quoted line break.
  EXPECT_NE(Message(r).find(p + ":7: 1 fields, header has 3"), std::string::npos) << r.status();
  WriteFsFile(p,
              "id,\"name, full\",\"x\"\r\n"
              "1,\"Smith, \"\"Jo\"\"\",2.5\r\n"
              "2,\"two\r\nlines\",3.5\r\n"
              "3,plain,\" 4.5 \"\r\n"
              "4,\"\",5.5\r\n");
  r = FeatureStatsOfFile(p);
  ASSERT_TRUE(r.ok()) << r.status();
  const auto& f = r->arrays[0].features;
  ASSERT_EQ(f.size(), 3u);
  EXPECT_EQ(f[1].name, "name, full");
  EXPECT_EQ(f[2].name, "x");
  EXPECT_EQ(r->arrays[0].shape[0], 4u);
  EXPECT_DOUBLE_EQ(f[2].mean, 4);
  EXPECT_EQ(f[1].non_numeric, 3u);
  EXPECT_EQ(f[1].nan, 1u);  // "" is a missing value
}

TEST(FeatureStatsCsv, OverlongRecordsAreCountedNotBuffered) {
  const std::string p = FsTmp("long.csv");
  FeatureStatsOptions o;
  o.max_record_bytes = 64;
  WriteFsFile(
      p, "a,b\n1,2\n" + std::string(1000, '7') + ",1\n3,4\n\"" + std::string(200, 'q') + "\n5,6\n");
  auto r = FeatureStatsOfFile(p, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->bad_records.at("oversized_record"), 2u);
  EXPECT_EQ(r->bad_records.at("unterminated_quote"), 0u);
  ASSERT_EQ(r->bad_record_examples.size(), 2u);
  EXPECT_EQ(r->bad_record_examples[0].rfind(p + ":3: oversized_record: longer than the limit of 64 "
                                                "bytes",
                                            0),
            0u)
      << r->bad_record_examples[0];
  EXPECT_EQ(r->bad_record_examples[1].rfind(p + ":5: oversized_record", 0), 0u);
  EXPECT_EQ(r->arrays[0].shape[0], 3u);  // 1,2 3,4 5,6
  EXPECT_DOUBLE_EQ(r->arrays[0].features[0].mean, 3);
  ASSERT_FALSE(r->findings.empty());
  EXPECT_NE(r->findings[0].find("2 CSV record(s) skipped (oversized_record: 2"), std::string::npos);
  EXPECT_EQ(FeatureReportToJson(*r)["bad_records"]["oversized_record"], 2);

  // The default cap (1 MiB): a 3 MiB line is counted, and memory stays small.
  WriteFsFile(p, "a\n1\n" + std::string(3 << 20, '9') + "\n2\n");
  EXPECT_TRUE(InChild(
      [&] {
        auto d = FeatureStatsOfFile(p);
        return d.ok() && d->bad_records.at("oversized_record") == 1 && d->arrays[0].shape[0] == 2;
      },
      20));

  // A quote never closed: the record is counted, the rows before it are kept.
  WriteFsFile(p, "a,b\n1,2\n3,\"4\n5,6\n");
  r = FeatureStatsOfFile(p);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->bad_records.at("unterminated_quote"), 1u);
  EXPECT_EQ(r->arrays[0].shape[0], 1u);
  EXPECT_NE(r->bad_record_examples[0].find(":3: unterminated_quote"), std::string::npos);
}

// ---- files that are not files

TEST(FeatureStatsFiles, DirectoryIsBadInput) {
  for (const std::string& path : {FsTmp("dir.npy"), FsTmp("dir.csv")}) {
    mkdir(path.c_str(), 0755);
    auto r = FeatureStatsOfFile(path);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
    EXPECT_EQ(Message(r).rfind(path + ": is a directory", 0), 0u) << r.status();
  }
}

TEST(FeatureStatsFiles, DevZeroIsRefusedNotReadForever) {
  const std::string npy = FsTmp("zero.npy"), st = FsTmp("zero.safetensors"),
                    csv = FsTmp("zero.csv");
  for (const std::string& link : {npy, st, csv}) {
    unlink(link.c_str());
    ASSERT_EQ(symlink("/dev/zero", link.c_str()), 0);
  }
  EXPECT_TRUE(InChild(
      [&] {
        for (const std::string& path : {npy, st, csv}) {
          auto r = FeatureStatsOfFile(path);
          if (r.ok() || r.status().code() != absl::StatusCode::kInvalidArgument ||
              Message(r).find("not a regular file (a character device)") == std::string::npos) {
            std::fprintf(stderr, "%s\n", r.status().ToString().c_str());
            return false;
          }
        }
        return true;
      },
      20));
}

TEST(FeatureStatsFiles, FifoNeverBlocksForever) {
  const std::string npy = FsTmp("fifo.npy"), csv = FsTmp("fifo.csv");
  for (const std::string& f : {npy, csv}) {
    unlink(f.c_str());
    ASSERT_EQ(mkfifo(f.c_str(), 0600), 0);
  }
  // No writer: .npy is refused at once, CSV gives up after the stall timeout.
  EXPECT_TRUE(InChild(
      [&] {
        auto r = FeatureStatsOfFile(npy);
        if (r.ok() || Message(r).find("not a regular file (a FIFO or pipe); this format needs a "
                                      "file of known size") == std::string::npos) {
          return false;
        }
        FeatureStatsOptions o;
        o.stall_timeout = std::chrono::milliseconds(200);
        auto t0 = std::chrono::steady_clock::now();
        auto c = FeatureStatsOfFile(csv, o);
        return !c.ok() && c.status().code() == absl::StatusCode::kInvalidArgument &&
               Message(c).find("no data for 200 ms") != std::string::npos &&
               std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5);
      },
      20));
  // With a writer, CSV streams from the FIFO.
  EXPECT_TRUE(InChild(
      [&] {
        std::thread writer([&] {
          const int fd = open(csv.c_str(), O_WRONLY);
          const std::string text = "a,b\n1,2\n3,4\n";
          (void)!write(fd, text.data(), text.size());
          close(fd);
        });
        auto r = FeatureStatsOfFile(csv);
        writer.join();
        return r.ok() && r->arrays[0].shape[0] == 2 && r->arrays[0].features[1].mean == 3;
      },
      20));
}

}  // namespace
}  // namespace trainscope::data
