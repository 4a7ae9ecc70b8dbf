// hang_bench: how long `trainscope hang analyze` takes on a large job, as ratios to two
// peers measured in the same run on the same files: reading the bytes (the I/O floor,
// what `cat` does) and parsing them with nlohmann::json (the parser the reader uses).
//
// Dumps: --ranks ranks (64) x --entries entries (2,000, PyTorch's default ring size) in
// PyTorch's JSON layout (~2,000 entries each), with a default group, tensor-parallel groups of 8
// and data-parallel groups across them, buffers wrapped by different amounts, and one rank that
// reduces a wrong size in the last step. The verdict is checked (exit 1 if wrong).
//
//   build/bench/hang_bench [--ranks 64] [--entries 2000] [--repeat 3] [--dir DIR (kept)]
// Prints one JSON object: argv, sizes, seconds per phase (best of --repeat), ratios.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "trainscope/hang/analyze.h"

namespace {

using nlohmann::json;

struct Args {
  int ranks = 64, entries = 2000, repeat = 3;
  std::string dir;
};

std::string RankList(const std::vector<int>& r) {
  std::string s = "[";
  for (size_t i = 0; i < r.size(); ++i) s += (i ? ", " : "") + std::to_string(r[i]);
  return s + "]";
}

// One training step per rank: tp all_gather + reduce_scatter per layer, dp all_reduce per
// bucket, one default-group all_reduce (the loss). Sizes are identical on every rank except
// the culprit's last dp bucket.
json MakeDump(int rank, const Args& a, int culprit) {
  const int tp = 8;
  const int tp_id = rank / tp, dp_id = rank % tp;
  std::vector<int> tp_ranks, dp_ranks, all;
  for (int i = 0; i < tp; ++i) tp_ranks.push_back(tp_id * tp + i);
  for (int i = dp_id; i < a.ranks; i += tp) dp_ranks.push_back(i);
  for (int i = 0; i < a.ranks; ++i) all.push_back(i);
  const std::string tp_name = std::to_string(1 + tp_id), dp_name = std::to_string(100 + dp_id);
  json cfg = {{"0", {{"name", "0"}, {"desc", "default_pg"}, {"ranks", RankList(all)}}},
              {tp_name, {{"name", tp_name}, {"desc", "tp"}, {"ranks", RankList(tp_ranks)}}},
              {dp_name, {{"name", dp_name}, {"desc", "dp"}, {"ranks", RankList(dp_ranks)}}}};
  struct Op {
    std::string pg, desc, name;
    int64_t in, out;
  };
  std::vector<Op> step;
  for (int layer = 0; layer < 4; ++layer) {
    step.push_back({tp_name, "tp", "_all_gather_base", 4096, 4096 * tp});
    step.push_back({tp_name, "tp", "_reduce_scatter_base", 4096 * tp, 4096});
  }
  for (int b = 0; b < 3; ++b)
    step.push_back({dp_name, "dp", "all_reduce", 1 << (18 + b), 1 << (18 + b)});
  step.push_back({"0", "default_pg", "all_reduce", 1, 1});
  // Every rank ran the same program of `total` ops; the rings wrapped by different amounts
  // (each keeps a few fewer of its oldest entries than the next: first record ids differ).
  const int total = a.entries + 600;
  const int lost = 600 + (rank % 8) * 5;
  std::map<std::string, int64_t> seq;
  json entries = json::array();
  for (int i = 0; i < total; ++i) {
    const Op& op = step[i % step.size()];
    const int64_t s = ++seq[op.pg];
    if (i < lost) continue;
    const bool last_step = i >= total - static_cast<int>(step.size());
    const bool bad = rank == culprit && last_step && op.pg == dp_name && op.name == "all_reduce";
    const int64_t in = bad ? op.in + 1 : op.in, out = bad ? op.out + 1 : op.out;
    const std::string state = last_step ? "started" : "completed";
    entries.push_back({{"record_id", i},
                       {"pg_id", std::stoi(op.pg)},
                       {"process_group", {op.pg, op.desc}},
                       {"collective_seq_id", s},
                       {"p2p_seq_id", 0},
                       {"op_id", i + 1},
                       {"profiling_name", "nccl:" + op.name},
                       {"time_created_ns", 1700000000000000000LL + int64_t{i} * 1000000},
                       {"input_sizes", {{in}}},
                       {"output_sizes", {{out}}},
                       {"input_dtypes", {"BFloat16"}},
                       {"output_dtypes", {"BFloat16"}},
                       {"state", state},
                       {"time_discovered_started_ns", 0},
                       {"time_discovered_completed_ns", 0},
                       {"retired", state == "completed"},
                       {"timeout_ms", 600000},
                       {"is_p2p", false}});
  }
  return {{"version", "2.10"},
          {"pg_config", cfg},
          {"pg_status", json::object()},
          {"entries", entries},
          {"rank", rank}};
}

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  json argv_json = json::array();
  for (int i = 0; i < argc; ++i) argv_json.push_back(argv[i]);
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--ranks")
      a.ranks = std::atoi(v.c_str());
    else if (k == "--entries")
      a.entries = std::atoi(v.c_str());
    else if (k == "--repeat")
      a.repeat = std::max(1, std::atoi(v.c_str()));
    else if (k == "--dir")
      a.dir = v;
    else {
      std::fprintf(stderr, "hang_bench: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  if (a.ranks < 16 || a.ranks % 8 != 0 || a.entries < 100) {
    std::fprintf(stderr, "hang_bench: --ranks must be a multiple of 8 >= 16, --entries >= 100\n");
    return 2;
  }
  const bool keep = !a.dir.empty();  // --dir: the dumps stay there for a look with the CLI
  if (a.dir.empty()) {
    char tmpl[] = "/tmp/hang_bench_XXXXXX";
    a.dir = mkdtemp(tmpl);
  }
  const int culprit = a.ranks * 37 / 64;
  std::vector<std::string> files;
  size_t bytes = 0;
  for (int r = 0; r < a.ranks; ++r) {
    files.push_back(a.dir + "/nccl_trace_rank_" + std::to_string(r));
    std::string text = MakeDump(r, a, culprit).dump();
    bytes += text.size();
    std::ofstream(files.back(), std::ios::binary) << text;
  }
  double read_s = 1e9, parse_s = 1e9, analyze_s = 1e9;
  trainscope::hang::Report report;
  for (int rep = 0; rep < a.repeat; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    size_t n = 0;
    for (const auto& f : files) n += ReadAll(f).size();
    read_s = std::min(read_s, Seconds(t0));
    t0 = std::chrono::steady_clock::now();
    size_t entries = 0;
    for (const auto& f : files) entries += json::parse(ReadAll(f))["entries"].size();
    parse_s = std::min(parse_s, Seconds(t0));
    t0 = std::chrono::steady_clock::now();
    auto r = trainscope::hang::AnalyzePaths({a.dir});
    analyze_s = std::min(analyze_s, Seconds(t0));
    if (!r.ok()) {
      std::fprintf(stderr, "hang_bench: %s\n", std::string(r.status().message()).c_str());
      return 1;
    }
    report = *std::move(r);
    if (n != bytes || entries == 0) return 1;
  }
  bool right = !report.findings.empty() &&
               report.findings[0].kind == trainscope::hang::FindingKind::kSizeMismatch &&
               report.findings[0].culprit_ranks == std::vector<int>{culprit};
  json out = {{"argv", argv_json},
              {"ranks", a.ranks},
              {"entries_per_rank", a.entries},
              {"bytes", bytes},
              {"seconds", {{"read", read_s}, {"nlohmann_parse", parse_s}, {"analyze", analyze_s}}},
              {"ratio_analyze_to_parse", analyze_s / parse_s},
              {"ratio_analyze_to_read", analyze_s / read_s},
              {"verdict", report.findings.empty() ? "" : report.findings[0].finding.title},
              {"verdict_right", right}};
  std::printf("%s\n", out.dump(2).c_str());
  if (!keep) {
    for (const auto& f : files) std::remove(f.c_str());
    rmdir(a.dir.c_str());
  }
  return right ? 0 : 1;
}
