// FlightRecorder: a per-rank ring buffer of the last N collective and point-to-point ops,
// the evidence for hang diagnosis (which rank never entered which collective, or entered
// it with another op, size or dtype). Modelled on PyTorch's c10d Flight Recorder; the dump
// is PyTorch's JSON layout (version "2.10") plus trainscope's own keys, documented in
// docs/formats.md ("Flight recorder dump").
//
// Who fills it: Communicator::Dispatch, the one path every op takes (comm.h), calls
// RecordScheduled when an op is issued, RecordStarted when the engine call begins and
// RecordCompleted when it returns. Nothing else needs to call those; they are public so
// that the recorder can be tested and benchmarked on its own.
//
// Ownership: shared (std::shared_ptr) by the communicators that record into it and
// whoever dumps it (a watchdog may dump after the communicators are gone).
//
// Thread-safety: every method is thread-safe. Records and dumps serialise on one mutex;
// a record holds it for ~tens of ns (fixed-size copies into a slot preallocated at
// construction, no allocation), a dump holds it only to copy the ring.
//
// Caller tags: a thread says what it is doing with a ScopedCallerTag ("step 17 backward
// bucket 3"); ops issued on that thread while the tag lives carry it, including async ops
// whose engine call runs later on another thread (the tag is taken when the op is issued).
#ifndef TRAINSCOPE_COMM_FLIGHT_RECORDER_H_
#define TRAINSCOPE_COMM_FLIGHT_RECORDER_H_

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "trainscope/comm/comm.h"
#include "trainscope/core/formats.h"

namespace trainscope::comm {

// Longest caller tag kept, in bytes (longer tags are cut at a UTF-8 boundary).
inline constexpr size_t kMaxCallerTagBytes = 95;

// Sets the calling thread's caller tag for its lifetime and restores the previous one
// (tags nest). The text is copied; the object must be destroyed on the thread that made
// it, in reverse order of construction (use it as a local).
class ScopedCallerTag {
 public:
  explicit ScopedCallerTag(absl::string_view tag);
  ~ScopedCallerTag();
  ScopedCallerTag(const ScopedCallerTag&) = delete;
  ScopedCallerTag& operator=(const ScopedCallerTag&) = delete;

 private:
  char text_[kMaxCallerTagBytes + 1];
  const ScopedCallerTag* previous_;
  size_t size_;
  friend absl::string_view CurrentCallerTag();
};

// The calling thread's innermost caller tag; empty when none.
absl::string_view CurrentCallerTag();

struct FlightRecorderOptions {
  size_t capacity = 2000;  // entries kept (the newest); 1 .. FlightRecorder::kMaxCapacity
  int rank = 0;            // this process's global rank, written in dumps
  int world_size = 1;
};

// A process group as the dump names it (pg_config).
struct ProcessGroupInfo {
  std::string name = "0";           // unique within one recorder
  std::string desc = "default_pg";  // PyTorch's "desc"
  std::vector<int> ranks;           // global ranks, in group-rank order
  std::string backend;              // "gloo" | "mpi" | "nccl": the profiling_name prefix
  int64_t timeout_ms = 0;           // the group's op timeout
};

enum class FlightState { kScheduled, kStarted, kCompleted };
const char* FlightStateName(FlightState state);  // "scheduled" | "started" | "completed"

// One op as recorded. Fixed size: recording never allocates. Times are Unix epoch ns
// (CLOCK_MONOTONIC readings shifted by an offset taken when the recorder was built, so
// they never go backwards within one recorder); 0 when not reached.
struct FlightEntry {
  int64_t record_id = -1;  // 0, 1, 2, ... per recorder, in scheduling order
  int pg_id = 0;           // index of the group (RegisterProcessGroup's result)
  int64_t collective_seq_id = 0;
  int64_t p2p_seq_id = 0;
  int64_t op_id = 0;  // 1-based op number within the group, collectives and p2p together
  OpType op = OpType::kBarrier;
  DType dtype = DType::kFloat32;
  int64_t input_numel = 0;   // elements of the one input tensor (0 and no tensor: barrier)
  int64_t output_numel = 0;  // elements of the one output tensor
  int peer = -1;             // group rank of the peer (send/recv) or root (broadcast)
  bool is_p2p = false;
  bool async = false;
  bool retired = false;  // the op returned (completed, or failed: see error)
  int64_t step = -1;     // the training step it was issued in (FlightOp::step); -1: unknown
  int64_t time_created_ns = 0;
  int64_t time_discovered_started_ns = 0;
  int64_t time_discovered_completed_ns = 0;  // 0 unless the op succeeded
  int64_t thread_id = 0;                     // kernel thread id of the issuing thread
  char thread_name[16] = {};                 // its name when it first issued an op
  char caller[kMaxCallerTagBytes + 1] = {};  // its caller tag at issue time
  char error[128] = {};                      // failed ops: the status, cut to fit

