// `trainscope topo [--from FILE] [--tp N] [--pp M] [--ranks R] [--json]`: a shell around
// topo::ParseTopology, topo::PlaceRanks and topo::TopologyFindings.
// Exit codes: 0 the placement is fine; 1 a finding of severity error or warning (TP groups
// that must cross SYS, or a device order slower than the placement); 2 bad usage, no tool and
// no --from, or input that does not parse (the error names the line).
#include "cli/topo_command.h"

#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>

#include "absl/strings/str_cat.h"
#include "cli/exit.h"
#include "nlohmann/json.hpp"
#include "trainscope/core/os.h"
#include "trainscope/topo/topo.h"

namespace trainscope::cli {
namespace {

struct TopoArgs {
  std::string from;
  topo::PlacementOptions placement;
  double tool_timeout_s = 10;
  bool json = false;
};

int RunTopo(const TopoArgs& a) {
  Os* os = Os::Default();
  std::string text, name = a.from;
  if (!a.from.empty()) {
    absl::StatusOr<std::string> t = os->ReadFile(a.from);
    if (!t.ok()) return ReportAndExitCode("topo", t.status());
    text = *t;
  } else {
    absl::StatusOr<std::string> t = topo::CaptureTopology(
        os, std::chrono::milliseconds(static_cast<int64_t>(a.tool_timeout_s * 1000)), &name);
    if (!t.ok()) {
      // No tool, or one that failed: there is no input to read (exit 2, not "a problem").
      std::fprintf(stderr, "trainscope topo: error: %s\n",
                   std::string(t.status().message()).c_str());
      return kExitUsage;
    }
    text = *t;
  }
  absl::StatusOr<topo::Topology> t = topo::ParseTopology(text, name);
  if (!t.ok()) return ReportAndExitCode("topo", t.status());
  absl::StatusOr<topo::Placement> p = topo::PlaceRanks(*t, a.placement);
  if (!p.ok()) return ReportAndExitCode("topo", p.status());
  std::vector<Finding> findings = topo::TopologyFindings(*t, *p);
  if (a.json) {
    nlohmann::json j = topo::PlacementToJson(*t, *p, findings);
    j["input"] = name;
    std::cout << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    std::cout << "input: " << name << "\n" << topo::TopologyToText(*t, *p, findings);
  }
  const bool problem = CountFindings(findings, Severity::kError) > 0 ||
                       CountFindings(findings, Severity::kWarning) > 0;
  return problem ? kExitProblems : kExitOk;
}

}  // namespace

void RegisterTopoCommand(CLI::App& root, CommandContext& ctx) {
  auto* a = KeepAlive<TopoArgs>();
  CLI::App* cmd = root.add_subcommand(
      "topo",
      "device link matrix (nvidia-smi topo -m, npu-smi info -t topo) with estimated GB/s per "
      "link class, and a placement of ranks that keeps each tensor-parallel group on the "
      "fastest links (docs/metrics.md \"Topology\")");
  cmd->add_option("--from", a->from,
                  "saved output of `nvidia-smi topo -m` or `npu-smi info -t topo` (default: run "
                  "the one present)");
  cmd->add_option("--tp", a->placement.tp, "tensor-parallel group size (default 1)");
  cmd->add_option("--pp", a->placement.pp, "pipeline stages (default 1)");
  cmd->add_option("--ranks", a->placement.ranks, "ranks to place (default: every device)");
  cmd->add_option("--nvlink-link-gbps", a->placement.bandwidth.nvlink_link_gbps,
                  "GB/s per NVLink per direction (default 25: NVLink 2-4; 50 for NVLink 5)");
  cmd->add_option("--pcie-gbps", a->placement.bandwidth.pcie_gbps,
                  "GB/s of a PCIe x16 link per direction (default 31.5: Gen4; 63 for Gen5)");
  cmd->add_option("--hccs-gbps", a->placement.bandwidth.hccs_gbps,
                  "GB/s per HCCS link (default 56: Ascend 910B)");
  cmd->add_option("--tool-timeout", a->tool_timeout_s,
                  "seconds nvidia-smi / npu-smi may take (default 10)");
  cmd->add_flag("--json", a->json, "print JSON (docs/formats.md \"Topology JSON\")");
  cmd->callback([&ctx, a] { ctx.exit_code = RunTopo(*a); });
}

}  // namespace trainscope::cli
