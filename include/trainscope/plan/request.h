// What a user asks the planner for, before it is resolved into PlanOptions: a train config
// and/or shape values, the cluster, measured or estimated bandwidths, candidate lists. The
// `trainscope plan` flags map onto it one to one; ResolveOptions merges them the way the verb
// documents, so the CLI and other callers get the same options.
//
// Plain struct and one function; ResolveOptions does blocking file I/O through core/os.h (the
// config, the selftest result, the topology). Thread-compatible. libtorch-free.
#ifndef TRAINSCOPE_PLAN_REQUEST_H_
#define TRAINSCOPE_PLAN_REQUEST_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainscope/plan/plan.h"

namespace trainscope {
class Os;
}

namespace trainscope::plan {

struct PlanRequest {
  // A trainscope train config: its model, precision and micro_batch x grad_accum. "": none.
  std::string config;
  // Shape values: each one > 0 overrides the config's; mlp_ratio overrides it when it is not
  // the default 4 (without a config it is always taken). tied_head is not read.
  ModelShape model;
  std::string precision;  // bf16, fp16 or fp32; "": the config's, else bf16
  // Sequences per optimizer step; 0: the config's micro_batch x grad_accum x devices, else
  // MakePlan's default (8 x devices).
  int global_batch = 0;
  Cluster cluster;
  bool intra_node_given = false;  // cluster.intra_node_gbps was given: comm and topo keep it
  // A `selftest comm --json` result: its all_reduce busbw is the intra-node bandwidth (and
  // caps the inter-node one when there are several nodes). "": none.
  std::string comm;
  // A topology text (`nvidia-smi topo -m` / `npu-smi info -t topo`): intra-node bandwidths per
  // group size (ApplyTopology). Used only without comm and without intra_node_given. "": none.
  std::string topo;
  std::string recompute;                       // comma-separated none, selective, full; "": all
  std::vector<int> tp, pp, zero, micro_batch;  // candidate lists, empty: all
  bool sequence_parallel = true;
  double allowance_fraction = 0.10;
};

// The options MakePlan takes for a request. Errors: those of ReadTrainConfig,
// ReadSelftestBusBw and ApplyTopology (NotFound / InvalidArgument naming the file), of
// ParsePrecision and ParseRecompute (InvalidArgument naming the value), and InvalidArgument
// naming the config when its micro_batch x grad_accum x devices exceeds an int. The values
// themselves are validated by MakePlan.
absl::StatusOr<PlanOptions> ResolveOptions(Os* os, const PlanRequest& request);

}  // namespace trainscope::plan

#endif  // TRAINSCOPE_PLAN_REQUEST_H_
