// Private to the report module: the files of one run directory as the report's parts read
// them, so that each file is read once per collection. Diagnose runs first and reads every
// file of the run (diagnose::Options::on_file hands each one here while it holds it); the
// parts then take what it read: a metrics file's bytes are parsed at once into the rank's
// reader (MetricsCache; a metrics file can be hundreds of MB, so its bytes are not kept), the
// files of hang/ are kept as bytes and the JSON documents the parts read (data/, trace/,
// compare/, the doctor report, the fingerprint) as diagnose parsed them. A file diagnose did
// not read (it did not run in this collection, stopped early, or did not parse it) is read
// here, through the Os given (ReportOptions::os).
// Thread-compatible: one thread at a time.
#ifndef TRAINSCOPE_REPORT_RUN_FILES_H_
#define TRAINSCOPE_REPORT_RUN_FILES_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "trainscope/core/os.h"

namespace trainscope::report {

struct MetricsCache;

class RunFiles {
 public:
  // `os` (not owned) outlives the RunFiles.
  RunFiles(std::string dir, Os* os) : dir_(std::move(dir)), os_(os) {}

  // diagnose's on_file for this run directory: keeps what a part reads (above) and drops the
  // rest. A metrics file goes to its reader in `metrics` only when that reader has read
  // nothing yet (a collector's later collections read on from where they stopped).
  void Take(const std::string& path, std::string_view bytes, const nlohmann::json* doc,
            MetricsCache* metrics);
  // Forgets what was taken (the end of a collection).
  void Clear();

  // A file's bytes: as diagnose read them, else os->ReadFile's (and its errors).
  absl::StatusOr<std::string> ReadFile(const std::string& path);
  // A JSON document (core/json_text.h, kJsonMaxDepth): as diagnose parsed it (handed out once),
  // else read and parsed here; null with *why set ("cannot open", "not valid JSON at byte N")
  // when it cannot be.
  nlohmann::json ReadJson(const std::string& path, std::string* why);

  // Files the parts took from diagnose (metrics files included), and files they read here.
  int64_t taken() const { return taken_; }
  int64_t read() const { return read_; }

 private:
  const std::string dir_;
  Os* const os_;
  std::map<std::string, std::string> bytes_;    // by lexically normal path
  std::map<std::string, nlohmann::json> docs_;  // by lexically normal path
  int64_t taken_ = 0, read_ = 0;
};

}  // namespace trainscope::report

#endif  // TRAINSCOPE_REPORT_RUN_FILES_H_
