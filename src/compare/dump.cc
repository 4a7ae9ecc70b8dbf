// msprobe dump.json, stack.json and construct.json (see compare/dump.h).
//
// dump.json is scanned member by member rather than parsed whole: msprobe writes it at
// stop(), so a crashed or killed run leaves a file cut anywhere; each complete entry of
// "data" is parsed on its own (nlohmann) and the cut one is counted. The scanner copies each
// value, turning Python's bare NaN / Infinity / -Infinity (json.dump's allow_nan) into
// strings that the entry reader maps back to numbers.
#include "trainscope/compare/dump.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "compare/internal.h"

namespace trainscope::compare {
namespace {

using nlohmann::json;

constexpr int kMaxDepth = 64;

// A byte scanner over JSON text that stops cleanly where the text ends.
class Scanner {
 public:
  enum Result { kOk, kEnd, kBad };
  explicit Scanner(std::string_view t) : t_(t) {}
  size_t pos() const { return i_; }
  void SkipWs() {
    while (i_ < t_.size() && (t_[i_] == ' ' || t_[i_] == '\n' || t_[i_] == '\r' || t_[i_] == '\t'))
      ++i_;
  }
  // At end (after whitespace)?
  bool AtEnd() {
    SkipWs();
    return i_ >= t_.size();
  }
  char Peek() { return AtEnd() ? '\0' : t_[i_]; }
  Result Expect(char c) {
    if (AtEnd()) return kEnd;
    if (t_[i_] != c) return kBad;
    ++i_;
    return kOk;
  }
  // A string's raw text (quotes included) appended to `out`; its decoded text in `*text`.
  Result String(std::string* out) {
    if (AtEnd()) return kEnd;
    if (t_[i_] != '"') return kBad;
    size_t j = i_ + 1;
    while (j < t_.size() && t_[j] != '"') j += t_[j] == '\\' ? 2 : 1;
    if (j >= t_.size()) return kEnd;
    out->append(t_.substr(i_, j + 1 - i_));
    i_ = j + 1;
    return kOk;
  }
  // One value copied to `out` with NaN / Infinity quoted.
  Result Value(std::string* out, int depth = 0) {
    if (depth > kMaxDepth) return kBad;
    if (AtEnd()) return kEnd;
    const char c = t_[i_];
    if (c == '"') return String(out);
    if (c == '{' || c == '[') {
      const char close = c == '{' ? '}' : ']';
      out->push_back(c);
      ++i_;
      if (Peek() == close) {
        out->push_back(close);
        ++i_;
        return kOk;
      }
      for (;;) {
        if (c == '{') {
          if (Result r = String(out); r != kOk) return r;
          if (Result r = Expect(':'); r != kOk) return r;
          out->push_back(':');
        }
        if (Result r = Value(out, depth + 1); r != kOk) return r;
        if (AtEnd()) return kEnd;
        if (t_[i_] == ',') {
          out->push_back(',');
          ++i_;
          continue;
        }
        if (t_[i_] != close) return kBad;
        out->push_back(close);
        ++i_;
        return kOk;
      }
    }
    // A literal: number, true, false, null, NaN, Infinity, -Infinity.
    size_t j = i_;
    while (j < t_.size() && std::string_view(",]}: \n\r\t").find(t_[j]) == std::string_view::npos)
      ++j;
    if (j >= t_.size()) return kEnd;  // a literal may continue past the cut
    std::string_view lit = t_.substr(i_, j - i_);
    if (lit.empty()) return kBad;
    if (lit == "NaN" || lit == "Infinity" || lit == "-Infinity") {
      absl::StrAppend(out, "\"", std::string(lit), "\"");
    } else {
      out->append(lit);
    }
    i_ = j;
    return kOk;
  }

 private:
  std::string_view t_;
  size_t i_ = 0;
};

absl::Status Bad(const std::string& path, size_t at, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": byte ", at, ": ", std::string(what)));
}

