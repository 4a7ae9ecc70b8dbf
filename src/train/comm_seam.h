// The trainer's one path to the communicator (private to the train module): every comm op
// the trainer issues goes through here, which
//  - tags it for the flight recorder with a ScopedCallerTag naming step, phase and bucket
//    ("step 5 grad bucket 2", "step 5 loss all_reduce"), taken on the issuing thread, so
//    an async all-reduce carries the tag of the moment it was issued;
//  - applies --inject faults (train/inject.h) at the first collective of the injected step
//    on the injected rank: the recorder then sees exactly what was called.
// Used from the training thread only (autograd hooks run on it for CPU tensors).
#ifndef TRAINSCOPE_SRC_TRAIN_COMM_SEAM_H_
#define TRAINSCOPE_SRC_TRAIN_COMM_SEAM_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "trainscope/comm/comm.h"
#include "trainscope/train/inject.h"

namespace trainscope::train {

class CommSeam {
 public:
  // `comm` is not owned and must outlive this object. `stop` (may be null) cuts an injected
  // sleep short. `on_notice` (may be empty) hears of each injected fault as it fires:
  // "--inject <text>: rank R, step S" (TrainOptions::on_rank_notice).
  CommSeam(comm::Communicator* comm, std::vector<Injection> injections,
           const std::atomic<int>* stop, std::function<void(const std::string&)> on_notice);

  comm::Communicator& comm() { return *comm_; }
  int rank() const { return comm_->rank(); }
  int world_size() const { return comm_->world_size(); }
  // The step now running (0 before the first: the parameter broadcast).
  void BeginStep(int step);
  int step() const { return step_; }

  // fp32 ops, tagged `tag`. An injected fault returns a completed Work / the status of the
  // op issued instead.
  std::unique_ptr<comm::Work> AllReduceAsync(float* buf, size_t count, const std::string& tag);
  absl::Status AllReduce(float* buf, size_t count, const std::string& tag);
  absl::Status Broadcast(float* buf, size_t count, int root, const std::string& tag);
  absl::Status Barrier(const std::string& tag);
  // Any dtype (compressed gradients: fp16/bf16 all-reduce, top-k's int32 indices and fp32
  // values all-gathered); an injected fault applies to these as to the fp32 ops.
  std::unique_ptr<comm::Work> AllReduceAsync(void* buf, size_t count, comm::DType dtype,
                                             const std::string& tag);
  absl::Status AllReduce(void* buf, size_t count, comm::DType dtype, const std::string& tag);
  absl::Status AllGather(const void* send, void* recv, size_t count, comm::DType dtype,
                         const std::string& tag);

 private:
  // The injection for this rank's first collective of this step, if any (once).
  const Injection* Due();
  // Runs `inj` in place of an all-reduce of buf[0..count); returns the status of what it
  // issued. Sleep returns OkStatus with *proceed = true (the real op follows), or Cancelled
  // when a stop was asked for meanwhile (the op is then never issued); exit does not return.
  // Wrong dtype: float16 over an fp32 buffer, else fp32 over half the count (never past
  // the buffer).
  absl::Status Apply(const Injection& inj, void* buf, size_t count, comm::DType dtype,
                     bool* proceed);

  comm::Communicator* comm_;
  std::vector<Injection> injections_;  // this rank's only
  const std::atomic<int>* stop_;
  const std::function<void(const std::string&)> on_notice_;
  int step_ = 0;
  int first_done_step_ = -1;  // the step whose first collective was issued
};

}  // namespace trainscope::train

#endif  // TRAINSCOPE_SRC_TRAIN_COMM_SEAM_H_
