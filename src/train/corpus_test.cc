// The trainer's corpus reading through the data module: compressed JSONL and text, Megatron
// datasets from `data pack` read as token ids, bad records, out-of-vocabulary ids refused,
// and the data-order hash of the metrics header.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "trainscope/data/megatron.h"
#include "trainscope/data/pack.h"
#include "trainscope/data/reader.h"
#include "trainscope/tokenizer/tokenizer.h"
#include "trainscope/train/data.h"
#include "trainscope/train/metrics.h"

namespace trainscope::train {
namespace {

namespace fs = std::filesystem;

// A fresh directory per test.
std::string CorpusTestDir(const std::string& name) {
  std::string d = absl::StrCat(::testing::TempDir(), "/train_corpus_", name, "_", ::getpid());
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

void CorpusWrite(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

std::string CorpusZstd(const std::string& s) {
  std::string out(ZSTD_compressBound(s.size()), '\0');
  out.resize(ZSTD_compress(out.data(), out.size(), s.data(), s.size(), 3));
  return out;
}

void CorpusWriteGzip(const std::string& path, const std::string& s) {
  gzFile gz = gzopen(path.c_str(), "wb");
  ASSERT_NE(gz, nullptr);
  ASSERT_EQ(gzwrite(gz, s.data(), static_cast<unsigned>(s.size())), static_cast<int>(s.size()));
  gzclose(gz);
}

// Documents with escapes, non-ASCII text and a blank line between records.
const char kCorpusJsonl[] =
    "{\"text\": \"The quick brown fox jumps over the lazy dog.\", \"id\": 1}\n"
    "{\"text\": \"Escapes: \\\"quoted\\\", a tab\\there, \\u00e9t\\u00e9 and \\ud83d\\ude00.\"}\n"
    "\n"
    "{\"id\": 3, \"text\": \"Packing turns documents into fixed-length sequences.\"}\r\n"
    "{\"text\": \"Shuffling uses a seed that is the same on every rank.\"}\n";

absl::StatusOr<PackedCorpus> CorpusLoad(const std::vector<std::string>& paths, int seq_len,
                                        const std::string& format = "auto") {
  static const auto* tok = tokenizer::NewByteTokenizer().release();
  DataConfig d;
  d.corpus = paths;
  d.format = format;
  return LoadCorpus(d, *tok, seq_len);
}

TEST(CorpusTest, CompressedJsonlAndTextGiveTheSameTokens) {
  const std::string dir = CorpusTestDir("compressed");
  CorpusWrite(dir + "/c.jsonl", kCorpusJsonl);
  CorpusWrite(dir + "/z.jsonl.zst", CorpusZstd(kCorpusJsonl));
  CorpusWriteGzip(dir + "/g.jsonl.gz", kCorpusJsonl);
  auto plain = CorpusLoad({dir + "/c.jsonl"}, 8);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->stats.documents, 4);
  EXPECT_EQ(plain->stats.bad_records, 0);
  // The unescaped text, not the JSON spelling: "été" is 4 UTF-8 bytes, the emoji 4.
  const std::string second =
      "Escapes: \"quoted\", a tab\there, \xc3\xa9t\xc3\xa9 and \xf0\x9f\x98\x80.";
  std::vector<int32_t> want;
  const std::string first = "The quick brown fox jumps over the lazy dog.";
  for (unsigned char c : first) want.push_back(c);
  want.push_back(256);
  for (unsigned char c : second) want.push_back(c);
  want.push_back(256);
  ASSERT_GE(plain->tokens.size(), want.size());
  EXPECT_EQ(std::vector<int32_t>(plain->tokens.begin(), plain->tokens.begin() + want.size()), want);
  for (const std::string name : {"/z.jsonl.zst", "/g.jsonl.gz"}) {
    auto c = CorpusLoad({dir + name}, 8);
    ASSERT_TRUE(c.ok()) << name << ": " << c.status();
    EXPECT_EQ(c->tokens, plain->tokens) << name;
    EXPECT_EQ(c->stats.documents, plain->stats.documents) << name;
    EXPECT_EQ(c->stats.bytes, plain->stats.bytes) << name;
  }
  // A text file is one document, compressed or not.
  CorpusWrite(dir + "/t.txt", kCorpusJsonl);
  CorpusWrite(dir + "/t2.txt.zst", CorpusZstd(kCorpusJsonl));
  auto text = CorpusLoad({dir + "/t.txt"}, 8);
  auto text_zst = CorpusLoad({dir + "/t2.txt.zst"}, 8);
  ASSERT_TRUE(text.ok() && text_zst.ok());
  EXPECT_EQ(text->stats.documents, 1);
  EXPECT_EQ(text->stats.bytes, static_cast<int64_t>(sizeof(kCorpusJsonl) - 1));
  EXPECT_EQ(text_zst->tokens, text->tokens);
  // A directory reads its files in name order, like a list of them; a glob too.
  auto whole = CorpusLoad({dir}, 8);
  auto listed = CorpusLoad({dir + "/c.jsonl", dir + "/g.jsonl.gz", dir + "/t.txt",
                            dir + "/t2.txt.zst", dir + "/z.jsonl.zst"},
                           8);
  auto globbed = CorpusLoad({dir + "/*.jsonl*"}, 8);
  ASSERT_TRUE(whole.ok() && listed.ok() && globbed.ok()) << whole.status() << globbed.status();
  EXPECT_EQ(whole->stats.files, 5);
  EXPECT_EQ(whole->tokens, listed->tokens);
  EXPECT_EQ(globbed->stats.files, 3);
  EXPECT_EQ(globbed->stats.documents, 12);
}

TEST(CorpusTest, DirectoriesAreWalkedWithoutAliasesOrHiddenFiles) {
  const std::string dir = CorpusTestDir("walk");
  fs::create_directories(dir + "/sub");
  CorpusWrite(dir + "/a.txt", "the first document, long enough");
  CorpusWrite(dir + "/sub/b.txt", "the second document, in a subdirectory");
  CorpusWrite(dir + "/.hidden.txt", "never read");
  fs::create_symlink(dir + "/a.txt", dir + "/c.txt");  // an alias: read once
  fs::create_directory_symlink(dir + "/sub", dir + "/sublink");
  auto walked = CorpusLoad({dir}, 8);
  ASSERT_TRUE(walked.ok()) << walked.status();
  EXPECT_EQ(walked->stats.files, 2);
  auto listed = CorpusLoad({dir + "/a.txt", dir + "/sub/b.txt"}, 8);
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(walked->tokens, listed->tokens);
  // A link named in the config is read.
  auto named = CorpusLoad({dir + "/c.txt"}, 8);
  ASSERT_TRUE(named.ok()) << named.status();
  EXPECT_EQ(named->stats.files, 1);
}

TEST(CorpusTest, BadRecordsAreCountedAsTheDataModuleCountsThem) {
  const std::string dir = CorpusTestDir("bad");
  CorpusWrite(dir + "/a.jsonl",
              "{\"text\": \"one good document of some length\"}\n"
              "{\"text\": \"cut\n"
              "[1, 2]\n"
              "{\"title\": \"no text\"}\n"
              "{\"text\": 5}\n"
              "{\"text\": \"\"}\n"
              "{\"text\": \"bad utf-8 \xff here\"}\n");
  const std::string good = "{\"text\": \"a second good document\"}\n";
  std::string z = CorpusZstd(good + good + good);
  CorpusWrite(dir + "/b.jsonl.zst", z.substr(0, z.size() - 6));  // truncated stream
  auto p = CorpusLoad({dir + "/a.jsonl", dir + "/b.jsonl.zst"}, 8);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->stats.missing_text_field, 2);  // no field, and a number
  EXPECT_EQ(p->stats.empty_documents, 1);
  // a.jsonl: lines 2 and 3 invalid JSON, line 7 invalid UTF-8; b: the truncated stream (its
  // only block is cut: no document of it is decoded).
  EXPECT_EQ(p->stats.bad_records, 4) << p->stats.first_bad_record;
  EXPECT_EQ(p->stats.documents, 1);
  EXPECT_EQ(p->stats.first_bad_record.rfind(dir + "/a.jsonl:2: ", 0), 0u)
      << p->stats.first_bad_record;
  // Only bad records: an empty corpus naming the first one.
  CorpusWrite(dir + "/c.jsonl", "{\"title\": \"x\"}\nnot json\n");
  p = CorpusLoad({dir + "/c.jsonl"}, 8);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("c.jsonl: empty corpus (no text; first bad record: "),
            std::string::npos)
      << p.status();
  // A damaged compressed text file is a bad record (not a truncated document).
  CorpusWrite(dir + "/d.txt.zst", z.substr(0, z.size() - 6));
  CorpusWrite(dir + "/e.txt", "a readable text document");
  p = CorpusLoad({dir + "/d.txt.zst", dir + "/e.txt"}, 8);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->stats.documents, 1);
  EXPECT_EQ(p->stats.bad_records, 1);
  EXPECT_NE(p->stats.first_bad_record.find("truncated_stream"), std::string::npos);
  // Missing paths and patterns name the path.
  p = CorpusLoad({dir + "/nope*.jsonl"}, 8);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(p.status().message().find("nope*.jsonl: corpus path does not exist"), std::string::npos)
      << p.status();
}

