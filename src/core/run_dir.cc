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

bool IsTrainMetricsName(std::string_view file_name) {
  constexpr std::string_view kPrefix = "metrics.rank", kSuffix = ".jsonl";
  return file_name.size() >= kPrefix.size() + kSuffix.size() &&
         file_name.substr(0, kPrefix.size()) == kPrefix &&
         file_name.substr(file_name.size() - kSuffix.size()) == kSuffix;
}

std::string TrainWeightsPath(const std::string& run_dir, int rank) {
  return Join(run_dir, absl::StrCat(kTrain, "/weights.rank", rank, ".json"));
}

std::string TrainTensorBoardDir(const std::string& run_dir, int rank) {
  return Join(run_dir, absl::StrCat(kTrain, "/", kTensorBoard, "/rank", rank));
}

std::string HangDumpPath(const std::string& run_dir, int rank) {
  return Join(run_dir, absl::StrCat(kHang, "/flight_recorder.rank", rank, ".json"));
}

std::string HangStacksPath(const std::string& run_dir, int rank) {
  return Join(run_dir, absl::StrCat(kHang, "/stacks.rank", rank, ".txt"));
}

std::string RankLogDir(const std::string& run_dir, int rank) {
  return Join(run_dir, absl::StrCat("rank", rank));
}

}  // namespace trainscope::run_dir
