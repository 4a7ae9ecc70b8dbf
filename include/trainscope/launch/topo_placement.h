// trainscope::launch — `launch --placement topo`: each local rank's device from the
// server's topology (topo/topo.h), so that tensor-parallel groups sit on the fastest links.
//
// Contract: PlaceByTopology reads the topology (a saved file, or nvidia-smi / npu-smi run
// through core/os.h with a timeout), places the ranks (topo::PlaceRanks) and fills the
// LaunchOptions' rank_devices / rank_devices_var (and nproc_per_node when 0) for Launch().
// It prints nothing: the caller reports the returned figures. Blocking up to the capture
// timeout; thread-compatible.
#ifndef TRAINSCOPE_LAUNCH_TOPO_PLACEMENT_H_
#define TRAINSCOPE_LAUNCH_TOPO_PLACEMENT_H_

#include <chrono>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainscope/launch/launch.h"

namespace trainscope {
class Os;
}

namespace trainscope::launch {

struct TopologyPlacementOptions {
  int tp = 1;             // tensor-parallel group size
  int pp = 1;             // pipeline stages
  std::string topo_from;  // saved `nvidia-smi topo -m` / `npu-smi info -t topo` ("": run it)
  std::chrono::milliseconds capture_timeout{10000};  // for running the tool
};

struct TopologyPlacement {
  std::string var;                   // the vendor's visible-devices variable
  std::vector<std::string> devices;  // device of each local rank
  double slowest_tp_gbps = 0;        // the placement's slowest TP group (GB/s)
  double naive_slowest_tp_gbps = 0;  // the same in device order
};

// Places options->nproc_per_node ranks (0: one per device) and sets options->rank_devices,
// rank_devices_var, and nproc_per_node when it was 0. Errors: those of reading or parsing
// the topology (the file's, or InvalidArgument "--placement topo: ..." when the tool
// cannot be run), InvalidArgument when the launcher's environment already pins the devices
// (the variable is set) or tp / pp / ranks do not fit the devices (topo::PlaceRanks).
absl::StatusOr<TopologyPlacement> PlaceByTopology(const TopologyPlacementOptions& placement, Os* os,
                                                  LaunchOptions* options);

}  // namespace trainscope::launch

#endif  // TRAINSCOPE_LAUNCH_TOPO_PLACEMENT_H_
