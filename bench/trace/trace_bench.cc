// trainscope's trace path as a library call (what `trainscope trace analyze --json` does):
// read (streaming) + full analysis + JSON report, timed separately.
//   trace_bench FILE... -> {"bytes":..,"events":..,"read_s":..,"analyze_s":..,"total_s":..}
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "trainscope/trace/analysis.h"
#include "trainscope/trace/trace.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: trace_bench FILE...\n");
    return 2;
  }
  using clk = std::chrono::steady_clock;
  auto t0 = clk::now();
  std::vector<trainscope::trace::RankTrace> traces;
  int64_t bytes = 0, events = 0;
  for (int i = 1; i < argc; ++i) {
    auto t = trainscope::trace::ReadRankTrace(argv[i]);
    if (!t.ok()) {
      fprintf(stderr, "trace_bench: %s\n", std::string(t.status().message()).c_str());
      return 2;
    }
    bytes += t->stats.bytes;
    events += t->stats.events_kept;
    traces.push_back(std::move(*t));
  }
  auto t1 = clk::now();
  auto rep = trainscope::trace::AnalyzeRanks(&traces);
  std::string js = trainscope::trace::ReportToJson(rep).dump();
  auto t2 = clk::now();
  double read_s = std::chrono::duration<double>(t1 - t0).count();
  double an_s = std::chrono::duration<double>(t2 - t1).count();
  printf(
      "{\"bytes\": %lld, \"events_kept\": %lld, \"read_s\": %.3f, \"analyze_s\": %.3f, "
      "\"total_s\": %.3f, \"report_bytes\": %zu}\n",
      static_cast<long long>(bytes), static_cast<long long>(events), read_s, an_s, read_s + an_s,
      js.size());
  return 0;
}
