// Noise rules with their published thresholds (../shared/reference/data.md §1.5-1.8, §7):
// Gopher quality and repetition (Rae et al. 2021, Table A1), C4 (Raffel et al. 2020,
// TFDS c4_utils), FineWeb (datatrove FineWebQualityFilter). A rule flags the document;
// `data clean` decides which flags drop it. Lengths are counted in bytes, not code points,
// which equals the published definitions for ASCII text.
#define XXH_INLINE_ALL  // short spans: see doc_analysis.cc
#include <xxhash.h>

#ifdef __AVX2__
#include <immintrin.h>
#endif

#include <algorithm>
#include <cstring>
#include <numeric>

#include "data/doc_analysis.h"

namespace trainscope::data {
namespace {

inline bool IsAsciiAlpha(unsigned char c) { return (c | 0x20) >= 'a' && (c | 0x20) <= 'z'; }
inline bool IsAsciiAlnum(unsigned char c) { return IsAsciiAlpha(c) || (c >= '0' && c <= '9'); }

std::string_view Trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && IsSpace(s[b])) ++b;
  while (e > b && IsSpace(s[e - 1])) --e;
  return s.substr(b, e - b);
}

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// Sentence-final marks (ASCII, and the common UTF-8 ones), optionally followed by a
// closing quote or bracket.
bool EndsWithTerminalPunct(std::string_view line) {
  while (!line.empty()) {
    unsigned char c = line.back();
    if (c == '"' || c == '\'' || c == ')') {
      line.remove_suffix(1);
      continue;
    }
    if (EndsWith(line, "\xE2\x80\x9D") || EndsWith(line, "\xE2\x80\x99") ||
        EndsWith(line, "\xE3\x80\x8D")) {  // ” ’ 」
      line.remove_suffix(3);
      continue;
    }
    break;
  }
  if (line.empty()) return false;
  unsigned char c = line.back();
  if (c == '.' || c == '!' || c == '?') return true;
  return EndsWith(line, "\xE3\x80\x82") || EndsWith(line, "\xEF\xBC\x81") ||  // 。 ！
         EndsWith(line, "\xEF\xBC\x9F") || EndsWith(line, "\xE2\x80\xA6");    // ？ …
}

// Small open-addressing counter keyed by 64-bit hashes, over scratch arrays owned by the
// analyzer. Clearing is O(1): an entry is live only when its stamp equals the current one.
class Counter {
 public:
  Counter(std::vector<uint64_t>* keys, std::vector<uint32_t>* vals, size_t expected)
      : keys_(*keys), vals_(*vals) {
    size_t cap = 64;
    while (cap < expected * 2) cap <<= 1;
    if (keys_.size() < cap) {
      keys_.assign(cap, 0);
      vals_.assign(cap * 2 + 2, 0);  // [stamp, count] pairs, then the stamp counter
    }
    mask_ = cap - 1;
    stamp_ = ++vals_[vals_.size() - 2];  // the stamp counter lives in a spare slot
    if (stamp_ == 0) {                   // wrapped: clear everything once
      std::fill(vals_.begin(), vals_.end(), 0);
      stamp_ = vals_[vals_.size() - 2] = 1;
    }
  }
  // The count of `key` (0 when absent).
  uint32_t Count(uint64_t key) const {
    size_t i = (key ^ (key >> 29)) & mask_;
    for (;;) {
      const uint32_t* slot = &vals_[2 * i];
      if (slot[0] != stamp_) return 0;
      if (keys_[i] == key) return slot[1];
      i = (i + 1) & mask_;
    }
  }
  // Increments and returns the new count.
  uint32_t Add(uint64_t key) {
    size_t i = (key ^ (key >> 29)) & mask_;
    for (;;) {
      uint32_t* slot = &vals_[2 * i];
      if (slot[0] != stamp_) {
        slot[0] = stamp_;
        slot[1] = 1;
        keys_[i] = key;
        return 1;
      }
      if (keys_[i] == key) return ++slot[1];
      i = (i + 1) & mask_;
    }
  }

 private:
  std::vector<uint64_t>& keys_;
  std::vector<uint32_t>& vals_;
  size_t mask_;
  uint32_t stamp_;
};

