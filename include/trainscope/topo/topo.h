// trainscope::topo — the device topology of one server and a placement of ranks onto it.
//
// Reads the link matrix that `nvidia-smi topo -m` or `npu-smi info -t topo` prints (or a saved
// copy of it), classifies every device pair's link (NV#, PIX, PXB, PHB, NODE, SYS; HCCS, SIO,
// HCCS_SW on Ascend), estimates each class's bandwidth (docs/metrics.md "Topology": nominal
// per-direction figures, stated as estimates), and places ranks so that each tensor-parallel
// group of consecutive ranks sits on the fastest links, with pipeline neighbours close.
//
// Definitions (docs/metrics.md "Topology"):
//  - link bandwidth of a pair: the estimate of its class, GB/s (1e9 bytes/s) per direction;
//  - bottleneck of a group: the best ring through the group's devices, rated by its slowest
//    link (a ring all-reduce runs at the pace of its slowest hop, and NCCL/HCCL search for
//    the ring that avoids slow links); a group of one device has none;
//  - rank order: Megatron's, tensor-parallel fastest: rank = (pp_rank * dp + dp_rank) * tp +
//    tp_rank, so a TP group is tp consecutive ranks and pipeline neighbours are dp * tp apart.
//
// Pure functions over plain structs; CaptureTopology runs a tool through core/os.h (blocking,
// with a timeout). Thread-compatible. libtorch-free.
#ifndef TRAINSCOPE_TOPO_TOPO_H_
#define TRAINSCOPE_TOPO_TOPO_H_

#include <chrono>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json_fwd.hpp"
#include "trainscope/core/finding.h"
#include "trainscope/core/formats.h"

namespace trainscope {
class Os;
}

