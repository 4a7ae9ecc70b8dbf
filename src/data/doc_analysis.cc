// Per-document counts, hashes, MinHash and language (noise rules: noise_rules.cc).
#include "data/doc_analysis.h"

#include <cld2/internal/lang_script.h>
#include <cld2/public/compact_lang_det.h>
// XXH3 inlined: most hashed spans here are words and lines of a few bytes, where the call
// into the shared library costs as much as the hash (same values either way).
#define XXH_INLINE_ALL
#include <xxhash.h>
#ifdef __AVX2__
#include <immintrin.h>
#endif

#include <algorithm>
#include <cstring>
#include <limits>

#include "simdjson.h"
#include "trainscope/tokenizer/tokenizer.h"

namespace trainscope::data {
namespace {

inline uint64_t Mix(uint64_t x) {  // splitmix64 finaliser
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

// ASCII punctuation and symbols become separators for shingling (datatrove's
// remove_punctuation, restricted to ASCII).
inline bool IsShingleSep(unsigned char c) {
  return c < 0x80 && !((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z'));
}

const char* const kFlagNames[kNumFlags] = {
    "empty",
    "invalid_utf8",
    "control_chars",
    "mojibake",
    "truncated",
    "mixed_language",
    "gopher_short_doc",
    "gopher_long_doc",
    "gopher_word_length",
    "gopher_symbol_ratio",
    "gopher_bullet_lines",
    "gopher_ellipsis_lines",
    "gopher_alpha_words",
    "gopher_stop_words",
    "gopher_dup_lines",
    "gopher_dup_paragraphs",
    "gopher_dup_line_chars",
    "gopher_dup_paragraph_chars",
    "gopher_top_ngram",
    "gopher_dup_ngram",
    "c4_lorem_ipsum",
    "c4_curly_bracket",
    "c4_few_sentences",
    "fineweb_line_punct",
    "fineweb_short_lines",
    "fineweb_char_dup",
    "fineweb_list_ratio",
    "junk_repeated_char",
    "junk_html",
    "junk_lorem_ipsum",
};

uint32_t Range(int lo, int hi) {
  uint32_t m = 0;
  for (int i = lo; i <= hi; ++i) m |= 1u << i;
  return m;
}

}  // namespace

const char* FlagName(int flag) { return flag >= 0 && flag < kNumFlags ? kFlagNames[flag] : "?"; }

uint32_t FlagGroupMask(std::string_view name) {
  const uint32_t empty = 1u << kFlagEmpty;
  if (name == "all") return Range(0, kNumFlags - 1);
  if (name == "gopher") return empty | Range(kFlagGopherShortDoc, kFlagGopherDupNgram);
  if (name == "gopher_quality") return empty | Range(kFlagGopherShortDoc, kFlagGopherStopWords);
  if (name == "gopher_repetition") return empty | Range(kFlagGopherDupLines, kFlagGopherDupNgram);
  if (name == "c4") return empty | Range(kFlagC4LoremIpsum, kFlagC4FewSentences);
  if (name == "fineweb") return empty | Range(kFlagFineWebLinePunct, kFlagFineWebListRatio);
  // Not text at all: one character repeated, markup, placeholder text.
  if (name == "junk") return empty | Range(kFlagJunkRepeatedChar, kFlagJunkLoremIpsum);
  if (name == "encoding") return Range(kFlagInvalidUtf8, kFlagMojibake);
  for (int i = 0; i < kNumFlags; ++i) {
    if (name == kFlagNames[i]) return 1u << i;
  }
  return 0;
}

const char* LangCode(uint16_t lang) {
  return CLD2::LanguageCode(static_cast<CLD2::Language>(lang));
}
uint16_t UnknownLang() { return CLD2::UNKNOWN_LANGUAGE; }

DocAnalyzer::DocAnalyzer(const AnalyzerOptions& options) : options_(options) {
  uint64_t state = options_.seed;
  const int p = options_.bands * options_.rows;
  for (int i = 0; i < p; ++i) {
    state += 0x9e3779b97f4a7c15ULL;
    perm_a_.push_back(static_cast<uint32_t>(Mix(state)) | 1);  // odd multiplier
    state += 0x9e3779b97f4a7c15ULL;
    perm_b_.push_back(static_cast<uint32_t>(Mix(state)));
  }
  mins_.resize(p);
}

DocResultCache::DocResultCache(size_t slots, int bands, int permutations)
    : bands_(bands), perms_(permutations) {
  size_t n = 2;
  while (n < slots) n *= 2;
  set_mask_ = n / 2 - 1;
  entries_.resize(n);
  bands_store_.reset(new uint64_t[n * bands_]);
  sigs_store_.reset(new uint16_t[n * perms_]);
}

bool DocResultCache::Lookup(uint64_t raw_hash, uint32_t bytes, DocResult* r, bool* tokens_from_text,
                            uint64_t* band_out, uint16_t* sig_out) {
  const size_t set = Set(raw_hash);
  std::lock_guard<std::mutex> lock(stripes_[set % kStripes]);
  for (size_t i = 2 * set; i < 2 * set + 2; ++i) {
    Entry& e = entries_[i];
    if (!e.Holds(raw_hash, bytes)) continue;
    e.recent = true;
    entries_[i ^ 1].recent = false;
    *r = e.result;
    *tokens_from_text = e.tokens_from_text;
    if (r->has_signature && band_out != nullptr && sig_out != nullptr) {
      std::memcpy(band_out, &bands_store_[i * bands_], bands_ * sizeof(uint64_t));
      std::memcpy(sig_out, &sigs_store_[i * perms_], perms_ * sizeof(uint16_t));
    }
    hits_.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  return false;
}

void DocResultCache::Insert(const DocResult& r, bool tokens_from_text, const uint64_t* band_out,
                            const uint16_t* sig_out) {
  if (r.has_signature && (band_out == nullptr || sig_out == nullptr)) return;
  const size_t set = Set(r.raw_hash);
  std::lock_guard<std::mutex> lock(stripes_[set % kStripes]);
  // The way this document already holds (another thread analysed it too), else a free one,
  // else the one used less recently.
  size_t i = 2 * set;
  const Entry& e0 = entries_[i];
  const Entry& e1 = entries_[i + 1];
  if (e1.Holds(r.raw_hash, r.bytes) ||
      (!e0.Holds(r.raw_hash, r.bytes) && e0.used && (!e1.used || e0.recent))) {
    ++i;
  }
  Entry& e = entries_[i];
  e.raw_hash = r.raw_hash;
  e.bytes = r.bytes;
  e.used = true;
  e.recent = true;
  entries_[i ^ 1].recent = false;
  e.tokens_from_text = tokens_from_text;
  e.result = r;
  if (r.has_signature) {
    std::memcpy(&bands_store_[i * bands_], band_out, bands_ * sizeof(uint64_t));
    std::memcpy(&sigs_store_[i * perms_], sig_out, perms_ * sizeof(uint16_t));
  }
}

uint64_t DocAnalyzer::Tokens(std::string_view text, int64_t known_tokens) const {
  if (known_tokens >= 0) return static_cast<uint64_t>(known_tokens);
  if (options_.tokenizer != nullptr) return options_.tokenizer->Count(text);
  return text.size();
}

void DocAnalyzer::Analyze(std::string_view text, int64_t known_tokens, DocResult* r,
                          uint64_t* band_out, uint16_t* sig_out, bool utf8_valid) {
  *r = DocResult();
  r->bytes = static_cast<uint32_t>(text.size());
  r->raw_hash = XXH3_64bits(text.data(), text.size());
  if (!options_.noise && !options_.language && !options_.near_dup) {
    // invalid_utf8 is kept (a few GB/s): it is what makes a plain-text document bad input.
    if (!utf8_valid && !simdjson::validate_utf8(text.data(), text.size())) {
      r->flags |= 1u << kFlagInvalidUtf8;
    }
    ExactAndCounts(text, known_tokens, r);
    return;
  }
  // Exact duplicates (63% of the documents of the short real-text bench corpus) take the
  // results of their last analysis from the cache: every figure below is a function of
  // the bytes alone, except a token count given by the caller.
  DocResultCache* cache = options_.result_cache;
  bool tokens_from_text = false;
  if (cache != nullptr &&
      cache->Lookup(r->raw_hash, r->bytes, r, &tokens_from_text, band_out, sig_out)) {
    if (known_tokens >= 0 || !tokens_from_text) r->tokens = Tokens(text, known_tokens);
    return;
  }
  AnalyzeUncached(text, known_tokens, r, band_out, sig_out, utf8_valid);
  if (cache != nullptr) cache->Insert(*r, known_tokens < 0, band_out, sig_out);
}

void DocAnalyzer::AnalyzeUncached(std::string_view text, int64_t known_tokens, DocResult* r,
                                  uint64_t* band_out, uint16_t* sig_out, bool utf8_valid) {
  const bool valid = utf8_valid || simdjson::validate_utf8(text.data(), text.size());
  if (!valid) r->flags |= 1u << kFlagInvalidUtf8;

  // The normalised text (ASCII lower-case, whitespace runs collapsed to one space,
  // trimmed) with the code point count, then the words (maximal runs of non-whitespace
  // bytes) for the rules: two SIMD passes.
  norm_.resize(text.size() + 1);
  uint32_t chars = 0, words = 0;
  norm_.resize(NormaliseForExactHash(text, norm_.data(), &chars, &words, /*simd_level=*/2));
  FindWords(text, WordBreak::kWhitespace, &word_start_, &word_len_, /*simd_level=*/2);
  r->chars = chars;
  r->norm_hash = XXH3_64bits(norm_.data(), norm_.size());
  if (norm_.empty()) r->flags |= 1u << kFlagEmpty;

  r->words = static_cast<uint32_t>(word_start_.size());
  r->tokens = Tokens(text, known_tokens);
  r->lang = CLD2::UNKNOWN_LANGUAGE;
  if (options_.noise && !norm_.empty()) {
    Noise(text, r);
    Repetition(text, r);
    Junk(text, r);
  }
  if (options_.language && valid && !norm_.empty()) Language(text, r);
  if (options_.near_dup && !norm_.empty()) r->has_signature = MinHash(norm_, band_out, sig_out);
}

// Exact-only mode (no noise rules, language or MinHash): the same counts and hashes as the
// full path in one branch-free pass that records no word positions. Each byte is written
// to the output, lower-cased, whitespace as ' '; the output position only advances for a
// space that follows a non-space, so runs collapse to one space and leading whitespace
// vanishes; a trailing space is dropped at the end. Words are space -> non-space edges;
// code points are non-continuation bytes.
namespace {
struct ByteClass {
  unsigned char lower[256];
  unsigned char space[256];
  constexpr ByteClass() : lower(), space() {
    for (int c = 0; c < 256; ++c) {
      const bool sp = c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\f' || c == '\v';
      space[c] = sp;
      lower[c] = sp ? ' ' : (c >= 'A' && c <= 'Z') ? c + 32 : c;
    }
  }
};
constexpr ByteClass kByteClass;
}  // namespace

namespace {

// The scalar pass over text[i, n): appends to out[o...], returns the new o.
size_t NormaliseScalar(const unsigned char* s, size_t i, size_t n, char* out, size_t o,
                       uint32_t* chars, uint32_t* words, uint32_t* prev_space) {
  uint32_t ch = *chars, wd = *words, prev = *prev_space;
  for (; i < n; ++i) {
    const unsigned char c = s[i];
    const uint32_t sp = kByteClass.space[c];
    out[o] = static_cast<char>(kByteClass.lower[c]);
    o += (sp & prev) ^ 1;  // skip a space after a space (or at the start)
    wd += prev & (sp ^ 1);
    ch += (c & 0xC0) != 0x80;
    prev = sp;
  }
  *chars = ch;
  *words = wd;
  *prev_space = prev;
  return o;
}

// Four permutations at a time with their minima in registers, so the four multiply-add-min
// chains run in parallel and no minimum goes through memory per shingle.
void MinHashMinsScalar(const uint32_t* x, size_t n, const uint32_t* a, const uint32_t* b, int p,
                       uint32_t* m) {
  constexpr uint32_t kMax = std::numeric_limits<uint32_t>::max();
  int i = 0;
  for (; i + 4 <= p; i += 4) {
    const uint32_t a0 = a[i], a1 = a[i + 1], a2 = a[i + 2], a3 = a[i + 3];
    const uint32_t b0 = b[i], b1 = b[i + 1], b2 = b[i + 2], b3 = b[i + 3];
    uint32_t m0 = kMax, m1 = kMax, m2 = kMax, m3 = kMax;
    for (size_t k = 0; k < n; ++k) {
      const uint32_t v = x[k];
      m0 = std::min(m0, a0 * v + b0);
      m1 = std::min(m1, a1 * v + b1);
      m2 = std::min(m2, a2 * v + b2);
      m3 = std::min(m3, a3 * v + b3);
    }
    m[i] = m0;
    m[i + 1] = m1;
    m[i + 2] = m2;
    m[i + 3] = m3;
  }
  for (; i < p; ++i) {
    uint32_t mi = kMax;
    for (size_t k = 0; k < n; ++k) mi = std::min(mi, a[i] * x[k] + b[i]);
    m[i] = mi;
  }
}

#ifdef __AVX2__
// 0xFF where a byte of v is ASCII whitespace (\t \n \v \f \r or space), else 0.
inline __m256i WhitespaceBytes(__m256i v) {
  const __m256i t = _mm256_sub_epi8(v, _mm256_set1_epi8(9));  // \t..\r -> 0..4
  const __m256i ctl = _mm256_cmpeq_epi8(_mm256_min_epu8(t, _mm256_set1_epi8(4)), t);
  return _mm256_or_si256(ctl, _mm256_cmpeq_epi8(v, _mm256_set1_epi8(' ')));
}

// The same pass 32 bytes at a time: masks of whitespace and continuation bytes, lower-case
// and whitespace -> ' ' by compare and blend; a block with no space after a space is
// stored whole, otherwise compacted 8 bytes at a time with BMI2 pext.
size_t NormaliseAvx2(const unsigned char* s, size_t n, char* out, uint32_t* chars, uint32_t* words,
                     uint32_t* prev_space) {
  const __m256i kSpace = _mm256_set1_epi8(' '), kA = _mm256_set1_epi8('A');
  const __m256i k25 = _mm256_set1_epi8(25), kCase = _mm256_set1_epi8(0x20);
  const __m256i kContLimit = _mm256_set1_epi8(-64);  // continuation bytes are < -64 signed
  size_t i = 0, o = 0;
  uint64_t ch = *chars, wd = *words;  // accumulates onto the caller's counts
  uint32_t prev = *prev_space;
  for (; i + 32 <= n; i += 32) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i));
    const __m256i sp = WhitespaceBytes(v);
    const __m256i u = _mm256_sub_epi8(v, kA);
    const __m256i upper = _mm256_cmpeq_epi8(_mm256_min_epu8(u, k25), u);
    __m256i low = _mm256_add_epi8(v, _mm256_and_si256(upper, kCase));
    low = _mm256_blendv_epi8(low, kSpace, sp);
    const uint32_t spm = static_cast<uint32_t>(_mm256_movemask_epi8(sp));
    const uint32_t cont =
        static_cast<uint32_t>(_mm256_movemask_epi8(_mm256_cmpgt_epi8(kContLimit, v)));
    const uint32_t before = (spm << 1) | prev;  // bit k: byte k-1 is whitespace
    ch += 32 - _mm_popcnt_u32(cont);
    wd += _mm_popcnt_u32(~spm & before);
    const uint32_t drop = spm & before;
    if (drop == 0) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + o), low);
      o += 32;
    } else {
      alignas(32) uint64_t lanes[4];
      _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), low);
      const uint32_t keep = ~drop;
      for (int l = 0; l < 4; ++l) {
        const uint32_t k8 = (keep >> (8 * l)) & 0xFF;
        const uint64_t bytes_mask = _pdep_u64(k8, 0x0101010101010101ULL) * 0xFF;
        const uint64_t packed = _pext_u64(lanes[l], bytes_mask);
        std::memcpy(out + o, &packed, 8);
        o += _mm_popcnt_u32(k8);
      }
    }
    prev = spm >> 31;
  }
  uint32_t ch32 = static_cast<uint32_t>(ch), wd32 = static_cast<uint32_t>(wd);
  o = NormaliseScalar(s, i, n, out, o, &ch32, &wd32, &prev);
  *chars = ch32;
  *words = wd32;
  *prev_space = prev;
  return o;
}

