// A TensorBoard event-file writer for scalars, so `tensorboard --logdir` shows a run with the
// viewer its users know. libtorch-free; the trainer calls it through its metrics writer
// (train/metrics.h), which is the one place every step's figures pass.
//
// The file is what TensorBoard's own writers produce: TFRecord framing (tfrecord.h) around
// tensorflow.Event protos (proto/tensorboard), named events.out.tfevents.<unix s>.<host>,
// starting with an Event whose file_version is "brain.Event:2", then one Event per step whose
// Summary holds one Value per tag with `simple_value` set (the classic scalar form every
// TensorBoard version reads; docs/formats.md "TensorBoard scalars").
//
// Records are buffered and flushed when `flush_every_s` has passed since the last flush (so
// a live TensorBoard, which re-reads growing files, sees a running job within a few seconds),
// on Flush() and on destruction. A crash loses at most the unflushed tail; a record cut short
// by a kill is what TensorBoard and diagnose's reader treat as the end of the file.
// Thread-safety: none; one thread writes (the trainer's metrics writer holds its own lock).
#ifndef TRAINSCOPE_TB_EVENT_WRITER_H_
#define TRAINSCOPE_TB_EVENT_WRITER_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace trainscope::tb {

inline constexpr char kFileVersion[] = "brain.Event:2";

// "events.out.tfevents.<unix_s>.<host>" (TensorBoard picks files by the "tfevents" part).
std::string EventFileName(int64_t unix_s, const std::string& host);

struct EventWriterOptions {
  double flush_every_s = 2;  // 0: flush after every record
  // Wall time of the file_version event and the file name, in microseconds since the epoch;
  // 0: the system clock. Tests pass a fixed time for a deterministic file.
  int64_t start_unix_us = 0;
  std::string host;  // "" = gethostname()
};

// One named scalar of a step, e.g. {"train/loss", 2.31}.
using Scalar = std::pair<std::string, double>;

class EventWriter {
 public:
  // Creates `dir` (and its parents) and a new event file in it, and writes the file_version
  // event. Errors: Internal naming the path when the directory or file cannot be created or
  // written. Two writers opened in one directory in the same second by one host get distinct
  // names (a ".<pid>" suffix on a clash), as TensorBoard's own writers do.
  static absl::StatusOr<std::unique_ptr<EventWriter>> Open(const std::string& dir,
                                                           const EventWriterOptions& options);
  ~EventWriter();  // flushes and closes; errors are dropped (call Flush() to see them)
  EventWriter(const EventWriter&) = delete;
  EventWriter& operator=(const EventWriter&) = delete;

  // One Event at `step` with `wall_time_us` (microseconds since the epoch) holding a Value per
  // scalar; non-finite values are written as they are (TensorBoard draws NaN and Inf). No
  // event when `scalars` is empty. Errors: Internal naming the file when a write fails.
  absl::Status AddScalars(int64_t step, int64_t wall_time_us, const std::vector<Scalar>& scalars);
  // Writes buffered records to the file. Internal naming the file on failure.
  absl::Status Flush();

  const std::string& path() const { return path_; }
  int64_t events() const { return events_; }  // written, file_version included

 private:
  EventWriter(std::string path, std::FILE* f, const EventWriterOptions& options)
      : path_(std::move(path)), f_(f), options_(options) {}
  absl::Status WriteEvent(const std::string& event_bytes, int64_t now_us);

  // Constant after construction.
  const std::string path_;
  std::FILE* const f_;
  const EventWriterOptions options_;
  // Mutable state (one writing thread).
  int64_t events_ = 0;
  int64_t last_flush_us_ = 0;
};

}  // namespace trainscope::tb

#endif  // TRAINSCOPE_TB_EVENT_WRITER_H_
