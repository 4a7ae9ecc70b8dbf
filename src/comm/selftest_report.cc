// Rendering of the self-test: the nccl-tests text layout and the JSON document.
#include <cstdio>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "trainscope/comm/selftest.h"
#include "trainscope/core/formats.h"

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

SelftestTableStream::SelftestTableStream(std::string backend, int world_size,
                                         SelftestOptions options)
    : backend_(std::move(backend)), world_size_(world_size), options_(std::move(options)) {}

std::string SelftestTableStream::Begin() const {
  std::vector<std::string> dtypes;
  for (DType d : options_.check_dtypes) dtypes.push_back(DTypeName(d));
  return absl::StrFormat(
      "# trainscope selftest comm: backend %s, %d ranks, iters %d (fewer for large sizes), "
      "warmup %d\n# every size checked exactly in: %s\n#\n",
      backend_, world_size_, options_.iters, options_.warmup, absl::StrJoin(dtypes, ", "));
}

std::string SelftestTableStream::Footer() const {
  return absl::StrFormat("# Out of bounds values : %d %s\n# Avg bus bandwidth    : %.3f\n#\n",
                         wrong_, wrong_ == 0 ? "OK" : "FAILED",
                         bw_count_ > 0 ? bw_sum_ / bw_count_ : 0);
}

std::string SelftestTableStream::OpenThrough(size_t op_index) {
  std::string out;
  while (next_op_ <= op_index && next_op_ < options_.ops.size()) {
    if (open_) absl::StrAppend(&out, Footer());
    bw_sum_ = 0;
    bw_count_ = 0;
    wrong_ = 0;
    absl::StrAppendFormat(&out, "# %s\n", SelftestOpName(options_.ops[next_op_]));
    absl::StrAppend(&out,
                    "#       size         count      type   redop    root     time   algbw   busbw "
                    " #wrong\n"
                    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s) "
                    "       \n");
    open_ = true;
    ++next_op_;
  }
  return out;
}

std::string SelftestTableStream::Row(const SelftestRow& row) {
  size_t k = 0;
  while (k < options_.ops.size() && options_.ops[k] != row.op) ++k;
  std::string out;
  // A row of the op whose block is open, or of a later op (rows come in sweep order).
  if (next_op_ == 0 || options_.ops[next_op_ - 1] != row.op) out = OpenThrough(k);
  const bool reduces = row.op == SelftestOp::kAllReduce || row.op == SelftestOp::kReduceScatter;
  absl::StrAppendFormat(&out, "%12d  %12d  %8s  %6s  %6d  %7s  %6s  %6s  %6d\n", row.bytes,
                        row.count, NcclType(row.dtype), reduces ? "sum" : "none", row.root,
                        FloatCell(row.time_us, 7), FloatCell(row.algbw_gbps, 6),
                        FloatCell(row.busbw_gbps, 6), row.wrong);
  bw_sum_ += row.busbw_gbps;
  ++bw_count_;
  wrong_ += row.wrong;
  return out;
}

std::string SelftestTableStream::End(const SelftestReport& rep) {
  std::string out = OpenThrough(options_.ops.size());
  if (open_) absl::StrAppend(&out, Footer());
  open_ = false;
  std::vector<std::string> names;
  for (SelftestOp op : options_.ops) names.push_back(SelftestOpName(op));
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

std::string RenderSelftestTable(const SelftestReport& rep) {
  SelftestTableStream stream(rep.backend, rep.world_size, rep.options);
  std::string out = stream.Begin();
  for (const SelftestRow& row : rep.rows) absl::StrAppend(&out, stream.Row(row));
  absl::StrAppend(&out, stream.End(rep));
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
  j["format"] = formats::kSelftestComm;
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

// The rule that failed, in JudgeSelftest's order: wrong results, then the bandwidth floor,
// then slow ranks (whose reason starts "rank <q> is markedly slower").
std::vector<Finding> FindingsFrom(const SelftestReport& rep) {
  if (rep.passed) return {};
  Finding f;
  f.severity = Severity::kError;
  f.title = rep.reason;
  const std::string world = absl::StrCat(rep.backend, " x ", rep.world_size, " ranks");
  int64_t wrong = 0;
  for (const SelftestRow& row : rep.rows) wrong += row.wrong;
  if (wrong > 0) {
    f.id = "comm.wrong_results";
    f.evidence =
        absl::StrCat(world, ": ", wrong, " wrong element(s) in ", rep.rows.size(), " measurements");
    f.fix =
        "do not train on this machine: rerun `trainscope selftest comm` with each backend and "
        "check the interconnect and the library versions (`trainscope env check`)";
  } else if (!rep.slow_ranks.empty() &&
             rep.reason.rfind(absl::StrCat("rank ", rep.slow_ranks.front(), " "), 0) == 0) {
    f.id = "comm.slow_rank";
    f.rank = rep.slow_ranks.front();
    f.evidence =
        absl::StrCat(world, ": memcpy GB/s per rank ",
                     absl::StrJoin(rep.rank_memcpy_gbps, ", ", [](std::string* out, double gbps) {
                       absl::StrAppend(out, absl::StrFormat("%.2f", gbps));
                     }));
    f.fix =
        "check the slow rank's core binding, NUMA placement and the other processes on its "
        "host: one slow rank makes the whole job slow";
  } else {
    f.id = "comm.low_busbw";
    f.evidence = absl::StrFormat("%s: --min-busbw %.3f GB/s", world, rep.options.min_busbw_gbps);
    f.fix =
        "check the interconnect between the ranks (`trainscope topo`) and the backend's "
        "environment (`trainscope env check`)";
  }
  return {f};
}

}  // namespace trainscope::comm
