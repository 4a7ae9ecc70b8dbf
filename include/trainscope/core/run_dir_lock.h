// One writer per run directory: every process that writes a run directory (`trainscope train`,
// `trainscope launch`, Python's watch / distributed.record / checkpoint.save) first takes the
// directory's lock, <run dir>/LOCK, with flock(2) as leveldb does. Readers (report, diagnose,
// serve, ckpt verify) never take it.
//
// The lock is an exclusive flock on LOCK, held by an open file description: it is released
// when the holder closes it or dies (a stale LOCK file of a dead process blocks nothing). The
// holder writes a record into the file naming itself, which a refused writer quotes:
//
//   pid 4242
//   command trainscope train --config c.json --run-dir runs/a
//   job launch/host1/4240          (only when the holder belongs to a job)
//
// One job is one writer: a process whose job identity (JobIdFromEnvironment) is not empty
// and equals the holder's does not lock again, it joins (RunDirLock::holds() false). So the
// first rank of a job to arrive (or `trainscope launch --run-dir DIR`, which locks before
// starting its ranks and gives them its job id) holds the lock for the whole job, and the
// ranks of another job on the same directory are refused.
//
// Thread-safety: RunDirLock is a move-only handle, not shared between threads; the free
// functions are thread-safe.
#ifndef TRAINSCOPE_CORE_RUN_DIR_LOCK_H_
#define TRAINSCOPE_CORE_RUN_DIR_LOCK_H_

#include <chrono>
#include <map>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace trainscope::run_dir {

// The lock file at the top of a run directory.
inline constexpr char kLockFile[] = "LOCK";
// Payload type set on the status of a refused writer (IsRunDirInUse); main() exits 2.
inline constexpr char kRunDirInUsePayload[] = "trainscope.run_dir_in_use";

// Who holds (or last held) a run directory's lock: the record in LOCK.
struct LockHolder {
  int pid = 0;
  std::string command;  // argv joined by spaces, at most kMaxLockCommandBytes
  std::string job_id;   // "" when the holder is a process of its own
};
inline constexpr size_t kMaxLockCommandBytes = 200;

// The record's text ("pid P\ncommand C\n[job J\n]"); newlines in fields become spaces.
std::string FormatLockRecord(const LockHolder& holder);
// Parses a record. InvalidArgument when there is no complete "pid" line (a holder that has
// not written it yet, or a foreign file).
absl::StatusOr<LockHolder> ParseLockRecord(std::string_view text);

// This process's job identity, from the launcher's environment (`env`; `hostname` qualifies
// loopback rendezvous addresses), the same string on every rank of one job:
//   TRAINSCOPE_JOB_ID (set by `trainscope launch`) as is; else, when a world-size variable
//   (WORLD_SIZE, OMPI_COMM_WORLD_SIZE, PMI_SIZE, SLURM_STEP_NUM_TASKS) is above 1:
//   "rdzv/MASTER_ADDR:MASTER_PORT" (torchrun and the like; "rdzv/<host>/127.0.0.1:P" for a
//   loopback address), "slurm/<job>.<step>", "pmix/<namespace>", "ompi/<jobid>",
//   "pmi/<jobid>", in that order. "" otherwise: a process of its own, which never joins.
// Pure.
std::string JobIdFromEnvironment(const std::map<std::string, std::string>& env,
                                 const std::string& hostname);
// JobIdFromEnvironment of this process's environment and host name.
std::string CurrentJobId();

struct LockOptions {
  // JobIdFromEnvironment of the caller; "" = this process alone.
  std::string job_id;
  // Recorded in LOCK for a refused writer to quote; "" = /proc/self/cmdline.
  std::string command;
  // A holder writes its record just after it takes the lock; a writer that finds the lock
  // taken but no record yet re-reads it this long before giving up.
  std::chrono::milliseconds record_wait{2000};
};

// A held (or joined) run-directory lock. Closing it (destruction, Release) releases the lock.
class RunDirLock {
 public:
  RunDirLock() = default;
  RunDirLock(RunDirLock&& other) noexcept;
  RunDirLock& operator=(RunDirLock&& other) noexcept;
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;
  ~RunDirLock();

  // True: this process holds the flock. False: it joined its job's holder (or was released).
  bool holds() const { return fd_ >= 0; }
  // The run directory, as given to LockRunDir.
  const std::string& dir() const { return dir_; }
  // The record of the holder: this process, or the job's holder it joined.
  const LockHolder& holder() const { return holder_; }
  // Releases the lock now (idempotent).
  void Release();

 private:
  friend absl::StatusOr<RunDirLock> LockRunDir(const std::string& dir, const LockOptions& options);
  // Constant after construction.
  int fd_ = -1;
  std::string dir_;
  LockHolder holder_;
};

// Creates `dir` (mkdir -p) and takes its lock without blocking: on success the caller holds
// it (or joined its job's holder) until the returned handle is closed.
// Errors: FailedPrecondition with the kRunDirInUsePayload payload, "DIR is in use by pid P
// (COMMAND); wait for it or use another --run-dir", when another writer holds it;
// InvalidArgument / PermissionDenied when the directory or LOCK cannot be created or opened.
// Blocks at most options.record_wait (only while a new holder writes its record).
absl::StatusOr<RunDirLock> LockRunDir(const std::string& dir, const LockOptions& options = {});

// Whether `status` is LockRunDir's refusal (another writer holds the directory).
bool IsRunDirInUse(const absl::Status& status);

}  // namespace trainscope::run_dir

#endif  // TRAINSCOPE_CORE_RUN_DIR_LOCK_H_
