// trainscope::comm — one narrow collective interface over real engines (Gloo over TCP,
// OpenMPI, NCCL). The trainer, `selftest comm`, and the flight recorder (later) use only
// this header.
//
// Contract:
//  - Buffers are contiguous host memory (device memory for NCCL) of `count` elements of
//    `dtype`. Reductions over bf16/fp16 accumulate as the engine does.
//  - Every blocking call ends within the communicator's op timeout (CommOptions::timeout,
//    default 60 s, env TRAINSCOPE_COMM_TIMEOUT_S): a peer that died or never arrives
//    yields DeadlineExceeded/Unavailable naming the op, sequence number and, where the
//    engine can tell, the missing rank. Never hangs.
//  - Every op, synchronous or asynchronous, passes through Communicator::Dispatch(), the
//    single place that assigns the sequence number, takes timestamps and notifies the
//    OpObserver (the flight recorder hook).
//  - A Communicator is used by one thread at a time, except that async Work may be waited
//    on from that thread while the communicator's progress thread runs it.
#ifndef TRAINSCOPE_COMM_COMM_H_
#define TRAINSCOPE_COMM_COMM_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

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

struct CommOptions {
  std::string backend = "gloo";  // "gloo" | "mpi" | "nccl"
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::chrono::milliseconds timeout{60000};  // every blocking op and the rendezvous
  std::string iface;  // network interface for gloo (empty: resolve master_addr's route)
};

// Reads the torchrun conventions (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE), or OMPI_COMM_WORLD_* under mpirun, and TRAINSCOPE_COMM_TIMEOUT_S.
// Missing variables mean a single-process world. InvalidArgument on malformed values.
absl::StatusOr<CommOptions> OptionsFromEnvironment(CommOptions defaults = {});

// What the flight recorder logs for each op.
struct OpRecord {
  int64_t seq = 0;  // per-communicator sequence number, from 0, in issue order
  OpType op = OpType::kBarrier;
  DType dtype = DType::kFloat32;
  size_t count = 0;  // elements (per rank for all_gather / reduce_scatter / all_to_all)
  int peer = -1;     // root for broadcast, peer for send/recv
  int rank = 0;
  int world_size = 1;
  int64_t start_ns = 0;  // CLOCK_MONOTONIC
  int64_t end_ns = 0;
  absl::Status status;
};

class OpObserver {
 public:
  virtual ~OpObserver() = default;
  virtual void OnStart(const OpRecord& record) = 0;
  virtual void OnEnd(const OpRecord& record) = 0;  // status and end_ns set
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
  // disagree, unknown or unbuilt backend).
  static absl::StatusOr<std::unique_ptr<Communicator>> Create(const CommOptions& options);
  ~Communicator();

  int rank() const;
  int world_size() const;
  const std::string& backend_name() const;
  const CommOptions& options() const { return options_; }

  // Not owned; may be null. Called from the thread that runs the op.
  void set_observer(OpObserver* observer) { observer_ = observer; }

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
  std::unique_ptr<Work> AllReduceAsync(void* buf, size_t count, DType dtype,
                                       ReduceOp op = ReduceOp::kSum);

 private:
  Communicator(CommOptions options, std::unique_ptr<Backend> backend);
  // The single place every op passes through: seq, timestamps, observer, error context.
  absl::Status Dispatch(OpRecord record, const std::function<absl::Status()>& run);

  CommOptions options_;
  std::unique_ptr<Backend> backend_;
  OpObserver* observer_ = nullptr;
  int64_t next_seq_ = 0;
  struct AsyncQueue;
  std::unique_ptr<AsyncQueue> async_;
};

// Backends compiled into this binary, e.g. {"gloo", "mpi"}.
std::vector<std::string> AvailableBackends();

}  // namespace trainscope::comm

#endif  // TRAINSCOPE_COMM_COMM_H_
