// Environment check: findings from (a) a compatibility matrix (data/compat_matrix.json:
// torch <-> torch_npu <-> CANN, CUDA <-> minimum driver, NCCL versions with known bugs)
// and (b) rules for known traps (memlock, /dev/shm, timeouts left at defaults for
// multi-node, visible-device variables that disagree with the devices present, ...).
// Each finding says what is wrong, the evidence from the fingerprint, and what to do.
//
// `trainscope env check --json` prints CheckResultToJson(); other modules (doctor) read
// that document: {"format": "trainscope.env.check", "version": 1, "findings": [
// {"severity", "id", "what", "evidence", "fix"}], "errors", "warnings", "passed"}.
#ifndef TRAINSCOPE_ENV_CHECK_H_
#define TRAINSCOPE_ENV_CHECK_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "trainscope/core/finding.h"
#include "trainscope/core/formats.h"
#include "trainscope/core/os.h"

namespace trainscope::env {

inline constexpr const char* kCheckFormat = formats::kEnvCheck;
inline constexpr const char* kMatrixFormat = formats::kEnvCompatMatrix;

// The findings are core Findings (trainscope/core/finding.h): id stable, e.g.
// "limits.memlock", "matrix.cuda_driver"; title = what is wrong; evidence = the fingerprint
// values that show it; where and rank unused.
using ::trainscope::Finding;
using ::trainscope::Severity;
using ::trainscope::SeverityName;

struct CheckResult {
  std::vector<Finding> findings;  // errors first, then warnings, then info
  int errors = 0;
  int warnings = 0;
  bool passed() const { return errors == 0; }
};

// The matrix compiled into trainscope (data/compat_matrix.json at build time).
const nlohmann::json& DefaultMatrix();

// Reads and validates a matrix file against its schema. InvalidArgument naming the file
// and line:col (syntax) or JSON path (schema); NotFound when missing.
absl::StatusOr<nlohmann::json> LoadMatrix(Os* os, const std::string& path);

// Applies the matrix and the trap rules to a fingerprint. Pure, thread-safe.
CheckResult Check(const nlohmann::json& fingerprint, const nlohmann::json& matrix);

nlohmann::json CheckResultToJson(const CheckResult& result);

// The findings (errors first), for diagnose and doctor.
std::vector<Finding> FindingsFrom(const CheckResult& result);

// A table (severity, check, what) and, under it, evidence and fix for each finding.
std::string RenderCheck(const CheckResult& result);

}  // namespace trainscope::env

#endif  // TRAINSCOPE_ENV_CHECK_H_
