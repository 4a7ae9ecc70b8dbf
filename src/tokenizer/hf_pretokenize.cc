// Pre-tokenization of HuggingFace tokenizer.json files without a regex engine.
//
// The regexes of GPT-2, Llama-3 and Qwen2 are alternations tried in order at each position
// (leftmost-first, as the `tokenizers` library's onig/fancy-regex engines do). Each
// alternative is a short run of one character class, so each becomes a few lines over the
// decoded code points: the first alternative that matches at the current position gives the
// next pre-token. The only look-ahead, \s+(?!\S), keeps a run of white space but its last
// character when a non-space follows (that character then leads the next word).
#include "tokenizer/hf_pretokenize.h"

#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include <array>

namespace trainscope::tokenizer {
namespace {

constexpr uint32_t kInvalid = 0x80000000u;

bool IsL(uint32_t c) { return c < kInvalid && (U_GET_GC_MASK(c) & U_GC_L_MASK) != 0; }
bool IsN(uint32_t c) { return c < kInvalid && (U_GET_GC_MASK(c) & U_GC_N_MASK) != 0; }
bool IsS(uint32_t c) { return c < kInvalid && u_hasBinaryProperty(c, UCHAR_WHITE_SPACE); }
bool IsOther(uint32_t c) { return !IsS(c) && !IsL(c) && !IsN(c); }  // [^\s\p{L}\p{N}]
bool IsCrLf(uint32_t c) { return c == '\r' || c == '\n'; }

// \w of Rust's regex: Alphabetic, marks, decimal digits, connector punctuation, joiners.
bool IsWord(uint32_t c) {
  if (c >= kInvalid) return false;
  return u_hasBinaryProperty(c, UCHAR_ALPHABETIC) ||
         (U_GET_GC_MASK(c) & (U_GC_M_MASK | U_GC_ND_MASK | U_GC_PC_MASK)) != 0 ||
         u_hasBinaryProperty(c, UCHAR_JOIN_CONTROL);
}

bool IsBertPunct(uint32_t c) {
  if (c >= kInvalid) return false;
  if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
      (c >= 123 && c <= 126)) {
    return true;
  }
  return (U_GET_GC_MASK(c) & U_GC_P_MASK) != 0;
}

uint32_t Lower(uint32_t c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }

// 's 't 're 've 'm 'll 'd at i (ASCII case-insensitive for Llama-3's (?i:...)); the end or 0.
size_t Contraction(const std::vector<uint32_t>& c, size_t i, bool any_case) {
  const size_t n = c.size();
  if (c[i] != '\'' || i + 1 >= n) return 0;
  auto at = [&](size_t k) { return k < n ? (any_case ? Lower(c[k]) : c[k]) : 0u; };
  const uint32_t a = at(i + 1), b = at(i + 2);
  if (a == 's' || a == 't') return i + 2;
  if ((a == 'r' || a == 'v') && b == 'e') return i + 3;
  if (a == 'm') return i + 2;
  if (a == 'l' && b == 'l') return i + 3;
  if (a == 'd') return i + 2;
  return 0;
}

template <typename Pred>
size_t RunEnd(const std::vector<uint32_t>& c, size_t i, Pred p) {
  while (i < c.size() && p(c[i])) ++i;
  return i;
}

// \s+(?!\S)|\s+ at a white-space position i.
size_t SpaceRun(const std::vector<uint32_t>& c, size_t i) {
  const size_t k = RunEnd(c, i, IsS);
  if (k == c.size() || k - i == 1) return k;
  return k - 1;
}

size_t MatchGpt2(const std::vector<uint32_t>& c, size_t i) {
  const size_t n = c.size();
  if (size_t e = Contraction(c, i, false)) return e;
  const bool sp = c[i] == ' ' && i + 1 < n;
  for (auto cls : {IsL, IsN, IsOther}) {  // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`
    if (sp && cls(c[i + 1])) return RunEnd(c, i + 1, cls);
    if (cls(c[i])) return RunEnd(c, i, cls);
  }
  return SpaceRun(c, i);
}

size_t MatchLlama3(const std::vector<uint32_t>& c, size_t i, size_t max_digits) {
  const size_t n = c.size();
  if (size_t e = Contraction(c, i, true)) return e;
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (!IsCrLf(c[i]) && !IsL(c[i]) && !IsN(c[i]) && i + 1 < n && IsL(c[i + 1])) {
    return RunEnd(c, i + 1, IsL);
  }
  if (IsL(c[i])) return RunEnd(c, i, IsL);
  if (IsN(c[i])) {  // \p{N}{1,3}
    size_t e = i;
    while (e < n && e - i < max_digits && IsN(c[e])) ++e;
    return e;
  }
  // ` ?[^\s\p{L}\p{N}]+[\r\n]*`
  const size_t s = (c[i] == ' ' && i + 1 < n && IsOther(c[i + 1])) ? i + 1 : i;
  if (IsOther(c[s])) return RunEnd(c, RunEnd(c, s, IsOther), IsCrLf);
  // \s*[\r\n]+ : the white-space run up to its last line break.
  const size_t k = RunEnd(c, i, IsS);
  for (size_t p = k; p > i; --p) {
    if (IsCrLf(c[p - 1])) return p;
  }
  return SpaceRun(c, i);
}

}  // namespace

