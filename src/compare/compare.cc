// Pairing dump folders, matching entries and rows, and the first divergence by data flow
// (see compare/compare.h).
#include "trainscope/compare/compare.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "compare/internal.h"

namespace trainscope::compare {
namespace {

Mode ModeOf(const Dump& d) {
  if (d.task == "tensor") return Mode::kTensor;
  if (d.task == "md5") return Mode::kMd5;
  return Mode::kStatistics;
}

std::string Renamed(const std::string& name, const Options& o) {
  for (const auto& [from, to] : o.mapping) {
    if (from.empty()) continue;
    if (size_t at = name.find(from); at != std::string::npos) {
      std::string out = name;
      out.replace(at, from.size(), to);
      return out;
    }
  }
  return name;
}

bool FloatGroup(const std::string& d) {
  return d == "float16" || d == "float32" || d == "float64" || d == "bfloat16";
}

// Rows paired by their place in the entry ("input.0", "weight"); like msprobe, a pair whose
// dtypes differ outside the float group (float16/32/64, bfloat16) has no bench row.
void PairRows(Mode mode, const Dump& da, const Dump& db, const Options& o, EntryCompare* e,
              PairReport* report) {
  std::map<std::string, const Tensor*> b_rows;
  if (e->b)
    for (const Tensor& t : e->b->rows) b_rows.emplace(t.suffix, &t);
  for (const Tensor& t : e->a->rows) {
    RowCompare r;
    r.a = &t;
    if (auto it = b_rows.find(t.suffix); it != b_rows.end()) {
      const std::string x = NormalizedDtype(DtypeText(&t)),
                        y = NormalizedDtype(DtypeText(it->second));
      if (x == y || (FloatGroup(x) && FloatGroup(y))) r.b = it->second;
    }
    CompareRow(mode, da, db, o, &r, report);
    const bool output = t.state == State::kOutput || t.state == State::kParametersGrad;
    double& err = output ? e->output_error : e->input_error;
    // A row without a partner differs only when the entry has one (structure changed).
    const double row_err = r.b ? r.error : (e->b ? HUGE_VAL : 0);
    err = std::max(err, row_err);
    if (r.differs || (e->b && !r.b)) (output ? e->outputs_differ : e->inputs_differ) = true;
    if (!output && (row_err > std::max(o.input_rtol, r.cast_tolerance) || r.differs))
      e->inputs_differ_strict = true;
    e->rows.push_back(std::move(r));
  }
  ApplyResultRules(mode, e);
}

}  // namespace

const char* ModeName(Mode m) {
  return m == Mode::kTensor ? "tensor" : m == Mode::kMd5 ? "md5" : "statistics";
}

absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ReadMapping(
    const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(path + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  std::vector<std::pair<std::string, std::string>> out;
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_object()) {
    for (const auto& [k, v] : j.items()) {
      if (!v.is_string())
        return absl::InvalidArgumentError(absl::StrCat(path, ": \"", k, "\" is not a string"));
      out.emplace_back(k, v.get<std::string>());
    }
  } else {
    std::istringstream lines(text);
    std::string line;
    for (int n = 1; std::getline(lines, line); ++n) {
      if (size_t hash = line.find('#'); hash != std::string::npos) line.erase(hash);
      absl::string_view l = absl::StripAsciiWhitespace(line);
      if (l.empty() || l == "---") continue;
      size_t colon = l.find(": ");
      if (colon == absl::string_view::npos && l.back() == ':') colon = l.size() - 1;
      if (colon == absl::string_view::npos)
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": line ", n,
                         ": expected `from: to` (a JSON object or this "
                         "YAML subset)"));
      auto unquote = [](absl::string_view s) {
        s = absl::StripAsciiWhitespace(s);
        if (s.size() >= 2 && (s[0] == '"' || s[0] == '\'') && s.back() == s[0])
          s = s.substr(1, s.size() - 2);
        return std::string(s);
      };
      out.emplace_back(unquote(l.substr(0, colon)), unquote(l.substr(colon + 1)));
    }
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const auto& x, const auto& y) { return x.first.size() > y.first.size(); });
  return out;
}

