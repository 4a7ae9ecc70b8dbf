// Environment fingerprint: one JSON document describing what a training job stands on
// (host and its limits, accelerators, toolkits and libraries, Python frameworks, the
// environment variables that steer training). Format "trainscope.env.fingerprint",
// version 1; schema in data/fingerprint.schema.json, documented in docs/formats.md.
//
// Every probe has a time limit and ends as a value, the string "absent" (the tool, file
// or device is not there: a fact, not an error) or the string "error: <why>"; no probe can
// make Fingerprint() fail or hang. All probing goes through trainscope::Os.
#ifndef TRAINSCOPE_ENV_FINGERPRINT_H_
#define TRAINSCOPE_ENV_FINGERPRINT_H_

#include <chrono>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "trainscope/core/formats.h"
#include "trainscope/core/os.h"

namespace trainscope::env {

inline constexpr const char* kFingerprintFormat = formats::kEnvFingerprint;
inline constexpr int kFingerprintVersion = 1;

struct FingerprintOptions {
  // Limit for each child program (nvidia-smi, npu-smi, df, nvcc, ...).
  std::chrono::milliseconds tool_timeout{2000};
  // Limit for each Python interpreter asked for torch / torch_npu versions (importing
  // torch takes about a second).
  std::chrono::milliseconds python_timeout{2000};
  // Interpreters to ask. Empty: $TRAINSCOPE_PYTHON if set, else /usr/bin/python3 and the
  // first python3 on $PATH (duplicates removed).
  std::vector<std::string> pythons;
  // Run the child programs in parallel threads. Requires a thread-safe Os (Os::Default()
  // is; FakeOs is not: tests set false).
  bool parallel = true;
  // Include the probe durations ("probe_ms") in the document.
  bool timings = true;
};

// Probes the machine through `os`. Blocks for at most about the largest of the timeouts
// above (probes run concurrently when `parallel`). Never fails because of the machine;
// the StatusOr is for programming errors only (null os).
absl::StatusOr<nlohmann::json> Fingerprint(Os* os, const FingerprintOptions& options = {});

// The fingerprint schema shipped with trainscope (data/fingerprint.schema.json, compiled
// in).
const nlohmann::json& FingerprintSchema();

// Reads a fingerprint file: InvalidArgument "path:line:col: ..." when it is not JSON,
// "path: $.field: ..." when it does not fit the schema; NotFound when missing.
absl::StatusOr<nlohmann::json> LoadFingerprint(Os* os, const std::string& path);

// A readable multi-line summary (what `trainscope env fingerprint` prints).
std::string RenderFingerprintSummary(const nlohmann::json& fingerprint);

}  // namespace trainscope::env

#endif  // TRAINSCOPE_ENV_FINGERPRINT_H_