// MinHash minima with AVX2: eight 32-bit permutations per register (vpmulld, vpaddd,
// vpminud), four registers (32 permutations) per pass over the shingles.
void MinHashMinsAvx2(const uint32_t* x, size_t n, const uint32_t* a, const uint32_t* b, int p,
                     uint32_t* m) {
  auto load = [](const uint32_t* v) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v));
  };
  auto step = [](__m256i mi, __m256i ai, __m256i bi, __m256i v) {
    return _mm256_min_epu32(mi, _mm256_add_epi32(_mm256_mullo_epi32(ai, v), bi));
  };
  const __m256i kInit = _mm256_set1_epi32(-1);
  int i = 0;
  for (; i + 32 <= p; i += 32) {
    const __m256i a0 = load(a + i), a1 = load(a + i + 8), a2 = load(a + i + 16),
                  a3 = load(a + i + 24);
    const __m256i b0 = load(b + i), b1 = load(b + i + 8), b2 = load(b + i + 16),
                  b3 = load(b + i + 24);
    __m256i m0 = kInit, m1 = kInit, m2 = kInit, m3 = kInit;
    for (size_t k = 0; k < n; ++k) {
      const __m256i v = _mm256_set1_epi32(static_cast<int>(x[k]));
      m0 = step(m0, a0, b0, v);
      m1 = step(m1, a1, b1, v);
      m2 = step(m2, a2, b2, v);
      m3 = step(m3, a3, b3, v);
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(m + i), m0);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(m + i + 8), m1);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(m + i + 16), m2);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(m + i + 24), m3);
  }
  for (; i + 8 <= p; i += 8) {
    const __m256i a0 = load(a + i), b0 = load(b + i);
    __m256i m0 = kInit;
    for (size_t k = 0; k < n; ++k) m0 = step(m0, a0, b0, _mm256_set1_epi32(static_cast<int>(x[k])));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(m + i), m0);
  }
  MinHashMinsScalar(x, n, a + i, b + i, p - i, m + i);  // the permutations left over
}

