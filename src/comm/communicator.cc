// Communicator: validation, the Dispatch() choke point, and the async progress thread.
//
// Threading: synchronous ops run on the calling thread, but only after the async queue has
// drained, so an engine never sees two ops at once and ops reach it in issue order on every
// rank. Async ops run FIFO on one progress thread per communicator, started lazily.
// After any op fails, the engine's state is unknown (gloo pairs are closed, MPI may have a
// half-done collective), so the communicator is marked broken and later ops fail at once
// with FailedPrecondition naming the op that broke it.
#include <signal.h>
#include <time.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "comm/backend.h"
#include "trainscope/comm/comm.h"

namespace trainscope::comm {
namespace {

int64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

struct Task {
  std::function<absl::Status()> run;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  absl::Status status;
};

class WorkImpl : public Work {
 public:
  explicit WorkImpl(std::shared_ptr<Task> task) : task_(std::move(task)) {}
  absl::Status Wait() override {
    std::unique_lock<std::mutex> lock(task_->mu);
    task_->cv.wait(lock, [&] { return task_->done; });
    return task_->status;
  }
  bool Done() override {
    std::lock_guard<std::mutex> lock(task_->mu);
    return task_->done;
  }

 private:
  std::shared_ptr<Task> task_;
};

}  // namespace

struct Communicator::AsyncQueue {
  std::mutex mu;
  std::condition_variable cv;       // new task or stop
  std::condition_variable idle_cv;  // queue drained
  std::deque<std::shared_ptr<Task>> tasks;
  bool busy = false;
  bool stop = false;
  std::thread thread;
  // Set once by the first failing op; guarded by mu.
  std::string broken_by;

  void Loop() {
    std::unique_lock<std::mutex> lock(mu);
    while (true) {
      cv.wait(lock, [&] { return stop || !tasks.empty(); });
      if (tasks.empty()) return;  // stop requested and drained
      std::shared_ptr<Task> task = tasks.front();
      tasks.pop_front();
      busy = true;
      lock.unlock();
      absl::Status st = task->run();
      {
        std::lock_guard<std::mutex> tlock(task->mu);
        task->status = std::move(st);
        task->done = true;
      }
      task->cv.notify_all();
      lock.lock();
      busy = false;
      if (tasks.empty()) idle_cv.notify_all();
    }
  }

