// The report's details (per-rank summary, inputs) and its two renderings: JSON (the
// contract in docs/formats.md "Hang analysis") and text (sentences first, then a table).
#include <algorithm>
#include <map>
#include <string>

#include "hang/analysis_internal.h"
#include "trainscope/core/formats.h"
#include "trainscope/core/table.h"

namespace trainscope::hang {
namespace internal {
namespace {

using nlohmann::json;

std::string BaseName(const std::string& path) { return path.substr(path.rfind('/') + 1); }

json FileList(const std::vector<std::pair<std::string, std::string>>& list) {
  json out = json::array();
  for (const auto& [file, reason] : list)
    out.push_back({{"file", file}, {"name", BaseName(file)}, {"reason", reason}});
  return out;
}

std::string MajorityVersion(const std::vector<Dump>& dumps) {
  std::map<std::string, int> count;
  for (const Dump& d : dumps) ++count[d.version];
  std::string best;
  int n = 0;
  for (const auto& [v, c] : count)
    if (c > n) best = v, n = c;
  return best;
}

json RankSummary(const Dump& d, const std::vector<Group>& groups) {
  json r = {{"rank", d.rank},     {"file", d.file},       {"name", BaseName(d.file)},
            {"format", d.format}, {"version", d.version}, {"entries", d.entries.size()}};
  r["first_record_id"] = d.entries.empty() ? -1 : d.entries.front().record_id;
  json per_group = json::array();
  for (const Group& g : groups) {
    if (!std::binary_search(g.members.begin(), g.members.end(), d.rank)) continue;
    int64_t enq = -1, start = -1, done = -1;
    for (const Entry& e : d.entries) {
      if (e.is_p2p || e.pg_name != g.name) continue;
      enq = std::max(enq, e.collective_seq_id);
      if (e.state == "started" || e.state == "completed")
        start = std::max(start, e.collective_seq_id);
      if (e.state == "completed") done = std::max(done, e.collective_seq_id);
    }
    per_group.push_back({{"pg", g.name},
                         {"last_enqueued", enq},
                         {"last_started", start},
                         {"last_completed", done}});
  }
  r["groups"] = per_group;
  json last = json::array();
  size_t from = d.entries.size() > 2 ? d.entries.size() - 2 : 0;
  for (size_t i = from; i < d.entries.size(); ++i) {
    const Entry& e = d.entries[i];
    json j = {{"pg", e.pg_name}, {"op", e.op}, {"state", e.state}, {"caller", e.caller}};
    if (e.is_p2p) {
      j["p2p_seq_id"] = e.p2p_seq_id;
    } else {
      j["collective_seq_id"] = e.collective_seq_id;
    }
    last.push_back(j);
  }
  r["last"] = last;
  return r;
}

}  // namespace

json BuildDetails(const std::vector<Dump>& dumps, const std::vector<Group>& groups,
                  const InputCounts& counts,
                  const std::vector<MembershipDisagreement>& disagreements) {
  json in = {{"files_read", counts.files_read}, {"dumps", dumps.size()}};
  in["skipped"] = FileList(counts.skipped);
  in["corrupt"] = FileList(counts.corrupt);
  const std::string version = MajorityVersion(dumps);
  in["version_mismatch"] = json::array();
  for (const Dump& d : dumps)
    if (d.version != version)
      in["version_mismatch"].push_back(
          {{"file", d.file}, {"name", BaseName(d.file)}, {"rank", d.rank}, {"version", d.version}});
  in["membership_disagreements"] = json::array();
  for (const auto& m : disagreements)
    in["membership_disagreements"].push_back(
        {{"pg", m.pg}, {"ranks", m.ranks}, {"taken", m.taken}, {"their_view", m.other}});
  json details = {{"inputs", in}, {"version", version}};
  json gs = json::array();
  for (const Group& g : groups)
    gs.push_back(
        {{"pg", g.name}, {"pg_desc", g.desc}, {"ranks", g.members}, {"missing_ranks", g.missing}});
  details["groups"] = gs;
  json ranks = json::array();
  for (const Dump& d : dumps) ranks.push_back(RankSummary(d, groups));
  details["ranks"] = ranks;
  return details;
}

}  // namespace internal

namespace {

constexpr size_t kTextColumns = 120;

// `first` + `text`, word-wrapped to kTextColumns; continuation lines start with `indent`.
std::string Wrap(const std::string& first, const std::string& text, const std::string& indent) {
  std::string out = first, word;
  size_t col = first.size();
  bool line_empty = first.empty();
  auto flush = [&] {
    if (word.empty()) return;
    if (!line_empty && col + 1 + word.size() > kTextColumns) {
      out += "\n" + indent;
      col = indent.size();
      line_empty = true;
    }
    if (!line_empty) {
      out += ' ';
      ++col;
    }
    out += word;
    col += word.size();
    line_empty = false;
    word.clear();
  };
  for (char c : text) {
    if (c == ' ') {
      flush();
    } else {
      word += c;
    }
  }
  flush();
  return out + "\n";
}

}  // namespace

nlohmann::json ReportToJson(const Report& report) {
  using nlohmann::json;
  json findings = json::array();
  for (const HangFinding& f : report.findings) {
    json j = {{"kind", FindingKindName(f.kind)}, {"pg", f.pg}, {"pg_desc", f.pg_desc}};
    if (f.p2p_seq_id >= 0 && f.collective_seq_id < 0) {
      j["p2p_seq_id"] = f.p2p_seq_id;
    } else {
      j["collective_seq_id"] = f.collective_seq_id;
    }
    j["op"] = f.op;
    j["culprit_ranks"] = f.culprit_ranks;
    j["waiting_ranks"] = f.waiting_ranks;
    j["caller"] = f.caller;
    j["sentence"] = f.finding.title;
    j["evidence"] = f.finding.evidence;
    j["fix"] = f.finding.fix;
    j["root"] = f.root;
    j["consequence_of"] = f.consequence_of;
    j["consequence"] = f.consequence;
    findings.push_back(std::move(j));
  }
  json out = {{"format", formats::kHangAnalysis},
              {"version", 1},
              {"problem", report.problem},
              {"findings", findings}};
  out["root_ranks"] = report.root_ranks;
  out["root_cause"] = report.root_cause;
  out["details"] = report.details.is_null() ? json::object() : report.details;
  return out;
}

std::string FormatReportText(const Report& report) {
  using nlohmann::json;
  std::string out;
  const json& d = report.details;
  const json empty = json::object();
  const json& in = d.contains("inputs") ? d["inputs"] : empty;
  if (report.findings.empty()) {
    out += "No hang cause found: every process group's collectives match across its ranks.\n";
  }
  if (!report.root_cause.empty()) out += Wrap("", report.root_cause, "  ") + "\n";
  for (size_t i = 0; i < report.findings.size(); ++i) {
    const HangFinding& f = report.findings[i];
    if (!f.root && !report.root_ranks.empty() && (i == 0 || report.findings[i - 1].root))
      out += "Consequences:\n";
    out +=
        Wrap(std::to_string(i + 1) + ". [" + FindingKindName(f.kind) + "]", f.finding.title, "   ");
    if (!f.consequence.empty()) out += Wrap("   consequence:", f.consequence, "     ");
    if (!f.finding.evidence.empty()) out += Wrap("   evidence:", f.finding.evidence, "     ");
    if (!f.finding.fix.empty()) out += Wrap("   fix:", f.finding.fix, "     ");
  }
  out += "\n";
  if (!in.empty()) {
    out += "inputs: " + std::to_string(in.value("files_read", 0)) + " files read, " +
           std::to_string(in.value("dumps", 0)) + " dumps";
    const char* lists[] = {"skipped", "corrupt", "version_mismatch", "membership_disagreements"};
    for (const char* key : lists)
      if (in.contains(key) && !in[key].empty())
        out += ", " + std::to_string(in[key].size()) + " " + key;
    out += "\n";
    for (const char* key : {"skipped", "corrupt"})
      for (const json& x : in.value(key, json::array()))
        out += Wrap("  " + std::string(key) + ":",
                    x.value("file", "") + ": " + x.value("reason", ""), "    ");
    for (const json& x : in.value("version_mismatch", json::array()))
      out += "  version_mismatch: " + x.value("file", "") + " has version " +
             x.value("version", "") + ", most dumps " + d.value("version", "") + "\n";
    for (const json& x : in.value("membership_disagreements", json::array()))
      out += Wrap("  membership_disagreement:",
                  "group " + x.value("pg", "") + ": ranks " + x["ranks"].dump() + " say " +
                      x.value("their_view", "") + ", others " + x.value("taken", ""),
                  "    ");
  }
  if (d.contains("ranks") && !d["ranks"].empty()) {
    Table t({"rank", "file", "entries", "pg: enq/start/done", "last collectives"});
    for (const json& r : d["ranks"]) {
      std::string groups, last;
      for (const json& g : r["groups"]) {
        if (!groups.empty()) groups += " ";
        groups += g.value("pg", "") + ":" + std::to_string(g.value("last_enqueued", -1)) + "/" +
                  std::to_string(g.value("last_started", -1)) + "/" +
                  std::to_string(g.value("last_completed", -1));
      }
      for (const json& e : r["last"]) {
        if (!last.empty()) last += ", ";
        std::string seq = e.contains("p2p_seq_id")
                              ? "p" + std::to_string(e.value("p2p_seq_id", -1))
                              : "#" + std::to_string(e.value("collective_seq_id", -1));
        last += e.value("op", "") + seq + " " + e.value("state", "");
      }
      // Column budget (120 in all): rank 6, file 24, entries 7, groups 30, last 45.
      auto cut = [](std::string c, size_t n, bool keep_tail) {
        if (c.size() <= n) return c;
        return keep_tail ? "..." + c.substr(c.size() - (n - 3)) : c.substr(0, n - 3) + "...";
      };
      t.AddRow({std::to_string(r.value("rank", -1)), cut(r.value("name", ""), 24, true),
                std::to_string(r.value("entries", 0)), cut(groups, 30, false),
                cut(last, 45, true)});
    }
    out += t.Render(60);
  }
  return out;
}

}  // namespace trainscope::hang
