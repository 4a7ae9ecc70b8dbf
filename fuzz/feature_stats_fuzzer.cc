// `data stats`: .npy, .safetensors and CSV headers and bodies. TS_FUZZ_EXT (".npy",
// ".safetensors", ".csv") names the format this build of the target feeds.
#include <cstdint>
#include <string_view>

#include "fuzz/fuzz_util.h"
#include "trainscope/data/feature_stats.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace trainscope::data;
  const std::string path =
      trainscope::fuzz::WriteInput(std::string("input") + TS_FUZZ_EXT,
                                   std::string_view(reinterpret_cast<const char*>(data), size));
  auto report = FeatureStatsOfFile(path);
  if (!report.ok()) return 0;
  (void)FeatureReportToJson(*report).dump();
  (void)FeatureReportToText(*report);
  return 0;
}