// 64 bytes at a time with AVX-512 mask registers; VBMI2's byte compress drops the
// collapsed spaces in one instruction, so blocks with whitespace runs (indented text) cost
// no more than others. Chosen at run time (Ice Lake, Sapphire Rapids, Zen 4 and later).
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi2,bmi2,popcnt"))) size_t NormaliseAvx512(
    const unsigned char* s, size_t n, char* out, uint32_t* chars, uint32_t* words,
    uint32_t* prev_space) {
  const __m512i k9 = _mm512_set1_epi8(9), k4 = _mm512_set1_epi8(4);
  const __m512i kSpace = _mm512_set1_epi8(' '), kA = _mm512_set1_epi8('A');
  const __m512i k25 = _mm512_set1_epi8(25), kCase = _mm512_set1_epi8(0x20);
  const __m512i kContLimit = _mm512_set1_epi8(-64);
  size_t i = 0, o = 0;
  uint64_t ch = 0, wd = 0, prev = *prev_space;
  for (; i + 64 <= n; i += 64) {
    const __m512i v = _mm512_loadu_si512(s + i);
    const __mmask64 sp =
        _mm512_cmple_epu8_mask(_mm512_sub_epi8(v, k9), k4) | _mm512_cmpeq_epi8_mask(v, kSpace);
    const __mmask64 upper = _mm512_cmple_epu8_mask(_mm512_sub_epi8(v, kA), k25);
    __m512i low = _mm512_mask_add_epi8(v, upper, v, kCase);
    low = _mm512_mask_mov_epi8(low, sp, kSpace);
    const uint64_t cont = _mm512_cmplt_epi8_mask(v, kContLimit);
    const uint64_t before = (static_cast<uint64_t>(sp) << 1) | prev;
    const uint64_t keep = ~(sp & before);
    _mm512_storeu_si512(out + o, _mm512_maskz_compress_epi8(keep, low));
    o += _mm_popcnt_u64(keep);
    ch += 64 - _mm_popcnt_u64(cont);
    wd += _mm_popcnt_u64(~static_cast<uint64_t>(sp) & before);
    prev = static_cast<uint64_t>(sp) >> 63;
  }
  uint32_t ch32 = static_cast<uint32_t>(ch), wd32 = static_cast<uint32_t>(wd);
  uint32_t prev32 = static_cast<uint32_t>(prev);
  o = NormaliseAvx2(s + i, n - i, out + o, &ch32, &wd32, &prev32) + o;
  *chars = ch32;
  *words = wd32;
  *prev_space = prev32;
  return o;
}