// Packs `jsonl` with the data module's pack API (byte tokenizer, concat).
void CorpusPack(const std::string& jsonl, const std::string& prefix, int64_t seq_len) {
  auto tok = tokenizer::NewByteTokenizer();
  auto inputs = data::ExpandInputs({jsonl}, data::InputFormat::kAuto);
  ASSERT_TRUE(inputs.ok()) << inputs.status();
  data::PackOptions o;
  o.tokenizer = tok.get();
  o.seq_len = seq_len;
  o.mode = data::PackOptions::kConcat;
  o.output_prefix = prefix;
  o.progress = false;
  auto rep = data::RunPack(*inputs, o);
  ASSERT_TRUE(rep.ok()) << rep.status();
}

TEST(CorpusTest, MegatronDatasetFromPackIsReadAsTheSameTokens) {
  const std::string dir = CorpusTestDir("megatron");
  CorpusWrite(dir + "/c.jsonl", kCorpusJsonl);
  auto text = CorpusLoad({dir + "/c.jsonl"}, 8);
  ASSERT_TRUE(text.ok()) << text.status();
  const int64_t n = static_cast<int64_t>(text->tokens.size());
  // One sequence of exactly the stream's length: the dataset holds the stream itself.
  fs::create_directories(dir + "/one");
  CorpusPack(dir + "/c.jsonl", dir + "/one/ds", n);
  for (const std::string& name :
       {dir + "/one/ds", dir + "/one/ds.bin", dir + "/one/ds.idx", dir + "/one"}) {
    auto m = CorpusLoad({name}, 8);
    ASSERT_TRUE(m.ok()) << name << ": " << m.status();
    EXPECT_EQ(m->tokens, text->tokens) << name;
    EXPECT_EQ(m->num_sequences, text->num_sequences) << name;
    EXPECT_EQ(m->stats.files, 1) << name;  // .bin and .idx are one input
    EXPECT_EQ(m->stats.documents, 1) << name;
    EXPECT_EQ(m->stats.bytes, 0) << name;
  }
  // Sequences of 16: the same stream, then the pack's padding (the eos id) up to 16.
  CorpusPack(dir + "/c.jsonl", dir + "/ds16", 16);
  auto m = CorpusLoad({dir + "/ds16"}, 8);
  ASSERT_TRUE(m.ok()) << m.status();
  const int64_t padded = (n + 15) / 16 * 16;
  ASSERT_EQ(static_cast<int64_t>(m->tokens.size()), padded);
  EXPECT_EQ(std::vector<int32_t>(m->tokens.begin(), m->tokens.begin() + n), text->tokens);
  for (int64_t i = n; i < padded; ++i) EXPECT_EQ(m->tokens[i], 256) << i;
  EXPECT_EQ(m->stats.documents, padded / 16);
  // Datasets and text mix in one corpus, in the order given.
  auto mixed = CorpusLoad({dir + "/one/ds", dir + "/c.jsonl"}, 8);
  ASSERT_TRUE(mixed.ok()) << mixed.status();
  std::vector<int32_t> twice = text->tokens;
  twice.insert(twice.end(), text->tokens.begin(), text->tokens.end());
  EXPECT_EQ(mixed->tokens, twice);
}