  FlightState state() const {
    return time_discovered_completed_ns != 0 ? FlightState::kCompleted
           : time_discovered_started_ns != 0 ? FlightState::kStarted
                                             : FlightState::kScheduled;
  }
};

// What RecordScheduled needs to know about an op.
struct FlightOp {
  int pg_id = 0;
  int64_t collective_seq_id = 0;
  int64_t p2p_seq_id = 0;
  int64_t op_id = 0;
  OpType op = OpType::kBarrier;
  DType dtype = DType::kFloat32;
  int64_t input_numel = 0;
  int64_t output_numel = 0;
  int peer = -1;
  bool async = false;
  int64_t step = -1;            // the caller's training step, -1 when it did not say
  int64_t enqueue_mono_ns = 0;  // CLOCK_MONOTONIC
};

struct FlightDumpOptions {
  // PyTorch's fr_trace accepts only "nccl:" / "xccl:" profiling names. True writes
  // "nccl:" whatever the backend so that it can read gloo and mpi dumps too; the real
  // backend stays in pg_config and `backend`.
  bool nccl_profiling_names = false;
  // Only entries not completed yet (PyTorch's onlyActive).
  bool only_active = false;
  // Why the dump was taken ("watchdog: all_reduce seq 5 exceeded 600 s", "SIGUSR1", ...):
  // written as trainscope.reason when not empty.
  std::string reason;
};

class FlightRecorder {
 public:
  static constexpr size_t kMaxCapacity = 10'000'000;
  static constexpr const char* kPyTorchVersion = "2.10";  // top-level "version"
  static constexpr const char* kFormat = formats::kFlightRecorder;
  static constexpr int kFormatVersion = 1;

  // Allocates the whole ring. Errors: InvalidArgument (capacity 0 or above kMaxCapacity,
  // rank outside the world).
  static absl::StatusOr<std::shared_ptr<FlightRecorder>> Create(FlightRecorderOptions options);

  // Adds a process group and returns its pg_id (0, 1, ... in registration order).
  // Errors: AlreadyExists (name taken), InvalidArgument (empty name or ranks).
  absl::StatusOr<int> RegisterProcessGroup(ProcessGroupInfo info);

  // Hot path (called by Communicator::Dispatch). RecordScheduled returns the record_id;
  // the caller tag, thread id and name are the calling thread's. RecordStarted /
  // RecordCompleted take the id and a CLOCK_MONOTONIC time; an id whose slot was already
  // reused by a newer op (the ring wrapped while it ran) is ignored. RecordCompleted with
  // a non-ok status retires the entry without completing it, keeping the error text.
  // pg_id must come from RegisterProcessGroup (checked).
  int64_t RecordScheduled(const FlightOp& op);
  void RecordStarted(int64_t record_id, int64_t mono_ns);
  void RecordCompleted(int64_t record_id, int64_t mono_ns, const absl::Status& status);

  // The kept entries, oldest first (record_ids consecutive, ending at the newest).
  std::vector<FlightEntry> Snapshot() const;
  std::vector<ProcessGroupInfo> ProcessGroups() const;
  size_t capacity() const { return capacity_; }
  int64_t recorded() const;  // ops recorded so far (the next record_id)
  // Now on the clock of FlightEntry's times (epoch ns, monotonic underneath), for comparing
  // an entry's age (the watchdog).
  int64_t NowNs() const;

  // The dump as JSON text (docs/formats.md). Never fails.
  std::string DumpJsonString(const FlightDumpOptions& options = {}) const;
  // Writes DumpJsonString atomically: temporary file in the same directory, fsync,
  // rename; creates parent directories. Blocks on the disk; does not block recording
  // longer than one ring copy. Two dumps to the same path at once from one process are not
  // supported (they share the temporary name). Errors: those of the file system, naming
  // the path.
  absl::Status DumpJson(const std::string& path, const FlightDumpOptions& options = {}) const;

 private:
  explicit FlightRecorder(FlightRecorderOptions options);

  // Per-group progress (pg_status): the newest sequence numbers seen in each state.
  struct GroupStatus {
    int64_t last_enqueued_collective = -1, last_started_collective = -1,
            last_completed_collective = -1;
    int64_t last_enqueued_p2p = -1, last_started_p2p = -1, last_completed_p2p = -1;
  };
  FlightEntry* SlotFor(int64_t record_id);  // null when overwritten; needs mu_

  // Constant after construction.
  const FlightRecorderOptions options_;
  const size_t capacity_;
  const int64_t mono_to_epoch_ns_;  // epoch ns = monotonic ns + this

  mutable std::mutex mu_;
  // Guarded by mu_.
  std::vector<FlightEntry> ring_;  // capacity_ slots; record_id r lives in r % capacity_
  int64_t next_id_ = 0;
  std::vector<ProcessGroupInfo> groups_;
  std::vector<GroupStatus> status_;
};

}  // namespace trainscope::comm

#endif  // TRAINSCOPE_COMM_FLIGHT_RECORDER_H_
