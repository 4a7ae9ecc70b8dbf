// Readers of the Ascend cluster view (ascend_cluster.h): msprof-analyze's cluster_analysis_output
// files and a folder of torch_npu rank folders. Columns and keys are found by name; a record
// with a missing or non-numeric figure is counted against its file and skipped.
#include "trace/ascend_cluster.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "trace/ascend_rank_csv.h"
#include "trainscope/core/os.h"
#include "trainscope/core/paths.h"

namespace trainscope::trace::internal {
namespace {

constexpr size_t kMaxProblems = 10;  // per file

std::string Base(std::string_view p) { return BaseName(p); }
std::string Parent(std::string p) {
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  size_t s = p.rfind('/');
  return s == std::string::npos ? "." : (s == 0 ? "/" : p.substr(0, s));
}
bool Slurp(Os* os, const std::string& path, std::string* out) {
  absl::StatusOr<std::string> bytes = os->ReadFile(path);
  if (!bytes.ok()) return false;
  *out = *std::move(bytes);
  return true;
}

// A torch_npu rank folder: *_ascend_pt, or any folder holding ASCEND_PROFILER_OUTPUT/.
bool IsRankFolder(Os* os, const std::string& dir) {
  return os->IsDirectory(dir + "/ASCEND_PROFILER_OUTPUT");
}
bool IsClusterOutput(Os* os, const std::string& dir) {
  return os->IsRegularFile(dir + "/cluster_step_trace_time.csv") ||
         os->IsRegularFile(dir + "/cluster_communication.json") ||
         os->IsRegularFile(dir + "/cluster_communication_matrix.json");
}

void Problem(ClusterFile* f, const std::string& where, const std::string& why) {
  ++f->bad_records;
  if (f->problems.size() < kMaxProblems)
    f->problems.push_back(absl::StrCat(Base(f->path), ": ", where, ": ", why));
}

int Col(const std::vector<std::string>& h, const char* name) {
  for (size_t i = 0; i < h.size(); ++i)
    if (h[i] == name) return static_cast<int>(i);
  return -1;
}

// A time in us: finite, >= 0 and at most 7 days.
bool ValidUs(double us) { return std::isfinite(us) && us >= 0 && us <= kMaxDurNs / 1e3; }

// A step as msprof-analyze keys it: "", "N/A" -> -1; "step13" / "13" -> 13. False otherwise.
bool ParseStep(absl::string_view s, int64_t* step) {
  s = absl::StripAsciiWhitespace(s);
  if (absl::StartsWithIgnoreCase(s, "step")) s.remove_prefix(4);
  if (s.empty() || s == "N/A" || s == "NA") {
    *step = -1;
    return true;
  }
  return absl::SimpleAtoi(s, step) && *step >= 0;
}

// "(0, 1, 2)" or "0" -> ranks; false when a part is not a rank number.
bool ParseRankSet(std::string_view s, std::vector<int>* out) {
  out->clear();
  std::string t(s);
  for (char& c : t)
    if (c == '(' || c == ')' || c == '[' || c == ']') c = ' ';
  for (absl::string_view part : absl::StrSplit(t, ',', absl::SkipWhitespace())) {
    int r = -1;
    if (!absl::SimpleAtoi(part, &r) || r < 0 || r >= kMaxRank) return false;
    out->push_back(r);
  }
  std::sort(out->begin(), out->end());
  out->erase(std::unique(out->begin(), out->end()), out->end());
  return !out->empty();
}

// The figures of a step_trace_time row (cluster or per rank). False when a required cell
// (Computing, Communication(Not Overlapped), Free) is missing or any present one is not a time.
struct StepCols {
  int step = -1, type = -1, index = -1, comp = -1, cno = -1, ov = -1, comm = -1, free = -1;
  int stage = -1, bubble = -1, excl = -1, prep = -1, dp = -1, pp = -1, tp = -1;
  explicit StepCols(const std::vector<std::string>& h)
      : step(Col(h, "Step")),
        type(Col(h, "Type")),
        index(Col(h, "Index")),
        comp(Col(h, "Computing")),
        cno(Col(h, "Communication(Not Overlapped)")),
        ov(Col(h, "Overlapped")),
        comm(Col(h, "Communication")),
        free(Col(h, "Free")),
        stage(Col(h, "Stage")),
        bubble(Col(h, "Bubble")),
        excl(Col(h, "Communication(Not Overlapped and Exclude Receive)")),
        prep(Col(h, "Preparing")),
        dp(Col(h, "DP Index")),
        pp(Col(h, "PP Index")),
        tp(Col(h, "TP Index")) {}
  bool Usable() const { return comp >= 0 && cno >= 0 && free >= 0; }
};

bool RowFigures(const StepCols& c, const std::vector<std::string>& r, ClusterRow* out,
                std::string* why) {
  auto num = [&](int col, bool required, double* v) {
    *v = 0;
    if (col < 0 || col >= static_cast<int>(r.size()) || r[col].empty() || r[col] == "N/A" ||
        r[col] == "NA") {
      if (required) *why = "a missing Computing, Communication(Not Overlapped) or Free cell";
      return !required;
    }
    if (!absl::SimpleAtod(r[col], v) || !ValidUs(*v)) {
      *why = absl::StrCat("'", r[col], "' is not a time in us");
      return false;
    }
    return true;
  };
  auto index = [&](int col, int* v) {
    *v = -1;
    if (col >= 0 && col < static_cast<int>(r.size())) (void)absl::SimpleAtoi(r[col], v);
  };
  const std::string step = c.step >= 0 && c.step < static_cast<int>(r.size()) ? r[c.step] : "";
  if (!ParseStep(step, &out->step)) {
    *why = absl::StrCat("step '", step, "' is not a step number");
    return false;
  }
  index(c.dp, &out->dp_index);
  index(c.pp, &out->pp_index);
  index(c.tp, &out->tp_index);
  return num(c.comp, true, &out->computing_us) && num(c.cno, true, &out->comm_not_overlapped_us) &&
         num(c.free, true, &out->free_us) && num(c.ov, false, &out->overlapped_us) &&
         num(c.comm, false, &out->comm_us) && num(c.stage, false, &out->stage_us) &&
         num(c.bubble, false, &out->bubble_us) &&
         num(c.excl, false, &out->comm_not_overlapped_excl_receive_us) &&
         num(c.prep, false, &out->preparing_us);
}

double NumberAt(const nlohmann::json& j, const char* key, bool* ok) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) {
    *ok = false;
    return 0;
  }
  const double v = it->get<double>();
  if (!std::isfinite(v) || v < 0) *ok = false;
  return v;
}