// Byte classes of a document as bitmaps (bit i % 64 of word i / 64 is byte i), built in one
// pass (32 bytes per step with AVX2) so that the rules below test ranges of bits instead of
// looping over bytes.
struct NoiseBytes {
  uint64_t* alpha;  // ASCII letter or byte >= 0x80
  uint64_t* alnum;  // ASCII letter or digit or byte >= 0x80
  uint64_t* odd;    // what the encoding rules read: >= 0x80, DEL, controls but \t \n \r \f
  uint64_t* stop;   // . ! ?
  uint64_t* newline;
  uint32_t hashes = 0;
  bool curly = false;
};

inline void NoiseByteScalar(unsigned char c, size_t i, NoiseBytes* b) {
  const uint64_t bit = uint64_t{1} << (i & 63);
  const size_t w = i >> 6;
  if (IsAsciiAlpha(c) || c >= 0x80) b->alpha[w] |= bit;
  if (IsAsciiAlnum(c) || c >= 0x80) b->alnum[w] |= bit;
  if (c >= 0x7F || (c < 0x20 && c != '\n' && c != '\t' && c != '\r' && c != '\f')) b->odd[w] |= bit;
  if (c == '.' || c == '!' || c == '?') b->stop[w] |= bit;
  if (c == '\n') b->newline[w] |= bit;
  b->hashes += c == '#';
  b->curly |= c == '{';
}

void ClassifyNoiseBytes(const unsigned char* s, size_t n, NoiseBytes* b) {
  const size_t words = (n + 63) / 64;
  std::fill_n(b->alpha, words, 0);
  std::fill_n(b->alnum, words, 0);
  std::fill_n(b->odd, words, 0);
  std::fill_n(b->stop, words, 0);
  std::fill_n(b->newline, words, 0);
  size_t i = 0;
#ifdef __AVX2__
  const __m256i kCase = _mm256_set1_epi8(0x20), kA = _mm256_set1_epi8('a');
  const __m256i k25 = _mm256_set1_epi8(25), k0 = _mm256_set1_epi8('0'), k9 = _mm256_set1_epi8(9);
  const __m256i k1f = _mm256_set1_epi8(0x1F);
  auto eq = [](__m256i v, char c) { return _mm256_cmpeq_epi8(v, _mm256_set1_epi8(c)); };
  auto bits = [](__m256i m) {
    return static_cast<uint64_t>(static_cast<uint32_t>(_mm256_movemask_epi8(m)));
  };
  bool curly = false;
  for (; i + 32 <= n; i += 32) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i));
    const __m256i a = _mm256_sub_epi8(_mm256_or_si256(v, kCase), kA);
    const __m256i d = _mm256_sub_epi8(v, k0);
    const uint64_t high = bits(v);
    const uint64_t alpha = bits(_mm256_cmpeq_epi8(_mm256_min_epu8(a, k25), a)) | high;
    const uint64_t digit = bits(_mm256_cmpeq_epi8(_mm256_min_epu8(d, k9), d));
    const uint64_t ctl = bits(_mm256_cmpeq_epi8(_mm256_min_epu8(v, k1f), v));
    const uint64_t allowed = bits(_mm256_or_si256(_mm256_or_si256(eq(v, '\n'), eq(v, '\t')),
                                                  _mm256_or_si256(eq(v, '\r'), eq(v, '\f'))));
    const uint64_t stop =
        bits(_mm256_or_si256(_mm256_or_si256(eq(v, '.'), eq(v, '!')), eq(v, '?')));
    const int shift = static_cast<int>(i & 63);
    const size_t w = i >> 6;
    b->alpha[w] |= alpha << shift;
    b->alnum[w] |= (alpha | digit) << shift;
    b->odd[w] |= (high | (ctl & ~allowed) | bits(eq(v, 0x7F))) << shift;
    b->stop[w] |= stop << shift;
    b->newline[w] |= bits(eq(v, '\n')) << shift;
    b->hashes += static_cast<uint32_t>(__builtin_popcountll(bits(eq(v, '#'))));
    curly |= bits(eq(v, '{')) != 0;
  }
  b->curly = curly;