// A statistic: a number, or msprobe's / Python's spelling of NaN and infinities.
bool StatValue(const json& v, double* out) {
  if (v.is_number()) {
    *out = v.get<double>();
    return true;
  }
  if (!v.is_string()) return false;
  std::string s = v.get<std::string>();
  std::transform(s.begin(), s.end(), s.begin(), ::tolower);
  if (s == "nan")
    *out = std::nan("");
  else if (s == "inf" || s == "infinity")
    *out = HUGE_VAL;
  else if (s == "-inf" || s == "-infinity")
    *out = -HUGE_VAL;
  else
    return false;
  return true;
}

// A statistic's text as msprobe's csv shows the value it loaded (ints stay ints).
std::string StatText(const json& v) {
  if (v.is_null()) return "None";
  if (v.is_boolean()) return v.get<bool>() ? "True" : "False";
  if (v.is_number_integer()) return v.dump();
  double x;
  if (StatValue(v, &x)) return std::isnan(x) ? "Nan" : PyFloat(x);
  if (v.is_string()) return v.get<std::string>();
  return v.dump(-1, ' ', false, json::error_handler_t::replace);
}

// Python's type name of a JSON value, as msprobe's compare writes a non-tensor's dtype.
std::string PythonClass(const json& v) {
  const char* t = v.is_boolean()          ? "bool"
                  : v.is_number_integer() ? "int"
                  : v.is_number()         ? "float"
                  : v.is_string()         ? "str"
                  : v.is_null()           ? "NoneType"
                  : v.is_array()          ? "list"
                                          : "dict";
  return absl::StrCat("<class '", t, "'>");
}

void Leaf(const json& d, const std::string& name, const std::string& entry, State state,
          std::vector<Tensor>* rows) {
  Tensor t;
  t.name = name;
  t.suffix = name.size() > entry.size() ? name.substr(entry.size() + 1) : "";
  t.state = state;
  if (auto it = d.find("type"); it != d.end() && it->is_string()) t.type = it->get<std::string>();
  if (auto it = d.find("dtype"); it != d.end() && it->is_string()) t.dtype = it->get<std::string>();
  if (auto it = d.find("shape"); it != d.end() && it->is_array()) {
    t.has_shape = true;
    for (const json& s : *it) t.shape.push_back(s.is_number_integer() ? s.get<int64_t>() : -1);
  }
  static const char* const kStats[] = {"Max", "Min", "Mean", "Norm"};
  for (int i = 0; i < 4; ++i) {
    if (auto it = d.find(kStats[i]); it != d.end()) {
      t.has_stats[i] = StatValue(*it, &t.stats[i]);
      t.stat_text[i] = StatText(*it);
    }
  }
  if (auto it = d.find("requires_grad"); it != d.end() && it->is_boolean())
    t.requires_grad = it->get<bool>() ? 1 : 0;
  if (auto it = d.find("md5"); it != d.end() && it->is_string()) t.md5 = it->get<std::string>();
  if (auto it = d.find("data_name"); it != d.end() && it->is_string())
    t.data_name = it->get<std::string>();
  if (t.dtype.empty()) {  // a non-tensor argument: {type, value}
    t.kind = Tensor::Kind::kValue;
    const json value = d.contains("value") ? d["value"] : json();
    t.value_text = value.dump(-1, ' ', false, json::error_handler_t::replace);
    t.has_shape = true;
    if (t.type == "torch.Size" || t.type == "slice") {
      t.dtype = t.type;
      if (t.type == "torch.Size" && value.is_array()) {
        for (const json& s : value)
          t.shape.push_back(s.is_number_integer() ? s.get<int64_t>() : -1);
      }
    } else {
      t.dtype = PythonClass(value);
      double x = 0;
      const bool number = !value.is_boolean() && StatValue(value, &x);
      for (int i = 0; i < 4; ++i) {
        t.stats[i] = x, t.has_stats[i] = number;
        t.stat_text[i] = StatText(value);
      }
    }
  }
  rows->push_back(std::move(t));
}

