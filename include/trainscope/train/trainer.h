// The reference trainer: a GPT-style decoder LM on libtorch (CPU, or a CUDA GPU: train.device),
// single rank or data-parallel over trainscope::comm, with every step's phases and memory logged
// per rank.
// This header is libtorch-free; the libtorch code lives in model.cc, trainer.cc, ddp.cc.
//
// Run directory (docs/formats.md, "Run directory"):
//   <run_dir>/train/config.json           resolved config (rank 0)
//   <run_dir>/train/metrics.rank<R>.jsonl  per-rank metrics (trainscope.train_metrics v1)
//   <run_dir>/train/weights.rank<R>.json   final weights checksums (trainscope.train_weights v1)
//   <run_dir>/train/summary.json           result of the run (rank 0)
//   <run_dir>/checkpoints/step-<N>/        checkpoints (config "checkpoint"; ckpt/checkpoint.h)
//   <run_dir>/hang/flight_recorder.rank<R>.json, stacks.rank<R>.txt  written by the comm
//                                          watchdog (data-parallel runs; hang/analyze.h)
#ifndef TRAINSCOPE_TRAIN_TRAINER_H_
#define TRAINSCOPE_TRAIN_TRAINER_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json_fwd.hpp"
#include "trainscope/comm/comm.h"
#include "trainscope/train/config.h"
#include "trainscope/train/data.h"
#include "trainscope/train/dump.h"
#include "trainscope/train/inject.h"
#include "trainscope/train/metrics.h"

namespace trainscope::train {

// TrainOptions::stop value for a stop that no signal asked for.
inline constexpr int kStopNoSignal = -1;

struct TrainOptions {
  std::string run_dir;  // required; created
  // Join the job of the launcher that started this process (trainscope launch, torchrun,
  // srun, mpirun: comm::JoinOptionsFromEnvironment / comm::JoinWorld) and, when world_size
  // > 1, train data-parallel over its Communicator. false: always one rank.
  bool distributed_from_env = true;
  std::string comm_backend = "gloo";
  // Where the communicator's notices go and how a stuck mpi op ends (comm::CommHost); empty:
  // not said, and a stuck mpi op blocks.
  comm::CommHost comm_host;
  // Called on rank 0 after each step (progress lines); may be empty.
  std::function<void(const StepRecord&)> on_step;
  bool write_weights = true;  // weights.rank<R>.json

  // Cooperative stop (a cancellation token owned by the caller, who keeps it alive for the
  // call). Non-zero: stop; the value is the number of the signal that asked for it (named in
  // the end record), or kStopNoSignal. The trainer polls it between steps and between the
  // phases of a step, writes the end record with reason "interrupted" and returns Cancelled.
  // The trainer installs no signal handler: the caller's handler stores into this (an
  // std::atomic<int> is lock-free, so a handler may store into it). Null: never stopped.
  const std::atomic<int>* stop = nullptr;
  // When a stop was asked for and the training thread has not come round to a poll within
  // this time (blocked in a collective on a dead peer, or in one long phase), a watchdog
  // thread writes the end record anyway, so a rank that is SIGKILLed soon after (launch's
  // stop grace is 5 s) still leaves it. The training thread then stops at its next poll.
  std::chrono::milliseconds stop_grace{1000};
  // Host memory this rank may use, compared with the config's estimate (EstimateTrainMemory
  // x local ranks) before the model, optimizer or corpus is allocated; -1 = unknown, no check.
  // Empty: MemAvailable of /proc/meminfo. Tests inject a figure.
  std::function<int64_t()> available_memory_bytes;

