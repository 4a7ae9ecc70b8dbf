// The Ascend cluster readers of `trace analyze` (src/trace/ascend_cluster.h): msprof-analyze's
// cluster_step_trace_time.csv, cluster_communication.json and cluster_communication_matrix.json.
// The first byte chooses the file; the cluster rules, the JSON and the text then run on what
// was read.
#include <cstdint>
#include <string>
#include <string_view>

#include "src/trace/ascend_cluster.h"
#include "trainscope/trace/analysis.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace trainscope::trace;
  if (size < 1) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  internal::ClusterInput in;
  in.source = "cluster_analysis_output";
  in.path = "fuzz";
  switch (data[0] % 3) {
    case 0:
      internal::ParseClusterStepTraceCsv(text, "fuzz/cluster_step_trace_time.csv", &in);
      break;
    case 1:
      internal::ParseClusterCommJson(text, "fuzz/cluster_communication.json", &in);
      break;
    default:
      internal::ParseClusterMatrixJson(text, "fuzz/cluster_communication_matrix.json", &in);
  }
  Report report;
  internal::AnalyzeCluster(in, AnalyzeOptions(), &report);
  (void)ReportToJson(report).dump();
  (void)ReportToText(report);
  return 0;
}
