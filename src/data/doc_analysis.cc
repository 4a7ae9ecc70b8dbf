// Per-document counts, hashes, MinHash and language (noise rules: noise_rules.cc).
#include "data/doc_analysis.h"

#include <cld2/internal/lang_script.h>
#include <cld2/public/compact_lang_det.h>
#include <xxhash.h>

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

inline bool IsSpace(unsigned char c) {
  return c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\f' || c == '\v';
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
};

uint32_t Range(int lo, int hi) {
  uint32_t m = 0;
  for (int i = lo; i <= hi; ++i) m |= 1u << i;
  return m;
}

}  // namespace

const char* FlagName(int flag) { return flag >= 0 && flag < kNumFlags ? kFlagNames[flag] : "?"; }

uint32_t FlagGroupMask(std::string_view name) {
  if (name == "all") return Range(0, kNumFlags - 1);
  if (name == "gopher") return Range(kFlagGopherShortDoc, kFlagGopherDupNgram);
  if (name == "gopher_quality") return Range(kFlagGopherShortDoc, kFlagGopherStopWords);
  if (name == "gopher_repetition") return Range(kFlagGopherDupLines, kFlagGopherDupNgram);
  if (name == "c4") return Range(kFlagC4LoremIpsum, kFlagC4FewSentences);
  if (name == "fineweb") return Range(kFlagFineWebLinePunct, kFlagFineWebListRatio);
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
    perm_a_.push_back(Mix(state) | 1);  // odd multiplier
    state += 0x9e3779b97f4a7c15ULL;
    perm_b_.push_back(Mix(state));
  }
  mins_.resize(p);
}

