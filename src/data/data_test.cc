// Unit tests of the data module: readers, analysis rules, scan, clean, pack, stats.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "data/doc_analysis.h"
#include "data/spill.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "trainscope/data/clean.h"
#include "trainscope/data/feature_stats.h"
#include "trainscope/data/megatron.h"
#include "trainscope/data/pack.h"
#include "trainscope/data/reader.h"
#include "trainscope/data/scan.h"
#include "trainscope/tokenizer/tokenizer.h"

namespace trainscope::data {
namespace {

std::string Tmp(const std::string& name) { return ::testing::TempDir() + "/" + name; }

void WriteFile(const std::string& path, const std::string& data) {
  std::ofstream(path, std::ios::binary) << data;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string Zstd(const std::string& s) {
  std::string out(ZSTD_compressBound(s.size()), '\0');
  out.resize(ZSTD_compress(out.data(), out.size(), s.data(), s.size(), 3));
  return out;
}

struct Collected {
  std::vector<std::string> texts, ids;
  std::vector<uint64_t> lines;
  BadRecords bad;
};

Collected Read(const std::vector<std::string>& paths, ReaderOptions o = {}) {
  Collected c;
  auto inputs = ExpandInputs(paths, o.format);
  EXPECT_TRUE(inputs.ok()) << inputs.status();
  if (!inputs.ok()) return c;
  auto st = ReadCorpus(
      *inputs, o,
      [&](DocBatch&& b) {
        for (const auto& d : b.docs) {
          c.texts.emplace_back(b.Text(d));
          c.ids.emplace_back(b.Id(d));
          c.lines.push_back(d.line);
        }
        return true;
      },
      &c.bad);
  EXPECT_TRUE(st.ok()) << st;
  return c;
}

// A paragraph of real-looking English prose with distinct words per seed.
std::string Prose(int seed, int sentences = 12) {
  static const char* w[] = {"model",   "training", "data",     "loss",      "curve",     "batch",
                            "token",   "sequence", "gradient", "optimizer", "learning",  "rate",
                            "corpus",  "document", "length",   "padding",   "duplicate", "language",
                            "quality", "filter",   "memory",   "speed"};
  std::string s;
  uint64_t x = seed * 2654435761u + 17;
  for (int i = 0; i < sentences; ++i) {
    s += "The ";
    for (int k = 0; k < 9; ++k) {
      x = x * 6364136223846793005ULL + 1442695040888963407ULL;
      s += w[(x >> 33) % 22];
      s += k == 3 ? " and the " : " ";
    }
    s += "with care.";
    s += i % 4 == 3 ? "\n" : " ";
  }
  return s;
}

TEST(Reader, JsonlCountsBadRecordsWithLines) {
  const std::string p = Tmp("bad.jsonl");
  WriteFile(p,
            "{\"text\": \"hello world\", \"id\": \"a\"}\n"
            "{not json\n"
            "\n"
            "{\"body\": \"no text field\"}\n"
            "{\"text\": 5}\n"
            "{\"id\": 7, \"text\": \"second\\nline\"}\r\n"
            "{\"text\": \"bad \xff utf8\"}\n"
            "{\"text\": \"last without newline\"}");
  Collected c = Read({p});
  ASSERT_EQ(c.texts.size(), 3u);
  EXPECT_EQ(c.texts[1], "second\nline");
  EXPECT_EQ(c.ids[0], "a");
  EXPECT_EQ(c.ids[1], "7");
  EXPECT_EQ(c.lines[1], 6u);
  EXPECT_EQ(c.lines[2], 8u);
  EXPECT_EQ(c.bad.counts().at("invalid_json"), 1u);
  EXPECT_EQ(c.bad.counts().at("missing_text_field"), 1u);
  EXPECT_EQ(c.bad.counts().at("text_not_string"), 1u);
  EXPECT_EQ(c.bad.counts().at("invalid_utf8"), 1u);
  EXPECT_EQ(c.bad.examples()[0].rfind(p + ":2: invalid_json: ", 0), 0u) << c.bad.examples()[0];
}

// The ondemand side of the JSON policy (core/json_text.h): the corpus reader checks what it
// reads (the text), skips what it does not (numbers out of range, 100,000-deep values) in
// constant stack, and counts a line that is not an object; never a crash.
TEST(Reader, JsonlOutOfRangeNumbersAndDeepNestingAreSkippedOrCounted) {
  const std::string p = Tmp("policy.jsonl");
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  WriteFile(p, "{\"text\": \"a\", \"n\": 1e309, \"m\": 18446744073709551616, \"d\": " + deep +
                   "}\n{\"text\": 1e309}\n" + deep + "\n" + std::string(100000, '{') +
                   "\n{\"text\": \"c\"}\n");
  Collected c = Read({p});
  ASSERT_EQ(c.texts.size(), 2u);
  EXPECT_EQ(c.texts[0], "a");
  EXPECT_EQ(c.texts[1], "c");
  EXPECT_EQ(c.bad.counts().at("text_not_string"), 1u);
  EXPECT_EQ(c.bad.counts().at("invalid_json"), 2u);
}

// Raw JSONL blocks (the scan's path), mapped or read with pread and decoded one document
// at a time, give the documents, lines and bad records of the line reader, across block
// boundaries, a line longer than a block, an oversized line, CRLF endings and a last line
// without a newline.
TEST(Reader, RawBlocksMatchTheLineReader) {
  std::string s;
  for (int i = 0; i < 400; ++i) {
    if (i == 50) s += "{broken\n";
    if (i == 120) s += "{\"text\": \"" + std::string(70000, 'y') + "\"}\n";   // > one block
    if (i == 200) s += "{\"text\": \"" + std::string(300000, 'z') + "\"}\n";  // > the limit
    if (i == 300) s += "{\"text\": \"crlf line\", \"id\": \"c\"}\r\n";
    // Escapes (quotes, \\u00e9, newlines from Prose) so texts are unescaped, not views.
    s += "{\"id\": \"d" + std::to_string(i) + "\", \"text\": " +
         nlohmann::json("doc " + std::to_string(i) + " \"quoted\" caf\u00e9 " + Prose(i, 1 + i % 5))
             .dump(-1, ' ', /*ensure_ascii=*/i % 2 == 0) +
         "}\n";
  }
  s += "{\"text\": \"last without newline\"}";
  const std::string p = Tmp("raw_blocks.jsonl");
  WriteFile(p, s);
  ReaderOptions base;
  base.max_doc_bytes = 200000;
  base.batch_bytes = 1 << 16;  // many blocks
  const Collected want = Read({p}, base);
  ASSERT_EQ(want.texts.size(), 403u);
  auto inputs = ExpandInputs({p}, InputFormat::kAuto);
  ASSERT_TRUE(inputs.ok());
  for (bool use_mmap : {true, false}) {
    SCOPED_TRACE(use_mmap ? "mmap" : "pread");
    ReaderOptions o = base;
    o.raw_jsonl_blocks = true;
    o.raw_jsonl_mmap = use_mmap;
    JsonlBlockDecoder decoder(o);
    Collected got;
    int blocks = 0;
    auto st = ReadCorpus(
        *inputs, o,
        [&](DocBatch&& b) {
          if (!b.raw) {  // a batch with input bytes only (the skipped line)
            EXPECT_TRUE(b.docs.empty());
            got.bad.Merge(b.bad);
            return true;
          }
          EXPECT_EQ(b.raw_data != nullptr, use_mmap);
          ++blocks;
          decoder.ForEachDoc((*inputs)[0], &b,
                             [&](std::string_view text, std::string_view id, uint64_t line) {
                               got.texts.emplace_back(text);
                               got.ids.emplace_back(id);
                               got.lines.push_back(line);
                             });
          got.bad.Merge(b.bad);
          return true;
        },
        &got.bad);
    ASSERT_TRUE(st.ok()) << st;
    EXPECT_GE(blocks, 4);
    EXPECT_EQ(got.texts, want.texts);
    EXPECT_EQ(got.ids, want.ids);
    EXPECT_EQ(got.lines, want.lines);
    EXPECT_EQ(got.bad.counts(), want.bad.counts());
    EXPECT_EQ(got.bad.counts().at("oversized_record"), 1u);
    EXPECT_EQ(got.bad.counts().at("invalid_json"), 1u);
  }
}

// A pipe (`<(zcat ...)`, /dev/stdin) has no size to cut blocks from: with raw blocks on it
// is read as a stream, and gives every document (it once gave none).
TEST(Reader, PipeWithRawBlocksIsReadAsAStream) {
  std::string s;
  for (int i = 0; i < 3000; ++i) s += "{\"text\": \"piped document " + std::to_string(i) + "\"}\n";
  const std::string fifo = Tmp("corpus.fifo");
  ::unlink(fifo.c_str());
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  std::thread writer([&] { WriteFile(fifo, s); });
  ReaderOptions o;
  o.format = InputFormat::kJsonl;
  o.raw_jsonl_blocks = true;
  auto inputs = ExpandInputs({fifo}, o.format);
  ASSERT_TRUE(inputs.ok()) << inputs.status();
  size_t docs = 0;
  BadRecords bad;
  auto st = ReadCorpus(
      *inputs, o,
      [&](DocBatch&& b) {
        EXPECT_FALSE(b.raw);
        docs += b.docs.size();
        return true;
      },
      &bad);
  writer.join();
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(docs, 3000u);
  EXPECT_EQ(bad.total(), 0u);
}

// With the executable's handler installed, a mapped input that shrinks during the read is a
// one-line error naming the file, exit 2 (not a bare "Bus error"); the pread path
// (--no-mmap) is unaffected. Without it the library leaves SIGBUS alone.
TEST(ReaderDeathTest, MappedFileThatShrinksIsAnErrorNamingIt) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  std::string s;
  for (int i = 0; i < 20000; ++i) s += "{\"text\": \"document " + std::to_string(i) + "\"}\n";
  const std::string p = Tmp("shrinks.jsonl");
  auto read_corpus = [&](bool use_mmap, bool shrink) {
    WriteFile(p, s);
    auto inputs = ExpandInputs({p}, InputFormat::kAuto);
    ReaderOptions o;
    o.raw_jsonl_blocks = true;
    o.raw_jsonl_mmap = use_mmap;
    o.batch_bytes = 1 << 16;
    BadRecords bad;
    int blocks = 0;
    auto st = ReadCorpus(
        *inputs, o,
        [&](DocBatch&&) {
          if (++blocks == 1 && shrink) {
            EXPECT_EQ(truncate(p.c_str(), 0), 0);
          }
          return true;
        },
        &bad);
    return st.ok() ? blocks : -1;
  };
  // The library installs no handler: SIGBUS's disposition is the same after a mapped read
  // (checked with sigaction, so it holds under a sanitizer's own handler too).
  struct sigaction before = {};
  struct sigaction after = {};
  ASSERT_EQ(sigaction(SIGBUS, nullptr, &before), 0);
  EXPECT_GT(read_corpus(true, false), 1);
  ASSERT_EQ(sigaction(SIGBUS, nullptr, &after), 0);
  EXPECT_EQ(reinterpret_cast<void*>(before.sa_sigaction),
            reinterpret_cast<void*>(after.sa_sigaction));
  EXPECT_EQ(before.sa_flags, after.sa_flags);
  EXPECT_EXIT(
      {
        InstallMappedInputSigbusHandler();
        read_corpus(true, true);
      },
      ::testing::ExitedWithCode(2),
      "shrinks.jsonl: cannot read byte [0-9]+ of the memory-mapped input: the file "
      "shrank");
  EXPECT_EQ(read_corpus(false, true), 1);  // read() just sees the end of the file
}

TEST(Reader, TextLinesBlocksCompressionAndEmptyFiles) {
  const std::string lines = "one\ntwo\n\nthree\n";
  WriteFile(Tmp("t.txt"), lines);
  WriteFile(Tmp("t2.txt.zst"), Zstd(lines));
  WriteFile(Tmp("empty.txt"), "");
  {
    gzFile gz = gzopen(Tmp("t3.txt.gz").c_str(), "wb");
    gzwrite(gz, lines.data(), lines.size());
    gzclose(gz);
  }
  Collected c = Read({Tmp("t.txt"), Tmp("t2.txt.zst"), Tmp("t3.txt.gz"), Tmp("empty.txt")});
  EXPECT_EQ(c.texts, (std::vector<std::string>{"one", "two", "three", "one", "two", "three", "one",
                                               "two", "three"}));
  EXPECT_EQ(c.bad.counts().at("empty_file"), 1u);
  ReaderOptions blocks;
  blocks.text_blocks = true;
  Collected b = Read({Tmp("t.txt")}, blocks);
  EXPECT_EQ(b.texts, (std::vector<std::string>{"one\ntwo", "three"}));
  EXPECT_EQ(b.lines, (std::vector<uint64_t>{1, 4}));
}

TEST(Reader, TruncatedZstdAndOversizedLines) {
  std::string big;
  for (int i = 0; i < 20000; ++i)
    big += "{\"text\": \"document number " + std::to_string(i) + "\"}\n";
  std::string z = Zstd(big);
  WriteFile(Tmp("cut.jsonl.zst"), z.substr(0, z.size() / 2));
  Collected c = Read({Tmp("cut.jsonl.zst")});
  EXPECT_GT(c.texts.size(), 10u);
  EXPECT_LT(c.texts.size(), 20000u);
  EXPECT_EQ(c.bad.counts().count("truncated_stream"), 1u);
  for (size_t i = 0; i < c.texts.size(); ++i)
    EXPECT_EQ(c.texts[i], "document number " + std::to_string(i));

  // A 3 MB line with a 1 MB limit is skipped without being buffered; the next line is read.
  std::string huge = "{\"text\": \"" + std::string(3 << 20, 'x') + "\"}\n{\"text\": \"after\"}\n";
  WriteFile(Tmp("huge.jsonl"), huge);
  ReaderOptions o;
  o.max_doc_bytes = 1 << 20;
  Collected h = Read({Tmp("huge.jsonl")}, o);
  ASSERT_EQ(h.texts.size(), 1u);
  EXPECT_EQ(h.texts[0], "after");
  EXPECT_EQ(h.lines[0], 2u);
  EXPECT_EQ(h.bad.counts().at("oversized_record"), 1u);
}

TEST(Reader, MissingInputIsAnError) {
  auto r = ExpandInputs({Tmp("nope.jsonl")}, InputFormat::kAuto);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("nope.jsonl"), std::string::npos);
  EXPECT_FALSE(ExpandInputs({Tmp("*.doesnotexist")}, InputFormat::kAuto).ok());
}

// docs/formats.md: a Megatron dataset may be named by PREFIX (PREFIX.bin + PREFIX.idx).
TEST(Reader, MegatronDatasetByPrefix) {
  WriteFile(Tmp("mp.idx"), "x");
  WriteFile(Tmp("mp.bin"), "x");
  for (const std::string& arg : {Tmp("mp"), Tmp("mp.idx"), Tmp("mp.bin")}) {
    auto r = ExpandInputs({arg}, InputFormat::kAuto);
    ASSERT_TRUE(r.ok()) << arg << ": " << r.status();
    ASSERT_EQ(r->size(), 1u);
    EXPECT_EQ((*r)[0].format, InputFormat::kMegatron);
    EXPECT_EQ((*r)[0].path, Tmp("mp.idx"));
  }
  // Both spellings of one dataset are one input.
  auto both = ExpandInputs({Tmp("mp"), Tmp("mp.bin")}, InputFormat::kAuto);
  ASSERT_TRUE(both.ok());
  EXPECT_EQ(both->size(), 1u);
  // A prefix with neither file is still "no such file"; a forced text format is not a prefix.
  EXPECT_EQ(ExpandInputs({Tmp("mq")}, InputFormat::kAuto).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_FALSE(ExpandInputs({Tmp("mp")}, InputFormat::kText).ok());
}

uint32_t FlagsOf(const std::string& text) {
  AnalyzerOptions o;
  o.near_dup = false;
  DocAnalyzer a(o);
  DocResult r;
  a.Analyze(text, -1, &r, nullptr, nullptr);
  return r.flags;
}
bool Has(uint32_t flags, int f) { return (flags >> f) & 1; }

// The junk rules at their edges: what they catch, and the real text next to it they keep.
TEST(Analysis, JunkRulesCatchJunkAndKeepTextBesideIt) {
  EXPECT_TRUE(Has(FlagsOf("aaaa"), kFlagJunkRepeatedChar));
  EXPECT_TRUE(Has(FlagsOf("\xE3\x81\x82\xE3\x81\x82 \xE3\x81\x82\xE3\x81\x82"),
                  kFlagJunkRepeatedChar));  // a multi-byte character
  EXPECT_TRUE(Has(FlagsOf(std::string(40, '=') + "x"), kFlagJunkRepeatedChar));  // >= 90%
  EXPECT_FALSE(Has(FlagsOf("aaa"), kFlagJunkRepeatedChar));                      // < 4 copies
  EXPECT_FALSE(Has(FlagsOf("Zzzz"), kFlagJunkRepeatedChar));
  EXPECT_FALSE(
      Has(FlagsOf("-----\nThe results are in, and they are good."), kFlagJunkRepeatedChar));

  EXPECT_TRUE(Has(FlagsOf("<html><body><p>Hi</p></body></html>"), kFlagJunkHtml));
  EXPECT_FALSE(Has(FlagsOf("#include <stdio.h>\n#include <stdlib.h>\nint main(){}"),
                   kFlagJunkHtml));  // no closing tag
  EXPECT_FALSE(Has(FlagsOf("<p>A paragraph of real prose, wrapped in one element only.</p>"),
                   kFlagJunkHtml));  // tags under half the text

  EXPECT_TRUE(Has(FlagsOf("Lorem ipsum dolor sit amet, consectetur adipiscing elit."),
                  kFlagJunkLoremIpsum));
  EXPECT_FALSE(Has(FlagsOf("Neque porro quisquam est, qui dolorem ipsum quia dolor sit amet."),
                   kFlagJunkLoremIpsum));  // Cicero: "dolorem ipsum" is not the placeholder
  const uint32_t quoted = FlagsOf(
      "def test_wrap():\n    text = 'Lorem ipsum dolor sit amet'\n    lines = wrap(text, "
      "width=20)\n    assert all(len(line) <= 20 for line in lines)\n");
  EXPECT_FALSE(Has(quoted, kFlagJunkLoremIpsum));
  EXPECT_TRUE(Has(quoted, kFlagC4LoremIpsum));  // C4's rule drops any mention

  // Every content group drops an empty document, which none of its rules is evaluated on.
  for (const char* group :
       {"gopher", "gopher_quality", "gopher_repetition", "c4", "fineweb", "junk"}) {
    EXPECT_TRUE(Has(*ParseRules(group), kFlagEmpty)) << group;
  }
  EXPECT_FALSE(Has(*ParseRules("encoding"), kFlagEmpty));
  EXPECT_TRUE(Has(*ParseRules(kDefaultCleanRules), kFlagJunkHtml));
  EXPECT_TRUE(Has(FlagsOf(" \n\t "), kFlagEmpty));
}

std::string Normalised(const std::string& text, int simd, uint32_t* chars, uint32_t* words) {
  std::string out(text.size() + 1, '\0');
  out.resize(NormaliseForExactHash(text, out.data(), chars, words, simd));
  return out;
}

TEST(Analysis, ExactHashNormalisation) {
  uint32_t chars = 0, words = 0;
  EXPECT_EQ(Normalised("  Hello,\t\tWORLD \n\r\n caf\xC3\xA9  ", 2, &chars, &words),
            "hello, world caf\xC3\xA9");
  EXPECT_EQ(chars, 26u);
  EXPECT_EQ(words, 3u);
  EXPECT_EQ(Normalised(" \n\t ", 2, &chars, &words), "");
  EXPECT_EQ(words, 0u);
}

// The AVX2 pass (32-byte blocks, pext compaction) and the AVX-512 pass (64-byte blocks,
// byte compress) must match the scalar pass byte for byte, whatever the mix of whitespace
// runs, case, UTF-8 and block boundaries. Levels the CPU lacks run as the best it has. The
// same for the word boundaries (FindWords).
TEST(Analysis, SimdNormalisationMatchesScalar) {
  const std::string alphabet[] = {" ",
                                  "  ",
                                  "\n",
                                  "\t",
                                  "\r\n",
                                  "\v",
                                  "\f",
                                  "\x08",
                                  "\x0e",
                                  "A",
                                  "Z",
                                  "a",
                                  "z",
                                  "@",
                                  "[",
                                  "`",
                                  "{",
                                  "0",
                                  "\xC3\xA9",
                                  "\xE2\x82\xAC",
                                  "\xF0\x9F\x98\x80",
                                  "\x7f",
                                  "\xff"};
  uint64_t state = 42;
  auto next = [&] {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return state >> 33;
  };
  std::printf("SIMD level of this build and CPU: %d\n", NormaliseSimdLevel());
  for (int trial = 0; trial < 3000; ++trial) {
    std::string text;
    const size_t len = next() % 400;
    const int bias = static_cast<int>(next() % 3);  // 0: many spaces, 1: words, 2: uniform
    while (text.size() < len) {
      const size_t k = next() % std::size(alphabet);
      if (bias == 1 && k < 9 && next() % 6) continue;
      if (bias == 0 && k >= 9 && next() % 2) continue;
      text += alphabet[k];
    }
    uint32_t c1 = 0, w1 = 0;
    const std::string scalar = Normalised(text, 0, &c1, &w1);
    {  // MinHash tokens: SIMD vs scalar vs a plain split
      const WordBreak brk = WordBreak::kAsciiPunctuation;
      std::vector<uint32_t> ts0, tl0, ts1, tl1;
      FindWords(text, brk, &ts0, &tl0, 0);
      FindWords(text, brk, &ts1, &tl1, 1);
      ASSERT_EQ(ts1, ts0) << "trial " << trial;
      ASSERT_EQ(tl1, tl0) << "trial " << trial;
      std::vector<uint32_t> want_start, want_len;
      auto sep = [](unsigned char c) { return c < 0x80 && !std::isalnum(c); };
      for (size_t i = 0; i < text.size();) {
        while (i < text.size() && sep(text[i])) ++i;
        const size_t b = i;
        while (i < text.size() && !sep(text[i])) ++i;
        if (i > b) {
          want_start.push_back(static_cast<uint32_t>(b));
          want_len.push_back(static_cast<uint32_t>(i - b));
        }
      }
      ASSERT_EQ(ts0, want_start) << "trial " << trial;
      ASSERT_EQ(tl0, want_len) << "trial " << trial;
    }
    std::vector<uint32_t> s0, l0, s1, l1;
    FindWords(text, WordBreak::kWhitespace, &s0, &l0, 0);
    FindWords(text, WordBreak::kWhitespace, &s1, &l1, 1);
    ASSERT_EQ(s0.size(), w1) << "trial " << trial;
    ASSERT_EQ(l0.size(), w1) << "trial " << trial;
    ASSERT_EQ(s1, s0) << "trial " << trial;
    ASSERT_EQ(l1, l0) << "trial " << trial;
    for (size_t k = 0; k < s0.size(); ++k) {  // each is a maximal non-whitespace run
      ASSERT_GT(l0[k], 0u);
      ASSERT_TRUE(s0[k] == 0 || std::isspace(static_cast<unsigned char>(text[s0[k] - 1])));
      ASSERT_TRUE(s0[k] + l0[k] == text.size() ||
                  std::isspace(static_cast<unsigned char>(text[s0[k] + l0[k]])));
    }
    for (int level = 1; level <= 2; ++level) {
      uint32_t c2 = 0, w2 = 0;
      const std::string simd = Normalised(text, level, &c2, &w2);
      ASSERT_EQ(simd, scalar) << "trial " << trial << " level " << level;
      ASSERT_EQ(c2, c1) << "trial " << trial << " level " << level;
      ASSERT_EQ(w2, w1) << "trial " << trial << " level " << level;
    }
  }
}

// The scalar MinHash minima are min_k (a_i x_k + b_i) mod 2^32, and the AVX2 and AVX-512
// ones equal them (any shingle count and any number of permutations, including those past
// the last full register; shingles and multipliers with high bits set exercise the wrapping
// multiply and the unsigned compare).
TEST(Analysis, SimdMinHashMatchesScalar) {
  uint64_t state = 7;
  auto next = [&] {
    state += 0x9e3779b97f4a7c15ULL;
    uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    return z ^ (z >> 27);
  };
  for (int p : {1, 4, 7, 8, 16, 20, 40, 112, 130}) {
    std::vector<uint32_t> a(p), b(p);
    for (int i = 0; i < p; ++i) {
      a[i] = static_cast<uint32_t>(next()) | 1;
      b[i] = static_cast<uint32_t>(next());
    }
    for (size_t n : {size_t{0}, size_t{1}, size_t{5}, size_t{333}}) {
      std::vector<uint32_t> x(n);
      for (auto& v : x) v = static_cast<uint32_t>(next());
      if (n >= 5) {  // extremes: products and sums that wrap, minima at 0 and 2^32-1
        x[0] = 0;
        x[1] = ~uint32_t{0};
        x[2] = uint32_t{1} << 31;
      }
      std::vector<uint32_t> scalar(p);
      MinHashMins(x.data(), n, a.data(), b.data(), p, scalar.data(), 0);
      for (int i = 0; i < p; ++i) {
        uint64_t want = UINT32_MAX;
        for (uint32_t v : x)
          want = std::min<uint64_t>(want, (uint64_t{a[i]} * v + b[i]) % (1ull << 32));
        ASSERT_EQ(scalar[i], want) << "p " << p << " n " << n << " i " << i;
      }
      for (int level = 1; level <= 2; ++level) {
        std::vector<uint32_t> simd(p);
        MinHashMins(x.data(), n, a.data(), b.data(), p, simd.data(), level);
        ASSERT_EQ(simd, scalar) << "p " << p << " n " << n << " level " << level;
      }
    }
  }
}

// 32-bit permutations are a sound MinHash family: for pairs of random shingle sets with a
// known Jaccard similarity J, the share of agreeing minima over 112 permutations averages
// J and varies as a binomial would (sqrt(J(1-J)/112)), i.e. the permutations behave as
// independent min-wise hashes (a family whose order barely depends on a_i, such as the high
// half of a_i x, fails both checks).
TEST(Analysis, MinHashAgreementEstimatesJaccard) {
  uint64_t state = 11;
  auto next = [&] {
    state += 0x9e3779b97f4a7c15ULL;
    uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  };
  constexpr int kPerms = 112, kTrials = 400;
  std::vector<uint32_t> a(kPerms), b(kPerms);
  for (int i = 0; i < kPerms; ++i) {
    a[i] = static_cast<uint32_t>(next()) | 1;
    b[i] = static_cast<uint32_t>(next());
  }
  // |A ∩ B| = shared, |A \ B| = |B \ A| = own: J = shared / (shared + 2 own).
  for (auto [shared, own] : {std::pair<int, int>{80, 10}, {60, 20}, {50, 50}}) {
    const double j = static_cast<double>(shared) / (shared + 2 * own);
    double sum = 0, sum_sq = 0;
    for (int t = 0; t < kTrials; ++t) {
      std::vector<uint32_t> x, y;
      for (int k = 0; k < shared; ++k) {
        const auto v = static_cast<uint32_t>(next());
        x.push_back(v);
        y.push_back(v);
      }
      for (int k = 0; k < own; ++k) x.push_back(static_cast<uint32_t>(next()));
      for (int k = 0; k < own; ++k) y.push_back(static_cast<uint32_t>(next()));
      std::vector<uint32_t> mx(kPerms), my(kPerms);
      MinHashMins(x.data(), x.size(), a.data(), b.data(), kPerms, mx.data(), 1);
      MinHashMins(y.data(), y.size(), a.data(), b.data(), kPerms, my.data(), 1);
      int agree = 0;
      for (int i = 0; i < kPerms; ++i) agree += mx[i] == my[i];
      const double est = static_cast<double>(agree) / kPerms;
      sum += est;
      sum_sq += est * est;
    }
    const double mean = sum / kTrials, var = sum_sq / kTrials - mean * mean;
    const double binomial = j * (1 - j) / kPerms;
    EXPECT_NEAR(mean, j, 4 * std::sqrt(binomial / kTrials)) << "J " << j;
    EXPECT_LT(var, 1.4 * binomial) << "J " << j;
    EXPECT_GT(var, 0.6 * binomial) << "J " << j;
  }
}

// SortBandRecords orders as std::sort by (hash, doc) does: sizes below and above the
// bucketed path, uniform hashes, runs of equal hashes (candidate buckets), hashes that all
// share their top bits (one bucket), and docs in any order.
TEST(Analysis, BandRecordSortMatchesComparisonSort) {
  std::mt19937_64 rng(3);
  auto less = [](const BandRecord& x, const BandRecord& y) {
    return x.hash != y.hash ? x.hash < y.hash : x.doc < y.doc;
  };
  for (size_t n : {size_t{0}, size_t{1}, size_t{100}, size_t{4095}, size_t{4096}, size_t{70000}}) {
    for (int shape = 0; shape < 3; ++shape) {
      std::vector<BandRecord> recs(n);
      for (size_t i = 0; i < n; ++i) {
        uint64_t h = rng();
        if (shape == 1) h = rng() % 50 == 0 ? 42 : (rng() % 3 == 0 ? h % 1000 : h);
        if (shape == 2) h &= 0xFFFF;  // every hash in the bucket of 0
        recs[i].hash = h;
        recs[i].doc = static_cast<uint32_t>(rng());
      }
      std::vector<BandRecord> want = recs;
      std::sort(want.begin(), want.end(), less);
      SortBandRecords(&recs);
      ASSERT_EQ(recs.size(), want.size());
      for (size_t i = 0; i < n; ++i) {
        const uint64_t got_hash = recs[i].hash, want_hash = want[i].hash;  // packed: copies
        const uint32_t got_doc = recs[i].doc, want_doc = want[i].doc;
        ASSERT_EQ(got_hash, want_hash) << "n " << n << " shape " << shape << " at " << i;
        ASSERT_EQ(got_doc, want_doc) << "n " << n << " shape " << shape << " at " << i;
      }
    }
  }
}

// The cache is two-way set-associative: with one set (2 slots), two documents stay cached
// together, and a third replaces the one used less recently.
TEST(Analysis, ResultCacheKeepsTwoDocumentsPerSet) {
  DocResultCache cache(2, 1, 1);
  auto doc = [](uint64_t hash) {
    DocResult r;
    r.raw_hash = hash;
    r.bytes = 10;
    r.chars = static_cast<uint32_t>(hash);
    return r;
  };
  DocResult got;
  bool from_text = false;
  auto has = [&](uint64_t hash) {
    return cache.Lookup(hash, 10, &got, &from_text, nullptr, nullptr) && got.chars == hash;
  };
  cache.Insert(doc(1), true, nullptr, nullptr);
  cache.Insert(doc(2), true, nullptr, nullptr);
  EXPECT_TRUE(has(1));
  EXPECT_TRUE(has(2));
  EXPECT_TRUE(has(1));                           // 1 is now the more recent
  cache.Insert(doc(3), true, nullptr, nullptr);  // replaces 2
  EXPECT_TRUE(has(1));
  EXPECT_TRUE(has(3));
  EXPECT_FALSE(has(2));
  cache.Insert(doc(3), true, nullptr, nullptr);  // already there: stays in its slot
  EXPECT_TRUE(has(1));
  EXPECT_FALSE(cache.Lookup(1, 11, &got, &from_text, nullptr, nullptr));  // other length
}

// The exact-duplicate result cache gives what a fresh analysis gives: documents repeated
// near and far (a 4-slot cache shared by two analyzers taking turns, so slots are
// overwritten and some repeats miss), given token counts that differ between copies, one
// without shingles, one with invalid UTF-8.
TEST(Analysis, ResultCacheMatchesFreshAnalysis) {
  std::vector<std::string> distinct;
  for (int i = 0; i < 9; ++i) distinct.push_back(Prose(i, 1 + i % 4));
  distinct.push_back("...");
  distinct.push_back("bad \xff\xfe bytes and more words here.");
  std::vector<std::pair<std::string, int64_t>> docs;
  for (int round = 0; round < 3; ++round) {
    for (size_t k = 0; k < distinct.size(); ++k) {
      const size_t pick = (k * (round + 1)) % distinct.size();
      docs.emplace_back(distinct[pick], round == 2 && k % 2 == 0 ? int64_t(100 + k) : -1);
      if (k % 3 == 0) docs.push_back(docs.back());  // a repeat right after: a hit
    }
  }
  AnalyzerOptions fresh_opt, cached_opt;
  DocResultCache cache(3, fresh_opt.bands, fresh_opt.bands * fresh_opt.rows);
  cached_opt.result_cache = &cache;
  DocAnalyzer fresh(fresh_opt), cached0(cached_opt), cached1(cached_opt);
  const int p = fresh.permutations(), bands = fresh_opt.bands;
  for (size_t d = 0; d < docs.size(); ++d) {
    DocResult r0, r1;
    std::vector<uint64_t> b0(bands), b1(bands);
    std::vector<uint16_t> s0(p), s1(p);
    fresh.Analyze(docs[d].first, docs[d].second, &r0, b0.data(), s0.data());
    (d % 2 ? cached1 : cached0).Analyze(docs[d].first, docs[d].second, &r1, b1.data(), s1.data());
    const auto fields = [](const DocResult& r) {
      return std::make_tuple(r.raw_hash, r.norm_hash, r.bytes, r.chars, r.words, r.tokens, r.flags,
                             r.lang, r.has_signature);
    };
    ASSERT_EQ(fields(r0), fields(r1)) << "doc " << d;
    ASSERT_EQ(r1.tokens, docs[d].second >= 0 ? uint64_t(docs[d].second) : docs[d].first.size());
    if (r0.has_signature) {
      ASSERT_EQ(b0, b1) << "doc " << d;
      ASSERT_EQ(s0, s1) << "doc " << d;
    }
  }
  EXPECT_GT(cache.hits(), 0u);
  EXPECT_LT(cache.hits(), docs.size() - distinct.size());  // some repeats evicted
}

TEST(Analysis, CleanProseHasNoEncodingOrTruncationFlags) {
  const uint32_t f = FlagsOf(Prose(1));
  EXPECT_FALSE(Has(f, kFlagTruncated));
  EXPECT_FALSE(Has(f, kFlagMojibake));
  EXPECT_FALSE(Has(f, kFlagControlChars));
  EXPECT_FALSE(Has(f, kFlagMixedLanguage));
  EXPECT_FALSE(Has(f, kFlagGopherShortDoc));
  EXPECT_FALSE(Has(f, kFlagGopherStopWords));
}

TEST(Analysis, CorruptionsAreFlagged) {
  const std::string p = Prose(2);
  EXPECT_TRUE(Has(FlagsOf(p.substr(0, p.size() / 2 + 7) + "the model and"), kFlagTruncated));
  EXPECT_TRUE(Has(FlagsOf(p + " Caf\xC3\x83\xC2\xA9 na\xC3\x83\xC2\xAFve."), kFlagMojibake));
  EXPECT_TRUE(Has(FlagsOf(p + " bell\x07."), kFlagControlChars));
  EXPECT_TRUE(Has(FlagsOf("bad \xff\xfe bytes."), kFlagInvalidUtf8));
  EXPECT_TRUE(Has(FlagsOf("too short."), kFlagGopherShortDoc));
  EXPECT_TRUE(Has(FlagsOf(p + " lorem ipsum dolor."), kFlagC4LoremIpsum));
  std::string rep;
  for (int i = 0; i < 30; ++i) rep += "buy cheap watches now\n";
  const uint32_t r = FlagsOf(rep);
  EXPECT_TRUE(Has(r, kFlagGopherDupLines));
  EXPECT_TRUE(Has(r, kFlagFineWebCharDup));
  const std::string german =
      "Die Daten werden vor dem Training sorgfältig geprüft, damit das Modell nicht auf doppelten "
      "Texten lernt. Wenn die Verlustkurve zu schnell fällt, liegt das oft an Duplikaten im "
      "Korpus. "
      "Deshalb entfernen wir doppelte Dokumente und prüfen die Sprache jedes Abschnitts einzeln, "
      "bevor wir die Sequenzen für das Training zusammenstellen und speichern.";
  EXPECT_TRUE(Has(FlagsOf(p + "\n\n" + german + " " + german), kFlagMixedLanguage));
  EXPECT_FALSE(Has(FlagsOf(german + " " + german), kFlagMixedLanguage));
}

TEST(Analysis, RuleNames) {
  EXPECT_EQ(FlagGroupMask("truncated"), 1u << kFlagTruncated);
  EXPECT_NE(FlagGroupMask("gopher") & (1u << kFlagGopherDupNgram), 0u);
  EXPECT_EQ(FlagGroupMask("nonsense"), 0u);
  EXPECT_FALSE(ParseRules("gopher,bogus").ok());
  EXPECT_EQ(*ParseRules("none"), 0u);
}

TEST(Padding, HandComputed) {
  // L = 4, B = 2: lengths 1, 3, 4, 6.
  auto p = PaddingWaste({1, 3, 4, 6}, 4, 2);
  ASSERT_EQ(p.size(), 4u);
  EXPECT_EQ(p[0].name, "pad_to_max");
  EXPECT_DOUBLE_EQ(p[0].pad_fraction, 1.0 - 12.0 / 16);  // 1+3+4+4 real
  EXPECT_EQ(p[0].truncated_tokens, 2u);
  EXPECT_DOUBLE_EQ(p[1].pad_fraction, 1.0 - 12.0 / (2 * 3 + 2 * 4));
  EXPECT_EQ(p[2].sequences, 4u);  // 14 tokens -> 4 chunks
  EXPECT_DOUBLE_EQ(p[2].pad_fraction, 1.0 - 14.0 / 16);
  EXPECT_EQ(p[3].sequences, 4u);  // full: 4, 4 | rest 3, 2, 1 -> {3,1}, {2}
  EXPECT_EQ(p[3].split_documents, 1u);
}

// A corpus with planted exact, normalised and near duplicates.
std::string PlantedCorpus() {
  std::string s;
  auto add = [&](const std::string& id, const std::string& text) {
    s += nlohmann::json({{"id", id}, {"text", text}}).dump() + "\n";
  };
  for (int i = 0; i < 20; ++i) add("d" + std::to_string(i), Prose(100 + i));
  add("exact-of-d3", Prose(103));
  add("case-of-d4", "  " + Prose(104) + "  ");
  std::string near = Prose(105, 40);
  add("d5-long", near);
  std::string edited = near;
  edited.replace(edited.find("The "), 4, "One ");
  add("near-of-d5-long", edited);
  return s;
}

ScanOptions FastOptions() {
  ScanOptions o;
  o.threads = 2;
  o.progress = false;
  o.batch_size = 4;
  o.seq_len = 256;
  return o;
}

TEST(Scan, FindsPlantedDuplicatesAndWritesVerdicts) {
  WriteFile(Tmp("planted.jsonl"), PlantedCorpus());
  auto inputs = ExpandInputs({Tmp("planted.jsonl")}, InputFormat::kAuto);
  ASSERT_TRUE(inputs.ok());
  for (int threads : {1, 2}) {
    ScanOptions o = FastOptions();
    o.threads = threads;
    o.verdicts_path = Tmp("verdicts.jsonl");
    auto r = RunScan(*inputs, o);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->docs, 24u);
    EXPECT_EQ(r->exact_duplicate_docs, 1u);
    EXPECT_EQ(r->normalized_duplicate_docs, 2u);
    EXPECT_EQ(r->near_duplicate_docs, 3u);  // exact + normalised + edited
    EXPECT_EQ(r->lang_docs.at("en"), 24u);
    std::istringstream v(ReadAll(Tmp("verdicts.jsonl")));
    std::vector<nlohmann::json> lines;
    for (std::string l; std::getline(v, l);) lines.push_back(nlohmann::json::parse(l));
    ASSERT_EQ(lines.size(), 24u);
    EXPECT_EQ(lines[20]["id"], "exact-of-d3");
    EXPECT_EQ(lines[20]["exact_dup_of"], 3);
    EXPECT_EQ(lines[20]["near_dup_of"], 3);
    EXPECT_TRUE(lines[21]["exact_dup_of"].is_null());
    EXPECT_EQ(lines[21]["near_dup_of"], 4);
    EXPECT_EQ(lines[23]["near_dup_of"], 22);
    EXPECT_TRUE(lines[0]["near_dup_of"].is_null());
    // The same references by id.
    EXPECT_EQ(lines[20]["exact_dup_of_id"], lines[3]["id"]);
    EXPECT_EQ(lines[20]["near_dup_of_id"], lines[3]["id"]);
    EXPECT_TRUE(lines[21]["exact_dup_of_id"].is_null());
    EXPECT_EQ(lines[21]["near_dup_of_id"], lines[4]["id"]);
    EXPECT_EQ(lines[23]["near_dup_of_id"], lines[22]["id"]);
    EXPECT_TRUE(lines[0]["near_dup_of_id"].is_null());
    EXPECT_EQ(lines[0]["lang"], "en");
    EXPECT_TRUE(lines[0]["flags"].is_array());
    nlohmann::json j = ScanResultToJson(*r, o);
    EXPECT_EQ(j["docs"], 24);
    EXPECT_EQ(j["near_duplicate_docs"], 3);
    EXPECT_EQ(j["padding"]["strategies"].size(), 4u);
  }
}

TEST(Scan, ProblemsAreFindingsWithTheirSentences) {
  ScanResult r;
  r.docs = 100;
  r.near_duplicate_docs = 12;
  r.flagged_docs = 30;
  ScanOptions o;
  nlohmann::json found = nlohmann::json::array();
  for (const Finding& f : FindingsFrom(r, o)) found.push_back(FindingToJson(f));
  EXPECT_EQ(found, nlohmann::json::parse(R"js([
    {"severity": "error", "id": "data.duplicates", "evidence": "12 of 100 documents",
     "title": "12.00% of documents are duplicates (threshold 5.00%): the loss will fall faster than the model improves",
     "fix": "run `trainscope data clean`."},
    {"severity": "error", "id": "data.noise", "evidence": "30 of 100 documents",
     "title": "30.00% of documents trip a noise rule (threshold 20.00%)",
     "fix": "review the flags above and run `trainscope data clean --rules ...`."}])js"));
  const std::vector<std::string> p = ScanProblems(r, o);
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0],
            "12.00% of documents are duplicates (threshold 5.00%): the loss will fall faster than "
            "the model improves; run `trainscope data clean`.");
  EXPECT_EQ(p[1],
            "30.00% of documents trip a noise rule (threshold 20.00%); review the flags above and "
            "run `trainscope data clean --rules ...`.");
  o.near_dup = false;  // exact duplicates only (none here), no noise rules
  o.noise = false;
  EXPECT_TRUE(FindingsFrom(r, o).empty());
}