// MinHash minima, 16 permutations per AVX-512 register, four registers per pass.
// (GCC 12 warns inside avx512fintrin.h's _mm512_min_epu32 about its own undefined
// pass-through operand: a false positive.)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
__attribute__((target("avx512f"))) void MinHashMinsAvx512(const uint32_t* x, size_t n,
                                                          const uint32_t* a, const uint32_t* b,
                                                          int p, uint32_t* m) {
  int i = 0;
  for (; i + 64 <= p; i += 64) {
    const __m512i a0 = _mm512_loadu_si512(a + i), a1 = _mm512_loadu_si512(a + i + 16);
    const __m512i a2 = _mm512_loadu_si512(a + i + 32), a3 = _mm512_loadu_si512(a + i + 48);
    const __m512i b0 = _mm512_loadu_si512(b + i), b1 = _mm512_loadu_si512(b + i + 16);
    const __m512i b2 = _mm512_loadu_si512(b + i + 32), b3 = _mm512_loadu_si512(b + i + 48);
    __m512i m0 = _mm512_set1_epi32(-1), m1 = m0, m2 = m0, m3 = m0;
    for (size_t k = 0; k < n; ++k) {
      const __m512i v = _mm512_set1_epi32(static_cast<int>(x[k]));
      m0 = _mm512_min_epu32(m0, _mm512_add_epi32(_mm512_mullo_epi32(a0, v), b0));
      m1 = _mm512_min_epu32(m1, _mm512_add_epi32(_mm512_mullo_epi32(a1, v), b1));
      m2 = _mm512_min_epu32(m2, _mm512_add_epi32(_mm512_mullo_epi32(a2, v), b2));
      m3 = _mm512_min_epu32(m3, _mm512_add_epi32(_mm512_mullo_epi32(a3, v), b3));
    }
    _mm512_storeu_si512(m + i, m0);
    _mm512_storeu_si512(m + i + 16, m1);
    _mm512_storeu_si512(m + i + 32, m2);
    _mm512_storeu_si512(m + i + 48, m3);
  }
  for (; i + 16 <= p; i += 16) {
    const __m512i va = _mm512_loadu_si512(a + i), vb = _mm512_loadu_si512(b + i);
    __m512i vm = _mm512_set1_epi32(-1);
    for (size_t k = 0; k < n; ++k) {
      const __m512i v = _mm512_set1_epi32(static_cast<int>(x[k]));
      vm = _mm512_min_epu32(vm, _mm512_add_epi32(_mm512_mullo_epi32(va, v), vb));
    }
    _mm512_storeu_si512(m + i, vm);
  }
  MinHashMinsScalar(x, n, a + i, b + i, p - i, m + i);  // the permutations left over
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif

}  // namespace

