// `trainscope plan [--config FILE | --params N --layers L --hidden H --heads A --seq S --vocab V]
// --devices N [--nodes K] --device-memory GB [--precision bf16|fp16|fp32] [--global-batch B]
// [--comm FILE] [--topo FILE] [--trace ANALYSIS|RUN_DIR] [--json]`: a shell around
// plan::MakePlan.
// Intra-node bandwidth, first given wins: --intra-node-gbps, --comm (measured busbw), --topo
// (estimated per group size from the link matrix), the default 100 GB/s.
#include "cli/plan_command.h"

#include <cstdint>
#include <cstdio>
#include <iostream>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "trainscope/core/exit.h"
#include "trainscope/core/os.h"
#include "trainscope/plan/plan.h"

namespace trainscope::cli {
namespace {

struct PlanArgs {
  std::string config, comm, topo, trace, precision, recompute;
  bool intra_given = false;  // --intra-node-gbps was on the command line
  double params = 0;
  int layers = 0, hidden = 0, heads = 0, seq = 0, vocab = 0, mlp_ratio = 4;
  plan::Cluster cluster;
  int global_batch = 0;
  std::vector<int> tp, pp, zero, micro_batch;
  bool no_sp = false, json = false;
  double allowance = 0.10;
  int rows = 15;
};

absl::StatusOr<plan::PlanOptions> BuildOptions(const PlanArgs& a) {
  plan::PlanOptions o;
  o.cluster = a.cluster;
  Os* os = Os::Default();
  if (!a.config.empty()) {
    absl::StatusOr<plan::ConfigModel> c = plan::ReadTrainConfig(os, a.config);
    if (!c.ok()) return c.status();
    o.model = c->model;
    o.precision = c->precision;
    if (a.global_batch == 0) {
      const int64_t gb = int64_t{c->micro_batch} * c->grad_accum * a.cluster.devices;
      if (gb > std::numeric_limits<int>::max())
        return absl::InvalidArgumentError(
            absl::StrCat(a.config, ": micro_batch x grad_accum x devices = ", gb,
                         " sequences is beyond the planner's range"));
      o.global_batch = static_cast<int>(gb);
    }
  }
  // Shape flags override the config's keys.
  if (a.params > 0) o.model.params = a.params;
  if (a.layers > 0) o.model.layers = a.layers;
  if (a.hidden > 0) o.model.hidden = a.hidden;
  if (a.heads > 0) o.model.heads = a.heads;
  if (a.seq > 0) o.model.seq_len = a.seq;
  if (a.vocab > 0) o.model.vocab = a.vocab;
  if (a.config.empty() || a.mlp_ratio != 4) o.model.mlp_ratio = a.mlp_ratio;
  if (!a.precision.empty()) {
    absl::StatusOr<plan::Precision> p = plan::ParsePrecision(a.precision);
    if (!p.ok()) return p.status();
    o.precision = *p;
  }
  if (a.global_batch > 0) o.global_batch = a.global_batch;
  if (!a.topo.empty() && a.comm.empty() && !a.intra_given) {
    absl::Status st = plan::ApplyTopology(os, a.topo, &o.cluster);
    if (!st.ok()) return st;
  }
  if (!a.comm.empty()) {
    absl::StatusOr<double> bw = plan::ReadSelftestBusBw(os, a.comm);
    if (!bw.ok()) return bw.status();
    // A one-node selftest measures the link inside a node; with several nodes the ring crosses
    // the slowest link, so the figure stands for both unless one was given.
    if (!a.intra_given) o.cluster.intra_node_gbps = *bw;
    if (a.cluster.nodes > 1) o.cluster.inter_node_gbps = std::min(*bw, a.cluster.inter_node_gbps);
    o.cluster.bandwidth_source = a.comm;
  }
  if (!a.recompute.empty()) {
    size_t start = 0;
    while (start <= a.recompute.size()) {
      size_t comma = a.recompute.find(',', start);
      if (comma == std::string::npos) comma = a.recompute.size();
      absl::StatusOr<plan::Recompute> r =
          plan::ParseRecompute(a.recompute.substr(start, comma - start));
      if (!r.ok()) return r.status();
      o.recompute.push_back(*r);
      start = comma + 1;
    }
  }
  o.tp = a.tp;
  o.pp = a.pp;
  o.zero = a.zero;
  o.micro_batch = a.micro_batch;
  o.sequence_parallel = !a.no_sp;
  o.allowance_fraction = a.allowance;
  return o;
}

int RunPlan(const PlanArgs& a) {
  if (a.config.empty() &&
      (a.layers == 0 || a.hidden == 0 || a.heads == 0 || a.seq == 0 || a.vocab == 0)) {
    std::fprintf(stderr,
                 "trainscope plan: error: give --config FILE or --layers, --hidden, --heads, --seq "
                 "and --vocab\n");
    return kExitUsage;
  }
  absl::StatusOr<plan::PlanOptions> o = BuildOptions(a);
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
  cmd->add_option("--config", a->config,
                  "a trainscope train config: its model, precision and batch");
  cmd->add_option("--params", a->params, "parameter count (default: counted from the shape)");
  cmd->add_option("--layers", a->layers, "transformer layers");
  cmd->add_option("--hidden", a->hidden, "hidden size");
  cmd->add_option("--heads", a->heads, "attention heads");
  cmd->add_option("--seq", a->seq, "sequence length");
  cmd->add_option("--vocab", a->vocab, "vocabulary size");
  cmd->add_option("--mlp-ratio", a->mlp_ratio, "MLP hidden / hidden (default 4)");
  cmd->add_option("--devices", a->cluster.devices, "devices in all")->required();
  cmd->add_option("--nodes", a->cluster.nodes, "nodes (default 1)");
  cmd->add_option("--device-memory", a->cluster.device_memory_gb, "GB per device (1e9 bytes)")
      ->required();
  cmd->add_option("--precision", a->precision,
                  "bf16|fp16 (mixed-precision AdamW, 16 B/param) or fp32 (16 B/param, fp32 "
                  "activations; the CPU trainer); default bf16, or the config's");
  cmd->add_option("--global-batch", a->global_batch,
                  "sequences per optimizer step (default: the config's micro_batch x grad_accum "
                  "x devices, else 8 x devices)");
  cmd->add_option("--comm", a->comm, "a `selftest comm --json` result: its all_reduce busbw");
  CLI::Option* intra = cmd->add_option("--intra-node-gbps", a->cluster.intra_node_gbps,
                                       "busbw inside a node, GB/s (default 100, assumed; wins "
                                       "over --comm and --topo)");
  cmd->add_option("--topo", a->topo,
                  "saved `nvidia-smi topo -m` / `npu-smi info -t topo` output: intra-node "
                  "busbw per group size from the placement's slowest link (estimated; "
                  "--comm wins)");
  cmd->add_option("--inter-node-gbps", a->cluster.inter_node_gbps,
                  "busbw between nodes, GB/s (default 12.5, assumed)");
  cmd->add_option("--device-tflops", a->cluster.device_tflops,
                  "sustained matmul TFLOP/s per device, for the step-time ranking (default 100)");
  cmd->add_option("--trace", a->trace,
                  "a `trace analyze --json` result or a run directory: the measured bottleneck");
  cmd->add_option("--tp", a->tp, "tensor-parallel sizes to try (default: divisors of --devices)")
      ->delimiter(',');
  cmd->add_option("--pp", a->pp, "pipeline sizes to try (default: divisors of --devices)")
      ->delimiter(',');
  cmd->add_option("--zero", a->zero, "ZeRO stages to try (default 0,1,2,3)")->delimiter(',');
  cmd->add_option("--recompute", a->recompute, "none,selective,full (default all)");
  cmd->add_option("--micro-batch", a->micro_batch,
                  "micro-batches to try (default 1, 2, 4, ... up to the batch per DP rank)")
      ->delimiter(',');
  cmd->add_flag("--no-sequence-parallel", a->no_sp,
                "tensor parallelism without sequence parallelism");
  cmd->add_option("--allowance", a->allowance,
                  "buffers and fragmentation, as a fraction of the rest (default 0.10)");
  cmd->add_option("--rows", a->rows, "table rows (default 15)");
  cmd->add_flag("--json", a->json, "print the plan as JSON (docs/formats.md \"Plan JSON\")");
  cmd->callback([&ctx, a, intra] {
    a->intra_given = intra->count() > 0;
    ctx.exit_code = RunPlan(*a);
  });
}

}  // namespace trainscope::cli
