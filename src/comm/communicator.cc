// Communicator: validation, the Dispatch() choke point, and the async progress thread.
//
// Threading: synchronous ops run on the calling thread, but only after the async queue has
// drained, so an engine never sees two ops at once and ops reach it in issue order on every
// rank. Async ops run FIFO on one progress thread per communicator, started lazily.
// Sequence numbers are assigned when an op is issued (Schedule), on the one issuing
// thread, so they need no lock; the progress thread only reads the copy in its OpRecord.
// After any op fails, the engine's state is unknown (gloo pairs are closed, MPI may have a
// half-done collective), so the communicator is marked broken and later ops fail at once
// with FailedPrecondition naming the op that broke it.
#include <pthread.h>
#include <time.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <numeric>
#include <thread>

#include "absl/strings/str_cat.h"
#include "comm/backend.h"
#include "trainscope/comm/comm.h"
#include "trainscope/comm/flight_recorder.h"

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
    // Named so that thread listings and flight recorder dumps can tell it apart.
    pthread_setname_np(pthread_self(), "ts-comm-async");
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
  // The flight recorder: the caller's (shared) or our own; this communicator is one group.
  std::shared_ptr<FlightRecorder> recorder = opts.flight_recorder;
  if (recorder == nullptr && opts.flight_recorder_entries != 0) {
    if (opts.flight_recorder_entries < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("flight recorder entries must be >= 0, not ", opts.flight_recorder_entries));
    }
    FlightRecorderOptions fro;
    fro.capacity = static_cast<size_t>(opts.flight_recorder_entries);
    fro.rank = opts.rank;
    fro.world_size = opts.world_size;
    auto created = FlightRecorder::Create(fro);
    if (!created.ok()) return created.status();
    recorder = std::move(*created);
  }
  int pg_id = -1;
  if (recorder != nullptr) {
    ProcessGroupInfo pg;
    pg.name = opts.group_name;
    pg.desc = opts.group_desc;
    pg.ranks.resize(opts.world_size);
    std::iota(pg.ranks.begin(), pg.ranks.end(), 0);
    pg.backend = (*backend)->name();
    pg.timeout_ms = opts.timeout.count();
    auto id = recorder->RegisterProcessGroup(std::move(pg));
    if (!id.ok()) return id.status();
    pg_id = *id;
  }
  opts.flight_recorder = recorder;
  return std::unique_ptr<Communicator>(
      new Communicator(opts, std::move(*backend), std::move(recorder), pg_id));
}

Communicator::Communicator(CommOptions options, std::unique_ptr<Backend> backend,
                           std::shared_ptr<FlightRecorder> recorder, int pg_id)
    : options_(std::move(options)),
      backend_(std::move(backend)),
      recorder_(std::move(recorder)),
      pg_id_(pg_id),
      async_(std::make_unique<AsyncQueue>()) {}

Communicator::~Communicator() {
  {
    std::lock_guard<std::mutex> lock(async_->mu);
    async_->stop = true;
  }
  async_->cv.notify_all();
  if (async_->thread.joinable()) async_->thread.join();
}

int Communicator::rank() const { return backend_->rank(); }
int Communicator::world_size() const { return backend_->world_size(); }
const std::string& Communicator::backend_name() const { return backend_->name(); }

void Communicator::AddObserver(OpObserver* observer) {
  if (observer == nullptr) return;
  std::lock_guard<std::mutex> lock(observer_mu_);
  observers_.push_back(observer);
}

void Communicator::RemoveObserver(OpObserver* observer) {
  std::lock_guard<std::mutex> lock(observer_mu_);
  auto it = std::find(observers_.begin(), observers_.end(), observer);
  if (it != observers_.end()) observers_.erase(it);
}

// Observers are called under observer_mu_, so that RemoveObserver returning means "no
// call in flight and none to come" (see OpObserver).
template <typename Fn>
void Communicator::Notify(Fn&& fn) {
  std::lock_guard<std::mutex> lock(observer_mu_);
  for (OpObserver* o : observers_) fn(o);
}

