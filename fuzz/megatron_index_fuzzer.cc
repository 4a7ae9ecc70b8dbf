// Megatron .idx/.bin pairs (`data scan|pack` inputs, the trainer's corpus): the input is
// split in two (fuzz_util.h SplitTwo) into the index and the token file; a valid index is
// then read sequence by sequence, as the readers do.
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "trainscope/data/megatron.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace trainscope::data;
  std::string_view idx, bin;
  trainscope::fuzz::SplitTwo(std::string_view(reinterpret_cast<const char*>(data), size), &idx,
                             &bin);
  trainscope::fuzz::WriteInput("corpus.idx", idx);
  const std::string bin_path = trainscope::fuzz::WriteInput("corpus.bin", bin);
  const std::string prefix = trainscope::fuzz::WorkDir() + "/corpus";
  auto index = ReadMegatronIndex(prefix);
  if (!index.ok()) return 0;
  std::FILE* f = std::fopen(bin_path.c_str(), "rb");
  if (f == nullptr) return 0;
  std::vector<int64_t> tokens;
  const size_t n = index->lengths.size() < 64 ? index->lengths.size() : 64;
  for (size_t i = 0; i < n; ++i) {
    if (!ReadMegatronSequence(f, *index, i, &tokens).ok()) break;
  }
  std::fclose(f);
  return 0;
}
