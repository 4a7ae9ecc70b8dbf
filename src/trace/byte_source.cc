// The byte sources of the Chrome-trace reader (chrome_reader.h): a file through an Os (plain,
// or gzip inflated with zlib on the chunks the Os gives), read ahead on a thread for gzip, and
// memory.
#include <zlib.h>

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "trace/chrome_reader.h"
#include "trainscope/core/os.h"

namespace trainscope::trace::internal {
namespace {

// The text of an Os error for "<name>: byte N: <text>": its message without the leading
// "<path>: " (the reader names the file itself), as strerror alone was before.
std::string ErrorText(const absl::Status& s, const std::string& path) {
  absl::string_view m = s.message();
  const std::string prefix = path + ": ";
  if (absl::StartsWith(m, prefix)) m.remove_prefix(prefix.size());
  return std::string(m);
}

// A plain file from a SequentialFile, the bytes already read from it (`head`, for the gzip
// magic check) first, then its read error (`after_head`) if reading the head failed. The
// file's chunks are copied out of a reused buffer of kChunkBytes, which stays in cache.
class SequentialSource : public ByteSource {
 public:
  SequentialSource(std::string path, std::unique_ptr<SequentialFile> file, std::string head,
                   absl::Status after_head, int64_t size)
      : path_(std::move(path)),
        file_(std::move(file)),
        head_(std::move(head)),
        after_head_(std::move(after_head)),
        size_(size) {}
  int64_t Read(char* dst, size_t n) override {
    if (head_off_ < head_.size()) {
      const size_t k = std::min(n, head_.size() - head_off_);
      memcpy(dst, head_.data() + head_off_, k);
      head_off_ += k;
      return static_cast<int64_t>(k);
    }
    if (!after_head_.ok()) {
      err_ = ErrorText(after_head_, path_);
      return -1;
    }
    if (absl::Status s = file_->Read(std::min(n, kChunkBytes), &chunk_); !s.ok()) {
      err_ = ErrorText(s, path_);
      return -1;
    }
    memcpy(dst, chunk_.data(), chunk_.size());
    return static_cast<int64_t>(chunk_.size());
  }
  std::string error() const override { return err_; }
  int64_t size_hint() const override { return size_; }

 private:
  static constexpr size_t kChunkBytes = 256 << 10;
  const std::string path_;
  const std::unique_ptr<SequentialFile> file_;
  const std::string head_;
  const absl::Status after_head_;
  const int64_t size_;
  size_t head_off_ = 0;
  std::string chunk_;
  std::string err_;
};

// A gzip file from a SequentialFile: zlib's inflate on 1 MiB chunks of it, straight into the
// reader's buffer. As zlib's gzread did before (the reader used gzdopen): members that follow
// one another are one stream; bytes after a member that do not start another are ignored; a
// file that ends inside a member ends the data there (the reader then reports the trace as
// truncated); corrupt data (a bad CRC) is an error, after the data before it (so its message
// names the byte where the good data ends; gzread dropped the data of the failing call and
// named the descriptor: "byte 0: <fd:3>: incorrect data check").
class InflateSource : public ByteSource {
 public:
  InflateSource(std::string path, std::unique_ptr<SequentialFile> file, std::string head)
      : path_(std::move(path)), file_(std::move(file)), in_(std::move(head)) {
    z_.next_in = reinterpret_cast<Bytef*>(in_.data());
    z_.avail_in = static_cast<uInt>(in_.size());
    if (inflateInit2(&z_, 15 + 16) != Z_OK) {  // 15: the largest window; +16: gzip only
      failed_ = true;
      err_ = "cannot start gzip decompression";
    } else {
      init_ = true;
    }
  }
  ~InflateSource() override {
    if (init_) inflateEnd(&z_);
  }
  int64_t Read(char* dst, size_t n) override {
    if (!failed_ && !done_) Inflate(dst, std::min(n, size_t{1} << 30));
    const size_t produced = got_;
    got_ = 0;
    if (produced > 0) return static_cast<int64_t>(produced);
    return failed_ ? -1 : 0;
  }
  std::string error() const override { return err_; }

 private:
  static constexpr size_t kChunkBytes = 1 << 20;
  // Inflates into [dst, dst + n) until it is full, the data ends or an error; got_ = bytes.
  void Inflate(char* dst, size_t n) {
    z_.next_out = reinterpret_cast<Bytef*>(dst);
    z_.avail_out = static_cast<uInt>(n);
    while (z_.avail_out > 0) {
      if (!in_eof_ && (z_.avail_in == 0 || (member_end_ && z_.avail_in < 2)) && !Refill()) break;
      if (member_end_) {
        if (z_.avail_in < 2 || z_.next_in[0] != 0x1f || z_.next_in[1] != 0x8b) {
          done_ = true;  // the end, or bytes after the last member (ignored)
          break;
        }
        inflateReset(&z_);
        member_end_ = false;
      }
      if (z_.avail_in == 0) {  // the file ends inside a member
        done_ = true;
        break;
      }
      const int ret = inflate(&z_, Z_NO_FLUSH);
      if (ret == Z_STREAM_END) {
        member_end_ = true;
      } else if (ret != Z_OK && ret != Z_BUF_ERROR) {
        failed_ = true;
        err_ = z_.msg ? z_.msg : "compressed data error";
        break;
      }
    }
    got_ = n - z_.avail_out;
  }
  // The next chunk of the file after the bytes not yet inflated; false (failed_) on an error.
  bool Refill() {
    std::string rest(reinterpret_cast<const char*>(z_.next_in), z_.avail_in);
    if (absl::Status s = file_->Read(kChunkBytes, &in_); !s.ok()) {
      failed_ = true;
      err_ = ErrorText(s, path_);
      return false;
    }
    if (in_.empty()) in_eof_ = true;
    if (!rest.empty()) in_.insert(0, rest);
    z_.next_in = reinterpret_cast<Bytef*>(in_.data());
    z_.avail_in = static_cast<uInt>(in_.size());
    return true;
  }