bool IsTotalKey(absl::string_view op) { return absl::StartsWith(op, "Total Op Info"); }

// One rank's record of an op: {"Communication Time Info": {...}, "Communication Bandwidth
// Info": {transport: {...}}}.
bool CommRecord(const nlohmann::json& v, ClusterCommRecord* r, std::string* why) {
  if (!v.is_object()) {
    *why = "not an object";
    return false;
  }
  auto ti = v.find("Communication Time Info");
  if (ti == v.end() || !ti->is_object()) {
    *why = "no \"Communication Time Info\"";
    return false;
  }
  bool ok = true;
  r->elapse_ms = NumberAt(*ti, "Elapse Time(ms)", &ok);
  r->transit_ms = NumberAt(*ti, "Transit Time(ms)", &ok);
  r->wait_ms = NumberAt(*ti, "Wait Time(ms)", &ok);
  bool opt = true;
  r->sync_ms = NumberAt(*ti, "Synchronization Time(ms)", &opt);
  r->idle_ms = NumberAt(*ti, "Idle Time(ms)", &opt);
  if (!ok) {
    *why = "a missing or bad Elapse, Transit or Wait Time(ms)";
    return false;
  }
  auto bi = v.find("Communication Bandwidth Info");
  if (bi != v.end() && bi->is_object()) {
    for (auto t = bi->begin(); t != bi->end(); ++t) {
      if (!t->is_object()) continue;
      bool tok = true;
      const double size = NumberAt(*t, "Transit Size(MB)", &tok);
      const double time = NumberAt(*t, "Transit Time(ms)", &tok);
      if (!tok) {
        *why = absl::StrCat("a missing or bad Transit Size/Time of ", t.key());
        return false;
      }
      r->transport[t.key()] = {size, time};
    }
  }
  return true;
}

