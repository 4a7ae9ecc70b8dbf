// What `trainscope topo` reports: findings, JSON, the text matrix and group table, and the
// fingerprint's summary.
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "trainscope/core/table.h"
#include "trainscope/topo/topo.h"

namespace trainscope::topo {
namespace {

using nlohmann::json;

double TopoRound(double v) { return std::round(v * 100) / 100; }

std::string TopoGroupText(const std::vector<int>& g) { return absl::StrJoin(g, ","); }

// The NICs whose link to device d is the closest one printed (ties: all of them).
std::vector<std::string> TopoNearestNics(const Topology& topo, int d) {
  std::vector<std::string> out;
  int best = 1 << 20;
  for (size_t n = 0; n < topo.nics.size(); ++n) {
    const Link& l = topo.nic_links[d][n];
    if (l.cls == LinkClass::kUnknown) continue;
    int c = LinkCloseness(l);
    if (c < best) {
      best = c;
      out.clear();
    }
    if (c == best) out.push_back(topo.nics[n].name);
  }
  return out;
}

json TopoLayoutJson(const Layout& l, int tp, int pp) {
  json groups = json::array(), gbps = json::array(), links = json::array();
  for (size_t g = 0; g < l.groups.size(); ++g) {
    groups.push_back(l.groups[g]);
    gbps.push_back(tp > 1 ? json(TopoRound(l.bottleneck_gbps[g])) : json());
    links.push_back(tp > 1 ? json(l.bottleneck_link[g]) : json());
  }
  json j = {{"order", l.order},
            {"groups", groups},
            {"bottleneck_gbps", gbps},
            {"bottleneck_link", links},
            {"min_bottleneck_gbps", tp > 1 ? json(TopoRound(l.min_bottleneck_gbps())) : json()}};
  j["pipeline_gbps"] = pp > 1 ? json(TopoRound(l.pipeline_gbps)) : json();
  j["pipeline_link"] = pp > 1 ? json(l.pipeline_link) : json();
  return j;
}

// The largest TP size below `tp` that divides the ranks and whose placed groups all stay off
// SYS; 1 when none does.
int TopoLargestTpOffSys(const Topology& topo, const Placement& p) {
  for (int tp = p.options.tp - 1; tp > 1; --tp) {
    if (p.options.ranks % (tp * p.options.pp) != 0) continue;
    PlacementOptions o = p.options;
    o.tp = tp;
    absl::StatusOr<Placement> q = PlaceRanks(topo, o);
    if (!q.ok()) continue;
    bool sys = false;
    for (const std::string& l : q->proposed.bottleneck_link) sys = sys || l == "SYS" || l == "SOC";
    if (!sys) return tp;
  }
  return 1;
}

}  // namespace

RankDevices RankDevicesOf(const Topology& topo, const Layout& layout) {
  RankDevices r;
  r.var = topo.vendor == "nvidia" ? "CUDA_VISIBLE_DEVICES" : "ASCEND_RT_VISIBLE_DEVICES";
  for (int d : layout.order) r.devices.push_back(std::to_string(topo.devices[d].index));
  return r;
}

std::vector<Finding> TopologyFindings(const Topology& topo, const Placement& p) {
  std::vector<Finding> out;
  const PlacementOptions& o = p.options;
  const Layout& a = p.naive;
  const Layout& b = p.proposed;
  const std::string var = RankDevicesOf(topo, b).var;
  std::vector<std::string> crossing;
  for (size_t g = 0; g < b.groups.size(); ++g) {
    if (b.bottleneck_link[g] == "SYS" || b.bottleneck_link[g] == "SOC")
      crossing.push_back(TopoGroupText(b.groups[g]));
  }
  if (o.tp > 1 && !crossing.empty()) {
    Finding f;
    f.severity = Severity::kError;
    f.id = "topo.tp_crosses_sockets";
    f.title = absl::StrCat("Tensor-parallel groups of ", o.tp,
                           " cannot avoid the CPU socket interconnect (SYS) on this server");
    f.evidence = absl::StrCat("groups ", absl::StrJoin(crossing, " | "), " run at ",
                              FormatDouble(b.min_bottleneck_gbps(), 1),
                              " GB/s (SYS, estimated) in the best placement");
    const int fit = TopoLargestTpOffSys(topo, p);
    f.fix = fit > 1 ? absl::StrCat("use --tp ", fit,
                                   " (its groups stay off SYS) and more pipeline or data "
                                   "parallelism, or a server whose devices share a fabric")
                    : "keep tensor parallelism off this server's cross-socket links: use pipeline "
                      "or data parallelism instead";
    out.push_back(f);
  }
  const bool tp_better = o.tp > 1 && b.min_bottleneck_gbps() > a.min_bottleneck_gbps();
  const bool pp_better = o.pp > 1 && b.pipeline_gbps > a.pipeline_gbps;
  if (tp_better || pp_better) {
    Finding f;
    f.severity = Severity::kWarning;
    f.id = "topo.naive_order_slower";
    if (tp_better) {
      f.title = absl::StrCat("In device order, the slowest tensor-parallel group runs at ",
                             FormatDouble(a.min_bottleneck_gbps(), 1), " GB/s; placed, at ",
                             FormatDouble(b.min_bottleneck_gbps(), 1), " GB/s");
    } else {
      f.title = absl::StrCat("In device order, the slowest pipeline hop runs at ",
                             FormatDouble(a.pipeline_gbps, 1), " GB/s; placed, at ",
                             FormatDouble(b.pipeline_gbps, 1), " GB/s");
    }
    std::vector<std::string> before, after;
    for (size_t g = 0; g < a.groups.size(); ++g) {
      before.push_back(absl::StrCat(TopoGroupText(a.groups[g]), " ", a.bottleneck_link[g]));
      after.push_back(absl::StrCat(TopoGroupText(b.groups[g]), " ", b.bottleneck_link[g]));
    }
    f.evidence = absl::StrCat("groups in order: ", absl::StrJoin(before, " | "),
                              "; placed: ", absl::StrJoin(after, " | "));
    f.fix = absl::StrCat("trainscope launch --placement topo --tp ", o.tp,
                         o.pp > 1 ? absl::StrCat(" --pp ", o.pp) : "", ", or ", var, "=",
                         absl::StrJoin(b.order, ","));
    out.push_back(f);
  }
  int unknown = 0;
  for (size_t x = 0; x < topo.links.size(); ++x)
    for (size_t y = x + 1; y < topo.links.size(); ++y)
      unknown += topo.links[x][y].cls == LinkClass::kUnknown;
  if (unknown > 0) {
    Finding f;
    f.severity = Severity::kInfo;
    f.id = "topo.unknown_links";
    f.title = absl::StrCat(unknown, " device pairs have a link class this version does not rate");
    f.evidence = "rated 0 GB/s (NA, or a token not in docs/metrics.md \"Topology\")";
    f.fix = "check the tool's legend; placement avoids these pairs";
    out.push_back(f);
  }
  SortFindings(&out);
  return out;
}

json TopologyToJson(const Topology& topo, const BandwidthModel& model) {
  json j;
  j["format"] = kTopoFormat;
  j["version"] = kTopoVersion;
  j["source"] = topo.source;
  j["vendor"] = topo.vendor;
  json devices = json::array();
  for (const Device& d : topo.devices) {
    devices.push_back({{"index", d.index},
                       {"name", d.name},
                       {"cpu_affinity", d.cpu_affinity},
                       {"numa_affinity", d.numa_affinity},
                       {"nearest_nics", TopoNearestNics(topo, d.index)}});
  }
  j["devices"] = devices;
  json nics = json::array();
  for (const Nic& n : topo.nics) nics.push_back({{"name", n.name}, {"device", n.device}});
  j["nics"] = nics;
  json links = json::array(), gbps = json::array(), nic_links = json::array();
  std::map<std::string, double> classes;
  for (size_t a = 0; a < topo.links.size(); ++a) {
    json row = json::array(), grow = json::array(), nrow = json::array();
    for (size_t b = 0; b < topo.links.size(); ++b) {
      const Link& l = topo.links[a][b];
      row.push_back(l.token);
      grow.push_back(l.cls == LinkClass::kSelf ? json() : json(TopoRound(LinkGbps(l, model))));
      if (l.cls != LinkClass::kSelf) classes[l.token] = TopoRound(LinkGbps(l, model));
    }
    for (const Link& l : topo.nic_links[a]) nrow.push_back(l.token);
    links.push_back(row);
    gbps.push_back(grow);
    nic_links.push_back(nrow);
  }
  j["links"] = links;
  j["link_gbps"] = gbps;
  j["nic_links"] = nic_links;
  j["classes_gbps"] = classes;
  j["bandwidth_model"] = {{"nvlink_link_gbps", model.nvlink_link_gbps},
                          {"pcie_gbps", model.pcie_gbps},
                          {"hccs_gbps", model.hccs_gbps}};
  return j;
}

json PlacementToJson(const Topology& topo, const Placement& p,
                     const std::vector<Finding>& findings) {
  json j = TopologyToJson(topo, p.options.bandwidth);
  j["tp"] = p.options.tp;
  j["pp"] = p.options.pp;
  j["ranks"] = p.options.ranks;
  j["search"] = p.exhaustive ? "exhaustive" : "greedy";
  j["naive"] = TopoLayoutJson(p.naive, p.options.tp, p.options.pp);
  j["proposed"] = TopoLayoutJson(p.proposed, p.options.tp, p.options.pp);
  json f = json::array();
  for (const Finding& x : findings) f.push_back(FindingToJson(x));
  j["findings"] = f;
  return j;
}

std::string TopologyToText(const Topology& topo, const Placement& p,
                           const std::vector<Finding>& findings) {
  const BandwidthModel& model = p.options.bandwidth;
  const size_t n = topo.devices.size();
  std::string out =
      absl::StrCat("topology: ", topo.source, ", ", n, topo.vendor == "nvidia" ? " GPUs" : " NPUs",
                   ", ", topo.nics.size(), " NICs\n\n");
  // The matrix; with more than 8 devices the per-device columns get their own table (120
  // columns).
  const bool inline_info = n <= 8;
  // Columns the tool printed: NICs, CPU affinity, NUMA affinity.
  bool has_cpu = false, has_numa = false;
  for (const Device& d : topo.devices) {
    has_cpu = has_cpu || !d.cpu_affinity.empty();
    has_numa = has_numa || !d.numa_affinity.empty();
  }
  std::vector<std::string> info_header;
  if (!topo.nics.empty()) info_header.push_back("nearest NIC");
  if (has_cpu) info_header.push_back("CPU affinity");
  if (has_numa) info_header.push_back("NUMA");
  std::vector<std::string> header = {""};
  for (const Device& d : topo.devices) header.push_back(d.name);
  if (inline_info) header.insert(header.end(), info_header.begin(), info_header.end());
  Table matrix(header);
  info_header.insert(info_header.begin(), "device");
  Table info(info_header);
  for (size_t a = 0; a < n; ++a) {
    const Device& d = topo.devices[a];
    std::vector<std::string> row = {d.name};
    for (size_t b = 0; b < n; ++b) row.push_back(topo.links[a][b].token);
    std::vector<std::string> extra;
    if (!topo.nics.empty()) extra.push_back(absl::StrJoin(TopoNearestNics(topo, a), ","));
    if (has_cpu) extra.push_back(d.cpu_affinity);
    if (has_numa) extra.push_back(d.numa_affinity);
    if (inline_info) {
      row.insert(row.end(), extra.begin(), extra.end());
    } else {
      extra.insert(extra.begin(), d.name);
      info.AddRow(extra);
    }
    matrix.AddRow(row);
  }
  out += matrix.Render(24);
  if (!inline_info && info_header.size() > 1) out += "\n" + info.Render(40);
  // Classes present, fastest first.
  std::map<std::pair<double, int>, std::string, std::greater<>> classes;
  for (size_t a = 0; a < n; ++a)
    for (size_t b = 0; b < n; ++b)
      if (a != b) {
        const Link& l = topo.links[a][b];
        classes[{LinkGbps(l, model), -LinkCloseness(l)}] = l.token;
      }
  std::vector<std::string> legend;
  for (const auto& [k, token] : classes)
    legend.push_back(absl::StrCat(token, " ", FormatDouble(k.first, 1)));
  out += "\n" + WrapText(absl::StrCat("link GB/s per direction (estimated, docs/metrics.md "
                                      "\"Topology\"): ",
                                      absl::StrJoin(legend, ", ")),
                         120);

  const PlacementOptions& o = p.options;
  out += absl::StrCat("\nplacement: tp ", o.tp, ", pp ", o.pp, ", ", o.ranks, " ranks (",
                      p.exhaustive ? "exhaustive search" : "greedy search", ")\n");
  if (o.tp > 1) {
    Table groups(std::vector<std::string>{"group", "in order", "GB/s", "slowest", "placed", "GB/s",
                                          "slowest"});
    for (size_t g = 0; g < p.naive.groups.size(); ++g) {
      groups.AddRow({std::to_string(g), TopoGroupText(p.naive.groups[g]),
                     FormatDouble(p.naive.bottleneck_gbps[g], 1), p.naive.bottleneck_link[g],
                     TopoGroupText(p.proposed.groups[g]),
                     FormatDouble(p.proposed.bottleneck_gbps[g], 1),
                     p.proposed.bottleneck_link[g]});
    }
    out += groups.Render(40);
    out += absl::StrCat("bottleneck: ", FormatDouble(p.naive.min_bottleneck_gbps(), 1),
                        " GB/s in device order, ",
                        FormatDouble(p.proposed.min_bottleneck_gbps(), 1), " GB/s placed\n");
  }
  if (o.pp > 1) {
    out += absl::StrCat("pipeline hop: ", FormatDouble(p.naive.pipeline_gbps, 1), " GB/s (",
                        p.naive.pipeline_link, ") in device order, ",
                        FormatDouble(p.proposed.pipeline_gbps, 1), " GB/s (",
                        p.proposed.pipeline_link, ") placed\n");
  }
  out += absl::StrCat(
      "rank order (device of rank 0, 1, ...): ", absl::StrJoin(p.proposed.order, ","), "\n");
  if (!findings.empty()) out += "\n";
  for (const Finding& f : findings) {
    out += WrapText(absl::StrCat(SeverityName(f.severity), ": ", f.title), 120);
    out += WrapText("evidence: " + f.evidence, 120, "  ", "  ");
    out += WrapText("fix: " + f.fix, 120, "  ", "  ");
  }
  return out;
}

json TopologySummary(const Topology& topo, const BandwidthModel& model) {
  std::map<std::string, int> pairs;
  double fastest = 0, slowest = 0;
  bool any = false;
  for (size_t a = 0; a < topo.links.size(); ++a) {
    for (size_t b = a + 1; b < topo.links.size(); ++b) {
      const Link& l = topo.links[a][b];
      ++pairs[l.token];
      double g = LinkGbps(l, model);
      fastest = any ? std::max(fastest, g) : g;
      slowest = any ? std::min(slowest, g) : g;
      any = true;
    }
  }
  json links = json::array();
  for (const auto& row : topo.links) {
    json r = json::array();
    for (const Link& l : row) r.push_back(l.token);
    links.push_back(r);
  }
  return {{"devices", static_cast<int>(topo.devices.size())},
          {"nics", static_cast<int>(topo.nics.size())},
          {"pairs_by_class", pairs},
          {"fastest_gbps", TopoRound(fastest)},
          {"slowest_gbps", TopoRound(slowest)},
          {"links", links}};
}

}  // namespace trainscope::topo