  const std::string path_;
  const std::unique_ptr<SequentialFile> file_;
  std::string in_;  // compressed bytes; z_.next_in points into it
  z_stream z_{};
  bool init_ = false, in_eof_ = false, member_end_ = false, done_ = false, failed_ = false;
  size_t got_ = 0;
  std::string err_;
};

// Runs another source's reads on a thread of its own, up to `depth` blocks ahead of the
// reader, so that decompression (gzip's inflate and CRC) overlaps the parsing of the window
// before (the reader asks for a whole window at a time, so the queue holds more than one).
// Blocks change hands by moving buffers. Data before an error or the end comes first, then
// the error (or 0), as the inner source would give them.
class PrefetchSource : public ByteSource {
 public:
  PrefetchSource(std::unique_ptr<ByteSource> inner, size_t block, size_t depth)
      : inner_(std::move(inner)), block_(block), depth_(depth), size_(inner_->size_hint()) {
    thread_ = std::thread([this] { Produce(); });
  }
  ~PrefetchSource() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  int64_t Read(char* dst, size_t n) override {
    size_t done = 0;
    while (done < n) {
      if (off_ == cur_.size()) {
        std::unique_lock<std::mutex> lock(mu_);
        if (!cur_.empty()) spare_.push_back(std::move(cur_));
        cur_.clear();
        off_ = 0;
        cv_.wait(lock, [this] { return !ready_.empty() || finished_; });
        if (ready_.empty()) {  // the inner source ended (or failed) after what was delivered
          if (done > 0) return static_cast<int64_t>(done);
          if (failed_) {
            err_ = inner_error_;
            return -1;
          }
          return 0;
        }
        cur_ = std::move(ready_.front());
        ready_.pop_front();
        lock.unlock();
        cv_.notify_all();
      }
      const size_t k = std::min(n - done, cur_.size() - off_);
      memcpy(dst + done, cur_.data() + off_, k);
      off_ += k;
      done += k;
    }
    return static_cast<int64_t>(done);
  }
  std::string error() const override { return err_; }
  int64_t size_hint() const override { return size_; }

 private:
  void Produce() {
    for (;;) {
      std::vector<char> buf;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return ready_.size() < depth_ || stop_; });
        if (stop_) return;
        if (!spare_.empty()) {
          buf = std::move(spare_.back());
          spare_.pop_back();
        }
      }
      buf.resize(block_);
      size_t len = 0;
      bool end = false, failed = false;
      while (len < block_) {
        const int64_t r = inner_->Read(buf.data() + len, block_ - len);
        if (r <= 0) {
          end = true;
          failed = r < 0;
          break;
        }
        len += static_cast<size_t>(r);
      }
      buf.resize(len);
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (len > 0) ready_.push_back(std::move(buf));
        if (end) {
          finished_ = true;
          failed_ = failed;
          if (failed) inner_error_ = inner_->error();
        }
      }
      cv_.notify_all();
      if (end) return;
    }
  }

  const std::unique_ptr<ByteSource> inner_;
  const size_t block_, depth_;
  const int64_t size_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  // Guarded by mu_.
  std::deque<std::vector<char>> ready_;   // filled blocks, in order
  std::vector<std::vector<char>> spare_;  // emptied blocks to fill again
  bool finished_ = false, failed_ = false, stop_ = false;
  std::string inner_error_;
  // The reader's side.
  std::vector<char> cur_;
  size_t off_ = 0;
  std::string err_;
};

class MemSource : public ByteSource {
 public:
  explicit MemSource(std::string_view d) : d_(d) {}
  int64_t Read(char* dst, size_t n) override {
    n = std::min(n, d_.size() - off_);
    memcpy(dst, d_.data() + off_, n);
    off_ += n;
    return static_cast<int64_t>(n);
  }
  int64_t size_hint() const override { return static_cast<int64_t>(d_.size()); }

 private:
  std::string_view d_;
  size_t off_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ByteSource>> OpenByteSource(const std::string& path, Os* os) {
  absl::StatusOr<std::unique_ptr<SequentialFile>> file = os->NewSequentialFile(path);
  if (!file.ok()) {
    if (absl::IsNotFound(file.status()))
      return absl::NotFoundError(absl::StrCat(path, ": no such file"));
    return absl::PermissionDeniedError(file.status().message());
  }
  // The first bytes, for the gzip magic (1f 8b); they are read again from `head`.
  std::string head, more;
  absl::Status after_head;
  while (head.size() < 2) {  // more than one read only from a pipe
    after_head = (*file)->Read(256 << 10, &more);
    if (!after_head.ok() || more.empty()) break;
    if (head.empty()) {
      head.swap(more);
    } else {
      head += more;
    }
  }
  if (head.size() >= 2 && static_cast<unsigned char>(head[0]) == 0x1f &&
      static_cast<unsigned char>(head[1]) == 0x8b) {
    return std::unique_ptr<ByteSource>(new PrefetchSource(
        std::make_unique<InflateSource>(path, *std::move(file), std::move(head)), 1 << 20, 8));
  }
  absl::StatusOr<uint64_t> size = os->FileSize(path);
  return std::unique_ptr<ByteSource>(
      new SequentialSource(path, *std::move(file), std::move(head), std::move(after_head),
                           size.ok() ? static_cast<int64_t>(*size) : 0));
}

std::unique_ptr<ByteSource> MemoryByteSource(std::string_view data) {
  return std::make_unique<MemSource>(data);
}

}  // namespace trainscope::trace::internal
