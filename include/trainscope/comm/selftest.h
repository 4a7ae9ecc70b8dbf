// The collective self-test behind `trainscope selftest comm`, in the manner of nccl-tests:
// for each op and size, warm up, time `iters` runs, check the result exactly in every dtype
// (integer-valued inputs so that sums are exact even in bfloat16), and report algbw/busbw
// with the nccl-tests formulas (docs/metrics.md, "Collective bandwidth"; GB = 1e9).
//
// RunSelftest is collective: every rank of `comm` calls it with the same options, and every
// rank returns the same report (times and error counts are combined across ranks through
// the communicator itself).
#ifndef TRAINSCOPE_COMM_SELFTEST_H_
#define TRAINSCOPE_COMM_SELFTEST_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainscope/comm/comm.h"
#include "trainscope/core/finding.h"

namespace trainscope::comm {

// Ops of the sweep: the collectives plus "send_recv" (a ring shift, nccl-tests sendrecv).
enum class SelftestOp { kAllReduce, kAllGather, kReduceScatter, kBroadcast, kAllToAll, kSendRecv };
const char* SelftestOpName(SelftestOp op);
absl::StatusOr<SelftestOp> ParseSelftestOp(const std::string& name);  // also "allreduce", ...
// Comma-separated op names; "all" = every op. InvalidArgument naming a bad entry.
absl::StatusOr<std::vector<SelftestOp>> ParseSelftestOps(const std::string& list);
// "8", "1K", "64M", "1G" (K = 1024, as nccl-tests). InvalidArgument on anything else.
absl::StatusOr<size_t> ParseByteSize(const std::string& text);
// Comma-separated sizes, each > 0.
absl::StatusOr<std::vector<size_t>> ParseByteSizes(const std::string& list);
// min, min*factor, ... <= max (factor > 1).
std::vector<size_t> SizeSweep(size_t min_bytes, size_t max_bytes, double factor);

// nccl-tests bandwidths: algbw = bytes / time; busbw = algbw * factor(op, n):
// all_reduce 2(n-1)/n; all_gather, reduce_scatter, all_to_all (n-1)/n; broadcast, send_recv 1.
double BusBwFactor(SelftestOp op, int world_size);

struct SelftestReport;
struct SelftestRow;

struct SelftestOptions {
  std::vector<SelftestOp> ops;      // empty: all
  std::vector<size_t> sizes;        // bytes per row (total buffer, as nccl-tests "size")
  DType dtype = DType::kFloat32;    // the timed dtype
  std::vector<DType> check_dtypes;  // empty: all five
  int iters = 20;
  int warmup = 5;
  // Large sizes run fewer timed iterations so that one row takes about this long
  // (never fewer than 1); 0: always `iters`.
  double seconds_per_size = 1.0;
  double min_busbw_gbps = 0;  // > 0: the busbw at each op's largest size must reach it
  // A rank whose memcpy probe is this much slower than the others' median is flagged
  // (see FindSlowRanks: in a majority of kMemcpyProbeRepetitions and in the median); 0: off.
  double slow_rank_ratio = 2.0;
  int inject_error_rank = -1;  // >= 0: that rank corrupts one result element (tests)
  // Called on rank 0 as soon as each row is measured and checked (nccl-tests prints each
  // size's line as it goes), with the report so far (backend, world size, options with
  // their defaults filled in; rows before this one); may be empty.
  std::function<void(const SelftestReport& so_far, const SelftestRow& row)> on_row;
};

struct SelftestRow {
  SelftestOp op = SelftestOp::kAllReduce;
  DType dtype = DType::kFloat32;
  size_t bytes = 0;        // total buffer size, nccl-tests "size"
  size_t count = 0;        // elements of `bytes` in dtype
  int root = -1;           // broadcast root, -1 otherwise
  int iters = 0;           // timed iterations actually run
  double time_us = 0;      // mean over ranks of the per-op time
  double time_us_max = 0;  // slowest rank's per-op time
  int slowest_rank = 0;
  double algbw_gbps = 0;
  double busbw_gbps = 0;
  int64_t wrong = 0;  // wrong elements, summed over ranks and checked dtypes
  std::map<std::string, int64_t> wrong_by_dtype;
  bool correct() const { return wrong == 0; }
};

struct SelftestReport {
  std::string backend;
  int world_size = 1;
  SelftestOptions options;
  std::vector<SelftestRow> rows;
  std::vector<double> rank_memcpy_gbps;  // each rank's memcpy probe (median of repetitions)
  std::vector<int> slow_ranks;
  bool passed = true;
  std::string reason;  // first failure, in a sentence; empty when passed
  int64_t wrong_total = 0;
};

// The memcpy probe runs this many repetitions; in each, every rank copies at the same time
// (a barrier starts it) and keeps its best of a few copies.
inline constexpr int kMemcpyProbeRepetitions = 5;

// The slow-rank rule. rep_gbps[k][q] is rank q's memcpy bandwidth in repetition k (every
// row has one entry per rank). Rank q is slow when, with m(k, q) the median of the other
// ranks in repetition k:
//   - rep_gbps[k][q] * ratio < m(k, q) in a strict majority of the repetitions, and
//   - its median over repetitions * ratio < the median of the other ranks' medians,
// so one descheduled repetition on a busy machine never flags a rank, while a rank that is
// consistently slow is. Fewer than 2 ranks, no repetitions or ratio <= 0: nobody is slow.
struct SlowRankVerdict {
  std::vector<double> median_gbps;    // per rank, over repetitions
  std::vector<int> slow_repetitions;  // per rank: repetitions in which it was slow
  std::vector<int> slow_ranks;        // ascending
};
SlowRankVerdict FindSlowRanks(const std::vector<std::vector<double>>& rep_gbps, double ratio);

// Runs the sweep. Errors: a failing op (with the communicator's message), InvalidArgument.
// Rank 0 reports progress on stderr (core/progress.h).
absl::StatusOr<SelftestReport> RunSelftest(Communicator& comm, const SelftestOptions& options);

// Which rank ended an mpirun job, from mpirun's own report (Open MPI 4/5 wording):
// "rank 1 was killed by signal 9 (Killed)" from "mpirun noticed that process rank 1 with PID
// ... exited on signal 9 (Killed).", or "rank 1 exited with code 5" from the "Process name:
// [[job,1],1] / Exit code: 5" block. `rank`/`exit_code`/`signal` are -1/-1/0 when unknown;
// `sentence` is "" when mpirun's output names no rank.
struct MpirunFailure {
  int rank = -1;
  int exit_code = -1;
  int signal = 0;
  std::string sentence;
};
MpirunFailure ParseMpirunFailure(const std::string& mpirun_output);

// nccl-tests style text (one block per op, with its footer) and the JSON document
// (format "trainscope.selftest.comm", version 1).
std::string RenderSelftestTable(const SelftestReport& report);

// The same text a piece at a time, for printing rows while the sweep runs: Begin(), then
// Row() for each row in sweep order, then End() with the finished report. The pieces
// concatenated are RenderSelftestTable's text.
class SelftestTableStream {
 public:
  SelftestTableStream(std::string backend, int world_size, SelftestOptions options);
  std::string Begin() const;
  std::string Row(const SelftestRow& row);
  std::string End(const SelftestReport& report);

 private:
  std::string OpenThrough(size_t op_index);  // footers/headers up to ops[op_index]
  std::string Footer() const;
  const std::string backend_;
  const int world_size_;
  const SelftestOptions options_;
  size_t next_op_ = 0;  // ops_[0..next_op_) have their header out
  bool open_ = false;   // ops_[next_op_ - 1]'s block still needs its footer
  double bw_sum_ = 0;
  int bw_count_ = 0;
  int64_t wrong_ = 0;
};
std::string SelftestJson(const SelftestReport& report);

// A report that did not pass as one core Finding (none when it passed), for callers that
// rank findings from several modules (doctor, diagnose): an error whose title is the
// report's reason and whose id says which rule failed: "comm.wrong_results" (a row returned
// wrong elements), "comm.slow_rank" (rank: the first slow rank) or "comm.low_busbw" (under
// --min-busbw); evidence the backend, world size and the counts behind it.
std::vector<Finding> FindingsFrom(const SelftestReport& report);

}  // namespace trainscope::comm

#endif  // TRAINSCOPE_COMM_SELFTEST_H_
