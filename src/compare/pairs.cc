// CompareDumps: the dump folders of both sides paired by step and rank, each pair compared,
// the first divergence across ranks, and what it means.
#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compare/internal.h"
#include "trainscope/compare/compare.h"

namespace trainscope::compare {
namespace {

bool Has(const std::string& s, std::initializer_list<const char*> words) {
  for (const char* w : words)
    if (s.find(w) != std::string::npos) return true;
  return false;
}

// One sentence: what the divergence means and what to try.
std::string Meaning(const PairReport& p) {
  const FirstDivergence& f = p.first;
  const EntryCompare& e = *f.entry;
  if (f.kind == "input") {
    if (&e == &*std::find_if(p.entries.begin(), p.entries.end(),
                             [](const EntryCompare& x) { return x.b != nullptr; })) {
      return "The very first op's inputs already differ, so the two runs were fed different "
             "data, seeds or initial weights: align the data order, the seed and the checkpoint "
             "loaded, then dump again.";
    }
    return "The inputs of " + f.name +
           " differ although no dumped op before it diverged: the "
           "difference comes from outside the dump (an op msprobe did not hook, data read "
           "mid-model, a different step); dump at level mix or L1 and check what feeds it.";
  }
  std::string dtype_a, dtype_b;
  for (const RowCompare& r : e.rows) {
    if (r.a->kind == Tensor::Kind::kTensor && r.b && dtype_a.empty()) {
      dtype_a = r.a->dtype;
      dtype_b = r.b->dtype;
    }
  }
  const std::string api = ApiName(f.name);
  std::string lower = api;
  std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
  const std::string where = f.module.empty() ? "" : " (in " + f.module + ")";
  if (f.communication) {
    return f.name + " turned agreeing inputs into differing outputs" + where +
           ": the collective itself differs (reduction order, algorithm, a faulty link); rerun "
           "with deterministic collectives (HCCL_DETERMINISTIC=true, NCCL_ALGO=Ring) and check "
           "the links with `trainscope selftest comm`.";
  }
  std::string base = f.name + where + " turns agreeing inputs into differing outputs";
  if (dtype_a != dtype_b) {
    return base + ": the two sides run it in " + dtype_a + " and " + dtype_b +
           "; give the module the same precision on both (autocast settings, .half()/.float()).";
  }
  base += " (" + (dtype_a.empty() ? std::string("no tensor") : dtype_a) + " on both sides)";
  if (Has(lower, {"fusion", "flash", "fused", "scaled_dot_product", "npu_", "rotary", "swiglu"})) {
    return base +
           ": a fused kernel that differs by device; disable the fusion (the unfused "
           "attention or math SDPA path, Megatron's --no-use-fused-* flags) to confirm.";
  }
  if (Has(lower, {"matmul", "linear", "bmm", "addmm", "conv", "mm", "einsum", "baddbmm"})) {
    return base +
           ": a matmul-class op whose accumulation differs by device; check TF32/HF32 "
           "(torch.backends.cuda.matmul.allow_tf32, torch.npu.conv.allow_hf32) and run it in "
           "float32 on both sides.";
  }
  if (Has(lower, {"softmax", "norm", "gelu", "silu", "exp", "log", "sum", "mean", "pow", "var"})) {
    return base +
           ": a reduction or transcendental kernel known to differ between devices; run "
           "this module in float32 on both sides to see whether the difference disappears.";
  }
  return base +
         ": run this module in float32 on both sides and compare again in tensor mode "
         "to see which elements differ.";
}

std::string Where(const DumpLocation& l) { return l.step.empty() ? l.rank : l.step + "/" + l.rank; }

void AddFinding(Report* r, Severity s, const std::string& id, const std::string& title,
                const std::string& evidence, const std::string& fix, const std::string& where) {
  Finding f;
  f.severity = s, f.id = id, f.title = title, f.evidence = evidence, f.fix = fix, f.where = where;
  r->findings.push_back(std::move(f));
}

void InputFindings(const Dump& d, const char* side, Report* r) {
  if (d.truncated_entries > 0) {
    AddFinding(r, Severity::kWarning, "compare.dump_truncated",
               absl::StrCat("dump.json of ", side,
                            " ends early (cut short or still being "
                            "written: msprobe writes it at stop())"),
               absl::StrCat(d.entries.size(), " entries read, ", d.truncated_entries,
                            " cut at byte ", d.truncated_at),
               "compare what was read; dump again and let debugger.stop() run", d.dir);
  }
  if (d.malformed_entries > 0) {
    AddFinding(r, Severity::kWarning, "compare.malformed_entries",
               absl::StrCat(d.malformed_entries, " entries of ", side, " are not objects"),
               "skipped", "", d.dir);
  }
  for (const std::string& n : d.notes)
    AddFinding(r, Severity::kInfo, "compare.side_file", n, "", "", d.dir);
}

}  // namespace

absl::StatusOr<Report> CompareDumps(const std::string& a, const std::string& b,
                                    const Options& options) {
  TS_ASSIGN_OR_RETURN(std::vector<DumpLocation> la, FindDumps(a));
  TS_ASSIGN_OR_RETURN(std::vector<DumpLocation> lb, FindDumps(b));
  Report report;
  report.path_a = a, report.path_b = b;
  // Pair by step and rank names; two single dumps pair whatever their names.
  std::vector<std::pair<DumpLocation, DumpLocation>> pairs;
  std::vector<bool> used_b(lb.size(), false);
  if (la.size() == 1 && lb.size() == 1) {
    pairs.emplace_back(la[0], lb[0]);
    used_b[0] = true;
  } else {
    for (const DumpLocation& x : la) {
      size_t j = 0;
      while (j < lb.size() && (used_b[j] || lb[j].step != x.step || lb[j].rank != x.rank)) ++j;
      if (j == lb.size()) {
        report.unpaired_a.push_back(x.dir);
        continue;
      }
      used_b[j] = true;
      pairs.emplace_back(x, lb[j]);
    }
  }
  for (size_t j = 0; j < lb.size(); ++j)
    if (!used_b[j]) report.unpaired_b.push_back(lb[j].dir);
  std::string err_a, err_b;
  int read_a = 0, read_b = 0;
  for (const auto& [x, y] : pairs) {
    auto da = ReadDumpDir(x.dir);
    auto db = ReadDumpDir(y.dir);
    if (!da.ok() && err_a.empty()) err_a = std::string(da.status().message());
    if (!db.ok() && err_b.empty()) err_b = std::string(db.status().message());
    read_a += da.ok(), read_b += db.ok();
    for (const auto* st : {&da, &db}) {
      if (!st->ok())
        AddFinding(&report, Severity::kWarning, "compare.unreadable_dump",
                   std::string(st->status().message()), "", "that pair is skipped", "");
    }
    if (!da.ok() || !db.ok()) continue;
    da->step = x.step, da->rank = x.rank, db->step = y.step, db->rank = y.rank;
    InputFindings(*da, "A", &report);
    InputFindings(*db, "B", &report);
    if (da->framework != db->framework) {
      AddFinding(&report, Severity::kWarning, "compare.frameworks_differ",
                 absl::StrCat("A is a ", da->framework, " dump and B a ", db->framework, " dump"),
                 "names are matched as they are, then by structure",
                 "give the API and module renames with --mapping", Where(x));
    }
    report.pairs.push_back(ComparePair(*std::move(da), *std::move(db), options));
  }
  if (!pairs.empty() && read_a == 0) return absl::InvalidArgumentError(err_a);
  if (!pairs.empty() && read_b == 0) return absl::InvalidArgumentError(err_b);
  if (pairs.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(b, ": no dump folder pairs with one of ", a, " (steps and ranks differ)"));
  }
  // Across ranks: the earliest divergence in execution order, the lower rank on a tie.
  for (PairReport& p : report.pairs) {
    report.matched += p.matched;
    if (!p.has_divergence) continue;
    const PairReport* best = report.first_pair;
    const int order = p.first.entry->a->order;
    if (!best || order < best->first.entry->a->order ||
        (order == best->first.entry->a->order && p.first.kind == "input" &&
         best->first.kind == "output"))
      report.first_pair = &p;
  }
  report.diverged = report.first_pair != nullptr;
  // A collective is to blame only when its inputs agree on every rank.
  for (PairReport& p : report.pairs) {
    if (!p.has_divergence || !p.first.communication) continue;
    for (const PairReport& q : report.pairs) {
      for (const EntryCompare& e : q.entries)
        if (e.a->name == p.first.name && e.inputs_differ) p.first.communication = false;
    }
  }
  for (PairReport& p : report.pairs)
    if (p.has_divergence) p.first.meaning = Meaning(p);
  std::vector<Finding> more = FindingsFrom(report);
  report.findings.insert(report.findings.end(), more.begin(), more.end());
  SortFindings(&report.findings);
  return report;  // moved (not copied): first_pair and the row pointers stay valid
}

}  // namespace trainscope::compare
