#include "trainscope/tokenizer/tokenizer.h"

#include <cstdlib>
#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "trainscope/core/subprocess.h"

namespace trainscope::tokenizer {
namespace {

TEST(ByteTokenizer, RoundTripsUtf8AndCounts) {
  auto tok = NewByteTokenizer();
  EXPECT_EQ(tok->vocab_size(), 257);
  EXPECT_EQ(tok->eos_id(), 256);
  EXPECT_EQ(tok->name(), "byte");
  const std::string text = "Grüße, 世界\n";
  std::vector<int32_t> ids = {7};
  tok->Encode(text, &ids);
  ASSERT_EQ(ids.size(), text.size() + 1);  // appended, not replaced
  EXPECT_EQ(ids[0], 7);
  EXPECT_EQ(ids[1], 'G');
  EXPECT_EQ(ids[3], 0xC3);  // first byte of ü
  EXPECT_EQ(tok->Count(text), text.size());
  ids.erase(ids.begin());
  ids.push_back(tok->eos_id());
  EXPECT_EQ(tok->Decode(ids), text);  // eos dropped
}

TEST(LoadTokenizer, ByteSpecs) {
  for (const char* spec : {"", "byte"}) {
    auto tok = LoadTokenizer(spec);
    ASSERT_TRUE(tok.ok()) << tok.status();
    EXPECT_EQ((*tok)->name(), "byte");
  }
}

TEST(LoadSentencePiece, MissingAndBadFiles) {
  auto missing = LoadSentencePiece("/nonexistent/x.model");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("/nonexistent/x.model"), std::string::npos);

  const std::string bad = ::testing::TempDir() + "/bad.model";
  std::ofstream(bad) << "this is not a protobuf";
  auto garbage = LoadSentencePiece(bad);
  ASSERT_FALSE(garbage.ok());
  EXPECT_EQ(garbage.status().code(), absl::StatusCode::kInvalidArgument) << garbage.status();
}

// Trains a tiny model with spm_train (Debian package sentencepiece) and checks it through
// the dlopen()ed wrapper.
TEST(LoadSentencePiece, TrainedModelEncodesAndDecodes) {
  const std::string spm_train = FindInPath("spm_train");
  if (spm_train.empty()) GTEST_SKIP() << "spm_train not installed";
  const std::string dir = ::testing::TempDir();
  const std::string corpus = dir + "/spm_corpus.txt";
  {
    std::ofstream out(corpus);
    const char* lines[] = {"the quick brown fox jumps over the lazy dog",
                           "a training corpus is a collection of documents",
                           "duplicated text makes the loss fall fast while the model gets worse",
                           "tokens per second and model flops utilisation are the units of speed",
                           "the sequence length decides how much padding is wasted"};
    for (int rep = 0; rep < 40; ++rep) {
      for (const char* l : lines) out << l << " " << rep << "\n";
    }
  }
  RunOptions opts;
  opts.timeout = std::chrono::seconds(60);
  auto run = RunProcess({spm_train, "--input=" + corpus, "--model_prefix=" + dir + "/spm",
                         "--vocab_size=64", "--model_type=unigram", "--minloglevel=2",
                         "--bos_id=-1", "--eos_id=1", "--unk_id=0", "--pad_id=-1"},
                        opts);
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_TRUE(run->ok()) << run->err;

  auto tok = LoadSentencePiece(dir + "/spm.model");
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->vocab_size(), 64);
  EXPECT_EQ((*tok)->eos_id(), 1);
  EXPECT_EQ((*tok)->name(), "sentencepiece:" + dir + "/spm.model");
  const std::string text = "the quick brown fox";
  std::vector<int32_t> ids;
  (*tok)->Encode(text, &ids);
  ASSERT_FALSE(ids.empty());
  EXPECT_LT(ids.size(), text.size());  // merges bytes into pieces
  for (int32_t id : ids) {
    EXPECT_GE(id, 0);
    EXPECT_LT(id, 64);
  }
  EXPECT_EQ((*tok)->Count(text), ids.size());
  EXPECT_EQ((*tok)->Decode(ids), text);

  auto via_spec = LoadTokenizer(dir + "/spm.model");
  ASSERT_TRUE(via_spec.ok());
  EXPECT_EQ((*via_spec)->vocab_size(), 64);
}

}  // namespace
}  // namespace trainscope::tokenizer