void MinHashMins(const uint32_t* shingles, size_t n, const uint32_t* a, const uint32_t* b, int p,
                 uint32_t* mins, int simd_level) {
#ifdef __AVX2__
  static const bool avx512f = __builtin_cpu_supports("avx512f");
  if (simd_level >= 2 && avx512f) {
    MinHashMinsAvx512(shingles, n, a, b, p, mins);
    return;
  }
  if (simd_level >= 1) {
    MinHashMinsAvx2(shingles, n, a, b, p, mins);
    return;
  }
#else
  (void)simd_level;
#endif
  MinHashMinsScalar(shingles, n, a, b, p, mins);
}

namespace {

// Word boundaries from a whitespace mask: bit k of `starts` is a word's first byte, of
// `ends` the first whitespace byte after a word. Appends in position order.
// Starts and ends alternate, so the k-th end of the text closes its k-th word: the starts
// are appended first, then each end finds its word by the count of ends so far.
inline void EmitWords(uint64_t starts, uint64_t ends, size_t base, std::vector<uint32_t>* start,
                      std::vector<uint32_t>* len) {
  for (uint64_t t = starts; t != 0; t &= t - 1) {
    start->push_back(static_cast<uint32_t>(base + __builtin_ctzll(t)));
  }
  for (uint64_t t = ends; t != 0; t &= t - 1) {
    const uint32_t pos = static_cast<uint32_t>(base + __builtin_ctzll(t));
    len->push_back(pos - (*start)[len->size()]);
  }
}

void FindWordsScalar(const unsigned char* s, size_t i, size_t n, WordBreak brk, uint32_t* prev_sep,
                     std::vector<uint32_t>* start, std::vector<uint32_t>* len) {
  uint32_t prev = *prev_sep;
  for (; i < n; ++i) {
    const uint32_t sep = brk == WordBreak::kWhitespace ? kByteClass.space[s[i]]
                         : IsShingleSep(s[i])          ? 1
                                                       : 0;
    if (!sep && prev) start->push_back(static_cast<uint32_t>(i));
    if (sep && !prev) len->push_back(static_cast<uint32_t>(i) - start->back());
    prev = sep;
  }
  *prev_sep = prev;
}

#ifdef __AVX2__
size_t FindWordsAvx2(const unsigned char* s, size_t n, WordBreak brk, uint32_t* prev_sep,
                     std::vector<uint32_t>* start, std::vector<uint32_t>* len) {
  const __m256i kLowerA = _mm256_set1_epi8('a'), k25 = _mm256_set1_epi8(25);
  const __m256i kZero = _mm256_set1_epi8('0'), k9d = _mm256_set1_epi8(9);
  const __m256i kCase = _mm256_set1_epi8(0x20);
  uint32_t prev = *prev_sep;
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i));
    uint32_t sepm;
    if (brk == WordBreak::kWhitespace) {
      sepm = static_cast<uint32_t>(_mm256_movemask_epi8(WhitespaceBytes(v)));
    } else {  // ASCII other than letters and digits
      const __m256i a = _mm256_sub_epi8(_mm256_or_si256(v, kCase), kLowerA);
      const __m256i d = _mm256_sub_epi8(v, kZero);
      const __m256i word = _mm256_or_si256(_mm256_cmpeq_epi8(_mm256_min_epu8(a, k25), a),
                                           _mm256_cmpeq_epi8(_mm256_min_epu8(d, k9d), d));
      const uint32_t high = static_cast<uint32_t>(_mm256_movemask_epi8(v));
      sepm = ~(static_cast<uint32_t>(_mm256_movemask_epi8(word)) | high);
    }
    const uint32_t before = (sepm << 1) | prev;
    EmitWords(~sepm & before, sepm & ~before, i, start, len);
    prev = sepm >> 31;
  }
  *prev_sep = prev;
  return i;
}
#endif

}  // namespace

