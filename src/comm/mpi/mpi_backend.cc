// MPI backend: OpenMPI's own collectives on a duplicate of MPI_COMM_WORLD (shared memory
// inside a node through the vader BTL, the network across nodes).
//
// MPI has no per-op timeout. Blocking calls keep MPI's tuned algorithms (its non-blocking
// collectives go through a slower generic path), and a watchdog thread enforces the
// deadline: an op still running when its deadline passes is reported to the host
// (CommHost::stuck_op) with a line naming the op and the rank, and a way to end the job
// (MPI_Abort, which makes mpirun stop every rank). The host decides; the trainscope
// executables print the line and abort, so there is never a silent hang.
//
// bfloat16/float16 have no MPI datatype in OpenMPI 4.1: they travel as 2-byte contiguous
// types, reduced by user-defined MPI_Ops that compute in float and round once.
// The C API only: OpenMPI's deprecated C++ bindings would need libmpi_cxx.
#define OMPI_SKIP_MPICXX 1
#include <mpi.h>

#include <climits>
#include <condition_variable>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "comm/backend.h"
#include "comm/half.h"

namespace trainscope::comm {
namespace {

MPI_Datatype g_bf16 = MPI_DATATYPE_NULL;
MPI_Datatype g_fp16 = MPI_DATATYPE_NULL;
MPI_Op g_half_ops[2][3];  // [bf16, fp16][sum, max, min]

float AddF(float a, float b) { return a + b; }
float MaxF(float a, float b) { return a > b ? a : b; }
float MinF(float a, float b) { return a < b ? a : b; }

template <float (*Op)(float, float)>
void HalfReduce(void* in, void* inout, int* len, MPI_Datatype* type) {
  if (*type == g_bf16) {
    Reduce16<BFloat16ToFloat, FloatToBFloat16>(inout, in, inout, static_cast<size_t>(*len), Op);
  } else {
    Reduce16<HalfToFloat, FloatToHalf>(inout, in, inout, static_cast<size_t>(*len), Op);
  }
}

bool g_we_initialized = false;

void FinalizeAtExit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

absl::Status InitMpiOnce() {
  static std::once_flag once;
  static absl::Status status;
  std::call_once(once, [] {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
        status = absl::UnavailableError("MPI_Init_thread failed");
        return;
      }
      g_we_initialized = true;
      std::atexit(FinalizeAtExit);
    }
    MPI_Type_contiguous(2, MPI_BYTE, &g_bf16);
    MPI_Type_commit(&g_bf16);
    MPI_Type_contiguous(2, MPI_BYTE, &g_fp16);
    MPI_Type_commit(&g_fp16);
    for (int t = 0; t < 2; ++t) {
      MPI_Op_create(&HalfReduce<AddF>, 1, &g_half_ops[t][0]);
      MPI_Op_create(&HalfReduce<MaxF>, 1, &g_half_ops[t][1]);
      MPI_Op_create(&HalfReduce<MinF>, 1, &g_half_ops[t][2]);
    }
  });
  return status;
}

MPI_Datatype MpiType(DType d) {
  switch (d) {
    case DType::kFloat32:
      return MPI_FLOAT;
    case DType::kInt32:
      return MPI_INT32_T;
    case DType::kInt64:
      return MPI_INT64_T;
    case DType::kBFloat16:
      return g_bf16;
    case DType::kFloat16:
      return g_fp16;
  }
  return MPI_BYTE;
}

MPI_Op MpiOp(DType d, ReduceOp op) {
  int k = op == ReduceOp::kSum ? 0 : op == ReduceOp::kMax ? 1 : 2;
  if (d == DType::kBFloat16) return g_half_ops[0][k];
  if (d == DType::kFloat16) return g_half_ops[1][k];
  return k == 0 ? MPI_SUM : k == 1 ? MPI_MAX : MPI_MIN;
}

