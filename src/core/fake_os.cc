#include "trainscope/core/fake_os.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace trainscope {

void FakeOs::AddFile(const std::string& path, std::string contents) {
  files_[path] = std::move(contents);
  for (size_t pos = path.find('/', 1); pos != std::string::npos; pos = path.find('/', pos + 1)) {
    dirs_.insert(path.substr(0, pos));
  }
}

void FakeOs::AddProgram(const std::string& program, RunResult result) {
  programs_[program] = std::move(result);
}

absl::StatusOr<std::string> FakeOs::ReadFile(const std::string& path) {
  auto it = files_.find(path);
  if (it == files_.end()) return absl::NotFoundError(absl::StrCat(path, ": No such file"));
  return it->second;
}

bool FakeOs::FileExists(const std::string& path) {
  return files_.count(path) > 0 || dirs_.count(path) > 0;
}

absl::StatusOr<std::vector<std::string>> FakeOs::ListDir(const std::string& path) {
  if (!dirs_.count(path)) return absl::NotFoundError(absl::StrCat(path, ": No such directory"));
  std::string prefix = path == "/" ? "/" : path + "/";
  std::vector<std::string> names;
  auto add = [&](const std::string& p) {
    if (p.size() <= prefix.size() || p.compare(0, prefix.size(), prefix) != 0) return;
    std::string rest = p.substr(prefix.size());
    if (rest.find('/') != std::string::npos) return;
    names.push_back(rest);
  };
  for (const auto& [p, unused] : files_) add(p);
  for (const auto& d : dirs_) add(d);
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

bool FakeOs::GetEnv(const std::string& name, std::string* value) {
  auto it = env_.find(name);
  if (it == env_.end()) return false;
  *value = it->second;
  return true;
}

absl::StatusOr<RunResult> FakeOs::Run(const std::vector<std::string>& argv,
                                      const RunOptions& options) {
  runs_.push_back(argv);
  if (argv.empty()) return absl::InvalidArgumentError("empty argv");
  auto it = programs_.find(argv[0]);
  if (it == programs_.end()) {
    std::string base = argv[0].substr(argv[0].rfind('/') + 1);
    it = programs_.find(base);
  }
  if (it == programs_.end()) return absl::NotFoundError(absl::StrCat(argv[0], ": not found"));
  return it->second;
}

}  // namespace trainscope
