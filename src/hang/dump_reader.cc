// Reading one flight recorder dump: sniff the bytes (JSON object / pickle header / other),
// then map PyTorch's keys (all its versions "2.2".."2.10", which only add keys) and ours
// onto hang::Dump. PyTorch's writers differ in small ways that are all accepted here:
// integers as strings (its JSON pg_status), times null (pickle) or 0 (JSON), dtypes as a
// list, process_group as a tuple or a list, and profiling names with any backend prefix.
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "hang/hccl_dump.h"
#include "trainscope/core/json_text.h"
#include "trainscope/core/pickle.h"
#include "trainscope/core/utf8.h"
#include "trainscope/hang/dump.h"

namespace trainscope::hang {
namespace {

using nlohmann::json;

constexpr int kMaxJsonDepth = kJsonMaxDepth;  // dumps nest 5 deep

// An integer that PyTorch may write as a number, a string ("4") or, for times, null.
bool ToInt(const json& v, int64_t* out) {
  if (v.is_null()) {
    *out = 0;
    return true;
  }
  if (v.is_number_integer()) {
    *out = v.get<int64_t>();
    return true;
  }
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (!(d > -9.2e18 && d < 9.2e18)) return false;
    *out = static_cast<int64_t>(d);
    return true;
  }
  if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    if (s.empty() || s.size() > 20) return false;
    char* end = nullptr;
    long long x = std::strtoll(s.c_str(), &end, 10);
    if (*end != '\0') return false;
    *out = x;
    return true;
  }
  if (v.is_boolean()) {
    *out = v.get<bool>() ? 1 : 0;
    return true;
  }
  return false;
}

// The member `key` of object `j`, or null: a reference, where json::value() would copy.
const json& Get(const json& j, const char* key) {
  static const json* kNull = new json();
  auto it = j.find(key);
  return it == j.end() ? *kNull : *it;
}

std::string ToText(const json& v) {
  if (v.is_string()) return ValidUtf8(v.get_ref<const std::string&>());
  if (v.is_null()) return "";
  return v.dump(-1, ' ', false, json::error_handler_t::replace);
}

absl::Status FieldError(size_t index, const char* key, const char* want) {
  return absl::InvalidArgumentError(absl::StrCat("entry ", index, ": \"", key, "\" is not ", want));
}

// [[3, 4], [5]] -> sizes; one level of nesting is also accepted ([3, 4] -> [[3, 4]]).
bool ToSizes(const json& v, std::vector<std::vector<int64_t>>* out) {
  out->clear();
  if (v.is_null()) return true;
  if (!v.is_array()) return false;
  for (const json& t : v) {
    std::vector<int64_t> shape;
    if (t.is_array()) {
      for (const json& d : t) {
        int64_t x = 0;
        if (!ToInt(d, &x)) return false;
        shape.push_back(x);
      }
    } else {
      int64_t x = 0;
      if (!ToInt(t, &x)) return false;
      shape.push_back(x);
    }
    out->push_back(std::move(shape));
  }
  return true;
}

bool ToDtypes(const json& v, std::vector<std::string>* out) {
  out->clear();
  if (v.is_null()) return true;
  if (v.is_string()) {  // fr_trace's tests write one string
    if (!v.get_ref<const std::string&>().empty()) out->push_back(ToText(v));
    return true;
  }
  if (!v.is_array()) return false;
  for (const json& d : v) out->push_back(ToText(d));
  return true;
}

// "nccl:send 0->1" / "gloo:recv 1<-0" / "nccl:all_reduce" -> backend, op, src, dst.
void SplitProfilingName(Entry* e) {
  std::string name = e->profiling_name;
  size_t colon = name.find(':');
  if (colon != std::string::npos) {
    e->backend = name.substr(0, colon);
    name = name.substr(colon + 1);
  }
  size_t space = name.find(' ');
  std::string rest;
  if (space != std::string::npos) {
    rest = name.substr(space + 1);
    name = name.substr(0, space);
  }
  e->op = name;
  if (rest.empty()) return;
  size_t arrow = rest.find("->");
  bool forward = arrow != std::string::npos;
  if (!forward) arrow = rest.find("<-");
  if (arrow == std::string::npos) return;
  int a = std::atoi(rest.substr(0, arrow).c_str());
  int b = std::atoi(rest.substr(arrow + 2).c_str());
  // "send 0->1": from 0 to 1; "recv 1<-0": 1 receives from 0.
  e->src = forward ? a : b;
  e->dst = forward ? b : a;
}