uint32_t NextCodePoint(std::string_view text, size_t* i) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  const uint8_t b = s[*i];
  size_t len = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
  uint32_t cp = len == 1 ? b : len == 2 ? b & 0x1F : len == 3 ? b & 0x0F : b & 0x07;
  bool ok = len != 0 && *i + len <= n;
  for (size_t k = 1; ok && k < len; ++k) {
    ok = (s[*i + k] & 0xC0) == 0x80;
    cp = (cp << 6) | (s[*i + k] & 0x3F);
  }
  if (!ok) {
    ++*i;
    return kInvalid | b;
  }
  *i += len;
  return cp;
}

void SplitPreTokens(SplitKind kind, std::string_view text,
                    std::vector<std::pair<uint32_t, uint32_t>>* out) {
  std::vector<uint32_t> cps, offs;
  cps.reserve(text.size());
  offs.reserve(text.size() + 1);
  for (size_t i = 0; i < text.size();) {
    offs.push_back(static_cast<uint32_t>(i));
    cps.push_back(NextCodePoint(text, &i));
  }
  offs.push_back(static_cast<uint32_t>(text.size()));
  const size_t n = cps.size();
  for (size_t i = 0; i < n;) {
    size_t e = i + 1;
    switch (kind) {
      case SplitKind::kGpt2:
        e = MatchGpt2(cps, i);
        break;
      case SplitKind::kLlama3:
        e = MatchLlama3(cps, i, 3);
        break;
      case SplitKind::kQwen2:
        e = MatchLlama3(cps, i, 1);
        break;
      case SplitKind::kBert:
        if (IsS(cps[i])) {
          ++i;
          continue;
        }
        e = IsBertPunct(cps[i])
                ? i + 1
                : RunEnd(cps, i, [](uint32_t c) { return !IsS(c) && !IsBertPunct(c); });
        break;
      case SplitKind::kWhitespace:
        if (IsS(cps[i])) {
          ++i;
          continue;
        }
        e = IsWord(cps[i]) ? RunEnd(cps, i, IsWord)
                           : RunEnd(cps, i, [](uint32_t c) { return !IsWord(c) && !IsS(c); });
        break;
    }
    out->emplace_back(offs[i], offs[e]);
    i = e;
  }
}

bool SplitKindOfPattern(const std::string& p, SplitKind* kind) {
  static const char kGpt2[] =
      "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
  static const char kLlama3[] =
      "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
      "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  static const char kQwen2[] =
      "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
      "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  if (p == kGpt2)
    *kind = SplitKind::kGpt2;
  else if (p == kLlama3)
    *kind = SplitKind::kLlama3;
  else if (p == kQwen2)
    *kind = SplitKind::kQwen2;
  else
    return false;
  return true;
}

// bytes_to_unicode: printable Latin-1 bytes stand for themselves, the other 68 bytes for
// U+0100.. in byte order.
namespace {
struct ByteTable {
  std::array<uint32_t, 256> cp{};
  std::array<int16_t, 324> byte{};
  ByteTable() {
    byte.fill(-1);
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      cp[b] = printable ? b : next++;
      byte[cp[b]] = static_cast<int16_t>(b);
    }
  }
};
const ByteTable& Table() {
  static const ByteTable t;
  return t;
}
}  // namespace

