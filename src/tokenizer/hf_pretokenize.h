// Pre-tokenizers and normalizers of HuggingFace tokenizer.json files, on code points with
// ICU character classes instead of a general regex engine (private to ts_tokenizer).
// Each splitter reproduces one fixed regex of the `tokenizers` library exactly:
//  - kGpt2:   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//             (ByteLevel with use_regex true; GPT-2, RoBERTa);
//  - kLlama3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//             ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+   (Llama-3; with \p{N}
//             instead of \p{N}{1,3}: Qwen2, kQwen2);
//  - kBert:   BertPreTokenizer (split on white space, each punctuation character alone);
//  - kWhitespace: \w+|[^\w\s]+ .
// \s is Unicode White_Space, \p{L} / \p{N} the general categories L* / N*, as in Rust's regex.
#ifndef TRAINSCOPE_SRC_TOKENIZER_HF_PRETOKENIZE_H_
#define TRAINSCOPE_SRC_TOKENIZER_HF_PRETOKENIZE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace trainscope::tokenizer {

enum class SplitKind { kGpt2, kLlama3, kQwen2, kBert, kWhitespace };

// Appends [begin, end) byte ranges of `text`'s pre-tokens to `out` (their concatenation is
// `text` for the regex kinds; white space is dropped for kBert and kWhitespace). Invalid
// UTF-8 bytes are single code points of class "other".
void SplitPreTokens(SplitKind kind, std::string_view text,
                    std::vector<std::pair<uint32_t, uint32_t>>* out);

// Which SplitKind a Split pre-tokenizer's regex is; false when it is none of the above.
bool SplitKindOfPattern(const std::string& pattern, SplitKind* kind);

// GPT-2's byte <-> printable character table (ByteLevel): byte b is the code point
// ByteToCodePoint(b), written in UTF-8 by AppendByteChar.
void AppendByteChar(uint8_t b, std::string* out);
// Reverse: the byte of a ByteLevel code point, or -1.
int ByteOfCodePoint(uint32_t cp);

// BertNormalizer (clean_text, handle_chinese_chars, strip_accents, lowercase).
struct BertNormalizerOptions {
  bool clean_text = true;
  bool handle_chinese_chars = true;
  bool strip_accents = true;
  bool lowercase = true;
};
std::string BertNormalize(std::string_view text, const BertNormalizerOptions& o);
// Unicode normal forms "NFC", "NFKC", "NFD", "NFKD", and "Lowercase"; false if unknown.
bool UnicodeNormalize(const std::string& form, std::string_view text, std::string* out);

// Decodes one code point at text[*i] and advances *i (an invalid byte is 0xFFFD-like: its
// own value | 0x80000000, one byte).
uint32_t NextCodePoint(std::string_view text, size_t* i);

}  // namespace trainscope::tokenizer

#endif  // TRAINSCOPE_SRC_TOKENIZER_HF_PRETOKENIZE_H_
