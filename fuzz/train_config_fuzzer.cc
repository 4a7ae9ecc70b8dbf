// Trainer configs (`train --config`): parse and validate, as `trainscope train` does before
// it builds anything. Compiled with the trainer's libtorch-free config.cc (fuzz/CMakeLists).
#include <cstdint>
#include <string>

#include "fuzz/fuzz_util.h"
#include "nlohmann/json.hpp"
#include "trainscope/train/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace trainscope::train;
  auto config = ParseTrainConfig(std::string(reinterpret_cast<const char*>(data), size),
                                 trainscope::fuzz::WorkDir() + "/config.json");
  if (!config.ok()) return 0;
  (void)TrainConfigToJson(*config).dump();
  return 0;
}