// --exact-only (no noise rules, language id or MinHash) takes a separate one-pass path for
// the normalised hash and counts; every field it reports must equal the full scan's.
TEST(Scan, ExactOnlyModeMatchesFullScan) {
  std::string s = PlantedCorpus();
  auto add = [&](const std::string& id, const std::string& text) {
    s += nlohmann::json({{"id", id}, {"text", text}}).dump() + "\n";
  };
  // Edge cases of the normaliser: case, tabs/CR/FF/VT runs, leading and trailing
  // whitespace, multi-byte UTF-8, whitespace-only and empty texts, long unbroken words.
  add("u1", "Grüße aus Köln — ÄÖÜ straße\t\tEnde\r\n");
  add("u2", "  grüße AUS köln — ÄÖÜ STRAßE ende");
  add("u3", "GRÜßE aus\fköln\v— äöü straße ende  ");  // non-ASCII is not case-folded
  add("ws", " \t\n ");
  add("empty", "");
  add("long", std::string(100, 'A') + " " + std::string(37, 'b') + "\n\n" + "日本語のテキスト");
  add("long-copy", std::string(100, 'a') + "\t" + std::string(37, 'B') + " " + "日本語のテキスト");
  add("esc", "quote \" backslash \\ and unicode \u00e9 end");
  add("esc-copy", "QUOTE \" BACKSLASH \\ AND UNICODE \u00e9 END");
  WriteFile(Tmp("exact_only.jsonl"), s);
  auto inputs = ExpandInputs({Tmp("exact_only.jsonl")}, InputFormat::kAuto);
  ASSERT_TRUE(inputs.ok());
  for (bool full_near_dup : {false, true}) {
    ScanOptions full = FastOptions();
    full.near_dup = full_near_dup;
    full.keep_doc_arrays = true;
    ScanOptions exact = FastOptions();
    exact.near_dup = exact.noise = exact.language = false;
    exact.keep_doc_arrays = true;
    auto a = RunScan(*inputs, full);
    auto b = RunScan(*inputs, exact);
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(b->docs, 33u);
    EXPECT_EQ(b->exact_duplicate_docs, 1u);
    EXPECT_EQ(b->normalized_duplicate_docs, 6u);  // planted 2, u2, empty (= ws), long, esc
    EXPECT_EQ(a->docs, b->docs);
    EXPECT_EQ(a->bytes, b->bytes);
    EXPECT_EQ(a->chars, b->chars);
    EXPECT_EQ(a->words, b->words);
    EXPECT_EQ(a->tokens, b->tokens);
    EXPECT_EQ(a->exact_duplicate_docs, b->exact_duplicate_docs);
    EXPECT_EQ(a->normalized_duplicate_docs, b->normalized_duplicate_docs);
    EXPECT_EQ(a->doc_chars, b->doc_chars);
    EXPECT_EQ(a->doc_tokens, b->doc_tokens);
    EXPECT_EQ(a->doc_exact_of, b->doc_exact_of);
    const nlohmann::json ja = ScanResultToJson(*a, full), jb = ScanResultToJson(*b, exact);
    EXPECT_EQ(ja["length"], jb["length"]);
    EXPECT_EQ(ja["padding"], jb["padding"]);
    if (!full_near_dup) {
      // Same clusters (exact + normalised copies) and so the same per-batch ratios.
      EXPECT_EQ(ja["batch_duplicates"], jb["batch_duplicates"]);
      EXPECT_EQ(a->doc_near_of, b->doc_near_of);
    }
    EXPECT_TRUE(jb["languages"].empty());
    EXPECT_FALSE(ja["languages"].empty());
  }
}

