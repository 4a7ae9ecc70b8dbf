// libFuzzer target for the launcher variables comm/join.h parses by hand: Slurm's compact
// host list (SLURM_STEP_NODELIST, "node[01-04,07],gpu[1-2]-a") and tasks per node
// (SLURM_TASKS_PER_NODE, "2(x3),1"). The first input byte picks the parser, the rest is the
// variable's value. Properties: no crash or unbounded allocation (the host list stops at
// max_hosts names; a repeat count far beyond any cluster is refused); every expanded name is
// non-empty.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "trainscope/comm/join.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view value(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 2 == 0) {
    auto hosts = trainscope::comm::ExpandSlurmNodelist(value, 4096);
    if (hosts.ok()) {
      if (hosts->size() > 4096) std::abort();
      for (const auto& h : *hosts) {
        if (h.empty()) std::abort();
      }
    }
  } else {
    (void)trainscope::comm::ExpandSlurmTasksPerNode(value);
  }
  return 0;
}
