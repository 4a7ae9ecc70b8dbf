// The trainer's checkpoint writer (private to the train module; libtorch-free): owns a
// snapshot of the state in host memory and writes it with ckpt::WriteCheckpoint (atomic:
// temporary directory, fsync, manifest last, rename), then prunes to `keep`.
//
// Async mode: Save() hands the snapshot to one background thread and returns; the next
// Save() (or Wait()) blocks only while the previous save is still writing. A failed
// background save is returned by the next Save() or Wait(). Sync mode writes in Save().
//
// Thread-safety: Save() and Wait() are called from one thread (the training thread);
// on_saved runs on the thread that wrote (the background thread when async).
#ifndef TRAINSCOPE_SRC_TRAIN_CHECKPOINTER_H_
#define TRAINSCOPE_SRC_TRAIN_CHECKPOINTER_H_

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "trainscope/ckpt/checkpoint.h"
#include "trainscope/ckpt/resume.h"

namespace trainscope::train {

// A checkpoint's contents in memory of its own: the tensors copied out of the model, the
// optimizer and the gradient compressor, and the JSON parts. data.model / data.optimizer /
// data.tensor_files views point into `buffers`.
struct CheckpointSnapshot {
  ckpt::CheckpointData data;
  std::vector<std::unique_ptr<char[]>> buffers;
  uint64_t tensor_bytes = 0;
  // Appends a tensor of `bytes` bytes (to the optimizer file when `optimizer`) and returns
  // the memory to copy it into (uninitialised, owned by the snapshot).
  void* AddTensor(bool optimizer, std::string name, std::string dtype, std::vector<uint64_t> shape,
                  uint64_t bytes);
  // The same for a further tensor file of the checkpoint (data.tensor_files[file]).
  void* AddFileTensor(const std::string& file, std::string name, std::string dtype,
                      std::vector<uint64_t> shape, uint64_t bytes);
};

struct SaveOutcome {
  int64_t step = 0;
  std::string path;    // the final step-<N> directory
  uint64_t bytes = 0;  // tensor bytes written
  double write_ms = 0;
  bool anomaly = false;
  bool async = false;
  std::vector<std::string> pruned;  // checkpoints removed for `keep`
  absl::Status status;
};

struct CheckpointerOptions {
  std::string dir;     // the checkpoints folder (created)
  int keep = 0;        // complete non-anomaly checkpoints kept; 0 = all
  bool async = false;  // write on the background thread
  bool fsync = true;
  std::function<void(const SaveOutcome&)> on_saved;  // may be empty
};

class Checkpointer {
 public:
  explicit Checkpointer(CheckpointerOptions options);
  // Waits for a save in flight (a checkpoint that was started is finished).
  ~Checkpointer();
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  // Waits for the previous save (the time blocked is added to *blocked_ms, may be null) and
  // returns its error if it failed; then writes `snap`: in the background when async and
  // `allow_async`, else before returning (then its error is returned). Returns the path the
  // checkpoint has (or will have). A complete, intact step-<N> already there is kept (the
  // same state in a deterministic run); a damaged one is moved aside to step-<N>.bad-<pid>.
  absl::StatusOr<std::string> Save(std::unique_ptr<CheckpointSnapshot> snap, bool allow_async,
                                   double* blocked_ms);
  // Waits for the save in flight; returns the error of a failed background save.
  absl::Status Wait(double* blocked_ms = nullptr);
  const CheckpointerOptions& options() const { return options_; }

 private:
  SaveOutcome Write(const CheckpointSnapshot& snap, bool async) const;
  void Loop();

  const CheckpointerOptions options_;

  std::mutex mu_;
  std::condition_variable cv_;
  // Guarded by mu_.
  std::unique_ptr<CheckpointSnapshot> pending_;  // handed to the thread, not yet written
  bool busy_ = false;                            // pending_ or a write in progress
  bool stop_ = false;
  absl::Status error_;  // of the last background save

  std::thread thread_;  // async only
};

// The resume choice is the ckpt module's (trainscope/ckpt/resume.h).
using ckpt::PlanResume;
using ckpt::ResumePlan;

}  // namespace trainscope::train

#endif  // TRAINSCOPE_SRC_TRAIN_CHECKPOINTER_H_
