// Trainer configs as `trainscope plan --config FILE` reads them (plan::ReadTrainConfig, the
// planner's own libtorch-free reader of the model section), then planned as the command does
// for 8 devices of 80 GB. The reader must refuse what it cannot use with a Status naming the
// file, never crash; whatever it accepts, the planner must either refuse with a Status or plan
// it without undefined behaviour (the sizes reach 2^30 per key).
#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz/fuzz_util.h"
#include "nlohmann/json.hpp"
#include "trainscope/core/os.h"
#include "trainscope/plan/plan.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace trainscope::plan;
  const std::string path = trainscope::fuzz::WriteInput(
      "plan_config.json", std::string_view(reinterpret_cast<const char*>(data), size));
  auto config = ReadTrainConfig(trainscope::Os::Default(), path);
  if (!config.ok()) return 0;
  PlanOptions o;
  o.model = config->model;
  o.precision = config->precision;
  o.cluster.devices = 8;
  o.cluster.device_memory_gb = 80;
  // The command's default global batch (micro_batch x grad_accum x devices), kept to a size
  // the planner accepts; computed wide, as each factor may be up to 2^30.
  const int64_t global = int64_t{config->micro_batch} * config->grad_accum * o.cluster.devices;
  o.global_batch = static_cast<int>(std::clamp<int64_t>(global, 0, 1 << 20));
  auto plan = MakePlan(o);
  if (!plan.ok()) return 0;
  (void)PlanToJson(*plan).dump();
  return 0;
}
