#include "trace/event_parser.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iterator>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "trace/ascend_rank.h"
#include "trace/chrome_reader.h"
#include "trainscope/core/status.h"

namespace trainscope::trace {
namespace {
bool NameHas(std::string_view s, std::string_view sub) {
  return s.find(sub) != std::string_view::npos;
}
bool StartsNoCase(std::string_view s, std::string_view p) {
  if (s.size() < p.size()) return false;
  for (size_t i = 0; i < p.size(); ++i)
    if (absl::ascii_tolower(static_cast<unsigned char>(s[i])) !=
        absl::ascii_tolower(static_cast<unsigned char>(p[i])))
      return false;
  return true;
}
bool EndsWith(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.substr(s.size() - p.size()) == p;
}
}  // namespace

uint32_t StringTable::Intern(std::string_view s) {
  auto it = ids_.find(absl::string_view(s.data(), s.size()));
  if (it != ids_.end()) return it->second;
  uint32_t id = static_cast<uint32_t>(strings_.size());
  strings_.emplace_back(s);
  ids_.emplace(std::string(s), id);
  return id;
}

bool ParseUsToNs(std::string_view t, int64_t* ns) {
  while (!t.empty() &&
         (t.back() == ' ' || t.back() == '\t' || t.back() == '\n' || t.back() == '\r'))
    t.remove_suffix(1);
  while (!t.empty() && (t.front() == ' ' || t.front() == '\t')) t.remove_prefix(1);
  if (t.empty()) return false;
  size_t i = 0;
  bool neg = false;
  if (t[0] == '-' || t[0] == '+') {
    neg = t[0] == '-';
    i = 1;
  }
  int64_t whole = 0;
  size_t digits = 0;
  for (; i < t.size() && t[i] >= '0' && t[i] <= '9'; ++i, ++digits) {
    if (whole > (INT64_MAX / 10000)) return false;  // > ~9.2e14 s: not a trace time
    whole = whole * 10 + (t[i] - '0');
  }
  int64_t frac = 0;
  int frac_digits = 0;
  if (i < t.size() && t[i] == '.') {
    ++i;
    for (; i < t.size() && t[i] >= '0' && t[i] <= '9'; ++i, ++digits) {
      if (frac_digits < 3) {
        frac = frac * 10 + (t[i] - '0');
        ++frac_digits;
      }
    }
  }
  if (digits == 0) return false;
  if (i < t.size()) {
    if (t[i] != 'e' && t[i] != 'E') return false;
    // Exponent form (rare): go through long double, still far finer than a ns at trace scale.
    std::string s(t);
    char* endp = nullptr;
    long double v = strtold(s.c_str(), &endp);
    if (!endp || *endp) return false;
    v *= 1000.0L;
    if (v > 9.2e18L || v < -9.2e18L) return false;
    *ns = static_cast<int64_t>(v);
    return true;
  }
  while (frac_digits < 3) {
    frac *= 10;
    ++frac_digits;
  }
  int64_t v = whole * 1000 + frac;
  *ns = neg ? -v : v;
  return true;
}

std::vector<std::pair<std::string, int64_t>> BadRecordCounts(const ParseStats& s) {
  return {{"malformed", s.malformed},
          {"missing_fields", s.missing_fields},
          {"unknown_category", s.unknown_category},
          {"out_of_order", s.out_of_order},
          {"ids_above_2p53", s.ids_above_2p53},
          {"negative_or_huge_dur", s.negative_or_huge_dur},
          {"bad_ts", s.bad_ts},
          {"bad_dur", s.bad_dur},
          {"bad_pid_tid", s.bad_pid_tid},
          {"bad_category", s.bad_category},
          {"bad_args", s.bad_args},
          {"bad_values", s.bad_values},
          {"negative_launch_delay", s.negative_launch_delay}};
}

bool HasBadRecords(const ParseStats& s) {
  if (s.truncated) return true;
  for (const auto& [name, n] : BadRecordCounts(s))
    if (n) return true;
  return false;
}

std::string DescribeBadRecords(const ParseStats& s) {
  // The first five always (a stable prefix that scripts grep), the others when non-zero.
  static constexpr const char* kLabels[] = {"malformed",
                                            "missing fields",
                                            "unknown category",
                                            "out of order",
                                            "ids above 2^53",
                                            "negative or > 7 day dur",
                                            "bad ts",
                                            "bad dur",
                                            "bad pid/tid",
                                            "bad cat",
                                            "bad args",
                                            "bad values",
                                            "negative launch delay"};
  std::string out;
  size_t i = 0;
  for (const auto& [name, n] : BadRecordCounts(s)) {
    TS_CHECK(i < std::size(kLabels));
    if (i < 5 || n) absl::StrAppend(&out, out.empty() ? "" : ", ", n, " ", kLabels[i]);
    ++i;
  }
  if (s.truncated) absl::StrAppend(&out, ", truncated at byte ", s.truncated_at_byte);
  return out;
}

DeviceKind ClassifyDeviceName(std::string_view n) {
  // HTA checks communication first, then memory, then its list of non-compute names.
  auto starts = [&](std::string_view p) { return n.substr(0, p.size()) == p; };
  if (starts("nccl") || starts("hip") || starts("hccl") || NameHas(n, "ncclKernel"))
    return DeviceKind::kComm;
  if (starts("Memcpy") || starts("Memset") || starts("hipMemcpy") || starts("hipMemset") ||
      starts("dma"))
    return DeviceKind::kMemory;
  if (NameHas(n, "Memcpy") || NameHas(n, "Memset") || NameHas(n, "dma") || NameHas(n, "Sync") ||
      starts("Stream Wait Event") || starts("runFunction") || starts("job_exe") ||
      starts("packet") || starts("pe_exe") || starts("cpum_exe_subgraph") ||
      starts("collective_subgraph_execution") ||
      (starts("cuda") && n.find("LaunchKernel", 4) != std::string_view::npos))
    return DeviceKind::kOther;
  return DeviceKind::kCompute;
}

DeviceKind ClassifyAscendName(std::string_view name) {
  auto starts = [&](std::string_view p) { return StartsNoCase(name, p); };
  if (starts("nccl") || starts("hccl") || starts("hcom") || starts("rccl") ||
      NameHas(name, "ncclKernel") || NameHas(name, "ncclDevKernel") || starts("c10d::") ||
      starts("gloo:") || starts("allreduce") || starts("all_reduce") || starts("allgather") ||
      starts("reducescatter"))
    return DeviceKind::kComm;
  if (starts("memcpy") || starts("memset") || starts("hipmemcpy") || starts("hipmemset") ||
      starts("dma") || starts("MEMCPY_ASYNC") || NameHas(name, "Memcpy") || NameHas(name, "Memset"))
    return DeviceKind::kMemory;
  return DeviceKind::kCompute;
}

namespace internal {
namespace {

namespace od = simdjson::ondemand;
using simdjson::SUCCESS;

Category CategoryOf(std::string_view cat, bool* known) {
  *known = true;
  if (cat.empty()) return Category::kNone;
  // Current Kineto names first, then the older capitalised ones.
  if (cat == "cpu_op" || cat == "Operator" || cat == "operator") return Category::kCpuOp;
  if (cat == "kernel" || cat == "Kernel") return Category::kKernel;
  if (cat == "cuda_runtime" || cat == "Runtime" || cat == "cuda_driver" ||
      EndsWith(cat, "_runtime") || EndsWith(cat, "_driver"))
    return Category::kRuntime;
  if (cat == "user_annotation" || cat == "User_annotation") return Category::kUserAnnotation;
  if (cat == "gpu_user_annotation" || cat == "gpu_user_Annotation")
    return Category::kGpuUserAnnotation;
  if (cat == "gpu_memcpy" || cat == "Memcpy") return Category::kGpuMemcpy;
  if (cat == "gpu_memset" || cat == "Memset") return Category::kGpuMemset;
  if (cat == "cuda_sync") return Category::kCudaSync;
  if (cat == "python_function") return Category::kPythonFunction;
  if (cat == "gc") return Category::kGc;
  if (cat == "Trace" || cat == "enqueue" || cat == "dequeue" || cat == "cpu_instant_event" ||
      cat == "cuda_profiler_range" || cat == "overhead" || cat == "Overhead" ||
      cat == "python_function_call" || cat == "ac2g" || cat == "fwdbwd" || cat == "async_npu" ||
      cat == "async_task_queue" || cat == "HostToDevice" || cat == "privateuse1_runtime" ||
      cat == "mtia_ccp_events")
    return Category::kOther;
  *known = false;
  return Category::kUnknown;
}

// What a scalar field held.
enum class Kind : uint8_t {
  kAbsent,  // no such key, or null
  kString,
  kNumber,  // the token as written (not validated: "1.2.3" and "-" are possible)
  kOther,   // an object or an array (a wrong type for every field read this way)
};
struct Scalar {
  std::string_view text;
  Kind kind = Kind::kAbsent;
};

// Raw text of a scalar without asking its type first: numbers as written, strings without their
// quotes (timestamps and ids carry no escapes). Objects/arrays give kOther with no text, null
// kAbsent; true/false and anything else that is not JSON are an error (the event is malformed).
simdjson::error_code FastScalar(od::value v, Scalar* out) {
  std::string_view tok = v.raw_json_token();
  *out = Scalar();
  if (tok.empty()) return SUCCESS;
  char c = tok[0];
  if (c == '"') {
    out->kind = Kind::kString;
    size_t q = tok.find('"', 1);
    if (q == std::string_view::npos || tok.substr(1, q - 1).find('\\') != std::string_view::npos) {
      return v.get_string().get(out->text);
    }
    out->text = tok.substr(1, q - 1);
    return SUCCESS;
  }
  if (c == '{' || c == '[') {
    out->kind = Kind::kOther;
    return SUCCESS;
  }
  if (c == 'n') return SUCCESS;
  if (c != '-' && (c < '0' || c > '9')) return simdjson::INCORRECT_TYPE;  // not JSON
  while (!tok.empty() &&
         (tok.back() == ' ' || tok.back() == '\n' || tok.back() == '\r' || tok.back() == '\t' ||
          tok.back() == ',' || tok.back() == '}' || tok.back() == ']'))
    tok.remove_suffix(1);
  out->kind = Kind::kNumber;
  out->text = tok;
  return SUCCESS;
}

// Text of a number or string value (strings unescaped). Empty on error.
simdjson::error_code ScalarText(od::value v, std::string_view* out) {
  od::json_type t;
  auto err = v.type().get(t);
  if (err) return err;
  if (t == od::json_type::string) return v.get_string().get(*out);
  if (t == od::json_type::number || t == od::json_type::boolean) {
    *out = v.raw_json_token();
    while (!out->empty() && (out->back() == ' ' || out->back() == '\n' || out->back() == '\r' ||
                             out->back() == '\t'))
      out->remove_suffix(1);
    return SUCCESS;
  }
  *out = std::string_view();
  return SUCCESS;  // null, object, array: treated as absent (skipped by the iterator)
}

constexpr uint64_t k2p53 = uint64_t{1} << 53;

// The key of a field without unescaping it (keys of trace events have no escapes; when one
// does, it is unescaped). The raw key always ends with its closing quote inside the document.
simdjson::error_code KeyOf(od::field& f, std::string_view* key) {
  const char* p = f.key().raw();
  const char* q = p;
  while (*q != '"' && *q != '\\') ++q;
  if (*q == '"') {
    *key = std::string_view(p, q - p);
    return SUCCESS;
  }
  return f.unescaped_key().get(*key);
}

// Decimal digits to uint64; false for anything else, and beyond 2^64 - 1 (no saturation: two
// different overflowing ids must not become equal).
bool ParseU64(std::string_view s, uint64_t* v) {
  if (s.empty()) return false;
  uint64_t x = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    uint64_t d = static_cast<uint64_t>(c - '0');
    if (x > (UINT64_MAX - d) / 10) return false;
    x = x * 10 + d;
  }
  *v = x;
  return true;
}

// A pid or tid: any string (torch_npu and old Kineto name some tracks), or an integer that fits
// int64 or uint64. Absent is valid too (legacy traces): the event lands on the "" track.
bool ValidPidTid(const Scalar& s) {
  if (s.kind == Kind::kAbsent || s.kind == Kind::kString) return true;
  if (s.kind != Kind::kNumber) return false;
  std::string_view t = s.text;
  uint64_t v = 0;
  if (!t.empty() && t[0] == '-') return ParseU64(t.substr(1), &v) && v <= (uint64_t{1} << 63);
  return ParseU64(t, &v);
}

// An id in args (correlation, External id): a non-negative integer below 2^64, as a number or
// a string. Absent: 0 ("none"). False: the value is unusable (counted, the id ignored).
bool ParseArgId(const Scalar& s, uint64_t* id) {
  *id = 0;
  if (s.kind == Kind::kAbsent) return true;
  if (s.kind == Kind::kOther) return false;
  if (!ParseU64(s.text, id)) {
    *id = 0;
    return false;
  }
  return true;
}

// A device stream: an integer in [-2^31, 2^32) ("7", 7, "7.0"). Absent: -1 (host). CUPTI ids
// are unsigned 32-bit: Kineto writes a context-wide sync on stream 4294967295, which HTA counts
// as device activity; ids above INT32_MAX are stored as INT32_MAX.
bool ParseStream(const Scalar& s, int64_t* stream) {
  if (s.kind == Kind::kAbsent) return true;
  int64_t ns = 0;  // ParseUsToNs keeps 3 decimals exactly: stream * 1000
  if (s.kind == Kind::kOther || !ParseUsToNs(s.text, &ns) || ns % 1000 != 0 ||
      ns / 1000 < INT32_MIN || ns / 1000 > int64_t{UINT32_MAX})
    return false;
  *stream = std::min<int64_t>(ns / 1000, INT32_MAX);
  return true;
}

}  // namespace

void EventParser::Warn(int64_t offset, const char* what) {
  int& n = warned_[what];
  if (n++ < 3 && out_->stats.warnings.size() < opt_.max_warnings)
    out_->stats.warnings.push_back(absl::StrCat("byte ", offset, ": ", what));
}

// Everything Parse reads from one event object, before any of it is checked.
struct RawEvent {
  Scalar ph, cat, name, ts, dur, pid, tid, id;
  Scalar stream, correlation, external_id;  // from args
  bool args_not_object = false;
  bool collective = false;
  std::string_view meta_value, input_dims, input_type;
  std::string_view mhz;  // args.MHz of a counter ("AI Core Freq" of torch_npu), raw token
};

namespace {

// torch_npu's trace_view.json has the AI Core frequency as a counter ("AI Core Freq", args.MHz);
// the Ascend frequency rule reads its samples (ascend_rules.cc). Kept only when the trace is
// read as part of a torch_npu folder (RankTrace::ascend exists); still counted in other_phases.
void KeepCounter(const RawEvent& r, RankTrace* out) {
  if (!out->ascend || r.name.text != "AI Core Freq") return;
  std::string v(r.mhz);
  absl::StripAsciiWhitespace(&v);
  if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
  double mhz = 0;
  if (!absl::SimpleAtod(v, &mhz) || !(mhz > 0) || mhz > 1e5) return;
  std::vector<int64_t>& samples = out->ascend->aicore_freq_mhz;
  if (samples.size() < 100000) samples.push_back(static_cast<int64_t>(std::llround(mhz)));
}

}  // namespace

simdjson::error_code EventParser::ReadArgs(od::object args, RawEvent* r) {
  for (auto af_result : args) {
    od::field af;
    auto err = std::move(af_result).get(af);
    if (err) return err;
    std::string_view ak;
    err = KeyOf(af, &ak);
    if (err) return err;
    od::value av = af.value();
    if (ak == "stream" || ak == "Stream Id") {
      err = FastScalar(av, &r->stream);
    } else if (ak == "correlation") {
      err = FastScalar(av, &r->correlation);
    } else if (ak == "External id") {
      err = FastScalar(av, &r->external_id);
    } else if (ak == "Input Dims" || ak == "Input Shapes") {
      od::json_type t;
      err = av.type().get(t);
      if (!err) {
        if (t == od::json_type::string) {
          err = av.get_string().get(r->input_dims);
        } else if (t == od::json_type::array) {
          od::array a;
          err = av.get_array().get(a);
          if (!err) err = a.raw_json().get(r->input_dims);
        }
      }
    } else if (ak == "Input type") {
      od::json_type t;
      err = av.type().get(t);
      if (!err && t == od::json_type::array) {
        od::array a;
        err = av.get_array().get(a);
        if (!err) err = a.raw_json().get(r->input_type);
      } else if (!err && t == od::json_type::string) {
        err = av.get_string().get(r->input_type);
      }
    } else if (ak == "Collective name") {
      r->collective = true;
    } else if (ak == "name" || ak == "labels") {
      err = ScalarText(av, &r->meta_value);
    } else if (ak == "MHz") {
      r->mhz = av.raw_json_token();  // checked only for an AI Core Freq counter (KeepCounter)
    }
    if (err) return err;
  }
  return SUCCESS;
}

simdjson::error_code EventParser::Parse(od::object obj, int64_t offset) {
  RawEvent r;
  for (auto field_result : obj) {
    od::field field;
    auto err = std::move(field_result).get(field);
    if (err) return err;
    std::string_view key;
    err = KeyOf(field, &key);
    if (err) return err;
    od::value v = field.value();
    if (key == "ph") {
      err = FastScalar(v, &r.ph);
    } else if (key == "name") {
      err = FastScalar(v, &r.name);
    } else if (key == "cat") {
      err = FastScalar(v, &r.cat);
    } else if (key == "ts") {
      err = FastScalar(v, &r.ts);
    } else if (key == "dur") {
      err = FastScalar(v, &r.dur);
    } else if (key == "pid") {
      err = FastScalar(v, &r.pid);
    } else if (key == "tid") {
      err = FastScalar(v, &r.tid);
    } else if (key == "id") {
      err = FastScalar(v, &r.id);
    } else if (key == "args") {
      // Annotations and Python frames carry nothing the analyses use: let ondemand skip them.
      std::string_view c = r.cat.text;
      if (c == "python_function" || c == "user_annotation" || c == "gpu_user_annotation" ||
          c == "Trace")
        continue;
      od::object args;
      if (v.get_object().get(args) == SUCCESS) {
        err = ReadArgs(args, &r);
      } else {
        // null is "no args"; a string, number or array cannot hold the ids read here.
        od::json_type t;
        err = v.type().get(t);
        r.args_not_object = !err && t != od::json_type::null;
      }
    }
    if (err) return err;
  }
  // The object was read completely: from here on every outcome is counted exactly once.
  // HTA rounds all times when any event's ts is a float (pandas gives the column float64).
  // (A plain loop: string_view::find_first_of calls memchr once per character, 6% of a read.)
  if (r.ts.kind == Kind::kNumber && !out_->fractional_ts &&
      std::any_of(r.ts.text.begin(), r.ts.text.end(),
                  [](char c) { return c == '.' || c == 'e' || c == 'E'; })) {
    out_->fractional_ts = true;
  }
  std::string_view ph = r.ph.text;
  if (ph.empty() && r.dur.kind != Kind::kAbsent) ph = "X";
  if (ph == "s" || ph == "f" || ph == "t") {
    ++out_->stats.flow_events;
    uint64_t flow_id = 0;
    if (ParseArgId(r.id, &flow_id) && flow_id > k2p53) ++out_->stats.ids_above_2p53;
    return SUCCESS;
  }
  if (ph == "M") {
    ++out_->stats.metadata_events;
    StoreMetadata(r, offset);
    return SUCCESS;
  }
  if (ph != "X") {
    ++out_->stats.other_phases;
    if (ph == "C") KeepCounter(r, out_);
    return SUCCESS;
  }
  StoreComplete(r, offset);
  return SUCCESS;
}

void EventParser::StoreMetadata(const RawEvent& r, int64_t offset) {
  if (!ValidPidTid(r.pid) || !ValidPidTid(r.tid)) {
    ++out_->stats.bad_pid_tid;
    Warn(offset,
         "metadata event with a pid or tid that is not a string or a 64-bit integer "
         "skipped");
    return;
  }
  if (r.meta_value.empty()) return;
  uint32_t pid = out_->strings.Intern(r.pid.text);
  if (r.name.text == "process_name" || r.name.text == "process_labels") {
    std::string& pn = out_->process_names[pid];
    if (pn.empty() || r.name.text == "process_name") pn = std::string(r.meta_value);
  } else if (r.name.text == "thread_name") {
    out_->thread_names[{pid, out_->strings.Intern(r.tid.text)}] = std::string(r.meta_value);
  }
}

// Checks a complete ("X") event field by field; the first bad field decides the one counter it
// is dropped under. Args are checked last: an unusable id or stream is ignored (the event keeps
// its own times) and counted in bad_args.
bool EventParser::CheckComplete(const RawEvent& r, int64_t offset, int64_t* ts, int64_t* dur) {
  auto drop = [&](int64_t* counter, const char* why) {
    ++*counter;
    Warn(offset, why);
    return false;
  };
  ParseStats& st = out_->stats;
  if (r.name.text.empty() || r.ts.kind == Kind::kAbsent || r.dur.kind == Kind::kAbsent)
    return drop(&st.missing_fields, "event without name, ts or dur skipped");
  if (r.ts.kind == Kind::kOther || !ParseUsToNs(r.ts.text, ts) || *ts < kMinTsNs || *ts > kMaxTsNs)
    return drop(&st.bad_ts, "event with a ts that is not a number in range skipped");
  if (r.dur.kind == Kind::kOther || !ParseUsToNs(r.dur.text, dur))
    return drop(&st.bad_dur, "event with a dur that is not a number skipped");
  if (*dur < 0 || *dur > kMaxDurNs)
    return drop(&st.negative_or_huge_dur, "event with negative or > 7 day duration skipped");
  if (!ValidPidTid(r.pid) || !ValidPidTid(r.tid))
    return drop(&st.bad_pid_tid,
                "event with a pid or tid that is not a string or a 64-bit integer skipped");
  if (r.cat.kind != Kind::kAbsent && r.cat.kind != Kind::kString)
    return drop(&st.bad_category, "event with a cat that is not a string skipped");
  return true;
}

void EventParser::StoreComplete(const RawEvent& r, int64_t offset) {
  int64_t ts = 0, dur = 0;
  if (!CheckComplete(r, offset, &ts, &dur)) return;
  std::string_view cat = r.cat.text;
  bool known = true;
  Category c = CategoryOf(cat, &known);
  if (!known) {
    ++out_->stats.unknown_category;
    auto& m = out_->stats.unknown_categories;
    if (m.size() < 32 || m.count(std::string(cat))) ++m[std::string(cat)];
  }
  if (c == Category::kPythonFunction && !opt_.keep_python_functions) {
    ++out_->stats.python_functions_skipped;
    return;
  }
  Event e;
  int64_t stream = -1;
  bool args_ok = !r.args_not_object;
  args_ok &= ParseArgId(r.correlation, &e.correlation);
  args_ok &= ParseArgId(r.external_id, &e.external_id);
  args_ok &= ParseStream(r.stream, &stream);
  if (!args_ok) {
    ++out_->stats.bad_args;
    Warn(offset,
         "args that are not an object, or a correlation, External id or stream that is "
         "not an integer in range: ignored");
  }
  if (e.correlation > k2p53 || e.external_id > k2p53) ++out_->stats.ids_above_2p53;
  e.ts_ns = ts;
  e.dur_ns = dur;
  e.name = out_->strings.Intern(r.name.text);
  if (r.pid.text != last_pid_text_) {
    last_pid_ = out_->strings.Intern(r.pid.text);
    last_pid_text_.assign(r.pid.text);
  }
  if (r.tid.text != last_tid_text_) {
    last_tid_ = out_->strings.Intern(r.tid.text);
    last_tid_text_.assign(r.tid.text);
  }
  e.pid = last_pid_;
  e.tid = last_tid_;
  e.stream = static_cast<int32_t>(stream);
  e.cat = c;
  if (!r.input_dims.empty() && r.input_dims != "[]")
    e.input_dims = out_->strings.Intern(r.input_dims);
  if (NameHas(r.input_type, "double") || NameHas(r.input_type, "DT_DOUBLE"))
    e.flags |= kFlagFloat64;
  if (r.collective) e.flags |= kFlagCollective;
  if (r.correlation.kind != Kind::kAbsent && (e.correlation || r.correlation.text == "0"))
    e.flags |= kFlagHasCorrelation;
  // HTA drops events without a category and those of category "Trace"; of the others, every
  // event that names a stream other than -1 is device activity.
  if (stream != -1 && !cat.empty() && cat != "Trace") {
    e.flags |= kFlagOnStream;
    ++out_->on_stream_events;
  }
  if (c == Category::kKernel || c == Category::kGpuMemcpy || c == Category::kGpuMemset ||
      ((c == Category::kCudaSync || cat == "mtia_ccp_events") && stream != -1)) {
    e.flags |= kFlagDevice;
  }
  uint64_t track = (uint64_t{e.pid} << 32) | e.tid;
  int64_t* last = nullptr;
  if (track == last_track_ && last_track_ts_) {
    last = last_track_ts_;
  } else {
    auto [it, inserted] = last_ts_.try_emplace(track, INT64_MIN);
    last = &it->second;
    last_track_ = track;
    last_track_ts_ = last;
  }
  if (ts < *last) {
    ++out_->stats.out_of_order;
  } else {
    *last = ts;
  }
  out_->events.push_back(e);
  ++out_->stats.events_kept;
}

void ClassifyDeviceEvents(RankTrace* t) {
  // torch_npu trace_view.json: device tasks live in processes named by metadata events.
  absl::flat_hash_map<uint32_t, DeviceKind> device_pids;
  for (const auto& [pid, pname] : t->process_names) {
    if (pname == "Ascend Hardware" || absl::StartsWith(pname, "Ascend Hardware")) {
      device_pids[pid] = DeviceKind::kCompute;
    } else if (pname == "HCCL" || pname == "Communication") {
      device_pids[pid] = DeviceKind::kComm;
    }
  }
  for (Event& e : t->events) {
    if (!(e.flags & kFlagDevice) && e.cat == Category::kNone && !device_pids.empty()) {
      auto it = device_pids.find(e.pid);
      if (it != device_pids.end()) e.flags |= kFlagDevice;
    }
    if (!(e.flags & (kFlagDevice | kFlagOnStream))) continue;
    if (e.cat != Category::kNone) {
      // Kineto (any accelerator): HTA's rule, from the name alone.
      e.kind = ClassifyDeviceName(t->strings.Get(e.name));
    } else {
      e.kind = ClassifyAscendName(t->strings.Get(e.name));
      auto it = device_pids.find(e.pid);
      if (it != device_pids.end() && it->second == DeviceKind::kComm) e.kind = DeviceKind::kComm;
    }
    if (NameHas(std::string_view(t->strings.Get(e.name)), "double")) e.flags |= kFlagFloat64;
  }
}

}  // namespace internal
}  // namespace trainscope::trace