TEST(CorpusTest, MegatronTokenOutsideTheVocabularyIsRefused) {
  const std::string dir = CorpusTestDir("oov");
  // Two documents of uint16 ids; the second holds 300, past the byte tokenizer's 257.
  const std::vector<uint16_t> ids = {72, 105, 256, 65, 300, 256};
  CorpusWrite(dir + "/ds.bin",
              std::string(reinterpret_cast<const char*>(ids.data()), ids.size() * 2));
  ASSERT_TRUE(
      data::WriteMegatronIndex(dir + "/ds", data::MegatronDType::kUint16, {3, 3}, {0, 1, 2}).ok());
  auto p = CorpusLoad({dir + "/ds"}, 2);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find(dir + "/ds.bin: document 1 (sequence 1, token 1): token id "
                                            "300 is outside the vocabulary"),
            std::string::npos)
      << p.status();
  // In range: read as stored.
  const std::vector<uint16_t> ok_ids = {72, 105, 256, 65, 66, 256};
  CorpusWrite(dir + "/ds.bin",
              std::string(reinterpret_cast<const char*>(ok_ids.data()), ok_ids.size() * 2));
  p = CorpusLoad({dir + "/ds"}, 2);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->tokens, std::vector<int32_t>(ok_ids.begin(), ok_ids.end()));
  EXPECT_EQ(p->stats.documents, 2);
}

