// The pickle reader (core/pickle.h) on arbitrary bytes, then DCP's .metadata interpretation
// (src/ckpt/dcp.h) of whatever it read, and the JSON form dumped as `--json` would: no
// crash, leak, hang or unbounded memory, whatever the opcodes, lengths, memo indices and
// shared references say. Seeds: tests/data/pickle (Python's pickles at protocols 0-5, a
// torch DCP .metadata, Flight Recorder pickles) and the hang fixtures' pickles.
#include <cstdint>
#include <string>
#include <string_view>

#include "ckpt/dcp.h"
#include "trainscope/core/pickle.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  auto v = trainscope::pickle::Parse(bytes);
  if (v.ok()) {
    (void)trainscope::pickle::ToJson(*v).dump(-1, ' ', false,
                                              nlohmann::json::error_handler_t::strict);
  }
  (void)trainscope::ckpt::ParseDcpMetadata(bytes, "fuzz/.metadata");
  return 0;
}
