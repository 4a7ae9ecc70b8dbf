// The other trace inputs `trace analyze` reads from files: trainscope phase logs (.jsonl)
// and torch_npu CSV summaries (step_trace_time.csv, kernel_details.csv). The first byte
// chooses the kind.
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz/fuzz_util.h"
#include "trainscope/trace/analysis.h"
#include "trainscope/trace/trace.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace trainscope::trace;
  if (size < 1) return 0;
  static const char* const kNames[] = {"phases.rank0.jsonl", "step_trace_time.csv",
                                       "kernel_details.csv", "rank0.pt.trace.json"};
  const std::string name = kNames[data[0] % 4];
  const std::string path = trainscope::fuzz::WriteInput(
      name, std::string_view(reinterpret_cast<const char*>(data) + 1, size - 1));
  ReadOptions options;
  options.progress = false;
  auto rank = ReadRankTrace(path, options);
  if (!rank.ok()) return 0;
  std::vector<RankTrace> ranks;
  ranks.push_back(*std::move(rank));
  Report report = AnalyzeRanks(&ranks);
  (void)ReportToJson(report).dump();
  (void)ReportToText(report);
  return 0;
}