std::string FramesText(const json& frames) {
  if (!frames.is_array()) return "";
  std::string out;
  int n = 0;
  for (const json& f : frames) {
    if (!f.is_object()) continue;
    if (++n > 4) break;  // the innermost few say where
    if (!out.empty()) out += " <- ";
    int64_t line = 0;
    if (f.contains("line")) ToInt(f["line"], &line);
    out += ToText(Get(f, "name")) + " (" + ToText(Get(f, "filename")) + ":" + std::to_string(line) +
           ")";
  }
  return out;
}

absl::StatusOr<Entry> ParseEntry(const json& j, size_t index) {
  if (!j.is_object())
    return absl::InvalidArgumentError(absl::StrCat("entry ", index, ": not an object"));
  Entry e;
  struct IntField {
    const char* key;
    int64_t* out;
  };
  const IntField ints[] = {{"record_id", &e.record_id},
                           {"pg_id", &e.pg_id},
                           {"collective_seq_id", &e.collective_seq_id},
                           {"p2p_seq_id", &e.p2p_seq_id},
                           {"time_created_ns", &e.time_created_ns},
                           {"time_discovered_started_ns", &e.time_started_ns},
                           {"time_discovered_completed_ns", &e.time_completed_ns}};
  for (const IntField& f : ints) {
    auto it = j.find(f.key);
    if (it != j.end() && !ToInt(*it, f.out)) return FieldError(index, f.key, "an integer");
  }
  // Ids count ops: anything near the int64 limits is corruption (and would overflow id + 1).
  constexpr int64_t kMaxId = int64_t{1} << 48;
  for (int64_t* id : {&e.record_id, &e.pg_id, &e.collective_seq_id, &e.p2p_seq_id})
    if (*id < -1 || *id > kMaxId)
      return absl::InvalidArgumentError(
          absl::StrCat("entry ", index, ": an id out of range: ", *id));
  if (auto it = j.find("profiling_name"); it != j.end()) e.profiling_name = ToText(*it);
  SplitProfilingName(&e);
  if (auto it = j.find("process_group"); it != j.end()) {
    if (!it->is_array() || it->size() < 1)
      return FieldError(index, "process_group", "[name, desc]");
    e.pg_name = ToText((*it)[0]);
    if (it->size() > 1) e.pg_desc = ToText((*it)[1]);
  } else if (e.pg_id >= 0) {
    e.pg_name = std::to_string(e.pg_id);
  }
  if (!ToSizes(Get(j, "input_sizes"), &e.input_sizes))
    return FieldError(index, "input_sizes", "a list of shapes");
  if (!ToSizes(Get(j, "output_sizes"), &e.output_sizes))
    return FieldError(index, "output_sizes", "a list of shapes");
  if (!ToDtypes(Get(j, "input_dtypes"), &e.input_dtypes))
    return FieldError(index, "input_dtypes", "a list of dtype names");
  if (!ToDtypes(Get(j, "output_dtypes"), &e.output_dtypes))
    return FieldError(index, "output_dtypes", "a list of dtype names");
  e.state = ToText(Get(j, "state"));
  if (auto it = j.find("duration_ms"); it != j.end() && it->is_number()) {
    const double ms = it->get<double>();
    if (std::isfinite(ms) && ms >= 0) e.duration_ms = ms;  // null, absent or junk: none
  }
  if (auto it = j.find("retired"); it != j.end() && it->is_boolean()) e.retired = it->get<bool>();
  if (auto it = j.find("is_p2p"); it != j.end() && it->is_boolean()) e.is_p2p = it->get<bool>();
  if (e.op == "send" || e.op == "recv") e.is_p2p = true;
  e.caller = ToText(Get(j, "caller"));
  if (int64_t step = -1; !Get(j, "step").is_null() && ToInt(Get(j, "step"), &step) && step >= 0)
    e.step = step;  // ours
  e.error = ToText(Get(j, "error"));
  e.frames = FramesText(Get(j, "frames"));
  // torch_npu leaves profiling_name "": its innermost frame names the op (hccl_dump.cc).
  if (e.op.empty()) e.op = internal::HcclOpFromFrames(Get(j, "frames"));
  if (auto it = j.find("peer"); it != j.end() && e.is_p2p && e.src < 0) {
    int64_t peer = -1;
    if (ToInt(*it, &peer)) (e.op == "send" ? e.dst : e.src) = static_cast<int>(peer);
  }
  return e;
}