// Matching: names (after the mapping), then the leftovers by structural key in order.
PairReport ComparePair(Dump a, Dump b, const Options& options) {
  PairReport r;
  r.a = std::move(a);
  r.b = std::move(b);
  const Mode ma = ModeOf(r.a), mb = ModeOf(r.b);
  r.mode = ma == mb ? ma : Mode::kStatistics;
  std::map<std::string, const Entry*> b_by_name;
  for (const Entry& e : r.b.entries) b_by_name.emplace(e.name, &e);
  std::set<const Entry*> b_used;
  std::vector<const Entry*> partner(r.a.entries.size(), nullptr);
  std::vector<std::string> how(r.a.entries.size());
  for (size_t i = 0; i < r.a.entries.size(); ++i) {
    const std::string& name = r.a.entries[i].name;
    const std::string mapped = Renamed(name, options);
    auto it = b_by_name.find(mapped);
    if (it != b_by_name.end() && !b_used.count(it->second)) {
      partner[i] = it->second;
      how[i] = mapped == name ? "name" : "mapping";
      b_used.insert(it->second);
    }
  }
  std::map<std::string, std::vector<const Entry*>> b_left;
  for (const Entry& e : r.b.entries)
    if (!b_used.count(&e)) b_left[StructuralKey(e)].push_back(&e);
  std::map<std::string, size_t> taken;
  for (size_t i = 0; i < r.a.entries.size(); ++i) {
    if (partner[i]) continue;
    const std::string key = StructuralKey(r.a.entries[i]);
    auto it = b_left.find(key);
    if (it == b_left.end() || taken[key] >= it->second.size()) continue;
    partner[i] = it->second[taken[key]++];
    how[i] = "structure";
    b_used.insert(partner[i]);
  }
  for (size_t i = 0; i < r.a.entries.size(); ++i) {
    EntryCompare e;
    e.a = &r.a.entries[i];
    e.b = partner[i];
    e.how = how[i];
    if (e.b) {
      ++r.matched;
    } else {
      r.unmatched_a.push_back(e.a->name);
    }
    PairRows(r.mode, r.a, r.b, options, &e, &r);
    r.entries.push_back(std::move(e));
  }
  for (const Entry& e : r.b.entries)
    if (!b_used.count(&e)) r.unmatched_b.push_back(e.name);
  FindFirstDivergence(options, &r);
  return r;
}

// By data flow, in execution order: the first matched entry's inputs are the data, seed
// and weights (they agree within input_rtol or the runs were fed differently: kind input);
// then the first entry whose inputs agree and whose outputs differ is blamed (kind output);
// an entry whose inputs differ before any op diverged got its difference from outside the
// dump (kind input).
void FindFirstDivergence(const Options& options, PairReport* r) {
  bool first = true;
  for (const EntryCompare& e : r->entries) {
    if (!e.b) continue;
    const bool in_differ = first ? e.inputs_differ_strict : e.inputs_differ;
    first = false;
    const char* kind = in_differ ? "input" : e.outputs_differ ? "output" : nullptr;
    if (!kind) continue;
    r->has_divergence = true;
    FirstDivergence& f = r->first;
    f.name = e.a->name;
    f.b_name = e.b->name;
    f.kind = kind;
    f.entry = &e;
    f.step = r->a.step;
    f.rank = r->a.rank;
    if (auto it = r->a.parent.find(e.a->name); it != r->a.parent.end()) f.module = it->second;
    if (auto it = r->a.stack.find(e.a->name); it != r->a.stack.end()) f.stack = it->second;
    f.communication = f.kind == "output" && Prefix(e.a->name) == "Distributed";
    return;
  }
}

}  // namespace trainscope::compare
