// Chrome / Kineto trace JSON (`trace analyze`): parse from memory, then analyse the rank,
// so values that parse but make no sense (overflowing ids, negative durations) reach the
// analysis as well.
#include <cstdint>
#include <string_view>

#include "trainscope/trace/analysis.h"
#include "trainscope/trace/trace.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace trainscope::trace;
  ReadOptions options;
  options.progress = false;
  auto rank = ParseChromeTrace(std::string_view(reinterpret_cast<const char*>(data), size),
                               "fuzz.pt.trace.json", options);
  if (!rank.ok()) return 0;
  std::vector<RankTrace> ranks;
  ranks.push_back(*std::move(rank));
  Report report = AnalyzeRanks(&ranks);
  (void)ReportToJson(report).dump();  // as the CLI does: invalid UTF-8 would throw
  (void)ReportToText(report);
  return 0;
}