  // Data-parallel runs: the comm watchdog (comm/watchdog.h) watches this rank's collectives
  // with config.comm.timeout_s. When one is not completed in time, or fails, it writes the
  // flight recorder dump and thread stacks to <run_dir>/hang/, the metrics file's end record
  // (reason "error", the message), and then calls on_comm_timeout with a one-line message
  // ("rank 1: all_reduce #17 (group 0 default_pg, caller 'step 5 grad bucket 0') not
  // completed after 10.0 s"), from the watchdog thread or the training thread. The caller
  // decides how the rank ends (the CLI prints it and exits 1 at once). Empty: the training
  // thread returns the communicator's error when the op's own timeout expires.
  std::function<void(const std::string& message)> on_comm_timeout;
  // A counter the caller bumps (e.g. from a SIGUSR1 handler: a lock-free atomic) to ask the
  // watchdog for a dump without ending the run; the launcher does that when another rank
  // failed. Null: no requests.
  const std::atomic<int>* dump_request = nullptr;
  // Called on the training thread once the watchdog runs (data-parallel runs only): the
  // moment a dump can be asked for. The CLI installs its SIGUSR1 handler here, so that a
  // rank that never got that far is not asked (the launcher would wait for its dump).
  std::function<void()> on_watchdog_started;
  // Fault injection for tests (train/inject.h); applied at the trainer's comm seam. Needs a
  // data-parallel run; ranks and steps outside the run are InvalidArgument.
  std::vector<Injection> inject;

