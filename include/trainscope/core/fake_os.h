// FakeOs: an in-memory Os for unit tests. Files, directories, environment, and canned
// results for child programs keyed by argv[0].
#ifndef TRAINSCOPE_CORE_FAKE_OS_H_
#define TRAINSCOPE_CORE_FAKE_OS_H_

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "trainscope/core/os.h"

namespace trainscope {

class FakeOs : public Os {
 public:
  // Adds or replaces a file (and its parent directories). A replaced file gets a new inode.
  void AddFile(const std::string& path, std::string contents);
  // Appends to a file (adding it when absent), keeping its inode: a log that grows.
  void AppendToFile(const std::string& path, const std::string& bytes);
  // Adds an empty directory (and its parents).
  void AddDir(const std::string& path);
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
  // The file's bytes are shared: a file replaced while open keeps its old bytes for readers.
  absl::StatusOr<std::unique_ptr<SequentialFile>> NewSequentialFile(
      const std::string& path) override;
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path) override;
  absl::StatusOr<std::unique_ptr<FileBytesView>> MapFile(const std::string& path) override;
  // Modification time 0 (a replaced file has a new inode, an appended one a new size).
  absl::StatusOr<FileInfo> Stat(const std::string& path) override;
  std::map<std::string, std::string> Environment() override { return env_; }
  absl::StatusOr<RunResult> Run(const std::vector<std::string>& argv,
                                const RunOptions& options) override;
  int64_t MonotonicNs() override { return mono_ns_; }
  int64_t WallUs() override { return 1700000000000000; }

 private:
  struct Entry {
    std::shared_ptr<const std::string> bytes;
    uint64_t inode = 0;
  };
  // NotFound "<path>: No such file" (a directory is InvalidArgument "not a regular file").
  absl::StatusOr<Entry> Find(const std::string& path) const;

  std::map<std::string, Entry> files_;
  uint64_t next_inode_ = 1;
  std::set<std::string> dirs_{"/"};
  std::map<std::string, std::string> env_;
  std::map<std::string, RunResult> programs_;
  std::vector<std::vector<std::string>> runs_;
  int64_t mono_ns_ = 0;
};

}  // namespace trainscope

#endif  // TRAINSCOPE_CORE_FAKE_OS_H_
