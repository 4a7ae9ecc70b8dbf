// memcpy baseline for bench/comm: for each size, the best of a few timed copies, as
// bytes / second (GB = 1e9), written as JSON {"format": ..., "results": [{bytes, gbps}]}.
// Usage: comm_memcpy_bench SIZE... (sizes in bytes, or with K/M/G suffixes)
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "trainscope/comm/selftest.h"

int main(int argc, char** argv) {
  nlohmann::json out;
  out["format"] = "trainscope.bench.memcpy";
  out["version"] = 1;
  nlohmann::json results = nlohmann::json::array();
  for (int i = 1; i < argc; ++i) {
    auto bytes = trainscope::comm::ParseByteSize(argv[i]);
    if (!bytes.ok()) {
      std::fprintf(stderr, "comm_memcpy_bench: %s\n",
                   std::string(bytes.status().message()).c_str());
      return 2;
    }
    std::vector<char> a(*bytes, 1), b(*bytes, 0);
    // Repeat small copies so that one timed window is >= ~2 ms.
    size_t reps = std::max<size_t>(1, (4u << 20) / *bytes);
    double best = 0;
    for (int k = 0; k < 7; ++k) {
      auto t0 = std::chrono::steady_clock::now();
      for (size_t r = 0; r < reps; ++r) {
        std::memcpy(b.data(), a.data(), *bytes);
        asm volatile("" : : "r"(b.data()) : "memory");
      }
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      best = std::max(best, static_cast<double>(*bytes) * reps / 1e9 / s);
    }
    results.push_back({{"bytes", *bytes}, {"gbps", best}});
  }
  out["results"] = results;
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}
