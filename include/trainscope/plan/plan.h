// Parallel-strategy planner (`trainscope plan`): for a decoder model and a cluster, the memory
// per device, the communication per step and the pipeline bubble of every DP x TP x PP x ZeRO x
// recomputation x micro-batch candidate, which ones fit, a ranking and a recommendation; given a
// measured trace, the bottleneck class and the rule that follows from it.
//
// Formulas and their sources are in docs/metrics.md, "Parallel plan": ZeRO model states
// (Rajbhandari et al. 2020), activations per layer (Korthikanti et al. 2022), ring collective
// volumes (nccl-tests), the 1F1B bubble (Narayanan et al. 2021).
//
// Pure functions over plain structs; the readers (config, selftest comm result, trace) do blocking
// file I/O through core/os.h. Thread-compatible. libtorch-free.
#ifndef TRAINSCOPE_PLAN_PLAN_H_
#define TRAINSCOPE_PLAN_PLAN_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json_fwd.hpp"
#include "trainscope/core/finding.h"

namespace trainscope {
class Os;
}

namespace trainscope::plan {

// Memory and traffic figures are in bytes; reports print decimal GB (1e9 bytes).
inline constexpr double kBytesPerGB = 1e9;

// The decoder model. `params` = 0: counted from the shape (CountParams).
struct ModelShape {
  double params = 0;
  int layers = 0;
  int hidden = 0;
  int heads = 0;
  int seq_len = 0;
  int vocab = 0;
  int mlp_ratio = 4;
  bool tied_head = true;
};

// Parameters of the trainscope reference decoder (the trainer's CountParams: embeddings,
// positions, L blocks, final LayerNorm, the head when untied).
double CountParams(const ModelShape& m);

enum class Precision { kBf16, kFp16, kFp32 };
const char* PrecisionName(Precision p);
absl::StatusOr<Precision> ParsePrecision(const std::string& name);

enum class Recompute { kNone, kSelective, kFull };
const char* RecomputeName(Recompute r);
absl::StatusOr<Recompute> ParseRecompute(const std::string& name);

// Bytes per parameter of the model states before ZeRO divides them.
struct StateBytes {
  double params = 0, grads = 0, optimizer = 0;
};
// bf16/fp16: mixed-precision AdamW, 2 + 2 + 12 (fp32 master copy, m, v: ZeRO's K = 12).
// fp32 (the trainscope CPU trainer): 4 + 4 + 8 (fp32 weights and grads, AdamW m and v).
StateBytes StateBytesFor(Precision p);

// Activation bytes of one transformer layer, Korthikanti et al. 2022 Table 2 shape:
//   s*b*h * (replicated + split/t) + a*s^2*b * scores/t,  the replicated part /t too under SP.
// bf16/fp16 (Megatron, fused kernels, dropout): replicated 10, split 8 + 4r, scores 5.
// fp32 (trainscope's eager trainer, no dropout): replicated 16 (LayerNorm in/out, fp32),
// split 4 (8 + 2r) (q, k, v, attention out, projections, residual, MLP hidden and GELU), scores
// 4 (the fp32 softmax output; the raw and masked scores are transients of the current layer,
// AttentionWorkingSet). Selective recompute drops the score term; full recompute keeps only the
// layer input (s*b*h * element bytes, /t under SP).
double ActivationBytesPerLayer(const ModelShape& m, Precision p, Recompute r, int tp,
                               bool sequence_parallel, int micro_batch);

// fp32 eager attention's transient: two (b, a, s, s) fp32 tensors of the current layer, /t.
// 0 for bf16/fp16 (fused kernels).
double AttentionWorkingSet(const ModelShape& m, Precision p, int tp, int micro_batch);

struct Cluster {
  int devices = 0;
  int nodes = 1;
  double device_memory_gb = 0;
  // Bus bandwidths (nccl-tests busbw, GB/s) inside a node and between nodes.
  double intra_node_gbps = 100;
  double inter_node_gbps = 12.5;
  std::string bandwidth_source = "assumed";  // or the selftest comm / topology file
  // From a topology (ApplyTopology): the bus bandwidth of a communicating group of this many
  // devices inside a node (the slowest group of the placement, topo/topo.h). A group size
  // without an entry uses intra_node_gbps.
  std::map<int, double> intra_node_gbps_by_size;
  double device_tflops = 100;  // sustained dense matmul rate, for step-time ranking
};

struct PlanOptions {
  ModelShape model;
  Cluster cluster;
  Precision precision = Precision::kBf16;
  int global_batch = 0;  // sequences per optimizer step; 0: 8 x devices
  // Candidate lists; empty means "all": dp x tp x pp = devices over the divisors, ZeRO 0-3,
  // none/selective/full, micro-batches 1, 2, 4, ... up to the batch per data-parallel rank.
  std::vector<int> tp, pp, zero, micro_batch;
  std::vector<Recompute> recompute;
  bool sequence_parallel = true;  // with tp > 1 (Megatron's default)
  // Buffers and fragmentation: added to the model states and activations (docs/metrics.md).
  double allowance_fraction = 0.10;
};

struct MemoryBreakdown {  // bytes per device, the busiest pipeline stage
  double params = 0, grads = 0, optimizer = 0, activations = 0, allowance = 0, total = 0;
};

struct CommBreakdown {  // bytes each device sends per optimizer step
  double dp = 0, tp = 0, pp = 0, total = 0;
  double seconds = 0;  // at the cluster's bandwidths
};

struct Strategy {
  int dp = 1, tp = 1, pp = 1, zero = 0;
  Recompute recompute = Recompute::kNone;
  int micro_batch = 1;
  int micro_batches = 1;  // per optimizer step and pipeline (gradient accumulation steps)
  bool sequence_parallel = false;
  double activation_bytes_per_layer = 0;
  MemoryBreakdown memory;
  CommBreakdown comm;
  double bubble = 0;     // (p-1)/(m+p-1), share of the iteration
  double compute_s = 0;  // forward + backward (+ recomputation) at device_tflops
  double step_s = 0;     // compute / (1 - bubble) + communication (not overlapped)
  bool fits = false;
  int rank = 0;  // 1-based among the fitting ones after ranking; 0 when it does not fit
};

// A combination that cannot run, named with why.
struct Rejected {
  int dp = 0, tp = 0, pp = 0;
  std::string what;  // "tp=3", "pp=48", "zero=1-3", "micro_batch=3"
  std::string reason;
};

enum class Bottleneck { kNone, kCompute, kCommunication, kMemory, kData };
const char* BottleneckName(Bottleneck b);

// What a measured run says (from a trace analysis).
struct Measured {
  Bottleneck bottleneck = Bottleneck::kNone;
  std::string source;  // the file or run directory
  // What it means, as the plan reports it: a warning "plan.<bottleneck>_bound" whose
  // evidence is the figures behind the class, whose fix is what the rule says to do (and how
  // the candidates are ranked), where the source. Empty when bottleneck is kNone.
  Finding finding;
  double data_share = 0, comm_share = 0, memory_share = 0, compute_share = 0;
};

struct Plan {
  PlanOptions options;
  double params = 0;
  std::vector<Strategy> strategies;  // every candidate; fitting ones ranked first
  std::vector<Rejected> rejected;
  int recommended = -1;  // index into strategies, -1 when nothing fits
  std::string reason;    // why the recommended one (or why none)
  Measured measured;
};

// Validates the model and cluster (InvalidArgument naming the flag) and evaluates every
// candidate. `measured` (bottleneck kNone when absent) changes the ranking as the rule says:
// communication-bound ranks by communication time, memory-bound by memory headroom.
absl::StatusOr<Plan> MakePlan(const PlanOptions& options, const Measured& measured = {});

// One candidate's figures (used by MakePlan; exposed for tests).
Strategy Evaluate(const PlanOptions& options, double params, int dp, int tp, int pp, int zero,
                  Recompute recompute, int micro_batch);

// The 1F1B / GPipe bubble as a share of the iteration: (p-1)/(m+p-1).
double BubbleFraction(int pp, int micro_batches);

// ---- Readers ----
// The model section of a trainscope train config (docs/formats.md "Trainer config"), plus its
// precision and micro_batch x grad_accum. `vocab` 0 in the config becomes 257 (the byte
// tokenizer's). InvalidArgument naming the file and key; NotFound when unreadable.
struct ConfigModel {
  ModelShape model;
  Precision precision = Precision::kFp32;
  int micro_batch = 0, grad_accum = 1;
};
absl::StatusOr<ConfigModel> ReadTrainConfig(Os* os, const std::string& path);

// The all_reduce busbw at the largest size of a `selftest comm --json` result (format
// trainscope.selftest.comm). InvalidArgument naming the file when it holds none.
absl::StatusOr<double> ReadSelftestBusBw(Os* os, const std::string& path);

// The link estimates of a topology (`nvidia-smi topo -m` / `npu-smi info -t topo` text, as
// `trainscope topo --from` reads it) for the devices of one node (cluster->devices /
// cluster->nodes): for every group size s >= 2 that divides them, the bottleneck of the
// slowest group when groups of s are placed on the fastest links (the ring's slowest link,
// GB/s per direction, which is what a ring all-reduce's busbw runs at) goes into
// intra_node_gbps_by_size, and the ring over all of the node's devices into intra_node_gbps.
// InvalidArgument naming the file (and line) when it does not parse, holds fewer devices than
// a node, or rates a needed link 0 (unknown class).
absl::Status ApplyTopology(Os* os, const std::string& path, Cluster* cluster);

// The bottleneck class from a trace analysis JSON (trainscope.trace.analysis, as `trace
// analyze --json` writes it). Shares are means over ranks of the per-step figures:
//   data          data_loading / step                 >= 0.30
//   communication exposed comm (comm_wait, or comm not overlapped) / step >= 0.25
//   memory        memory kernels (memcpy/memset) / kernel time >= 0.25
//   compute       otherwise.
// InvalidArgument when the document holds no step.
absl::StatusOr<Measured> ClassifyAnalysis(const nlohmann::json& analysis,
                                          const std::string& source);
// `path`: a trace analysis JSON file, or anything `trace analyze` reads (a run directory, trace
// files): analysed here first.
absl::StatusOr<Measured> ReadMeasured(Os* os, const std::string& path);

// ---- Reports ----
nlohmann::json PlanToJson(const Plan& plan);  // docs/formats.md "Plan JSON"
// The ranked table (top `max_rows` fitting ones; fits in 120 columns), the rejected
// combinations, the recommendation and the measured bottleneck.
std::string PlanToText(const Plan& plan, int max_rows = 15);
// The plan as core Findings, for callers that rank findings from several modules: the
// measured bottleneck (Measured::finding) when there is one, then either the recommendation
// (info "plan.recommended", evidence Plan::reason) or an error "plan.nothing_fits" (candidates,
// none fits) / "plan.no_candidate" (every combination impossible) whose title is Plan::reason.
std::vector<Finding> FindingsFrom(const Plan& plan);

}  // namespace trainscope::plan

#endif  // TRAINSCOPE_PLAN_PLAN_H_