TEST(CorpusTest, DataOrderHashIsTheSameForTheSameDataAndSeedOnly) {
  const std::string dir = CorpusTestDir("hash");
  CorpusWrite(dir + "/c.jsonl", kCorpusJsonl);
  // Two ranks of one config load the corpus each and hash it with the run's seed.
  auto rank0 = CorpusLoad({dir + "/c.jsonl"}, 8);
  auto rank1 = CorpusLoad({dir + "/c.jsonl"}, 8);
  ASSERT_TRUE(rank0.ok() && rank1.ok());
  const std::string h = DataOrderHash(*rank0, 1234);
  EXPECT_EQ(h.size(), 16u);
  EXPECT_EQ(h.find_first_not_of("0123456789abcdef"), std::string::npos) << h;
  EXPECT_EQ(DataOrderHash(*rank1, 1234), h);
  EXPECT_NE(DataOrderHash(*rank0, 1235), h);  // another shuffle seed
  auto other_len = CorpusLoad({dir + "/c.jsonl"}, 9);
  ASSERT_TRUE(other_len.ok());
  EXPECT_NE(DataOrderHash(*other_len, 1234), h);  // the same stream cut otherwise
  PackedCorpus changed = *rank1;
  changed.tokens[5] ^= 1;  // one token differs
  EXPECT_NE(DataOrderHash(changed, 1234), h);
}

TEST(CorpusTest, MetricsValidatorChecksTheDataOrderHash) {
  const std::string dir = CorpusTestDir("header");
  auto write = [&](const nlohmann::json& hash) {
    nlohmann::json header = {
        {"rank", 0},          {"world_size", 1},         {"params", 10},
        {"start_unix_us", 1}, {"data_order_hash", hash}, {"config", nlohmann::json::object()}};
    auto w = MetricsWriter::Open(dir + "/m.jsonl", header);
    EXPECT_TRUE(w.ok()) << w.status();
    w->reset();
    return ValidateMetricsFile(dir + "/m.jsonl");
  };
  EXPECT_TRUE(write("0123456789abcdef").ok());
  for (const nlohmann::json& bad :
       {nlohmann::json("0123"), nlohmann::json(12), nlohmann::json("0123456789ABCDEF")}) {
    auto v = write(bad);
    ASSERT_FALSE(v.ok()) << bad;
    EXPECT_NE(v.status().message().find("m.jsonl:1: key \"data_order_hash\" is not 16 hex digits"),
              std::string::npos)
        << v.status();
  }
}

}  // namespace
}  // namespace trainscope::train