void FindWords(std::string_view text, WordBreak brk, std::vector<uint32_t>* start,
               std::vector<uint32_t>* len, int simd_level) {
  start->clear();
  len->clear();
  const unsigned char* s = reinterpret_cast<const unsigned char*>(text.data());
  uint32_t prev = 1;  // as if preceded by a separator
  size_t i = 0;
#ifdef __AVX2__
  if (simd_level >= 1) i = FindWordsAvx2(s, text.size(), brk, &prev, start, len);
#else
  (void)simd_level;
#endif
  FindWordsScalar(s, i, text.size(), brk, &prev, start, len);
  if (!prev) len->push_back(static_cast<uint32_t>(text.size()) - start->back());
}

int NormaliseSimdLevel() {
#ifdef __AVX2__
  static const int level = __builtin_cpu_supports("avx512vbmi2") &&
                                   __builtin_cpu_supports("avx512bw") &&
                                   __builtin_cpu_supports("avx512vl")
                               ? 2
                               : 1;
  return level;
#else
  return 0;
#endif
}

size_t NormaliseForExactHash(std::string_view text, char* out, uint32_t* chars, uint32_t* words,
                             int simd_level) {
  const unsigned char* s = reinterpret_cast<const unsigned char*>(text.data());
  uint32_t ch = 0, wd = 0, prev = 1;  // as if preceded by whitespace
  size_t o;
  const int level = std::min(simd_level, NormaliseSimdLevel());
#ifdef __AVX2__
  if (level >= 2) {
    o = NormaliseAvx512(s, text.size(), out, &ch, &wd, &prev);
  } else if (level == 1) {
    o = NormaliseAvx2(s, text.size(), out, &ch, &wd, &prev);
  } else {
    o = NormaliseScalar(s, 0, text.size(), out, 0, &ch, &wd, &prev);
  }
#else
  (void)level;
  o = NormaliseScalar(s, 0, text.size(), out, 0, &ch, &wd, &prev);
#endif
  if (o > 0 && out[o - 1] == ' ') --o;
  *chars = ch;
  *words = wd;
  return o;
}