absl::Status Check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return absl::OkStatus();
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  return absl::UnavailableError(absl::StrCat(what, ": ", std::string(msg, len)));
}

absl::Status CheckCount(size_t count) {
  if (count > static_cast<size_t>(INT_MAX)) {
    return absl::InvalidArgumentError(
        absl::StrCat("count ", count, " exceeds MPI's int limit; split the buffer"));
  }
  return absl::OkStatus();
}

[[noreturn]] void AbortJob() {
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();  // MPI_Abort does not return; should it, the job still ends
}

// Reports an armed op that outlives its deadline to the host's stuck_op, once.
class Watchdog {
 public:
  Watchdog(int rank, std::chrono::milliseconds timeout,
           std::function<void(const StuckOp&)> stuck_op)
      : rank_(rank),
        timeout_(timeout),
        stuck_op_(std::move(stuck_op)),
        thread_([this] { Loop(); }) {}
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void Arm(const char* op, uint32_t tag) {
    std::lock_guard<std::mutex> lock(mu_);
    op_ = op;
    tag_ = tag;
    deadline_ = std::chrono::steady_clock::now() + timeout_;
    armed_ = true;
    // The watchdog sleeps until the previous deadline and then re-reads this one, so a
    // wake-up (a context switch per op) is only needed when it sleeps with nothing armed.
    if (idle_) cv_.notify_all();
  }
  void Disarm() {
    std::lock_guard<std::mutex> lock(mu_);
    armed_ = false;
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      if (!armed_) {
        idle_ = true;
        cv_.wait(lock);
        idle_ = false;
        continue;
      }
      auto deadline = deadline_;
      if (cv_.wait_until(lock, deadline) == std::cv_status::timeout && armed_ &&
          deadline_ == deadline) {
        StuckOp stuck;
        stuck.line = absl::StrFormat(
            "trainscope comm (mpi): %s%s on rank %d did not finish within %.3g s; MPI has no "
            "per-op timeout, so the job is aborted (MPI_Abort). A peer is dead, stopped, or "
            "stuck in other work.",
            op_, tag_ > 0 ? absl::StrCat(" #", tag_) : "", rank_, timeout_.count() / 1000.0);
        stuck.abort_job = AbortJob;
        armed_ = false;  // reported once; the op itself stays blocked
        if (stuck_op_) {
          lock.unlock();  // the host may take its time (print, flush) before it aborts
          stuck_op_(stuck);
          lock.lock();
        }
      }
    }
  }
  const int rank_;
  const std::chrono::milliseconds timeout_;
  const std::function<void(const StuckOp&)> stuck_op_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool armed_ = false;
  bool idle_ = false;
  const char* op_ = "";
  uint32_t tag_ = 0;
  std::chrono::steady_clock::time_point deadline_;
  std::thread thread_;  // last: starts after the members above exist
};

class MpiBackend : public Backend {
 public:
  MpiBackend(MPI_Comm comm, int rank, int size, const CommOptions& options)
      : comm_(comm),
        rank_(rank),
        size_(size),
        watchdog_(rank, options.timeout, options.host.stuck_op) {}
  ~MpiBackend() override { MPI_Comm_free(&comm_); }

  const std::string& name() const override { return name_; }
  int rank() const override { return rank_; }
  int world_size() const override { return size_; }