// {op: {rank: record}} of one (group, step).
void CommOps(const nlohmann::json& ops, const std::string& group, int64_t step, ClusterFile* f,
             ClusterInput* in) {
  for (auto op = ops.begin(); op != ops.end(); ++op) {
    if (!op->is_object()) {
      Problem(f, op.key(), "not an object");
      continue;
    }
    for (auto rk = op->begin(); rk != op->end(); ++rk) {
      ClusterCommRecord r;
      r.group = group;
      r.step = step;
      r.op = op.key();
      r.total = IsTotalKey(op.key());
      std::string why;
      if (!absl::SimpleAtoi(rk.key(), &r.rank) || r.rank < 0 || r.rank >= kMaxRank) {
        Problem(f, absl::StrCat(op.key(), "/", rk.key()), "not a rank number");
        continue;
      }
      if (!CommRecord(*rk, &r, &why)) {
        Problem(f, absl::StrCat(op.key(), "/", rk.key()), why);
        continue;
      }
      ++f->records;
      in->comm.push_back(std::move(r));
    }
  }
}

// The records of one (group, step) of a matrix: msprof's "Total Op Info" aggregate when there
// is one, else its per-kind "-total" aggregates, else every op (older files).
void MatrixOps(const nlohmann::json& ops, ClusterFile* f, ClusterInput* in) {
  bool has_total = false, has_kind_total = false;
  for (auto op = ops.begin(); op != ops.end(); ++op) {
    has_total |= IsTotalKey(op.key());
    has_kind_total |= absl::StrContains(op.key(), "-total@") || absl::EndsWith(op.key(), "-total");
  }
  for (auto op = ops.begin(); op != ops.end(); ++op) {
    const bool total = IsTotalKey(op.key());
    const bool kind_total =
        absl::StrContains(op.key(), "-total@") || absl::EndsWith(op.key(), "-total");
    if (has_total ? !total : (has_kind_total ? !kind_total : false)) continue;
    if (!op->is_object()) {
      Problem(f, op.key(), "not an object");
      continue;
    }
    for (auto l = op->begin(); l != op->end(); ++l) {
      ClusterLink link;
      std::vector<std::string> ends = absl::StrSplit(l.key(), '-');
      bool ok = l->is_object() && ends.size() == 2 && absl::SimpleAtoi(ends[0], &link.src) &&
                absl::SimpleAtoi(ends[1], &link.dst) && link.src >= 0 && link.dst >= 0;
      if (ok) {
        link.size_mb = NumberAt(*l, "Transit Size(MB)", &ok);
        link.time_ms = NumberAt(*l, "Transit Time(ms)", &ok);
        auto tt = l->find("Transport Type");
        ok = ok && tt != l->end() && tt->is_string();
        if (ok) link.transport = tt->get<std::string>();
      }
      if (!ok) {
        Problem(f, absl::StrCat(op.key(), "/", l.key()),
                "not src-dst with Transport Type, Transit Size(MB), Transit Time(ms)");
        continue;
      }
      ++f->records;
      in->links.push_back(std::move(link));
    }
  }
}

nlohmann::json ParseJsonText(std::string_view text, ClusterFile* f) {
  nlohmann::json j = nlohmann::json::parse(text.begin(), text.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    Problem(f, "byte 0", j.is_discarded() ? "not valid JSON (truncated?)" : "not a JSON object");
    return nlohmann::json();
  }
  return j;
}

// {step: {type: {op: ...}}} of a rank folder's communication(_matrix).json; `group_of_op`
// takes the "@..." group id of the op names.
template <typename Fn>
void RankStepTypeOps(const nlohmann::json& j, ClusterFile* f, Fn fn) {
  for (auto s = j.begin(); s != j.end(); ++s) {
    int64_t step = -1;
    if (!ParseStep(s.key(), &step) || !s->is_object()) {
      Problem(f, s.key(), "not a step of objects");
      continue;
    }
    for (auto t = s->begin(); t != s->end(); ++t) {
      if (!t->is_object()) {
        Problem(f, absl::StrCat(s.key(), "/", t.key()), "not an object");
        continue;
      }
      fn(step, t.key(), *t);
    }
  }
}

}  // namespace

