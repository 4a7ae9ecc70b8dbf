// communication.json and communication_matrix.json (torch_npu, profiler level 1 and above):
//   communication.json        {step: {"collective"|"p2p": {op: {"Communication Time Info": {...},
//                              "Communication Bandwidth Info": {RDMA|HCCS|PCIE|SDMA|SIO: {...}}}}}}
//   communication_matrix.json {step: {"collective"|"p2p": {op group: {"src-dst": {...}}}}}
// The "Total Op Info" entries are sums msprof adds; they are skipped (the ops are summed here).
// An op or link without its time block, or with a field of the wrong type, is counted in
// ParseStats-style counters by the caller's file error list: one missing key is one record.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "trace/ascend_rank.h"
#include "trainscope/core/json_text.h"

namespace trainscope::trace::internal {
namespace {

// j[key] as a finite non-negative number; *missing counts a key that is absent or not one.
double CommField(const nlohmann::json& j, const char* key, int64_t* missing) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) {
    ++*missing;
    return 0;
  }
  double v = it->get<double>();
  if (!std::isfinite(v) || v < 0) {
    ++*missing;
    return 0;
  }
  return v;
}

absl::Status CommParse(const std::string& text, const std::string& name, nlohmann::json* j) {
  absl::StatusOr<nlohmann::json> parsed = ParseJsonText(text, kJsonMaxDepth, name);
  if (!parsed.ok()) return parsed.status();
  if (!parsed->is_object())
    return absl::InvalidArgumentError(absl::StrCat(name, ": byte 0: not a JSON object"));
  *j = *std::move(parsed);
  return absl::OkStatus();
}

absl::Status CommMissingStatus(const std::string& name, int64_t missing, size_t kept) {
  if (missing == 0) return absl::OkStatus();
  // Partial results are kept; the error names the file and the count (ReadAscendDir keeps the
  // records read and lists this as the file's error only when nothing was read).
  return kept > 0 ? absl::OkStatus()
                  : absl::InvalidArgumentError(absl::StrCat(
                        name, ": ", missing, " records without the expected keys, none usable"));
}

}  // namespace

absl::Status ParseCommunicationJson(const std::string& text, const std::string& name,
                                    AscendRankData* d) {
  nlohmann::json j;
  if (absl::Status s = CommParse(text, name, &j); !s.ok()) return s;
  int64_t missing = 0;
  const size_t before = d->comm_ops.size();
  for (auto step = j.begin(); step != j.end(); ++step) {
    if (!step->is_object()) {
      ++missing;
      continue;
    }
    for (auto type = step->begin(); type != step->end(); ++type) {
      if (!type->is_object()) continue;  // "p2p": {} or [] when empty
      for (auto op = type->begin(); op != type->end(); ++op) {
        if (op.key() == "Total Op Info") continue;
        const nlohmann::json& o = op.value();
        if (!o.is_object() || !o.contains("Communication Time Info") ||
            !o["Communication Time Info"].is_object()) {
          ++missing;
          continue;
        }
        const nlohmann::json& ti = o["Communication Time Info"];
        AscendCommOp c;
        c.step = step.key();
        c.type = type.key();
        c.name = op.key();
        int64_t m = 0;
        c.elapse_ms = CommField(ti, "Elapse Time(ms)", &m);
        c.transit_ms = CommField(ti, "Transit Time(ms)", &m);
        c.wait_ms = CommField(ti, "Wait Time(ms)", &m);
        c.sync_ms = CommField(ti, "Synchronization Time(ms)", &m);
        c.idle_ms = CommField(ti, "Idle Time(ms)", &m);
        c.wait_ratio = CommField(ti, "Wait Time Ratio", &m);
        c.sync_ratio = CommField(ti, "Synchronization Time Ratio", &m);
        if (m > 0) {
          missing += m;
          if (m >= 7) continue;  // nothing usable
        }
        auto bw = o.find("Communication Bandwidth Info");
        if (bw != o.end() && bw->is_object()) {
          for (auto tr = bw->begin(); tr != bw->end(); ++tr) {
            if (!tr->is_object()) {
              ++missing;
              continue;
            }
            AscendTransport x;
            x.transport = tr.key();
            int64_t mt = 0;
            x.size_mb = CommField(*tr, "Transit Size(MB)", &mt);
            x.time_ms = CommField(*tr, "Transit Time(ms)", &mt);
            x.bandwidth_gbps = CommField(*tr, "Bandwidth(GB/s)", &mt);
            x.large_packet_ratio = CommField(*tr, "Large Packet Ratio", &mt);
            missing += mt;
            c.transports.push_back(x);
          }
        }
        d->comm_ops.push_back(std::move(c));
      }
    }
  }
  d->comm_missing_keys += missing;
  return CommMissingStatus(name, missing, d->comm_ops.size() - before);
}

absl::Status ParseCommunicationMatrixJson(const std::string& text, const std::string& name,
                                          AscendRankData* d) {
  nlohmann::json j;
  if (absl::Status s = CommParse(text, name, &j); !s.ok()) return s;
  int64_t missing = 0;
  const size_t before = d->links.size();
  for (auto step = j.begin(); step != j.end(); ++step) {
    if (!step->is_object()) {
      ++missing;
      continue;
    }
    for (auto type = step->begin(); type != step->end(); ++type) {
      if (!type->is_object()) continue;
      for (auto op = type->begin(); op != type->end(); ++op) {
        if (!op->is_object() || op.key() == "Total Op Info") continue;
        for (auto link = op->begin(); link != op->end(); ++link) {
          const nlohmann::json& l = link.value();
          auto tt = l.is_object() ? l.find("Transport Type") : l.end();
          if (!l.is_object() || tt == l.end() || !tt->is_string()) {
            ++missing;
            continue;
          }
          AscendLink x;
          x.step = step.key();
          x.op = op.key();
          x.link = link.key();
          x.transport = tt->get<std::string>();
          int64_t m = 0;
          x.size_mb = CommField(l, "Transit Size(MB)", &m);
          x.time_ms = CommField(l, "Transit Time(ms)", &m);
          x.bandwidth_gbps = CommField(l, "Bandwidth(GB/s)", &m);
          missing += m;
          d->links.push_back(std::move(x));
        }
      }
    }
  }
  d->comm_missing_keys += missing;
  return CommMissingStatus(name, missing, d->links.size() - before);
}

}  // namespace trainscope::trace::internal
