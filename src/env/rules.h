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

// The collective-library variables (NCCL, HCCL, gloo, torch's c10d; collective_rules.cc):
// deprecated names, unknown values, values known to hurt, buffer sizes, timeouts, and
// interface selections checked against the captured network interfaces. Called by
// ApplyTrapRules.
void ApplyCollectiveRules(const nlohmann::json& fingerprint, std::vector<Finding>* findings);

// Several nodes: torchrun/launch variables say so (WORLD_SIZE > LOCAL_WORLD_SIZE, or
// NNODES > 1), or the rendezvous host is not this machine; *why says which.
bool IsMultiNode(const nlohmann::json& fingerprint, std::string* why);

// Helpers shared by both: the value at a dotted path if it is a real value (not missing,
// not "absent", not "error: ...").
const nlohmann::json* Value(const nlohmann::json& doc, const std::string& dotted_path);
std::optional<std::string> StringValue(const nlohmann::json& doc, const std::string& path);
std::optional<double> NumberValue(const nlohmann::json& doc, const std::string& path);

}  // namespace trainscope::env

#endif  // TRAINSCOPE_SRC_ENV_RULES_H_