void DocAnalyzer::ExactAndCounts(std::string_view text, int64_t known_tokens, DocResult* r) {
  const size_t n = text.size();
  norm_.resize(n + 1);
  char* out = norm_.data();
  uint32_t chars = 0, words = 0;
  const size_t o = NormaliseForExactHash(text, out, &chars, &words, /*simd_level=*/2);
  r->chars = chars;
  r->words = words;
  r->norm_hash = XXH3_64bits(out, o);
  if (o == 0) r->flags |= 1u << kFlagEmpty;
  if (known_tokens >= 0) {
    r->tokens = known_tokens;
  } else if (options_.tokenizer != nullptr) {
    r->tokens = options_.tokenizer->Count(text);
  } else {
    r->tokens = n;
  }
  r->lang = CLD2::UNKNOWN_LANGUAGE;
}

// Language per chunk with CLD2. CLD2 reads ~30 MB/s, so a document is sampled: up to
// kChunks slices of kChunkBytes (its start and its end; cut at UTF-8 character and, when
// possible, word boundaries), each identified on its own. The document's language is the
// most frequent reliable chunk language (the first on ties); it is mixed-language when two
// reliable chunks disagree. Short documents are one chunk.
void DocAnalyzer::Language(std::string_view text, DocResult* r) {
  constexpr size_t kChunkBytes = 160;
  constexpr int kChunks = 2;
  std::string_view chunks[kChunks];
  int n = 0;
  if (text.size() <= kChunkBytes * 2) {
    chunks[n++] = text;
  } else {
    const size_t starts[kChunks] = {0, text.size() - kChunkBytes};
    for (size_t st : starts) {
      size_t b = st, e = std::min(text.size(), st + kChunkBytes);
      while (b < e && (static_cast<unsigned char>(text[b]) & 0xC0) == 0x80) ++b;
      while (e < text.size() && e > b && (static_cast<unsigned char>(text[e]) & 0xC0) == 0x80) --e;
      // Prefer whole words: skip to the first space, end at the last one.
      if (b > 0) {
        size_t sp = text.find(' ', b);
        if (sp != std::string_view::npos && sp < b + 32 && sp < e) b = sp + 1;
      }
      if (e < text.size()) {
        size_t sp = text.rfind(' ', e);
        if (sp != std::string_view::npos && sp > b + kChunkBytes / 2) e = sp;
      }
      chunks[n++] = text.substr(b, e - b);
    }
  }
  int langs[kChunks];
  int nrel = 0;
  for (int i = 0; i < n; ++i) {
    bool reliable = false;
    CLD2::Language lang3[3];
    int percent3[3], text_bytes = 0;
    CLD2::Language l =
        CLD2::DetectLanguageSummary(chunks[i].data(), static_cast<int>(chunks[i].size()), true,
                                    lang3, percent3, &text_bytes, &reliable);
    if (reliable && l != CLD2::UNKNOWN_LANGUAGE && l != CLD2::TG_UNKNOWN_LANGUAGE)
      langs[nrel++] = l;
  }
  if (nrel == 0) return;
  int best = langs[0], best_count = 0;
  for (int i = 0; i < nrel; ++i) {
    int c = 0;
    for (int k = 0; k < nrel; ++k) c += langs[k] == langs[i];
    if (c > best_count) {
      best = langs[i];
      best_count = c;
    }
  }
  r->lang = static_cast<uint16_t>(best);
  if (options_.noise && best_count < nrel) r->flags |= 1u << kFlagMixedLanguage;
}

