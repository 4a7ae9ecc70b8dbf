// The collective self-test: sweep, exact checks, nccl-tests bandwidths.
//
// Inputs are small integers, V(r, i) = 1 + (13 i + 7 r) mod K with K = min(16, 256 / n), so
// that every sum over n ranks is at most 256 and exact in every dtype (bfloat16 has 8
// significant bits). Expected values therefore compare with ==, not a tolerance.
#include "trainscope/comm/selftest.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "comm/half.h"
#include "trainscope/core/progress.h"
#include "trainscope/core/stats.h"
#include "trainscope/core/status.h"

namespace trainscope::comm {

const char* SelftestOpName(SelftestOp op) {
  switch (op) {
    case SelftestOp::kAllReduce:
      return "all_reduce";
    case SelftestOp::kAllGather:
      return "all_gather";
    case SelftestOp::kReduceScatter:
      return "reduce_scatter";
    case SelftestOp::kBroadcast:
      return "broadcast";
    case SelftestOp::kAllToAll:
      return "all_to_all";
    case SelftestOp::kSendRecv:
      return "send_recv";
  }
  return "?";
}

absl::StatusOr<SelftestOp> ParseSelftestOp(const std::string& name) {
  std::string n = absl::AsciiStrToLower(name);
  n.erase(std::remove(n.begin(), n.end(), '_'), n.end());
  if (n == "allreduce") return SelftestOp::kAllReduce;
  if (n == "allgather") return SelftestOp::kAllGather;
  if (n == "reducescatter") return SelftestOp::kReduceScatter;
  if (n == "broadcast" || n == "bcast") return SelftestOp::kBroadcast;
  if (n == "alltoall") return SelftestOp::kAllToAll;
  if (n == "sendrecv") return SelftestOp::kSendRecv;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown op '", name,
      "' (expected all_reduce, all_gather, reduce_scatter, broadcast, all_to_all, send_recv or "
      "all)"));
}

absl::StatusOr<std::vector<SelftestOp>> ParseSelftestOps(const std::string& list) {
  std::vector<SelftestOp> out;
  for (absl::string_view part : absl::StrSplit(list, ',', absl::SkipWhitespace())) {
    std::string p(absl::StripAsciiWhitespace(part));
    if (absl::AsciiStrToLower(p) == "all") {
      out = {SelftestOp::kAllReduce, SelftestOp::kAllGather, SelftestOp::kReduceScatter,
             SelftestOp::kBroadcast, SelftestOp::kAllToAll,  SelftestOp::kSendRecv};
      continue;
    }
    auto op = ParseSelftestOp(p);
    if (!op.ok()) return op.status();
    if (std::find(out.begin(), out.end(), *op) == out.end()) out.push_back(*op);
  }
  if (out.empty()) return absl::InvalidArgumentError("--ops is empty");
  return out;
}

absl::StatusOr<size_t> ParseByteSize(const std::string& text) {
  std::string t(absl::StripAsciiWhitespace(text));
  uint64_t mult = 1;
  if (!t.empty()) {
    char last = static_cast<char>(absl::ascii_toupper(static_cast<unsigned char>(t.back())));
    if (last == 'B') {
      t.pop_back();
      if (!t.empty())
        last = static_cast<char>(absl::ascii_toupper(static_cast<unsigned char>(t.back())));
    }
    if (last == 'K' || last == 'M' || last == 'G') {
      mult = last == 'K' ? (1ull << 10) : last == 'M' ? (1ull << 20) : (1ull << 30);
      t.pop_back();
    }
  }
  uint64_t v;
  if (t.empty() || !absl::SimpleAtoi(t, &v) || v == 0 || v > (1ull << 40) / mult) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad size '", text, "' (expected a positive byte count like 8, 1K, 64M, 1G)"));
  }
  return static_cast<size_t>(v * mult);
}

absl::StatusOr<std::vector<size_t>> ParseByteSizes(const std::string& list) {
  std::vector<size_t> out;
  for (absl::string_view part : absl::StrSplit(list, ',', absl::SkipWhitespace())) {
    auto v = ParseByteSize(std::string(part));
    if (!v.ok()) return v.status();
    out.push_back(*v);
  }
  if (out.empty()) return absl::InvalidArgumentError("--sizes is empty");
  return out;
}

std::vector<size_t> SizeSweep(size_t min_bytes, size_t max_bytes, double factor) {
  std::vector<size_t> out;
  if (min_bytes == 0 || factor <= 1.0) return out;
  double s = static_cast<double>(min_bytes);
  while (s <= static_cast<double>(max_bytes) + 0.5) {
    size_t v = static_cast<size_t>(std::llround(s));
    if (out.empty() || v != out.back()) out.push_back(v);
    s *= factor;
  }
  return out;
}

