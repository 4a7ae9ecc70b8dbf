// Profiler windows of one process: torch.profiler.schedule(repeat=N) with
// tensorboard_trace_handler writes one Chrome trace per window, all from one process. They are
// one rank: this file says which files belong together and merges their event tables.
#include "trace/windows.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "trace/analysis_internal.h"

namespace trainscope::trace::internal {

std::string ProcessKey(const RankTrace& t) {
  // Only Chrome traces come in windows; torch_npu folders and phase logs are one file a rank.
  if (t.format != "kineto" && t.format != "chrome-list") return "file " + t.path;
  if (t.rank >= 0) return absl::StrCat("rank ", t.rank);
  // The process of the steps (or of the first operator): a CUDA trace also holds device
  // "processes" (pid 0, 1, ... for the GPUs), which say nothing about the host process.
  uint32_t pid = 0;
  for (const Event& e : t.events) {
    if ((e.flags & kFlagDevice) || e.cat == Category::kGpuUserAnnotation) continue;
    const std::string& n = t.strings.Get(e.name);
    if (n.rfind("ProfilerStep#", 0) == 0) {
      pid = e.pid;
      break;
    }
    if (!pid && e.cat == Category::kCpuOp) pid = e.pid;
  }
  if (!pid || t.strings.Get(pid).empty()) return "file " + t.path;
  return absl::StrCat("process ", t.host_name, "/", t.strings.Get(pid));
}

void DropLastStepLikeHta(const AnalyzeOptions& opt, RankTrace* t) {
  if (t->fractional_ts && !opt.ns_precision) RoundTimesLikeHta(t);
  std::vector<bool> kept = HtaKeptEvents(*t, opt.include_last_step);
  size_t out = 0;
  for (size_t i = 0; i < t->events.size(); ++i)
    if (kept[i]) t->events[out++] = t->events[i];
  t->events.resize(out);
}

namespace {

void AddStats(const ParseStats& a, ParseStats* s) {
  s->bytes += a.bytes;
  s->events_seen += a.events_seen;
  s->events_kept += a.events_kept;
  s->flow_events += a.flow_events;
  s->metadata_events += a.metadata_events;
  s->python_functions_skipped += a.python_functions_skipped;
  s->other_phases += a.other_phases;
  s->malformed += a.malformed;
  s->missing_fields += a.missing_fields;
  s->unknown_category += a.unknown_category;
  s->out_of_order += a.out_of_order;
  s->ids_above_2p53 += a.ids_above_2p53;
  s->negative_or_huge_dur += a.negative_or_huge_dur;
  s->bad_ts += a.bad_ts;
  s->bad_dur += a.bad_dur;
  s->bad_pid_tid += a.bad_pid_tid;
  s->bad_category += a.bad_category;
  s->bad_args += a.bad_args;
  s->bad_values += a.bad_values;
  if (a.truncated && !s->truncated) {
    s->truncated = true;
    s->truncated_at_byte = a.truncated_at_byte;
  }
  for (const auto& [name, n] : a.unknown_categories) s->unknown_categories[name] += n;
  s->warnings.insert(s->warnings.end(), a.warnings.begin(), a.warnings.end());
}

}  // namespace

void AppendWindow(RankTrace window, RankTrace* rank) {
  if (rank->path.empty()) {
    rank->path = window.path;
    rank->format = window.format;
    rank->rank = window.rank;
    rank->rank_source = window.rank_source;
    rank->world_size = window.world_size;
    rank->host_name = window.host_name;
  }
  // Strings are interned per file: re-intern what the events and names use.
  std::vector<uint32_t> id(window.strings.size(), UINT32_MAX);
  auto map = [&](uint32_t s) {
    if (id[s] == UINT32_MAX) id[s] = rank->strings.Intern(window.strings.Get(s));
    return id[s];
  };
  rank->events.reserve(rank->events.size() + window.events.size());
  for (Event e : window.events) {
    e.name = map(e.name);
    e.input_dims = map(e.input_dims);
    e.pid = map(e.pid);
    e.tid = map(e.tid);
    rank->events.push_back(e);
  }
  for (const auto& [pid, name] : window.process_names) rank->process_names[map(pid)] = name;
  for (const auto& [key, name] : window.thread_names)
    rank->thread_names[{map(key.first), map(key.second)}] = name;
  AddStats(window.stats, &rank->stats);
  rank->fractional_ts = rank->fractional_ts || window.fractional_ts;
  rank->on_stream_events += window.on_stream_events;
}

void SumWindowBreakdowns(const std::vector<RankResult>& windows, RankResult* r) {
  r->kernel_time_us = r->idle_us = r->compute_us = r->non_compute_us = 0;
  for (const RankResult& w : windows) {
    r->kernel_time_us += w.kernel_time_us;
    r->idle_us += w.idle_us;
    r->compute_us += w.compute_us;
    r->non_compute_us += w.non_compute_us;
  }
  auto pct = [&](double part) {
    return r->kernel_time_us > 0 ? 100.0 * part / r->kernel_time_us : 0.0;
  };
  r->idle_pct = pct(r->idle_us);
  r->compute_pct = pct(r->compute_us);
  r->non_compute_pct = pct(r->non_compute_us);
}

}  // namespace trainscope::trace::internal
