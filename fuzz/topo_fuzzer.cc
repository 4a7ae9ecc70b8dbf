// Topology matrices (`trainscope topo --from`, `launch --placement topo`, `plan --topo`, the
// fingerprint's capture): parse, then place and report as the verbs do. The first byte picks
// the tensor-parallel size; the rest is the text.
#include <cstdint>
#include <string>

#include "nlohmann/json.hpp"
#include "trainscope/topo/topo.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace trainscope;
  if (size == 0) return 0;
  const int tp = 1 + data[0] % 4;
  std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  absl::StatusOr<topo::Topology> t = topo::ParseTopology(text, "fuzz");
  if (!t.ok()) return 0;
  (void)topo::TopologySummary(*t, topo::BandwidthModel()).dump();
  topo::PlacementOptions o;
  o.tp = tp;
  o.exhaustive_max_devices = 8;  // keeps each input fast; greedy beyond
  absl::StatusOr<topo::Placement> p = topo::PlaceRanks(*t, o);
  if (!p.ok()) return 0;
  std::vector<Finding> findings = topo::TopologyFindings(*t, *p);
  (void)topo::PlacementToJson(*t, *p, findings).dump();
  (void)topo::TopologyToText(*t, *p, findings);
  (void)topo::RankDevicesOf(*t, p->proposed);
  return 0;
}
