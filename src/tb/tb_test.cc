// The TFRecord framing (CRC32C test vectors, damaged and cut-short records), the fixture file
// tests/data/tb/sample.tfevents.bin (written by an independent stdlib-Python encoder from the
// format's spec) reproduced byte for byte by the writer, and the writer's files read back
// through the framing and the generated Event classes. diagnose's reader reads the writer's
// files in src/diagnose/readers_test.cc; an independent Python reader in tests/tb_events_check.py.
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tensorboard/event.pb.h"
#include "trainscope/tb/event_writer.h"
#include "trainscope/tb/tfrecord.h"

namespace trainscope::tb {
namespace {

namespace fs = std::filesystem;

std::string TbReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string TbSourcePath(const std::string& rel) {
  const char* src = std::getenv("TS_SOURCE_DIR");
  return std::string(src ? src : TS_SOURCE_DIR) + "/" + rel;
}

class TbDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() /
            ("tb_test." + std::to_string(getpid()) + "." +
             ::testing::UnitTest::GetInstance()->current_test_info()->name()))
               .string();
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
};

TEST(Crc32c, StandardVectors) {
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(Crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(Crc32c(std::string(32, '\xff')), 0x62A8AB43u);
  std::string inc;
  for (int i = 0; i < 32; ++i) inc += static_cast<char>(i);
  EXPECT_EQ(Crc32c(inc), 0x46DD794Eu);
  // Continuing a CRC equals computing it at once, at any split.
  std::string text = "The quick brown fox jumps over the lazy dog, twice over.";
  for (size_t k = 0; k <= text.size(); ++k)
    EXPECT_EQ(Crc32c(text.substr(k), Crc32c(text.substr(0, k))), Crc32c(text)) << k;
}

TEST(TfRecord, ReadsRecordsCountsDamageAndACutTail) {
  std::string file = FrameTfRecord("first") + FrameTfRecord("") + FrameTfRecord("second");
  std::string bad = FrameTfRecord("damaged");
  bad[12] ^= 1;  // data byte: the data CRC no longer matches
  std::string lost = FrameTfRecord("lost framing");
  lost[3] ^= 0x40;  // length byte: the length CRC no longer matches
  file += bad + lost + FrameTfRecord("third");
  std::string tail = FrameTfRecord("cut short");
  file += tail.substr(0, tail.size() - 3);

  TfRecordReader r(file);
  std::string_view rec;
  std::vector<std::string> got;
  while (r.Next(&rec)) got.emplace_back(rec);
  EXPECT_EQ(got, (std::vector<std::string>{"first", "", "second", "third"}));
  EXPECT_EQ(r.records(), 4);
  EXPECT_EQ(r.bad_records(), 2);
  EXPECT_EQ(r.truncated_bytes(), static_cast<int64_t>(tail.size() - 3));
  EXPECT_NE(r.first_bad().find("data CRC mismatch"), std::string::npos) << r.first_bad();
}

// The fixture's masked CRCs as its generator printed them (tb_vectors.py), and the standard
// masked CRC of no bytes.
TEST(Crc32c, MaskedVectors) {
  EXPECT_EQ(Crc32c(""), 0u);
  EXPECT_EQ(MaskCrc32c(Crc32c("")), 0xA282EAD8u);
  const std::string file = TbReadFile(TbSourcePath("tests/data/tb/sample.tfevents.bin"));
  ASSERT_EQ(file.size(), 142u);
  std::string_view rec;
  TfRecordReader r(file);
  std::vector<std::string> records;
  while (r.Next(&rec)) records.emplace_back(rec);
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(r.bad_records(), 0);
  EXPECT_EQ(r.truncated_bytes(), 0);
  // Each record re-framed by FrameTfRecord is the fixture's bytes: length, both masked CRCs.
  std::string reframed;
  for (const std::string& d : records) reframed += FrameTfRecord(d);
  EXPECT_EQ(reframed, file);
}

// The writer's first two events are the fixture's first two records, byte for byte: a
// file_version event at 1700000000.0 s, then "loss" = 0.5 as simple_value at step 10.
TEST_F(TbDir, WriterReproducesTheFixture) {
  EventWriterOptions o;
  o.start_unix_us = 1700000000LL * 1000000;
  o.host = "fixture";
  auto w = EventWriter::Open(dir_, o);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(fs::path((*w)->path()).filename().string(), "events.out.tfevents.1700000000.fixture");
  ASSERT_TRUE((*w)->AddScalars(10, 1700000001500000LL, {{"loss", 0.5}}).ok());
  ASSERT_TRUE((*w)->Flush().ok());
  EXPECT_EQ((*w)->events(), 2);
  const std::string fixture = TbReadFile(TbSourcePath("tests/data/tb/sample.tfevents.bin"));
  const size_t two_records = 0x18 + 0x1a + 2 * 16;  // data lengths in the fixture's headers
  EXPECT_EQ(TbReadFile((*w)->path()), fixture.substr(0, two_records));
}

TEST_F(TbDir, RoundTripThroughTheEventClasses) {
  EventWriterOptions o;
  o.flush_every_s = 1000;  // buffered: nothing but the first event until Flush()
  auto w = EventWriter::Open(dir_, o);
  ASSERT_TRUE(w.ok()) << w.status();
  const int64_t t0 = 1750000000LL * 1000000;
  for (int step = 1; step <= 50; ++step) {
    std::vector<Scalar> s = {{"train/loss", 10.0 / step}, {"train/lr", 1e-3 * step}};
    if (step == 7) s.push_back({"train/grad_norm", NAN});
    ASSERT_TRUE((*w)->AddScalars(step, t0 + step * 1000, s).ok());
  }
  ASSERT_TRUE((*w)->AddScalars(51, t0, {}).ok());  // no scalars, no event
  const std::string before = TbReadFile((*w)->path());
  ASSERT_TRUE((*w)->Flush().ok());
  const std::string file = TbReadFile((*w)->path());
  EXPECT_LT(before.size(), file.size());

  TfRecordReader r(file);
  std::string_view rec;
  tensorflow::Event e;
  ASSERT_TRUE(r.Next(&rec));
  ASSERT_TRUE(e.ParseFromArray(rec.data(), static_cast<int>(rec.size())));
  EXPECT_EQ(e.file_version(), kFileVersion);
  int step = 0;
  while (r.Next(&rec)) {
    ++step;
    ASSERT_TRUE(e.ParseFromArray(rec.data(), static_cast<int>(rec.size())));
    EXPECT_EQ(e.step(), step);
    EXPECT_DOUBLE_EQ(e.wall_time(), (t0 + step * 1000) / 1e6);
    ASSERT_EQ(e.summary().value_size(), step == 7 ? 3 : 2);
    EXPECT_EQ(e.summary().value(0).tag(), "train/loss");
    EXPECT_EQ(e.summary().value(0).simple_value(), static_cast<float>(10.0 / step));
    EXPECT_EQ(e.summary().value(1).tag(), "train/lr");
    EXPECT_EQ(e.summary().value(1).simple_value(), static_cast<float>(1e-3 * step));
    if (step == 7) {
      EXPECT_TRUE(std::isnan(e.summary().value(2).simple_value()));
    }
  }
  EXPECT_EQ(step, 50);
  EXPECT_EQ(r.bad_records(), 0);
  EXPECT_EQ((*w)->events(), 51);
}

// flush_every_s 0: every event reaches the file at once (what a live TensorBoard reads).
TEST_F(TbDir, FlushesOnTheTimer) {
  EventWriterOptions o;
  o.flush_every_s = 0;
  auto w = EventWriter::Open(dir_, o);
  ASSERT_TRUE(w.ok()) << w.status();
  const size_t first = fs::file_size((*w)->path());
  ASSERT_TRUE((*w)->AddScalars(1, 1750000000LL * 1000000, {{"train/loss", 1}}).ok());
  EXPECT_GT(fs::file_size((*w)->path()), first);
}

// Two writers of one second in one directory: two files, neither overwritten.
TEST_F(TbDir, SameSecondGetsItsOwnFile) {
  EventWriterOptions o;
  o.start_unix_us = 1750000000LL * 1000000;
  o.host = "h";
  auto a = EventWriter::Open(dir_, o);
  auto b = EventWriter::Open(dir_, o);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE((*a)->path(), (*b)->path());
  EXPECT_EQ((*b)->path(), (*a)->path() + "." + std::to_string(getpid()));
}

TEST_F(TbDir, UnwritableDirectoryNamesThePath) {
  ASSERT_TRUE(std::ofstream(dir_).good());  // a file where the directory should be
  auto w = EventWriter::Open(dir_ + "/sub", {});
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find(dir_ + "/sub"), std::string::npos) << w.status();
}

}  // namespace
}  // namespace trainscope::tb
