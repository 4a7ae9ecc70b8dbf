// The checkpoint writer: one background thread, one save in flight at most.
#include "train/checkpointer.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>

#include "absl/strings/str_cat.h"

namespace trainscope::train {

namespace {

// A view of `bytes` new bytes owned by `snap`, appended to `into`.
void* SnapshotAppend(CheckpointSnapshot* snap, std::vector<ckpt::TensorView>* into,
                     std::string name, std::string dtype, std::vector<uint64_t> shape,
                     uint64_t bytes) {
  snap->buffers.push_back(std::unique_ptr<char[]>(new char[bytes > 0 ? bytes : 1]));
  ckpt::TensorView v;
  v.name = std::move(name);
  v.dtype = std::move(dtype);
  v.shape = std::move(shape);
  v.data = snap->buffers.back().get();
  v.bytes = bytes;
  into->push_back(std::move(v));
  snap->tensor_bytes += bytes;
  return snap->buffers.back().get();
}

}  // namespace

void* CheckpointSnapshot::AddTensor(bool optimizer, std::string name, std::string dtype,
                                    std::vector<uint64_t> shape, uint64_t bytes) {
  return SnapshotAppend(this, optimizer ? &data.optimizer : &data.model, std::move(name),
                        std::move(dtype), std::move(shape), bytes);
}

void* CheckpointSnapshot::AddFileTensor(const std::string& file, std::string name,
                                        std::string dtype, std::vector<uint64_t> shape,
                                        uint64_t bytes) {
  return SnapshotAppend(this, &data.tensor_files[file], std::move(name), std::move(dtype),
                        std::move(shape), bytes);
}

Checkpointer::Checkpointer(CheckpointerOptions options) : options_(std::move(options)) {
  if (options_.async) thread_ = std::thread([this] { Loop(); });
}

Checkpointer::~Checkpointer() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !busy_; });
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

absl::Status Checkpointer::Wait(double* blocked_ms) {
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !busy_; });
  if (blocked_ms != nullptr) {
    *blocked_ms +=
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
  absl::Status s = error_;
  error_ = absl::OkStatus();
  return s;
}

absl::StatusOr<std::string> Checkpointer::Save(std::unique_ptr<CheckpointSnapshot> snap,
                                               bool allow_async, double* blocked_ms) {
  if (absl::Status s = Wait(blocked_ms); !s.ok()) return s;
  const std::string path =
      absl::StrCat(options_.dir, "/", ckpt::CheckpointDirName(snap->data.step, snap->data.anomaly));
  if (options_.async && allow_async) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      pending_ = std::move(snap);
      busy_ = true;
    }
    cv_.notify_all();
    return path;
  }
  SaveOutcome out = Write(*snap, /*async=*/false);
  if (!out.status.ok()) return out.status;
  return out.path;
}

// Writes one snapshot: WriteCheckpoint, then pruning; tells on_saved.
SaveOutcome Checkpointer::Write(const CheckpointSnapshot& snap, bool async) const {
  namespace fs = std::filesystem;
  SaveOutcome out;
  out.step = snap.data.step;
  out.bytes = snap.tensor_bytes;
  out.anomaly = snap.data.anomaly;
  out.async = async;
  out.path =
      absl::StrCat(options_.dir, "/", ckpt::CheckpointDirName(snap.data.step, snap.data.anomaly));
  const auto t0 = std::chrono::steady_clock::now();
  std::error_code ec;
  bool write = true;
  if (fs::exists(out.path, ec)) {
    // A resumed run reaches a step an earlier process saved: keep an intact one (same
    // state in a deterministic run), move a damaged one aside so the new save can land.
    if (ckpt::CheckCheckpoint(out.path, /*hash=*/true).ok()) {
      write = false;
    } else {
      fs::rename(out.path, absl::StrCat(out.path, ".bad-", ::getpid()), ec);
      if (ec) {
        out.status = absl::InternalError(absl::StrCat(
            out.path, ": a damaged checkpoint is in the way and cannot be moved: ", ec.message()));
      }
    }
  }
  if (write && out.status.ok()) {
    ckpt::WriteOptions wo;
    wo.fsync = options_.fsync;
    auto written = ckpt::WriteCheckpoint(options_.dir, snap.data, wo);
    if (!written.ok()) out.status = written.status();
  }
  if (out.status.ok() && options_.keep > 0) {
    auto pruned = ckpt::Prune(options_.dir, options_.keep);
    if (pruned.ok()) {
      out.pruned = *std::move(pruned);
    } else {
      out.status = pruned.status();
    }
  }
  out.write_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (options_.on_saved) options_.on_saved(out);
  return out;
}

void Checkpointer::Loop() {
  // Below the training threads: hashing and writing must not take their cores. Linux nice
  // values are per thread (this thread only; best effort).
  (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), 10);
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stop_ || pending_ != nullptr; });
    if (pending_ == nullptr) return;  // stop_ with nothing to write
    std::unique_ptr<CheckpointSnapshot> snap = std::move(pending_);
    lock.unlock();
    SaveOutcome out = Write(*snap, /*async=*/true);
    snap.reset();  // the host copy goes before the next step may snapshot again
    lock.lock();
    if (!out.status.ok()) error_ = out.status;
    busy_ = false;
    cv_.notify_all();
  }
}

}  // namespace trainscope::train
