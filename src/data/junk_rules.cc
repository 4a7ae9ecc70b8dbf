// Junk rules: documents that are not text at all, whatever the corpus, and that `data clean`
// drops by default (the `junk` group). Published pipelines catch them only as side effects
// of their length and stop-word rules, which also drop short real documents and code, so
// these look for the junk itself:
//   junk_repeated_char: one character repeated (`aaaa…`, `!!!!`, a line of `=`),
//   junk_html:          markup documents, where tags are most of the text,
//   junk_lorem_ipsum:   placeholder text: "lorem ipsum" and mostly its words. C4's rule
//                       (c4_lorem_ipsum) drops any mention, such as this file.
// The first two count bytes outside whitespace: the words of the analyzer (maximal non-space
// runs); the third reads the normalised text (lower case, single spaces).
#include <algorithm>
#include <cctype>
#include <cstring>
#include <iterator>

#include "data/doc_analysis.h"

namespace trainscope::data {
namespace {

// The length of the UTF-8 sequence that starts with `c` (1 for a stray continuation byte, so
// that a scan always advances).
size_t Utf8Length(unsigned char c) {
  if (c >= 0xF0) return 4;
  if (c >= 0xE0) return 3;
  if (c >= 0xC0) return 2;
  return 1;
}

inline bool IsTagStart(unsigned char c) {
  return ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') || c == '/' || c == '!';
}

// One character repeated: at least 4 copies of the document's first non-space character
// make up at least 90% of its non-space bytes. The scan stops as soon as the other bytes
// pass a tenth of the document, so prose costs a few bytes.
bool RepeatedChar(std::string_view text, size_t nonspace_bytes) {
  const size_t n = text.size();
  size_t i = 0;
  while (i < n && IsSpace(text[i])) ++i;
  if (i == n) return false;
  const std::string_view unit = text.substr(i, Utf8Length(text[i]));
  size_t copies = 0, other = 0;
  while (i < n) {
    if (IsSpace(text[i])) {
      ++i;
    } else if (text.compare(i, unit.size(), unit) == 0) {
      ++copies;
      i += unit.size();
    } else {
      if (++other * 10 > nonspace_bytes) return false;
      ++i;
    }
  }
  return copies >= 4;
}

// Markup: tags (`<` then a letter, `/` or `!`, up to the next `>`, with no `<` inside and at
// most 2 KiB long) hold more than half of the non-space bytes, there are at least two, and
// one of them closes an element or is a declaration or comment (`</p>`, `<!DOCTYPE`, `<!--`),
// which C++ includes and generics (`#include <vector>`, `Vec<String>`) never do.
bool Markup(std::string_view text, size_t nonspace_bytes) {
  const char* s = text.data();
  const size_t n = text.size();
  size_t tags = 0, tag_bytes = 0;
  bool closing = false;
  for (const char* p = static_cast<const char*>(std::memchr(s, '<', n)); p != nullptr;) {
    const size_t at = static_cast<size_t>(p - s);
    const char* next = nullptr;
    if (at + 1 < n && IsTagStart(p[1])) {
      const size_t limit = std::min(n - at, size_t{2048});
      size_t k = 1, inside = 1;
      while (k < limit && p[k] != '>' && p[k] != '<') inside += !IsSpace(p[k++]);
      if (k < limit && p[k] == '>') {
        ++tags;
        tag_bytes += inside + 1;
        closing |= p[1] == '/' || p[1] == '!';
        next = p + k + 1;
      } else {
        next = p + k;
      }
    } else {
      next = p + 1;
    }
    const size_t left = n - static_cast<size_t>(next - s);
    p = left > 0 ? static_cast<const char*>(std::memchr(next, '<', left)) : nullptr;
  }
  return tags >= 2 && closing && tag_bytes * 2 > nonspace_bytes;
}

// The words of the classic placeholder passage ("Lorem ipsum dolor sit amet, ..."), sorted.
constexpr std::string_view kLoremWords[] = {
    "ad",        "adipiscing", "aliqua",     "aliquip",     "amet",          "anim",
    "aute",      "cillum",     "commodo",    "consectetur", "consequat",     "culpa",
    "cupidatat", "deserunt",   "do",         "dolor",       "dolore",        "duis",
    "ea",        "eiusmod",    "elit",       "enim",        "esse",          "est",
    "et",        "eu",         "ex",         "excepteur",   "exercitation",  "fugiat",
    "id",        "in",         "incididunt", "ipsum",       "irure",         "labore",
    "laboris",   "laborum",    "lorem",      "magna",       "minim",         "mollit",
    "nisi",      "non",        "nostrud",    "nulla",       "occaecat",      "officia",
    "pariatur",  "proident",   "qui",        "quis",        "reprehenderit", "sed",
    "sint",      "sit",        "sunt",       "tempor",      "ullamco",       "ut",
    "velit",     "veniam",     "voluptate"};

// Placeholder text: "lorem ipsum" (not inside a word), and at least half of the words
// (punctuation around them stripped) are words of the passage. Latin prose has the short
// ones (in, et, est, non) but not "lorem ipsum" (Cicero's "dolorem ipsum" is not a match);
// code and documents that quote it have their own words.
bool LoremIpsum(std::string_view norm) {
  size_t at = norm.find("lorem ipsum");
  while (at != std::string_view::npos && at > 0 &&
         std::isalnum(static_cast<unsigned char>(norm[at - 1]))) {
    at = norm.find("lorem ipsum", at + 1);
  }
  if (at == std::string_view::npos) return false;
  size_t words = 0, lorem = 0;
  for (size_t b = 0; b < norm.size();) {
    size_t e = norm.find(' ', b);
    if (e == std::string_view::npos) e = norm.size();
    std::string_view w = norm.substr(b, e - b);
    while (!w.empty() && std::ispunct(static_cast<unsigned char>(w.front()))) w.remove_prefix(1);
    while (!w.empty() && std::ispunct(static_cast<unsigned char>(w.back()))) w.remove_suffix(1);
    ++words;
    lorem += std::binary_search(std::begin(kLoremWords), std::end(kLoremWords), w);
    b = e + 1;
  }
  return lorem * 2 >= words;
}

}  // namespace

void DocAnalyzer::Junk(std::string_view text, DocResult* r) {
  size_t nonspace_bytes = 0;
  for (uint32_t len : word_len_) nonspace_bytes += len;
  if (nonspace_bytes == 0) return;
  if (RepeatedChar(text, nonspace_bytes)) r->flags |= 1u << kFlagJunkRepeatedChar;
  if (Markup(text, nonspace_bytes)) r->flags |= 1u << kFlagJunkHtml;
  if (LoremIpsum(norm_)) r->flags |= 1u << kFlagJunkLoremIpsum;
}

}  // namespace trainscope::data
