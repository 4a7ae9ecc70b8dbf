// torch_npu per-rank folders: one file of ASCEND_PROFILER_OUTPUT (the first byte chooses which:
// the CSVs, the two communication JSON files, the SQLite export) read as `trace analyze` reads
// a *_ascend_pt folder, then analysed with the Ascend rules.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz/fuzz_util.h"
#include "trainscope/trace/analysis.h"
#include "trainscope/trace/trace.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace trainscope::trace;
  if (size < 1) return 0;
  static const char* const kNames[] = {"kernel_details.csv", "step_trace_time.csv",
                                       "op_statistic.csv",   "memory_record.csv",
                                       "communication.json", "communication_matrix.json",
                                       "npu_module_mem.csv", "ascend_pytorch_profiler_0.db"};
  const std::string& root = trainscope::fuzz::WorkDir();
  const std::string dir = root + "/r_ascend_pt/ASCEND_PROFILER_OUTPUT";
  static const bool made = [&] {
    mkdir((root + "/r_ascend_pt").c_str(), 0700);
    return mkdir(dir.c_str(), 0700) == 0;
  }();
  (void)made;
  const std::string name = kNames[data[0] % 8];
  for (const char* n : kNames) unlink((dir + "/" + n).c_str());
  const std::string path = trainscope::fuzz::WriteInput(
      "r_ascend_pt/ASCEND_PROFILER_OUTPUT/" + name,
      std::string_view(reinterpret_cast<const char*>(data) + 1, size - 1));
  (void)path;
  ReadOptions options;
  options.progress = false;
  auto rank = ReadRankTrace(root + "/r_ascend_pt", options);
  if (!rank.ok()) return 0;
  std::vector<RankTrace> ranks;
  ranks.push_back(*std::move(rank));
  Report report = AnalyzeRanks(&ranks);
  (void)ReportToJson(report).dump();
  (void)ReportToText(report);
  return 0;
}