#endif
  for (; i < n; ++i) NoiseByteScalar(s[i], i, b);
}

// The first set bit at or after `from` (n when there is none before n).
inline size_t NextBit(const uint64_t* bits, size_t from, size_t n) {
  if (from >= n) return n;
  size_t w = from >> 6;
  uint64_t x = bits[w] & (~uint64_t{0} << (from & 63));
  const size_t words = (n + 63) / 64;
  while (x == 0) {
    if (++w >= words) return n;
    x = bits[w];
  }
  return std::min(n, (w << 6) + static_cast<size_t>(__builtin_ctzll(x)));
}

// The last set bit at or before `from` (SIZE_MAX when there is none).
inline size_t PrevBit(const uint64_t* bits, size_t from) {
  size_t w = from >> 6;
  uint64_t x = bits[w] & (~uint64_t{0} >> (63 - (from & 63)));
  while (x == 0) {
    if (w == 0) return SIZE_MAX;
    x = bits[--w];
  }
  return (w << 6) + 63 - static_cast<size_t>(__builtin_clzll(x));
}

// Whether any bit of [b, e) is set.
inline bool AnyBit(const uint64_t* bits, size_t b, size_t e) {
  return b < e && NextBit(bits, b, e) < e;
}

// --- encoding: control characters and mojibake (UTF-8 read as Latin-1 / cp1252: a code point
// U+00C2..U+00F4 followed by U+0080..U+00BF, or by a cp1252 special). Only the bytes marked
// odd are visited; any other byte in between ends a lead. Returns the flags found.
uint32_t EncodingFlags(const unsigned char* s, size_t n, const NoiseBytes& bytes) {
  uint32_t control = 0, mojibake = 0;
  bool prev_lead = false;  // previous code point in U+00C2..U+00F4
  for (size_t i = NextBit(bytes.odd, 0, n); i < n;) {
    const unsigned char c = s[i];
    size_t next = i + 1;
    if (c < 0x80) {  // a control character or DEL: the only ASCII bytes marked
      ++control;
      prev_lead = false;
    } else if (c == 0xC2 && i + 1 < n && s[i + 1] >= 0x80 && s[i + 1] <= 0xBF) {
      if (s[i + 1] <= 0x9F) ++control;  // C1 control
      if (prev_lead) ++mojibake;
      prev_lead = false;
      next = i + 2;
    } else if (c == 0xC3 && i + 1 < n && s[i + 1] >= 0x82 && s[i + 1] <= 0xB4) {
      prev_lead = true;
      next = i + 2;
    } else {
      if (prev_lead &&
          ((c == 0xE2 && i + 2 < n && (s[i + 1] == 0x80 || s[i + 1] == 0x82 || s[i + 1] == 0x84)) ||
           c == 0xC5 || c == 0xC6 || c == 0xCB)) {
        ++mojibake;
      }
      prev_lead = false;
    }
    i = NextBit(bytes.odd, next, n);
    if (i != next) prev_lead = false;
  }
  uint32_t flags = 0;
  if (control > 0) flags |= 1u << kFlagControlChars;
  if (mojibake > 0) flags |= 1u << kFlagMojibake;
  return flags;
}

// What the line rules count (Gopher repetition, FineWeb, C4, bullets/ellipses).
struct NoiseLines {
  uint32_t n_lines = 0, dup_lines = 0, punct_lines = 0, short_lines = 0, bullets = 0;
  uint32_t ellipsis_lines = 0, c4_sentences = 0, newlines = 0;
  uint64_t dup_line_bytes = 0;
};

// C4's sentences of the kept line [lb, le): a . ! ? at the line's end or before whitespace
// or a '"'.
uint32_t C4Sentences(const unsigned char* s, size_t lb, size_t le, const NoiseBytes& bytes) {
  uint32_t sentences = 0;
  for (size_t k = NextBit(bytes.stop, lb, le); k < le; k = NextBit(bytes.stop, k + 1, le)) {
    if (k + 1 == le || IsSpace(s[k + 1]) || s[k + 1] == '"') ++sentences;
  }
  return sentences;
}

