// HuggingFace tokenizer.json: byte-level BPE (GPT-2, Llama-3, Qwen2) and WordPiece (BERT).
//
// Encoding follows the `tokenizers` pipeline: added tokens are cut out of the raw text
// first (each is its own id), the rest is normalized, pre-tokenized (hf_pretokenize.h) and
// each pre-token is encoded by the model on its own.
//  - BPE: a pre-token's bytes become ByteLevel characters, each a vocabulary id; then the
//    adjacent pair with the lowest merge rank is merged (leftmost on ties) until no pair
//    has a rank, which is what the library's priority queue computes. `ignore_merges`
//    (Llama-3) first looks the whole pre-token up in the vocabulary.
//  - WordPiece: greedy longest match from the left, continuing pieces carry the prefix
//    ("##"); a word with an unmatched piece, or longer than max_input_chars_per_word
//    characters, is the unknown token.
// Anything else in the file (other models, normalizers, pre-tokenizers) is refused with an
// error naming the file and the kinds supported, rather than encoded differently.
#include <algorithm>
#include <array>
#include <climits>
#include <cstdio>
#include <fstream>
#include <functional>
#include <queue>
#include <sstream>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "tokenizer/hf_pretokenize.h"
#include "trainscope/core/json_text.h"
#include "trainscope/core/utf8.h"
#include "trainscope/tokenizer/tokenizer.h"