// Trailing digits of the file's base name, as fr_trace reads `<prefix><rank>`
// ("nccl_trace_rank_3" -> 3); one extension is allowed ("flight_recorder.rank1.json" -> 1).
// -1 when there are none.
int RankFromName(const std::string& name) {
  std::string base = name.substr(name.rfind('/') + 1);
  for (int attempt = 0; attempt < 2; ++attempt) {
    size_t end = base.size();
    size_t begin = end;
    while (begin > 0 && std::isdigit(static_cast<unsigned char>(base[begin - 1]))) --begin;
    if (begin < end && end - begin <= 6) return std::atoi(base.c_str() + begin);
    size_t dot = base.rfind('.');
    if (dot == std::string::npos) return -1;
    base.resize(dot);
  }
  return -1;
}

absl::Status ParsePgConfig(const json& cfg, Dump* d) {
  if (!cfg.is_object()) return absl::InvalidArgumentError("\"pg_config\" is not an object");
  for (auto it = cfg.begin(); it != cfg.end(); ++it) {
    GroupConfig g;
    g.name = it.key();
    if (it->is_object()) {
      if (it->contains("name")) g.name = ToText((*it)["name"]);
      g.desc = ToText(Get(*it, "desc"));
      const json& r = Get(*it, "ranks");
      if (r.is_string()) {
        auto ranks = ParseRankList(r.get_ref<const std::string&>());
        if (!ranks.ok())
          return absl::InvalidArgumentError(absl::StrCat("pg_config \"", Excerpt(it.key()),
                                                         "\": ranks: ", ranks.status().message()));
        g.ranks = *std::move(ranks);
      } else if (r.is_array()) {
        for (const json& x : r) {
          int64_t v = 0;
          if (!ToInt(x, &v) || v < 0 || v > (1 << 24))
            return absl::InvalidArgumentError("pg_config: ranks are not global ranks");
          g.ranks.push_back(static_cast<int>(v));
        }
      }
    }
    d->pg_config[g.name] = std::move(g);
  }
  return absl::OkStatus();
}

void ParsePgStatus(const json& st, Dump* d) {
  if (!st.is_object()) return;
  for (auto it = st.begin(); it != st.end(); ++it) {
    int64_t id = 0;
    if (!ToInt(json(it.key()), &id) || !it->is_object()) continue;
    GroupStatus s;
    if (it->contains("last_enqueued_collective"))
      ToInt((*it)["last_enqueued_collective"], &s.last_enqueued);
    if (it->contains("last_started_collective"))
      ToInt((*it)["last_started_collective"], &s.last_started);
    if (it->contains("last_completed_collective"))
      ToInt((*it)["last_completed_collective"], &s.last_completed);
    d->pg_status[id] = s;
  }
}

}  // namespace

absl::StatusOr<std::vector<int>> ParseRankList(std::string_view text) {
  std::vector<int> out;
  size_t i = 0;
  auto skip_ws = [&] {
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  };
  skip_ws();
  if (i >= text.size() || text[i] != '[') return absl::InvalidArgumentError("expected \"[\"");
  ++i;
  skip_ws();
  if (i < text.size() && text[i] == ']') return out;
  while (i < text.size()) {
    skip_ws();
    size_t start = i;
    long long v = 0;
    while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])) && i - start < 8)
      v = v * 10 + (text[i++] - '0');
    if (i == start) return absl::InvalidArgumentError(absl::StrCat("no rank at offset ", i));
    out.push_back(static_cast<int>(v));
    skip_ws();
    if (i < text.size() && text[i] == ']') return out;
    if (i >= text.size() || text[i] != ',')
      return absl::InvalidArgumentError(absl::StrCat("expected \",\" at offset ", i));
    ++i;
  }
  return absl::InvalidArgumentError("no closing \"]\"");
}

