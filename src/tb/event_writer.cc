// TensorBoard event-file writer (event_writer.h): Event protos from the generated classes,
// framed by tfrecord.cc, appended through a stdio buffer that is flushed on a timer.
#include "trainscope/tb/event_writer.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "tensorboard/event.pb.h"
#include "tensorboard/summary.pb.h"
#include "trainscope/tb/tfrecord.h"

namespace trainscope::tb {
namespace {

int64_t TbNowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string TbHostName() {
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') return "localhost";
  return host;
}

}  // namespace

std::string EventFileName(int64_t unix_s, const std::string& host) {
  return absl::StrCat("events.out.tfevents.", unix_s, ".", host);
}

absl::StatusOr<std::unique_ptr<EventWriter>> EventWriter::Open(const std::string& dir,
                                                               const EventWriterOptions& options) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat(dir, ": cannot create: ", ec.message()));
  const int64_t start_us = options.start_unix_us > 0 ? options.start_unix_us : TbNowUs();
  const std::string host = options.host.empty() ? TbHostName() : options.host;
  std::string path =
      (std::filesystem::path(dir) / EventFileName(start_us / 1000000, host)).string();
  // "x": never append to (or truncate) another writer's file of the same second.
  std::FILE* f = std::fopen(path.c_str(), "wbx");
  if (f == nullptr && errno == EEXIST) {
    path = absl::StrCat(path, ".", getpid());
    f = std::fopen(path.c_str(), "wbx");
  }
  if (f == nullptr) {
    return absl::InternalError(
        absl::StrCat(path, ": cannot create TensorBoard event file: ", std::strerror(errno)));
  }
  std::unique_ptr<EventWriter> w(new EventWriter(path, f, options));
  tensorflow::Event first;
  first.set_wall_time(static_cast<double>(start_us) / 1e6);
  first.set_file_version(kFileVersion);
  w->last_flush_us_ = start_us;
  absl::Status st = w->WriteEvent(first.SerializeAsString(), start_us);
  if (st.ok()) st = w->Flush();  // TensorBoard lists the run as soon as the file exists
  if (!st.ok()) return st;
  return w;
}

EventWriter::~EventWriter() { std::fclose(f_); }

absl::Status EventWriter::AddScalars(int64_t step, int64_t wall_time_us,
                                     const std::vector<Scalar>& scalars) {
  if (scalars.empty()) return absl::OkStatus();
  tensorflow::Event e;
  e.set_wall_time(static_cast<double>(wall_time_us) / 1e6);
  e.set_step(step);
  tensorflow::Summary* summary = e.mutable_summary();
  for (const Scalar& s : scalars) {
    tensorflow::Summary::Value* v = summary->add_value();
    v->set_tag(s.first);
    v->set_simple_value(static_cast<float>(s.second));
  }
  return WriteEvent(e.SerializeAsString(), wall_time_us);
}

absl::Status EventWriter::WriteEvent(const std::string& event_bytes, int64_t now_us) {
  const std::string record = FrameTfRecord(event_bytes);
  if (std::fwrite(record.data(), 1, record.size(), f_) != record.size()) {
    return absl::InternalError(absl::StrCat(path_, ": write failed (disk full?)"));
  }
  ++events_;
  if (static_cast<double>(now_us - last_flush_us_) >= options_.flush_every_s * 1e6 ||
      now_us < last_flush_us_) {  // a clock that stepped back: flush rather than wait
    last_flush_us_ = now_us;
    return Flush();
  }
  return absl::OkStatus();
}

absl::Status EventWriter::Flush() {
  if (std::fflush(f_) != 0) {
    return absl::InternalError(absl::StrCat(path_, ": write failed (disk full?)"));
  }
  return absl::OkStatus();
}

}  // namespace trainscope::tb
