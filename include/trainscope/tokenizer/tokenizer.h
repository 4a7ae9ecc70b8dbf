// Tokenizers shared by `data` (scan, pack) and `train`.
//  - Byte-level (default): ids 0..255 are the UTF-8 bytes, 256 is end-of-document;
//    vocab_size() == 257.
//  - SentencePiece (optional, a .model file): loaded from a small shared library that
//    wraps libsentencepiece behind a C API and is dlopen()ed with RTLD_DEEPBIND, because
//    libsentencepiece's private protobuf crashes a process that also links libtorch
//    (../shared/reference/debian-build-notes.md).
//  - HuggingFace tokenizer.json (a path ending in .json): byte-level BPE (GPT-2, Llama-3,
//    Qwen2) and WordPiece (BERT); the supported normalizers and pre-tokenizers are listed in
//    docs/formats.md ("Tokenizers"). eos_id() is <|endoftext|>, <|end_of_text|>, </s> or
//    [SEP], the first in the vocabulary, else -1.
// Encode/Decode are thread-safe (const).
#ifndef TRAINSCOPE_TOKENIZER_TOKENIZER_H_
#define TRAINSCOPE_TOKENIZER_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace trainscope::tokenizer {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Appends the ids of `text` to `ids` (no end-of-document id).
  virtual void Encode(std::string_view text, std::vector<int32_t>* ids) const = 0;
  // Number of tokens `text` encodes to (may be faster than Encode).
  virtual size_t Count(std::string_view text) const;
  virtual std::string Decode(const std::vector<int32_t>& ids) const = 0;
  virtual int32_t vocab_size() const = 0;
  virtual int32_t eos_id() const = 0;  // -1 when the model has none
  // "byte", "sentencepiece:<file>", "hf-bpe:<file>" or "hf-wordpiece:<file>"
  virtual std::string name() const = 0;
};

std::unique_ptr<Tokenizer> NewByteTokenizer();

// Loads a SentencePiece model. NotFound / InvalidArgument naming the file on failure;
// Unavailable when the wrapper library cannot be loaded.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadSentencePiece(const std::string& model_path);

// Loads a HuggingFace tokenizer.json. NotFound when it cannot be opened; InvalidArgument
// naming the file when it is not JSON, is malformed, or uses a model, normalizer or
// pre-tokenizer outside the supported set (the message lists the supported kinds).
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadHfTokenizer(const std::string& path);

// "" or "byte" -> byte-level; a path ending in ".json" -> LoadHfTokenizer; anything else is
// a SentencePiece model path.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& spec);

}  // namespace trainscope::tokenizer

#endif  // TRAINSCOPE_TOKENIZER_TOKENIZER_H_
