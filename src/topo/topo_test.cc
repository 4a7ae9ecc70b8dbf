#include "trainscope/topo/topo.h"

#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "trainscope/core/fake_os.h"

namespace trainscope::topo {
namespace {

std::string Fixture(const std::string& name) {
  std::ifstream in(std::string(TS_SOURCE_DIR) + "/tests/data/topo/" + name);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Topology Parse(const std::string& name) {
  absl::StatusOr<Topology> t = ParseTopology(Fixture(name), name);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *t : Topology();
}

// A small matrix in nvidia-smi's layout from rows of tokens.
std::string Matrix(const std::vector<std::string>& rows) {
  std::string out = "\t";
  for (size_t i = 0; i < rows.size(); ++i) out += "GPU" + std::to_string(i) + "\t";
  out += "CPU Affinity\n";
  for (size_t i = 0; i < rows.size(); ++i)
    out += "GPU" + std::to_string(i) + "\t" + rows[i] + "\t0-7\n";
  return out;
}

TEST(TopoParse, DgxH100) {
  Topology t = Parse("dgx_h100_nvlink.txt");
  ASSERT_EQ(t.devices.size(), 8u);
  EXPECT_EQ(t.vendor, "nvidia");
  ASSERT_EQ(t.nics.size(), 10u);
  EXPECT_EQ(t.nics[3].device, "mlx5_3");
  EXPECT_EQ(t.links[0][7].cls, LinkClass::kNvLink);
  EXPECT_EQ(t.links[0][7].nvlinks, 18);
  EXPECT_EQ(t.links[5][5].cls, LinkClass::kSelf);
  EXPECT_EQ(t.devices[5].cpu_affinity, "56-111,168-223");
  EXPECT_EQ(t.devices[5].numa_affinity, "1");
  EXPECT_EQ(t.nic_links[2][2].token, "PXB");
  EXPECT_DOUBLE_EQ(LinkGbps(t.links[0][1], BandwidthModel()), 450);
}

TEST(TopoParse, OlderDriverNicColumnsAndAscend) {
  Topology v = Parse("dgx1_v100_nvlink.txt");
  ASSERT_EQ(v.devices.size(), 8u);
  ASSERT_EQ(v.nics.size(), 4u);
  EXPECT_EQ(v.nics[1].name, "mlx5_2");
  EXPECT_EQ(v.devices[0].numa_affinity, "");
  EXPECT_EQ(v.links[0][3].token, "NV2");
  Topology a = Parse("ascend_910_8npu.txt");
  ASSERT_EQ(a.devices.size(), 8u);
  EXPECT_EQ(a.vendor, "ascend");
  EXPECT_EQ(a.source, "npu-smi info -t topo");
  EXPECT_EQ(a.links[0][3].cls, LinkClass::kHccs);
  EXPECT_EQ(a.links[0][4].cls, LinkClass::kSys);
  EXPECT_EQ(a.devices[7].cpu_affinity, "72-95");
}

// Real 910B outputs (tests/data/README.md "topo/"): a header that starts at column 0, a legend
// without NA, NPUs of one CPU affinity not side by side.
TEST(TopoParse, AscendRealOutputs) {
  Topology b = Parse("ascend_910b_8npu_blog.txt");
  ASSERT_EQ(b.devices.size(), 8u);
  EXPECT_EQ(b.vendor, "ascend");
  EXPECT_TRUE(b.nics.empty());
  for (size_t i = 0; i < 8; ++i)
    for (size_t j = 0; j < 8; ++j)
      EXPECT_EQ(b.links[i][j].cls, i == j ? LinkClass::kSelf : LinkClass::kHccs) << i << "," << j;
  EXPECT_EQ(b.devices[1].cpu_affinity, "0-23");
  EXPECT_EQ(b.devices[5].cpu_affinity, "48-71");
  Topology s = Parse("ascend_910b_8npu.txt");
  EXPECT_EQ(s.devices[1].cpu_affinity, "144-167");
}

// Atlas A3 (sglang#30453): the header names the dies by physical id, Arm prints no CPU
// Affinity, and newer legends name HCCS links XLink.
TEST(TopoParse, AscendA3PhysicalIds) {
  Topology t = Parse("ascend_a3_2die_phyid.txt");
  ASSERT_EQ(t.devices.size(), 2u);
  EXPECT_EQ(t.vendor, "ascend");
  EXPECT_EQ(t.devices[0].name, "Phy-ID12");
  EXPECT_EQ(t.devices[0].index, 0);
  EXPECT_EQ(t.devices[0].physical_id, 12);
  EXPECT_EQ(t.devices[1].physical_id, 13);
  EXPECT_EQ(t.links[0][1].cls, LinkClass::kSio);
  EXPECT_EQ(t.devices[0].cpu_affinity, "");
  EXPECT_EQ(t.devices[1].cpu_affinity, "");
  const std::string x =
      "\t   Phy-ID4    Phy-ID6    Phy-ID7    \n"
      "Phy-ID4    X          XLink      XLink_SW   \n"
      "Phy-ID6    XLink      X          XLink      \n"
      "Phy-ID7    XLink_SW   XLink      X          \n";
  absl::StatusOr<Topology> a = ParseTopology(x, "a3");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->links[0][1].cls, LinkClass::kHccs);
  EXPECT_EQ(a->links[0][1].token, "XLink");
  EXPECT_EQ(a->links[2][0].cls, LinkClass::kHccsSw);
  EXPECT_EQ(a->devices[2].physical_id, 7);
  // Physical ids must increase.
  absl::StatusOr<Topology> d =
      ParseTopology("Phy-ID6 Phy-ID4\nPhy-ID6 X SIO\nPhy-ID4 SIO X\n", "d");
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("d:1: column 'Phy-ID4'"), std::string::npos) << d.status();
}

TEST(TopoParse, ErrorsNameTheLine) {
  absl::StatusOr<Topology> t = ParseTopology(Fixture("malformed_truncated_row.txt"), "bad.txt");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("bad.txt:7: row GPU5 has 5 link cells, expected 10"),
            std::string::npos)
      << t.status();
  // Asymmetric pair, reported at the later row.
  t = ParseTopology(Matrix({" X \tNV1", "NV2\t X "}), "f");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("f:3: GPU1-GPU0 is NV2 but GPU0-GPU1 is NV1"),
            std::string::npos)
      << t.status();
  // Not a link class; X off the diagonal; no header at all.
  EXPECT_FALSE(ParseTopology(Matrix({" X \tnv1", "nv1\t X "}), "f").ok());
  EXPECT_FALSE(ParseTopology(Matrix({"X\tX", "X\tX"}), "f").ok());
  t = ParseTopology("No devices were found\n", "f");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("f:1: no topology matrix"), std::string::npos);
  // Bytes that are not ASCII text in what we keep (JSON needs UTF-8).
  t = ParseTopology(Matrix({" X \tPIX", "PIX\t X "}) + "", "f");
  ASSERT_TRUE(t.ok());
  std::string m = Matrix({" X \tPIX", "PIX\t X "});
  m.replace(m.find("0-7"), 3, "0-\xdd");
  t = ParseTopology(m, "f");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("f:2: row GPU0: bytes that are not ASCII text"),
            std::string::npos)
      << t.status();
  // An unknown uppercase class is kept (rated 0), not an error.
  t = ParseTopology(Matrix({" X \tC2C", "C2C\t X "}), "f");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->links[0][1].cls, LinkClass::kUnknown);
}