void ParseClusterStepTraceCsv(std::string_view text, const std::string& name, ClusterInput* in) {
  ClusterFile f{name};
  auto rows = ParseCsv(std::string(text));  // ascend_rank_csv.h: quotes, trimmed cells
  StepCols c(rows.empty() ? std::vector<std::string>{} : rows[0]);
  if (!c.Usable() || c.type < 0 || c.index < 0) {
    Problem(&f, "line 1",
            "not a cluster_step_trace_time.csv (needs Type, Index, Computing, "
            "Communication(Not Overlapped), Free)");
    in->files.push_back(std::move(f));
    return;
  }
  for (size_t i = 1; i < rows.size(); ++i) {
    const auto& r = rows[i];
    if (r.size() <= 1 && (r.empty() || r[0].empty())) continue;
    const std::string line = absl::StrCat("line ", i + 1);
    if (r.size() <= static_cast<size_t>(std::max(c.type, c.index))) {
      Problem(&f, line, "a short row (truncated?)");
      continue;
    }
    ClusterRow row;
    std::string why;
    if (!RowFigures(c, r, &row, &why)) {
      Problem(&f, line, why);
      continue;
    }
    if (r[c.type] == "rank") {
      if (!absl::SimpleAtoi(r[c.index], &row.rank) || row.rank < 0 || row.rank >= kMaxRank) {
        Problem(&f, line, absl::StrCat("Index '", r[c.index], "' is not a rank"));
        continue;
      }
      in->rows.push_back(row);
    } else if (r[c.type] == "stage") {
      ClusterStage st;
      if (!ParseRankSet(r[c.index], &st.ranks)) {
        Problem(&f, line, absl::StrCat("Index '", r[c.index], "' is not a set of ranks"));
        continue;
      }
      st.step = row.step;
      st.max = row;
      in->stages.push_back(std::move(st));
    } else {
      Problem(&f, line, absl::StrCat("Type '", r[c.type], "' is neither rank nor stage"));
      continue;
    }
    ++f.records;
  }
  in->files.push_back(std::move(f));
}

void ParseClusterCommJson(std::string_view text, const std::string& name, ClusterInput* in) {
  ClusterFile f{name};
  nlohmann::json j = ParseJsonText(text, &f);
  // {group: {step: {op: {rank: record}}}}
  for (auto g = j.begin(); j.is_object() && g != j.end(); ++g) {
    if (!g->is_object()) {
      Problem(&f, g.key(), "not an object");
      continue;
    }
    for (auto s = g->begin(); s != g->end(); ++s) {
      int64_t step = -1;
      if (!ParseStep(s.key(), &step) || !s->is_object()) {
        Problem(&f, absl::StrCat(g.key(), "/", s.key()), "not a step of objects");
        continue;
      }
      CommOps(*s, g.key(), step, &f, in);
    }
  }
  in->files.push_back(std::move(f));
}

void ParseClusterMatrixJson(std::string_view text, const std::string& name, ClusterInput* in) {
  ClusterFile f{name};
  nlohmann::json j = ParseJsonText(text, &f);
  // {group: {step: {op: {"src-dst": link}}}}
  for (auto g = j.begin(); j.is_object() && g != j.end(); ++g) {
    if (!g->is_object()) {
      Problem(&f, g.key(), "not an object");
      continue;
    }
    for (auto s = g->begin(); s != g->end(); ++s) {
      if (!s->is_object()) {
        Problem(&f, absl::StrCat(g.key(), "/", s.key()), "not an object");
        continue;
      }
      MatrixOps(*s, &f, in);
    }
  }
  in->files.push_back(std::move(f));
}

ClusterPaths SplitClusterPaths(const std::vector<std::string>& paths, Os* os) {
  ClusterPaths out;
  for (const std::string& p : paths) {
    if (os->IsRegularFile(p) && Base(p) == "cluster_step_trace_time.csv") {
      out.outputs.push_back(Parent(p));
    } else if (os->IsDirectory(p) && IsClusterOutput(os, p)) {
      out.outputs.push_back(p);
    } else if (os->IsDirectory(p) && !IsRankFolder(os, p)) {
      int rank_folders = 0;
      for (const std::string& n : os->ListNames(p)) rank_folders += IsRankFolder(os, p + "/" + n);
      const bool has_output = os->IsDirectory(p + "/cluster_analysis_output") &&
                              IsClusterOutput(os, p + "/cluster_analysis_output");
      if (has_output) {
        out.outputs.push_back(p + "/cluster_analysis_output");
        if (rank_folders > 0) out.with_ranks.push_back(out.outputs.back());
      } else if (rank_folders >= 2) {
        out.rank_parents.push_back(p);
      }
      if (rank_folders > 0 || !has_output) out.rest.push_back(p);
    } else {
      out.rest.push_back(p);
    }
  }
  return out;
}