TEST(Clean, OutputRescansWithoutDuplicates) {
  WriteFile(Tmp("planted2.jsonl"), PlantedCorpus());
  auto inputs = ExpandInputs({Tmp("planted2.jsonl")}, InputFormat::kAuto);
  ASSERT_TRUE(inputs.ok());
  CleanOptions co;
  co.scan = FastOptions();
  co.output = Tmp("cleaned.jsonl");
  co.drop_flags = *ParseRules("encoding,empty");
  auto rep = RunClean(*inputs, co);
  ASSERT_TRUE(rep.ok()) << rep.status();
  EXPECT_EQ(rep->docs_before, 24u);
  EXPECT_EQ(rep->docs_after, 21u);
  const std::string out = ReadAll(Tmp("cleaned.jsonl"));
  EXPECT_NE(out.find("\"id\":\"d5-long\""), std::string::npos);  // original lines kept verbatim
  EXPECT_EQ(out.find("near-of-d5-long"), std::string::npos);
  auto again = ExpandInputs({Tmp("cleaned.jsonl")}, InputFormat::kAuto);
  auto r = RunScan(*again, FastOptions());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->docs, 21u);
  EXPECT_EQ(r->exact_duplicate_docs, 0u);
  EXPECT_EQ(r->near_duplicate_docs, 0u);
}

