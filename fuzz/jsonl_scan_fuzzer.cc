// Corpus JSONL / text as `data scan` reads it: the whole scan (reader, JSON decoding,
// per-document analysis, duplicates, noise rules, language id) on one small file. The
// first byte chooses the reader: memory-mapped raw JSONL blocks, read() JSONL, or plain
// text with blank-line blocks.
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz/fuzz_util.h"
#include "trainscope/data/scan.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace trainscope::data;
  if (size < 1) return 0;
  const int mode = data[0] % 3;
  const std::string path = trainscope::fuzz::WriteInput(
      mode == 2 ? "corpus.txt" : "corpus.jsonl",
      std::string_view(reinterpret_cast<const char*>(data) + 1, size - 1));
  auto inputs = ExpandInputs({path}, InputFormat::kAuto);
  if (!inputs.ok()) return 0;
  ScanOptions options;
  options.threads = 1;
  options.progress = false;
  options.seq_len = 16;
  options.batch_size = 2;
  options.reader.raw_jsonl_mmap = mode == 0;
  options.reader.text_blocks = mode == 2;
  options.reader.max_doc_bytes = 1 << 16;
  options.tmp_dir = trainscope::fuzz::WorkDir();
  auto result = RunScan(*inputs, options);
  if (!result.ok()) return 0;
  (void)ScanResultToJson(*result, options).dump();
  (void)ScanResultToText(*result, options);
  return 0;
}