double BusBwFactor(SelftestOp op, int n) {
  switch (op) {
    case SelftestOp::kAllReduce:
      return n > 0 ? 2.0 * (n - 1) / n : 0;
    case SelftestOp::kAllGather:
    case SelftestOp::kReduceScatter:
    case SelftestOp::kAllToAll:
      return n > 0 ? static_cast<double>(n - 1) / n : 0;
    case SelftestOp::kBroadcast:
    case SelftestOp::kSendRecv:
      return 1.0;
  }
  return 1.0;
}

namespace {

const std::vector<DType> kAllDTypes = {DType::kFloat32, DType::kBFloat16, DType::kFloat16,
                                       DType::kInt32, DType::kInt64};

bool Chunked(SelftestOp op) {
  return op == SelftestOp::kAllGather || op == SelftestOp::kReduceScatter ||
         op == SelftestOp::kAllToAll;
}

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// --- typed fill and check -------------------------------------------------------------

struct Pattern {
  int k;  // values are 1..k
  int V(int rank, size_t i) const {
    return 1 + static_cast<int>(
                   (13 * static_cast<uint64_t>(i % k) + 7 * static_cast<uint64_t>(rank)) % k);
  }
};

void Put(void* p, DType d, size_t i, int v) { SetElement(p, d, i, v); }

double Get(const void* p, DType d, size_t i) { return GetElement(p, d, i); }

template <typename Fn>
void Fill(void* p, DType d, size_t n, Fn value) {
  for (size_t i = 0; i < n; ++i) Put(p, d, i, value(i));
}

template <typename Fn>
int64_t CountWrong(const void* p, DType d, size_t n, Fn expected) {
  int64_t wrong = 0;
  for (size_t i = 0; i < n; ++i) wrong += Get(p, d, i) != static_cast<double>(expected(i));
  return wrong;
}

// Buffers for one row, reused across iterations.
struct Buffers {
  std::vector<char> send, recv;
};

// Elements per rank-chunk (chunked ops) or per buffer, for `bytes` in dtype `d`.
size_t CountFor(SelftestOp op, size_t bytes, DType d, int n, bool at_least_one) {
  size_t c = bytes / DTypeSize(d);
  if (Chunked(op)) c /= static_cast<size_t>(n);
  return at_least_one ? std::max<size_t>(c, 1) : c;
}

// Runs op once. `c` is the per-rank chunk for chunked ops, the buffer count otherwise.
absl::Status RunOp(Communicator& comm, SelftestOp op, DType d, size_t c, Buffers& b) {
  const int n = comm.world_size(), r = comm.rank();
  switch (op) {
    case SelftestOp::kAllReduce:
      return comm.AllReduce(b.send.data(), c, d);
    case SelftestOp::kAllGather:
      return comm.AllGather(b.send.data(), b.recv.data(), c, d);
    case SelftestOp::kReduceScatter:
      return comm.ReduceScatter(b.send.data(), b.recv.data(), c, d);
    case SelftestOp::kBroadcast:
      return comm.Broadcast(b.send.data(), c, d, 0);
    case SelftestOp::kAllToAll:
      return comm.AllToAll(b.send.data(), b.recv.data(), c, d);
    case SelftestOp::kSendRecv: {
      if (n == 1) {
        std::memcpy(b.recv.data(), b.send.data(), c * DTypeSize(d));
        return absl::OkStatus();
      }
      // Ring shift. Rank 0 sends first and the others receive first, so the chain cannot
      // deadlock for any n even when sends wait for the matching receive.
      const int next = (r + 1) % n, prev = (r + n - 1) % n;
      if (r == 0) {
        TS_RETURN_IF_ERROR(comm.Send(b.send.data(), c, d, next, 7));
        return comm.Recv(b.recv.data(), c, d, prev, 7);
      }
      TS_RETURN_IF_ERROR(comm.Recv(b.recv.data(), c, d, prev, 7));
      return comm.Send(b.send.data(), c, d, next, 7);
    }
  }
  return absl::InternalError("bad op");
}

// One checked run in dtype d: fill, run, (maybe corrupt), count wrong elements locally.
absl::StatusOr<int64_t> CheckOnce(Communicator& comm, SelftestOp op, DType d, size_t bytes,
                                  const SelftestOptions& o, const Pattern& pat) {
  const int n = comm.world_size(), r = comm.rank();
  const size_t es = DTypeSize(d);
  const size_t c = CountFor(op, bytes, d, n, /*at_least_one=*/true);
  Buffers b;
  const size_t total = Chunked(op) ? c * n : c;
  b.send.resize(total * es);
  b.recv.resize(total * es);
  // Sum over ranks of V(., i), periodic in i with period k.
  std::vector<int> sum(pat.k, 0);
  for (int j = 0; j < pat.k; ++j)
    for (int q = 0; q < n; ++q) sum[j] += pat.V(q, j);
  auto S = [&](size_t i) { return sum[i % pat.k]; };

  Fill(b.send.data(), d, total, [&](size_t i) { return pat.V(r, i); });
  TS_RETURN_IF_ERROR(RunOp(comm, op, d, c, b));
  void* out =
      op == SelftestOp::kAllReduce || op == SelftestOp::kBroadcast ? b.send.data() : b.recv.data();
  if (o.inject_error_rank == r) Put(out, d, 0, 100000);  // a value no op can produce
  switch (op) {
    case SelftestOp::kAllReduce:
      return CountWrong(out, d, c, S);
    case SelftestOp::kAllGather:
      return CountWrong(out, d, c * n,
                        [&](size_t i) { return pat.V(static_cast<int>(i / c), i % c); });
    case SelftestOp::kReduceScatter:
      return CountWrong(out, d, c, [&](size_t i) { return S(r * c + i); });
    case SelftestOp::kBroadcast:
      return CountWrong(out, d, c, [&](size_t i) { return pat.V(0, i); });
    case SelftestOp::kAllToAll:
      // Block j of rank q's send is V(q, j*c + i); we receive block r from every q.
      return CountWrong(out, d, c * n,
                        [&](size_t i) { return pat.V(static_cast<int>(i / c), r * c + i % c); });
    case SelftestOp::kSendRecv:
      return CountWrong(out, d, c,
                        [&](size_t i) { return pat.V(n == 1 ? r : (r + n - 1) % n, i); });
  }
  return 0;
}

// Each rank's memcpy bandwidth in kMemcpyProbeRepetitions repetitions, gathered:
// result[k][q] is rank q in repetition k. A barrier starts each repetition so that all ranks
// copy under the same conditions, and each keeps its best of 3 copies.
absl::StatusOr<std::vector<std::vector<double>>> MemcpyProbe(Communicator& comm, size_t bytes) {
  const int reps = kMemcpyProbeRepetitions, n = comm.world_size();
  std::vector<char> a(bytes, 1), b(bytes, 0);
  std::vector<double> mine(reps, 0.0);
  for (int k = 0; k < reps; ++k) {
    TS_RETURN_IF_ERROR(comm.Barrier());
    for (int copy = 0; copy < 3; ++copy) {
      int64_t t0 = NowNs();
      std::memcpy(b.data(), a.data(), bytes);
      int64_t dt = std::max<int64_t>(NowNs() - t0, 1);
      mine[k] = std::max(mine[k], static_cast<double>(bytes) / dt);  // bytes/ns = GB/s
    }
  }
  std::vector<double> all(static_cast<size_t>(n) * reps);
  static_assert(sizeof(double) == sizeof(int64_t));
  TS_RETURN_IF_ERROR(comm.AllGather(mine.data(), all.data(), reps, DType::kInt64));
  std::vector<std::vector<double>> out(reps, std::vector<double>(n));
  for (int q = 0; q < n; ++q)
    for (int k = 0; k < reps; ++k) out[k][q] = all[static_cast<size_t>(q) * reps + k];
  return out;
}

// The median of every entry of `v` but the one at `skip`.
double MedianOfOthers(const std::vector<double>& v, size_t skip) {
  std::vector<double> others;
  for (size_t p = 0; p < v.size(); ++p)
    if (p != skip) others.push_back(v[p]);
  return trainscope::Median(std::move(others));
}

}  // namespace

