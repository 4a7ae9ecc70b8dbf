// JSON and text forms of ckpt reports. JSON numbers that may be non-finite (none here: stats
// are over finite values) are plain doubles; text cells use %.4g so the table fits 120 columns.
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "trainscope/ckpt/inspect.h"
#include "trainscope/core/formats.h"
#include "trainscope/core/table.h"

namespace trainscope::ckpt {
namespace {

using json = nlohmann::json;

std::string ShapeText(const std::vector<uint64_t>& s) {
  std::string t = "[";
  for (size_t i = 0; i < s.size(); ++i) absl::StrAppend(&t, i ? "," : "", s[i]);
  return t + "]";
}

std::string G(double v) { return absl::StrFormat("%.4g", v); }

json TensorJson(const TensorReport& t) {
  json j = {{"name", t.name}, {"dtype", t.dtype}, {"shape", t.shape}, {"bytes", t.bytes}};
  if (!t.file.empty()) j["file"] = t.file;
  if (t.chunks >= 0) j["chunks"] = t.chunks;
  if (t.stats.decoded) {
    j["nonfinite"] = t.stats.nonfinite;
    j["l2"] = t.stats.l2;
    j["min"] = t.stats.min;
    j["max"] = t.stats.max;
  }
  return j;
}

}  // namespace

std::string CheckpointReport::status() const {
  if (incomplete) return "incomplete";
  if (problems.empty()) return "ok";
  bool nonfinite = true, missing_data = false;
  for (const Problem& p : problems) {
    nonfinite = nonfinite && absl::StartsWith(p.problem, "non-finite:");
    missing_data = missing_data || absl::StartsWith(p.problem, "incomplete:");
  }
  if (nonfinite) return "non-finite";
  return missing_data ? "incomplete" : "corrupt";
}

std::vector<Finding> FindingsFrom(const std::vector<CheckpointReport>& reports) {
  std::vector<Finding> out;
  for (const CheckpointReport& r : reports) {
    for (const Problem& p : r.problems) {
      Finding f;
      f.title = p.problem;
      f.where = p.file;
      if (!p.tensor.empty()) f.evidence = absl::StrCat("tensor \"", p.tensor, "\"");
      if (absl::StartsWith(p.problem, "incomplete:")) {
        f.severity = Severity::kWarning;
        f.id = "ckpt.incomplete";
        f.fix =
            "resume from the newest good checkpoint (`trainscope ckpt verify` names it); "
            "this one is an unfinished save, not damaged bytes";
      } else {
        const bool nonfinite = absl::StartsWith(p.problem, "non-finite:");
        f.severity = Severity::kError;
        f.id = nonfinite ? "ckpt.non_finite" : "ckpt.corrupt";
        f.fix = nonfinite ? "do not resume from it: the saved state holds NaN/Inf; resume from "
                            "an earlier checkpoint and look at the steps before it was saved"
                          : "do not resume from it: resume from the newest good checkpoint "
                            "(`trainscope ckpt verify` names it)";
      }
      out.push_back(std::move(f));
    }
  }
  return out;
}

const CheckpointReport* NewestGood(const std::vector<CheckpointReport>& reports) {
  const CheckpointReport* best = nullptr;
  for (const CheckpointReport& r : reports) {
    if (r.format != "trainscope" || !r.ok() || !r.complete || r.anomaly) continue;
    if (!best || r.step > best->step) best = &r;
  }
  return best;
}

json ReportToJson(const CheckpointReport& r, bool with_tensors) {
  json problems = json::array();
  for (const Problem& p : r.problems) {
    json x = {{"file", p.file}, {"problem", p.problem}};
    if (!p.tensor.empty()) x["tensor"] = p.tensor;
    problems.push_back(std::move(x));
  }
  json j = {{"path", r.path},
            {"format", r.format},
            {"step", nullptr},
            {"complete", r.complete},
            {"ok", r.ok()},
            {"status", r.status()},
            {"problems", problems},
            {"tensor_count", r.tensors.size()},
            {"tensor_bytes", r.total_bytes}};
  if (r.step >= 0) j["step"] = r.step;
  if (with_tensors) {
    json ts = json::array();
    for (const TensorReport& t : r.tensors) ts.push_back(TensorJson(t));
    j["tensors"] = ts;
  }
  return j;
}

json ReportsToJson(const std::vector<CheckpointReport>& reports, bool with_tensors) {
  bool ok = true;
  json list = json::array();
  for (const CheckpointReport& r : reports) {
    ok = ok && r.ok();
    list.push_back(ReportToJson(r, with_tensors));
  }
  const CheckpointReport* good = NewestGood(reports);
  return {{"format", formats::kCkptReport},
          {"version", 1},
          {"ok", ok},
          {"checkpoints", std::move(list)},
          {"newest_good", good ? json{{"path", good->path}, {"step", good->step}} : json(nullptr)}};
}

json DiffToJson(const DiffReport& d) {
  json ts = json::array();
  for (const TensorDiff& t : d.tensors) {
    json x = {
        {"name", t.name}, {"differs", t.differs}, {"max_abs", t.max_abs}, {"max_rel", t.max_rel}};
    if (!t.change.empty()) x["change"] = t.change;
    ts.push_back(x);
  }
  return {{"format", formats::kCkptDiff},
          {"version", 1},
          {"a", d.a},
          {"b", d.b},
          {"same", d.same()},
          {"first_different", d.first_different.empty() ? json(nullptr) : json(d.first_different)},
          {"only_in_a", d.only_a},
          {"only_in_b", d.only_b},
          {"tensors", ts}};
}

std::string FormatReportText(const CheckpointReport& r, bool with_tensors) {
  std::string out;
  for (const Problem& p : r.problems) absl::StrAppend(&out, p.file, ": ", p.problem, "\n");
  absl::StrAppend(&out, r.path, ": ", r.format, r.step >= 0 ? absl::StrCat(", step ", r.step) : "",
                  ", ", r.tensors.size(), " tensors, ", FormatBytes(r.total_bytes), ", ",
                  r.ok() && r.incomplete ? "incomplete (an unfinished save)" : r.status(),
                  r.ok() ? "" : ", problems found", "\n");
  if (!with_tensors || r.tensors.empty()) return out;
  Table t({"tensor", "dtype", "shape", "bytes", "nonfinite", "l2", "min", "max"});
  for (const TensorReport& x : r.tensors) {
    const bool s = x.stats.decoded;
    const std::string name = x.file.empty() || x.file == "model.safetensors" ||
                                     r.format == "hf-sharded" || r.format == "dcp"
                                 ? x.name
                                 : absl::StrCat(x.file.substr(0, x.file.rfind(".safetensors")), ":",
                                                x.name);  // "compression.rank1:..."
    t.AddRow({name, x.dtype, ShapeText(x.shape), FormatBytes(x.bytes),
              s ? FormatCount(x.stats.nonfinite) : "-", s ? G(x.stats.l2) : "-",
              s ? G(x.stats.min) : "-", s ? G(x.stats.max) : "-"});
  }
  return out + t.Render(40);
}

std::string FormatReportsText(const std::vector<CheckpointReport>& reports, bool with_tensors) {
  std::string out;
  bool ours = false;
  for (const CheckpointReport& r : reports) {
    out += FormatReportText(r, with_tensors);
    ours = ours || r.format == "trainscope";
  }
  if (!ours) return out;
  const CheckpointReport* good = NewestGood(reports);
  absl::StrAppend(
      &out,
      good ? absl::StrCat("newest good checkpoint: ", good->path, " (step ", good->step, ")")
           : std::string("no good checkpoint: each one listed is damaged, "
                         "unfinished or an anomaly checkpoint"),
      "\n");
  return out;
}

std::string FormatDiffText(const DiffReport& d) {
  std::string out;
  for (const auto& n : d.only_a) absl::StrAppend(&out, "tensor \"", n, "\" is only in ", d.a, "\n");
  for (const auto& n : d.only_b) absl::StrAppend(&out, "tensor \"", n, "\" is only in ", d.b, "\n");
  for (const TensorDiff& t : d.tensors) {
    if (t.change == "shape" || t.change == "dtype") {
      absl::StrAppend(&out, "tensor \"", t.name, "\" changed ", t.change, "\n");
    }
  }
  absl::StrAppend(&out,
                  d.first_different.empty()
                      ? std::string("no tensor differs")
                      : absl::StrCat("first tensor that differs: ", d.first_different),
                  "\n");
  Table t({"tensor", "differs", "max abs", "max rel", "note"});
  for (const TensorDiff& x : d.tensors) {
    t.AddRow({x.name, x.differs ? "yes" : "no", G(x.max_abs), G(x.max_rel), x.change});
  }
  return out + t.Render(50);
}

}  // namespace trainscope::ckpt