absl::StatusOr<Dump> ParseDump(const json& doc, const std::string& name) {
  if (!doc.is_object()) return absl::InvalidArgumentError("not a JSON object");
  Dump d;
  d.file = name;
  d.version = ToText(Get(doc, "version"));
  if (auto it = doc.find("pg_config"); it != doc.end()) {
    absl::Status s = ParsePgConfig(*it, &d);
    if (!s.ok()) return s;
  }
  if (auto it = doc.find("pg_status"); it != doc.end()) ParsePgStatus(*it, &d);
  if (auto it = doc.find("entries"); it != doc.end()) {
    if (!it->is_array()) return absl::InvalidArgumentError("\"entries\" is not a list");
    d.entries.reserve(it->size());
    for (size_t i = 0; i < it->size(); ++i) {
      auto e = ParseEntry((*it)[i], i);
      if (!e.ok()) return e.status();
      d.entries.push_back(*std::move(e));
    }
  }
  int64_t v = -1;
  if (auto it = doc.find("rank"); it != doc.end() && ToInt(*it, &v) && v >= 0 && v < (1 << 24)) {
    d.rank = static_cast<int>(v);
    d.rank_source = "key";
  } else {
    d.rank = RankFromName(name);
    d.rank_source = "name";
  }
  if (d.rank < 0)
    return absl::InvalidArgumentError(
        "no \"rank\" key and no rank number at the end of the file name");
  if (auto it = doc.find("world_size"); it != doc.end() && ToInt(*it, &v) && v > 0 && v < (1 << 24))
    d.world_size = static_cast<int>(v);
  d.ours = doc.contains("trainscope");
  d.hccl = internal::LooksLikeHcclDump(doc, d);
  return d;
}

ReadResult ReadDumpBytes(std::string_view bytes, const std::string& name) {
  ReadResult r;
  size_t i = 0;
  while (i < bytes.size() && std::isspace(static_cast<unsigned char>(bytes[i]))) ++i;
  json doc;
  if (pickle::LooksLikePickle(bytes)) {
    // PyTorch's writer (torch::jit::Pickler, protocol 2) and Python's pickle.dumps alike;
    // the dump is then read as its JSON form (dict -> object, tuple -> array, ...).
    pickle::Options options;
    options.max_depth = kMaxJsonDepth;
    auto loaded = pickle::Parse(bytes, options);
    if (!loaded.ok()) {
      r.outcome = ReadOutcome::kCorrupt;
      r.reason = absl::StrCat("pickle: ", loaded.status().message());
      return r;
    }
    doc = pickle::ToJson(*loaded);
    r.dump.format = "pickle";
  } else if (i < bytes.size() && bytes[i] == '{') {
    std::string_view text = bytes.substr(i);
    bool looks_like_dump = text.substr(0, 4096).find("\"entries\"") != std::string_view::npos ||
                           text.substr(0, 4096).find("\"pg_config\"") != std::string_view::npos;
    // Too deep, bad syntax or a number beyond a double (1e309): a corrupt dump, counted.
    JsonTextError err;
    if (!ParseJsonText(text, kMaxJsonDepth, &doc, &err)) {
      r.outcome = looks_like_dump ? ReadOutcome::kCorrupt : ReadOutcome::kNotADump;
      if (err.too_deep) {
        r.reason =
            absl::StrCat("JSON nested deeper than ", kMaxJsonDepth, " at byte ", i + err.byte);
      } else {
        r.reason = absl::StrCat(looks_like_dump ? "truncated or corrupt JSON" : "not JSON",
                                " at byte ", i + err.byte);
        if (err.out_of_range) r.reason += " (number out of range)";
      }
      return r;
    }
    r.dump.format = "json";
  } else {
    r.outcome = ReadOutcome::kNotADump;
    r.reason = bytes.empty() ? "empty file" : "neither JSON nor pickle";
    if (name.size() > 13 && name.compare(name.size() - 13, 13, "_py_traceback") == 0)
      r.reason = "torch_npu's Python stacks of that rank (read them for where it was), not a dump";
    return r;
  }
  if (!doc.is_object() || (!doc.contains("entries") && !doc.contains("pg_config"))) {
    r.outcome = ReadOutcome::kNotADump;
    r.reason = "no \"entries\" or \"pg_config\": not a flight recorder dump";
    return r;
  }
  std::string format = r.dump.format;
  auto d = ParseDump(doc, name);
  if (!d.ok()) {
    r.outcome = ReadOutcome::kCorrupt;
    r.reason = std::string(d.status().message());
    return r;
  }
  r.dump = *std::move(d);
  r.dump.format = format;
  r.outcome = ReadOutcome::kDump;
  return r;
}

}  // namespace trainscope::hang
