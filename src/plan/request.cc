// Merging a plan request into PlanOptions: the config first, then the shape values over it,
// then the bandwidths (given > measured by selftest comm > estimated from the topology >
// the default), then the candidate lists.
#include "trainscope/plan/request.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "trainscope/core/status.h"

namespace trainscope::plan {
namespace {

// The train config's model and precision, and its batch when the request gives none.
absl::Status ApplyConfig(Os* os, const PlanRequest& r, PlanOptions* o) {
  TS_ASSIGN_OR_RETURN(ConfigModel c, ReadTrainConfig(os, r.config));
  o->model = c.model;
  o->precision = c.precision;
  if (r.global_batch == 0) {
    const int64_t gb = int64_t{c.micro_batch} * c.grad_accum * r.cluster.devices;
    if (gb > std::numeric_limits<int>::max())
      return absl::InvalidArgumentError(absl::StrCat(r.config,
                                                     ": micro_batch x grad_accum x devices = ", gb,
                                                     " sequences is beyond the planner's range"));
    o->global_batch = static_cast<int>(gb);
  }
  return absl::OkStatus();
}

// Shape values override the config's keys.
void ApplyShape(const PlanRequest& r, ModelShape* m) {
  if (r.model.params > 0) m->params = r.model.params;
  if (r.model.layers > 0) m->layers = r.model.layers;
  if (r.model.hidden > 0) m->hidden = r.model.hidden;
  if (r.model.heads > 0) m->heads = r.model.heads;
  if (r.model.seq_len > 0) m->seq_len = r.model.seq_len;
  if (r.model.vocab > 0) m->vocab = r.model.vocab;
  if (r.config.empty() || r.model.mlp_ratio != 4) m->mlp_ratio = r.model.mlp_ratio;
}

// Intra-node bandwidth, first given wins: the request's own, the selftest comm's busbw, the
// topology's estimates per group size, the default.
absl::Status ApplyBandwidths(Os* os, const PlanRequest& r, Cluster* cluster) {
  if (!r.topo.empty() && r.comm.empty() && !r.intra_node_given) {
    TS_RETURN_IF_ERROR(ApplyTopology(os, r.topo, cluster));
  }
  if (!r.comm.empty()) {
    TS_ASSIGN_OR_RETURN(double bw, ReadSelftestBusBw(os, r.comm));
    // A one-node selftest measures the link inside a node; with several nodes the ring crosses
    // the slowest link, so the figure stands for both unless one was given.
    if (!r.intra_node_given) cluster->intra_node_gbps = bw;
    if (r.cluster.nodes > 1) cluster->inter_node_gbps = std::min(bw, r.cluster.inter_node_gbps);
    cluster->bandwidth_source = r.comm;
  }
  return absl::OkStatus();
}

// "none,selective" -> the list; an empty item is an error, as any unknown name.
absl::Status ParseRecomputeList(const std::string& list, std::vector<Recompute>* out) {
  size_t start = 0;
  while (start <= list.size()) {
    size_t comma = list.find(',', start);
    if (comma == std::string::npos) comma = list.size();
    TS_ASSIGN_OR_RETURN(Recompute r, ParseRecompute(list.substr(start, comma - start)));
    out->push_back(r);
    start = comma + 1;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<PlanOptions> ResolveOptions(Os* os, const PlanRequest& r) {
  PlanOptions o;
  o.cluster = r.cluster;
  if (!r.config.empty()) TS_RETURN_IF_ERROR(ApplyConfig(os, r, &o));
  ApplyShape(r, &o.model);
  if (!r.precision.empty()) {
    TS_ASSIGN_OR_RETURN(o.precision, ParsePrecision(r.precision));
  }
  if (r.global_batch > 0) o.global_batch = r.global_batch;
  TS_RETURN_IF_ERROR(ApplyBandwidths(os, r, &o.cluster));
  if (!r.recompute.empty()) TS_RETURN_IF_ERROR(ParseRecomputeList(r.recompute, &o.recompute));
  o.tp = r.tp;
  o.pp = r.pp;
  o.zero = r.zero;
  o.micro_batch = r.micro_batch;
  o.sequence_parallel = r.sequence_parallel;
  o.allowance_fraction = r.allowance_fraction;
  return o;
}

}  // namespace trainscope::plan
