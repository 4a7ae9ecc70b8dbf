// Placeholder implementation while the report module is built (issue 17); replaced by
// collect.cc / render.cc.
#include "trainscope/report/report.h"

#include <filesystem>

#include "absl/status/status.h"

namespace trainscope::report {

absl::StatusOr<nlohmann::json> CollectReportData(const std::vector<std::string>& run_dirs,
                                                 const ReportOptions& options) {
  nlohmann::json data = {{"format", "trainscope.report.data"}, {"version", 1}};
  data["runs"] = nlohmann::json::array();
  for (const std::string& dir : run_dirs) {
    if (!std::filesystem::is_directory(dir)) {
      return absl::NotFoundError("run directory not found: " + dir);
    }
    data["runs"].push_back({{"dir", dir}});
  }
  data["missing"] = nlohmann::json::array();
  data["malformed"] = 0;
  return data;
}

std::string RenderReportHtml(const nlohmann::json& data, const ReportOptions& options) {
  return "<!doctype html><html><body><pre>" + data.dump() + "</pre></body></html>";
}

}  // namespace trainscope::report
