// The launcher's part in hang diagnosis (see launch.h, "Hang dumps"): which ranks can be asked
// for a dump, whether they wrote it, and the analysis of what they left.
#include "launch/hang_dump.h"

#include <signal.h>
#include <sys/stat.h>

#include <cstdio>
#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "trainscope/core/os.h"
#include "trainscope/core/run_dir.h"
#include "trainscope/hang/analyze.h"
#include "trainscope/launch/launch.h"

namespace trainscope::launch {
namespace {

// Empty when absent; else what changes when the file is written, replaced or touched.
std::string FileStamp(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return "";
  return absl::StrCat(st.st_dev, ":", st.st_ino, ":", st.st_size, ":", st.st_mtim.tv_sec, ".",
                      st.st_mtim.tv_nsec, ":", st.st_ctim.tv_sec, ".", st.st_ctim.tv_nsec);
}

// Any dump under <run_dir>/hang/? (The analysis refuses a folder without one.)
bool HasDumps(const std::string& run_dir, Os* os) {
  absl::StatusOr<std::vector<std::string>> names =
      os->ListDir((std::filesystem::path(run_dir) / hang::kDumpDir).string());
  if (!names.ok()) return false;
  for (const std::string& name : *names) {
    if (name.rfind(run_dir::kHangDumpPrefix, 0) == 0) return true;
  }
  return false;
}

}  // namespace

bool CatchesSignal(const std::string& proc_status, int sig) {
  if (sig < 1 || sig > 64) return false;
  for (absl::string_view line : absl::StrSplit(proc_status, '\n')) {
    if (!absl::ConsumePrefix(&line, "SigCgt:")) continue;
    uint64_t mask = 0;
    if (!absl::SimpleHexAtoi(absl::StripAsciiWhitespace(line), &mask)) return false;
    return (mask >> (sig - 1)) & 1;
  }
  return false;
}

bool AskRankToDump(pid_t pid, Os* os) {
  absl::StatusOr<std::string> text = os->ReadFile(absl::StrCat("/proc/", pid, "/status"));
  if (!text.ok() || !CatchesSignal(*text, SIGUSR1)) return false;
  return ::kill(pid, SIGUSR1) == 0;
}

HangDumpFiles StatHangDump(const std::string& run_dir, int rank) {
  return {FileStamp(hang::DumpPath(run_dir, rank)), FileStamp(hang::StacksPath(run_dir, rank))};
}

bool HangDumpWritten(const std::string& run_dir, int rank, const HangDumpFiles& before) {
  // The stacks file is written after the dump: both new means the rank is done.
  const HangDumpFiles now = StatHangDump(run_dir, rank);
  return !now.dump.empty() && now.dump != before.dump && !now.stacks.empty() &&
         now.stacks != before.stacks;
}

HangVerdict AnalyzeHangDumps(const std::string& run_dir, HangVerdict v, Os* os) {
  if (!HasDumps(run_dir, os)) return v;
  v.analysis_path = run_dir::HangAnalysisPath(run_dir);
  absl::StatusOr<hang::Report> report = hang::AnalyzePaths({run_dir});
  if (!report.ok()) {
    v.error = std::string(report.status().message());
    return v;
  }
  v.analyzed = true;
  v.problem = report->problem;
  v.findings = static_cast<int>(report->findings.size());
  for (const hang::HangFinding& f : report->findings) v.sentences.push_back(f.finding.title);
  absl::Status written =
      WriteFileAtomic(v.analysis_path, hang::ReportToJson(*report).dump(2) + "\n");
  if (!written.ok()) v.error = std::string(written.message());
  return v;
}

}  // namespace trainscope::launch
