// Rendering of the self-test: the nccl-tests text layout and the JSON document.
#include <cstdio>
#include <string>
#include <string_view>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "trainscope/comm/selftest.h"

namespace trainscope::comm {
namespace {

// nccl-tests' number cells: the most decimals (2, 1, 0) that fit `width`, else %.1e.
std::string FloatCell(double v, int width) {
  for (int prec : {2, 1, 0}) {
    std::string s = absl::StrFormat("%*.*f", width, prec, v);
    if (static_cast<int>(s.size()) <= width) return s;
  }
  return absl::StrFormat("%*.1e", width, v);
}

const char* NcclType(DType d) {
  switch (d) {
    case DType::kFloat32:
      return "float";
    case DType::kBFloat16:
      return "bfloat16";
    case DType::kFloat16:
      return "half";
    case DType::kInt32:
      return "int32";
    case DType::kInt64:
      return "int64";
  }
  return "?";
}

}  // namespace

std::string RenderSelftestTable(const SelftestReport& rep) {
  const SelftestOptions& o = rep.options;
  std::vector<std::string> dtypes;
  for (DType d : o.check_dtypes) dtypes.push_back(DTypeName(d));
  std::string out = absl::StrFormat(
      "# trainscope selftest comm: backend %s, %d ranks, iters %d (fewer for large sizes), "
      "warmup %d\n# every size checked exactly in: %s\n#\n",
      rep.backend, rep.world_size, o.iters, o.warmup, absl::StrJoin(dtypes, ", "));
  std::vector<std::string> names;
  for (SelftestOp op : o.ops) {
    names.push_back(SelftestOpName(op));
    absl::StrAppendFormat(&out, "# %s\n", SelftestOpName(op));
    absl::StrAppend(&out,
                    "#       size         count      type   redop    root     time   algbw   busbw "
                    " #wrong\n"
                    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s) "
                    "       \n");
    double bw_sum = 0;
    int bw_count = 0;
    int64_t wrong = 0;
    for (const SelftestRow& row : rep.rows) {
      if (row.op != op) continue;
      const bool reduces = op == SelftestOp::kAllReduce || op == SelftestOp::kReduceScatter;
      absl::StrAppendFormat(&out, "%12d  %12d  %8s  %6s  %6d  %7s  %6s  %6s  %6d\n", row.bytes,
                            row.count, NcclType(row.dtype), reduces ? "sum" : "none", row.root,
                            FloatCell(row.time_us, 7), FloatCell(row.algbw_gbps, 6),
                            FloatCell(row.busbw_gbps, 6), row.wrong);
      bw_sum += row.busbw_gbps;
      ++bw_count;
      wrong += row.wrong;
    }
    absl::StrAppendFormat(&out, "# Out of bounds values : %d %s\n", wrong,
                          wrong == 0 ? "OK" : "FAILED");
    absl::StrAppendFormat(&out, "# Avg bus bandwidth    : %.3f\n#\n",
                          bw_count > 0 ? bw_sum / bw_count : 0);
  }
  std::vector<std::string> probe;
  for (size_t q = 0; q < rep.rank_memcpy_gbps.size(); ++q) {
    probe.push_back(absl::StrFormat("%d: %.2f", q, rep.rank_memcpy_gbps[q]));
  }
  absl::StrAppendFormat(&out, "# Rank memcpy probe (GB/s): %s\n", absl::StrJoin(probe, ", "));
  absl::StrAppendFormat(&out, "# Collective test concluded: %s\n", absl::StrJoin(names, " "));
  absl::StrAppendFormat(&out, "# Result: %s\n",
                        rep.passed ? "PASSED" : absl::StrCat("FAILED: ", rep.reason));
  return out;
}

