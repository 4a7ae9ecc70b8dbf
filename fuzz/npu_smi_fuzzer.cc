// npu-smi outputs the fingerprint reads (`npu-smi info`, `-t board`, `-t health`): the first
// byte picks the parser (even: the info table, odd: the "Key : Value" form); the rest is the
// text. Parses, then merges and derives the fields as ProbeNpuSmiDetails does.
#include <cstdint>
#include <string>

#include "nlohmann/json.hpp"
#include "src/env/parsers.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace trainscope;
  if (size == 0) return 0;
  std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  if (data[0] % 2 == 0) {
    absl::StatusOr<nlohmann::json> info = env::ParseNpuSmiInfo(text);
    if (!info.ok()) return 0;
    nlohmann::json npus = (*info)["npus"];
    env::AddGpuLikeFields(&npus);
    (void)npus.dump();
    return 0;
  }
  absl::StatusOr<nlohmann::json> fields = env::ParseNpuSmiFields(text, "fuzz");
  if (!fields.ok()) return 0;
  nlohmann::json npus = nlohmann::json::array(
      {{{"npu", 0}, {"chip", 0}, {"bus_id", "0000:C1:00.0"}, {"hbm_total_mb", 65536}}});
  for (const nlohmann::json& r : (*fields)["records"]) {
    env::MergeNpuSmiRecord(r, 0, -1, "", &npus);
    env::MergeNpuSmiRecord(r, 0, 0, "health_", &npus);
  }
  env::AddGpuLikeFields(&npus);
  (void)npus.dump();
  (void)fields->dump();
  return 0;
}