void DocAnalyzer::Analyze(std::string_view text, int64_t known_tokens, DocResult* r,
                          uint64_t* band_out, uint16_t* sig_out) {
  *r = DocResult();
  r->bytes = static_cast<uint32_t>(text.size());
  r->raw_hash = XXH3_64bits(text.data(), text.size());
  if (!options_.noise && !options_.language && !options_.near_dup) {
    // invalid_utf8 is kept (a few GB/s): it is what makes a plain-text document bad input.
    if (!simdjson::validate_utf8(text.data(), text.size())) r->flags |= 1u << kFlagInvalidUtf8;
    ExactAndCounts(text, known_tokens, r);
    return;
  }
  const bool valid = simdjson::validate_utf8(text.data(), text.size());
  if (!valid) r->flags |= 1u << kFlagInvalidUtf8;

  // One pass: character count and the normalised text (ASCII lower-case, whitespace runs
  // collapsed to one space, trimmed).
  norm_.resize(text.size());
  char* out = norm_.data();
  size_t o = 0;
  uint32_t chars = 0;
  bool pending_space = false;
  // The same pass records the words (maximal runs of non-whitespace bytes).
  word_start_.clear();
  word_len_.clear();
  const unsigned char* bytes = reinterpret_cast<const unsigned char*>(text.data());
  bool in_word = false;
  uint32_t start = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = bytes[i];
    chars += (c & 0xC0) != 0x80;
    if (IsSpace(c)) {
      pending_space = o > 0;
      if (in_word) {
        word_start_.push_back(start);
        word_len_.push_back(static_cast<uint32_t>(i) - start);
        in_word = false;
      }
      continue;
    }
    if (!in_word) {
      in_word = true;
      start = static_cast<uint32_t>(i);
    }
    if (pending_space) {
      out[o++] = ' ';
      pending_space = false;
    }
    out[o++] = (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : static_cast<char>(c);
  }
  if (in_word) {
    word_start_.push_back(start);
    word_len_.push_back(static_cast<uint32_t>(text.size()) - start);
  }
  norm_.resize(o);
  r->chars = chars;
  r->norm_hash = XXH3_64bits(norm_.data(), norm_.size());
  if (norm_.empty()) r->flags |= 1u << kFlagEmpty;

  r->words = static_cast<uint32_t>(word_start_.size());
  if (known_tokens >= 0) {
    r->tokens = known_tokens;
  } else if (options_.tokenizer != nullptr) {
    r->tokens = options_.tokenizer->Count(text);
  } else {
    r->tokens = text.size();
  }
  r->lang = CLD2::UNKNOWN_LANGUAGE;
  if (options_.noise && !norm_.empty()) {
    Noise(text, r);
    Repetition(text, r);
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

void DocAnalyzer::ExactAndCounts(std::string_view text, int64_t known_tokens, DocResult* r) {
  const size_t n = text.size();
  norm_.resize(n + 1);
  char* out = norm_.data();
  const unsigned char* s = reinterpret_cast<const unsigned char*>(text.data());
  size_t o = 0;
  uint32_t chars = 0, words = 0, prev_space = 1;  // as if preceded by whitespace
  for (size_t i = 0; i < n; ++i) {
    const unsigned char c = s[i];
    const uint32_t sp = kByteClass.space[c];
    out[o] = static_cast<char>(kByteClass.lower[c]);
    o += (sp & prev_space) ^ 1;  // skip a space after a space (or at the start)
    words += prev_space & (sp ^ 1);
    chars += (c & 0xC0) != 0x80;
    prev_space = sp;
  }
  if (o > 0 && out[o - 1] == ' ') --o;
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
// punctuation as separators, or code points for text without spaces), each hashed to 64
// bits; permutation i maps a shingle x to a_i*x + b_i mod 2^64 (a_i odd: a bijection) and
// keeps the minimum. Band b hashes rows [b*r, (b+1)*r) with XXH3; the 16-bit fingerprint
// of each minimum lets candidate pairs be verified by the fraction of agreeing
// permutations (an unbiased estimate of the Jaccard similarity; error ~sqrt(J(1-J)/P)).
bool DocAnalyzer::MinHash(std::string_view norm, uint64_t* band_out, uint16_t* sig_out) {
  word_hash_.clear();
  const unsigned char* s = reinterpret_cast<const unsigned char*>(norm.data());
  const size_t n = norm.size();
  size_t non_ascii = 0;
  for (size_t i = 0; i < n;) {
    while (i < n && IsShingleSep(s[i])) ++i;
    const size_t b = i;
    while (i < n && !IsShingleSep(s[i])) {
      non_ascii += s[i] >= 0x80;
      ++i;
    }
    if (i > b) word_hash_.push_back(XXH3_64bits(s + b, i - b));
  }
  // Text without spaces (Chinese, Japanese, Thai): long "words" of non-ASCII characters.
  if (!word_hash_.empty() && non_ascii * 2 > n && n / word_hash_.size() > 24) {
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
    shingle_.push_back(h);
  } else {
    for (size_t i = 0; i + k <= word_hash_.size(); ++i) {
      uint64_t h = 0;
      for (size_t j = 0; j < k; ++j) h = h * 0x100000001b3ULL + word_hash_[i + j];
      shingle_.push_back(Mix(h));
    }
  }
  const int p = permutations();
  std::fill(mins_.begin(), mins_.end(), std::numeric_limits<uint64_t>::max());
  const uint64_t* a = perm_a_.data();
  const uint64_t* bb = perm_b_.data();
  uint64_t* m = mins_.data();
  for (uint64_t x : shingle_) {
    for (int i = 0; i < p; ++i) {
      const uint64_t v = a[i] * x + bb[i];
      m[i] = v < m[i] ? v : m[i];
    }
  }
  for (int b = 0; b < options_.bands; ++b) {
    band_out[b] = XXH3_64bits_withSeed(m + b * options_.rows, options_.rows * sizeof(uint64_t), b);
  }
  for (int i = 0; i < p; ++i) sig_out[i] = static_cast<uint16_t>(Mix(m[i]));
  return true;
}

}  // namespace trainscope::data
