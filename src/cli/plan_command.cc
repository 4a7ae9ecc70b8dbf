// `trainscope plan [--config FILE | --params N --layers L --hidden H --heads A --seq S --vocab V]
// --devices N [--nodes K] --device-memory GB [--precision bf16|fp16|fp32] [--global-batch B]
// [--comm FILE] [--topo FILE] [--trace ANALYSIS|RUN_DIR] [--json]`: a shell around
// plan::ResolveOptions and plan::MakePlan.
// Intra-node bandwidth, first given wins: --intra-node-gbps, --comm (measured busbw), --topo
// (estimated per group size from the link matrix), the default 100 GB/s.
#include "cli/plan_command.h"

#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "cli/exit.h"
#include "nlohmann/json.hpp"
#include "trainscope/core/os.h"
#include "trainscope/plan/plan.h"
#include "trainscope/plan/request.h"

namespace trainscope::cli {
namespace {

// The flags: the request itself, and what only the verb reads.
struct PlanArgs {
  plan::PlanRequest request;
  std::string trace;
  bool no_sp = false, json = false;
  int rows = 15;
};

int RunPlan(const PlanArgs& a) {
  const plan::PlanRequest& r = a.request;
  if (r.config.empty() && (r.model.layers == 0 || r.model.hidden == 0 || r.model.heads == 0 ||
                           r.model.seq_len == 0 || r.model.vocab == 0)) {
    std::fprintf(stderr,
                 "trainscope plan: error: give --config FILE or --layers, --hidden, --heads, --seq "
                 "and --vocab\n");
    return kExitUsage;
  }
  absl::StatusOr<plan::PlanOptions> o = plan::ResolveOptions(Os::Default(), r);
  if (!o.ok()) return ReportAndExitCode("plan", o.status());
  plan::Measured measured;
  if (!a.trace.empty()) {
    absl::StatusOr<plan::Measured> m = plan::ReadMeasured(Os::Default(), a.trace);
    if (!m.ok()) return ReportAndExitCode("plan", m.status());
    measured = *m;
  }
  absl::StatusOr<plan::Plan> p = plan::MakePlan(*o, measured);
  if (!p.ok()) return ReportAndExitCode("plan", p.status());
  if (a.json) {
    std::cout << plan::PlanToJson(*p).dump(2) << "\n";
  } else {
    std::cout << plan::PlanToText(*p, a.rows);
  }
  // Nothing fits: the check found a problem.
  return p->recommended >= 0 ? kExitOk : kExitProblems;
}

}  // namespace

void RegisterPlanCommand(CLI::App& root, CommandContext& ctx) {
  auto* a = KeepAlive<PlanArgs>();
  CLI::App* cmd = root.add_subcommand(
      "plan",
      "parallel strategy: memory per device, communication per step and pipeline bubble of every "
      "DP x TP x PP x ZeRO x recomputation x micro-batch candidate, ranked, with a recommendation "
      "(docs/metrics.md \"Parallel plan\")");
  cmd->add_option("--config", a->request.config,
                  "a trainscope train config: its model, precision and batch");
  cmd->add_option("--params", a->request.model.params,
                  "parameter count (default: counted from the shape)");
  cmd->add_option("--layers", a->request.model.layers, "transformer layers");
  cmd->add_option("--hidden", a->request.model.hidden, "hidden size");
  cmd->add_option("--heads", a->request.model.heads, "attention heads");
  cmd->add_option("--seq", a->request.model.seq_len, "sequence length");
  cmd->add_option("--vocab", a->request.model.vocab, "vocabulary size");
  cmd->add_option("--mlp-ratio", a->request.model.mlp_ratio, "MLP hidden / hidden (default 4)");
  cmd->add_option("--devices", a->request.cluster.devices, "devices in all")->required();
  cmd->add_option("--nodes", a->request.cluster.nodes, "nodes (default 1)");
  cmd->add_option("--device-memory", a->request.cluster.device_memory_gb,
                  "GB per device (1e9 bytes)")
      ->required();
  cmd->add_option("--precision", a->request.precision,
                  "bf16|fp16 (mixed-precision AdamW, 16 B/param) or fp32 (16 B/param, fp32 "
                  "activations; the CPU trainer); default bf16, or the config's");
  cmd->add_option("--global-batch", a->request.global_batch,
                  "sequences per optimizer step (default: the config's micro_batch x grad_accum "
                  "x devices, else 8 x devices)");
  cmd->add_option("--comm", a->request.comm,
                  "a `selftest comm --json` result: its all_reduce busbw");
  CLI::Option* intra = cmd->add_option("--intra-node-gbps", a->request.cluster.intra_node_gbps,
                                       "busbw inside a node, GB/s (default 100, assumed; wins "
                                       "over --comm and --topo)");
  cmd->add_option("--topo", a->request.topo,
                  "saved `nvidia-smi topo -m` / `npu-smi info -t topo` output: intra-node "
                  "busbw per group size from the placement's slowest link (estimated; "
                  "--comm wins)");
  cmd->add_option("--inter-node-gbps", a->request.cluster.inter_node_gbps,
                  "busbw between nodes, GB/s (default 12.5, assumed)");
  cmd->add_option("--device-tflops", a->request.cluster.device_tflops,
                  "sustained matmul TFLOP/s per device, for the step-time ranking (default 100)");
  cmd->add_option("--trace", a->trace,
                  "a `trace analyze --json` result or a run directory: the measured bottleneck");
  cmd->add_option("--tp", a->request.tp,
                  "tensor-parallel sizes to try (default: divisors of --devices)")
      ->delimiter(',');
  cmd->add_option("--pp", a->request.pp, "pipeline sizes to try (default: divisors of --devices)")
      ->delimiter(',');
  cmd->add_option("--zero", a->request.zero, "ZeRO stages to try (default 0,1,2,3)")
      ->delimiter(',');
  cmd->add_option("--recompute", a->request.recompute, "none,selective,full (default all)");
  cmd->add_option("--micro-batch", a->request.micro_batch,
                  "micro-batches to try (default 1, 2, 4, ... up to the batch per DP rank)")
      ->delimiter(',');
  cmd->add_flag("--no-sequence-parallel", a->no_sp,
                "tensor parallelism without sequence parallelism");
  cmd->add_option("--allowance", a->request.allowance_fraction,
                  "buffers and fragmentation, as a fraction of the rest (default 0.10)");
  cmd->add_option("--rows", a->rows, "table rows (default 15)");
  cmd->add_flag("--json", a->json, "print the plan as JSON (docs/formats.md \"Plan JSON\")");
  cmd->callback([&ctx, a, intra] {
    a->request.intra_node_given = intra->count() > 0;
    a->request.sequence_parallel = !a->no_sp;
    ctx.exit_code = RunPlan(*a);
  });
}

}  // namespace trainscope::cli
