// Backend: the engine adapter behind Communicator (one per engine: gloo/, mpi/, nccl/).
// A backend runs one op at a time, on whichever thread Communicator calls it from (never
// two at once). Each op either finishes within `timeout` or returns an error; engine
// exceptions never escape. Communicator adds the op name, sequence number and rank to
// error messages, so a backend only says what the engine said.
#ifndef TRAINSCOPE_SRC_COMM_BACKEND_H_
#define TRAINSCOPE_SRC_COMM_BACKEND_H_

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "trainscope/comm/comm.h"

namespace trainscope::comm {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const std::string& name() const = 0;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;

  // `tag` is the collective's sequence number (OpRecord::collective_seq: from 1, distinct
  // per collective, the same on every rank however many sends and receives each rank made;
  // wraps at 2^32), for engines that match messages by tag. Send/Recv get the caller's own
  // tag instead; they do not advance the collective numbers.
  virtual absl::Status AllReduce(void* buf, size_t count, DType dtype, ReduceOp op,
                                 uint32_t tag) = 0;
  virtual absl::Status AllGather(const void* send, void* recv, size_t count, DType dtype,
                                 uint32_t tag) = 0;
  virtual absl::Status ReduceScatter(const void* send, void* recv, size_t count, DType dtype,
                                     ReduceOp op, uint32_t tag) = 0;
  virtual absl::Status Broadcast(void* buf, size_t count, DType dtype, int root, uint32_t tag) = 0;
  virtual absl::Status AllToAll(const void* send, void* recv, size_t count, DType dtype,
                                uint32_t tag) = 0;
  virtual absl::Status Barrier(uint32_t tag) = 0;
  virtual absl::Status Send(const void* buf, size_t count, DType dtype, int dst, int tag) = 0;
  virtual absl::Status Recv(void* buf, size_t count, DType dtype, int src, int tag) = 0;

  // After an op failed: which ranks the backend knows to be gone, as text for the error
  // ("rank 1 exited (its store connection closed)"), waiting at most `wait` for the news.
  // `seq` is the failed op's collective_seq (for a send/recv, that of the last collective
  // before it): the same value on every rank that failed at the same point. Empty when
  // unknown.
  virtual std::string DescribeMissingRanks(int64_t seq, std::chrono::milliseconds wait) {
    return "";
  }
};

// Factories of the optional backend targets (defined only when the target is built).
absl::StatusOr<std::unique_ptr<Backend>> CreateGlooBackend(const CommOptions& options);
absl::StatusOr<std::unique_ptr<Backend>> CreateMpiBackend(const CommOptions& options);
absl::StatusOr<std::unique_ptr<Backend>> CreateNcclBackend(const CommOptions& options);

}  // namespace trainscope::comm

#endif  // TRAINSCOPE_SRC_COMM_BACKEND_H_
