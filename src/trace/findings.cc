// Findings: what is wrong, the evidence, what to do. Per rank from its analysis, and across
// ranks (stragglers). Rules and thresholds are in docs/metrics.md "Trace breakdown".
#include <algorithm>
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "trace/analysis_internal.h"
#include "trace/ascend_rules.h"

namespace trainscope::trace::internal {
namespace {

std::string MsText(double us) { return absl::StrFormat("%.1f ms", us / 1e3); }
std::string Pc(double pct) { return absl::StrFormat("%.0f%%", pct); }
// A number for a sentence: no exponent, at most one decimal.
std::string N(double v) {
  return std::fabs(v - std::round(v)) < 0.05 ? absl::StrFormat("%.0f", v)
                                             : absl::StrFormat("%.1f", v);
}

// Why a step's gap is there: the largest host component that is not compute.
struct GapCause {
  std::string key;
  double us = 0;
};
GapCause DominantGap(const RankResult& r) {
  GapCause best;
  for (const char* k : {"data_loading", "comm_wait", "communication", "host_idle", "other", "h2d",
                        "free", "preparing", "bubble"}) {
    double v = r.MeanHostUs(k);
    if (v > best.us) best = {k, v};
  }
  return best;
}

// Advice that names the trace's own device: CUDA graphs mean nothing to a CPU-only run, and an
// Ascend run's host overhead is the task queue and aclop compilation, not CUDA launches.
std::string HostGapFix(const std::string& device) {
  if (device == "cpu")
    return "host-side gaps (Python, dispatch, waits) on a CPU-only run: avoid .item()/print in "
           "the loop, torch.compile to cut Python and dispatch overhead, match "
           "torch.set_num_threads/OMP_NUM_THREADS to the cores of this process, bind it to its "
           "NUMA node";
  if (device == "npu")
    return "host-side gaps (Python, dispatch, synchronisation): avoid .item()/.cpu() in the loop, "
           "enable the task queue (TASK_QUEUE_ENABLE=2), avoid aclop online compilation "
           "(torch_npu.npu.set_compile_mode(jit_compile=False)), bind cores (CPU_AFFINITY_CONF=1)";
  return "host-side gaps (Python, dispatch, synchronisation): avoid .item()/.cpu() in the loop, "
         "use CUDA graphs or torch.compile, bind the process to its NUMA node";
}

std::string FixFor(const std::string& cause, const std::string& device) {
  if (cause == "data_loading")
    return "speed up the input pipeline: DataLoader(num_workers>0, pin_memory=True, "
           "persistent_workers=True, prefetch_factor), pre-tokenise/pack the data (trainscope "
           "data pack), check that rank's disk and CPU binding";
  if (cause == "comm_wait" || cause == "communication")
    return "the rank waits in collectives: find the late rank (stragglers below); overlap "
           "communication with backward (DDP bucket_cap_mb, gradient_as_bucket_view)";
  if (cause == "host_idle" || cause == "other" || cause == "preparing") return HostGapFix(device);
  if (cause == "h2d")
    return "use pinned memory and non_blocking=True copies, prefetch the next batch";
  if (cause == "free" || cause == "bubble")
    return device == "npu" ? "the device idles between tasks: reduce host overhead "
                             "(TASK_QUEUE_ENABLE=2, torch_npu.npu.set_compile_mode("
                             "jit_compile=False)), balance pipeline stages"
                           : "the device idles between tasks: reduce host overhead, balance "
                             "pipeline stages";
  if (cause == "forward" || cause == "backward" || cause == "optimizer" || cause == "compute")
    return "this rank computes more: check for uneven batch shapes or sequence lengths across "
           "ranks, a throttled or slower device, or other processes on that host";
  return "compare this rank's host timeline with the others";
}

std::string FusionFix(const std::string& pattern, const std::string& device) {
  if (pattern == "optimizer") {
    if (device == "npu")
      return "use the fused optimizer kernels: torch_npu.optim.NpuFusedAdamW (or foreach=True), "
             "not one small operator per parameter";
    if (device == "cpu")
      return "use the optimizer's fused or multi-tensor path: AdamW(..., fused=True) (CPU "
             "kernels since torch 2.4) or foreach=True, not one small operator per parameter";
    return "use the optimizer's fused or multi-tensor path: AdamW(..., fused=True) or "
           "foreach=True, not one small operator per parameter";
  }
  if (device == "npu")
    return "use a torch_npu fused API (npu_rms_norm, npu_fusion_attention, fused bias-activation)";
  return "use a fused kernel (fused LayerNorm/bias-activation, torch.compile)";
}

std::string ShapeChurnWhy(const std::string& device) {
  return device == "npu"    ? "dynamic shapes compile operators online on the NPU"
         : device == "cuda" ? "dynamic shapes recompile graphs (torch.compile, CUDA graphs)"
                            : "dynamic shapes recompile graphs (torch.compile)";
}

// Advice for the trace's device: tiny kernels, launch-bound steps, shape churn, low overlap.
std::string DeviceFix(const std::string& code, const std::string& device) {
  const bool npu = device == "npu";
  if (code == "shape_churn")
    return npu ? "pad or bucket to fixed shapes (trainscope data pack); "
                 "torch_npu.npu.set_compile_mode(jit_compile=False)"
               : "pad or bucket to fixed shapes (trainscope data pack); "
                 "torch._dynamo.mark_dynamic for dims that must vary";
  if (code == "low_overlap")
    return npu ? "overlap gradients' all-reduce with backward (DDP buckets, FSDP prefetch); "
                 "HCCL runs on its own streams: check that no host sync "
                 "(aclrtSynchronizeStream) serialises them"
           : device == "cuda"
               ? "overlap gradients' all-reduce with backward (DDP buckets, FSDP prefetch), "
                 "keep NCCL on its own streams"
               : "overlap gradients' all-reduce with backward (DDP buckets, FSDP prefetch)";
  if (code == "tiny_kernels")
    return device == "npu"
               ? "fuse small operators (torch_npu fused APIs such as npu_rms_norm, fused "
                 "optimizers), enable the task queue (TASK_QUEUE_ENABLE=2), raise the batch size"
               : "fuse small operators (torch.compile, fused optimizers, fused "
                 "LayerNorm/activation), capture steps with CUDA graphs, raise the batch size";
  return device == "npu" ? "enable the task queue (TASK_QUEUE_ENABLE=2) and core binding "
                           "(CPU_AFFINITY_CONF=1); fewer, larger operators"
                         : "CUDA graphs or torch.compile(mode=\"reduce-overhead\"); fewer, "
                           "larger kernels";
}

std::string FusionEvidence(const nlohmann::json& f) {
  std::string e = absl::StrCat(N(f["total_us"].get<double>()), " us in total");
  if (f.contains("optimizer"))
    absl::StrAppend(&e, ", inside ", f["optimizer"].get<std::string>(),
                    ".step: the optimizer's per-parameter loop");
  return e;
}

void Add(RankResult* r, Severity sev, const char* code, std::string what, std::string evidence,
         std::string fix) {
  Finding f{sev, code, std::move(what), std::move(evidence), std::move(fix)};
  f.rank = r->rank;
  r->findings.push_back(std::move(f));
}

// Where the step time goes: iteration gap, data loading, device idle, overlap.
void TimeFindings(const AnalyzeOptions& opt, const std::string& who, RankResult* r) {
  // Iteration gap.
  int flagged = 0;
  double gap_sum = 0, step_sum = 0;
  for (const auto& s : r->steps) {
    flagged += s.gap_flagged;
    gap_sum += s.gap_us;
    step_sum += s.step_us;
  }
  if (flagged > 0) {
    GapCause c = DominantGap(*r);
    double pct = step_sum > 0 ? 100.0 * gap_sum / step_sum : 0;
    std::string basis = r->basis == "device" ? "not covered by device work"
                                             : "not spent computing (forward/backward/optimizer)";
    Add(r, Severity::kWarning, "iteration_gap",
        absl::StrCat(who, ": iteration gap ", Pc(pct), " of step time (", flagged, " of ",
                     r->steps.size(), " steps above ", Pc(opt.iteration_gap_threshold_pct),
                     "): fix the pipeline before any operator"),
        absl::StrCat("mean gap ", MsText(gap_sum / r->steps.size()), " per ",
                     MsText(step_sum / r->steps.size()), " step, ", basis,
                     c.key.empty()
                         ? ""
                         : absl::StrCat("; largest part: ", c.key, " ", MsText(c.us), " per step")),
        FixFor(c.key, r->device));
  }
  // Slow data loader (msprof-analyze: > 10 ms per step), or a large share of the step.
  double data = r->MeanHostUs("data_loading");
  double step = r->MeanStepUs();
  if (data > opt.dataloader_ms_per_step * 1e3 || (step > 0 && data > 0.1 * step)) {
    Add(r, Severity::kWarning, "slow_dataloader",
        absl::StrCat(who, ": data loading takes ", MsText(data), " per step (",
                     Pc(step > 0 ? 100 * data / step : 0), " of the step)"),
        absl::StrCat("DataLoader/data_wait events on the main thread, mean ", MsText(data),
                     " per step; threshold ", opt.dataloader_ms_per_step, " ms or 10%"),
        FixFor("data_loading", r->device));
  }
  // Device idle and overlap (device basis).
  if (r->basis == "device" || r->basis == "ascend") {
    if (r->idle_pct > 20) {
      Add(r, Severity::kWarning, "device_idle",
          absl::StrCat(who, ": the device is idle ", Pc(r->idle_pct), " of the kernel time"),
          absl::StrCat("idle ", MsText(r->idle_us), " of ", MsText(r->kernel_time_us)),
          FixFor("host_idle", r->device));
    }
  }
  if (r->comm_comp_overlap_pct && *r->comm_comp_overlap_pct < 50 && r->non_compute_pct > 10) {
    Add(r, Severity::kWarning, "low_overlap",
        absl::StrCat(who, ": only ", Pc(*r->comm_comp_overlap_pct),
                     " of communication overlaps computation"),
        absl::StrCat("non-compute time ", Pc(r->non_compute_pct), " of the ", r->basis, " time"),
        DeviceFix("low_overlap", r->device));
  }
}

// Kernel-level findings: fragmentation, launch overhead, shape churn.
void KernelFindings(const std::string& who, RankResult* r) {
  const nlohmann::json& d = r->details;
  // Fragmentation and launch overhead.
  if (d.contains("fragmentation")) {
    const auto& f = d["fragmentation"];
    if (f.contains("short_kernels_pct") && f["short_kernels_pct"].get<double>() > 50 &&
        f["kernels_per_step"].get<double>() > 100) {
      Add(r, Severity::kWarning, "tiny_kernels",
          absl::StrCat(who, ": ", N(f["short_kernels_pct"].get<double>()),
                       "% of kernels run under ", N(f["short_threshold_us"].get<double>()), " us"),
          absl::StrCat(N(f["kernels_per_step"].get<double>()), " kernels per step"),
          DeviceFix("tiny_kernels", r->device));
    }
    if (f.contains("launch") && f["launch"]["kernels_shorter_than_launch_pct"].get<double>() > 30) {
      Add(r, Severity::kWarning, "launch_bound",
          absl::StrCat(who, ": launch-bound, ",
                       N(f["launch"]["kernels_shorter_than_launch_pct"].get<double>()),
                       "% of kernels are shorter than their CPU launch"),
          absl::StrCat("mean CPU launch ", N(f["launch"]["cpu_launch_mean_us"].get<double>()),
                       " us vs kernel ", N(f["launch"]["kernel_mean_us"].get<double>()), " us"),
          DeviceFix("launch_bound", r->device));
    }
  }
  // Shape churn.
  if (d.contains("shape_churn") && !d["shape_churn"].empty()) {
    const auto& top = d["shape_churn"][0];
    Add(r, Severity::kWarning, "shape_churn",
        absl::StrCat(who, ": ", d["shape_churn"].size(), " operators see many input shapes (",
                     top["name"].get<std::string>(), ": ", top["distinct_shapes"].get<size_t>(),
                     " shapes)"),
        ShapeChurnWhy(r->device), DeviceFix("shape_churn", r->device));
  }
}

// Operators that should not be there: float64, CPU fallbacks, syncs, gathers, fusion.
void SuspectFindings(const std::string& who, RankResult* r) {
  const nlohmann::json& d = r->details;
  const auto& sus = d["suspects"];
  if (!sus["float64"].empty()) {
    Add(r, Severity::kWarning, "float64",
        absl::StrCat(who, ": float64 operators (", sus["float64"][0]["name"].get<std::string>(),
                     ", ...)"),
        absl::StrCat(sus["float64"].size(), " operator names with double inputs"),
        "keep tensors in float32/bf16 (torch.tensor(..., dtype=torch.float32), avoid numpy "
        "float64 inputs)");
  }
  if (!sus["cpu_ops_on_device_run"].empty()) {
    Add(r, Severity::kWarning, "cpu_fallback",
        absl::StrCat(who, ": compute operators ran on the CPU while the model uses a device (",
                     sus["cpu_ops_on_device_run"][0]["name"].get<std::string>(), ")"),
        "heavy aten operators with no kernel launched", "move those tensors to the device");
  }
  // AI CPU tasks: an Ascend rule (ascend_rules_findings.cc) with the ops, share and dtypes.
  if (sus["host_device_syncs_per_step"].get<double>() >= 1) {
    Add(r, Severity::kInfo, "syncs",
        absl::StrCat(who, ": ", N(sus["host_device_syncs_per_step"].get<double>()),
                     " host-device synchronisations per step (",
                     sus["host_device_syncs"][0]["name"].get<std::string>(), ", ...)"),
        "each one stalls the host until the device drains",
        "avoid .item()/.cpu()/print of device tensors inside the step; log every N steps");
  }
  if (sus["gather_scatter_pct"].get<double>() > 10) {
    Add(r, Severity::kInfo, "gather_scatter",
        absl::StrCat(who, ": gather/scatter/index operators take ",
                     N(sus["gather_scatter_pct"].get<double>()), "% of the time"),
        "gather, scatter, index_select, index_put, embedding backward",
        "use fused embedding/MoE dispatch kernels, sort indices, avoid index_put with "
        "accumulate in the hot loop");
  }
  if (d.contains("fusion_candidates") && !d["fusion_candidates"].empty()) {
    const auto& f = d["fusion_candidates"][0];
    Add(r, Severity::kInfo, "fusion",
        absl::StrCat(who, ": fusion candidate ", f["sequence"].get<std::string>(), " (",
                     f["count"].get<int64_t>(), " times)"),
        FusionEvidence(f), FusionFix(f.value("pattern", ""), r->device));
  }
}

// A trace that is cut, malformed or has invalid records.
void InputFindings(const std::string& who, RankResult* r) {
  const ParseStats& p = r->stats;
  if (p.truncated || p.malformed > 0) {
    Add(r, Severity::kWarning, "bad_input",
        absl::StrCat(who, ": the trace is ", p.truncated ? "truncated" : "partly malformed",
                     "; analysed what is there"),
        absl::StrCat(p.malformed, " malformed events",
                     p.truncated ? absl::StrCat(", cut at byte ", p.truncated_at_byte) : ""),
        "the profiler probably crashed or was killed while writing; re-profile with a shorter "
        "schedule (active steps) to get complete steps");
  }
  // Records whose fields are of the wrong type or out of range: not what a profiler writes.
  int64_t invalid = p.bad_ts + p.bad_dur + p.bad_pid_tid + p.bad_category + p.bad_args +
                    p.bad_values + p.negative_or_huge_dur;
  if (invalid > 0) {
    Add(r, Severity::kWarning, "bad_records",
        absl::StrCat(who, ": ", invalid, invalid == 1 ? " record has" : " records have",
                     " fields of the wrong type or out of range; left out, the rest analysed"),
        DescribeBadRecords(p),
        "the trace was edited or written by another tool: regenerate it with the profiler, or "
        "fix the fields named in the warnings (byte offsets)");
  }
}

// Kernels that start before their launch call ends.
void LaunchDelayFinding(const std::string& who, RankResult* r) {
  const ParseStats& p = r->stats;
  if (p.negative_launch_delay > 0) {
    Add(r, Severity::kInfo, "negative_launch_delay",
        absl::StrCat(who, ": ", p.negative_launch_delay,
                     p.negative_launch_delay == 1 ? " kernel starts before its launch call"
                                                  : " kernels start before their launch call",
                     " ends; left out of the launch delay statistics"),
        absl::StrCat(p.negative_launch_delay,
                     " kernel/launch pairs (by correlation id) with a "
                     "negative launch delay"),
        "the host and device clocks disagree (CUPTI clock skew, seen with tightly packed "
        "launches on an idle device) or the correlation ids pair the wrong events: read this "
        "trace's launch delays with care and check the pairs on the timeline in Perfetto");
  }
}

}  // namespace

void RankFindings(const AnalyzeOptions& opt, RankResult* r) {
  const std::string who = absl::StrCat("rank ", r->rank);
  TimeFindings(opt, who, r);
  KernelFindings(who, r);
  SuspectFindings(who, r);
  InputFindings(who, r);
  AscendFindings(opt, r);
  LaunchDelayFinding(who, r);
}

// Stragglers (msprof-analyze's rule): a slow rank arrives late at every collective, so it is
// the one that waits least. Per step, the rank with the smallest collective time is voted
// when (median - min) exceeds straggler_spread of the mean step time; a rank with votes in at
// least half of the compared steps is a straggler. Its cause is the component of its step
// where it exceeds the other ranks' median the most.
void CrossRankFindings(const AnalyzeOptions& opt, Report* rep) {
  auto& ranks = rep->ranks;
  if (ranks.size() < 2) return;
  size_t n_steps = ranks[0].steps.size();
  for (const auto& r : ranks) n_steps = std::min(n_steps, r.steps.size());
  if (n_steps == 0) return;
  std::vector<int> votes(ranks.size(), 0);
  for (size_t s = 0; s < n_steps; ++s) {
    std::vector<double> comm;
    double step_mean = 0;
    for (const auto& r : ranks) {
      comm.push_back(r.steps[s].comm_us);
      step_mean += r.steps[s].step_us / ranks.size();
    }
    std::vector<double> sorted = comm;
    std::sort(sorted.begin(), sorted.end());
    double median = sorted.size() % 2
                        ? sorted[sorted.size() / 2]
                        : (sorted[sorted.size() / 2 - 1] + sorted[sorted.size() / 2]) / 2;
    if (sorted.size() == 2) median = sorted[1];  // two ranks: compare with the other one
    size_t min_i = std::min_element(comm.begin(), comm.end()) - comm.begin();
    if (step_mean > 0 && (median - comm[min_i]) > opt.straggler_spread * step_mean) ++votes[min_i];
  }
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (votes[i] == 0 || votes[i] * 2 < static_cast<int>(n_steps)) continue;
    Straggler st;
    st.rank = ranks[i].rank;
    st.votes = votes[i];
    st.steps_compared = static_cast<int>(n_steps);
    st.comm_us = ranks[i].MeanCommUs();
    st.step_us = ranks[i].MeanStepUs();
    std::vector<double> others_comm;
    for (size_t j = 0; j < ranks.size(); ++j)
      if (j != i) others_comm.push_back(ranks[j].MeanCommUs());
    std::sort(others_comm.begin(), others_comm.end());
    st.others_comm_us = others_comm[others_comm.size() / 2];
    // Cause: largest excess over the others' median among the step's components.
    double best = 0;
    for (const char* k : {"data_loading", "forward", "backward", "optimizer", "h2d", "host_idle",
                          "other", "computing", "free", "preparing"}) {
      std::vector<double> o;
      for (size_t j = 0; j < ranks.size(); ++j)
        if (j != i) o.push_back(ranks[j].MeanHostUs(k));
      std::sort(o.begin(), o.end());
      double excess = ranks[i].MeanHostUs(k) - o[o.size() / 2];
      if (excess > best) {
        best = excess;
        st.cause = k;
        st.cause_us = ranks[i].MeanHostUs(k);
        st.others_cause_us = o[o.size() / 2];
      }
    }
    if (st.cause == "computing") st.cause = "compute";
    rep->stragglers.push_back(st);
    std::string cause_text = st.cause.empty() ? "unknown (no host component stands out)" : st.cause;
    if (st.cause == "data_loading") cause_text = "data loading";
    std::string evidence = absl::StrCat(
        "waits ", MsText(st.comm_us), " per step in collectives vs ", MsText(st.others_comm_us),
        " on the other ranks (least in ", st.votes, " of ", st.steps_compared, " steps)");
    if (!st.cause.empty()) {
      absl::StrAppend(&evidence, "; its ", st.cause, " takes ", MsText(st.cause_us),
                      " per step vs ", MsText(st.others_cause_us), " on the others");
    }
    Finding f{Severity::kError, "straggler",
              absl::StrCat("rank ", st.rank,
                           " is the straggler: the other ranks wait for it; cause: ", cause_text),
              evidence, FixFor(st.cause, ranks[i].device)};
    f.rank = st.rank;
    rep->findings.push_back(std::move(f));
  }
  // Step-time spread (advisor: max - min within 5% of the mean).
  double mx = 0, mn = 1e300, mean = 0;
  for (const auto& r : ranks) {
    double s = r.MeanStepUs();
    mx = std::max(mx, s);
    mn = std::min(mn, s);
    mean += s / ranks.size();
  }
  if (mean > 0 && (mx - mn) / mean > opt.straggler_spread) {
    rep->findings.push_back({Severity::kWarning, "step_time_spread",
                             absl::StrCat("step times differ across ranks by ",
                                          Pc(100 * (mx - mn) / mean), " of the mean"),
                             absl::StrCat("min ", MsText(mn), ", max ", MsText(mx), " per step"),
                             "look at the slowest rank's breakdown side by side"});
  }
}

}  // namespace trainscope::trace::internal
