// Diff of two environment fingerprints: what differs between two machines, most
// important first (driver/firmware, toolkits, frameworks, libraries, hardware, limits,
// host, environment variables). Volatile readings (temperatures, memory in use, clocks,
// probe times, hostnames) are not compared.
#ifndef TRAINSCOPE_ENV_DIFF_H_
#define TRAINSCOPE_ENV_DIFF_H_

#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace trainscope::env {

struct Difference {
  int rank = 0;             // 0 most important
  std::string category;     // "driver", "toolkit", "framework", "library", "hardware",
                            // "limits", "host", "env"
  std::string field;        // dotted path, e.g. "accelerators.nvidia.driver_version"
  std::string a, b;         // the values as text; "(missing)" when one side lacks the field
  bool is_version = false;  // a version of a driver, firmware, toolkit, framework or library
};

struct DiffResult {
  std::vector<Difference> differences;  // sorted by rank, then field
  int version_differences = 0;
  bool identical() const { return differences.empty(); }
};

// Compares two fingerprints (format trainscope.env.fingerprint). Thread-safe, pure.
DiffResult Diff(const nlohmann::json& a, const nlohmann::json& b);

// {"format": "trainscope.env.diff", "version": 1, "a", "b", "differences": [...],
// "version_differences", "other_differences", "identical"}.
nlohmann::json DiffToJson(const DiffResult& diff, const std::string& a_name,
                          const std::string& b_name);

// A table, most important first, and a one-line verdict.
std::string RenderDiff(const DiffResult& diff, const std::string& a_name,
                       const std::string& b_name);

}  // namespace trainscope::env

#endif  // TRAINSCOPE_ENV_DIFF_H_
