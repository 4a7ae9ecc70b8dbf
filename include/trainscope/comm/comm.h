// trainscope::comm — one narrow collective interface over real engines (Gloo over TCP,
// OpenMPI, NCCL). The trainer, `selftest comm`, and the flight recorder (flight_recorder.h)
// use only this header.
//
// Contract:
//  - Buffers are contiguous host memory (device memory for NCCL) of `count` elements of
//    `dtype`. Reductions over bf16/fp16 accumulate as the engine does.
//  - Every blocking call ends within the communicator's op timeout (CommOptions::timeout,
//    default 60 s, env TRAINSCOPE_COMM_TIMEOUT_S): a peer that died or never arrives
//    yields DeadlineExceeded/Unavailable naming the op, sequence number and, where the
//    engine can tell, the missing rank. Never hangs; except that MPI cannot cancel a
//    blocking call: an mpi op past its timeout is reported to CommHost::stuck_op, whose
//    host ends the job (below).
//  - The library never writes to the terminal and never ends the process: what it has to
//    say beyond a call's Status goes to the host's CommHost callbacks.
//  - Every op, synchronous or asynchronous, passes through Communicator::Dispatch(), the
//    single place that assigns the sequence numbers, takes timestamps, fills the flight
//    recorder and notifies the OpObservers. Sequence numbers follow c10d: collectives and
//    point-to-point ops count separately (OpRecord::collective_seq / p2p_seq), so however
//    many sends and receives each rank made, the k-th collective has the same number (and
//    the same engine tag) on every rank.
//  - A Communicator is used by one thread at a time, except that async Work may be waited
//    on from that thread while the communicator's progress thread runs it.
#ifndef TRAINSCOPE_COMM_COMM_H_
#define TRAINSCOPE_COMM_COMM_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace trainscope::comm {

enum class DType { kFloat32, kBFloat16, kFloat16, kInt32, kInt64 };
enum class ReduceOp { kSum, kMax, kMin };
enum class OpType {
  kAllReduce,
  kAllGather,
  kReduceScatter,
  kBroadcast,
  kAllToAll,
  kBarrier,
  kSend,
  kRecv
};

size_t DTypeSize(DType dtype);
const char* DTypeName(DType dtype);  // "float32", "bfloat16", "float16", "int32", "int64"
absl::StatusOr<DType> ParseDType(const std::string& name);  // also "fp32", "bf16", ...
const char* OpName(OpType op);  // "all_reduce", "all_gather", "reduce_scatter", ...
absl::StatusOr<OpType> ParseOp(const std::string& name);
// True for kSend and kRecv (counted by p2p_seq, not collective_seq).
inline bool IsP2P(OpType op) { return op == OpType::kSend || op == OpType::kRecv; }

class FlightRecorder;  // flight_recorder.h

// An op of backend "mpi" still running when its timeout passed (CommHost::stuck_op).
struct StuckOp {
  // "trainscope comm (mpi): all_reduce #3 on rank 0 did not finish within 2 s; MPI has no
  // per-op timeout, so the job is aborted (MPI_Abort). A peer is dead, stopped, or stuck in
  // other work."
  std::string line;
  // MPI_Abort(MPI_COMM_WORLD, 1): mpirun then stops every rank. Does not return.
  std::function<void()> abort_job;
};

// What a communicator tells the process that hosts it, beyond each call's Status: the host
// (the executable) decides where the words go and how a stuck job ends. Each may be empty.
struct CommHost {
  // One-line notices, on any thread (rank 0's rendezvous store, gloo and nccl: the first
  // refused connection of each kind, "rendezvous store: <peer> ..."); must be quick. Empty:
  // not said. The trainscope executables print "trainscope: <line>" on stderr.
  std::function<void(const std::string& line)> notice;
  // Backend "mpi": called once, on the backend's watchdog thread, when an op outlived the
  // timeout. The op stays blocked (MPI cannot cancel it) until the job ends: the trainscope
  // executables print op.line on stderr and call op.abort_job. Empty: nothing is said and
  // the op blocks until MPI returns it, if ever.
  std::function<void(const StuckOp& op)> stuck_op;
};

struct CommOptions {
  std::string backend = "gloo";  // "gloo" | "mpi" | "nccl"
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::chrono::milliseconds timeout{60000};  // every blocking op and the rendezvous
  // network interface for gloo (empty: resolve master_addr's route); OptionsFromEnvironment
  // takes it from GLOO_SOCKET_IFNAME when empty
  std::string iface;
  // The job token presented to the rendezvous store (and, on rank 0, the one it demands);
  // unset: TRAINSCOPE_JOB_TOKEN (comm/store.h). JoinWorld (join.h) sets a fresh one under
  // torchrun.
  std::optional<std::string> job_token;
  // Rank 0 only, for backends that rendezvous through the store (gloo, nccl): called once
  // with the address its store actually listens on (master_port 0 = any free port), before
  // rank 0 connects to it; an error ends the join with that error. How JoinWorld tells the
  // other ranks where the store is when a launcher's own store holds MASTER_PORT (torchrun).
  // Called on the thread that calls Communicator::Create; must not block past `timeout`.
  std::function<absl::Status(const std::string& host, int port)> on_store_listening;

