#include "data/spill.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"
#include "trainscope/core/env_vars.h"
#include "trainscope/core/os.h"

namespace trainscope::data {
namespace {
absl::Status Errno(const std::string& what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}
}  // namespace

SpillWriter::~SpillWriter() {
  if (f_) std::fclose(f_);
}

void SpillWriter::Append(const void* p, size_t n) {
  buf_.append(static_cast<const char*>(p), n);
  if (buf_.size() >= kBuf) Flush();
}

void SpillWriter::Flush() {
  if (!buf_.empty() && !failed_ && std::fwrite(buf_.data(), 1, buf_.size(), f_) != buf_.size()) {
    failed_ = true;
  }
  buf_.clear();
}

absl::Status SpillWriter::Close() {
  if (!f_) return absl::OkStatus();
  Flush();
  const bool bad = std::fclose(f_) != 0 || failed_;
  f_ = nullptr;
  if (bad) return Errno(absl::StrCat(path_, ": cannot write temporary file (disk full?)"));
  return absl::OkStatus();
}

SpillReader::~SpillReader() { ::close(fd_); }

absl::Status SpillReader::ReadAt(uint64_t offset, void* p, size_t n) const {
  char* out = static_cast<char*>(p);
  while (n > 0) {
    ssize_t got = ::pread(fd_, out, n, static_cast<off_t>(offset));
    if (got <= 0) return Errno(absl::StrCat(path_, ": short read at byte ", offset));
    out += got;
    offset += got;
    n -= got;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<SpillDir>> SpillDir::Create(const std::string& parent) {
  std::string base = parent;
  if (base.empty()) {
    const char* t = std::getenv(envvar::kTmpDir);
    base = t && *t ? t : "/tmp";
  }
  // mkdtemp's job, with the name registered for removal on a signal before the directory
  // exists (a signal that comes between the two must not leave it behind). A name that is
  // taken (1 in 62^6) is registered for the microseconds until mkdir says EEXIST.
  static const char kChars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::random_device rd;
  for (int attempt = 0; attempt < 100; ++attempt) {
    std::string dir = base + "/trainscope-data.";
    for (int i = 0; i < 6; ++i) dir += kChars[rd() % (sizeof(kChars) - 1)];
    TempPathRegistration registration(dir, TempPathKind::kPrivateDir);
    if (::mkdir(dir.c_str(), 0700) == 0) {
      return std::unique_ptr<SpillDir>(new SpillDir(dir, std::move(registration)));
    }
    if (errno != EEXIST) break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(base, ": cannot create a temporary directory: ", std::strerror(errno)));
}

SpillDir::~SpillDir() {
  for (const auto& n : names_) ::unlink(Path(n).c_str());
  ::rmdir(dir_.c_str());
}

absl::StatusOr<std::unique_ptr<SpillWriter>> SpillDir::Writer(const std::string& name) {
  std::FILE* f = std::fopen(Path(name).c_str(), "wb");
  if (!f) return Errno(Path(name));
  names_.push_back(name);
  return std::make_unique<SpillWriter>(f, Path(name));
}

absl::StatusOr<std::unique_ptr<SpillReader>> SpillDir::Reader(const std::string& name) {
  int fd = ::open(Path(name).c_str(), O_RDONLY);
  if (fd < 0) return Errno(Path(name));
  return std::make_unique<SpillReader>(fd, Path(name));
}

absl::Status SpillDir::ReadAll(const std::string& name, std::vector<BandRecord>* out) {
  struct stat st;
  if (::stat(Path(name).c_str(), &st) != 0) return Errno(Path(name));
  out->resize(st.st_size / sizeof(BandRecord));
  if (out->empty()) return absl::OkStatus();
  auto r = Reader(name);
  if (!r.ok()) return r.status();
  return (*r)->ReadAt(0, out->data(), out->size() * sizeof(BandRecord));
}

void SpillDir::Remove(const std::string& name) { ::unlink(Path(name).c_str()); }

absl::StatusOr<std::unique_ptr<OutputFile>> OutputFile::Open(const std::string& path) {
  if (auto st = CheckOutputFile(path); !st.ok()) return st;
  // Through a symlink: the temporary file goes next to the link's target, so the rename
  // replaces the target (same file system) and the link stays.
  auto target = ResolveOutputPath(path);
  if (!target.ok()) return target.status();
  if (auto slash = target->rfind('/'); slash != std::string::npos && slash > 0) {
    auto st = MakeDirs(target->substr(0, slash));
    if (!st.ok()) return st;
  }
  std::string tmp = absl::StrCat(*target, ".tmp.", ::getpid());
  TempPathRegistration registration(tmp, TempPathKind::kFile);  // before the file exists
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": cannot write: ", std::strerror(errno)));
  }
  return std::unique_ptr<OutputFile>(
      new OutputFile(f, path, *target, tmp, std::move(registration)));
}

OutputFile::~OutputFile() {
  if (f_) std::fclose(f_);
  if (!committed_) ::unlink(tmp_.c_str());
}

absl::Status OutputFile::Write(std::string_view data) {
  if (std::fwrite(data.data(), 1, data.size(), f_) != data.size()) {
    return Errno(absl::StrCat(path_, ": write failed"));
  }
  return absl::OkStatus();
}

absl::Status OutputFile::Commit() {
  const bool bad = std::fclose(f_) != 0;
  f_ = nullptr;
  if (bad) return Errno(absl::StrCat(path_, ": write failed"));
  if (::rename(tmp_.c_str(), target_.c_str()) != 0)
    return Errno(absl::StrCat(path_, ": rename failed"));
  committed_ = true;
  registration_.Release();
  return absl::OkStatus();
}

void SortBandRecords(std::vector<BandRecord>* recs) {
  auto less = [](const BandRecord& x, const BandRecord& y) {
    return x.hash != y.hash ? x.hash < y.hash : x.doc < y.doc;
  };
  const size_t n = recs->size();
  if (n < 4096) {
    std::sort(recs->begin(), recs->end(), less);
    return;
  }
  int bits = 12;
  while ((size_t{1} << bits) < n && bits < 22) ++bits;
  const int shift = 64 - bits;
  std::vector<uint32_t> start((size_t{1} << bits) + 1, 0);
  for (const BandRecord& r : *recs) ++start[(r.hash >> shift) + 1];
  for (size_t b = 1; b < start.size(); ++b) start[b] += start[b - 1];
  std::vector<BandRecord> out(n);
  {
    std::vector<uint32_t> next(start.begin(), start.end() - 1);
    for (const BandRecord& r : *recs) out[next[r.hash >> shift]++] = r;
  }
  for (size_t b = 0; b + 1 < start.size(); ++b) {
    if (start[b + 1] - start[b] > 1) {
      std::sort(out.begin() + start[b], out.begin() + start[b + 1], less);
    }
  }
  recs->swap(out);
}

}  // namespace trainscope::data