TEST(Megatron, WriteReadRoundTripAndValidation) {
  const std::string prefix = Tmp("ds");
  std::vector<uint16_t> tokens = {1, 2, 3, 4, 5, 6, 256};
  WriteFile(prefix + ".bin",
            std::string(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 2));
  ASSERT_TRUE(WriteMegatronIndex(prefix, MegatronDType::kUint16, {3, 4}, {0, 1, 2}).ok());
  auto idx = ReadMegatronIndex(prefix);
  ASSERT_TRUE(idx.ok()) << idx.status();
  EXPECT_EQ(idx->dtype_code, 8);
  EXPECT_EQ(idx->lengths, (std::vector<int32_t>{3, 4}));
  EXPECT_EQ(idx->pointers, (std::vector<int64_t>{0, 6}));
  EXPECT_EQ(ReadAll(prefix + ".idx").size(), 34u + 12 * 2 + 8 * 3);
  std::FILE* bin = std::fopen((prefix + ".bin").c_str(), "rb");
  std::vector<int64_t> seq;
  ASSERT_TRUE(ReadMegatronSequence(bin, *idx, 1, &seq).ok());
  std::fclose(bin);
  EXPECT_EQ(seq, (std::vector<int64_t>{4, 5, 6, 256}));
  // Scan reads it as two documents decoded byte-level.
  Collected c = Read({prefix + ".idx"});
  ASSERT_EQ(c.texts.size(), 2u);
  EXPECT_EQ(c.texts[0], std::string("\x01\x02\x03"));
  // Corruption: .bin one token short.
  WriteFile(prefix + ".bin", std::string(reinterpret_cast<const char*>(tokens.data()), 12));
  auto bad = ReadMegatronIndex(prefix);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kDataLoss);
  WriteFile(prefix + ".idx", "MMIDIDX\0\0garbage");
  EXPECT_FALSE(ReadMegatronIndex(prefix).ok());
}

