#include "trainscope/core/fake_os.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace trainscope {

namespace {

class FakeSequentialFile : public SequentialFile {
 public:
  explicit FakeSequentialFile(std::shared_ptr<const std::string> bytes)
      : bytes_(std::move(bytes)) {}
  absl::Status Read(size_t n, std::string* out) override {
    const size_t k = std::min(n, bytes_->size() - at_);
    out->assign(*bytes_, at_, k);
    at_ += k;
    return absl::OkStatus();
  }

 private:
  const std::shared_ptr<const std::string> bytes_;
  size_t at_ = 0;
};

class FakeRandomAccessFile : public RandomAccessFile {
 public:
  FakeRandomAccessFile(std::string path, std::shared_ptr<const std::string> bytes, uint64_t inode)
      : path_(std::move(path)), bytes_(std::move(bytes)), info_{bytes_->size(), 1, inode} {}
  const FileInfo& info() const override { return info_; }
  absl::Status Read(uint64_t offset, size_t n, std::string* out) const override {
    if (offset >= bytes_->size()) {
      out->clear();
    } else {
      out->assign(*bytes_, offset, std::min<uint64_t>(n, bytes_->size() - offset));
    }
    return absl::OkStatus();
  }
  absl::Status ReadExactly(uint64_t offset, size_t n, char* buf) const override {
    if (offset > bytes_->size() || n > bytes_->size() - offset) {
      return absl::DataLossError(absl::StrCat(path_, ": byte ",
                                              std::max<uint64_t>(offset, bytes_->size()),
                                              ": the file ends early (truncated?)"));
    }
    bytes_->copy(buf, n, offset);
    return absl::OkStatus();
  }

 private:
  const std::string path_;
  const std::shared_ptr<const std::string> bytes_;
  const FileInfo info_;
};

class FakeBytesView : public FileBytesView {
 public:
  explicit FakeBytesView(std::shared_ptr<const std::string> bytes) : bytes_(std::move(bytes)) {}
  std::string_view data() const override { return *bytes_; }

 private:
  const std::shared_ptr<const std::string> bytes_;
};

}  // namespace

void FakeOs::AddFile(const std::string& path, std::string contents) {
  files_[path] = {std::make_shared<const std::string>(std::move(contents)), next_inode_++};
  for (size_t pos = path.find('/', 1); pos != std::string::npos; pos = path.find('/', pos + 1)) {
    dirs_.insert(path.substr(0, pos));
  }
}

void FakeOs::AppendToFile(const std::string& path, const std::string& bytes) {
  auto it = files_.find(path);
  if (it == files_.end()) return AddFile(path, bytes);
  it->second.bytes = std::make_shared<const std::string>(*it->second.bytes + bytes);
}

void FakeOs::AddDir(const std::string& path) {
  for (size_t pos = path.find('/', 1); pos != std::string::npos; pos = path.find('/', pos + 1)) {
    dirs_.insert(path.substr(0, pos));
  }
  dirs_.insert(path);
}

absl::StatusOr<FakeOs::Entry> FakeOs::Find(const std::string& path) const {
  auto it = files_.find(path);
  if (it != files_.end()) return it->second;
  if (dirs_.count(path)) return absl::InvalidArgumentError(path + ": not a regular file");
  return absl::NotFoundError(absl::StrCat(path, ": No such file"));
}

absl::StatusOr<std::unique_ptr<SequentialFile>> FakeOs::NewSequentialFile(const std::string& path) {
  absl::StatusOr<Entry> e = Find(path);
  if (!e.ok()) return e.status();
  return std::make_unique<FakeSequentialFile>(e->bytes);
}

absl::StatusOr<std::unique_ptr<RandomAccessFile>> FakeOs::NewRandomAccessFile(
    const std::string& path) {
  absl::StatusOr<Entry> e = Find(path);
  if (!e.ok()) return e.status();
  return std::make_unique<FakeRandomAccessFile>(path, e->bytes, e->inode);
}

absl::StatusOr<std::unique_ptr<FileBytesView>> FakeOs::MapFile(const std::string& path) {
  absl::StatusOr<Entry> e = Find(path);
  if (!e.ok()) return e.status();
  return std::make_unique<FakeBytesView>(e->bytes);
}

absl::StatusOr<FileInfo> FakeOs::Stat(const std::string& path) {
  if (dirs_.count(path)) {
    FileInfo info;
    info.device = 1;
    info.is_directory = true;
    return info;
  }
  absl::StatusOr<Entry> e = Find(path);
  if (!e.ok()) return e.status();
  FileInfo info{e->bytes->size(), 1, e->inode};
  info.is_regular = true;
  return info;
}

void FakeOs::AddProgram(const std::string& program, RunResult result) {
  programs_[program] = std::move(result);
}

absl::StatusOr<std::string> FakeOs::ReadFile(const std::string& path) {
  auto it = files_.find(path);
  if (it == files_.end()) return absl::NotFoundError(absl::StrCat(path, ": No such file"));
  return *it->second.bytes;
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
