// FakeOs: an in-memory Os for unit tests. Files, directories, environment, and canned
// results for child programs keyed by argv[0].
#ifndef TRAINSCOPE_CORE_FAKE_OS_H_
#define TRAINSCOPE_CORE_FAKE_OS_H_

#include <map>
#include <set>
#include <string>
#include <vector>

#include "trainscope/core/os.h"

namespace trainscope {

class FakeOs : public Os {
 public:
  // Adds a file (and its parent directories).
  void AddFile(const std::string& path, std::string contents);
  void SetEnv(const std::string& name, std::string value) { env_[name] = std::move(value); }
  // Any Run() of a program whose argv[0] (or its basename) equals `program` returns
  // `result`. Programs without a canned result are NotFound (absent tool).
  void AddProgram(const std::string& program, RunResult result);
  void SetMonotonicNs(int64_t ns) { mono_ns_ = ns; }
  // argv of every Run() call, in order.
  const std::vector<std::vector<std::string>>& runs() const { return runs_; }

  absl::StatusOr<std::string> ReadFile(const std::string& path) override;
  bool FileExists(const std::string& path) override;
  absl::StatusOr<std::vector<std::string>> ListDir(const std::string& path) override;
  bool GetEnv(const std::string& name, std::string* value) override;
  std::map<std::string, std::string> Environment() override { return env_; }
  absl::StatusOr<RunResult> Run(const std::vector<std::string>& argv,
                                const RunOptions& options) override;
  int64_t MonotonicNs() override { return mono_ns_; }
  int64_t WallUs() override { return 1700000000000000; }

 private:
  std::map<std::string, std::string> files_;
  std::set<std::string> dirs_{"/"};
  std::map<std::string, std::string> env_;
  std::map<std::string, RunResult> programs_;
  std::vector<std::vector<std::string>> runs_;
  int64_t mono_ns_ = 0;
};

}  // namespace trainscope

#endif  // TRAINSCOPE_CORE_FAKE_OS_H_