TEST(TopoRing, BestRingAvoidsSlowPairs) {
  // A 4-cycle of fast links with slow diagonals: the ring 0-1-2-3 never uses a slow pair,
  // although the slowest pair of the group is slow.
  Topology t = *ParseTopology(Matrix({" X \tNV2\tSYS\tNV2", "NV2\t X \tNV2\tSYS",
                                      "SYS\tNV2\t X \tNV2", "NV2\tSYS\tNV2\t X "}),
                              "f");
  std::string link;
  EXPECT_DOUBLE_EQ(RingBottleneckGbps(t, {0, 1, 2, 3}, BandwidthModel(), &link), 50);
  EXPECT_EQ(link, "NV2");
  // Three devices: a ring uses all three pairs.
  EXPECT_DOUBLE_EQ(RingBottleneckGbps(t, {0, 1, 2}, BandwidthModel(), &link), 12.6);
  EXPECT_EQ(link, "SYS");
  EXPECT_DOUBLE_EQ(RingBottleneckGbps(t, {0}, BandwidthModel()), 0);
}

TEST(TopoPlace, Dgx1PairsOnDoubleLinks) {
  Topology t = Parse("dgx1_v100_nvlink.txt");
  PlacementOptions o;
  o.tp = 2;
  absl::StatusOr<Placement> p = PlaceRanks(t, o);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_DOUBLE_EQ(p->naive.min_bottleneck_gbps(), 25);  // (0,1) is NV1
  EXPECT_DOUBLE_EQ(p->proposed.min_bottleneck_gbps(), 50);
  for (const auto& g : p->proposed.groups) EXPECT_EQ(t.links[g[0]][g[1]].token, "NV2");
  std::vector<int> sorted = p->proposed.order;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  std::vector<Finding> f = TopologyFindings(t, *p);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].id, "topo.naive_order_slower");
}

