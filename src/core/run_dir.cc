// The run-directory contract (core/run_dir.h): names and paths in one place.
#include "trainscope/core/run_dir.h"

#include <unistd.h>

#include <ctime>

#include "absl/strings/str_cat.h"

namespace trainscope::run_dir {

std::string RunDirName(const std::string& kind, int64_t unix_s, int pid) {
  std::time_t t = static_cast<std::time_t>(unix_s);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%d-%H%M%S", &tm);
  return absl::StrCat("runs/", kind, "-", buf, "-", pid);
}

std::string DefaultRunDir(const std::string& kind) {
  return RunDirName(kind, static_cast<int64_t>(std::time(nullptr)), static_cast<int>(::getpid()));
}

std::string Join(const std::string& run_dir, const std::string& part) {
  if (run_dir.empty()) return part;
  if (run_dir.back() == '/') return absl::StrCat(run_dir, part);
  return absl::StrCat(run_dir, "/", part);
}

std::string TrainMetricsPath(const std::string& run_dir, int rank) {
  return Join(run_dir, absl::StrCat(kTrain, "/metrics.rank", rank, ".jsonl"));
}

namespace {

// (absl's string_view is not std's in this build: these take std's.)
bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

bool HasPrefixAndSuffix(std::string_view s, std::string_view prefix, std::string_view suffix) {
  return s.size() >= prefix.size() + suffix.size() && StartsWith(s, prefix) &&
         s.substr(s.size() - suffix.size()) == suffix;
}

bool AllDigits(std::string_view s) {
  return !s.empty() && s.find_first_not_of("0123456789") == std::string_view::npos;
}

}  // namespace

bool IsTrainMetricsName(std::string_view file_name) {
  return HasPrefixAndSuffix(file_name, "metrics.rank", ".jsonl");
}

std::string TrainWeightsPath(const std::string& run_dir, int rank) {
  return Join(run_dir, absl::StrCat(kTrain, "/weights.rank", rank, ".json"));
}

std::string TrainTensorBoardDir(const std::string& run_dir, int rank) {
  return Join(run_dir, absl::StrCat(kTrain, "/", kTensorBoard, "/rank", rank));
}

std::string HangDumpPath(const std::string& run_dir, int rank) {
  return Join(run_dir, absl::StrCat(kHang, "/", kHangDumpPrefix, rank, ".json"));
}

std::string HangStacksPath(const std::string& run_dir, int rank) {
  return Join(run_dir, absl::StrCat(kHang, "/", kHangStacksPrefix, rank, ".txt"));
}

std::string RankLogDir(const std::string& run_dir, int rank) {
  return Join(run_dir, absl::StrCat("rank", rank));
}

bool IsHangDumpName(std::string_view file_name) {
  return HasPrefixAndSuffix(file_name, kHangDumpPrefix, ".json");
}

bool IsHangStacksName(std::string_view file_name) {
  return HasPrefixAndSuffix(file_name, kHangStacksPrefix, ".txt");
}

int RankFromFileName(std::string_view file_name) {
  const size_t at = file_name.find("rank");
  if (at == std::string_view::npos) return -1;
  const std::string_view rest = file_name.substr(at + 4);
  const std::string_view digits = rest.substr(0, rest.find('.'));
  if (!AllDigits(digits) || digits.size() > 9) return -1;
  int rank = 0;
  for (char c : digits) rank = rank * 10 + (c - '0');
  return rank;
}

std::string TrainConfigPath(const std::string& run_dir) {
  return Join(Join(run_dir, kTrain), kTrainConfigJson);
}

std::string TrainSummaryPath(const std::string& run_dir) {
  return Join(Join(run_dir, kTrain), kTrainSummaryJson);
}

std::string HangAnalysisPath(const std::string& run_dir) {
  return Join(Join(run_dir, kHang), kHangAnalysisJson);
}

std::string CheckpointsDir(const std::string& run_dir) { return Join(run_dir, kCheckpoints); }

std::string CheckpointDirName(int64_t step, bool anomaly) {
  return absl::StrCat(anomaly ? kAnomalyPrefix : "", kCheckpointStepPrefix, step);
}

std::string CheckpointStepDir(const std::string& dir, int64_t step) {
  return Join(dir, CheckpointDirName(step, false));
}

std::string AnomalyStepDir(const std::string& dir, int64_t step) {
  return Join(dir, CheckpointDirName(step, true));
}

bool IsCheckpointStepName(std::string_view name) {
  if (StartsWith(name, kAnomalyPrefix)) name.remove_prefix(sizeof(kAnomalyPrefix) - 1);
  if (!StartsWith(name, kCheckpointStepPrefix)) return false;
  return AllDigits(name.substr(sizeof(kCheckpointStepPrefix) - 1));
}

// report
std::string TrainMetricsPattern() { return absl::StrCat(kTrain, "/metrics.rank<R>.jsonl"); }

std::string HangDumpPattern() { return absl::StrCat(kHang, "/", kHangDumpPrefix, "<R>.json"); }

}  // namespace trainscope::run_dir