  // Flight recorder (flight_recorder.h): a ring of this communicator's last ops, dumped to
  // diagnose hangs. Measured at ~0.1 us per op (docs/PERFORMANCE.md), hence on by default.
  // 0 turns it off; at most FlightRecorder::kMaxCapacity.
  int flight_recorder_entries = 2000;
  // Record into this recorder (shared by several communicators of this rank, as c10d keeps
  // one per process) instead of creating one; flight_recorder_entries is then ignored.
  std::shared_ptr<FlightRecorder> flight_recorder;
  // The process group as the recorder names it (PyTorch's defaults for the world group).
  // Names must differ between communicators that share a recorder.
  std::string group_name = "0";
  std::string group_desc = "default_pg";
  // Where notices go and how a stuck mpi op ends (CommHost); JoinOptionsFromEnvironment keeps
  // the defaults' host.
  CommHost host;
};

// Reads the launcher's variables: the torchrun conventions (MASTER_ADDR, MASTER_PORT, RANK,
// WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE; trainscope launch, torchrun), OMPI_COMM_WORLD_*
// under mpirun, PMI_* (MPICH, Intel MPI), SLURM_* inside an srun step; and
// TRAINSCOPE_COMM_TIMEOUT_S and GLOO_SOCKET_IFNAME (the first entry, into `iface` when empty).
// = JoinOptionsFromEnvironment(defaults)->comm (join.h, which says how each launcher is
// recognised and how its ranks meet; join through JoinWorld, which also handles torchrun's
// agent store). Missing variables mean a single-process world. InvalidArgument on malformed
// values.
absl::StatusOr<CommOptions> OptionsFromEnvironment(CommOptions defaults = {});

// One op as Dispatch() sees it; what observers receive.
struct OpRecord {
  int64_t seq = 0;  // op id: every op of this communicator, from 0, in issue order
  // c10d's two counters, both per communicator (= process group). A collective gets the
  // next collective_seq (from 1; equal on every rank for the same collective; the engine
  // tag) and carries the p2p_seq of the last send/recv before it; a send/recv gets the
  // next p2p_seq (from 1) and carries the collective_seq of the last collective.
  int64_t collective_seq = 0;
  int64_t p2p_seq = 0;
  OpType op = OpType::kBarrier;
  DType dtype = DType::kFloat32;
  size_t count = 0;  // elements (per rank for all_gather / reduce_scatter / all_to_all)
  int peer = -1;     // root for broadcast, peer for send/recv
  int rank = 0;
  int world_size = 1;
  bool async = false;      // issued with *Async (run on the progress thread)
  int64_t enqueue_ns = 0;  // CLOCK_MONOTONIC: when the op was issued (async: enqueued)
  int64_t start_ns = 0;    // when the engine call began (0 until then)
  int64_t end_ns = 0;      // when it returned (0 until then)
  int64_t trace_id = -1;   // the flight recorder's record_id; -1 when not recorded
  absl::Status status;
};

// Sees every op of a communicator. Callbacks run on the thread that runs the op's stage:
// OnEnqueue on the issuing thread (the user's), OnStart/OnEnd on the thread that runs the
// op (the issuing thread for synchronous ops, the communicator's progress thread for
// *Async ops); each callback sees the ops in issue order, and no two callbacks of one
// communicator run at once. They are called with the communicator's observer lock held
// and inside the op's timing: they must be quick, must not block, and must not call
// AddObserver/RemoveObserver or any op of the communicator (that would deadlock). An op
// refused because the communicator is already broken gets OnEnqueue but no OnStart/OnEnd.
class OpObserver {
 public:
  virtual ~OpObserver() = default;
  virtual void OnEnqueue(const OpRecord& record) {}  // seq ids and enqueue_ns set
  virtual void OnStart(const OpRecord& record) = 0;  // start_ns set
  virtual void OnEnd(const OpRecord& record) = 0;    // status and end_ns set
};

// Handle for an op running on the communicator's progress thread.
class Work {
 public:
  virtual ~Work() = default;
  // Blocks until the op finished (or the communicator's timeout passed). Returns the op's
  // status. Idempotent.
  virtual absl::Status Wait() = 0;
  virtual bool Done() = 0;
};

class Backend;  // engine adapter, see src/comm/backend.h