// The lines of `text` (trimmed, blank ones skipped); `seen` counts their hashes.
NoiseLines CountNoiseLines(std::string_view text, const NoiseBytes& bytes,
                           const std::vector<uint32_t>& word_start, Counter* seen) {
  const unsigned char* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  NoiseLines c;
  size_t pos = 0, line_word = 0;  // line_word: the first word at or after the line
  while (pos <= n) {
    const size_t end = NextBit(bytes.newline, pos, n);  // n: no newline left
    const bool nl = end < n;
    if (nl) ++c.newlines;
    std::string_view line = Trim(text.substr(pos, end - pos));
    pos = end + 1;
    if (line.empty()) {
      if (!nl) break;
      continue;
    }
    ++c.n_lines;
    if (seen->Add(XXH3_64bits(line.data(), line.size())) > 1) {
      ++c.dup_lines;
      c.dup_line_bytes += line.size();
    }
    const bool terminal = EndsWithTerminalPunct(line);
    c.punct_lines += terminal;
    c.short_lines += line.size() <= 30;
    if (line[0] == '-' || line.substr(0, 3) == "\xE2\x80\xA2") ++c.bullets;
    if (EndsWith(line, "...") || EndsWith(line, "\xE2\x80\xA6")) ++c.ellipsis_lines;
    // C4 keeps lines that end in terminal punctuation (not "...") and have >= 3 words;
    // sentences are counted in the kept lines.
    const size_t lb = static_cast<size_t>(line.data() - text.data()), le = lb + line.size();
    while (line_word < word_start.size() && word_start[line_word] < lb) ++line_word;
    if (terminal && !EndsWith(line, "...")) {
      size_t words = 0;
      while (line_word + words < word_start.size() && word_start[line_word + words] < le &&
             words < 3) {
        ++words;
      }
      if (words >= 3) c.c4_sentences += C4Sentences(s, lb, le, bytes);
    }
    if (!nl) break;
  }
  return c;
}

// What the paragraph rules count.
struct NoiseParagraphs {
  uint32_t n_paras = 0, dup_paras = 0;
  uint64_t dup_para_bytes = 0;
};

// Paragraphs: separated by blank lines (trimmed, empty ones skipped); `seen` counts their
// hashes.
NoiseParagraphs CountNoiseParagraphs(std::string_view text, const NoiseBytes& bytes,
                                     Counter* seen) {
  const unsigned char* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  NoiseParagraphs c;
  size_t pos = 0;
  while (pos < n) {
    size_t end = pos;
    // find "\n" followed by optional spaces and another "\n"
    for (;;) {
      const size_t nl = NextBit(bytes.newline, end, n);
      if (nl == n) {
        end = n;
        break;
      }
      size_t k = nl + 1;
      while (k < n && (s[k] == ' ' || s[k] == '\t' || s[k] == '\r')) ++k;
      if (k < n && s[k] == '\n') {
        end = nl;
        break;
      }
      end = k;
    }
    std::string_view para = Trim(text.substr(pos, end - pos));
    pos = end + 1;
    if (para.empty()) continue;
    ++c.n_paras;
    if (seen->Add(XXH3_64bits(para.data(), para.size())) > 1) {
      ++c.dup_paras;
      c.dup_para_bytes += para.size();
    }
  }
  return c;
}

// What the word rules count (Gopher quality).
struct NoiseWords {
  uint32_t stop_seen = 0;  // bit k: kStopPacked[k] occurs
  uint32_t non_symbol = 0, alpha_words = 0, ellipses = 0;
  uint64_t non_symbol_len = 0;
};