namespace trainscope::tokenizer {
namespace {

using json = nlohmann::json;

constexpr int kMaxJsonDepth = kJsonMaxDepth;  // tokenizer.json nests under 10 deep

constexpr char kSupported[] =
    "supported: models BPE (byte-level) and WordPiece; normalizers none, NFC, NFKC, NFD, NFKD, "
    "Lowercase, BertNormalizer, Sequence of these; pre-tokenizers ByteLevel, "
    "Sequence[Split(GPT-2 / Llama-3 / Qwen2 regex), ByteLevel], BertPreTokenizer, Whitespace";

struct Normalizer {
  bool bert = false;
  BertNormalizerOptions bert_options;
  std::string form;  // NFC, NFKC, NFD, NFKD, Lowercase
};

struct Config {
  bool bpe = true;
  absl::flat_hash_map<std::string, int32_t> vocab;
  std::vector<std::string> id_to_token;
  absl::flat_hash_map<uint64_t, std::pair<int32_t, int32_t>> merges;  // (a,b) -> (rank, id)
  bool ignore_merges = false;
  int32_t unk_id = -1;
  std::string prefix = "##";
  size_t max_word_chars = 100;
  std::vector<Normalizer> normalizers;
  SplitKind split = SplitKind::kGpt2;
  bool byte_level = false;
  bool add_prefix_space = false;
  std::vector<std::pair<std::string, int32_t>> added;  // longest first
  std::array<bool, 256> added_first_bytes{};           // first bytes of `added`
  int32_t eos_id = -1;
};

absl::Status Unsupported(const std::string& file, const std::string& what) {
  return absl::InvalidArgumentError(
      absl::StrCat(file, ": ", what, " is not supported (", kSupported, ")"));
}

std::string TypeOf(const json& j) {
  return j.is_object() && j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>()
                                                                      : std::string("?");
}

absl::Status ParseNormalizer(const std::string& file, const json& j, Config* c) {
  if (j.is_null()) return absl::OkStatus();
  const std::string t = TypeOf(j);
  if (t == "Sequence" && j.contains("normalizers") && j["normalizers"].is_array()) {
    for (const json& n : j["normalizers"]) {
      if (auto s = ParseNormalizer(file, n, c); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
  Normalizer n;
  if (t == "BertNormalizer") {
    n.bert = true;
    n.bert_options.clean_text = j.value("clean_text", true);
    n.bert_options.handle_chinese_chars = j.value("handle_chinese_chars", true);
    n.bert_options.lowercase = j.value("lowercase", true);
    const json& sa = j.contains("strip_accents") ? j["strip_accents"] : json();
    n.bert_options.strip_accents = sa.is_boolean() ? sa.get<bool>() : n.bert_options.lowercase;
  } else if (t == "NFC" || t == "NFKC" || t == "NFD" || t == "NFKD" || t == "Lowercase") {
    n.form = t;
  } else {
    return Unsupported(file, absl::StrCat("normalizer '", Excerpt(t), "'"));
  }
  c->normalizers.push_back(n);
  return absl::OkStatus();
}

absl::Status ParsePreTokenizer(const std::string& file, const json& j, Config* c) {
  const std::string t = TypeOf(j);
  auto byte_level = [&](const json& b, bool regex_default) {
    c->byte_level = true;
    c->add_prefix_space = b.value("add_prefix_space", false);
    return b.value("use_regex", regex_default);
  };
  if (t == "ByteLevel") {
    if (!byte_level(j, true)) return Unsupported(file, "ByteLevel pre-tokenizer without regex");
    c->split = SplitKind::kGpt2;
    return absl::OkStatus();
  }
  if (t == "BertPreTokenizer" || t == "Whitespace") {
    c->split = t == "Whitespace" ? SplitKind::kWhitespace : SplitKind::kBert;
    return absl::OkStatus();
  }
  if (t == "Sequence" && j.contains("pretokenizers") && j["pretokenizers"].size() == 2) {
    const json& split = j["pretokenizers"][0];
    const json& bl = j["pretokenizers"][1];
    const json pattern = split.value("pattern", json::object());
    if (TypeOf(split) == "Split" && TypeOf(bl) == "ByteLevel" && pattern.contains("Regex") &&
        split.value("behavior", "") == "Isolated" && !split.value("invert", false) &&
        SplitKindOfPattern(pattern["Regex"].get<std::string>(), &c->split) &&
        !byte_level(bl, false)) {
      return absl::OkStatus();
    }
    return Unsupported(file, "this Sequence pre-tokenizer (its Split pattern)");
  }
  return Unsupported(file, absl::StrCat("pre-tokenizer '", Excerpt(t), "'"));
}

absl::Status ParseMerges(const std::string& file, const json& merges, Config* c) {
  int32_t rank = 0;
  for (const json& m : merges) {
    std::string a, b;
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos) {
        return absl::InvalidArgumentError(absl::StrCat(file, ": merge ", rank, " has no space"));
      }
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      a = m[0].get<std::string>();
      b = m[1].get<std::string>();
    } else {
      return absl::InvalidArgumentError(absl::StrCat(file, ": merge ", rank, " is malformed"));
    }
    auto ia = c->vocab.find(a), ib = c->vocab.find(b), iab = c->vocab.find(a + b);
    if (ia == c->vocab.end() || ib == c->vocab.end() || iab == c->vocab.end()) {
      return absl::InvalidArgumentError(absl::StrCat(file, ": merge ", rank, " (", Excerpt(a), " ",
                                                     Excerpt(b), ") is not in the vocabulary"));
    }
    const uint64_t key = (uint64_t(uint32_t(ia->second)) << 32) | uint32_t(ib->second);
    c->merges.try_emplace(key, rank, iab->second);
    ++rank;
  }
  return absl::OkStatus();
}

absl::Status ParseModel(const std::string& file, const json& m, Config* c) {
  const std::string t = TypeOf(m);
  if (t != "BPE" && t != "WordPiece")
    return Unsupported(file, absl::StrCat("model '", Excerpt(t), "'"));
  c->bpe = t == "BPE";
  if (!m.contains("vocab") || !m["vocab"].is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": model.vocab is not an object"));
  }
  for (const auto& [tok, id] : m["vocab"].items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > (1 << 30)) {
      return absl::InvalidArgumentError(
          absl::StrCat(file, ": vocab id of '", Excerpt(tok), "' is bad"));
    }
    c->vocab[tok] = id.get<int32_t>();
  }
  const json& unk = m.contains("unk_token") ? m["unk_token"] : json();
  if (unk.is_string()) {
    auto it = c->vocab.find(unk.get<std::string>());
    if (it != c->vocab.end()) c->unk_id = it->second;
  }
  if (c->bpe) {
    for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      if (m.contains(k) && m[k].is_string() && !m[k].get<std::string>().empty()) {
        return Unsupported(file, absl::StrCat("BPE with ", k));
      }
    }
    if (m.value("byte_fallback", false)) return Unsupported(file, "BPE with byte_fallback");
    c->ignore_merges = m.value("ignore_merges", false);
    return ParseMerges(file, m.value("merges", json::array()), c);
  }
  c->prefix = m.value("continuing_subword_prefix", std::string("##"));
  c->max_word_chars = m.value("max_input_chars_per_word", size_t{100});
  if (c->unk_id < 0)
    return absl::InvalidArgumentError(absl::StrCat(file, ": WordPiece without unk_token in vocab"));
  return absl::OkStatus();
}