SlowRankVerdict FindSlowRanks(const std::vector<std::vector<double>>& rep_gbps, double ratio) {
  SlowRankVerdict v;
  const size_t reps = rep_gbps.size();
  const size_t n = reps > 0 ? rep_gbps[0].size() : 0;
  v.median_gbps.assign(n, 0.0);
  v.slow_repetitions.assign(n, 0);
  for (size_t q = 0; q < n; ++q) {
    std::vector<double> mine;
    for (const auto& row : rep_gbps) mine.push_back(q < row.size() ? row[q] : 0.0);
    v.median_gbps[q] = trainscope::Median(std::move(mine));
  }
  if (n < 2 || reps == 0 || !(ratio > 0)) return v;
  for (const auto& row : rep_gbps) {
    if (row.size() != n) continue;  // malformed repetition: never evidence against a rank
    for (size_t q = 0; q < n; ++q)
      if (row[q] * ratio < MedianOfOthers(row, q)) ++v.slow_repetitions[q];
  }
  for (size_t q = 0; q < n; ++q) {
    const bool majority = 2 * static_cast<size_t>(v.slow_repetitions[q]) > reps;
    if (majority && v.median_gbps[q] * ratio < MedianOfOthers(v.median_gbps, q)) {
      v.slow_ranks.push_back(static_cast<int>(q));
    }
  }
  return v;
}