NoiseWords CountNoiseWords(std::string_view text, const NoiseBytes& bytes,
                           const std::vector<uint32_t>& word_start,
                           const std::vector<uint32_t>& word_len) {
  // Gopher's stop words "the be to of and that have with", packed as little-endian uint32.
  static constexpr uint32_t kStopPacked[8] = {
      't' | 'h' << 8 | 'e' << 16,
      'b' | 'e' << 8,
      't' | 'o' << 8,
      'o' | 'f' << 8,
      'a' | 'n' << 8 | 'd' << 16,
      't' | 'h' << 8 | 'a' << 16 | static_cast<uint32_t>('t') << 24,
      'h' | 'a' << 8 | 'v' << 16 | static_cast<uint32_t>('e') << 24,
      'w' | 'i' << 8 | 't' << 16 | static_cast<uint32_t>('h') << 24};
  const unsigned char* s = reinterpret_cast<const unsigned char*>(text.data());
  NoiseWords c;
  for (size_t w = 0; w < word_start.size(); ++w) {
    const unsigned char* p = s + word_start[w];
    const uint32_t len = word_len[w];
    c.alpha_words += AnyBit(bytes.alpha, word_start[w], word_start[w] + len);
    if (AnyBit(bytes.alnum, word_start[w], word_start[w] + len)) {
      ++c.non_symbol;
      c.non_symbol_len += len;
    }
    if (len >= 2 && len <= 4) {
      uint32_t w = 0;  // lower-cased word packed little-endian
      for (uint32_t k = 0; k < len; ++k)
        w |= static_cast<uint32_t>(p[k] | (IsAsciiAlpha(p[k]) ? 0x20 : 0)) << (8 * k);
      for (int k = 0; k < 8; ++k) c.stop_seen |= static_cast<uint32_t>(w == kStopPacked[k]) << k;
    }
  }
  for (size_t k = text.find("...", 0); k != std::string_view::npos; k = text.find("...", k + 3))
    ++c.ellipses;
  for (size_t k = text.find("\xE2\x80\xA6", 0); k != std::string_view::npos;
       k = text.find("\xE2\x80\xA6", k + 3)) {
    ++c.ellipses;
  }
  return c;
}

// Gopher's quality and repetition rules over a document of `n` bytes and `words` words
// (`hashes`: its '#' count, every one of them in a word).
uint32_t GopherFlags(const NoiseLines& l, const NoiseParagraphs& p, const NoiseWords& w,
                     uint32_t hashes, uint32_t words, size_t n) {
  const double nw = std::max<uint32_t>(1, words);
  uint32_t flags = 0;
  if (w.non_symbol < 50) flags |= 1u << kFlagGopherShortDoc;
  if (w.non_symbol > 100000) flags |= 1u << kFlagGopherLongDoc;
  if (w.non_symbol > 0) {
    const double avg = static_cast<double>(w.non_symbol_len) / w.non_symbol;
    if (avg < 3 || avg > 10) flags |= 1u << kFlagGopherWordLength;
  }
  if (hashes / nw > 0.1 || w.ellipses / nw > 0.1) flags |= 1u << kFlagGopherSymbolRatio;
  if (l.n_lines > 0 && l.bullets > 0.9 * l.n_lines) flags |= 1u << kFlagGopherBulletLines;
  if (l.n_lines > 0 && l.ellipsis_lines > 0.3 * l.n_lines) flags |= 1u << kFlagGopherEllipsisLines;
  if (words > 0 && w.alpha_words < 0.8 * words) flags |= 1u << kFlagGopherAlphaWords;
  if (__builtin_popcount(w.stop_seen) < 2) flags |= 1u << kFlagGopherStopWords;
  if (l.n_lines > 0 && l.dup_lines > 0.3 * l.n_lines) flags |= 1u << kFlagGopherDupLines;
  if (p.n_paras > 0 && p.dup_paras > 0.3 * p.n_paras) flags |= 1u << kFlagGopherDupParagraphs;
  if (l.dup_line_bytes > 0.2 * n) flags |= 1u << kFlagGopherDupLineChars;
  if (p.dup_para_bytes > 0.2 * n) flags |= 1u << kFlagGopherDupParagraphChars;
  return flags;
}

// C4's document rules (`norm`: the document normalised, lower-cased).
uint32_t C4Flags(const NoiseLines& l, bool curly, const std::string& norm, int min_sentences) {
  uint32_t flags = 0;
  if (l.c4_sentences < static_cast<uint32_t>(min_sentences)) flags |= 1u << kFlagC4FewSentences;
  if (curly) flags |= 1u << kFlagC4CurlyBracket;
  for (size_t k = 0; k + 11 <= norm.size(); ++k) {
    k = norm.find("lorem ipsum", k);
    if (k == std::string::npos) break;
    flags |= 1u << kFlagC4LoremIpsum;
    break;
  }
  return flags;
}