absl::StatusOr<ClusterInput> ReadClusterOutput(const std::string& dir, Os* os) {
  ClusterInput in;
  in.source = "cluster_analysis_output";
  in.path = dir;
  std::string text;
  const std::pair<const char*, void (*)(std::string_view, const std::string&, ClusterInput*)>
      kFiles[] = {{"cluster_step_trace_time.csv", ParseClusterStepTraceCsv},
                  {"cluster_communication.json", ParseClusterCommJson},
                  {"cluster_communication_matrix.json", ParseClusterMatrixJson}};
  for (const auto& [name, parse] : kFiles) {
    const std::string path = dir + "/" + name;
    if (os->IsRegularFile(path) && Slurp(os, path, &text)) parse(text, path, &in);
  }
  std::sort(in.rows.begin(), in.rows.end(), [](const ClusterRow& a, const ClusterRow& b) {
    return std::tie(a.step, a.rank) < std::tie(b.step, b.rank);
  });
  if (in.Empty()) {
    std::vector<std::string> why;
    for (const ClusterFile& f : in.files)
      if (!f.problems.empty()) why.push_back(f.problems[0]);
    return absl::InvalidArgumentError(
        absl::StrCat(dir,
                     ": no readable cluster_step_trace_time.csv, cluster_communication.json or "
                     "cluster_communication_matrix.json",
                     why.empty() ? "" : absl::StrCat(" (", absl::StrJoin(why, "; "), ")")));
  }
  return in;
}

absl::StatusOr<std::optional<ClusterInput>> ReadClusterPaths(const ClusterPaths& paths, Os* os) {
  const size_t n = paths.outputs.size() + paths.rank_parents.size();
  if (n == 0) return std::optional<ClusterInput>();
  if (n > 1) {
    std::vector<std::string> all = paths.outputs;
    all.insert(all.end(), paths.rank_parents.begin(), paths.rank_parents.end());
    return absl::InvalidArgumentError(absl::StrCat(
        "one Ascend cluster at a time: ", absl::StrJoin(all, ", "), " are ", n, " clusters"));
  }
  if (!paths.outputs.empty()) {
    auto in = ReadClusterOutput(paths.outputs[0], os);
    if (!in.ok()) return in.status();
    in->ranks_from_folders = !paths.with_ranks.empty();
    return std::optional<ClusterInput>(*std::move(in));
  }
  auto in = ReadRankFolders(paths.rank_parents[0], os);
  if (!in.ok()) return in.status();
  return std::optional<ClusterInput>(*std::move(in));
}

std::vector<RankTrace> ClusterRankTraces(const ClusterInput& in) {
  std::map<int, RankTrace> by_rank;
  const std::string csv = in.path + "/cluster_step_trace_time.csv";
  for (const ClusterRow& r : in.rows) {
    RankTrace& t = by_rank[r.rank];
    if (t.path.empty()) {
      t.path = csv;
      t.format = "ascend";
      t.rank = r.rank;
      t.rank_source = "cluster_step_trace_time.csv";
    }
    AscendStepRow a;
    a.step = r.step;
    a.computing_us = r.computing_us;
    a.comm_not_overlapped_us = r.comm_not_overlapped_us;
    a.overlapped_us = r.overlapped_us;
    a.comm_us = r.comm_us;
    a.free_us = r.free_us;
    a.stage_us = r.stage_us;
    a.bubble_us = r.bubble_us;
    a.preparing_us = r.preparing_us;
    t.ascend_steps.push_back(a);
    ++t.stats.events_kept;
  }
  std::vector<RankTrace> out;
  for (auto& [rank, t] : by_rank) out.push_back(std::move(t));
  return out;
}

// --- A folder of rank folders. ---

