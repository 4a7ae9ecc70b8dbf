// Findings of the Ascend rules from details["ascend"] (ascend_rules.cc gathers the evidence).
// Thresholds and advice follow msprof-analyze's advisor; each rule names its source.
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "trace/ascend_rules.h"

namespace trainscope::trace::internal {
namespace {

std::string AscF1(double v) { return absl::StrFormat("%.1f", v); }
std::string AscPc(double pct) { return absl::StrFormat("%.1f%%", pct); }

void AscAdd(RankResult* r, Severity sev, const char* code, std::string what, std::string evidence,
            std::string fix) {
  Finding f{sev, code, std::move(what), std::move(evidence), std::move(fix)};
  f.rank = r->rank;
  r->findings.push_back(std::move(f));
}

bool AscHasFinding(const RankResult& r, const char* code) {
  for (const Finding& f : r.findings)
    if (f.id == code) return true;
  return false;
}

// AicpuChecker (advisor/analyzer/computation/aicpu): operators on the AI CPU with a task over
// 20 us; DOUBLE inputs get the advisor's double_suggestion (convert to float).
void AiCpu(const nlohmann::json& a, const std::string& who, RankResult* r) {
  if (!a.contains("ai_cpu") || a["ai_cpu"]["ops_over_threshold"].get<size_t>() == 0) return;
  const auto& c = a["ai_cpu"];
  std::vector<std::string> names, doubles, int64s;
  for (const auto& op : c["top"]) {
    const std::string n = op["name"].get<std::string>(), dt = op["input_dtypes"];
    if (names.size() < 3)
      names.push_back(absl::StrCat(n, " (", op["type"].get<std::string>(), ", ",
                                   op["count"].get<int64_t>(), "x, ",
                                   AscF1(op["total_us"].get<double>()), " us)"));
    if (dt.find("DOUBLE") != std::string::npos) doubles.push_back(n);
    if (dt.find("INT64") != std::string::npos) int64s.push_back(n);
  }
  std::string fix =
      "change the operators or dtypes that fall back to the AI CPU: see msprof-analyze's "
      "aicpu_operator_replacement_example (docs/zh); keep indices and masks on the AI Core "
      "(int32 instead of int64 where the op allows, torch_npu fused APIs for the pattern)";
  if (!doubles.empty())
    fix = absl::StrCat("convert float64 inputs to float32 (", absl::StrJoin(doubles, ", "),
                       "): double runs on the AI CPU; ", fix);
  else if (!int64s.empty())
    fix =
        absl::StrCat("try int32 for the int64 inputs of ", absl::StrJoin(int64s, ", "), "; ", fix);
  AscAdd(r, Severity::kWarning, "ai_cpu",
         absl::StrCat(who, ": ", c["ops_over_threshold"].get<size_t>(),
                      " operators run on the AI CPU (", AscPc(c["device_time_pct"].get<double>()),
                      " of device task time)"),
         absl::StrCat(c["tasks"].get<int64_t>(), " AI_CPU tasks, ",
                      AscF1(c["total_us"].get<double>()), " us; ", absl::StrJoin(names, ", "),
                      "; advisor rule: a task over 20 us (aicpu_checker _MIN_TASK_DURATION)"),
         fix);
}

// OpDispatchAnalyzer (advisor/analyzer/schedule/dispatch): >= 20 AscendCL@aclopCompileAndExecute
// (prof_common/constant.py MAX_OP_COMPILE_NUM).
// Below the advisor's count, compilation that takes 5% of the step time or more is reported as
// information (trainscope's threshold: the share is what the step loses).
void OpCompile(const nlohmann::json& a, const std::string& who, RankResult* r) {
  if (!a.contains("op_compile")) return;
  const auto& c = a["op_compile"];
  const bool many = c["count"].get<int64_t>() >= 20;
  if (!many && (c["count"].get<int64_t>() == 0 || c["step_pct"].get<double>() < 5)) return;
  AscAdd(r, many ? Severity::kWarning : Severity::kInfo, "op_compile",
         absl::StrCat(who, ": ", c["count"].get<int64_t>(),
                      " online operator compilations (aclopCompileAndExecute), ",
                      AscPc(c["step_pct"].get<double>()), " of the step time"),
         absl::StrCat(AscF1(c["total_us"].get<double>()),
                      " us in AscendCL@aclopCompile* calls; advisor rule: 20 or more "
                      "(MAX_OP_COMPILE_NUM)",
                      many ? "" : "; under it, but 5% of the step or more"),
         "turn off online compilation: torch_npu.npu.set_compile_mode(jit_compile=False) and "
         "torch_npu.npu.config.allow_internal_format = False at start-up; keep input shapes fixed "
         "(pad or bucket sequence lengths) so the binary operators are reused");
}

// DynamicShapeChecker (advisor/analyzer/computation/op_compile): OP State present and no static
// operator; and op types that see many distinct input shapes.
void DynamicShape(const nlohmann::json& a, const std::string& who, RankResult* r) {
  if (!a.contains("shapes")) return;
  const auto& s = a["shapes"];
  const int64_t st = s["op_state_static"], dy = s["op_state_dynamic"];
  const bool all_dynamic = dy > 0 && st == 0;
  const auto& many = s["op_types_with_many_shapes"];
  if (!all_dynamic && many.empty()) return;
  std::string ev = all_dynamic   ? absl::StrCat("all ", dy,
                                                " device tasks have OP State dynamic (advisor: no "
                                                  "static-shape operator)")
                   : st + dy > 0 ? absl::StrCat(st, " static, ", dy, " dynamic tasks")
                                 : std::string("no OP State column");
  if (!many.empty())
    absl::StrAppend(&ev, "; ", many.size(), " op types with many input shapes (",
                    many[0]["type"].get<std::string>(), ": ",
                    many[0]["distinct_shapes"].get<size_t>(), ")");
  AscAdd(
      r, Severity::kWarning, "dynamic_shape",
      absl::StrCat(who, ": dynamic-shape operators",
                   many.empty() ? "" : absl::StrCat(" (", many[0]["type"].get<std::string>(), ")")),
      ev,
      "torch_npu.npu.set_compile_mode(jit_compile=False) uses the precompiled binary operators "
      "for dynamic shapes; pad or bucket inputs to a few fixed shapes; HOST_CACHE_CAPACITY "
      "caches the operators of recurring shapes");
}

// PacketChecker (advisor/rules/en/packet.yaml): more than 20% of the ops with SDMA (RDMA)
// traffic move under 16 MB (1 MB).
void Packets(const nlohmann::json& a, const std::string& who, RankResult* r) {
  if (!a.contains("communication")) return;
  const auto& tr = a["communication"]["transports"];
  for (const char* name : {"SDMA", "RDMA"}) {
    if (!tr.contains(name)) continue;
    const auto& x = tr[name];
    if (x["small_ratio"].get<double>() <= 0.2) continue;
    const bool sdma = std::string(name) == "SDMA";
    AscAdd(r, Severity::kWarning, "small_packets",
           absl::StrCat(who, ": ", AscPc(100 * x["small_ratio"].get<double>()), " of ", name,
                        " communication ops move under ", sdma ? "16" : "1", " MB"),
           absl::StrCat(x["small_ops"].get<int64_t>(), " of ", x["ops"].get<int64_t>(), " ops, ",
                        AscF1(x["small_time_ms"].get<double>()), " ms; mean large-packet ratio ",
                        AscF1(100 * x["mean_large_packet_ratio"].get<double>()),
                        "%; advisor packet.yaml: > 20% under ", sdma ? "16" : "1", " MB"),
           "fewer, larger collectives: a larger batch or more gradient accumulation in data "
           "parallelism, ZeRO-3 -> ZeRO-2/1 if memory allows, fused optimizers "
           "(torch_npu.optim.NpuFusedAdamW) or bucketed gradients; HCCL_BUFFSIZE (MB, default 200) "
           "bounds how much one HCCL transfer moves");
  }
}

// Bandwidth: SDMA ops of 16 MB or more under 0.8 x 18 GB/s (advisor bandwidth_contention.yaml
// sdma_baseline 18, threshold 0.8); RDMA ops whose transit takes over 4000 ms in an op of at
// least 4000 ms (rdma_analysis.yaml min_retransmission_time: retransmission). The advisor takes
// the shortest elapse over the op's ranks; one rank's is its own (the cluster view applies the
// rule across ranks and replaces this finding: ascend_cluster_analysis.cc).
void Bandwidth(const nlohmann::json& a, const std::string& who, RankResult* r) {
  if (!a.contains("communication")) return;
  const auto& tr = a["communication"]["transports"];
  if (tr.contains("SDMA") && tr["SDMA"]["ops_under_baseline"].get<int64_t>() > 0) {
    const auto& x = tr["SDMA"];
    AscAdd(r, Severity::kWarning, "low_bandwidth",
           absl::StrCat(who, ": ", x["ops_under_baseline"].get<int64_t>(),
                        " SDMA communication ops run under 14.4 GB/s"),
           absl::StrCat("slowest ", x["min_bandwidth_op"].get<std::string>(), " at ",
                        AscF1(x["min_bandwidth_gbps"].get<double>()), " GB/s; SDMA overall ",
                        AscF1(x["bandwidth_gbps"].get<double>()),
                        " GB/s; advisor baseline 18 GB/s x 0.8 (bandwidth_contention.yaml), ops of "
                        "16 MB or more"),
           "communication that overlaps heavy compute (MatMul) loses SDMA bandwidth: compare a run "
           "without the overlap; check the HCCS links with npu-smi info -t topo; "
           "HCCL_OP_EXPANSION_MODE=AIV expands collectives on the vector cores for small and "
           "medium messages");
  }
  if (tr.contains("RDMA") && tr["RDMA"].contains("retransmission")) {
    const auto& x = tr["RDMA"]["retransmission"];
    AscAdd(
        r, Severity::kError, "rdma_retransmission",
        absl::StrCat(who, ": an RDMA transfer took ", AscF1(x["max_transit_ms"].get<double>()),
                     " ms: retransmission"),
        absl::StrCat(x["op"].get<std::string>(),
                     "; advisor rdma_analysis.yaml: a single transfer over 4000 ms in an op of at "
                     "least 4000 ms"),
        "check the RoCE network: switch PFC/ECN settings against HCCL_RDMA_TC/HCCL_RDMA_SL, "
        "link errors with hccn_tool -i <dev> -stat -g; HCCL_RDMA_TIMEOUT and HCCL_RDMA_RETRY_CNT "
        "set how long and how often a lost packet is retried");
  }
}

// SynchronizeStreamChecker (advisor/rules/en/synchronize.yaml): co-occurrence ratio of
// aclrtSynchronizeStream right after Node@launch over 0.5.
void SyncStream(const nlohmann::json& a, const std::string& who, RankResult* r) {
  if (!a.contains("synchronize_stream")) return;
  const auto& s = a["synchronize_stream"];
  if (s["co_occurrence_ratio"].get<double>() <= 0.5) return;
  AscAdd(
      r, Severity::kWarning, "synchronize_stream",
      absl::StrCat(who, ": ", s["synchronize_stream"].get<int64_t>(),
                   " stream synchronisations follow operator launches (co-occurrence ",
                   AscF1(100 * s["co_occurrence_ratio"].get<double>()), "%)"),
      absl::StrCat(s["co_occurrence"].get<int64_t>(),
                   " AscendCL@aclrtSynchronizeStream right after Node@launch, of ",
                   s["node_launch"].get<int64_t>(), " launches; advisor synchronize.yaml: > 0.5"),
      "unset ASCEND_LAUNCH_BLOCKING (it makes every launch synchronous); avoid .item()/.cpu() "
      "and host reads of NPU tensors inside the step");
}

// DataloaderChecker (advisor/rules/en/dataloader.yaml): a dataloader event of 10 000 us or more.
void Dataloader(const nlohmann::json& a, const std::string& who, RankResult* r) {
  if (!a.contains("dataloader")) return;
  const auto& d = a["dataloader"];
  if (d["events_over_threshold"].get<int64_t>() == 0 || AscHasFinding(*r, "slow_dataloader"))
    return;
  AscAdd(r, Severity::kWarning, "slow_dataloader",
         absl::StrCat(who, ": a dataloader call takes ", AscF1(d["max_us"].get<double>() / 1e3),
                      " ms"),
         absl::StrCat(d["events_over_threshold"].get<int64_t>(),
                      " dataloader events of 10 ms or more (advisor dataloader.yaml)"),
         "check the disk I/O of the data directory (on ModelArts move the data to /cache), CPU "
         "binding that starves the workers (taskset, CPU_AFFINITY_CONF), avoid tar/zip inputs, "
         "DataLoader(pin_memory=True) and more num_workers");
}

// AICoreFreqChecker (advisor config.ini frequency_threshold 0.05): samples more than 5% under
// the chip's rated AI Core frequency (the device info's aic_frequency), else under the highest
// one observed.
void Frequency(const nlohmann::json& a, const std::string& who, RankResult* r) {
  if (!a.contains("aicore_freq") || a["aicore_freq"]["samples_below"].get<int64_t>() == 0) return;
  const auto& f = a["aicore_freq"];
  const bool rated = f.contains("rated_mhz");
  AscAdd(
      r, Severity::kWarning, "aicore_frequency",
      absl::StrCat(who, ": the AI Core frequency drops to ", f["min_mhz"].get<int64_t>(), " MHz (",
                   rated ? absl::StrCat("rated ", AscF1(f["rated_mhz"].get<double>()))
                         : absl::StrCat("max ", f["max_mhz"].get<int64_t>()),
                   " MHz)"),
      absl::StrCat(f["samples_below"].get<int64_t>(), " of ", f["samples"].get<size_t>(),
                   " samples more than 5% under the ",
                   rated ? "rated frequency (device info aic_frequency)" : "maximum",
                   " (advisor frequency_threshold)"),
      "the NPU throttles: check its temperature and power with npu-smi info -t power -i <id> "
      "and npu-smi info -t temp, the cooling and power capping of the node");
}

}  // namespace

void AscendFindings(const AnalyzeOptions& opt, RankResult* r) {
  (void)opt;
  if (r->device != "npu" || !r->details.contains("ascend")) return;
  const nlohmann::json& a = r->details["ascend"];
  const std::string who = absl::StrCat("rank ", r->rank);
  AiCpu(a, who, r);
  OpCompile(a, who, r);
  DynamicShape(a, who, r);
  Packets(a, who, r);
  Bandwidth(a, who, r);
  SyncStream(a, who, r);
  Dataloader(a, who, r);
  Frequency(a, who, r);
  if (a.contains("files") && !a["files"]["errors"].empty()) {
    const auto& e = a["files"]["errors"];
    AscAdd(
        r, Severity::kWarning, "files_not_read",
        absl::StrCat(who, ": ", e.size(), " torch_npu files or tables not read; the rest analysed"),
        absl::StrCat(e[0]["file"].get<std::string>(), ": ", e[0]["error"].get<std::string>()),
        "re-export the profiling data (torch_npu.profiler.profile(..., on_trace_ready="
        "torch_npu.profiler.tensorboard_trace_handler(dir)), or "
        "torch_npu.profiler.profiler.analyse(dir)) with the torch_npu that collected it");
  }
}

}  // namespace trainscope::trace::internal