namespace trainscope::topo {

inline constexpr const char* kTopoFormat = formats::kTopo;
inline constexpr int kTopoVersion = 1;

// Link classes, fastest family first. kNvLink carries its link count (NV12: 12 links).
enum class LinkClass {
  kSelf,     // X
  kNvLink,   // NV#: a bonded set of # NVLinks
  kSio,      // Ascend A3: die-to-die link inside a package
  kHccs,     // Ascend: Huawei Cache Coherence System link
  kHccsSw,   // Ascend: HCCS through a switch
  kPix,      // at most one PCIe bridge (same switch)
  kPxb,      // several PCIe bridges, no host bridge
  kPhb,      // through a PCIe host bridge (the CPU)
  kNode,     // across host bridges inside one NUMA node
  kSys,      // across NUMA nodes (the SMP interconnect: QPI/UPI)
  kUnknown,  // NA, or a token this version does not know
};

struct Link {
  LinkClass cls = LinkClass::kUnknown;
  int nvlinks = 0;    // kNvLink only
  std::string token;  // as printed: "NV18", "PIX", "HCCS", "NA", ...
};

// Bandwidth estimates, GB/s per direction (docs/metrics.md "Topology" gives the sources).
struct BandwidthModel {
  double nvlink_link_gbps = 25;  // per NVLink (NVLink 2-4: 25; NVLink 5: 50)
  double pcie_gbps = 31.5;       // PCIe Gen4 x16 (Gen5: 63)
  double hccs_gbps = 56;         // per HCCS link, Ascend 910B (third-party figure)
};

// Estimated bandwidth of one link, GB/s per direction; 0 for kSelf and kUnknown.
//   NV#: # x nvlink_link_gbps; SIO, HCCS, HCCS_SW: hccs_gbps; PIX, PXB: pcie_gbps;
//   PHB: 0.8 x, NODE: 0.6 x, SYS: 0.4 x pcie_gbps (assumed derating, docs/metrics.md).
double LinkGbps(const Link& link, const BandwidthModel& model);
// Closeness order of a class, 0 = closest: breaks ties between classes of equal bandwidth.
int LinkCloseness(const Link& link);

struct Device {
  int index = 0;             // GPU<index> / NPU<index>; the position (0..n-1) for Phy-ID<n>
  int physical_id = -1;      // Phy-ID<n> (npu-smi on Atlas A3): n; -1 otherwise
  std::string name;          // "GPU3", "NPU3", "Phy-ID12"
  std::string cpu_affinity;  // "0-55,112-167", "" when not printed, "N/A" as printed
  std::string numa_affinity;
};

struct Nic {
  std::string name;    // the column name: "NIC0", or "mlx5_0" (older drivers)
  std::string device;  // from the NIC legend ("mlx5_0"), else the name
};

struct Topology {
  std::string vendor;  // "nvidia" or "ascend"
  std::string source;  // "nvidia-smi topo -m" or "npu-smi info -t topo"
  std::vector<Device> devices;
  std::vector<Nic> nics;
  std::vector<std::vector<Link>> links;      // devices x devices, symmetric, kSelf diagonal
  std::vector<std::vector<Link>> nic_links;  // devices x nics
};

// Parses the text of `nvidia-smi topo -m` or `npu-smi info -t topo` (ANSI underline codes,
// tabs or aligned spaces, the legend blocks and trailing blanks are fine). `file` names the
// input in errors. InvalidArgument "FILE:LINE: why" for a missing header, a row with the wrong
// number of cells, a non-X diagonal, an asymmetric pair, a malformed cell, devices not
// numbered 0..n-1 (Phy-ID<n> columns: ids not increasing); an uppercase token it does not
// know is kept as kUnknown. XLink / XLink_SW (newer npu-smi) read as HCCS / HCCS_SW.
absl::StatusOr<Topology> ParseTopology(const std::string& text, const std::string& file);

// Runs `nvidia-smi topo -m`, else `npu-smi info -t topo` (whichever is on PATH), each limited
// to `timeout`. Returns the output and sets *source to the command line. NotFound "no
// nvidia-smi or npu-smi here" when neither exists; Unavailable when the one found fails.
absl::StatusOr<std::string> CaptureTopology(Os* os, std::chrono::milliseconds timeout,
                                            std::string* source);

// ---- Placement ----
struct PlacementOptions {
  int tp = 1;     // tensor-parallel group size
  int pp = 1;     // pipeline stages
  int ranks = 0;  // ranks to place; 0: every device. Must be a multiple of tp * pp.
  BandwidthModel bandwidth;
  // Devices up to which the TP grouping is searched exhaustively (branch and bound); greedy
  // beyond (docs/metrics.md).
  int exhaustive_max_devices = 16;
};

// One rank order's figures.
struct Layout {
  std::vector<int> order;                    // device index of each rank (Megatron rank order)
  std::vector<std::vector<int>> groups;      // TP groups: device indices, rank order
  std::vector<double> bottleneck_gbps;       // per group; empty entries when tp == 1
  std::vector<std::string> bottleneck_link;  // the slowest link's token on the group's ring
  double pipeline_gbps = 0;  // slowest pipeline hop (stage s rank i -> stage s+1 rank i); 0 if pp 1
  std::string pipeline_link;
  double min_bottleneck_gbps() const;  // 0 when there are no groups of two or more
};

struct Placement {
  PlacementOptions options;
  Layout naive;     // ranks on devices 0, 1, 2, ... in order
  Layout proposed;  // the search's
  bool exhaustive = true;
};

// Best ring through `group` (device indices), rated by its slowest link: that link's
// bandwidth, and its token in *link (when not null). 0 for groups under two devices.
double RingBottleneckGbps(const Topology& topo, const std::vector<int>& group,
                          const BandwidthModel& model, std::string* link = nullptr);

// The figures of a given rank order (order.size() a multiple of tp * pp).
Layout EvaluateOrder(const Topology& topo, const std::vector<int>& order, int tp, int pp,
                     const BandwidthModel& model);

// TP groups with the highest bottleneck (maximise the slowest group's, then the sum over
// groups, then closeness), then pipeline chains greedily joining the groups with the fastest
// hops (docs/metrics.md "Topology"). InvalidArgument when tp, pp or ranks do not fit the
// devices (named).
absl::StatusOr<Placement> PlaceRanks(const Topology& topo, const PlacementOptions& options);

// What `launch --placement topo` sets: the vendor's visible-devices variable
// (CUDA_VISIBLE_DEVICES or ASCEND_RT_VISIBLE_DEVICES) and the device number of each rank.
struct RankDevices {
  std::string var;
  std::vector<std::string> devices;
};
RankDevices RankDevicesOf(const Topology& topo, const Layout& layout);

// ---- Reports ----
// Problems the placement leaves or fixes (docs/metrics.md "Topology"):
//  - topo.naive_order_slower (warning): the plain order's slowest TP group (or pipeline hop) is
//    slower than the placement's: launch with --placement topo;
//  - topo.tp_crosses_sockets (error): even the placement's TP groups cross a SYS link; fix:
//    the largest TP size whose groups stay off SYS;
//  - topo.unknown_links (info): pairs whose class is unknown (rated 0 GB/s).
std::vector<Finding> TopologyFindings(const Topology& topo, const Placement& placement);

// docs/formats.md "Topology JSON" (format trainscope.topo).
nlohmann::json TopologyToJson(const Topology& topo, const BandwidthModel& model);
nlohmann::json PlacementToJson(const Topology& topo, const Placement& placement,
                               const std::vector<Finding>& findings);
// The matrix (devices, nearest NIC, affinities), the class legend with GB/s, and the groups
// before and after; fits in 120 columns for up to 16 devices.
std::string TopologyToText(const Topology& topo, const Placement& placement,
                           const std::vector<Finding>& findings);
// A short summary for the fingerprint: devices, classes present, the fastest and slowest
// device link.
nlohmann::json TopologySummary(const Topology& topo, const BandwidthModel& model);

}  // namespace trainscope::topo

#endif  // TRAINSCOPE_TOPO_TOPO_H_