// Packs docs of known lengths and checks every token lands once, in order within a doc.
TEST(Pack, ConcatAndBestFitRoundTrip) {
  std::string corpus;
  std::vector<std::string> docs;
  for (int i = 0; i < 40; ++i) {
    std::string d(1 + (i * 37) % 90, static_cast<char>('a' + i % 26));
    docs.push_back(d);
    corpus += d + "\n";
  }
  WriteFile(Tmp("pack.txt"), corpus);
  auto inputs = ExpandInputs({Tmp("pack.txt")}, InputFormat::kAuto);
  ASSERT_TRUE(inputs.ok());
  auto tok = tokenizer::NewByteTokenizer();
  uint64_t total = 0;
  for (const auto& d : docs) total += d.size() + 1;
  for (auto mode : {PackOptions::kConcat, PackOptions::kBestFit}) {
    PackOptions o;
    o.tokenizer = tok.get();
    o.seq_len = 64;
    o.mode = mode;
    o.progress = false;
    o.max_open_bins = 3;
    o.output_prefix = Tmp(mode == PackOptions::kConcat ? "packed_concat" : "packed_bf");
    auto rep = RunPack(*inputs, o);
    ASSERT_TRUE(rep.ok()) << rep.status();
    EXPECT_EQ(rep->docs, 40u);
    EXPECT_EQ(rep->tokens, total);
    EXPECT_EQ(rep->sequences * 64, total + rep->pad_tokens);
    auto idx = ReadMegatronIndex(o.output_prefix);
    ASSERT_TRUE(idx.ok()) << idx.status();
    EXPECT_EQ(idx->dtype_code, 8);  // uint16 for a 257-token vocabulary
    EXPECT_EQ(idx->lengths.size(), rep->sequences);
    EXPECT_EQ(idx->num_documents(), rep->sequences);
    std::FILE* bin = std::fopen((o.output_prefix + ".bin").c_str(), "rb");
    std::vector<int64_t> seq;
    uint64_t eos = 0, letters = 0;
    for (size_t i = 0; i < idx->lengths.size(); ++i) {
      ASSERT_TRUE(ReadMegatronSequence(bin, *idx, i, &seq).ok());
      for (int64_t t : seq) {
        eos += t == 256;
        letters += t >= 'a' && t <= 'z';
      }
    }
    std::fclose(bin);
    EXPECT_EQ(letters, total - 40);
    EXPECT_EQ(eos, 40 + rep->pad_tokens);  // padding uses the eos id
    if (mode == PackOptions::kBestFit) {
      uint64_t long_docs = 0;
      for (const auto& d : docs) long_docs += d.size() + 1 > 64;
      EXPECT_EQ(rep->split_docs, long_docs);
      EXPECT_LT(rep->pad_fraction, 0.25);
    }
  }
}

