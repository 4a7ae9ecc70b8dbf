// The comm watchdog (see watchdog.h): a polling thread over the flight recorder.
//
// Why polling rather than a hook in Dispatch: a hung op never returns to Dispatch, so only a
// thread that looks from outside can notice it; the recorder already holds everything it
// needs (issue time, state, error), and a snapshot every few hundred ms costs a ring copy.
#include "trainscope/comm/watchdog.h"

#include <algorithm>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "trainscope/core/os.h"
#include "trainscope/core/stacks.h"

namespace trainscope::comm {

std::optional<Stall> FindStall(const std::vector<FlightEntry>& entries,
                               const std::vector<ProcessGroupInfo>& groups, int64_t now_ns,
                               int64_t timeout_ns) {
  for (const FlightEntry& e : entries) {
    const bool failed = e.retired && e.error[0] != '\0';
    const bool late =
        !e.retired && e.time_created_ns > 0 && now_ns - e.time_created_ns >= timeout_ns;
    if (!failed && !late) continue;
    Stall s;
    s.entry = e;
    s.failed = failed;
    if (e.pg_id >= 0 && e.pg_id < static_cast<int>(groups.size())) {
      s.pg_name = groups[e.pg_id].name;
      s.pg_desc = groups[e.pg_id].desc;
    }
    // The recorder keeps no end time for a failed op: its age is now - issue too.
    s.age_ns = std::max<int64_t>(0, now_ns - e.time_created_ns);
    return s;
  }
  return std::nullopt;
}

std::string DescribeStall(int rank, const Stall& s) {
  const FlightEntry& e = s.entry;
  std::string what = e.is_p2p ? absl::StrCat(OpName(e.op), " p2p #", e.p2p_seq_id)
                              : absl::StrCat(OpName(e.op), " #", e.collective_seq_id);
  std::string where = absl::StrCat("group ", s.pg_name, s.pg_desc.empty() ? "" : " ", s.pg_desc);
  if (e.caller[0] != '\0') absl::StrAppend(&where, ", caller '", e.caller, "'");
  const std::string secs = absl::StrFormat("%.1f s", s.age_ns / 1e9);
  if (s.failed) {
    return absl::StrCat("rank ", rank, ": ", what, " (", where, ") failed after ", secs, ": ",
                        e.error);
  }
  return absl::StrCat("rank ", rank, ": ", what, " (", where, ") not completed after ", secs);
}

absl::StatusOr<std::unique_ptr<Watchdog>> Watchdog::Start(WatchdogOptions options) {
  if (options.recorder == nullptr) return absl::InvalidArgumentError("watchdog: no recorder");
  if (options.dump_path.empty()) return absl::InvalidArgumentError("watchdog: no dump path");
  if (options.timeout.count() <= 0) {
    return absl::InvalidArgumentError("watchdog: the timeout must be positive");
  }
  if (options.poll.count() <= 0) options.poll = std::chrono::milliseconds(50);
  std::unique_ptr<Watchdog> w(new Watchdog(std::move(options)));
  w->thread_ = std::thread([p = w.get()] { p->Loop(); });
  return w;
}

Watchdog::Watchdog(WatchdogOptions options) : options_(std::move(options)) {
  if (options_.dump_request != nullptr) last_request_ = options_.dump_request->load();
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Watchdog::Loop() {
  // The age check needs a ring copy: often enough to fire within ~10% of the timeout.
  const auto check_every =
      std::clamp(options_.timeout / 10, options_.poll, std::chrono::milliseconds(500));
  auto next_check = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(stop_mu_);
  while (!stop_) {
    stop_cv_.wait_for(lock, options_.poll);
    if (stop_) return;
    lock.unlock();
    bool asked = requested_.exchange(false);
    if (options_.dump_request != nullptr) {
      const int now = options_.dump_request->load(std::memory_order_relaxed);
      if (now != last_request_) asked = true;
      last_request_ = now;
    }
    if (asked) {
      std::lock_guard<std::mutex> check(check_mu_);
      (void)Dump();
    }
    if (!fired_.load() && std::chrono::steady_clock::now() >= next_check) {
      next_check = std::chrono::steady_clock::now() + check_every;
      (void)CheckNow();
    }
    lock.lock();
  }
}

std::string Watchdog::CheckNow() {
  std::string message;
  {
    std::lock_guard<std::mutex> lock(check_mu_);
    if (fired_.load()) return message_;
    message = Check();
    if (message.empty()) return "";
    message_ = message;
    fired_.store(true);
  }
  if (options_.on_timeout) options_.on_timeout(message);
  return message;
}

std::string Watchdog::FireNow(const std::string& what) {
  std::string message;
  {
    std::lock_guard<std::mutex> lock(check_mu_);
    if (fired_.load()) return message_;
    const FlightRecorder& r = *options_.recorder;
    std::optional<Stall> stall = FindStall(r.Snapshot(), r.ProcessGroups(), r.NowNs(), 0);
    if (stall) {
      stall->failed = true;
      stall->entry.error[0] = '\0';
      message = absl::StrCat(DescribeStall(options_.rank, *stall), what);
    } else {
      message = absl::StrCat("rank ", options_.rank, ": ", what);
    }
    std::string problem = Dump();
    if (!problem.empty()) absl::StrAppend(&message, " (", problem, ")");
    message_ = message;
    fired_.store(true);
  }
  if (options_.on_timeout) options_.on_timeout(message);
  return message;
}

std::string Watchdog::Check() {
  const FlightRecorder& r = *options_.recorder;
  std::optional<Stall> stall =
      FindStall(r.Snapshot(), r.ProcessGroups(), r.NowNs(),
                std::chrono::duration_cast<std::chrono::nanoseconds>(options_.timeout).count());
  if (!stall) return "";
  std::string message = DescribeStall(options_.rank, *stall);
  std::string problem = Dump();
  if (!problem.empty()) absl::StrAppend(&message, " (", problem, ")");
  return message;
}

std::string Watchdog::Dump() {
  std::string problem;
  absl::Status st = options_.recorder->DumpJson(options_.dump_path);
  if (!st.ok()) {
    problem = absl::StrCat("the flight recorder dump failed: ", st.message());
  }
  if (!options_.stacks_path.empty()) {
    std::string text = FormatThreadStacks(CollectThreadStacks(std::chrono::seconds(2)));
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(options_.stacks_path).parent_path(),
                                        ec);
    absl::Status ws = WriteFileAtomic(options_.stacks_path, text);
    if (!ws.ok()) {
      absl::StrAppend(&problem, problem.empty() ? "" : "; ",
                      "the thread stacks were not written: ", ws.message());
    }
  }
  dumps_.fetch_add(1);
  return problem;
}

}  // namespace trainscope::comm