// FineWeb's rules over a document of `n` bytes and `words` words.
uint32_t FineWebFlags(const NoiseLines& l, uint32_t words, size_t n) {
  const double nw = std::max<uint32_t>(1, words);
  uint32_t flags = 0;
  if (l.n_lines > 0 && l.punct_lines < 0.12 * l.n_lines) flags |= 1u << kFlagFineWebLinePunct;
  if (l.n_lines > 0 && l.short_lines > 0.67 * l.n_lines) flags |= 1u << kFlagFineWebShortLines;
  const size_t no_nl = n - l.newlines;
  if (no_nl > 0 && l.dup_line_bytes > 0.01 * no_nl) flags |= 1u << kFlagFineWebCharDup;
  if (l.newlines / nw > 0.3) flags |= 1u << kFlagFineWebListRatio;
  return flags;
}

// --- truncation: prose (at least one sentence end before) whose final segment runs on for
// two or more words and ends on a letter, digit or comma, i.e. cut mid-sentence.
bool Truncated(std::string_view text, const NoiseBytes& bytes,
               const std::vector<uint32_t>& word_start) {
  const unsigned char* s = reinterpret_cast<const unsigned char*>(text.data());
  std::string_view t = Trim(text);
  if (t.empty()) return false;
  const unsigned char last = t.back();
  const bool cut_char = IsAsciiAlnum(last) || last == ',' || last == ';' || last >= 0x80;
  if (!cut_char || EndsWithTerminalPunct(t)) return false;
  // The last sentence end before the final segment: . ! ? followed by whitespace.
  const size_t tb = static_cast<size_t>(t.data() - text.data()), te = tb + t.size();
  size_t k = te >= tb + 2 ? PrevBit(bytes.stop, te - 2) : SIZE_MAX;
  while (k != SIZE_MAX && k >= tb && !IsSpace(s[k + 1])) {
    k = k > 0 ? PrevBit(bytes.stop, k - 1) : SIZE_MAX;
  }
  if (k == SIZE_MAX || k < tb) return false;
  // Two or more words after it (every word there starts past the whitespace).
  const auto first = std::lower_bound(word_start.begin(), word_start.end(), k + 2);
  return word_start.end() - first >= 2;
}

}  // namespace

void DocAnalyzer::Noise(std::string_view text, DocResult* r) {
  const unsigned char* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  const size_t nwords64 = (n + 63) / 64;
  noise_bits_.resize(5 * nwords64 + 1);
  NoiseBytes bytes{noise_bits_.data(), noise_bits_.data() + nwords64,
                   noise_bits_.data() + 2 * nwords64, noise_bits_.data() + 3 * nwords64,
                   noise_bits_.data() + 4 * nwords64};
  ClassifyNoiseBytes(s, n, &bytes);
  r->flags |= EncodingFlags(s, n, bytes);

  const size_t expected = word_start_.size() + 16;  // >= lines >= paragraphs
  Counter lines_seen(&table_keys_, &table_vals_, expected);
  const NoiseLines lines = CountNoiseLines(text, bytes, word_start_, &lines_seen);
  Counter paras_seen(&table_keys_, &table_vals_, expected);
  const NoiseParagraphs paras = CountNoiseParagraphs(text, bytes, &paras_seen);
  const NoiseWords words = CountNoiseWords(text, bytes, word_start_, word_len_);
  r->flags |= GopherFlags(lines, paras, words, bytes.hashes, r->words, n);
  r->flags |= C4Flags(lines, bytes.curly, norm_, options_.c4_min_sentences);
  r->flags |= FineWebFlags(lines, r->words, n);
  if (Truncated(text, bytes, word_start_)) r->flags |= 1u << kFlagTruncated;
}