class Communicator {
 public:
  // Connects to every other rank (rendezvous through a TCP store at master_addr:
  // master_port, which rank 0 hosts). Blocks up to options.timeout. Errors: Unavailable
  // (peer not reachable, port in use — naming the port), InvalidArgument (world sizes that
  // disagree, unknown or unbuilt backend). Leaves the process's signals alone: a peer that
  // dies makes the backend's socket writes raise SIGPIPE, so a host that wants that reported
  // as an op error naming the peer ignores SIGPIPE (CPython does at start-up; both trainscope
  // executables do, first thing in main()).
  static absl::StatusOr<std::unique_ptr<Communicator>> Create(const CommOptions& options);
  ~Communicator();

  int rank() const;
  int world_size() const;
  const std::string& backend_name() const;
  const CommOptions& options() const { return options_; }

  // Observers (not owned) are called in the order they were added; see OpObserver for
  // which thread calls them. Thread-safe, callable from any thread, also while ops run.
  // Adding one twice calls it twice. After RemoveObserver returns, the observer is not
  // called again and may be destroyed; removing one that is not there does nothing.
  void AddObserver(OpObserver* observer);
  void RemoveObserver(OpObserver* observer);

  // This communicator's flight recorder (possibly shared with other communicators, see
  // CommOptions::flight_recorder); null when off. It outlives the communicator as long as
  // the caller holds it, so a watchdog can dump it after the communicator is gone.
  const std::shared_ptr<FlightRecorder>& flight_recorder() const { return recorder_; }

  absl::Status AllReduce(void* buf, size_t count, DType dtype, ReduceOp op = ReduceOp::kSum);
  // recv holds world_size * count elements, rank r's block at r * count.
  absl::Status AllGather(const void* send, void* recv, size_t count, DType dtype);
  // send holds world_size * count elements; recv gets this rank's reduced block of count.
  absl::Status ReduceScatter(const void* send, void* recv, size_t count, DType dtype,
                             ReduceOp op = ReduceOp::kSum);
  absl::Status Broadcast(void* buf, size_t count, DType dtype, int root);
  // send and recv hold world_size * count elements; block j of send goes to rank j.
  absl::Status AllToAll(const void* send, void* recv, size_t count, DType dtype);
  absl::Status Barrier();
  absl::Status Send(const void* buf, size_t count, DType dtype, int dst, int tag = 0);
  absl::Status Recv(void* buf, size_t count, DType dtype, int src, int tag = 0);

  // Enqueues an all-reduce on the progress thread (FIFO with other async ops) and returns
  // at once; the buffer must stay alive and untouched until Wait() returns. Used by the
  // trainer to overlap gradient all-reduce with backward.
  // The op's enqueue time (OpRecord::enqueue_ns), its sequence numbers and its flight
  // recorder entry are taken here, on the calling thread; start and end on the progress
  // thread.
  std::unique_ptr<Work> AllReduceAsync(void* buf, size_t count, DType dtype,
                                       ReduceOp op = ReduceOp::kSum);

 private:
  using RunFn = absl::FunctionRef<absl::Status(const OpRecord&)>;  // the engine call
  Communicator(CommOptions options, std::unique_ptr<Backend> backend,
               std::shared_ptr<FlightRecorder> recorder, int pg_id);
  // The single place every op passes through, in two halves so that an async op is
  // stamped when it is issued: Schedule (issuing thread: sequence numbers, enqueue time,
  // flight recorder entry, OnEnqueue) and Execute (running thread: broken check, start,
  // the engine call, end, error context, OnStart/OnEnd). Dispatch = both, for sync ops.
  OpRecord Schedule(OpRecord record);
  absl::Status Execute(OpRecord& record, RunFn run);
  absl::Status Dispatch(OpRecord record, RunFn run);
  template <typename Fn>
  void Notify(Fn&& fn);

  // Constant after construction.
  const CommOptions options_;
  const std::unique_ptr<Backend> backend_;
  const std::shared_ptr<FlightRecorder> recorder_;  // null: off
  const int pg_id_;                                 // our group in recorder_
  // Touched only by Schedule, i.e. by the one thread that issues ops (see the contract).
  int64_t next_seq_ = 0;
  int64_t collective_seq_ = 0;
  int64_t p2p_seq_ = 0;
  // Guards observers_; held while observers are called.
  std::mutex observer_mu_;
  std::vector<OpObserver*> observers_;
  struct AsyncQueue;
  std::unique_ptr<AsyncQueue> async_;
};

// Backends compiled into this binary, e.g. {"gloo", "mpi"}.
std::vector<std::string> AvailableBackends();

}  // namespace trainscope::comm

#endif  // TRAINSCOPE_COMM_COMM_H_
