// HuggingFace tokenizer.json (`--tokenizer FILE.json` of `data scan|pack` and the trainer):
// the input is split in two (fuzz_util.h SplitTwo) into the tokenizer file and a text; a
// tokenizer that loads then encodes the text, counts it and decodes the ids, as the data
// verbs do. The loader must refuse what it does not support with a Status, never crash,
// and encoding must stay within the vocabulary.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "trainscope/tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view json, text;
  trainscope::fuzz::SplitTwo(std::string_view(reinterpret_cast<const char*>(data), size), &json,
                             &text);
  const std::string path = trainscope::fuzz::WriteInput("tokenizer.json", json);
  auto tok = trainscope::tokenizer::LoadHfTokenizer(path);
  if (!tok.ok()) return 0;
  std::vector<int32_t> ids;
  (*tok)->Encode(text, &ids);
  for (int32_t id : ids) {
    if (id < 0 || id >= (*tok)->vocab_size()) std::abort();  // an id outside the vocabulary
  }
  (void)(*tok)->Count(text);
  (void)(*tok)->Decode(ids);
  return 0;
}
