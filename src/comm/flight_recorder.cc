// FlightRecorder: the ring, caller tags and the PyTorch-layout JSON dump.
//
// Hot path. A record is one uncontended mutex and fixed-size copies into a slot that was
// allocated (and zeroed) at construction: the caller tag lives in the ScopedCallerTag on
// the caller's stack and is copied with memcpy, the thread's id and name are read once
// per thread and cached in thread-local storage. Record ids grow forever; id r lives in
// slot r % capacity, so Started/Completed find their entry in O(1) and can tell that it
// was overwritten (the slot holds another id) when the ring wrapped while the op ran.
#include "trainscope/comm/flight_recorder.h"

#include <pthread.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "trainscope/core/os.h"
#include "trainscope/core/status.h"

namespace trainscope::comm {
namespace {

thread_local const ScopedCallerTag* tls_caller_tag = nullptr;

// Cut `s` to at most `max` bytes without splitting a UTF-8 sequence.
size_t Utf8Prefix(absl::string_view s, size_t max) {
  if (s.size() <= max) return s.size();
  size_t n = max;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return n;
}

struct ThreadInfo {
  int64_t tid = 0;
  char name[16] = {};
};

const ThreadInfo& CurrentThread() {
  thread_local ThreadInfo info;
  if (info.tid == 0) {
    info.tid = static_cast<int64_t>(::syscall(SYS_gettid));
    if (pthread_getname_np(pthread_self(), info.name, sizeof(info.name)) != 0) info.name[0] = 0;
  }
  return info;
}

int64_t ClockNs(clockid_t clock) {
  timespec ts;
  clock_gettime(clock, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// c10::toString(ScalarType) spellings, which PyTorch's analyser compares.
const char* PyTorchDTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "Float";
    case DType::kBFloat16:
      return "BFloat16";
    case DType::kFloat16:
      return "Half";
    case DType::kInt32:
      return "Int";
    case DType::kInt64:
      return "Long";
  }
  return "Undefined";
}

// "[0, 1, 2]", as PyTorch writes pg_config ranks.
std::string RanksString(const std::vector<int>& ranks) {
  return absl::StrCat("[", absl::StrJoin(ranks, ", "), "]");
}

// "gloo:all_reduce", "nccl:send 0->1", "nccl:recv 1<-0" (ranks within the group).
std::string ProfilingName(const FlightEntry& e, const std::string& backend, int group_rank) {
  std::string name = absl::StrCat(backend, ":", OpName(e.op));
  if (e.op == OpType::kSend) absl::StrAppend(&name, " ", group_rank, "->", e.peer);
  if (e.op == OpType::kRecv) absl::StrAppend(&name, " ", group_rank, "<-", e.peer);
  return name;
}

}  // namespace

ScopedCallerTag::ScopedCallerTag(absl::string_view tag)
    : previous_(tls_caller_tag), size_(Utf8Prefix(tag, kMaxCallerTagBytes)) {
  if (size_ > 0) std::memcpy(text_, tag.data(), size_);
  text_[size_] = '\0';
  tls_caller_tag = this;
}

ScopedCallerTag::~ScopedCallerTag() {
  TS_CHECK(tls_caller_tag == this);  // destroyed on its own thread, innermost first
  tls_caller_tag = previous_;
}

absl::string_view CurrentCallerTag() {
  const ScopedCallerTag* t = tls_caller_tag;
  return t == nullptr ? absl::string_view() : absl::string_view(t->text_, t->size_);
}

const char* FlightStateName(FlightState state) {
  switch (state) {
    case FlightState::kScheduled:
      return "scheduled";
    case FlightState::kStarted:
      return "started";
    case FlightState::kCompleted:
      return "completed";
  }
  return "?";
}

absl::StatusOr<std::shared_ptr<FlightRecorder>> FlightRecorder::Create(
    FlightRecorderOptions options) {
  if (options.capacity < 1 || options.capacity > kMaxCapacity) {
    return absl::InvalidArgumentError(absl::StrCat("flight recorder capacity ", options.capacity,
                                                   " is outside 1..", kMaxCapacity, " entries"));
  }
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    return absl::InvalidArgumentError(absl::StrCat("flight recorder rank ", options.rank,
                                                   " is outside world size ", options.world_size));
  }
  return std::shared_ptr<FlightRecorder>(new FlightRecorder(options));
}