// MinHash: shingles are n consecutive tokens (words of the normalised text with ASCII
// punctuation as separators, or code points for text without spaces), each hashed to 32
// bits (the low half of a 64-bit mix; two shingles of a document collide with probability
// ~n^2/2^33); permutation i maps a shingle x to a_i*x + b_i mod 2^32 (a_i odd: a bijection)
// and keeps the minimum, eight permutations per AVX2 instruction. Band b hashes rows [b*r, (b+1)*r)
// with XXH3; the 16-bit fingerprint of each minimum lets candidate pairs be verified by the
// fraction of agreeing permutations (an unbiased estimate of the Jaccard similarity; error
// ~sqrt(J(1-J)/P)).
bool DocAnalyzer::MinHash(std::string_view norm, uint64_t* band_out, uint16_t* sig_out) {
  word_hash_.clear();
  const unsigned char* s = reinterpret_cast<const unsigned char*>(norm.data());
  const size_t n = norm.size();
  FindWords(norm, WordBreak::kAsciiPunctuation, &token_start_, &token_len_, /*simd_level=*/1);
  for (size_t t = 0; t < token_start_.size(); ++t) {
    word_hash_.push_back(XXH3_64bits(s + token_start_[t], token_len_[t]));
  }
  // Text without spaces (Chinese, Japanese, Thai): long "words" of non-ASCII characters.
  if (!word_hash_.empty() && n / word_hash_.size() > 24 &&
      static_cast<size_t>(std::count_if(s, s + n, [](unsigned char c) { return c >= 0x80; })) * 2 >
          n) {
    word_hash_.clear();
    for (size_t i = 0; i < n;) {
      unsigned char c = s[i];
      size_t len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
      if (i + len > n) len = n - i;
      if (!IsShingleSep(c)) {
        uint32_t cp = 0;
        std::memcpy(&cp, s + i, len);
        word_hash_.push_back(Mix(cp + 0x51ed27));
      }
      i += len;
    }
  }
  if (word_hash_.empty()) return false;
  const size_t k = static_cast<size_t>(options_.ngram);
  shingle_.clear();
  if (word_hash_.size() < k) {
    uint64_t h = 0;
    for (uint64_t w : word_hash_) h = Mix(h * 0x100000001b3ULL + w);
    shingle_.push_back(static_cast<uint32_t>(h));
  } else {
    for (size_t i = 0; i + k <= word_hash_.size(); ++i) {
      uint64_t h = 0;
      for (size_t j = 0; j < k; ++j) h = h * 0x100000001b3ULL + word_hash_[i + j];
      shingle_.push_back(static_cast<uint32_t>(Mix(h)));
    }
  }
  const int p = permutations();
  uint32_t* m = mins_.data();
  MinHashMins(shingle_.data(), shingle_.size(), perm_a_.data(), perm_b_.data(), p, m,
              /*simd_level=*/2);
  for (int b = 0; b < options_.bands; ++b) {
    band_out[b] = XXH3_64bits_withSeed(m + b * options_.rows, options_.rows * sizeof(uint32_t), b);
  }
  for (int i = 0; i < p; ++i) sig_out[i] = static_cast<uint16_t>(Mix(m[i]));
  return true;
}

}  // namespace trainscope::data