namespace {

// The rank of a rank folder: profiler_info_<rank>.json (torch_npu), else -1.
int FolderRank(Os* os, const std::string& dir) {
  for (const std::string& n : os->ListNames(dir)) {
    int r = -1;
    if (absl::StartsWith(n, "profiler_info_") && absl::EndsWith(n, ".json") &&
        absl::SimpleAtoi(n.substr(14, n.size() - 19), &r) && r >= 0 && r < kMaxRank)
      return r;
  }
  return -1;
}

// The "@..." group id of an op name (the hash torch_npu appends), or the op type.
std::string GroupOfOp(const std::string& op, const std::string& type) {
  size_t at = op.rfind('@');
  return at == std::string::npos ? type : op.substr(at + 1);
}

void ReadRankFolder(Os* os, const std::string& dir, int rank, ClusterInput* in,
                    std::vector<std::pair<std::string, std::vector<int>>>* groups) {
  const std::string out = dir + "/ASCEND_PROFILER_OUTPUT";
  std::string text;
  if (Slurp(os, out + "/step_trace_time.csv", &text)) {
    ClusterFile f{out + "/step_trace_time.csv"};
    auto rows = ParseCsv(text);
    StepCols c(rows.empty() ? std::vector<std::string>{} : rows[0]);
    if (!c.Usable()) Problem(&f, "line 1", "not a step_trace_time.csv");
    for (size_t i = 1; c.Usable() && i < rows.size(); ++i) {
      if (rows[i].size() <= 1 && (rows[i].empty() || rows[i][0].empty())) continue;
      ClusterRow row;
      std::string why;
      if (!RowFigures(c, rows[i], &row, &why)) {
        Problem(&f, absl::StrCat("line ", i + 1), why);
        continue;
      }
      row.rank = rank;
      in->rows.push_back(row);
      ++f.records;
    }
    in->files.push_back(std::move(f));
  }
  if (Slurp(os, out + "/communication.json", &text)) {
    ClusterFile f{out + "/communication.json"};
    nlohmann::json j = ParseJsonText(text, &f);
    RankStepTypeOps(j, &f, [&](int64_t step, const std::string& type, const nlohmann::json& ops) {
      for (auto op = ops.begin(); op != ops.end(); ++op) {
        ClusterCommRecord r;
        r.group = GroupOfOp(op.key(), type);
        r.step = step;
        r.op = op.key();
        r.rank = rank;
        r.total = IsTotalKey(op.key());
        std::string why;
        if (!CommRecord(*op, &r, &why)) {
          Problem(&f, op.key(), why);
          continue;
        }
        ++f.records;
        in->comm.push_back(std::move(r));
      }
    });
    in->files.push_back(std::move(f));
  }
  // communication_matrix.json is not read here: its links name group-local ranks ("0-1" of
  // group (0, 2)), which msprof-analyze `cluster` maps to global ones in
  // cluster_communication_matrix.json (read when the folder holds cluster_analysis_output/).
  // Pipeline and other groups: profiler_metadata.json "parallel_group_info".
  if (Slurp(os, dir + "/profiler_metadata.json", &text)) {
    nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    auto pg = j.is_object() ? j.find("parallel_group_info") : j.end();
    if (pg != j.end() && pg->is_object()) {
      for (auto g = pg->begin(); g != pg->end(); ++g) {
        if (!g->is_object()) continue;
        auto name = g->find("group_name");
        auto ranks = g->find("global_ranks");
        if (name == g->end() || !name->is_string() || ranks == g->end() || !ranks->is_array())
          continue;
        std::vector<int> set;
        for (const auto& r : *ranks)
          if (r.is_number_integer() && r.get<int64_t>() >= 0 && r.get<int64_t>() < kMaxRank)
            set.push_back(r.get<int>());
        std::sort(set.begin(), set.end());
        groups->push_back({name->get<std::string>(), set});
      }
    }
  }
}

bool Connected(const std::set<int>& a, const std::set<int>& b) {
  for (int x : a)
    if (b.count(x)) return true;
  return false;
}

// msprof-analyze's StageInfoAnalysis: the pipeline ("pp*") groups, joined where they share a
// rank; then every other group with at most one rank in each joined pipeline group, joined
// where they share a rank: the stages, by their first rank.
std::vector<std::vector<int>> StagesFromGroups(
    const std::vector<std::pair<std::string, std::vector<int>>>& groups) {
  std::vector<std::set<int>> pp, unions;
  for (const auto& [name, set] : groups)
    if (absl::StartsWithIgnoreCase(name, "pp")) pp.push_back(std::set<int>(set.begin(), set.end()));
  std::sort(pp.begin(), pp.end(),
            [](const std::set<int>& a, const std::set<int>& b) { return *a.begin() < *b.begin(); });
  for (std::set<int>& s : pp) {
    if (s.empty()) continue;
    bool joined = false;
    for (std::set<int>& u : unions)
      if (Connected(u, s)) {
        u.insert(s.begin(), s.end());
        joined = true;
        break;
      }
    if (!joined) unions.push_back(s);
  }
  if (unions.empty()) return {};
  std::map<int, std::set<int>> stages;
  for (const auto& [name, set] : groups) {
    if (absl::StartsWithIgnoreCase(name, "pp") || set.empty()) continue;
    std::set<int> s(set.begin(), set.end());
    bool valid = true;
    for (const std::set<int>& u : unions) {
      int common = 0;
      for (int x : s) common += u.count(x);
      valid &= common <= 1;
    }
    if (!valid) continue;
    for (auto it = stages.begin(); it != stages.end();) {
      if (Connected(it->second, s)) {
        s.insert(it->second.begin(), it->second.end());
        it = stages.erase(it);
      } else {
        ++it;
      }
    }
    stages[*s.begin()] = s;
  }
  std::vector<std::vector<int>> out;
  for (const auto& [first, s] : stages) out.push_back(std::vector<int>(s.begin(), s.end()));
  return out;
}

}  // namespace

