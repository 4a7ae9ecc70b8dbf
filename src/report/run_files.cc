// RunFiles (run_files.h): what diagnose read of a run directory, kept for the report's parts
// so that they do not read it again.
#include "report/run_files.h"

#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "report/collect.h"
#include "report/metrics.h"
#include "trainscope/core/json_text.h"
#include "trainscope/core/os.h"
#include "trainscope/core/run_dir.h"

namespace trainscope::report {
namespace fs = std::filesystem;

namespace {

// Paths are compared lexically normal: diagnose names a file by the folders it walked, the
// parts by run_dir::Join ("run/./train" and "run/train" are one folder).
std::string RunFilesKey(const std::string& path) {
  return fs::path(path).lexically_normal().string();
}

// Moves the kept entry of `path` to *out (each is handed out once); false when none is kept.
template <typename T>
bool RunFilesHandOut(std::map<std::string, T>* kept, const std::string& path, T* out) {
  auto it = kept->find(RunFilesKey(path));
  if (it == kept->end()) return false;
  *out = std::move(it->second);
  kept->erase(it);
  return true;
}

}  // namespace

void RunFiles::Take(const std::string& path, std::string_view bytes, const nlohmann::json* doc,
                    MetricsCache* metrics) {
  const fs::path p = fs::path(path).lexically_normal();
  const std::string folder = p.parent_path().string(), name = p.filename().string();
  auto in = [&](const char* sub) { return folder == RunFilesKey(run_dir::Join(dir_, sub)); };
  if (in(run_dir::kTrain) && run_dir::IsTrainMetricsName(name)) {
    // Keyed as CollectMetrics lists it; its next Update() checks the file by dev and inode.
    const std::string file = run_dir::Join(run_dir::Join(dir_, run_dir::kTrain), name);
    MetricsCache::File& f = metrics->files.try_emplace(file, file, os_).first->second;
    if (f.reader.version() != 0) return;  // reads on incrementally
    const absl::StatusOr<FileInfo> st = os_->Stat(path);
    const int64_t parsed = f.reader.bytes_parsed(), full = f.reader.full_reads();
    const bool ok =
        f.reader.UpdateFromBytes(bytes, st.ok() ? st->device : 0, st.ok() ? st->inode : 0);
    metrics->bytes_parsed += f.reader.bytes_parsed() - parsed;
    metrics->full_reads += f.reader.full_reads() - full;
    f.taken = ok;
    taken_ += ok ? 1 : 0;
    return;
  }
  if (in(run_dir::kHang)) {
    bytes_[p.string()] = std::string(bytes);
    return;
  }
  if (doc == nullptr) return;
  const bool folder_doc = (in(run_dir::kData) || in(run_dir::kTrace) || in(run_dir::kCompare)) &&
                          absl::EndsWith(name, ".json") && !IsProfilerTraceName(name);
  if (folder_doc || p.string() == RunFilesKey(run_dir::Join(dir_, run_dir::kDoctorReportJson)) ||
      p.string() == RunFilesKey(run_dir::Join(dir_, run_dir::kFingerprint))) {
    docs_[p.string()] = *doc;
  }
}

void RunFiles::Clear() {
  bytes_.clear();
  docs_.clear();
}

absl::StatusOr<std::string> RunFiles::ReadFile(const std::string& path) {
  if (std::string out; RunFilesHandOut(&bytes_, path, &out)) {
    ++taken_;
    return out;
  }
  ++read_;
  return os_->ReadFile(path);
}

nlohmann::json RunFiles::ReadJson(const std::string& path, std::string* why) {
  if (nlohmann::json out; RunFilesHandOut(&docs_, path, &out)) {
    ++taken_;
    return out;
  }
  ++read_;
  absl::StatusOr<std::string> text = os_->ReadFile(path);
  if (!text.ok()) {
    *why = "cannot open";
    return nullptr;
  }
  nlohmann::json j;
  if (JsonTextError e; !ParseJsonText(*text, kJsonMaxDepth, &j, &e)) {
    *why = e.too_deep ? absl::StrCat("JSON nested deeper than ", kJsonMaxDepth, " at byte ", e.byte)
                      : absl::StrCat("not valid JSON at byte ", e.byte);
    return nullptr;
  }
  return j;
}

}  // namespace trainscope::report