TEST(TopoPlace, PcieTp8CrossesSocketsAndTp4DoesNot) {
  Topology t = Parse("pcie_8gpu_2socket.txt");
  PlacementOptions o;
  o.tp = 8;
  Placement p = *PlaceRanks(t, o);
  EXPECT_EQ(p.proposed.bottleneck_link[0], "SYS");
  std::vector<Finding> f = TopologyFindings(t, p);
  ASSERT_FALSE(f.empty());
  EXPECT_EQ(f[0].id, "topo.tp_crosses_sockets");
  EXPECT_NE(f[0].fix.find("--tp 4"), std::string::npos) << f[0].fix;
  o.tp = 4;
  p = *PlaceRanks(t, o);
  EXPECT_EQ(p.proposed.groups, (std::vector<std::vector<int>>{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(p.proposed.bottleneck_link[0], "NODE");
  EXPECT_TRUE(TopologyFindings(t, p).empty());
}

TEST(TopoPlace, ShuffledNumberingIsRepairedAndPipelineStaysOnSocket) {
  // Devices numbered alternately across two sockets: 0,2,4,6 share a PCIe switch complex,
  // 1,3,5,7 another; the plain order pairs every TP group across sockets.
  std::vector<std::string> rows;
  for (int a = 0; a < 8; ++a) {
    std::string r;
    for (int b = 0; b < 8; ++b) {
      r += a == b ? " X " : (a % 2 == b % 2 ? "PIX" : "SYS");
      if (b < 7) r += "\t";
    }
    rows.push_back(r);
  }
  Topology t = *ParseTopology(Matrix(rows), "f");
  PlacementOptions o;
  o.tp = 2;
  o.pp = 2;
  Placement p = *PlaceRanks(t, o);
  EXPECT_EQ(p.naive.bottleneck_link[0], "SYS");
  EXPECT_DOUBLE_EQ(p.proposed.min_bottleneck_gbps(), 31.5);
  EXPECT_EQ(p.proposed.pipeline_link, "PIX");
  // Fewer ranks than devices: the best subset.
  o.pp = 1;
  o.tp = 4;
  o.ranks = 4;
  p = *PlaceRanks(t, o);
  EXPECT_EQ(p.proposed.order.size(), 4u);
  EXPECT_EQ(p.proposed.bottleneck_link[0], "PIX");
  // Greedy beyond the exhaustive limit finds the same here.
  o.ranks = 0;
  o.exhaustive_max_devices = 4;
  p = *PlaceRanks(t, o);
  EXPECT_FALSE(p.exhaustive);
  EXPECT_EQ(p.proposed.bottleneck_link[0], "PIX");
  EXPECT_EQ(p.proposed.bottleneck_link[1], "PIX");
}

TEST(TopoPlace, Sixteen) {
  // 16 devices in four switch groups of four, ordered round-robin: exhaustive search over
  // 16 devices must stay fast and regroup them.
  std::vector<std::string> rows;
  for (int a = 0; a < 16; ++a) {
    std::string r;
    for (int b = 0; b < 16; ++b) {
      r += a == b ? " X " : (a % 4 == b % 4 ? "NV4" : (a % 2 == b % 2 ? "PIX" : "SYS"));
      if (b < 15) r += "\t";
    }
    rows.push_back(r);
  }
  Topology t = *ParseTopology(Matrix(rows), "f");
  for (int tp : {2, 4, 8}) {
    PlacementOptions o;
    o.tp = tp;
    Placement p = *PlaceRanks(t, o);
    EXPECT_TRUE(p.exhaustive);
    EXPECT_EQ(p.proposed.bottleneck_link[0], tp <= 4 ? "NV4" : "PIX") << tp;
  }
}

TEST(TopoPlace, BadSizes) {
  Topology t = Parse("ascend_910b_8npu.txt");
  PlacementOptions o;
  o.tp = 3;
  EXPECT_EQ(PlaceRanks(t, o).status().code(), absl::StatusCode::kInvalidArgument);
  o.tp = 2;
  o.ranks = 16;
  EXPECT_EQ(PlaceRanks(t, o).status().code(), absl::StatusCode::kInvalidArgument);
  o.ranks = 0;
  o.tp = 0;
  EXPECT_EQ(PlaceRanks(t, o).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(TopoCapture, RunsTheToolPresent) {
  FakeOs os;
  std::string source;
  absl::StatusOr<std::string> r = CaptureTopology(&os, std::chrono::milliseconds(100), &source);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  RunResult npu;
  npu.exited = true;
  npu.exit_code = 0;
  npu.out = Fixture("ascend_910b_8npu.txt");
  os.AddProgram("npu-smi", npu);
  r = CaptureTopology(&os, std::chrono::milliseconds(100), &source);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(source, "npu-smi info -t topo");
  EXPECT_TRUE(ParseTopology(*r, source).ok());
}

TEST(TopoReport, JsonShape) {
  Topology t = Parse("dgx_h100_nvlink.txt");
  PlacementOptions o;
  o.tp = 8;
  Placement p = *PlaceRanks(t, o);
  nlohmann::json j = PlacementToJson(t, p, TopologyFindings(t, p));
  EXPECT_EQ(j["format"], "trainscope.topo");
  EXPECT_EQ(j["links"][0][1], "NV18");
  EXPECT_EQ(j["proposed"]["bottleneck_gbps"][0], 450.0);
  EXPECT_EQ(j["devices"][0]["nearest_nics"], nlohmann::json::array({"NIC0"}));
  EXPECT_TRUE(j["findings"].empty());
  nlohmann::json s = TopologySummary(t, o.bandwidth);
  EXPECT_EQ(s["pairs_by_class"]["NV18"], 28);
}

}  // namespace
}  // namespace trainscope::topo