namespace {

// Times `op` on `c` elements (SelftestRow::count's chunk) in o.dtype: a timed warm-up lets
// large sizes run fewer iterations (the same on all ranks), then the mean and slowest rank's
// per-op time and the bandwidths go to `row`.
absl::Status TimeSelftestRow(Communicator& comm, const SelftestOptions& o, size_t c,
                             SelftestRow* row) {
  const int n = comm.world_size();
  const SelftestOp op = row->op;
  Buffers b;
  b.send.assign(row->bytes, 0);
  b.recv.assign(row->bytes, 0);
  int iters = o.iters;
  if (o.warmup > 0) {
    TS_RETURN_IF_ERROR(comm.Barrier());
    int64_t t0 = NowNs();
    for (int i = 0; i < o.warmup; ++i) TS_RETURN_IF_ERROR(RunOp(comm, op, o.dtype, c, b));
    int64_t per_op = (NowNs() - t0) / o.warmup;
    TS_RETURN_IF_ERROR(comm.AllReduce(&per_op, 1, DType::kInt64, ReduceOp::kMax));
    if (o.seconds_per_size > 0 && per_op > 0) {
      double fit = o.seconds_per_size * 1e9 / static_cast<double>(per_op);
      iters = static_cast<int>(std::clamp(fit, 1.0, static_cast<double>(o.iters)));
    }
  }
  TS_RETURN_IF_ERROR(comm.Barrier());
  int64_t t0 = NowNs();
  for (int i = 0; i < iters; ++i) TS_RETURN_IF_ERROR(RunOp(comm, op, o.dtype, c, b));
  int64_t per_op_ns = (NowNs() - t0) / iters;
  std::vector<int64_t> times(n);
  TS_RETURN_IF_ERROR(comm.AllGather(&per_op_ns, times.data(), 1, DType::kInt64));
  double sum = 0;
  for (int q = 0; q < n; ++q) {
    sum += static_cast<double>(times[q]);
    if (times[q] > times[row->slowest_rank]) row->slowest_rank = q;
  }
  row->iters = iters;
  row->time_us = sum / n / 1e3;
  row->time_us_max = static_cast<double>(times[row->slowest_rank]) / 1e3;
  double sec = row->time_us / 1e6;
  row->algbw_gbps = sec > 0 ? static_cast<double>(row->bytes) / 1e9 / sec : 0;
  row->busbw_gbps = row->algbw_gbps * BusBwFactor(op, n);
  return absl::OkStatus();
}

// Exact checks of `op` at `bytes` in every dtype; wrong counts summed over ranks.
absl::Status CheckSelftestRow(Communicator& comm, const SelftestOptions& o, size_t bytes,
                              const Pattern& pat, SelftestRow* row) {
  std::vector<int64_t> wrong(o.check_dtypes.size());
  for (size_t k = 0; k < o.check_dtypes.size(); ++k) {
    auto w = CheckOnce(comm, row->op, o.check_dtypes[k], bytes, o, pat);
    if (!w.ok()) return w.status();
    wrong[k] = *w;
  }
  TS_RETURN_IF_ERROR(comm.AllReduce(wrong.data(), wrong.size(), DType::kInt64));
  for (size_t k = 0; k < wrong.size(); ++k) {
    row->wrong += wrong[k];
    row->wrong_by_dtype[DTypeName(o.check_dtypes[k])] = wrong[k];
  }
  return absl::OkStatus();
}

// Verdict: wrong results, then bandwidth floor, then slow ranks (`slow`, from `repetitions`
// memcpy probes); the first failure is the reason.
void JudgeSelftest(const SlowRankVerdict& slow, int repetitions, SelftestReport* rep) {
  const SelftestOptions& o = rep->options;
  for (const SelftestRow& row : rep->rows) {
    if (row.correct() || !rep->passed) continue;
    std::vector<std::string> bad;
    for (const auto& [d, w] : row.wrong_by_dtype)
      if (w > 0) bad.push_back(absl::StrCat(d, ": ", w));
    rep->passed = false;
    rep->reason = absl::StrCat(SelftestOpName(row.op), " at ", row.bytes, " B returned ", row.wrong,
                               " wrong element(s) (", absl::StrJoin(bad, ", "),
                               "); the engine or a rank's memory corrupts data");
  }
  if (rep->passed && o.min_busbw_gbps > 0) {
    for (SelftestOp op : o.ops) {
      const SelftestRow* last = nullptr;
      for (const SelftestRow& row : rep->rows)
        if (row.op == op && (last == nullptr || row.bytes >= last->bytes)) last = &row;
      if (last != nullptr && last->busbw_gbps < o.min_busbw_gbps && rep->passed) {
        rep->passed = false;
        rep->reason =
            absl::StrFormat("%s busbw %.3f GB/s at %d B is under --min-busbw %.3f GB/s",
                            SelftestOpName(op), last->busbw_gbps, last->bytes, o.min_busbw_gbps);
      }
    }
  }
  rep->slow_ranks = slow.slow_ranks;
  if (rep->passed && !slow.slow_ranks.empty()) {
    const int q = slow.slow_ranks.front();
    rep->passed = false;
    rep->reason = absl::StrFormat(
        "rank %d is markedly slower: it copies memory at %.2f GB/s against %.2f GB/s for the "
        "other ranks (memcpy probe, medians of %d repetitions; slower in %d of them); check "
        "its CPU binding, NUMA placement and load",
        q, slow.median_gbps[q], MedianOfOthers(slow.median_gbps, q), repetitions,
        slow.slow_repetitions[q]);
  }
}

}  // namespace