FlightRecorder::FlightRecorder(FlightRecorderOptions options)
    : options_(options),
      capacity_(options.capacity),
      mono_to_epoch_ns_(ClockNs(CLOCK_REALTIME) - ClockNs(CLOCK_MONOTONIC)),
      ring_(options.capacity) {}

absl::StatusOr<int> FlightRecorder::RegisterProcessGroup(ProcessGroupInfo info) {
  if (info.name.empty()) return absl::InvalidArgumentError("process group name is empty");
  if (info.ranks.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("process group '", info.name, "' has no ranks"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (const ProcessGroupInfo& g : groups_) {
    if (g.name == info.name) {
      return absl::AlreadyExistsError(absl::StrCat(
          "process group '", info.name,
          "' is already recorded by this flight recorder; give each communicator that shares "
          "it its own group name"));
    }
  }
  groups_.push_back(std::move(info));
  status_.emplace_back();
  return static_cast<int>(groups_.size() - 1);
}

FlightEntry* FlightRecorder::SlotFor(int64_t record_id) {
  if (record_id < 0) return nullptr;
  FlightEntry& e = ring_[static_cast<size_t>(record_id) % capacity_];
  return e.record_id == record_id ? &e : nullptr;
}

int64_t FlightRecorder::RecordScheduled(const FlightOp& op) {
  const ThreadInfo& thread = CurrentThread();
  const absl::string_view caller = CurrentCallerTag();
  std::lock_guard<std::mutex> lock(mu_);
  TS_CHECK(op.pg_id >= 0 && static_cast<size_t>(op.pg_id) < status_.size());
  const int64_t id = next_id_++;
  FlightEntry& e = ring_[static_cast<size_t>(id) % capacity_];
  e.record_id = id;
  e.pg_id = op.pg_id;
  e.collective_seq_id = op.collective_seq_id;
  e.p2p_seq_id = op.p2p_seq_id;
  e.op_id = op.op_id;
  e.op = op.op;
  e.dtype = op.dtype;
  e.input_numel = op.input_numel;
  e.output_numel = op.output_numel;
  e.peer = op.peer;
  e.is_p2p = IsP2P(op.op);
  e.async = op.async;
  e.step = op.step;
  e.retired = false;
  e.time_created_ns = op.enqueue_mono_ns + mono_to_epoch_ns_;
  e.time_discovered_started_ns = 0;
  e.time_discovered_completed_ns = 0;
  e.thread_id = thread.tid;
  std::memcpy(e.thread_name, thread.name, sizeof(e.thread_name));
  if (!caller.empty()) std::memcpy(e.caller, caller.data(), caller.size());
  e.caller[caller.size()] = '\0';
  e.error[0] = '\0';
  GroupStatus& s = status_[op.pg_id];
  if (e.is_p2p) {
    s.last_enqueued_p2p = std::max(s.last_enqueued_p2p, op.p2p_seq_id);
  } else {
    s.last_enqueued_collective = std::max(s.last_enqueued_collective, op.collective_seq_id);
  }
  return id;
}

void FlightRecorder::RecordStarted(int64_t record_id, int64_t mono_ns) {
  std::lock_guard<std::mutex> lock(mu_);
  FlightEntry* e = SlotFor(record_id);
  if (e == nullptr || e->time_discovered_started_ns != 0) return;
  e->time_discovered_started_ns = std::max(mono_ns + mono_to_epoch_ns_, e->time_created_ns);
  GroupStatus& s = status_[e->pg_id];
  if (e->is_p2p) {
    s.last_started_p2p = std::max(s.last_started_p2p, e->p2p_seq_id);
  } else {
    s.last_started_collective = std::max(s.last_started_collective, e->collective_seq_id);
  }
}

void FlightRecorder::RecordCompleted(int64_t record_id, int64_t mono_ns,
                                     const absl::Status& status) {
  // The error text is formatted before taking the lock (failures only).
  std::string error = status.ok() ? std::string() : status.ToString();
  std::lock_guard<std::mutex> lock(mu_);
  FlightEntry* e = SlotFor(record_id);
  if (e == nullptr || e->retired) return;
  const int64_t now = std::max(mono_ns + mono_to_epoch_ns_, e->time_created_ns);
  e->retired = true;
  if (!status.ok()) {
    size_t n = Utf8Prefix(error, sizeof(e->error) - 1);
    std::memcpy(e->error, error.data(), n);
    e->error[n] = '\0';
    return;
  }
  if (e->time_discovered_started_ns == 0) e->time_discovered_started_ns = now;
  e->time_discovered_completed_ns = std::max(now, e->time_discovered_started_ns);
  GroupStatus& s = status_[e->pg_id];
  if (e->is_p2p) {
    s.last_completed_p2p = std::max(s.last_completed_p2p, e->p2p_seq_id);
  } else {
    s.last_completed_collective = std::max(s.last_completed_collective, e->collective_seq_id);
  }
}

std::vector<FlightEntry> FlightRecorder::Snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t kept = std::min<int64_t>(next_id_, static_cast<int64_t>(capacity_));
  std::vector<FlightEntry> out;
  out.reserve(static_cast<size_t>(kept));
  for (int64_t id = next_id_ - kept; id < next_id_; ++id) {
    out.push_back(ring_[static_cast<size_t>(id) % capacity_]);
  }
  return out;
}

std::vector<ProcessGroupInfo> FlightRecorder::ProcessGroups() const {
  std::lock_guard<std::mutex> lock(mu_);
  return groups_;
}

int64_t FlightRecorder::NowNs() const { return ClockNs(CLOCK_MONOTONIC) + mono_to_epoch_ns_; }

int64_t FlightRecorder::recorded() const {
  std::lock_guard<std::mutex> lock(mu_);
  return next_id_;
}

// The dump: PyTorch's JSON layout (FlightRecorder dump_json: version, comm_lib_version,
// pg_config, pg_status, entries with its key names and types: pg_status values and
// thread_id as strings, 0 for times not reached, duration_ms only when known), then our
// keys. ordered_json keeps PyTorch's key order, which makes dumps easy to read.
std::string FlightRecorder::DumpJsonString(const FlightDumpOptions& options) const {
  using Json = nlohmann::ordered_json;
  std::vector<FlightEntry> entries;
  std::vector<ProcessGroupInfo> groups;
  std::vector<GroupStatus> status;
  int64_t recorded = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    groups = groups_;
    status = status_;
    recorded = next_id_;
  }
  entries = Snapshot();  // may include ops scheduled after the copy above: harmless

  std::vector<int> group_rank(groups.size(), -1);  // this rank's place in each group
  Json pg_config = Json::object();
  for (size_t g = 0; g < groups.size(); ++g) {
    const ProcessGroupInfo& pg = groups[g];
    auto it = std::find(pg.ranks.begin(), pg.ranks.end(), options_.rank);
    if (it != pg.ranks.end()) group_rank[g] = static_cast<int>(it - pg.ranks.begin());
    pg_config[pg.name] = {{"name", pg.name},
                          {"desc", pg.desc},
                          {"ranks", RanksString(pg.ranks)},
                          {"backend", pg.backend}};
  }
  Json pg_status = Json::object();
  for (size_t g = 0; g < status.size(); ++g) {
    const GroupStatus& s = status[g];
    pg_status[std::to_string(g)] = {
        {"last_enqueued_collective", std::to_string(s.last_enqueued_collective)},
        {"last_started_collective", std::to_string(s.last_started_collective)},
        {"last_completed_collective", std::to_string(s.last_completed_collective)},
        {"last_enqueued_p2p", std::to_string(s.last_enqueued_p2p)},
        {"last_started_p2p", std::to_string(s.last_started_p2p)},
        {"last_completed_p2p", std::to_string(s.last_completed_p2p)}};
  }

  Json list = Json::array();
  for (const FlightEntry& e : entries) {
    if (options.only_active && e.state() == FlightState::kCompleted) continue;
    if (e.pg_id < 0 || static_cast<size_t>(e.pg_id) >= groups.size()) continue;  // not possible
    const ProcessGroupInfo& pg = groups[e.pg_id];
    const std::string backend = options.nccl_profiling_names ? "nccl" : pg.backend;
    Json j;
    j["record_id"] = e.record_id;
    j["pg_id"] = e.pg_id;
    j["process_group"] = Json::array({pg.name, pg.desc});
    j["thread_name"] = std::string(e.thread_name);
    j["thread_id"] = std::to_string(e.thread_id);
    j["collective_seq_id"] = e.collective_seq_id;
    j["p2p_seq_id"] = e.p2p_seq_id;
    j["op_id"] = e.op_id;
    j["profiling_name"] = ProfilingName(e, backend, group_rank[e.pg_id]);
    j["time_created_ns"] = e.time_created_ns;
    if (e.state() == FlightState::kCompleted) {
      j["duration_ms"] = (e.time_discovered_completed_ns - e.time_discovered_started_ns) / 1e6;
    }
    const bool tensors = e.op != OpType::kBarrier;
    Json no_tensors = Json::array();
    Json dtype = Json::array({PyTorchDTypeName(e.dtype)});
    j["input_sizes"] = tensors ? Json::array({Json::array({e.input_numel})}) : no_tensors;
    j["input_dtypes"] = tensors ? dtype : no_tensors;
    j["output_sizes"] = tensors ? Json::array({Json::array({e.output_numel})}) : no_tensors;
    j["output_dtypes"] = tensors ? dtype : no_tensors;
    j["state"] = FlightStateName(e.state());
    j["time_discovered_started_ns"] = e.time_discovered_started_ns;
    j["time_discovered_completed_ns"] = e.time_discovered_completed_ns;
    j["retired"] = e.retired;
    j["timeout_ms"] = pg.timeout_ms;
    j["is_p2p"] = e.is_p2p;
    j["frames"] = Json::array();
    // trainscope's keys.
    j["caller"] = std::string(e.caller);
    j["async"] = e.async;
    if (e.step >= 0) j["step"] = e.step;
    if (e.peer >= 0) j[e.op == OpType::kBroadcast ? "root" : "peer"] = e.peer;
    if (e.error[0] != '\0') j["error"] = std::string(e.error);
    list.push_back(std::move(j));
  }

  Json out;
  out["version"] = kPyTorchVersion;
  out["comm_lib_version"] = "";
  out["pg_config"] = std::move(pg_config);
  out["pg_status"] = std::move(pg_status);
  out["entries"] = std::move(list);
  out["rank"] = options_.rank;
  out["world_size"] = options_.world_size;
  out["backend"] = groups.empty() ? std::string() : groups[0].backend;
  out["trainscope"] = {
      {"format", kFormat},
      {"version", kFormatVersion},
      {"capacity", capacity_},
      {"recorded", recorded},
      {"overwritten", std::max<int64_t>(0, recorded - static_cast<int64_t>(capacity_))},
      {"nccl_profiling_names", options.nccl_profiling_names},
      {"only_active", options.only_active}};
  if (!options.reason.empty()) out["trainscope"]["reason"] = options.reason;
  // Tags, thread names and error texts are the caller's bytes: invalid UTF-8 is replaced,
  // never thrown.
  return out.dump(1, ' ', false, Json::error_handler_t::replace) + "\n";
}

absl::Status FlightRecorder::DumpJson(const std::string& path,
                                      const FlightDumpOptions& options) const {
  absl::Status st = WriteFileAtomic(path, DumpJsonString(options));
  if (!st.ok()) {
    return absl::Status(
        st.code(), absl::StrCat("writing the flight recorder dump ", path, ": ", st.message()));
  }
  return absl::OkStatus();
}

}  // namespace trainscope::comm