// mpirun prints a banner, not a rank: pull the rank out of its two usual reports.
MpirunFailure ParseMpirunFailure(const std::string& text) {
  MpirunFailure f;
  // Reads the decimal number at `pos` (after optional spaces); -1 when there is none.
  auto number_at = [&](size_t pos) -> int {
    while (pos < text.size() && text[pos] == ' ') ++pos;
    size_t end = pos;
    while (end < text.size() && end - pos < 9 && text[end] >= '0' && text[end] <= '9') ++end;
    int v;
    if (end == pos || !absl::SimpleAtoi(absl::string_view(text).substr(pos, end - pos), &v)) {
      return -1;
    }
    return v;
  };
  constexpr std::string_view kNoticed = "process rank ";
  constexpr std::string_view kOnSignal = " exited on signal ";
  if (size_t at = text.find(kNoticed); at != std::string::npos) {
    size_t eol = text.find('\n', at);
    size_t sig = text.find(kOnSignal, at);
    if (sig != std::string::npos && (eol == std::string::npos || sig < eol)) {
      f.rank = number_at(at + kNoticed.size());
      f.signal = number_at(sig + kOnSignal.size());
      std::string name;
      size_t open = text.find('(', sig), close = text.find(')', sig);
      if (open != std::string::npos && close != std::string::npos && open < close &&
          (eol == std::string::npos || close < eol)) {
        name = absl::StrCat(" (", text.substr(open + 1, close - open - 1), ")");
      }
      if (f.rank >= 0 && f.signal > 0) {
        f.sentence = absl::StrCat("rank ", f.rank, " was killed by signal ", f.signal, name);
        return f;
      }
      f = MpirunFailure();
    }
  }
  constexpr std::string_view kProcess = "Process name: [[";
  constexpr std::string_view kExit = "Exit code:";
  if (size_t at = text.find(kProcess); at != std::string::npos) {
    // "[[<jobid>,<step>],<rank>]"
    size_t sep = text.find("],", at);
    size_t code = text.find(kExit, at);
    if (sep != std::string::npos && code != std::string::npos && sep < code) {
      f.rank = number_at(sep + 2);
      f.exit_code = number_at(code + kExit.size());
      if (f.rank >= 0 && f.exit_code >= 0) {
        f.sentence = absl::StrCat("rank ", f.rank, " exited with code ", f.exit_code);
        return f;
      }
    }
  }
  return MpirunFailure();
}

std::string SelftestJson(const SelftestReport& rep) {
  nlohmann::json j;
  j["format"] = "trainscope.selftest.comm";
  j["version"] = 1;
  j["backend"] = rep.backend;
  j["world_size"] = rep.world_size;
  j["passed"] = rep.passed;
  j["reason"] = rep.reason;
  j["iters"] = rep.options.iters;
  j["warmup"] = rep.options.warmup;
  j["min_busbw_gbps"] = rep.options.min_busbw_gbps;
  j["slow_rank_ratio"] = rep.options.slow_rank_ratio;  // as the ranks applied it (0: off)
  std::vector<std::string> dtypes, ops;
  for (DType d : rep.options.check_dtypes) dtypes.push_back(DTypeName(d));
  for (SelftestOp op : rep.options.ops) ops.push_back(SelftestOpName(op));
  j["check_dtypes"] = dtypes;
  j["ops"] = ops;
  j["wrong_total"] = rep.wrong_total;
  j["rank_memcpy_gbps"] = rep.rank_memcpy_gbps;
  j["slow_ranks"] = rep.slow_ranks;
  nlohmann::json rows = nlohmann::json::array();
  for (const SelftestRow& row : rep.rows) {
    nlohmann::json x;
    x["op"] = SelftestOpName(row.op);
    x["dtype"] = DTypeName(row.dtype);
    x["bytes"] = row.bytes;
    x["count"] = row.count;
    x["root"] = row.root;
    x["iters"] = row.iters;
    x["time_us"] = row.time_us;
    x["time_us_max"] = row.time_us_max;
    x["slowest_rank"] = row.slowest_rank;
    x["algbw_gbps"] = row.algbw_gbps;
    x["busbw_gbps"] = row.busbw_gbps;
    x["wrong"] = row.wrong;
    x["wrong_by_dtype"] = row.wrong_by_dtype;
    x["correct"] = row.correct();
    rows.push_back(std::move(x));
  }
  j["results"] = std::move(rows);
  return j.dump(2);
}

}  // namespace trainscope::comm