absl::StatusOr<SelftestReport> RunSelftest(Communicator& comm, const SelftestOptions& options) {
  SelftestReport rep;
  rep.backend = comm.backend_name();
  rep.world_size = comm.world_size();
  rep.options = options;
  SelftestOptions& o = rep.options;
  if (o.ops.empty()) {
    o.ops = {SelftestOp::kAllReduce, SelftestOp::kAllGather, SelftestOp::kReduceScatter,
             SelftestOp::kBroadcast, SelftestOp::kAllToAll,  SelftestOp::kSendRecv};
  }
  if (o.check_dtypes.empty()) o.check_dtypes = kAllDTypes;
  if (o.sizes.empty()) return absl::InvalidArgumentError("no sizes to test");
  if (o.iters < 1 || o.warmup < 0) {
    return absl::InvalidArgumentError("--iters must be >= 1 and --warmup >= 0");
  }
  const int n = comm.world_size(), r = comm.rank();
  const Pattern pat{std::max(1, std::min(16, 256 / n))};

  size_t max_bytes = *std::max_element(o.sizes.begin(), o.sizes.end());
  auto probe = MemcpyProbe(comm, std::clamp<size_t>(max_bytes, 1 << 20, 16 << 20));
  if (!probe.ok()) return probe.status();
  const SlowRankVerdict slow = FindSlowRanks(*probe, o.slow_rank_ratio);
  rep.rank_memcpy_gbps = slow.median_gbps;

  Progress progress("selftest comm", o.ops.size() * o.sizes.size(), false);
  const bool show_progress = r == 0;
  for (SelftestOp op : o.ops) {
    for (size_t bytes : o.sizes) {
      if (show_progress) progress.Add(1);
      const size_t c = CountFor(op, bytes, o.dtype, n, /*at_least_one=*/false);
      if (c == 0) continue;  // smaller than one element per rank: nccl-tests skips it too
      SelftestRow row;
      row.op = op;
      row.dtype = o.dtype;
      row.count = Chunked(op) ? c * n : c;
      row.bytes = row.count * DTypeSize(o.dtype);
      row.root = op == SelftestOp::kBroadcast ? 0 : -1;
      TS_RETURN_IF_ERROR(TimeSelftestRow(comm, o, c, &row));
      TS_RETURN_IF_ERROR(CheckSelftestRow(comm, o, bytes, pat, &row));
      rep.wrong_total += row.wrong;
      if (r == 0 && o.on_row) o.on_row(rep, row);
      rep.rows.push_back(std::move(row));
    }
  }
  JudgeSelftest(slow, static_cast<int>(probe->size()), &rep);
  return rep;
}

}  // namespace trainscope::comm