  absl::Status AllReduce(void* buf, size_t count, DType d, ReduceOp op, uint32_t tag) override {
    if (auto st = CheckCount(count); !st.ok()) return st;
    watchdog_.Arm("all_reduce", tag);
    int rc =
        MPI_Allreduce(MPI_IN_PLACE, buf, static_cast<int>(count), MpiType(d), MpiOp(d, op), comm_);
    watchdog_.Disarm();
    return Check(rc, "all_reduce");
  }
  absl::Status AllGather(const void* send, void* recv, size_t count, DType d,
                         uint32_t tag) override {
    if (auto st = CheckCount(count); !st.ok()) return st;
    watchdog_.Arm("all_gather", tag);
    int rc = MPI_Allgather(send, static_cast<int>(count), MpiType(d), recv, static_cast<int>(count),
                           MpiType(d), comm_);
    watchdog_.Disarm();
    return Check(rc, "all_gather");
  }
  absl::Status ReduceScatter(const void* send, void* recv, size_t count, DType d, ReduceOp op,
                             uint32_t tag) override {
    if (auto st = CheckCount(count * size_); !st.ok()) return st;
    watchdog_.Arm("reduce_scatter", tag);
    int rc = MPI_Reduce_scatter_block(send, recv, static_cast<int>(count), MpiType(d), MpiOp(d, op),
                                      comm_);
    watchdog_.Disarm();
    return Check(rc, "reduce_scatter");
  }
  absl::Status Broadcast(void* buf, size_t count, DType d, int root, uint32_t tag) override {
    if (auto st = CheckCount(count); !st.ok()) return st;
    watchdog_.Arm("broadcast", tag);
    int rc = MPI_Bcast(buf, static_cast<int>(count), MpiType(d), root, comm_);
    watchdog_.Disarm();
    return Check(rc, "broadcast");
  }
  absl::Status AllToAll(const void* send, void* recv, size_t count, DType d,
                        uint32_t tag) override {
    if (auto st = CheckCount(count * size_); !st.ok()) return st;
    watchdog_.Arm("all_to_all", tag);
    int rc = MPI_Alltoall(send, static_cast<int>(count), MpiType(d), recv, static_cast<int>(count),
                          MpiType(d), comm_);
    watchdog_.Disarm();
    return Check(rc, "all_to_all");
  }
  absl::Status Barrier(uint32_t tag) override {
    if (auto st = CheckCount(0); !st.ok()) return st;
    watchdog_.Arm("barrier", tag);
    int rc = MPI_Barrier(comm_);
    watchdog_.Disarm();
    return Check(rc, "barrier");
  }
  absl::Status Send(const void* buf, size_t count, DType d, int dst, int tag) override {
    if (auto st = CheckCount(count); !st.ok()) return st;
    watchdog_.Arm("send", 0);
    int rc = MPI_Send(buf, static_cast<int>(count), MpiType(d), dst, tag, comm_);
    watchdog_.Disarm();
    return Check(rc, "send");
  }
  absl::Status Recv(void* buf, size_t count, DType d, int src, int tag) override {
    if (auto st = CheckCount(count); !st.ok()) return st;
    watchdog_.Arm("recv", 0);
    int rc = MPI_Recv(buf, static_cast<int>(count), MpiType(d), src, tag, comm_, MPI_STATUS_IGNORE);
    watchdog_.Disarm();
    return Check(rc, "recv");
  }

 private:
  const std::string name_ = "mpi";
  MPI_Comm comm_;
  const int rank_;
  const int size_;
  Watchdog watchdog_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> CreateMpiBackend(const CommOptions& options) {
  if (auto st = InitMpiOnce(); !st.ok()) return st;
  MPI_Comm comm;
  if (MPI_Comm_dup(MPI_COMM_WORLD, &comm) != MPI_SUCCESS) {
    return absl::UnavailableError("MPI_Comm_dup failed");
  }
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  if (options.world_size != 1 && options.world_size != size) {
    MPI_Comm_free(&comm);
    return absl::InvalidArgumentError(absl::StrCat(
        "world sizes disagree: WORLD_SIZE=", options.world_size, " but MPI_COMM_WORLD has ", size,
        " rank(s); start MPI jobs with mpirun -np ", options.world_size));
  }
  if (options.world_size != 1 && options.rank != rank) {
    MPI_Comm_free(&comm);
    return absl::InvalidArgumentError(
        absl::StrCat("RANK=", options.rank, " but this process is MPI rank ", rank));
  }
  return std::unique_ptr<Backend>(new MpiBackend(comm, rank, size, options));
}

}  // namespace trainscope::comm
