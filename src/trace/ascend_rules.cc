// The evidence of the Ascend rules (ascend_rules.h), gathered once per rank into
// details["ascend"]; the findings are made from it in ascend_rules_findings.cc, so that a rank
// re-analysed from its details (several windows) gets the same findings.
#include "trace/ascend_rules.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "trace/ascend_rank.h"

namespace trainscope::trace::internal {
namespace {

double AscPct(double part, double whole) { return whole > 0 ? 100.0 * part / whole : 0.0; }

std::string AscLower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// The Overlap Analysis lanes of trace_view.json (process "Overlap Analysis", threads Computing,
// Communication, Communication(Not Overlapped), Free) summed over the trace, us; or the
// OVERLAP_ANALYSIS table of the .db (already summed by the reader).
bool OverlapLanes(const RankTrace& t, const AscendRankData* d, double out[4]) {
  if (d && d->ov_computing_us >= 0) {
    out[0] = d->ov_computing_us;
    out[1] = d->ov_comm_us;
    out[2] = d->ov_comm_not_overlapped_us;
    out[3] = d->ov_free_us;
    return true;
  }
  std::map<std::pair<uint32_t, uint32_t>, int> lane;  // (pid, tid) -> 0..3
  for (const auto& [pid, name] : t.process_names) {
    if (name != "Overlap Analysis") continue;
    for (const auto& [key, tname] : t.thread_names) {
      if (key.first != pid) continue;
      int k = tname == "Computing"                       ? 0
              : tname == "Communication"                 ? 1
              : tname == "Communication(Not Overlapped)" ? 2
              : tname == "Free"                          ? 3
                                                         : -1;
      if (k >= 0) lane[key] = k;
    }
  }
  if (lane.empty()) return false;
  int64_t ns[4] = {0, 0, 0, 0};
  for (const Event& e : t.events) {
    auto it = lane.find({e.pid, e.tid});
    if (it != lane.end()) ns[it->second] += e.dur_ns;
  }
  for (int k = 0; k < 4; ++k) out[k] = ns[k] / 1e3;
  return true;
}

// Host API events by name: online compilation (AscendCL@aclopCompileAndExecute and the other
// aclopCompile* calls; advisor OpCompileCollector) and the advisor's stream-sync co-occurrence
// (SynchronizeStreamChecker: an AscendCL@aclrtSynchronizeStream right after a Node@launch, per
// Node@launch), and dataloader events (DataloaderCollector: "dataloader" in the name).
void HostApiEvidence(const RankTrace& t, const AnalyzeOptions& opt, nlohmann::json* a) {
  enum Kind : uint8_t { kNone, kCompile, kSync, kLaunch, kData };
  std::vector<uint8_t> kind(t.strings.size(), 0);
  std::vector<bool> seen(t.strings.size(), false);
  for (const Event& e : t.events) {
    if (seen[e.name]) continue;
    seen[e.name] = true;
    const std::string& n = t.strings.Get(e.name);
    if (absl::StrContains(n, "aclopCompile"))
      kind[e.name] = kCompile;
    else if (absl::StartsWith(n, "AscendCL@aclrtSynchronizeStream"))
      kind[e.name] = kSync;
    else if (absl::StartsWith(n, "Node@launch"))
      kind[e.name] = kLaunch;
    else if (absl::StrContains(AscLower(n), "dataloader"))
      kind[e.name] = kData;
  }
  int64_t compiles = 0, syncs = 0, launches = 0, co = 0, data_events = 0, data_slow = 0;
  double compile_us = 0, data_max_us = 0;
  std::vector<std::pair<int64_t, uint8_t>> order;
  for (const Event& e : t.events) {
    if (e.flags & kFlagDevice) continue;
    switch (kind[e.name]) {
      case kCompile:
        ++compiles;
        compile_us += e.dur_ns / 1e3;
        break;
      case kSync:
      case kLaunch:
        order.push_back({e.ts_ns, kind[e.name]});
        break;
      case kData:
        ++data_events;
        data_max_us = std::max(data_max_us, e.dur_ns / 1e3);
        if (e.dur_ns / 1e3 >= opt.dataloader_ms_per_step * 1e3) ++data_slow;
        break;
      default:
        break;
    }
  }
  std::stable_sort(order.begin(), order.end(),
                   [](const auto& x, const auto& y) { return x.first < y.first; });
  for (size_t i = 0; i < order.size(); ++i) {
    if (order[i].second == kLaunch) ++launches;
    if (order[i].second == kSync) {
      ++syncs;
      if (i > 0 && order[i - 1].second == kLaunch) ++co;
    }
  }
  (*a)["op_compile"] = {{"count", compiles}, {"total_us", compile_us}};
  (*a)["synchronize_stream"] = {{"synchronize_stream", syncs},
                                {"node_launch", launches},
                                {"co_occurrence", co},
                                {"co_occurrence_ratio", launches > 0 ? 1.0 * co / launches : 0.0}};
  (*a)["dataloader"] = {
      {"events", data_events}, {"max_us", data_max_us}, {"events_over_threshold", data_slow}};
}

// AI Core frequency samples against the chip's rated frequency (advisor AICoreFreqChecker:
// aic_frequency of the device info), else against the highest sample; a sample is low when it
// is more than 5% under (config.ini frequency_threshold 0.05). "rated_mhz" only when given.
nlohmann::json FrequencyEvidence(const AscendRankData& d) {
  const std::vector<int64_t>& f = d.aicore_freq_mhz;
  const int64_t mx = *std::max_element(f.begin(), f.end());
  const int64_t mn = *std::min_element(f.begin(), f.end());
  const double ref = d.aic_rated_mhz > 0 ? d.aic_rated_mhz : static_cast<double>(mx);
  int64_t below = 0;
  for (int64_t x : f) below += x < ref * (1 - 0.05);
  nlohmann::json j = {
      {"samples", f.size()}, {"max_mhz", mx}, {"min_mhz", mn}, {"samples_below", below}};
  if (d.aic_rated_mhz > 0) j["rated_mhz"] = d.aic_rated_mhz;
  return j;
}

// Communication ops: totals, per transport, and the advisor's packet statistic (PacketChecker:
// an op with SDMA (RDMA) traffic is small when its transit size is under 16 MB (1 MB)).
nlohmann::json CommEvidence(const AscendRankData& d) {
  nlohmann::json c = {{"ops", d.comm_ops.size()}};
  double elapse = 0, transit = 0, wait = 0, sync = 0, idle = 0, max_wait_ratio = 0;
  struct Tr {
    int64_t ops = 0, small = 0;
    double size = 0, time = 0, small_time = 0, lpr = 0, min_bw = -1;
    std::string min_bw_op;
    int64_t under_baseline = 0;
    double max_time = 0;
    std::string max_time_op;
    // RDMA ops that may have retransmitted (rdma_analysis.yaml min_retransmission_time 4000 ms):
    // transit over 4000 ms in an op that itself took at least 4000 ms.
    int64_t retrans = 0;
    double retrans_max = 0;
    std::string retrans_op;
  };
  std::map<std::string, Tr> tr;
  for (const AscendCommOp& op : d.comm_ops) {
    elapse += op.elapse_ms;
    transit += op.transit_ms;
    wait += op.wait_ms;
    sync += op.sync_ms;
    idle += op.idle_ms;
    max_wait_ratio = std::max(max_wait_ratio, op.wait_ratio);
    for (const AscendTransport& x : op.transports) {
      if (x.size_mb <= 0) continue;
      Tr& s = tr[x.transport];
      ++s.ops;
      s.size += x.size_mb;
      s.time += x.time_ms;
      s.lpr += x.large_packet_ratio;
      const double small_mb = x.transport == "RDMA" ? 1 : 16;  // packet.yaml min_rdma/sdma_size
      if (x.size_mb < small_mb) {
        ++s.small;
        s.small_time += x.time_ms;
      } else if (x.transport == "SDMA" && x.bandwidth_gbps > 0 &&
                 x.bandwidth_gbps < 0.8 * 18) {  // bandwidth_contention.yaml: 0.8 x 18 GB/s
        ++s.under_baseline;
        if (s.min_bw < 0 || x.bandwidth_gbps < s.min_bw) {
          s.min_bw = x.bandwidth_gbps;
          s.min_bw_op = op.name;
        }
      }
      if (x.time_ms > s.max_time) {
        s.max_time = x.time_ms;
        s.max_time_op = op.name;
      }
      if (x.transport == "RDMA" && x.time_ms > 4000 && op.elapse_ms >= 4000) {
        ++s.retrans;
        if (x.time_ms > s.retrans_max) {
          s.retrans_max = x.time_ms;
          s.retrans_op = op.name;
        }
      }
    }
  }
  c["elapse_ms"] = elapse;
  c["transit_ms"] = transit;
  c["wait_ms"] = wait;
  c["synchronization_ms"] = sync;
  c["idle_ms"] = idle;
  c["wait_ratio"] = wait + transit > 0 ? wait / (wait + transit) : 0.0;
  c["max_op_wait_ratio"] = max_wait_ratio;
  nlohmann::json per = nlohmann::json::object();
  for (const auto& [name, s] : tr) {
    per[name] = {{"ops", s.ops},
                 {"size_mb", s.size},
                 {"time_ms", s.time},
                 {"bandwidth_gbps", s.time > 0 ? s.size / s.time : 0.0},
                 {"mean_large_packet_ratio", s.ops > 0 ? s.lpr / s.ops : 0.0},
                 {"small_ops", s.small},
                 {"small_ratio", s.ops > 0 ? 1.0 * s.small / s.ops : 0.0},
                 {"small_time_ms", s.small_time},
                 {"ops_under_baseline", s.under_baseline},
                 {"min_bandwidth_gbps", s.min_bw},
                 {"min_bandwidth_op", s.min_bw_op},
                 {"max_transit_ms", s.max_time},
                 {"max_transit_op", s.max_time_op}};
    if (s.retrans > 0)
      per[name]["retransmission"] = {
          {"ops", s.retrans}, {"max_transit_ms", s.retrans_max}, {"op", s.retrans_op}};
  }
  c["transports"] = per;
  // communication_matrix.json: links per transport type.
  std::map<std::string, std::pair<int64_t, double>> links;  // type -> (links, min bandwidth)
  for (const AscendLink& l : d.links) {
    auto& x = links[l.transport];
    ++x.first;
    if (l.size_mb > 0 && (x.second == 0 || l.bandwidth_gbps < x.second))
      x.second = l.bandwidth_gbps;
  }
  nlohmann::json lj = nlohmann::json::object();
  for (const auto& [k, v] : links) lj[k] = {{"links", v.first}, {"min_bandwidth_gbps", v.second}};
  c["links"] = lj;
  return c;
}

// AI CPU tasks (advisor AicpuChecker: ops with a task over 20 us), and shapes per op type.
void KernelEvidence(const AscendRankData& d, const AnalyzeOptions& opt, nlohmann::json* a) {
  std::vector<const AscendAiCpuOp*> ops;
  double total = 0;
  int64_t tasks = 0;
  for (const AscendAiCpuOp& op : d.ai_cpu) {
    total += op.total_us;
    tasks += op.count;
    if (op.max_us * 1e3 > opt.aicpu_min_task_ns) ops.push_back(&op);
  }
  std::sort(ops.begin(), ops.end(), [](const AscendAiCpuOp* x, const AscendAiCpuOp* y) {
    return x->total_us > y->total_us;
  });
  nlohmann::json list = nlohmann::json::array();
  for (size_t i = 0; i < ops.size() && i < 10; ++i)
    list.push_back({{"name", ops[i]->name},
                    {"type", ops[i]->type},
                    {"input_dtypes", ops[i]->dtypes},
                    {"count", ops[i]->count},
                    {"total_us", ops[i]->total_us},
                    {"max_us", ops[i]->max_us}});
  (*a)["ai_cpu"] = {{"tasks", tasks},
                    {"total_us", total},
                    {"device_time_pct", AscPct(total, d.kernel_total_us)},
                    {"ops_over_threshold", ops.size()},
                    {"top", list}};
  nlohmann::json many = nlohmann::json::array();
  std::vector<std::pair<size_t, std::string>> by;
  for (const auto& [type, shapes] : d.shapes_by_type)
    if (static_cast<int>(shapes.size()) >= opt.shape_churn_min_shapes)
      by.push_back({shapes.size(), type});
  std::sort(by.rbegin(), by.rend());
  for (size_t i = 0; i < by.size() && i < 10; ++i)
    many.push_back({{"type", by[i].second}, {"distinct_shapes", by[i].first}});
  (*a)["shapes"] = {{"op_state_static", d.op_state_static},
                    {"op_state_dynamic", d.op_state_dynamic},
                    {"op_types_with_many_shapes", many}};
  (*a)["device_tasks"] = {{"count", d.kernel_tasks}, {"total_us", d.kernel_total_us}};
}

nlohmann::json FileEvidence(const AscendRankData& d) {
  nlohmann::json errors = nlohmann::json::array();
  for (const auto& [f, why] : d.file_errors) errors.push_back({{"file", f}, {"error", why}});
  size_t unknown_cols = 0;
  for (const auto& [f, cols] : d.unknown_columns) unknown_cols += cols.size();
  return {{"export", d.export_type},
          {"schema_version", d.schema_version},
          {"read", d.files_read},
          {"unknown_files", d.unknown_files},
          {"unknown_columns", d.unknown_columns},
          {"unknown_count", d.unknown_files.size() + unknown_cols},
          {"errors", errors}};
}

}  // namespace

void AscendDetails(const RankTrace& t, const HostView& hv, const AnalyzeOptions& opt,
                   RankResult* r) {
  (void)hv;
  if (r->device != "npu") return;
  const AscendRankData* d = t.ascend.get();
  nlohmann::json a = nlohmann::json::object();
  double lanes[4];
  if (OverlapLanes(t, d, lanes)) {
    a["overlap_analysis"] = {{"computing_us", lanes[0]},
                             {"communication_us", lanes[1]},
                             {"communication_not_overlapped_us", lanes[2]},
                             {"free_us", lanes[3]}};
    // msprof's own breakdown replaces the one from device tasks: computing, communication not
    // overlapped, free; overlap = (communication - not overlapped) / communication.
    if (r->basis == "device") {
      r->compute_us = lanes[0];
      r->non_compute_us = lanes[2];
      r->idle_us = lanes[3];
      r->kernel_time_us = lanes[0] + lanes[2] + lanes[3];
      if (lanes[1] > 0) r->comm_comp_overlap_pct = AscPct(lanes[1] - lanes[2], lanes[1]);
      a["breakdown_source"] = "Overlap Analysis";
    }
  }
  double step_total = 0;
  for (const StepResult& s : r->steps) step_total += s.step_us;
  a["steps_total_us"] = step_total;
  HostApiEvidence(t, opt, &a);
  a["op_compile"]["step_pct"] = AscPct(a["op_compile"]["total_us"].get<double>(), step_total);
  if (d) {
    a["files"] = FileEvidence(*d);
    KernelEvidence(*d, opt, &a);
    if (!d->comm_ops.empty() || !d->links.empty()) a["communication"] = CommEvidence(*d);
    if (d->memory_rows > 0)
      a["memory"] = {{"rows", d->memory_rows},
                     {"peak_allocated_mb", d->peak_allocated_mb},
                     {"peak_reserved_mb", d->peak_reserved_mb},
                     {"peak_module_reserved_mb", d->peak_module_reserved_mb}};
    if (!d->op_stats.empty()) {
      double ai_cpu_us = 0, all_us = 0;
      for (const AscendOpStat& s : d->op_stats) {
        all_us += s.total_us;
        if (s.core_type == "AI_CPU") ai_cpu_us += s.total_us;
      }
      a["op_statistic"] = {
          {"op_types", d->op_stats.size()}, {"total_us", all_us}, {"ai_cpu_us", ai_cpu_us}};
    }
    if (!d->aicore_freq_mhz.empty()) a["aicore_freq"] = FrequencyEvidence(*d);
    if (!d->env.empty()) a["env"] = d->env;
  }
  r->details["ascend"] = std::move(a);
}

}  // namespace trainscope::trace::internal