// msprobe's op_item_parse: lists index their items (not under parameters_grad), dicts name
// them, a dict with a string "type" is a leaf, null is a None row.
void Items(const json& d, const std::string& name, const std::string& entry, State state, int depth,
           std::vector<Tensor>* rows) {
  if (depth > kMaxDepth) return;
  if (d.is_null()) {
    Tensor t;
    t.kind = Tensor::Kind::kNone;
    t.name = name;
    t.suffix = name.size() > entry.size() ? name.substr(entry.size() + 1) : "";
    t.state = state;
    rows->push_back(std::move(t));
  } else if (d.is_array()) {
    for (size_t i = 0; i < d.size(); ++i) {
      Items(d[i], state == State::kParametersGrad ? name : absl::StrCat(name, ".", i), entry, state,
            depth + 1, rows);
    }
  } else if (d.is_object()) {
    if (d.value("class_type", "") == "torch.distributed.P2POp" && d.contains("tensor") &&
        d["tensor"].is_object()) {
      Leaf(d["tensor"], name, entry, state, rows);
    } else if (d.contains("type") && d["type"].is_string()) {
      Leaf(d, name, entry, state, rows);
    } else {
      for (const auto& [k, v] : d.items()) Items(v, name + "." + k, entry, state, depth + 1, rows);
    }
  } else {  // a bare value where a record was expected
    Leaf(json{{"type", "value"}, {"value", d}}, name, entry, state, rows);
  }
}

bool IsParametersGrad(const std::string& name) {
  const std::vector<std::string> parts = SplitName(name);
  const size_t n = parts.size();
  return (n >= 1 && parts[n - 1] == "parameters_grad") ||
         (n >= 2 && parts[n - 2] == "parameters_grad");
}

void ParseEntry(const json& v, Entry* e) {
  if (IsParametersGrad(e->name)) {
    for (const auto& [k, item] : v.items())
      Items(item, e->name + "." + k, e->name, State::kParametersGrad, 0, &e->rows);
    return;
  }
  static const std::pair<const char*, const char*> kKeys[] = {{"input_args", ".input"},
                                                              {"input_kwargs", ".input"},
                                                              {"input", ".input"},
                                                              {"output", ".output"},
                                                              {"parameters", ".parameters"}};
  for (const auto& [key, suffix] : kKeys) {
    auto it = v.find(key);
    if (it == v.end()) continue;
    State s = std::string_view(suffix) == ".output"       ? State::kOutput
              : std::string_view(suffix) == ".parameters" ? State::kParameters
                                                          : State::kInput;
    Items(*it, e->name + suffix, e->name, s, 0, &e->rows);
  }
}

std::string StringOr(const json& v) { return v.is_string() ? v.get<std::string>() : ""; }

// The members of "data", one entry at a time; a cut member is counted, not an error.
absl::Status ScanData(Scanner& s, const std::string& path, Dump* dump) {
  if (s.Expect('{') != Scanner::kOk) return Bad(path, s.pos(), "\"data\" is not an object");
  if (s.Peek() == '}') return s.Expect('}'), absl::OkStatus();
  for (;;) {
    const size_t start = s.pos();
    std::string key, value;
    Scanner::Result r = s.String(&key);
    if (r == Scanner::kOk) r = s.Expect(':');
    if (r == Scanner::kOk) r = s.Value(&value);
    if (r == Scanner::kEnd) {
      ++dump->truncated_entries;
      dump->truncated_at = static_cast<int64_t>(start);
      return absl::OkStatus();
    }
    if (r == Scanner::kBad) return Bad(path, s.pos(), "malformed entry in \"data\"");
    json k = json::parse(key, nullptr, false), v = json::parse(value, nullptr, false);
    if (!v.is_object() || !k.is_string()) {
      ++dump->malformed_entries;
    } else {
      Entry e;
      e.name = k.get<std::string>();
      e.order = static_cast<int>(dump->entries.size());
      ParseEntry(v, &e);
      dump->entries.push_back(std::move(e));
    }
    if (s.AtEnd()) {
      ++dump->truncated_entries;  // the file ends between entries: some may be lost
      dump->truncated_at = static_cast<int64_t>(s.pos());
      return absl::OkStatus();
    }
    if (s.Peek() == ',') {
      s.Expect(',');
      continue;
    }
    if (s.Expect('}') != Scanner::kOk) return Bad(path, s.pos(), "expected ',' or '}' in \"data\"");
    return absl::OkStatus();
  }
}

