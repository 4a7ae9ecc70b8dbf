// AnalyzePaths: expand the inputs into files, read each (dump_reader.cc), and analyse the
// dumps (groups.cc, analysis.cc, attribution.cc); plus the small public helpers.
#include <sys/stat.h>

#include <algorithm>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "hang/analysis_internal.h"
#include "hang/hccl_dump.h"
#include "trainscope/core/os.h"
#include "trainscope/core/run_dir.h"

namespace trainscope::hang {
namespace {

constexpr int64_t kMaxDumpBytes = int64_t{1} << 30;  // 2,000 entries take ~2 MB

std::string Join(const std::string& dir, const std::string& name) {
  return dir.empty() || dir.back() == '/' ? dir + name : dir + "/" + name;
}

bool IsDir(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// What the run directory's hang/ folder holds besides the dumps (core/run_dir.h layout):
// thread stacks and a previous analysis. Not read, not listed.
bool IsRunDirCompanion(const std::string& name) {
  return name.rfind(run_dir::kHangStacksPrefix, 0) == 0 || name == run_dir::kHangAnalysisJson;
}

// The files of a directory (not recursive). A run directory (it has a hang/ folder) is
// read through that folder alone, without its companions.
absl::Status ListInputs(const std::string& path, std::vector<std::string>* files) {
  Os* os = Os::Default();
  if (!IsDir(path)) {
    files->push_back(path);
    return absl::OkStatus();
  }
  const std::string hang_dir = Join(path, kDumpDir);
  const bool run_dir = IsDir(hang_dir);
  const std::string dir = run_dir ? hang_dir : path;
  auto names = os->ListDir(dir);
  if (!names.ok()) return names.status();
  for (const std::string& n : *names) {
    std::string p = Join(dir, n);
    if (IsDir(p) || (run_dir && IsRunDirCompanion(n))) continue;
    files->push_back(p);
  }
  return absl::OkStatus();
}

// The Finding's fields that follow from the kind and the location (the text is written
// where the finding is made).
void DescribeFinding(HangFinding* h) {
  Finding& f = h->finding;
  // A missing dump leaves the verdict open; every other kind is the hang's cause.
  // (long_task_after_collective names no rank: where the time went is for the user to see.)
  f.severity =
      h->kind == FindingKind::kMissingDump || h->kind == FindingKind::kLongTaskAfterCollective
          ? Severity::kWarning
          : Severity::kError;
  f.id = absl::StrCat("hang.", FindingKindName(h->kind));
  std::string seq = h->collective_seq_id >= 0 ? absl::StrCat("collective #", h->collective_seq_id)
                                              : absl::StrCat("p2p #", h->p2p_seq_id);
  f.where = absl::StrCat("process group ", h->pg, h->pg_desc.empty() ? "" : " (" + h->pg_desc + ")",
                         ", ", seq, h->op.empty() ? "" : " " + h->op);
  f.rank = h->culprit_ranks.size() == 1 ? h->culprit_ranks[0] : -1;
}

void ReadOne(const std::string& file, std::vector<Dump>* dumps, InputCounts* counts) {
  ++counts->files_read;
  struct stat st;
  if (::stat(file.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
    counts->skipped.push_back({file, "not a regular file"});
    return;
  }
  if (st.st_size > kMaxDumpBytes) {
    counts->skipped.push_back({file, absl::StrCat("larger than ", kMaxDumpBytes, " bytes")});
    return;
  }
  auto bytes = Os::Default()->ReadFile(file);
  if (!bytes.ok()) {
    counts->corrupt.push_back({file, std::string(bytes.status().message())});
    return;
  }
  ReadResult r = ReadDumpBytes(*bytes, file);
  switch (r.outcome) {
    case ReadOutcome::kDump:
      r.dump.file = file;
      dumps->push_back(std::move(r.dump));
      break;
    case ReadOutcome::kNotADump:
      counts->skipped.push_back({file, r.reason});
      break;
    case ReadOutcome::kCorrupt:
      counts->corrupt.push_back({file, r.reason});
      break;
  }
}

}  // namespace

std::string DumpPath(const std::string& run_dir, int rank) {
  return run_dir::HangDumpPath(run_dir, rank);
}

std::string StacksPath(const std::string& run_dir, int rank) {
  return run_dir::HangStacksPath(run_dir, rank);
}

std::vector<Finding> FindingsFrom(const Report& report) {
  std::vector<Finding> out;
  for (const HangFinding& h : report.findings) out.push_back(h.finding);
  return out;
}

const char* FindingKindName(FindingKind kind) {
  switch (kind) {
    case FindingKind::kNotJoined:
      return "not_joined";
    case FindingKind::kTypeMismatch:
      return "type_mismatch";
    case FindingKind::kSizeMismatch:
      return "size_mismatch";
    case FindingKind::kDtypeMismatch:
      return "dtype_mismatch";
    case FindingKind::kStateMismatch:
      return "state_mismatch";
    case FindingKind::kMissingDump:
      return "missing_dump";
    case FindingKind::kComputeStuck:
      return "compute_stuck";
    case FindingKind::kLongTaskAfterCollective:
      return "long_task_after_collective";
    case FindingKind::kCollectiveTimeout:
      return "collective_timeout";
  }
  return "?";
}

Report AnalyzeDumps(std::vector<Dump> dumps, InputCounts counts, const AnalyzeOptions& options) {
  std::stable_sort(dumps.begin(), dumps.end(),
                   [](const Dump& a, const Dump& b) { return a.rank < b.rank; });
  // A second dump of the same rank is not analysed (which one is right is unknowable).
  std::vector<Dump> unique;
  for (Dump& d : dumps) {
    if (!unique.empty() && unique.back().rank == d.rank) {
      counts.corrupt.push_back({d.file, absl::StrCat("a second dump of rank ", d.rank,
                                                     " (first: ", unique.back().file, ")")});
      continue;
    }
    unique.push_back(std::move(d));
  }
  std::vector<internal::MembershipDisagreement> disagreements;
  std::vector<internal::Group> groups = internal::BuildGroups(unique, &disagreements);
  std::vector<std::string> unusable;
  // Named by base name and reason in the evidence (the full paths are in details.inputs).
  auto base = [](const std::string& p) { return p.substr(p.rfind('/') + 1); };
  for (const auto& [file, reason] : counts.corrupt)
    unusable.push_back(base(file) + " (" + reason + ")");
  Report report;
  std::vector<internal::WaitFor> waits;
  report.findings = internal::FindProblems(unique, groups, unusable, &waits);
  internal::OrderByRootCause(waits, &report);
  report.details = internal::BuildDetails(unique, groups, counts, disagreements);
  internal::AddHcclTimeoutClasses(unique, &report);  // torch_npu's dumps only (hccl_dump.cc)
  if (options.mismatch_cap >= 0 &&
      report.findings.size() > static_cast<size_t>(options.mismatch_cap))
    report.findings.resize(options.mismatch_cap);
  for (HangFinding& h : report.findings) DescribeFinding(&h);
  report.problem = !report.findings.empty();
  return report;
}

absl::StatusOr<Report> AnalyzePaths(const std::vector<std::string>& paths,
                                    const AnalyzeOptions& options) {
  std::vector<std::string> files;
  for (const std::string& p : paths) {
    struct stat st;
    if (::stat(p.c_str(), &st) != 0) return absl::NotFoundError(p + ": no such file or directory");
    absl::Status s = ListInputs(p, &files);
    if (!s.ok()) return absl::InvalidArgumentError(p + ": " + std::string(s.message()));
  }
  std::vector<Dump> dumps;
  InputCounts counts;
  for (const std::string& f : files) ReadOne(f, &dumps, &counts);
  if (dumps.empty()) {
    std::string what = paths.size() == 1 ? paths[0] : absl::StrCat(paths.size(), " paths");
    std::string why = counts.corrupt.empty() ? ""
                                             : absl::StrCat(" (", counts.corrupt.size(),
                                                            " corrupt: ", counts.corrupt[0].first,
                                                            ": ", counts.corrupt[0].second, ")");
    return absl::InvalidArgumentError(absl::StrCat(what, ": no flight recorder dump found (",
                                                   counts.files_read, " files read)", why));
  }
  return AnalyzeDumps(std::move(dumps), std::move(counts), options);
}

}  // namespace trainscope::hang