// Issue time: the c10d numbering. A collective takes the next collective number (the
// engine tag, so equal on every rank whatever p2p traffic each rank had); a send/recv
// takes the next p2p number. Each carries the other counter's current value.
OpRecord Communicator::Schedule(OpRecord record) {
  record.seq = next_seq_++;
  if (IsP2P(record.op)) {
    record.p2p_seq = ++p2p_seq_;
    record.collective_seq = collective_seq_;
  } else {
    record.collective_seq = ++collective_seq_;
    record.p2p_seq = p2p_seq_;
  }
  record.rank = rank();
  record.world_size = world_size();
  record.enqueue_ns = MonotonicNs();
  if (recorder_ != nullptr) {
    FlightOp op;
    op.pg_id = pg_id_;
    op.collective_seq_id = record.collective_seq;
    op.p2p_seq_id = record.p2p_seq;
    op.op_id = record.seq + 1;  // PyTorch counts ops from 1
    op.op = record.op;
    op.dtype = record.dtype;
    // Elements per tensor, as PyTorch records shapes (comm.h gives count per rank).
    const int64_t n = static_cast<int64_t>(record.count);
    const int64_t w = record.world_size;
    op.input_numel =
        record.op == OpType::kReduceScatter || record.op == OpType::kAllToAll ? n * w : n;
    op.output_numel = record.op == OpType::kAllGather || record.op == OpType::kAllToAll ? n * w : n;
    op.peer = record.peer;
    op.async = record.async;
    op.enqueue_mono_ns = record.enqueue_ns;
    record.trace_id = recorder_->RecordScheduled(op);
  }
  Notify([&](OpObserver* o) { o->OnEnqueue(record); });
  return record;
}

absl::Status Communicator::Dispatch(OpRecord record, RunFn run) {
  record = Schedule(std::move(record));
  return Execute(record, run);
}

absl::Status Communicator::Execute(OpRecord& record, RunFn run) {
  const bool p2p = IsP2P(record.op);
  const int64_t number = p2p ? record.p2p_seq : record.collective_seq;
  auto describe = [&] {
    std::string what = absl::StrCat(OpName(record.op), " #", number);
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
    std::unique_lock<std::mutex> lock(async_->mu);
    if (!async_->broken_by.empty()) {
      absl::Status refused = absl::FailedPreconditionError(
          absl::StrCat(describe(), " not run: the communicator is broken since ", async_->broken_by,
                       " failed; create a new one"));
      lock.unlock();
      if (recorder_ != nullptr) recorder_->RecordCompleted(record.trace_id, MonotonicNs(), refused);
      return refused;
    }
  }
  record.start_ns = MonotonicNs();
  if (recorder_ != nullptr) recorder_->RecordStarted(record.trace_id, record.start_ns);
  Notify([&](OpObserver* o) { o->OnStart(record); });
  absl::Status st = run(record);
  record.end_ns = MonotonicNs();
  if (!st.ok() && st.code() != absl::StatusCode::kInvalidArgument) {
    std::string op = describe();
    auto wait = std::min(std::chrono::milliseconds(1000), options_.timeout / 4);
    // The store key must be the same on every rank: the collective number (for p2p, that
    // of the last collective, so peers failing between the same collectives meet).
    std::string missing = backend_->DescribeMissingRanks(record.collective_seq, wait);
    std::string prefix =
        st.code() == absl::StatusCode::kDeadlineExceeded
            ? absl::StrCat(op, " did not finish within ", options_.timeout.count() / 1000.0, " s")
            : absl::StrCat(op, " failed");
    st = absl::Status(st.code(), absl::StrCat(prefix, missing.empty() ? "" : ": " + missing, " [",
                                              st.message(), "]"));
    std::lock_guard<std::mutex> lock(async_->mu);
    async_->broken_by = absl::StrCat(OpName(record.op), " #", number);
  } else if (!st.ok()) {
    st = absl::InvalidArgumentError(absl::StrCat(describe(), ": ", st.message()));
  }
  record.status = st;
  if (recorder_ != nullptr) recorder_->RecordCompleted(record.trace_id, record.end_ns, st);
  Notify([&](OpObserver* o) { o->OnEnd(record); });
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

// The engine tag of a collective: its collective number, equal on every rank.
uint32_t Tag(const OpRecord& r) { return static_cast<uint32_t>(r.collective_seq); }

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
  return Dispatch(Record(OpType::kAllReduce, dtype, count), [&](const OpRecord& r) -> absl::Status {
    if (auto st = CheckBuf(buf, count); !st.ok()) return st;
    return backend_->AllReduce(buf, count, dtype, op, Tag(r));
  });
}