  // Resume (docs/formats.md, "Checkpoint"): "" = a fresh start (the metrics files are
  // rewritten); "latest" = the newest complete checkpoint in the checkpoint folder, or a fresh
  // start when there is none; else the path of a step-<N> checkpoint, which must be complete
  // and intact (else InvalidArgument naming the problem and the newest good checkpoint).
  // With a resume the metrics files are appended to: a new header, then the steps from the
  // checkpoint's step + 1 (readers take the last record of a step).
  std::string resume;
  // One-line notices for the user (rank 0 only): where the run resumes from, or that it
  // starts fresh. May be empty.
  std::function<void(const std::string&)> on_notice;
  // One-line notices of this rank, on every rank, from the training thread: an --inject
  // fault that fires ("--inject exit:rank=1,step=3: rank 1, step 3", just before it acts;
  // for exit, just before the rank exits). May be empty.
  std::function<void(const std::string&)> on_rank_notice;
  // Op dumps of these steps in msprobe's layout under <run_dir>/dump (train/dump.h); every
  // rank writes its own. Empty steps: none.
  DumpOptions dump;
};

struct TrainResult {
  int rank = 0;
  int world_size = 1;
  int steps = 0;                 // optimizer steps done
  bool stopped_by_time = false;  // train.max_seconds reached before train.steps
  std::vector<double> losses;    // per step
  double loss_start = 0;         // loss of step 1
  double loss_end = 0;           // mean loss of the last min(10, steps/5 + 1) steps
  double seconds = 0;            // training loop wall time
  double tokens_per_s = 0;       // global tokens / s over steps after the first (warm-up) step
  int64_t params = 0;
  int64_t tokens_per_step = 0;
  PhaseTimes mean_phases;  // per step, over steps after the first
  double mean_step_ms = 0;
  double median_step_ms = 0;  // robust to a few steps slowed by other load
  // Data-parallel only: all-reduce time per step, and the share of it hidden behind
  // backward: 1 - comm_wait / comm (0 when nothing overlapped, 1 when all of it did).
  double mean_comm_ms = 0;
  double overlap_fraction = 0;
  // Time spent in observability code (per-layer norms, RSS, writing metrics lines) over the
  // training loop's wall time.
  double observability_fraction = 0;
  LoaderVerdict loader;
  CorpusStats corpus;
  std::string precision;  // "fp32" or "bf16"
  int threads = 0;
  // The device (train.device) and its figures (docs/metrics.md, "Device"): memory from the
  // device on CUDA (the caching allocator), from the process's resident set on the CPU; MFU
  // when the device's peak is known without measuring (KnownPeakFlops).
  std::string device = "cpu";          // "cpu" | "cuda:N"
  std::string device_name = "cpu";     // "NVIDIA H200"
  std::string memory_source;           // "cuda_caching_allocator" | "host_rss"
  int64_t memory_peak_bytes = -1;      // peak allocated (CUDA) or peak RSS (CPU); -1 unknown
  int64_t memory_reserved_bytes = -1;  // CUDA: held by the caching allocator at the end
  double peak_flops = 0;               // MFU's denominator, FLOP/s; 0 = unknown
  std::string peak_flops_source;       // "train.device_tflops" | "table" | ""
  double mfu = 0;                      // 6 x params x tokens/s / peak_flops; 0 when unknown
  std::string metrics_path;
  std::string weights_checksum;  // xxh3-64 hex over all parameters, in name order
  // Resume and checkpoints: the step and path restored (0 and "" on a fresh start), the
  // checkpoints this run saved and the time steps were blocked by a save still writing.
  int resumed_from_step = 0;
  std::string resumed_from;
  int checkpoints_saved = 0;
  // --dump: the folder of the op dumps (<run_dir>/dump) and the steps written; "" / 0 without.
  std::string dump_dir;
  int dump_steps = 0;
  double checkpoint_blocked_ms = 0;
  double checkpoint_snapshot_ms = 0;  // copying the state to host memory, all saves
  // Validation (config "eval"; the JSON's "eval" object, absent without it): the held-out
  // corpus (documents, tokens, sequences), the evaluations run, the last validation loss and
  // the lowest with its step.
  bool eval = false;
  CorpusStats val_corpus;
  int evaluations = 0;
  double val_loss_last = 0;
  double val_loss_min = 0;
  int val_loss_min_step = 0;
};
nlohmann::json TrainResultToJson(const TrainResult& r);

// Runs training. Errors: InvalidArgument / NotFound for config and corpus problems (naming
// the key or file); ResourceExhausted when the config's memory estimate exceeds the memory
// available (naming the keys that drive it) or when an allocation fails during training
// (std::bad_alloc); Aborted for a non-finite loss ("non-finite loss nan at step 17 on rank
// 1"); Cancelled when options.stop asked for a stop; Unavailable / DeadlineExceeded from the
// communicator; Internal for any other exception (c10::Error, ...), naming step and rank.
// No exception escapes. Once the metrics file is open, every return (and every exception)
// ends it with an "end" record: reason "done", "interrupted" (a stop was asked for, whatever
// the loop then returned) or "error".
absl::StatusOr<TrainResult> Train(const TrainConfig& config, const TrainOptions& options);

// For the executable's std::terminate handler: an exception thrown on a thread the trainer
// does not own (gloo's network thread raises on a message of an unexpected size, e.g. when
// ranks disagree on a collective) cannot be caught. When a Train() with a comm watchdog is
// running, this makes the watchdog write its dumps and call on_comm_timeout with a message
// naming the op in flight and `what` (so the rank ends like any other comm failure); returns
// that message, or "" when no such Train() runs. Thread-safe.
std::string DumpOnFatalError(const std::string& what);

// Peak FLOP/s of a square fp32 (or bf16) matmul on `device` (train.device syntax) with
// `threads` CPU threads, measured for about `seconds`: the denominator of MFU when no known
// peak applies. 0 when the device cannot be used or libtorch fails.
double MeasureMatmulPeakFlops(int threads, const std::string& precision, double seconds,
                              const std::string& device = "cpu");
// The peak FLOP/s known without measuring: train.device_tflops when set (*source
// "train.device_tflops"), else DevicePeakTflops of `device_name` (*source "table"), else 0
// (*source ""). libtorch-free.
double KnownPeakFlops(const RunConfig& run, const std::string& device_name, std::string* source);

// Parameter count of the model `config` describes (vocab resolved by the tokenizer).
int64_t CountParams(const ModelConfig& model, int vocab);

struct WorkerSweepRow {
  int num_workers = 0;
  double step_ms = 0;
  double data_wait_fraction = 0;
  double tokens_per_s = 0;
};
// Trains `steps` steps for each value of data.num_workers (single rank, in run_dir/sweep),
// returning one row per value.
absl::StatusOr<std::vector<WorkerSweepRow>> SweepWorkers(const TrainConfig& config,
                                                         const TrainOptions& options,
                                                         const std::vector<int>& values, int steps);

// Threads to use: config value, else hardware threads / local ranks (at least 1).
int ResolveThreads(int configured, int local_world_size);

}  // namespace trainscope::train

#endif  // TRAINSCOPE_TRAIN_TRAINER_H_