absl::Status ParseConfig(const std::string& file, const json& j, Config* c) {
  if (!j.is_object() || !j.contains("model")) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": not a tokenizer.json (no \"model\")"));
  }
  if (auto s = ParseModel(file, j["model"], c); !s.ok()) return s;
  if (j.contains("normalizer")) {
    if (auto s = ParseNormalizer(file, j["normalizer"], c); !s.ok()) return s;
  }
  const json pre = j.contains("pre_tokenizer") ? j["pre_tokenizer"] : json();
  if (pre.is_null()) return Unsupported(file, "a missing pre-tokenizer");
  if (auto s = ParsePreTokenizer(file, pre, c); !s.ok()) return s;
  if (c->bpe != c->byte_level) {
    return Unsupported(file, c->bpe ? "BPE without ByteLevel" : "WordPiece with ByteLevel");
  }
  for (const json& a : j.value("added_tokens", json::array())) {
    if (!a.contains("content") || !a.contains("id")) continue;
    const std::string content = a["content"].get<std::string>();
    const int64_t id = a["id"].get<int64_t>();
    if (id < 0 || id > (1 << 30)) {
      return absl::InvalidArgumentError(
          absl::StrCat(file, ": added token '", Excerpt(content), "' has a bad id"));
    }
    if (content.empty()) continue;
    c->added.emplace_back(content, static_cast<int32_t>(id));
    c->added_first_bytes[static_cast<unsigned char>(content[0])] = true;
    c->vocab.try_emplace(content, static_cast<int32_t>(id));
  }
  std::sort(c->added.begin(), c->added.end(),
            [](const auto& x, const auto& y) { return x.first.size() > y.first.size(); });
  int32_t max_id = -1;
  for (const auto& [tok, id] : c->vocab) max_id = std::max(max_id, id);
  for (const auto& [tok, id] : c->added) max_id = std::max(max_id, id);
  c->id_to_token.assign(max_id + 1, std::string());
  for (const auto& [tok, id] : c->vocab) c->id_to_token[id] = tok;
  for (const auto& [tok, id] : c->added) c->id_to_token[id] = tok;
  for (const char* eos : {"<|endoftext|>", "<|end_of_text|>", "</s>", "[SEP]"}) {
    auto it = c->vocab.find(eos);
    if (it != c->vocab.end()) {
      c->eos_id = it->second;
      break;
    }
  }
  return absl::OkStatus();
}

class HfTokenizer final : public Tokenizer {
 public:
  HfTokenizer(std::string file, Config c) : file_(std::move(file)), c_(std::move(c)) {}

  void Encode(std::string_view text, std::vector<int32_t>* ids) const override {
    // Added tokens first: the earliest match, the longest at one position.
    size_t start = 0;
    for (size_t i = 0; i < text.size() && !c_.added.empty(); ++i) {
      if (!c_.added_first_bytes[static_cast<unsigned char>(text[i])]) continue;
      for (const auto& [content, id] : c_.added) {
        if (text.compare(i, content.size(), content) == 0) {
          EncodeSegment(text.substr(start, i - start), ids);
          ids->push_back(id);
          start = i + content.size();
          i = start - 1;
          break;
        }
      }
    }
    EncodeSegment(text.substr(start), ids);
  }

  std::string Decode(const std::vector<int32_t>& ids) const override;
  int32_t vocab_size() const override { return static_cast<int32_t>(c_.id_to_token.size()); }
  int32_t eos_id() const override { return c_.eos_id; }
  std::string name() const override {
    return absl::StrCat(c_.bpe ? "hf-bpe:" : "hf-wordpiece:", file_);
  }

 private:
  void EncodeSegment(std::string_view text, std::vector<int32_t>* ids) const;
  void Bpe(std::string_view word, std::vector<int32_t>* ids) const;
  void MergeAll(std::vector<int32_t>* sym) const;
  void WordPiece(std::string_view word, std::vector<int32_t>* ids) const;

  const std::string file_;
  const Config c_;
};

void HfTokenizer::EncodeSegment(std::string_view text, std::vector<int32_t>* ids) const {
  if (text.empty()) return;
  std::string norm(text), tmp;
  for (const Normalizer& n : c_.normalizers) {
    if (n.bert) {
      norm = BertNormalize(norm, n.bert_options);
    } else if (UnicodeNormalize(n.form, norm, &tmp)) {
      norm.swap(tmp);
    }
  }
  if (c_.add_prefix_space && !norm.empty() && norm[0] != ' ') norm.insert(0, 1, ' ');
  std::vector<std::pair<uint32_t, uint32_t>> spans;
  SplitPreTokens(c_.split, norm, &spans);
  for (const auto& [b, e] : spans) {
    const std::string_view word(norm.data() + b, e - b);
    if (c_.bpe) {
      Bpe(word, ids);
    } else {
      WordPiece(word, ids);
    }
  }
}

void HfTokenizer::Bpe(std::string_view word, std::vector<int32_t>* ids) const {
  std::string mapped;
  for (char ch : word) AppendByteChar(static_cast<uint8_t>(ch), &mapped);
  if (c_.ignore_merges) {
    if (auto it = c_.vocab.find(mapped); it != c_.vocab.end()) {
      ids->push_back(it->second);
      return;
    }
  }
  std::vector<int32_t> sym;
  for (size_t i = 0; i < mapped.size();) {
    const size_t b = i;
    NextCodePoint(mapped, &i);
    auto it = c_.vocab.find(absl::string_view(mapped.data() + b, i - b));
    if (it != c_.vocab.end()) {
      sym.push_back(it->second);
    } else if (c_.unk_id >= 0) {
      sym.push_back(c_.unk_id);
    }
  }
  MergeAll(&sym);
  ids->insert(ids->end(), sym.begin(), sym.end());
}

