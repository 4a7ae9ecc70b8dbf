// Verdicts of the device self-test, computed from the report JSON alone so that they are
// testable without hardware and the same whoever produced the figures. Private to
// src/device.
#ifndef TRAINSCOPE_SRC_DEVICE_CHECKS_H_
#define TRAINSCOPE_SRC_DEVICE_CHECKS_H_

#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "trainscope/device/device.h"

namespace trainscope::device {

// One check per topic: accelerators found, each accelerator's health, CPU load,
// temperature, throttling, memory, matmul fp32 / bf16, triad bandwidth, per-core siblings.
std::vector<Check> EvaluateDeviceReport(const nlohmann::json& report,
                                        const SelftestOptions& options);

std::string FormatGhz(double ghz);  // "3.70"

}  // namespace trainscope::device

#endif  // TRAINSCOPE_SRC_DEVICE_CHECKS_H_