absl::Status Communicator::AllGather(const void* send, void* recv, size_t count, DType dtype) {
  async_->Drain();
  return Dispatch(Record(OpType::kAllGather, dtype, count), [&](const OpRecord& r) -> absl::Status {
    if (auto st = CheckBuf(send, count); !st.ok()) return st;
    if (auto st = CheckBuf(recv, count); !st.ok()) return st;
    return backend_->AllGather(send, recv, count, dtype, Tag(r));
  });
}

absl::Status Communicator::ReduceScatter(const void* send, void* recv, size_t count, DType dtype,
                                         ReduceOp op) {
  async_->Drain();
  return Dispatch(Record(OpType::kReduceScatter, dtype, count),
                  [&](const OpRecord& r) -> absl::Status {
                    if (auto st = CheckBuf(send, count); !st.ok()) return st;
                    if (auto st = CheckBuf(recv, count); !st.ok()) return st;
                    return backend_->ReduceScatter(send, recv, count, dtype, op, Tag(r));
                  });
}

absl::Status Communicator::Broadcast(void* buf, size_t count, DType dtype, int root) {
  async_->Drain();
  return Dispatch(Record(OpType::kBroadcast, dtype, count, root),
                  [&](const OpRecord& r) -> absl::Status {
                    if (auto st = CheckPeer(root, world_size(), "broadcast root"); !st.ok())
                      return st;
                    if (auto st = CheckBuf(buf, count); !st.ok()) return st;
                    return backend_->Broadcast(buf, count, dtype, root, Tag(r));
                  });
}

absl::Status Communicator::AllToAll(const void* send, void* recv, size_t count, DType dtype) {
  async_->Drain();
  return Dispatch(Record(OpType::kAllToAll, dtype, count), [&](const OpRecord& r) -> absl::Status {
    if (auto st = CheckBuf(send, count); !st.ok()) return st;
    if (auto st = CheckBuf(recv, count); !st.ok()) return st;
    return backend_->AllToAll(send, recv, count, dtype, Tag(r));
  });
}

absl::Status Communicator::Barrier() {
  async_->Drain();
  return Dispatch(Record(OpType::kBarrier, DType::kFloat32, 0),
                  [&](const OpRecord& r) -> absl::Status { return backend_->Barrier(Tag(r)); });
}

absl::Status Communicator::Send(const void* buf, size_t count, DType dtype, int dst, int tag) {
  async_->Drain();
  return Dispatch(Record(OpType::kSend, dtype, count, dst), [&](const OpRecord&) -> absl::Status {
    if (auto st = CheckPeer(dst, world_size(), "send destination"); !st.ok()) return st;
    if (dst == rank()) return absl::InvalidArgumentError("send to self");
    if (tag < 0) return absl::InvalidArgumentError("negative tag");
    if (auto st = CheckBuf(buf, count); !st.ok()) return st;
    return backend_->Send(buf, count, dtype, dst, tag);
  });
}

absl::Status Communicator::Recv(void* buf, size_t count, DType dtype, int src, int tag) {
  async_->Drain();
  return Dispatch(Record(OpType::kRecv, dtype, count, src), [&](const OpRecord&) -> absl::Status {
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
  OpRecord record = Record(OpType::kAllReduce, dtype, count);
  record.async = true;
  record = Schedule(std::move(record));  // stamped now, on the issuing thread
  task->run = [this, buf, count, dtype, op, record]() mutable {
    return Execute(record, [&](const OpRecord& r) -> absl::Status {
      if (auto st = CheckBuf(buf, count); !st.ok()) return st;
      return backend_->AllReduce(buf, count, dtype, op, Tag(r));
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