std::string ReadFile(const std::string& path, bool* ok) {
  std::ifstream in(path, std::ios::binary);
  *ok = static_cast<bool>(in);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void ReadStack(const std::string& path, Dump* dump) {
  bool ok = false;
  std::string text = ReadFile(path, &ok);
  if (!ok) return;
  json j = json::parse(text, nullptr, false);
  if (!j.is_object()) {
    dump->notes.push_back(path + ": not a JSON object (stack.json skipped)");
    return;
  }
  auto frames = [](const json& v) {
    std::vector<std::string> out;
    if (v.is_array())
      for (const json& f : v) out.push_back(StringOr(f));
    return out;
  };
  for (const auto& [k, v] : j.items()) {
    // {"0": [[names], [frames]]} (msprobe 8+) or {name: [frames]}.
    if (v.is_array() && v.size() == 2 && v[0].is_array()) {
      for (const json& n : v[0])
        if (n.is_string()) dump->stack[n.get<std::string>()] = frames(v[1]);
    } else {
      dump->stack[k] = frames(v);
    }
  }
}

void ReadConstruct(const std::string& path, Dump* dump) {
  bool ok = false;
  std::string text = ReadFile(path, &ok);
  if (!ok) return;
  json j = json::parse(text, nullptr, false);
  if (!j.is_object()) {
    dump->notes.push_back(path + ": not a JSON object (construct.json skipped)");
    return;
  }
  for (const auto& [k, v] : j.items()) dump->parent[k] = StringOr(v);
}

}  // namespace

const char* StateName(State s) {
  switch (s) {
    case State::kInput:
      return "input";
    case State::kOutput:
      return "output";
    case State::kParameters:
      return "parameters";
    case State::kParametersGrad:
      return "parameters_grad";
  }
  return "input";
}

absl::StatusOr<Dump> ParseDumpJson(std::string_view text, const std::string& path) {
  Dump dump;
  Scanner s(text);
  if (s.AtEnd()) return Bad(path, 0, "empty file");
  if (s.Expect('{') != Scanner::kOk) return Bad(path, s.pos(), "not a JSON object");
  bool seen_data = false;
  while (!s.AtEnd() && s.Peek() != '}') {
    std::string key;
    if (s.String(&key) != Scanner::kOk || s.Expect(':') != Scanner::kOk) break;
    json k = json::parse(key, nullptr, false);
    if (k.is_string() && k.get<std::string>() == "data") {
      TS_RETURN_IF_ERROR(ScanData(s, path, &dump));
      seen_data = true;
      if (dump.truncated_entries > 0) break;
    } else {
      std::string value;
      if (s.Value(&value) != Scanner::kOk) break;
      json v = json::parse(value, nullptr, false);
      const std::string name = k.is_string() ? k.get<std::string>() : "";
      if (name == "task") dump.task = StringOr(v);
      if (name == "level") dump.level = StringOr(v);
      if (name == "framework") dump.framework = StringOr(v);
      if (name == "dump_data_dir") dump.dump_data_dir = StringOr(v);
    }
    if (s.Peek() == ',') s.Expect(',');
  }
  if (!seen_data) {
    return Bad(path, s.pos(),
               s.AtEnd() ? "the file ends before \"data\" (cut short: msprobe writes dump.json "
                           "at stop())"
                         : "no \"data\" object (not an msprobe dump.json?)");
  }
  return dump;
}

absl::StatusOr<Dump> ReadDumpDir(const std::string& dir) {
  const std::string path = dir + "/dump.json";
  bool ok = false;
  std::string text = ReadFile(path, &ok);
  if (!ok) return absl::NotFoundError(path + ": cannot open");
  TS_ASSIGN_OR_RETURN(Dump dump, ParseDumpJson(text, path));
  dump.dir = dir;
  ReadStack(dir + "/stack.json", &dump);
  ReadConstruct(dir + "/construct.json", &dump);
  return dump;
}

}  // namespace trainscope::compare
