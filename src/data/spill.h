// Temporary files of a scan (LSH band records, MinHash fingerprints, verdict ids) and an
// output file that appears atomically. A SpillDir removes its files when destroyed; both
// register their temporary paths (core/paths.h) so that the CLI's signal handler removes
// them when a verb is interrupted.
#ifndef TRAINSCOPE_DATA_SPILL_H_
#define TRAINSCOPE_DATA_SPILL_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainscope/core/paths.h"

namespace trainscope::data {

struct __attribute__((packed)) BandRecord {
  uint64_t hash;
  uint32_t doc;
};
static_assert(sizeof(BandRecord) == 12, "packed band record");

// Sorts by (hash, doc), as std::sort with that order would. Band hashes are uniform, so a
// counting pass first scatters the records into ~n buckets by the hash's top bits, and
// each bucket (about one record) is then sorted on its own: a few times faster than a
// comparison sort, which was most of a scan's serial tail.
void SortBandRecords(std::vector<BandRecord>* recs);

// Buffered append-only file. Not thread-safe.
class SpillWriter {
 public:
  SpillWriter(std::FILE* f, std::string path) : f_(f), path_(std::move(path)) {
    buf_.reserve(kBuf);
  }
  ~SpillWriter();
  void Append(const void* p, size_t n);  // errors are reported by Close()
  absl::Status Close();

 private:
  // 64 KB: large enough for few write() calls, small enough that the 15 buffers of a
  // near-duplicate scan (one per LSH band, one for fingerprints) are filled within the first
  // ~5,000 documents. At 1 MB a band buffer (12 bytes per document) only filled after 87,000
  // documents, so fixed buffers looked like ~100 bytes of memory per document.
  static constexpr size_t kBuf = 64 << 10;
  void Flush();
  std::FILE* f_;
  const std::string path_;
  std::string buf_;
  bool failed_ = false;
};

class SpillReader {
 public:
  SpillReader(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  ~SpillReader();
  absl::Status ReadAt(uint64_t offset, void* p, size_t n) const;  // pread, exact

 private:
  const int fd_;
  const std::string path_;
};

class SpillDir {
 public:
  // Creates a private directory under `parent` ("" = $TMPDIR or /tmp).
  static absl::StatusOr<std::unique_ptr<SpillDir>> Create(const std::string& parent);
  ~SpillDir();
  absl::StatusOr<std::unique_ptr<SpillWriter>> Writer(const std::string& name);
  absl::StatusOr<std::unique_ptr<SpillReader>> Reader(const std::string& name);
  absl::Status ReadAll(const std::string& name, std::vector<BandRecord>* out);
  void Remove(const std::string& name);
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }

 private:
  SpillDir(std::string dir, TempPathRegistration registration)
      : dir_(std::move(dir)), registration_(std::move(registration)) {}
  const std::string dir_;
  TempPathRegistration registration_;  // released after the destructor removed the dir
  std::vector<std::string> names_;
};

// A file written to "<target>.tmp.<pid>" and renamed over the target by Commit(); removed
// when destroyed without Commit(). The target is `path` with symlinks followed
// (ResolveOutputPath): writing through a symlink replaces the file it points at and keeps
// the link. InvalidArgument when `path` is a directory or another non-regular file.
class OutputFile {
 public:
  static absl::StatusOr<std::unique_ptr<OutputFile>> Open(const std::string& path);
  ~OutputFile();
  absl::Status Write(std::string_view data);
  absl::Status Commit();
  std::FILE* file() { return f_; }

 private:
  OutputFile(std::FILE* f, std::string path, std::string target, std::string tmp,
             TempPathRegistration registration)
      : f_(f),
        path_(std::move(path)),
        target_(std::move(target)),
        tmp_(std::move(tmp)),
        registration_(std::move(registration)) {}
  std::FILE* f_;
  const std::string path_, target_, tmp_;  // as given, symlinks resolved, temporary
  TempPathRegistration registration_;
  bool committed_ = false;
};

}  // namespace trainscope::data

#endif  // TRAINSCOPE_DATA_SPILL_H_
