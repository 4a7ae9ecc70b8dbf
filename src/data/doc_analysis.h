// Per-document analysis: the part of `data scan` that runs on worker threads. One
// DocAnalyzer per thread (it owns scratch buffers); Analyze() is not thread-safe, results
// are plain values.
//
// For each document: byte/char/word/token counts; raw and normalised content hashes
// (XXH3); a MinHash signature over word 5-grams (character 5-grams for text without
// spaces) reduced to LSH band hashes and a 16-bit-per-permutation fingerprint used to
// verify candidate pairs; noise flags (Gopher quality and repetition, C4, FineWeb rules,
// truncation, mixed language, mojibake, invalid UTF-8, control characters); language.
#ifndef TRAINSCOPE_DATA_DOC_ANALYSIS_H_
#define TRAINSCOPE_DATA_DOC_ANALYSIS_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace trainscope::tokenizer {
class Tokenizer;
}

namespace trainscope::data {

// ASCII whitespace (the C locale's isspace), for the byte-level scanners.
inline bool IsSpace(unsigned char c) {
  return c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\f' || c == '\v';
}

// Noise flags, one bit each. Names (FlagName) are the strings in verdicts and reports.
enum DocFlag : int {
  kFlagEmpty = 0,
  kFlagInvalidUtf8,
  kFlagControlChars,
  kFlagMojibake,
  kFlagTruncated,
  kFlagMixedLanguage,
  kFlagGopherShortDoc,
  kFlagGopherLongDoc,
  kFlagGopherWordLength,
  kFlagGopherSymbolRatio,
  kFlagGopherBulletLines,
  kFlagGopherEllipsisLines,
  kFlagGopherAlphaWords,
  kFlagGopherStopWords,
  kFlagGopherDupLines,
  kFlagGopherDupParagraphs,
  kFlagGopherDupLineChars,
  kFlagGopherDupParagraphChars,
  kFlagGopherTopNgram,
  kFlagGopherDupNgram,
  kFlagC4LoremIpsum,
  kFlagC4CurlyBracket,
  kFlagC4FewSentences,
  kFlagFineWebLinePunct,
  kFlagFineWebShortLines,
  kFlagFineWebCharDup,
  kFlagFineWebListRatio,
  kFlagJunkRepeatedChar,  // junk_rules.cc
  kFlagJunkHtml,
  kFlagJunkLoremIpsum,
  kNumFlags
};
const char* FlagName(int flag);
// Bit mask of a rule group: "gopher", "c4", "fineweb", "junk", ..., or a single flag name; 0
// if unknown. The content groups (gopher*, c4, fineweb, junk) include `empty`: a document with
// no text fails every one of their rules, though none of them is evaluated on it.
uint32_t FlagGroupMask(std::string_view name);

class DocResultCache;

struct AnalyzerOptions {
  int ngram = 5;         // words per shingle (characters for unspaced text)
  int bands = 14;        // LSH bands
  int rows = 8;          // MinHash values per band; bands*rows permutations in all
  uint64_t seed = 1;     // permutation parameters
  bool near_dup = true;  // compute MinHash
  bool noise = true;     // quality rules
  bool language = true;  // CLD2
  const tokenizer::Tokenizer* tokenizer = nullptr;  // null: byte-level (tokens = bytes)
  int c4_min_sentences = 3;                         // TFDS c4_utils default (datatrove: 5)
  // Exact-duplicate result cache shared by the analyzers of one scan (not owned; null:
  // none). See DocResultCache.
  DocResultCache* result_cache = nullptr;
};

struct DocResult {
  uint64_t raw_hash = 0;   // XXH3 of the bytes
  uint64_t norm_hash = 0;  // XXH3 after lowercasing and collapsing whitespace
  uint32_t bytes = 0, chars = 0, words = 0;
  uint64_t tokens = 0;
  uint32_t flags = 0;
  uint16_t lang = 0;  // CLD2 Language (0 = ENGLISH, 26 = UNKNOWN); see LangCode
  bool has_signature = false;
};

// Results of documents analysed already, for their exact duplicates: a document whose bytes
// hash (XXH3-64) and length equal a cached one's gets that one's results instead of being
// analysed again — the same values, since the analysis is a function of the bytes (a token
// count given by the caller is re-applied). Two-way set-associative: a document may sit in
// either slot of its set, and a new one replaces the slot used less recently. Shared by the
// worker threads of a scan (a document repeated on another thread hits too); thread-safe,
// one mutex per 1/64 of the sets. Each slot holds
// a DocResult plus bands*8 + permutations*2 bytes (~400 bytes with the defaults). The
// analyzers sharing a cache must have the same options.
class DocResultCache {
 public:
  // `slots` is rounded up to a power of two; bands and permutations as the analyzers'.
  DocResultCache(size_t slots, int bands, int permutations);
  // Copies the entry of (raw_hash, bytes) to r (and its bands and fingerprints when
  // r->has_signature and the outputs are non-null); false if not cached.
  // *tokens_from_text: r->tokens was counted from the text rather than given.
  bool Lookup(uint64_t raw_hash, uint32_t bytes, DocResult* r, bool* tokens_from_text,
              uint64_t* band_out, uint16_t* sig_out);
  // Stores a document's results (replacing the slot's previous document).
  void Insert(const DocResult& r, bool tokens_from_text, const uint64_t* band_out,
              const uint16_t* sig_out);
  uint64_t hits() const { return hits_.load(std::memory_order_relaxed); }