  void Drain() {
    std::unique_lock<std::mutex> lock(mu);
    idle_cv.wait(lock, [&] { return tasks.empty() && !busy; });
  }
};

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::Create(const CommOptions& options) {
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", options.rank, " is out of range for world size ", options.world_size));
  }
  if (options.timeout.count() <= 0) {
    return absl::InvalidArgumentError("comm timeout must be positive");
  }
  // A peer that dies makes writes fail with EPIPE; the signal would kill us instead of
  // letting the op return an error naming the peer.
  struct sigaction old {};
  if (sigaction(SIGPIPE, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) {
    signal(SIGPIPE, SIG_IGN);
  }
  CommOptions opts = options;
  if (opts.world_size == 1 && opts.backend == "gloo") opts.master_port = 0;  // nothing to meet
  absl::StatusOr<std::unique_ptr<Backend>> backend = absl::InvalidArgumentError(
      absl::StrCat("unknown comm backend '", options.backend, "' (expected gloo, mpi or nccl)"));
  if (opts.backend == "gloo") {
#ifdef TS_COMM_HAVE_GLOO
    backend = CreateGlooBackend(opts);
#else
    backend = absl::InvalidArgumentError("the gloo backend is not built into this binary");
#endif
  } else if (opts.backend == "mpi") {
#ifdef TS_COMM_HAVE_MPI
    backend = CreateMpiBackend(opts);
#else
    backend = absl::InvalidArgumentError(
        "the mpi backend is not built into this binary (configure with -DTS_WITH_MPI=ON)");
#endif
  } else if (opts.backend == "nccl") {
#ifdef TS_COMM_HAVE_NCCL
    backend = CreateNcclBackend(opts);
#else
    backend = absl::InvalidArgumentError(
        "the nccl backend is not built into this binary (needs the CUDA toolkit and NCCL)");
#endif
  }
  if (!backend.ok()) return backend.status();
  opts.rank = (*backend)->rank();
  opts.world_size = (*backend)->world_size();
  return std::unique_ptr<Communicator>(new Communicator(opts, std::move(*backend)));
}

Communicator::Communicator(CommOptions options, std::unique_ptr<Backend> backend)
    : options_(std::move(options)),
      backend_(std::move(backend)),
      async_(std::make_unique<AsyncQueue>()) {}

Communicator::~Communicator() {
  {
    std::lock_guard<std::mutex> lock(async_->mu);
    async_->stop = true;
  }
  async_->cv.notify_all();
  if (async_->thread.joinable()) async_->thread.join();
  backend_.reset();
}

int Communicator::rank() const { return backend_->rank(); }
int Communicator::world_size() const { return backend_->world_size(); }
const std::string& Communicator::backend_name() const { return backend_->name(); }

absl::Status Communicator::Dispatch(OpRecord record, const std::function<absl::Status()>& run) {
  record.seq = next_seq_++;
  record.rank = rank();
  record.world_size = world_size();
  auto describe = [&] {
    std::string what = absl::StrCat(OpName(record.op), " #", record.seq);
    if (record.op != OpType::kBarrier) {
      absl::StrAppend(&what, " (", record.count, " x ", DTypeName(record.dtype));
      if (record.peer >= 0) {
        absl::StrAppend(&what, record.op == OpType::kBroadcast ? ", root " : ", peer ",
                        record.peer);
      }
      absl::StrAppend(&what, ")");
    }
    return absl::StrCat(what, " on rank ", record.rank, " of ", record.world_size, " (",
                        backend_->name(), ")");
  };
  {
    std::lock_guard<std::mutex> lock(async_->mu);
    if (!async_->broken_by.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat(describe(), " not run: the communicator is broken since ", async_->broken_by,
                       " failed; create a new one"));
    }
  }
  record.start_ns = MonotonicNs();
  if (observer_ != nullptr) observer_->OnStart(record);
  absl::Status st = run();
  record.end_ns = MonotonicNs();
  if (!st.ok() && st.code() != absl::StatusCode::kInvalidArgument) {
    std::string op = describe();
    auto wait = std::min(std::chrono::milliseconds(1000), options_.timeout / 4);
    std::string missing = backend_->DescribeMissingRanks(record.seq, wait);
    std::string prefix =
        st.code() == absl::StatusCode::kDeadlineExceeded
            ? absl::StrCat(op, " did not finish within ", options_.timeout.count() / 1000.0, " s")
            : absl::StrCat(op, " failed");
    st = absl::Status(st.code(), absl::StrCat(prefix, missing.empty() ? "" : ": " + missing, " [",
                                              st.message(), "]"));
    std::lock_guard<std::mutex> lock(async_->mu);
    async_->broken_by = absl::StrCat(OpName(record.op), " #", record.seq);
  } else if (!st.ok()) {
    st = absl::InvalidArgumentError(absl::StrCat(describe(), ": ", st.message()));
  }
  record.status = st;
  if (observer_ != nullptr) observer_->OnEnd(record);
  return st;
}

namespace {

absl::Status CheckPeer(int peer, int world_size, const char* what) {
  if (peer < 0 || peer >= world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " ", peer, " is out of range for world size ", world_size));
  }
  return absl::OkStatus();
}

absl::Status CheckBuf(const void* p, size_t count) {
  if (p == nullptr && count > 0) return absl::InvalidArgumentError("null buffer");
  return absl::OkStatus();
}

OpRecord Record(OpType op, DType dtype, size_t count, int peer = -1) {
  OpRecord r;
  r.op = op;
  r.dtype = dtype;
  r.count = count;
  r.peer = peer;
  return r;
}

}  // namespace

absl::Status Communicator::AllReduce(void* buf, size_t count, DType dtype, ReduceOp op) {
  async_->Drain();
  return Dispatch(Record(OpType::kAllReduce, dtype, count), [&]() -> absl::Status {
    if (auto st = CheckBuf(buf, count); !st.ok()) return st;
    return backend_->AllReduce(buf, count, dtype, op, static_cast<uint32_t>(next_seq_));
  });
}

absl::Status Communicator::AllGather(const void* send, void* recv, size_t count, DType dtype) {
  async_->Drain();
  return Dispatch(Record(OpType::kAllGather, dtype, count), [&]() -> absl::Status {
    if (auto st = CheckBuf(send, count); !st.ok()) return st;
    if (auto st = CheckBuf(recv, count); !st.ok()) return st;
    return backend_->AllGather(send, recv, count, dtype, static_cast<uint32_t>(next_seq_));
  });
}

