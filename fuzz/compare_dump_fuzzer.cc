// libFuzzer target for the msprobe dump.json reader (compare/dump.h ParseDumpJson): the
// member-by-member scanner that recovers the complete entries of a file cut short, Python's
// NaN / Infinity literals, and the entry walker (nested lists and dicts of tensor records,
// None, non-tensor values, P2POp records, parameters_grad). Properties: no crash, hang or
// out-of-bounds read; every entry read has a name; a cut file reports where it was cut.
// Seeds: fuzz/seeds/compare_dump (msprobe's public sample dumps from tests/data/compare).
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "trainscope/compare/dump.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto dump = trainscope::compare::ParseDumpJson(text, "dump.json");
  if (!dump.ok()) return 0;
  if (dump->truncated_entries > 0 &&
      (dump->truncated_at < 0 || static_cast<size_t>(dump->truncated_at) > size))
    std::abort();
  for (const auto& e : dump->entries) {
    for (const auto& t : e.rows) {
      if (t.name.compare(0, e.name.size(), e.name) != 0) std::abort();
    }
  }
  return 0;
}
