// Flight recorder dumps (`hang analyze`): two dumps in one input (fuzz_util.h SplitTwo),
// each read from bytes as a file of unknown kind would be, then analysed together, so
// values that parse but make no sense (negative or huge sequence ids, ranks, sizes, groups
// whose members disagree) reach the matching and the report as well. Pickle bytes go
// through core/pickle.h, as in the CLI (pickle_fuzzer covers the reader alone).
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "trainscope/hang/analyze.h"
#include "trainscope/hang/dump.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace trainscope::hang;
  std::string_view a, b;
  trainscope::fuzz::SplitTwo(std::string_view(reinterpret_cast<const char*>(data), size), &a, &b);
  std::vector<Dump> dumps;
  InputCounts counts;
  int i = 0;
  for (std::string_view part : {a, b}) {
    std::string name = "nccl_trace_rank_" + std::to_string(i++);
    ReadResult r = ReadDumpBytes(part, name);
    ++counts.files_read;
    if (r.outcome == ReadOutcome::kDump) {
      dumps.push_back(std::move(r.dump));
    } else {
      counts.corrupt.push_back({name, r.reason});
    }
  }
  AnalyzeOptions options;
  options.mismatch_cap = 1000;
  Report report = AnalyzeDumps(std::move(dumps), std::move(counts), options);
  (void)ReportToJson(report).dump();  // as the CLI does: invalid UTF-8 would throw
  (void)FormatReportText(report);
  return 0;
}