absl::Status Communicator::ReduceScatter(const void* send, void* recv, size_t count, DType dtype,
                                         ReduceOp op) {
  async_->Drain();
  return Dispatch(Record(OpType::kReduceScatter, dtype, count), [&]() -> absl::Status {
    if (auto st = CheckBuf(send, count); !st.ok()) return st;
    if (auto st = CheckBuf(recv, count); !st.ok()) return st;
    return backend_->ReduceScatter(send, recv, count, dtype, op, static_cast<uint32_t>(next_seq_));
  });
}

absl::Status Communicator::Broadcast(void* buf, size_t count, DType dtype, int root) {
  async_->Drain();
  return Dispatch(Record(OpType::kBroadcast, dtype, count, root), [&]() -> absl::Status {
    if (auto st = CheckPeer(root, world_size(), "broadcast root"); !st.ok()) return st;
    if (auto st = CheckBuf(buf, count); !st.ok()) return st;
    return backend_->Broadcast(buf, count, dtype, root, static_cast<uint32_t>(next_seq_));
  });
}

absl::Status Communicator::AllToAll(const void* send, void* recv, size_t count, DType dtype) {
  async_->Drain();
  return Dispatch(Record(OpType::kAllToAll, dtype, count), [&]() -> absl::Status {
    if (auto st = CheckBuf(send, count); !st.ok()) return st;
    if (auto st = CheckBuf(recv, count); !st.ok()) return st;
    return backend_->AllToAll(send, recv, count, dtype, static_cast<uint32_t>(next_seq_));
  });
}

absl::Status Communicator::Barrier() {
  async_->Drain();
  return Dispatch(Record(OpType::kBarrier, DType::kFloat32, 0), [&]() -> absl::Status {
    return backend_->Barrier(static_cast<uint32_t>(next_seq_));
  });
}

absl::Status Communicator::Send(const void* buf, size_t count, DType dtype, int dst, int tag) {
  async_->Drain();
  return Dispatch(Record(OpType::kSend, dtype, count, dst), [&]() -> absl::Status {
    if (auto st = CheckPeer(dst, world_size(), "send destination"); !st.ok()) return st;
    if (dst == rank()) return absl::InvalidArgumentError("send to self");
    if (tag < 0) return absl::InvalidArgumentError("negative tag");
    if (auto st = CheckBuf(buf, count); !st.ok()) return st;
    return backend_->Send(buf, count, dtype, dst, tag);
  });
}

absl::Status Communicator::Recv(void* buf, size_t count, DType dtype, int src, int tag) {
  async_->Drain();
  return Dispatch(Record(OpType::kRecv, dtype, count, src), [&]() -> absl::Status {
    if (auto st = CheckPeer(src, world_size(), "recv source"); !st.ok()) return st;
    if (src == rank()) return absl::InvalidArgumentError("recv from self");
    if (tag < 0) return absl::InvalidArgumentError("negative tag");
    if (auto st = CheckBuf(buf, count); !st.ok()) return st;
    return backend_->Recv(buf, count, dtype, src, tag);
  });
}

std::unique_ptr<Work> Communicator::AllReduceAsync(void* buf, size_t count, DType dtype,
                                                   ReduceOp op) {
  auto task = std::make_shared<Task>();
  task->run = [this, buf, count, dtype, op]() {
    return Dispatch(Record(OpType::kAllReduce, dtype, count), [&]() -> absl::Status {
      if (auto st = CheckBuf(buf, count); !st.ok()) return st;
      return backend_->AllReduce(buf, count, dtype, op, static_cast<uint32_t>(next_seq_));
    });
  };
  {
    std::lock_guard<std::mutex> lock(async_->mu);
    if (!async_->thread.joinable()) {
      async_->thread = std::thread([q = async_.get()] { q->Loop(); });
    }
    async_->tasks.push_back(task);
  }
  async_->cv.notify_one();
  return std::make_unique<WorkImpl>(std::move(task));
}

std::vector<std::string> AvailableBackends() {
  std::vector<std::string> out;
#ifdef TS_COMM_HAVE_GLOO
  out.push_back("gloo");
#endif
#ifdef TS_COMM_HAVE_MPI
  out.push_back("mpi");
#endif
#ifdef TS_COMM_HAVE_NCCL
  out.push_back("nccl");
#endif
  return out;
}

}  // namespace trainscope::comm
