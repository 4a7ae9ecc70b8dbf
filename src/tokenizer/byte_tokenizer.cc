// Byte-level tokenizer: the id of a token is its UTF-8 byte, 256 ends a document.
#include <memory>
#include <string>

#include "trainscope/tokenizer/tokenizer.h"

namespace trainscope::tokenizer {

size_t Tokenizer::Count(std::string_view text) const {
  std::vector<int32_t> ids;
  Encode(text, &ids);
  return ids.size();
}

namespace {

class ByteTokenizer final : public Tokenizer {
 public:
  void Encode(std::string_view text, std::vector<int32_t>* ids) const override {
    const size_t base = ids->size();
    ids->resize(base + text.size());
    int32_t* out = ids->data() + base;
    for (size_t i = 0; i < text.size(); ++i) out[i] = static_cast<unsigned char>(text[i]);
  }
  size_t Count(std::string_view text) const override { return text.size(); }
  // Ids outside 0..255 (eos, or garbage) are skipped: decoding never fails.
  std::string Decode(const std::vector<int32_t>& ids) const override {
    std::string out;
    out.reserve(ids.size());
    for (int32_t id : ids) {
      if (id >= 0 && id < 256) out.push_back(static_cast<char>(id));
    }
    return out;
  }
  int32_t vocab_size() const override { return 257; }
  int32_t eos_id() const override { return 256; }
  std::string name() const override { return "byte"; }
};

}  // namespace

std::unique_ptr<Tokenizer> NewByteTokenizer() { return std::make_unique<ByteTokenizer>(); }

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& spec) {
  if (spec.empty() || spec == "byte") return NewByteTokenizer();
  if (spec.size() > 5 && spec.compare(spec.size() - 5, 5, ".json") == 0) {
    return LoadHfTokenizer(spec);
  }
  return LoadSentencePiece(spec);
}

}  // namespace trainscope::tokenizer
