#include "trainscope/core/progress.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "trainscope/core/env_vars.h"
#include "trainscope/core/table.h"

namespace trainscope {
namespace {

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::atomic<std::FILE*> g_progress_sink{nullptr};

bool ProgressEnabled(std::FILE* sink) {
  if (sink == nullptr) return false;
  const char* off = getenv(envvar::kNoProgress);
  if (off && !strcmp(off, "1")) return false;
  const char* on = getenv(envvar::kProgress);
  if (on && !strcmp(on, "1")) return true;
  return isatty(fileno(sink));
}

}  // namespace

void SetProgressSink(std::FILE* sink) { g_progress_sink.store(sink); }

std::FILE* ProgressSink() { return g_progress_sink.load(); }

Progress::Progress(std::string label, uint64_t total, bool unit_bytes)
    : label_(std::move(label)),
      total_(total),
      unit_bytes_(unit_bytes),
      sink_(ProgressSink()),
      enabled_(ProgressEnabled(sink_)),
      start_ns_(NowNs()) {
  last_print_ns_ = start_ns_;
}

Progress::~Progress() {
  if (!enabled_) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (printed_) std::fputs("\n", sink_);
}

void Progress::Add(uint64_t amount) {
  done_ += amount;
  MaybePrint(false);
}

void Progress::Set(uint64_t done) {
  done_ = done;
  MaybePrint(false);
}

void Progress::MaybePrint(bool force) {
  if (!enabled_) return;
  int64_t now = NowNs();
  int64_t last = last_print_ns_.load();
  if (!force && now - last < 1000000000) return;
  if (!last_print_ns_.compare_exchange_strong(last, now)) return;
  std::lock_guard<std::mutex> lock(mu_);
  double secs = (now - start_ns_) / 1e9;
  uint64_t done = done_.load();
  auto fmt = [&](double v) { return unit_bytes_ ? FormatBytes(v) : FormatCount((long long)v); };
  std::string line = label_ + ": " + fmt(done);
  if (total_) {
    line += " / " + fmt(total_) + "  " + FormatDouble(100.0 * done / total_, 0) + "%";
  }
  if (secs > 0) line += "  " + fmt(done / secs) + "/s";
  if (total_ && done > 0 && done < total_) {
    line += "  eta " + FormatDouble(secs * (total_ - done) / done, 0) + " s";
  }
  std::fprintf(sink_, "\r%-78s", line.c_str());
  std::fflush(sink_);
  printed_ = true;
}

}  // namespace trainscope
