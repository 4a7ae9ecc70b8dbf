// Streaming Chrome-trace reader.
//
// Why not one simdjson document: ondemand needs the whole padded file in memory plus a
// structural index of ~4 bytes per structural character (about the file size again), which
// breaks the "peak memory <= 2x file size" budget on GB traces. Instead the traceEvents array is
// parsed window by window:
//   1. read a window (chunk_bytes) after the unprocessed tail of the previous one;
//   2. cut it after its last newline: JSON strings cannot hold a raw newline, so the cut is never
//      inside a string, and every element before it is either complete or open at the cut;
//   3. wrap the window as "[" ... "]" in place (the byte before it and the byte at the cut are
//      overwritten and restored) and iterate it with simdjson ondemand, one compact Event per
//      element;
//   4. where simdjson stops (the open element at the cut, a malformed element, a truncated file)
//      a byte-level scanner finds element boundaries; malformed elements are counted and skipped
//      one by one, the open element moves to the next window, and a file that ends inside the
//      array is reported as truncated at its byte offset.
// Files without newlines (single-line JSON) take the byte-scanner path for every element.
// Where the bytes come from (a file through an Os, gzip, memory) is byte_source.cc's.
#include "trace/chrome_reader.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "simdjson.h"
#include "trace/event_parser.h"
#include "trainscope/core/progress.h"
#include "trainscope/core/status.h"

