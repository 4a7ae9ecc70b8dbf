// libFuzzer target for the rendezvous store's request decoding (src/comm/store.h), the
// code that reads bytes from any client that connects to rank 0's store port.
//
// Properties checked on every input:
//  - DecodeStoreRequest never crashes, reads out of bounds or allocates more than the
//    input holds (ASan/UBSan catch the first two, libFuzzer's -rss_limit_mb the third);
//  - a frame it accepts re-encodes to exactly the same bytes (the wire format has one
//    encoding per request), and the re-encoded frame decodes to the same request;
//  - ConstantTimeEquals agrees with ordinary string equality on the two halves of the input.
// Build: clang++ -fsanitize=fuzzer,address,undefined with ts_comm (wired by the build).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "comm/store.h"

namespace {

bool SameRequest(const trainscope::comm::StoreRequest& a, const trainscope::comm::StoreRequest& b) {
  return a.op == b.op && a.rank == b.rank && a.world_size == b.world_size && a.key == b.key &&
         a.value == b.value && a.delta == b.delta;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using trainscope::comm::ConstantTimeEquals;
  using trainscope::comm::DecodeStoreRequest;
  using trainscope::comm::EncodeStoreRequest;
  const std::string_view frame(reinterpret_cast<const char*>(data), size);

  auto request = DecodeStoreRequest(frame);
  if (request.ok()) {
    const std::string again = EncodeStoreRequest(*request);
    if (again != frame) std::abort();  // accepted bytes must be the canonical encoding
    auto round = DecodeStoreRequest(again);
    if (!round.ok() || !SameRequest(*round, *request)) std::abort();
  }

  const std::string_view a = frame.substr(0, size / 2), b = frame.substr(size / 2);
  if (ConstantTimeEquals(a, b) != (a == b)) std::abort();
  return 0;
}