// Applies merges lowest rank first, leftmost on ties, as a min-heap of candidate pairs over
// a linked list of symbols: O(n log n) in the pre-token's length (a scan for the best pair
// per merge is O(n^2), minutes on a megabyte-long run of one character). Heap entries
// that a merge made stale (either side changed) are skipped when popped.
void HfTokenizer::MergeAll(std::vector<int32_t>* sym) const {
  const int n = static_cast<int>(sym->size());
  if (n < 2) return;
  std::vector<int32_t>& id = *sym;
  std::vector<int> next(n), prev(n);
  for (int k = 0; k < n; ++k) {
    next[k] = k + 1 < n ? k + 1 : -1;
    prev[k] = k - 1;
  }
  struct Cand {
    int32_t rank;
    int left, right;
    int32_t a, b, merged;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
  auto push = [&](int l) {
    if (l < 0 || next[l] < 0) return;
    const int r = next[l];
    auto it = c_.merges.find((uint64_t(uint32_t(id[l])) << 32) | uint32_t(id[r]));
    if (it != c_.merges.end()) heap.push({it->second.first, l, r, id[l], id[r], it->second.second});
  };
  for (int k = 0; k + 1 < n; ++k) push(k);
  std::vector<bool> gone(n, false);
  while (!heap.empty()) {
    const Cand c = heap.top();
    heap.pop();
    if (gone[c.left] || gone[c.right] || next[c.left] != c.right || id[c.left] != c.a ||
        id[c.right] != c.b) {
      continue;
    }
    id[c.left] = c.merged;
    gone[c.right] = true;
    next[c.left] = next[c.right];
    if (next[c.right] >= 0) prev[next[c.right]] = c.left;
    push(prev[c.left]);
    push(c.left);
  }
  int w = 0;
  for (int k = 0; k < n; ++k) {
    if (!gone[k]) id[w++] = id[k];
  }
  sym->resize(w);
}

void HfTokenizer::WordPiece(std::string_view word, std::vector<int32_t>* ids) const {
  size_t chars = 0;
  for (size_t i = 0; i < word.size();) {
    NextCodePoint(word, &i);
    ++chars;
  }
  if (chars > c_.max_word_chars) {
    ids->push_back(c_.unk_id);
    return;
  }
  const size_t base = ids->size();
  std::string piece;
  for (size_t start = 0; start < word.size();) {
    size_t end = word.size();
    int32_t found = -1;
    while (end > start) {
      piece.assign(start > 0 ? c_.prefix : "");
      piece.append(word.substr(start, end - start));
      if (auto it = c_.vocab.find(piece); it != c_.vocab.end()) {
        found = it->second;
        break;
      }
      do --end;  // back to the previous character boundary
      while (end > start && (static_cast<unsigned char>(word[end]) & 0xC0) == 0x80);
    }
    if (found < 0) {
      ids->resize(base);
      ids->push_back(c_.unk_id);
      return;
    }
    ids->push_back(found);
    start = end;
  }
}

// ByteLevel decoder: each character of a token back to its byte (characters outside the
// table, as in added tokens, stay as they are). WordPiece decoder: pieces joined by spaces,
// continuing pieces glued to the previous one (no further clean-up).
std::string HfTokenizer::Decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size()) continue;
    const std::string& tok = c_.id_to_token[id];
    if (!c_.bpe) {
      if (tok.compare(0, c_.prefix.size(), c_.prefix) == 0) {
        out += tok.substr(c_.prefix.size());
      } else {
        if (!out.empty()) out.push_back(' ');
        out += tok;
      }
      continue;
    }
    for (size_t i = 0; i < tok.size();) {
      const size_t b = i;
      const uint32_t cp = NextCodePoint(tok, &i);
      const int byte = ByteOfCodePoint(cp);
      if (byte >= 0) {
        out.push_back(static_cast<char>(byte));
      } else {
        out.append(tok, b, i - b);
      }
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadHfTokenizer(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::stringstream text;
  text << in.rdbuf();
  // Real tokenizer.json files nest under 10 deep; ParseConfig copies and recurses into the
  // document, so a hostile one nested 60,000 deep would overflow the stack there.
  auto j = ParseJsonText(text.str(), kMaxJsonDepth, path);
  if (!j.ok()) return j.status();
  Config c;
  try {
    if (auto s = ParseConfig(path, *j, &c); !s.ok()) return s;
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": malformed tokenizer.json (", Excerpt(e.what(), 160), ")"));
  }
  return std::unique_ptr<Tokenizer>(new HfTokenizer(path, std::move(c)));
}

}  // namespace trainscope::tokenizer
