// The two halves of Check(): the compatibility-matrix checks and the known-trap rules.
// Each appends findings; neither fails on missing or "absent"/"error" fields (a rule
// without its evidence stays silent).
#ifndef TRAINSCOPE_SRC_ENV_RULES_H_
#define TRAINSCOPE_SRC_ENV_RULES_H_

#include <optional>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "trainscope/env/check.h"

namespace trainscope::env {

// torch <-> torch_npu <-> CANN, CUDA <-> minimum driver, NCCL versions with known issues.
void ApplyMatrix(const nlohmann::json& fingerprint, const nlohmann::json& matrix,
                 std::vector<Finding>* findings);

// memlock, /dev/shm, open files, host memory, multi-node timeouts, visible devices,
// device health, launch-blocking and allocator settings, failed probes.
void ApplyTrapRules(const nlohmann::json& fingerprint, std::vector<Finding>* findings);

// Helpers shared by both: the value at a dotted path if it is a real value (not missing,
// not "absent", not "error: ...").
const nlohmann::json* Value(const nlohmann::json& doc, const std::string& dotted_path);
std::optional<std::string> StringValue(const nlohmann::json& doc, const std::string& path);
std::optional<double> NumberValue(const nlohmann::json& doc, const std::string& path);

}  // namespace trainscope::env

#endif  // TRAINSCOPE_SRC_ENV_RULES_H_