absl::StatusOr<ClusterInput> ReadRankFolders(const std::string& dir, Os* os) {
  ClusterInput in;
  in.source = "rank_folders";
  in.path = dir;
  in.ranks_from_folders = true;
  std::vector<std::pair<std::string, std::vector<int>>> groups;
  std::set<int> seen;
  int next = 0;
  for (const std::string& n : os->ListNames(dir)) {
    const std::string sub = dir + "/" + n;
    if (!IsRankFolder(os, sub)) continue;
    int rank = FolderRank(os, sub);
    if (rank < 0 || seen.count(rank)) {
      while (seen.count(next)) ++next;
      rank = next;
    }
    seen.insert(rank);
    ReadRankFolder(os, sub, rank, &in, &groups);
  }
  std::sort(in.rows.begin(), in.rows.end(), [](const ClusterRow& a, const ClusterRow& b) {
    return std::tie(a.step, a.rank) < std::tie(b.step, b.rank);
  });
  // Stage rows as msprof-analyze writes them: per (step, stage), each column's maximum.
  for (const std::vector<int>& stage : StagesFromGroups(groups)) {
    std::map<int64_t, ClusterStage> by_step;
    for (const ClusterRow& r : in.rows) {
      if (!std::binary_search(stage.begin(), stage.end(), r.rank)) continue;
      auto [it, fresh] = by_step.try_emplace(r.step);
      ClusterStage& s = it->second;
      s.step = r.step;
      s.ranks = stage;
      ClusterRow& m = s.max;
      if (fresh) {
        m = r;
        m.rank = -1;
        continue;
      }
      m.computing_us = std::max(m.computing_us, r.computing_us);
      m.comm_not_overlapped_us = std::max(m.comm_not_overlapped_us, r.comm_not_overlapped_us);
      m.overlapped_us = std::max(m.overlapped_us, r.overlapped_us);
      m.comm_us = std::max(m.comm_us, r.comm_us);
      m.free_us = std::max(m.free_us, r.free_us);
      m.stage_us = std::max(m.stage_us, r.stage_us);
      m.bubble_us = std::max(m.bubble_us, r.bubble_us);
      m.comm_not_overlapped_excl_receive_us =
          std::max(m.comm_not_overlapped_excl_receive_us, r.comm_not_overlapped_excl_receive_us);
      m.preparing_us = std::max(m.preparing_us, r.preparing_us);
    }
    for (auto& [step, s] : by_step) in.stages.push_back(std::move(s));
  }
  if (in.Empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        dir, ": no rank folder with a readable step_trace_time.csv or communication.json"));
  }
  return in;
}

}  // namespace trainscope::trace::internal
