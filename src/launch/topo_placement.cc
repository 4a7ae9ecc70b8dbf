// `launch --placement topo`: the topology (saved, or from nvidia-smi / npu-smi) and the
// placement of the local ranks (topo/topo.h) become each rank's device.
#include "trainscope/launch/topo_placement.h"

#include "absl/strings/str_cat.h"
#include "trainscope/core/os.h"
#include "trainscope/topo/topo.h"

namespace trainscope::launch {

absl::StatusOr<TopologyPlacement> PlaceByTopology(const TopologyPlacementOptions& placement, Os* os,
                                                  LaunchOptions* options) {
  std::string text, name = placement.topo_from;
  if (!placement.topo_from.empty()) {
    absl::StatusOr<std::string> t = os->ReadFile(placement.topo_from);
    if (!t.ok()) return t.status();
    text = *t;
  } else {
    absl::StatusOr<std::string> t = topo::CaptureTopology(os, placement.capture_timeout, &name);
    if (!t.ok())
      return absl::InvalidArgumentError(absl::StrCat("--placement topo: ", t.status().message()));
    text = *t;
  }
  absl::StatusOr<topo::Topology> t = topo::ParseTopology(text, name);
  if (!t.ok()) return t.status();
  const topo::RankDevices probe = topo::RankDevicesOf(*t, {});
  std::string given;
  if (os->GetEnv(probe.var, &given) && !given.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--placement topo chooses the devices itself; unset ", probe.var, " (", given, ")"));
  }
  topo::PlacementOptions po;
  po.tp = placement.tp;
  po.pp = placement.pp;
  po.ranks = options->nproc_per_node;
  absl::StatusOr<topo::Placement> p = topo::PlaceRanks(*t, po);
  if (!p.ok()) return p.status();
  topo::RankDevices rd = topo::RankDevicesOf(*t, p->proposed);
  options->rank_devices = rd.devices;
  options->rank_devices_var = rd.var;
  if (options->nproc_per_node == 0) options->nproc_per_node = static_cast<int>(rd.devices.size());
  TopologyPlacement out;
  out.var = rd.var;
  out.devices = rd.devices;
  out.slowest_tp_gbps = p->proposed.min_bottleneck_gbps();
  out.naive_slowest_tp_gbps = p->naive.min_bottleneck_gbps();
  return out;
}

}  // namespace trainscope::launch
