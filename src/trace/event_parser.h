// Private: turns one Chrome-trace event object (simdjson ondemand) into a compact Event.
#ifndef TRAINSCOPE_SRC_TRACE_EVENT_PARSER_H_
#define TRAINSCOPE_SRC_TRACE_EVENT_PARSER_H_

#include <cstdint>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/container/node_hash_map.h"
#include "simdjson.h"
#include "trainscope/trace/trace.h"

namespace trainscope::trace::internal {

struct RawEvent;  // the fields of one event object as read, before checking (event_parser.cc)

class EventParser {
 public:
  EventParser(RankTrace* out, const ReadOptions& options) : out_(out), opt_(options) {}

  // Parses one event. Returns a simdjson error when the object is not valid JSON (nothing is
  // stored or counted then); semantic problems (missing fields, fields of the wrong type or out
  // of range, unknown category, ...) are counted in out->stats, each event under one counter,
  // and return SUCCESS. `offset`: byte offset of the object, for warnings.
  simdjson::error_code Parse(simdjson::ondemand::object obj, int64_t offset);

 private:
  void Warn(int64_t offset, const char* what);
  simdjson::error_code ReadArgs(simdjson::ondemand::object args, RawEvent* r);
  void StoreMetadata(const RawEvent& r, int64_t offset);
  // False (and counted) when a field of a complete event is missing, mistyped or out of range.
  bool CheckComplete(const RawEvent& r, int64_t offset, int64_t* ts, int64_t* dur);
  void StoreComplete(const RawEvent& r, int64_t offset);

  RankTrace* out_;
  const ReadOptions& opt_;
  absl::node_hash_map<uint64_t, int64_t> last_ts_;  // (pid, tid) -> last ts_ns (stable refs)
  uint64_t last_track_ = ~uint64_t{0};
  int64_t* last_track_ts_ = nullptr;
  // Consecutive events mostly share pid and tid: skip the hash lookup then.
  std::string last_pid_text_ = "\x01", last_tid_text_ = "\x01";
  uint32_t last_pid_ = 0, last_tid_ = 0;
  absl::flat_hash_map<std::string, int> warned_;  // warning kind -> times
};

}  // namespace trainscope::trace::internal

#endif  // TRAINSCOPE_SRC_TRACE_EVENT_PARSER_H_
