// Builders of PyTorch-layout dumps for the hang unit tests.
#ifndef TRAINSCOPE_HANG_INTERNAL_HANG_TEST_UTIL_H_
#define TRAINSCOPE_HANG_INTERNAL_HANG_TEST_UTIL_H_

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "trainscope/hang/dump.h"

namespace trainscope::hang::testing {

using nlohmann::json;

struct E {
  std::string op = "all_reduce";
  int64_t seq = 1;
  std::vector<std::vector<int64_t>> in = {{4, 4}};
  std::vector<std::vector<int64_t>> out = {{4, 4}};
  std::string dtype = "Float";
  std::string state = "completed";
  std::string caller;
  std::string pg = "0";
  std::string pg_desc = "default_pg";
  int64_t p2p_seq = 0;
};

inline json EntryJson(const E& e, int64_t record_id, const std::string& backend = "nccl") {
  bool p2p = e.op.rfind("send", 0) == 0 || e.op.rfind("recv", 0) == 0;
  json j = {{"record_id", record_id},
            {"pg_id", std::stoi(e.pg)},
            {"process_group", {e.pg, e.pg_desc}},
            {"collective_seq_id", e.seq},
            {"p2p_seq_id", e.p2p_seq},
            {"op_id", record_id + 1},
            {"profiling_name", backend + ":" + e.op},
            {"time_created_ns", 1000 + record_id},
            {"input_sizes", e.in},
            {"output_sizes", e.out},
            {"input_dtypes", json::array({e.dtype})},
            {"output_dtypes", json::array({e.dtype})},
            {"state", e.state},
            {"time_discovered_started_ns", nullptr},
            {"time_discovered_completed_ns", nullptr},
            {"retired", e.state == "completed"},
            {"timeout_ms", 600000},
            {"is_p2p", p2p}};
  if (!e.caller.empty()) j["caller"] = e.caller;
  return j;
}

// A dump of `rank`: entries in order, record ids from `first_record_id`.
inline json DumpJson(int rank, const std::vector<E>& entries, int world,
                     int64_t first_record_id = 0, json pg_config = nullptr) {
  json j = {{"version", "2.10"}, {"rank", rank}, {"entries", json::array()}};
  if (pg_config.is_null()) {
    std::string ranks = "[";
    for (int r = 0; r < world; ++r) ranks += (r ? ", " : "") + std::to_string(r);
    pg_config = {{"0", {{"name", "0"}, {"desc", "default_pg"}, {"ranks", ranks + "]"}}}};
  }
  j["pg_config"] = pg_config;
  for (size_t i = 0; i < entries.size(); ++i)
    j["entries"].push_back(EntryJson(entries[i], first_record_id + static_cast<int64_t>(i)));
  return j;
}

inline Report Analyze(const std::vector<json>& docs, int cap = 10) {
  std::vector<Dump> dumps;
  for (size_t i = 0; i < docs.size(); ++i) {
    auto d = ParseDump(docs[i], "dump_rank_" + std::to_string(i));
    EXPECT_TRUE(d.ok()) << d.status();
    if (d.ok()) dumps.push_back(*d);
  }
  AnalyzeOptions o;
  o.mismatch_cap = cap;
  return AnalyzeDumps(std::move(dumps), InputCounts{}, o);
}

// Steps of a training loop: per step, bucket b issues an all_reduce of sizes[b] elements
// with caller "step <s> grad bucket <b>". Seq ids run on from `*seq`.
inline void AddSteps(std::vector<E>* out, int64_t* seq, int first_step, int last_step,
                     const std::vector<int64_t>& sizes, bool callers = true,
                     const std::string& state = "completed") {
  for (int s = first_step; s <= last_step; ++s)
    for (size_t b = 0; b < sizes.size(); ++b) {
      E e;
      e.seq = (*seq)++;
      e.in = e.out = {{sizes[b]}};
      e.state = state;
      if (callers) e.caller = "step " + std::to_string(s) + " grad bucket " + std::to_string(b);
      out->push_back(e);
    }
}

}  // namespace trainscope::hang::testing

#endif  // TRAINSCOPE_HANG_INTERNAL_HANG_TEST_UTIL_H_
