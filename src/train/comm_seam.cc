// The trainer's comm seam: caller tags and fault injection (see comm_seam.h).
#include "train/comm_seam.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "trainscope/comm/flight_recorder.h"

namespace trainscope::train {
namespace {

// A Work that finished before it was returned (an injected fault ran instead).
class DoneWork : public comm::Work {
 public:
  explicit DoneWork(absl::Status status) : status_(std::move(status)) {}
  absl::Status Wait() override { return status_; }
  bool Done() override { return true; }

 private:
  absl::Status status_;
};

}  // namespace

CommSeam::CommSeam(comm::Communicator* comm, std::vector<Injection> injections,
                   const std::atomic<int>* stop, std::function<void(const std::string&)> on_notice)
    : comm_(comm), stop_(stop), on_notice_(std::move(on_notice)) {
  // Only the comm faults are applied here (the numeric ones belong to the step's math).
  for (Injection& i : injections)
    if (i.rank == comm->rank() && IsCommFault(i.kind)) injections_.push_back(std::move(i));
}

void CommSeam::BeginStep(int step) { step_ = step; }

const Injection* CommSeam::Due() {
  if (first_done_step_ == step_) return nullptr;
  first_done_step_ = step_;
  for (const Injection& i : injections_)
    if (i.step == step_) return &i;
  return nullptr;
}

absl::Status CommSeam::Apply(const Injection& inj, void* buf, size_t count, comm::DType dtype,
                             bool* proceed) {
  *proceed = false;
  if (on_notice_) {
    on_notice_(absl::StrCat("--inject ", inj.text, ": rank ", comm_->rank(), ", step ", step_));
  }
  switch (inj.kind) {
    case InjectKind::kSkipCollective:
      return absl::OkStatus();
    case InjectKind::kWrongOp:
      return comm_->Broadcast(buf, count, dtype, /*root=*/0);
    case InjectKind::kWrongSize:
      return comm_->AllReduce(buf, count / 2, dtype);
    case InjectKind::kWrongDtype:
      // fp32: the same count as float16, half the bytes; 16-bit: fp32 over half the count.
      if (dtype == comm::DType::kFloat32)
        return comm_->AllReduce(buf, count, comm::DType::kFloat16);
      return comm_->AllReduce(buf, count / 2, comm::DType::kFloat32);
    case InjectKind::kSleep: {
      const auto until = std::chrono::steady_clock::now() +
                         std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                             std::chrono::duration<double>(inj.seconds));
      while (std::chrono::steady_clock::now() < until) {
        if (stop_ != nullptr && stop_->load() != 0) {
          // Stopped while "hanging": the collective was never entered, and stays so.
          return absl::CancelledError(
              absl::StrCat("stopped during --inject ", inj.text, " on rank ", comm_->rank()));
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      *proceed = true;
      return absl::OkStatus();
    }
    case InjectKind::kExit:
      std::fflush(stdout);
      ::_exit(inj.code);
    default:  // numeric faults never reach the seam (see the constructor)
      break;
  }
  return absl::OkStatus();
}

std::unique_ptr<comm::Work> CommSeam::AllReduceAsync(float* buf, size_t count,
                                                     const std::string& tag) {
  return AllReduceAsync(buf, count, comm::DType::kFloat32, tag);
}

std::unique_ptr<comm::Work> CommSeam::AllReduceAsync(void* buf, size_t count, comm::DType dtype,
                                                     const std::string& tag) {
  comm::ScopedCallerTag scoped(tag);
  if (const Injection* inj = Due()) {
    bool proceed = false;
    absl::Status st = Apply(*inj, buf, count, dtype, &proceed);
    if (!proceed) return std::make_unique<DoneWork>(st);
  }
  return comm_->AllReduceAsync(buf, count, dtype, comm::ReduceOp::kSum);
}

absl::Status CommSeam::AllReduce(float* buf, size_t count, const std::string& tag) {
  return AllReduce(buf, count, comm::DType::kFloat32, tag);
}

absl::Status CommSeam::AllReduce(void* buf, size_t count, comm::DType dtype,
                                 const std::string& tag) {
  comm::ScopedCallerTag scoped(tag);
  if (const Injection* inj = Due()) {
    bool proceed = false;
    absl::Status st = Apply(*inj, buf, count, dtype, &proceed);
    if (!proceed) return st;
  }
  return comm_->AllReduce(buf, count, dtype);
}

absl::Status CommSeam::AllGather(const void* send, void* recv, size_t count, comm::DType dtype,
                                 const std::string& tag) {
  comm::ScopedCallerTag scoped(tag);
  if (const Injection* inj = Due()) {
    // The fault replaces the gather with an op on this rank's own block of recv.
    bool proceed = false;
    std::memcpy(static_cast<char*>(recv) + comm_->rank() * count * comm::DTypeSize(dtype), send,
                count * comm::DTypeSize(dtype));
    absl::Status st = Apply(*inj, recv, count, dtype, &proceed);
    if (!proceed) return st;
  }
  return comm_->AllGather(send, recv, count, dtype);
}

absl::Status CommSeam::Broadcast(float* buf, size_t count, int root, const std::string& tag) {
  comm::ScopedCallerTag scoped(tag);
  return comm_->Broadcast(buf, count, comm::DType::kFloat32, root);
}

absl::Status CommSeam::Barrier(const std::string& tag) {
  comm::ScopedCallerTag scoped(tag);
  return comm_->Barrier();
}

}  // namespace trainscope::train