 private:
  struct Entry {
    uint64_t raw_hash = 0;
    uint32_t bytes = 0;
    bool used = false;
    bool recent = false;  // used more recently than the other way of its set
    bool tokens_from_text = false;
    DocResult result;
    bool Holds(uint64_t hash, uint32_t size) const {
      return used && raw_hash == hash && bytes == size;
    }
  };
  static constexpr int kStripes = 64;
  size_t Set(uint64_t raw_hash) const { return (raw_hash ^ (raw_hash >> 32)) & set_mask_; }

  // Constant after construction.
  const int bands_, perms_;
  size_t set_mask_ = 0;
  // Guarded by stripes_[set % kStripes]: entries 2*set and 2*set+1 (the set's two ways),
  // the bands of entry i at [i*bands_, ...) and its fingerprints at [i*perms_, ...).
  std::mutex stripes_[kStripes];
  std::vector<Entry> entries_;
  // Not initialised (a slot's bands and fingerprints are read only once it is used), so
  // their pages are touched by the workers that fill them, not up front.
  std::unique_ptr<uint64_t[]> bands_store_;
  std::unique_ptr<uint16_t[]> sigs_store_;
  std::atomic<uint64_t> hits_{0};
};

// ISO code of a CLD2 language id ("en", "un" for unknown).
const char* LangCode(uint16_t lang);
uint16_t UnknownLang();

// The normalised text of the exact-duplicate hash: ASCII lower-case, every whitespace run
// one ' ', leading and trailing whitespace dropped. Writes it to `out` (at least
// text.size() + 1 bytes) and returns its length; also counts code points (non-continuation
// bytes) and words (runs of non-whitespace). `simd` false forces the scalar pass (tests
// compare them): the best of scalar (0), AVX2 (1, when the library is built for haswell:
// TS_SIMD) and AVX-512 VBMI2 (2, when the CPU has it) up to simd_level.
size_t NormaliseForExactHash(std::string_view text, char* out, uint32_t* chars, uint32_t* words,
                             int simd_level);
// The highest level NormaliseForExactHash can use on this build and CPU.
int NormaliseSimdLevel();

// What separates words: whitespace (the noise rules' words), or any ASCII byte other than
// a letter or digit (MinHash shingles: datatrove strips punctuation; bytes >= 0x80 always
// belong to words).
enum class WordBreak { kWhitespace, kAsciiPunctuation };

// The words of `text` (maximal runs of bytes that are not separators): their byte offsets
// and lengths, replacing the vectors' contents. simd_level >= 1: 32-byte AVX2 blocks (when
// built for haswell), else scalar; the same words either way.
void FindWords(std::string_view text, WordBreak brk, std::vector<uint32_t>* start,
               std::vector<uint32_t>* len, int simd_level);

// Changes whenever the same options give other band hashes or fingerprints (saved shares of
// a distributed scan are only reused with the same version). 2: 32-bit permutations.
inline constexpr int kMinHashVersion = 2;

// MinHash minima: mins[i] = min over shingles x of a[i] * x + b[i] (mod 2^32), i < p (a[i]
// odd: a bijection of the 32-bit shingle hashes). simd_level 2 uses AVX-512 (16 lanes) when
// the CPU has it; simd_level >= 1 AVX2 (8 lanes) when the library is built for haswell
// (TS_SIMD); else scalar. The results are the same integers either way.
void MinHashMins(const uint32_t* shingles, size_t n, const uint32_t* a, const uint32_t* b, int p,
                 uint32_t* mins, int simd_level);

class DocAnalyzer {
 public:
  explicit DocAnalyzer(const AnalyzerOptions& options);
  int permutations() const { return options_.bands * options_.rows; }
  // Analyses `text`. When options.near_dup and the document has shingles, writes
  // `bands` band hashes to band_out and `permutations()` fingerprints to sig_out.
  // `known_tokens` >= 0 overrides the tokenizer count. `utf8_valid`: the caller has
  // validated the text's UTF-8 already (a JSON string, checked by simdjson's stage 1).
  void Analyze(std::string_view text, int64_t known_tokens, DocResult* result, uint64_t* band_out,
               uint16_t* sig_out, bool utf8_valid = false);

 private:
  void AnalyzeUncached(std::string_view text, int64_t known_tokens, DocResult* r,
                       uint64_t* band_out, uint16_t* sig_out, bool utf8_valid);
  void ExactAndCounts(std::string_view text, int64_t known_tokens, DocResult* r);
  void Noise(std::string_view text, DocResult* r);
  void Repetition(std::string_view text, DocResult* r);
  void Junk(std::string_view text, DocResult* r);  // junk_rules.cc
  void Language(std::string_view text, DocResult* r);
  bool MinHash(std::string_view norm, uint64_t* band_out, uint16_t* sig_out);
  // The token count of `text` as Analyze reports it.
  uint64_t Tokens(std::string_view text, int64_t known_tokens) const;

  const AnalyzerOptions options_;
  std::vector<uint32_t> perm_a_, perm_b_;
  // Scratch, reused across documents.
  std::string norm_;
  std::vector<uint32_t> word_start_, word_len_;
  std::vector<uint32_t> token_start_, token_len_;  // MinHash words
  std::vector<uint64_t> word_hash_, gram_;
  std::vector<uint32_t> shingle_, mins_;  // MinHash: 32-bit shingle hashes and minima
  std::vector<uint64_t> table_keys_, dup_keys_;
  std::vector<uint32_t> candidate_, dup_vals_;  // Repetition: positions, skip-scan counts
  std::vector<uint64_t> noise_bits_;            // Noise's byte-class bitmaps
  std::vector<uint32_t> table_vals_;
};

}  // namespace trainscope::data

#endif  // TRAINSCOPE_DATA_DOC_ANALYSIS_H_
