#include "trace/event_parser.h"

#include <cstdlib>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "trace/chrome_reader.h"

namespace trainscope::trace {
namespace {
bool Has(std::string_view s, std::string_view sub) { return s.find(sub) != std::string_view::npos; }
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

DeviceKind ClassifyDeviceName(std::string_view name) {
  auto starts = [&](std::string_view p) { return StartsNoCase(name, p); };
  if (starts("nccl") || starts("hccl") || starts("hcom") || starts("rccl") ||
      Has(name, "ncclKernel") || Has(name, "ncclDevKernel") || starts("c10d::") ||
      starts("gloo:") || starts("allreduce") || starts("all_reduce") || starts("allgather") ||
      starts("reducescatter"))
    return DeviceKind::kComm;
  if (starts("memcpy") || starts("memset") || starts("hipmemcpy") || starts("hipmemset") ||
      starts("dma") || starts("MEMCPY_ASYNC") || Has(name, "Memcpy") || Has(name, "Memset"))
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

// Raw text of a scalar without asking its type first: numbers as written, strings without their
// quotes (timestamps and ids carry no escapes). Objects/arrays/null give "" (skipped).
simdjson::error_code FastScalar(od::value v, std::string_view* out) {
  std::string_view tok = v.raw_json_token();
  if (tok.empty()) return SUCCESS;
  char c = tok[0];
  if (c == '"') {
    size_t q = tok.find('"', 1);
    if (q == std::string_view::npos || tok.substr(1, q - 1).find('\\') != std::string_view::npos) {
      return v.get_string().get(*out);
    }
    *out = tok.substr(1, q - 1);
    return SUCCESS;
  }
  if (c == '{' || c == '[' || c == 'n') {
    *out = std::string_view();
    return SUCCESS;
  }
  if (c != '-' && (c < '0' || c > '9')) return simdjson::INCORRECT_TYPE;  // not JSON
  while (!tok.empty() &&
         (tok.back() == ' ' || tok.back() == '\n' || tok.back() == '\r' || tok.back() == '\t' ||
          tok.back() == ',' || tok.back() == '}' || tok.back() == ']'))
    tok.remove_suffix(1);
  *out = tok;
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

bool ParseU64(std::string_view s, uint64_t* v) {
  if (s.empty()) return false;
  uint64_t x = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    if (x > (UINT64_MAX - 9) / 10) {  // beyond 64 bits: saturate (still "above 2^53")
      x = UINT64_MAX;
      break;
    }
    x = x * 10 + (c - '0');
  }
  *v = x;
  return true;
}

}  // namespace

void EventParser::Warn(int64_t offset, const char* what) {
  int& n = warned_[what];
  if (n++ < 3 && out_->stats.warnings.size() < opt_.max_warnings)
    out_->stats.warnings.push_back(absl::StrCat("byte ", offset, ": ", what));
}

simdjson::error_code EventParser::Parse(od::object obj, int64_t offset) {
  std::string_view ph, cat, name, ts_text, dur_text, pid_text, tid_text, id_text;
  std::string_view meta_value, input_dims, input_type;
  bool has_ts = false, has_dur = false, collective = false;
  int64_t stream = -1;
  uint64_t correlation = 0, external_id = 0;
  bool big_id = false;
  for (auto field_result : obj) {
    od::field field;
    auto err = std::move(field_result).get(field);
    if (err) return err;
    std::string_view key;
    err = KeyOf(field, &key);
    if (err) return err;
    od::value v = field.value();
    if (key == "ph") {
      err = FastScalar(v, &ph);
    } else if (key == "name") {
      err = FastScalar(v, &name);
    } else if (key == "cat") {
      err = FastScalar(v, &cat);
    } else if (key == "ts") {
      err = FastScalar(v, &ts_text);
      has_ts = !ts_text.empty();
    } else if (key == "dur") {
      err = FastScalar(v, &dur_text);
      has_dur = !dur_text.empty();
    } else if (key == "pid") {
      err = FastScalar(v, &pid_text);
    } else if (key == "tid") {
      err = FastScalar(v, &tid_text);
    } else if (key == "id") {
      err = FastScalar(v, &id_text);
    } else if (key == "args") {
      // Annotations and Python frames carry nothing the analyses use: let ondemand skip them.
      if (cat == "python_function" || cat == "user_annotation" || cat == "gpu_user_annotation" ||
          cat == "Trace")
        continue;
      od::object args;
      if (v.get_object().get(args) != SUCCESS) continue;
      for (auto af_result : args) {
        od::field af;
        err = std::move(af_result).get(af);
        if (err) return err;
        std::string_view ak;
        err = KeyOf(af, &ak);
        if (err) return err;
        od::value av = af.value();
        std::string_view text;
        if (ak == "stream" || ak == "Stream Id") {
          err = FastScalar(av, &text);
          int64_t s = 0;
          if (!err && !text.empty() && ParseUsToNs(text, &s)) stream = s / 1000;
        } else if (ak == "correlation") {
          err = FastScalar(av, &text);
          if (!err && ParseU64(text, &correlation) && correlation > k2p53) big_id = true;
        } else if (ak == "External id") {
          err = FastScalar(av, &text);
          if (!err && ParseU64(text, &external_id) && external_id > k2p53) big_id = true;
        } else if (ak == "Input Dims" || ak == "Input Shapes") {
          od::json_type t;
          err = av.type().get(t);
          if (!err) {
            if (t == od::json_type::string) {
              err = av.get_string().get(input_dims);
            } else if (t == od::json_type::array) {
              od::array a;
              err = av.get_array().get(a);
              if (!err) err = a.raw_json().get(input_dims);
            }
          }
        } else if (ak == "Input type") {
          od::json_type t;
          err = av.type().get(t);
          if (!err && t == od::json_type::array) {
            od::array a;
            err = av.get_array().get(a);
            if (!err) err = a.raw_json().get(input_type);
          } else if (!err && t == od::json_type::string) {
            err = av.get_string().get(input_type);
          }
        } else if (ak == "Collective name") {
          collective = true;
        } else if (ak == "name" || ak == "labels") {
          err = ScalarText(av, &meta_value);
        }
        if (err) return err;
      }
      continue;
    }
    if (err) return err;
  }
  if (big_id) ++out_->stats.ids_above_2p53;
  if (ph.empty() && has_dur) ph = "X";
  if (ph == "s" || ph == "f" || ph == "t") {
    ++out_->stats.flow_events;
    uint64_t id = 0;
    if (ParseU64(id_text, &id) && id > k2p53) ++out_->stats.ids_above_2p53;
    return SUCCESS;
  }
  if (ph == "M") {
    ++out_->stats.metadata_events;
    if (!meta_value.empty()) {
      uint32_t pid = out_->strings.Intern(pid_text);
      if (name == "process_name" || name == "process_labels") {
        std::string& pn = out_->process_names[pid];
        if (pn.empty() || name == "process_name") pn = std::string(meta_value);
      } else if (name == "thread_name") {
        out_->thread_names[{pid, out_->strings.Intern(tid_text)}] = std::string(meta_value);
      }
    }
    return SUCCESS;
  }
  if (ph != "X") {
    ++out_->stats.other_phases;
    return SUCCESS;
  }
  int64_t ts = 0, dur = 0;
  if (name.empty() || !has_ts || !has_dur || !ParseUsToNs(ts_text, &ts) ||
      !ParseUsToNs(dur_text, &dur)) {
    ++out_->stats.missing_fields;
    Warn(offset, "event without name, ts or dur skipped");
    return SUCCESS;
  }
  if (dur < 0 || dur > int64_t{604800000000} * 1000) {
    ++out_->stats.negative_or_huge_dur;
    Warn(offset, "event with negative or > 7 day duration skipped");
    return SUCCESS;
  }
  bool known = true;
  Category c = CategoryOf(cat, &known);
  if (!known) {
    ++out_->stats.unknown_category;
    auto& m = out_->stats.unknown_categories;
    if (m.size() < 32 || m.count(std::string(cat))) ++m[std::string(cat)];
  }
  if (c == Category::kPythonFunction && !opt_.keep_python_functions) {
    ++out_->stats.python_functions_skipped;
    return SUCCESS;
  }
  Event e;
  e.ts_ns = ts;
  e.dur_ns = dur;
  e.correlation = correlation;
  e.external_id = external_id;
  e.name = out_->strings.Intern(name);
  if (pid_text != last_pid_text_) {
    last_pid_ = out_->strings.Intern(pid_text);
    last_pid_text_.assign(pid_text);
  }
  if (tid_text != last_tid_text_) {
    last_tid_ = out_->strings.Intern(tid_text);
    last_tid_text_.assign(tid_text);
  }
  e.pid = last_pid_;
  e.tid = last_tid_;
  e.stream = static_cast<int32_t>(stream);
  e.cat = c;
  if (!input_dims.empty() && input_dims != "[]") e.input_dims = out_->strings.Intern(input_dims);
  if (Has(input_type, "double") || Has(input_type, "DT_DOUBLE")) e.flags |= kFlagFloat64;
  if (collective) e.flags |= kFlagCollective;
  if (c == Category::kKernel || c == Category::kGpuMemcpy || c == Category::kGpuMemset) {
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
  return SUCCESS;
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
    if (!(e.flags & kFlagDevice)) continue;
    if (e.cat == Category::kGpuMemcpy || e.cat == Category::kGpuMemset) {
      e.kind = DeviceKind::kMemory;
    } else if (e.flags & kFlagCollective) {
      e.kind = DeviceKind::kComm;
    } else {
      e.kind = ClassifyDeviceName(t->strings.Get(e.name));
      auto it = device_pids.find(e.pid);
      if (it != device_pids.end() && it->second == DeviceKind::kComm) e.kind = DeviceKind::kComm;
    }
    if (Has(std::string_view(t->strings.Get(e.name)), "double")) e.flags |= kFlagFloat64;
  }
}

}  // namespace internal
}  // namespace trainscope::trace