void AppendByteChar(uint8_t b, std::string* out) {
  const uint32_t c = Table().cp[b];
  if (c < 0x80) {
    out->push_back(static_cast<char>(c));
  } else {
    out->push_back(static_cast<char>(0xC0 | (c >> 6)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

int ByteOfCodePoint(uint32_t cp) { return cp < 324 ? Table().byte[cp] : -1; }

namespace {
bool IsChinese(uint32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
         (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

// Lowercasing as the `tokenizers` library does it: Rust's char::to_lowercase on each code
// point, i.e. the full mappings without context. In the root locale ICU's string lowercasing
// is contextual in one place only, Final_Sigma (a capital sigma that ends a word becomes ς,
// elsewhere σ), so capital sigmas are mapped to σ first and the rest is ICU's.
void LowercaseLikeTokenizers(icu::UnicodeString* u) {
  u->findAndReplace(icu::UnicodeString(static_cast<UChar>(0x03A3)),
                    icu::UnicodeString(static_cast<UChar>(0x03C3)));
  u->toLower(icu::Locale::getRoot());
}
}  // namespace

// BertNormalizer, in the order of the `tokenizers` library: clean, pad Chinese characters,
// strip accents (NFD, drop Mn), lowercase.
std::string BertNormalize(std::string_view text, const BertNormalizerOptions& o) {
  icu::UnicodeString u;
  for (size_t i = 0; i < text.size();) {
    uint32_t c = NextCodePoint(text, &i);
    if (c >= kInvalid) c = 0xFFFD;
    if (o.clean_text) {
      const bool control =
          c != '\t' && c != '\n' && c != '\r' && (U_GET_GC_MASK(c) & U_GC_C_MASK) != 0;
      if (c == 0 || c == 0xFFFD || control) continue;
      if (c == '\t' || c == '\n' || c == '\r' || u_charType(c) == U_SPACE_SEPARATOR) c = ' ';
    }
    const bool pad = o.handle_chinese_chars && IsChinese(c);
    if (pad) u.append(static_cast<UChar32>(' '));
    u.append(static_cast<UChar32>(c));
    if (pad) u.append(static_cast<UChar32>(' '));
  }
  UErrorCode err = U_ZERO_ERROR;
  if (o.strip_accents) {
    const icu::Normalizer2* nfd = icu::Normalizer2::getNFDInstance(err);
    if (U_SUCCESS(err)) {
      icu::UnicodeString d = nfd->normalize(u, err), kept;
      for (int32_t k = 0; k < d.length();) {
        const UChar32 c = d.char32At(k);
        if (u_charType(c) != U_NON_SPACING_MARK) kept.append(c);
        k += U16_LENGTH(c);
      }
      u = kept;
    }
  }
  if (o.lowercase) LowercaseLikeTokenizers(&u);
  std::string out;
  u.toUTF8String(out);
  return out;
}

bool UnicodeNormalize(const std::string& form, std::string_view text, std::string* out) {
  icu::UnicodeString u = icu::UnicodeString::fromUTF8(icu::StringPiece(text.data(), text.size()));
  UErrorCode err = U_ZERO_ERROR;
  const icu::Normalizer2* nz = form == "NFC"    ? icu::Normalizer2::getNFCInstance(err)
                               : form == "NFKC" ? icu::Normalizer2::getNFKCInstance(err)
                               : form == "NFD"  ? icu::Normalizer2::getNFDInstance(err)
                               : form == "NFKD" ? icu::Normalizer2::getNFKDInstance(err)
                                                : nullptr;
  if (form == "Lowercase") {
    LowercaseLikeTokenizers(&u);
  } else if (nz == nullptr || U_FAILURE(err)) {
    return false;
  } else {
    u = nz->normalize(u, err);
    if (U_FAILURE(err)) return false;
  }
  out->clear();
  u.toUTF8String(*out);
  return true;
}

}  // namespace trainscope::tokenizer