// Gopher repetition: top 2-4-gram character fractions and duplicate 5-10-gram character
// fractions, datatrove's definitions: a top n-gram's characters are its words joined by
// spaces times its count; duplicate n-grams are found left to right and, after a repeat,
// the scan skips n words. Without a duplicated 5-gram there is no duplicated longer n-gram,
// so 6..10 are skipped then.
//
// A k-gram can only occur twice where its (k-1)-gram prefix does, so each k counts only the
// positions whose (k-1)-gram is repeated ("candidates"; all positions for k = 2). A unique
// gram left out changes no other gram's count, so the counts, the first position reaching the
// top count and the skip scan's verdicts are those of counting every position; prose has
// few repeated bigrams, so most of the longer grams are never hashed into a table.
void DocAnalyzer::Repetition(std::string_view text, DocResult* r) {
  const size_t nw = word_start_.size();
  if (nw < 2 || text.empty()) return;
  const unsigned char* s = reinterpret_cast<const unsigned char*>(text.data());
  word_hash_.resize(nw);
  for (size_t w = 0; w < nw; ++w) word_hash_[w] = XXH3_64bits(s + word_start_[w], word_len_[w]);
  const double len = static_cast<double>(text.size());
  static const double kTop[5] = {0, 0, 0.20, 0.18, 0.16};
  static const double kDup[11] = {0, 0, 0, 0, 0, 0.15, 0.14, 0.13, 0.12, 0.11, 0.10};
  // gram_[i] = hash of the k-gram starting at word i (kept up to date for candidates).
  gram_.assign(word_hash_.begin(), word_hash_.end());
  candidate_.resize(nw - 1);  // positions with a 2-gram
  std::iota(candidate_.begin(), candidate_.end(), 0u);
  bool top_done = false;
  for (size_t k = 2; k <= 10 && k <= nw; ++k) {
    // Candidates whose k-gram fits (they are sorted, so the last ones drop out); only their
    // grams are extended (the others are not read again).
    while (!candidate_.empty() && candidate_.back() + k > nw) candidate_.pop_back();
    for (uint32_t i : candidate_) {
      gram_[i] = (gram_[i] ^ word_hash_[i + k - 1]) * 0x9E3779B97F4A7C15ULL + k;
    }
    Counter counts(&table_keys_, &table_vals_, candidate_.size());
    if (k <= 4) {
      uint32_t best = 0;
      size_t best_at = 0;
      for (uint32_t i : candidate_) {
        const uint32_t cnt = counts.Add(gram_[i]);
        if (cnt > best) {
          best = cnt;
          best_at = i;
        }
      }
      if (!top_done && best > 1) {
        size_t chars = k - 1;
        for (size_t j = 0; j < k; ++j) chars += word_len_[best_at + j];
        if (chars * best / len > kTop[k]) {
          r->flags |= 1u << kFlagGopherTopNgram;
          top_done = true;
        }
      }
    } else {
      // The skip scan over every position, counting only candidates (the others are unique).
      Counter scan(&dup_keys_, &dup_vals_, candidate_.size());
      uint64_t dup_chars = 0;
      size_t i = 0, c = 0;  // candidate_[c] is the first candidate at or after i
      while (i + k <= nw) {
        while (c < candidate_.size() && candidate_[c] < i) ++c;
        if (c == candidate_.size()) break;
        if (candidate_[c] != i) {
          i = candidate_[c];
          continue;
        }
        if (scan.Add(gram_[i]) > 1) {
          for (size_t j = 0; j < k; ++j) dup_chars += word_len_[i + j];
          i += k;
        } else {
          ++i;
        }
      }
      if (dup_chars == 0) break;
      if (dup_chars / len > kDup[k]) {
        r->flags |= 1u << kFlagGopherDupNgram;
        break;
      }
      for (uint32_t ci : candidate_) counts.Add(gram_[ci]);
    }
    // The next candidates: positions whose k-gram is repeated.
    size_t kept = 0;
    for (uint32_t i : candidate_) {
      if (counts.Count(gram_[i]) > 1) candidate_[kept++] = i;
    }
    candidate_.resize(kept);
    if (kept == 0) break;  // no repeated k-gram: none longer, no duplicate either
  }
}

}  // namespace trainscope::data