namespace trainscope::trace::internal {
namespace {

using simdjson::SUCCESS;
namespace od = simdjson::ondemand;

inline bool IsWs(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

const char* SkipWs(const char* p, const char* end) {
  while (p < end && IsWs(*p)) ++p;
  return p;
}
const char* SkipWsCommas(const char* p, const char* end) {
  while (p < end && (IsWs(*p) || *p == ',')) ++p;
  return p;
}

// End of the JSON value starting at p. nullptr: the value continues past `end`. A raw newline
// inside a string (impossible in valid JSON) ends the value there and sets *malformed.
const char* SkipValue(const char* p, const char* end, bool* malformed) {
  *malformed = false;
  if (p >= end) return nullptr;
  char c = *p;
  if (c == '"' || c == '{' || c == '[') {
    int depth = 0;
    bool in_string = false;
    for (; p < end; ++p) {
      char ch = *p;
      if (in_string) {
        if (ch == '\\') {
          ++p;
        } else if (ch == '"') {
          in_string = false;
          if (depth == 0) return p + 1;
        } else if (ch == '\n') {
          *malformed = true;
          return p;
        }
      } else if (ch == '"') {
        in_string = true;
      } else if (ch == '{' || ch == '[') {
        ++depth;
      } else if (ch == '}' || ch == ']') {
        if (--depth <= 0) return p + 1;
      }
    }
    return nullptr;
  }
  for (; p < end; ++p) {
    char ch = *p;
    if (ch == ',' || ch == '}' || ch == ']' || IsWs(ch)) return p;
  }
  return nullptr;
}

class Reader {
 public:
  Reader(ByteSource* src, const std::string& name, const ReadOptions& opt, RankTrace* out)
      : src_(src),
        name_(name),
        opt_(opt),
        out_(out),
        sink_(out, opt),
        progress_("trace read " + name, static_cast<uint64_t>(src->size_hint()), true) {}

  absl::Status Run();

 private:
  static constexpr size_t kPad = simdjson::SIMDJSON_PADDING + 8;
  int64_t Off(const char* p) const { return base_off_ + (p - buf_.get()); }
  absl::Status Fill(bool must_progress, bool* progressed);
  absl::Status ReadHeaderKeys(bool after_events, bool* found_events);
  absl::Status ReadEvents();
  // Parses [p, cut) with one ondemand document; returns where processing stopped.
  const char* FastWindow(const char* p, const char* cut, bool* array_end);
  // Element-by-element parsing of [p, limit); stops early at the array end or at an element that
  // continues past end_ (returns its start; *need_more).
  const char* SlowWindow(const char* p, const char* limit, bool* array_end, bool* need_more);
  void ParseOne(const char* p, const char* e);
  void Warn(std::string msg) {
    if (out_->stats.warnings.size() < opt_.max_warnings)
      out_->stats.warnings.push_back(std::move(msg));
  }

  ByteSource* src_;
  std::string name_;
  const ReadOptions& opt_;
  RankTrace* out_;
  EventParser sink_;
  Progress progress_;
  od::parser parser_;
  std::unique_ptr<char[]> buf_;
  size_t cap_ = 0;        // usable bytes (kPad more are allocated)
  size_t begin_ = 0;      // first unprocessed byte
  size_t end_ = 0;        // end of data
  int64_t base_off_ = 0;  // file offset of buf_[0]
  bool eof_ = false;
  bool object_form_ = false;
};

absl::Status Reader::Fill(bool must_progress, bool* progressed) {
  *progressed = false;
  if (eof_) return absl::OkStatus();
  // Keep one byte before the data for the "[" of FastWindow.
  // The buffer holds two windows; it grows only when one element outgrows half of it.
  size_t keep = end_ - begin_;
  if (!buf_ || keep + 1 + opt_.chunk_bytes > cap_ || (must_progress && keep + 1 >= cap_)) {
    size_t want = std::max(cap_, 2 * opt_.chunk_bytes + 1);
    while (keep + 1 + opt_.chunk_bytes > want) want *= 2;
    {
      std::unique_ptr<char[]> nb(new char[want + kPad]);
      if (keep) memcpy(nb.get() + 1, buf_.get() + begin_, keep);
      base_off_ += static_cast<int64_t>(begin_) - 1;
      buf_ = std::move(nb);
      cap_ = want;
      begin_ = 1;
      end_ = 1 + keep;
    }
  }
  if (begin_ != 1) {
    memmove(buf_.get() + 1, buf_.get() + begin_, keep);
    base_off_ += static_cast<int64_t>(begin_) - 1;
    begin_ = 1;
    end_ = 1 + keep;
  }
  while (end_ < cap_) {
    int64_t r = src_->Read(buf_.get() + end_, cap_ - end_);
    if (r < 0)
      return absl::DataLossError(
          absl::StrCat(name_, ": byte ", Off(buf_.get() + end_), ": ", src_->error()));
    if (r == 0) {
      eof_ = true;
      break;
    }
    end_ += static_cast<size_t>(r);
    *progressed = true;
    out_->stats.bytes += r;
    progress_.Set(static_cast<uint64_t>(
        src_->size_hint() ? std::min<int64_t>(out_->stats.bytes, src_->size_hint())
                          : out_->stats.bytes));
  }
  memset(buf_.get() + end_, ' ', kPad);
  return absl::OkStatus();
}

// Walks the keys of the top-level object until "traceEvents" (or its end), keeping
// distributedInfo. Values are skipped with the byte scanner (headers are small).
absl::Status Reader::ReadHeaderKeys(bool after_events, bool* found_events) {
  *found_events = false;
  bool progressed = false;
  while (true) {
    const char* end = buf_.get() + end_;
    const char* p = SkipWsCommas(buf_.get() + begin_, end);
    if (p == end) {
      if (eof_) {
        if (!after_events) {
          return absl::InvalidArgumentError(absl::StrCat(
              name_, ": byte ", Off(p), ": no \"traceEvents\" array (not a Chrome trace)"));
        }
        return absl::OkStatus();
      }
      begin_ = p - buf_.get();
      TS_RETURN_IF_ERROR(Fill(false, &progressed));
      continue;
    }
    if (*p == '}') {
      begin_ = p + 1 - buf_.get();
      if (!after_events) {
        return absl::InvalidArgumentError(
            absl::StrCat(name_, ": byte ", Off(p), ": no \"traceEvents\" array in the object"));
      }
      return absl::OkStatus();
    }
    bool bad = false;
    const char* key_end = (*p == '"') ? SkipValue(p, end, &bad) : nullptr;
    const char* colon = key_end ? SkipWs(key_end, end) : nullptr;
    const char* v = (colon && colon < end && *colon == ':') ? SkipWs(colon + 1, end) : nullptr;
    const char* v_end = nullptr;
    std::string_view key = key_end ? std::string_view(p + 1, key_end - p - 2) : "";
    if (v && v < end) {
      if (key == "traceEvents") {
        if (*v != '[') {
          return absl::InvalidArgumentError(
              absl::StrCat(name_, ": byte ", Off(v), ": \"traceEvents\" is not an array"));
        }
        begin_ = v + 1 - buf_.get();
        *found_events = true;
        return absl::OkStatus();
      }
      v_end = SkipValue(v, end, &bad);
      if (v_end && bad) v_end = nullptr;
    }
    if (!v_end) {
      if (*p != '"' || (colon && colon < end && *colon != ':') || bad) {
        return absl::InvalidArgumentError(
            absl::StrCat(name_, ": byte ", Off(p), ": malformed top-level key"));
      }
      if (eof_) {
        if (after_events) return absl::OkStatus();  // trailer cut short: events are in
        out_->stats.truncated = true;
        out_->stats.truncated_at_byte = Off(p);
        return absl::InvalidArgumentError(
            absl::StrCat(name_, ": byte ", Off(p), ": file ends before \"traceEvents\""));
      }
      begin_ = p - buf_.get();
      TS_RETURN_IF_ERROR(Fill(true, &progressed));
      continue;
    }
    if (key == "host_name" && *v == '"') {
      // The host, which tells two processes with the same pid apart (windows of one process
      // are grouped by host and pid).
      simdjson::dom::parser small;
      std::string_view host;
      if (small.parse(v, v_end - v).get_string().get(host) == SUCCESS)
        out_->host_name = std::string(host.substr(0, 256));
    }
    if (key == "distributedInfo" || key == "distributed_info") {
      // A small object: the DOM parser validates all of it first. (An ondemand document
      // that hit an error must not be read on: a second lookup dereferenced a null parser
      // on a malformed object such as {"backend": "nk": 0, ...}.)
      simdjson::dom::parser small;
      simdjson::dom::element info;
      if (small.parse(v, v_end - v).get(info) == SUCCESS && info.is_object()) {
        int64_t r = -1;
        auto rank_err = info["rank"].get_int64().get(r);
        if (rank_err == SUCCESS && r >= 0 && r < kMaxRank) {
          out_->rank = static_cast<int>(r);
          out_->rank_source = "distributedInfo";
        } else if (rank_err != simdjson::NO_SUCH_FIELD) {
          Warn(absl::StrCat("byte ", Off(v),
                            ": distributedInfo rank is not an integer in [0, 2^20), ignored"));
        }
        int64_t w = 0;
        if (info["world_size"].get_int64().get(w) == SUCCESS && w > 0 && w <= kMaxRank) {
          out_->world_size = static_cast<int>(w);
        }
      } else {
        Warn(
            absl::StrCat("byte ", Off(v), ": distributedInfo is not a valid JSON object, ignored"));
      }
    }
    begin_ = v_end - buf_.get();
  }
}

void Reader::ParseOne(const char* p, const char* e) {
  ++out_->stats.events_seen;
  od::document doc;
  od::object obj;
  size_t capacity = (buf_.get() + cap_ + kPad) - p;
  if (parser_.iterate(p, e - p, capacity).get(doc) != SUCCESS ||
      doc.get_object().get(obj) != SUCCESS || sink_.Parse(obj, Off(p)) != SUCCESS) {
    ++out_->stats.malformed;
    Warn(absl::StrCat("byte ", Off(p), ": malformed event skipped"));
  }
}

const char* Reader::SlowWindow(const char* p, const char* limit, bool* array_end, bool* need_more) {
  *array_end = false;
  *need_more = false;
  const char* end = buf_.get() + end_;
  while (true) {
    p = SkipWsCommas(p, end);
    if (p >= limit) return p;
    if (*p == ']') {
      *array_end = true;
      return p + 1;
    }
    bool bad = false;
    const char* e = SkipValue(p, end, &bad);
    if (!e) {
      *need_more = true;
      return p;
    }
    if (bad || *p != '{') {
      ++out_->stats.events_seen;
      ++out_->stats.malformed;
      Warn(absl::StrCat("byte ", Off(p), ": malformed event skipped"));
      if (e == p) ++e;
    } else {
      ParseOne(p, e);
    }
    p = e;
  }
}

const char* Reader::FastWindow(const char* p, const char* cut, bool* array_end) {
  *array_end = false;
  char* before = const_cast<char*>(p) - 1;
  char* at_cut = const_cast<char*>(cut);
  char saved_before = *before, saved_cut = *at_cut;
  *before = '[';
  *at_cut = ']';
  const char* last_start = nullptr;
  od::document doc;
  od::array arr;
  size_t capacity = (buf_.get() + cap_ + kPad) - before;
  if (parser_.iterate(before, cut - before + 1, capacity).get(doc) == SUCCESS &&
      doc.get_array().get(arr) == SUCCESS) {
    for (auto r : arr) {
      od::value v;
      if (std::move(r).get(v) != SUCCESS) break;
      std::string_view tok = v.raw_json_token();
      od::object obj;
      if (v.get_object().get(obj) != SUCCESS) break;
      if (sink_.Parse(obj, Off(tok.data())) != SUCCESS) break;
      ++out_->stats.events_seen;
      last_start = tok.data();
    }
  }
  *before = saved_before;
  *at_cut = saved_cut;
  const char* end = buf_.get() + end_;
  const char* q = p;
  if (last_start) {
    bool bad = false;
    q = SkipValue(last_start, end, &bad);
    TS_CHECK(q != nullptr);
  }
  q = SkipWsCommas(q, end);
  if (q >= cut) return q;
  if (*q == ']') {
    *array_end = true;
    return q + 1;
  }
  return q;  // the caller continues element by element from here
}

absl::Status Reader::ReadEvents() {
  bool progressed = false;
  while (true) {
    const char* end = buf_.get() + end_;
    const char* p = SkipWsCommas(buf_.get() + begin_, end);
    begin_ = p - buf_.get();
    if (!eof_ && static_cast<size_t>(end - p) < opt_.chunk_bytes / 2) {
      TS_RETURN_IF_ERROR(Fill(false, &progressed));
      if (progressed) continue;
      end = buf_.get() + end_;
      p = buf_.get() + begin_;
    }
    if (p >= end) {
      if (eof_) {
        out_->stats.truncated = true;
        out_->stats.truncated_at_byte = Off(p);
        Warn(absl::StrCat("byte ", Off(p), ": file ends inside the event array (truncated)"));
        return absl::OkStatus();
      }
      TS_RETURN_IF_ERROR(Fill(true, &progressed));
      continue;
    }
    if (*p == ']') {
      begin_ = p + 1 - buf_.get();
      return absl::OkStatus();
    }
    const char* cut = end;
    if (!eof_) {
      const void* nl = memrchr(p, '\n', end - p);
      cut = nl ? static_cast<const char*>(nl) + 1 : p;
    }
    bool array_end = false, need_more = false;
    const char* q = p;
    if (cut > p) {
      q = FastWindow(p, cut, &array_end);
      if (array_end) {
        begin_ = q - buf_.get();
        return absl::OkStatus();
      }
      if (q >= cut) {
        begin_ = q - buf_.get();
        continue;
      }
    }
    // Element by element: the rest of this window after an error, or a window without
    // newlines.
    const char* limit = (cut > p) ? cut : end;
    q = SlowWindow(q, limit, &array_end, &need_more);
    begin_ = q - buf_.get();
    if (array_end) return absl::OkStatus();
    if (need_more) {
      if (eof_) {
        out_->stats.truncated = true;
        out_->stats.truncated_at_byte = Off(q);
        Warn(absl::StrCat("byte ", Off(q), ": file ends inside an event (truncated); ",
                          end_ - begin_, " bytes of it ignored"));
        return absl::OkStatus();
      }
      TS_RETURN_IF_ERROR(Fill(true, &progressed));
    }
  }
}

absl::Status Reader::Run() {
  bool progressed = false;
  // About one event per 300 bytes in Kineto traces: avoid regrowing a GB-scale table.
  if (src_->size_hint() > 0) out_->events.reserve(src_->size_hint() / 400);
  TS_RETURN_IF_ERROR(Fill(true, &progressed));
  const char* end = buf_.get() + end_;
  const char* p = buf_.get() + begin_;
  if (end - p >= 3 && memcmp(p, "\xEF\xBB\xBF", 3) == 0) p += 3;
  p = SkipWs(p, end);
  if (p == end) return absl::InvalidArgumentError(absl::StrCat(name_, ": empty file"));
  if (*p == '[') {
    out_->format = "chrome-list";
    begin_ = p + 1 - buf_.get();
  } else if (*p == '{') {
    object_form_ = true;
    out_->format = "kineto";
    begin_ = p + 1 - buf_.get();
    bool found = false;
    TS_RETURN_IF_ERROR(ReadHeaderKeys(false, &found));
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat(name_, ": byte ", Off(p), ": not a Chrome trace (expected '{' or '[', found '",
                     std::string(1, *p), "')"));
  }
  TS_RETURN_IF_ERROR(ReadEvents());
  if (object_form_ && !out_->stats.truncated) {
    bool found = false;
    absl::Status s = ReadHeaderKeys(true, &found);
    if (!s.ok()) Warn(std::string(s.message()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ReadChromeTrace(ByteSource* src, const std::string& name, const ReadOptions& options,
                             RankTrace* out) {
  Reader reader(src, name, options, out);
  TS_RETURN_IF_ERROR(reader.Run());
  ClassifyDeviceEvents(out);
  return absl::OkStatus();
}

}  // namespace trainscope::trace::internal