std::string Npy(const std::string& descr, const std::string& shape, const std::string& data) {
  std::string header =
      "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  while ((10 + header.size() + 1) % 64) header += ' ';
  header += '\n';
  std::string out = "\x93NUMPY\x01";
  out += '\0';
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  return out + header + data;
}

TEST(FeatureStats, NpySafetensorsCsv) {
  std::vector<double> v = {1, 10, 2, 20, 3, std::nan(""), 4, 40};  // (4, 2)
  WriteFile(Tmp("f.npy"),
            Npy("<f8", "(4, 2)", std::string(reinterpret_cast<char*>(v.data()), v.size() * 8)));
  auto r = FeatureStatsOfFile(Tmp("f.npy"));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->arrays.size(), 1u);
  ASSERT_EQ(r->arrays[0].features.size(), 2u);
  const auto& f0 = r->arrays[0].features[0];
  EXPECT_DOUBLE_EQ(f0.mean, 2.5);
  EXPECT_DOUBLE_EQ(f0.min, 1);
  EXPECT_DOUBLE_EQ(f0.max, 4);
  EXPECT_NEAR(f0.std, std::sqrt(1.25), 1e-12);
  EXPECT_EQ(r->arrays[0].features[1].nan, 1u);
  EXPECT_DOUBLE_EQ(r->arrays[0].features[1].mean, 70.0 / 3);
  EXPECT_EQ(r->arrays[0].dtype, "float64");
  ASSERT_GE(r->findings.size(), 2u);
  EXPECT_NE(r->findings[0].find("float64"), std::string::npos);

  std::vector<float> w = {1, 1, 1, 2, 2, 2};
  std::string hdr =
      R"({"w":{"dtype":"F32","shape":[3,2],"data_offsets":[0,24]},"__metadata__":{"k":"v"}})";
  uint64_t n = hdr.size();
  WriteFile(Tmp("f.safetensors"), std::string(reinterpret_cast<char*>(&n), 8) + hdr +
                                      std::string(reinterpret_cast<char*>(w.data()), 24));
  auto s = FeatureStatsOfFile(Tmp("f.safetensors"));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->arrays[0].name, "w");
  ASSERT_EQ(s->arrays[0].features.size(), 1u);  // the whole tensor, not its columns
  EXPECT_DOUBLE_EQ(s->arrays[0].features[0].mean, 1.5);

  WriteFile(Tmp("f.csv"), "a,b,label\n1,5,x\n3,5,y\n,5,z\n");
  auto c = FeatureStatsOfFile(Tmp("f.csv"));
  ASSERT_TRUE(c.ok()) << c.status();
  const auto& cols = c->arrays[0].features;
  EXPECT_EQ(cols[0].name, "a");
  EXPECT_DOUBLE_EQ(cols[0].mean, 2);
  EXPECT_EQ(cols[0].nan, 1u);
  EXPECT_EQ(cols[1].suggest, "drop");
  EXPECT_EQ(cols[2].suggest, "categorical");

  WriteFile(Tmp("short.npy"), Npy("<f4", "(100,)", "abcd"));
  auto bad = FeatureStatsOfFile(Tmp("short.npy"));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(bad.status().message().find("short.npy"), std::string::npos);
  WriteFile(Tmp("ragged.csv"), "a,b\n1,2\n3\n");
  auto ragged = FeatureStatsOfFile(Tmp("ragged.csv"));
  EXPECT_NE(ragged.status().message().find("ragged.csv:3"), std::string::npos) << ragged.status();
}

}  // namespace
}  // namespace trainscope::data
