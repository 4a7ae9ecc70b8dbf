// tokenizer.json: hand-checked vectors on the fixtures in tests/data/tokenizer/ (the merges
// of each expected id list are worked out in the comments).
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "tokenizer/hf_pretokenize.h"
#include "trainscope/tokenizer/tokenizer.h"

namespace trainscope::tokenizer {
namespace {

std::string Fixture(const std::string& name) {
  return std::string(TS_SOURCE_DIR) + "/tests/data/tokenizer/" + name;
}

std::vector<int32_t> Ids(const Tokenizer& t, const std::string& text) {
  std::vector<int32_t> ids;
  t.Encode(text, &ids);
  return ids;
}

std::vector<std::string> Split(SplitKind kind, const std::string& text) {
  std::vector<std::pair<uint32_t, uint32_t>> spans;
  SplitPreTokens(kind, text, &spans);
  std::vector<std::string> out;
  for (auto [b, e] : spans) out.push_back(text.substr(b, e - b));
  return out;
}

using V = std::vector<std::string>;

TEST(HfPreTokenize, Gpt2Regex) {
  EXPECT_EQ(Split(SplitKind::kGpt2, "Hello world!! it's  12ab\n\nx  "),
            (V{"Hello", " world", "!!", " it", "'s", " ", " 12", "ab", "\n", "\n", "x", "  "}));
  EXPECT_EQ(Split(SplitKind::kGpt2, "Grüße, 世界"), (V{"Grüße", ",", " 世界"}));
}

TEST(HfPreTokenize, Llama3AndQwen2Regex) {
  EXPECT_EQ(Split(SplitKind::kLlama3, "(hello IT'S 12345 ok?\n\n  x"),
            (V{"(hello", " IT", "'S", " ", "123", "45", " ok", "?\n\n", " ", " x"}));
  EXPECT_EQ(Split(SplitKind::kLlama3, "a \n\n b"), (V{"a", " \n\n", " b"}));
  EXPECT_EQ(Split(SplitKind::kQwen2, "x 123"), (V{"x", " ", "1", "2", "3"}));
}

TEST(HfPreTokenize, BertAndWhitespace) {
  EXPECT_EQ(Split(SplitKind::kBert, " don't, stop\tnow "),
            (V{"don", "'", "t", ",", "stop", "now"}));
  EXPECT_EQ(Split(SplitKind::kWhitespace, "don't, stop"), (V{"don", "'", "t", ",", "stop"}));
}

// Lowercase as `tokenizers` does, code point by code point: a capital sigma is σ wherever it
// stands (ICU's contextual lowercasing would end "ΟΔΟΣ" with ς), İ is i + combining dot.
TEST(HfNormalize, LowercaseWithoutContext) {
  BertNormalizerOptions keep_accents;
  keep_accents.strip_accents = false;
  EXPECT_EQ(BertNormalize("ΟΔΟΣ ΣΑΣ. Σ İ", keep_accents), "οδοσ σασ. σ i\u0307");
  EXPECT_EQ(BertNormalize("ΟΔΟΣ İ", BertNormalizerOptions()), "οδοσ i");
  std::string out;
  ASSERT_TRUE(UnicodeNormalize("Lowercase", "ΣΑΣ-ΣΑΣ ς", &out));
  EXPECT_EQ(out, "σασ-σασ ς");
}

TEST(HfPreTokenize, PatternsAreRecognised) {
  SplitKind k;
  EXPECT_TRUE(SplitKindOfPattern(
      "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+", &k));
  EXPECT_EQ(k, SplitKind::kGpt2);
  EXPECT_FALSE(SplitKindOfPattern("\\w+", &k));
}

TEST(HfTokenizer, Gpt2ByteLevelBpe) {
  auto t = LoadTokenizer(Fixture("gpt2_tiny.json"));
  ASSERT_TRUE(t.ok()) << t.status();
  const Tokenizer& tok = **t;
  EXPECT_EQ(tok.vocab_size(), 32);
  EXPECT_EQ(tok.eos_id(), 0);
  // "hello": h e l l o -> he l l o -> he ll o -> hell o -> hello (13).
  // " world" = Ġworld: o r (rank 2) first, then Ġ w, Ġw or, l d -> Ġwor ld (16 17); no
  // ignore_merges, so the vocabulary's Ġworld (31) is not used.
  EXPECT_EQ(Ids(tok, "hello world!"), (std::vector<int32_t>{13, 16, 17, 9}));
  // Two spaces: the first alone (Ġ 8), the second leads " world".
  EXPECT_EQ(Ids(tok, "hello  world"), (std::vector<int32_t>{13, 8, 16, 17}));
  // Newline is Ċ (24); "world" without Ġ: w or ld.
  EXPECT_EQ(Ids(tok, "hello\nworld"), (std::vector<int32_t>{13, 24, 5, 15, 17}));
  // Added token cut out first; "it's" -> it 's (contraction merged by ' s).
  EXPECT_EQ(Ids(tok, "hello<|endoftext|>it's"), (std::vector<int32_t>{13, 0, 25, 26, 20}));
  // One pre-token "1234": 1 2 (rank 9) and 3 4 (rank 10) -> 12 34.
  EXPECT_EQ(Ids(tok, "1234"), (std::vector<int32_t>{29, 30}));
  EXPECT_EQ(tok.Decode({13, 16, 17, 9, 0, 24}), "hello world!<|endoftext|>\n");
  EXPECT_EQ(tok.Count("hello world!"), 4u);
}

TEST(HfTokenizer, Llama3SplitAndIgnoreMerges) {
  auto t = LoadTokenizer(Fixture("llama3_tiny.json"));
  ASSERT_TRUE(t.ok()) << t.status();
  // ignore_merges: " world" is in the vocabulary as Ġworld (31).
  EXPECT_EQ(Ids(**t, "hello world!"), (std::vector<int32_t>{13, 31, 9}));
  // Digits in threes: "123" -> 12 3, "4" -> 4.
  EXPECT_EQ(Ids(**t, "1234"), (std::vector<int32_t>{29, 23, 28}));
  EXPECT_EQ((*t)->Decode({13, 31, 9}), "hello world!");
}

// Added tokens beyond the model's vocabulary (as Llama-3's reserved tokens) widen it.
TEST(HfTokenizer, AddedTokenAboveVocabulary) {
  std::ifstream in(Fixture("gpt2_tiny.json"));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string key = "\"added_tokens\": [";
  const size_t at = text.find(key);
  ASSERT_NE(at, std::string::npos);
  text.insert(at + key.size(), R"({"id": 40, "content": "<|pad|>", "special": true},)");
  const std::string path = ::testing::TempDir() + "/added_above.json";
  std::ofstream(path) << text;
  auto t = LoadTokenizer(path);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->vocab_size(), 41);
  EXPECT_EQ(Ids(**t, "hello<|pad|>!"), (std::vector<int32_t>{13, 40, 9}));
  EXPECT_EQ((*t)->Decode({13, 40}), "hello<|pad|>");
}

TEST(HfTokenizer, BertWordPiece) {
  auto t = LoadTokenizer(Fixture("bert_tiny.json"));
  ASSERT_TRUE(t.ok()) << t.status();
  const Tokenizer& tok = **t;
  EXPECT_EQ(tok.eos_id(), 3);
  // Lowercased, accent stripped (Café -> cafe), 的 padded; "x" and the 20-character word
  // (over max_input_chars_per_word 10) are [UNK]; "unx" has no ##x, so the word is [UNK].
  EXPECT_EQ(Ids(tok, "Hello, World! unaffable Café 的x supercalifragilistic cafes unx"),
            (std::vector<int32_t>{4, 9, 5, 10, 6, 7, 8, 11, 13, 1, 1, 11, 12, 1}));
  EXPECT_EQ(tok.Decode({4, 9, 6, 7, 8}), "hello , unaffable");
}

TEST(HfTokenizer, UnsupportedAndBadFiles) {
  auto u = LoadTokenizer(Fixture("unigram_unsupported.json"));
  ASSERT_FALSE(u.ok());
  EXPECT_EQ(u.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(u.status().message().find("unigram_unsupported.json"), std::string::npos);
  EXPECT_NE(u.status().message().find("WordPiece"), std::string::npos);  // the supported kinds
  EXPECT_EQ(LoadTokenizer("/nonexistent/tokenizer.json").status().code(),
            absl::StatusCode::kNotFound);
  auto not_json = LoadHfTokenizer(std::string(TS_SOURCE_DIR) + "/tests/data/data/small.jsonl");
  EXPECT_EQ(not_json.status().code(), absl::StatusCode::kInvalidArgument);
}

// A tokenizer.json nested 70,000 deep (once a SIGSEGV: ParseConfig copies and recurses
// into the document) is refused before it is parsed, in one line naming the file.
TEST(HfTokenizer, DeepNestingRefused) {
  const int depth = 70000;
  std::string text = R"({"model": {"type": "BPE", "vocab": {}}, "pre_tokenizer": )";
  text += std::string(depth, '[') + std::string(depth, ']') + "}";
  const std::string path = ::testing::TempDir() + "/deep_tokenizer.json";
  std::ofstream(path) << text;
  auto t = LoadTokenizer(path);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string want = path + ": JSON nested deeper than 64 at byte ";
  EXPECT_EQ(t.status().message().substr(0, want.size()), want) << t.status();
  EXPECT_EQ(t.status().message().find('\n'), std::string::npos);
}

// An error quotes a field of 1M characters as a short excerpt, not whole.
TEST(HfTokenizer, LongFieldQuotedAsExcerpt) {
  const std::string big(1 << 20, 'x');
  const std::string path = ::testing::TempDir() + "/long_model_type.json";
  std::ofstream(path) << R"({"model": {"type": ")" << big << R"(", "vocab": {}}})";
  auto t = LoadTokenizer(path);
  ASSERT_FALSE(t.ok());
  EXPECT_LT(t.status().message().size(), 600u) << t.status().message().substr(0, 600);
  EXPECT_NE(t.status().message().find("... (1048576 bytes)"), std::string::npos)
      << t.status().message().substr(0, 600);
}

}  // namespace
}  // namespace trainscope::tokenizer
