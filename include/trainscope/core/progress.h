// Progress: "long work shows progress". Prints at most one line a second to the process's
// progress sink ("scan: 1.2 GB / 4.0 GB  30%  310 MB/s  eta 9 s"), only when the sink is a
// terminal or TRAINSCOPE_PROGRESS=1, never when TRAINSCOPE_NO_PROGRESS=1. Thread-safe.
//
// Library code never writes to the terminal on its own: the sink is null (no progress)
// until the executable's main() calls SetProgressSink(stderr). The Python module never
// sets it, so a library call made from a user's script prints nothing.
#ifndef TRAINSCOPE_CORE_PROGRESS_H_
#define TRAINSCOPE_CORE_PROGRESS_H_

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>

namespace trainscope {

// Where Progress lines go from now on (null: nowhere). For main(), before any work starts;
// a Progress created earlier keeps the sink it was created with. Thread-safe.
void SetProgressSink(std::FILE* sink);
std::FILE* ProgressSink();

class Progress {
 public:
  // `total` may be 0 when unknown; `unit_bytes` formats amounts as bytes.
  Progress(std::string label, uint64_t total, bool unit_bytes);
  ~Progress();  // ends the line if one was printed
  void Add(uint64_t amount);
  void Set(uint64_t done);
  bool enabled() const { return enabled_; }

 private:
  void MaybePrint(bool force);
  const std::string label_;
  const uint64_t total_;
  const bool unit_bytes_;
  std::FILE* const sink_;  // null: disabled
  const bool enabled_;
  const int64_t start_ns_;
  std::atomic<uint64_t> done_{0};
  std::atomic<int64_t> last_print_ns_{0};
  std::mutex mu_;  // serialises printing
  bool printed_ = false;
};

}  // namespace trainscope

#endif  // TRAINSCOPE_CORE_PROGRESS_H_
