#include "data/byte_stream.h"

#include <zlib.h>
#include <zstd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"

namespace trainscope::data {
namespace {

constexpr size_t kInBufBytes = 1 << 20;

// `limit`: the most bytes it delivers (the rest of a byte range).
class FileStream : public ByteStream {
 public:
  explicit FileStream(std::FILE* f, uint64_t limit = UINT64_MAX) : f_(f), limit_(limit) {}
  ~FileStream() override { std::fclose(f_); }
  absl::StatusOr<size_t> Read(char* buf, size_t n) override {
    if (n > limit_ - consumed_) n = static_cast<size_t>(limit_ - consumed_);
    if (n == 0) return 0;
    size_t got = std::fread(buf, 1, n, f_);
    if (got == 0 && std::ferror(f_)) return absl::DataLossError(std::strerror(errno));
    consumed_ += got;
    return got;
  }
  uint64_t consumed() const override { return consumed_; }

 protected:
  std::FILE* f_;
  const uint64_t limit_;
  uint64_t consumed_ = 0;
};

// zstd: ZSTD_decompressStream over 1 MB input chunks. A stream that ends inside a frame
// is truncated (ZSTD_decompressStream's return value is the hint of bytes still needed).
class ZstdStream : public ByteStream {
 public:
  explicit ZstdStream(std::FILE* f) : f_(f), dctx_(ZSTD_createDCtx()), in_buf_(kInBufBytes) {}
  ~ZstdStream() override {
    ZSTD_freeDCtx(dctx_);
    std::fclose(f_);
  }
  absl::StatusOr<size_t> Read(char* buf, size_t n) override {
    ZSTD_outBuffer out{buf, n, 0};
    while (out.pos == 0) {
      if (in_.pos == in_.size) {
        size_t got = std::fread(in_buf_.data(), 1, in_buf_.size(), f_);
        consumed_ += got;
        if (got == 0) {
          if (std::ferror(f_)) return absl::DataLossError(std::strerror(errno));
          if (last_ret_ != 0) {
            return absl::DataLossError("truncated zstd stream (ends inside a frame)");
          }
          return 0;
        }
        in_ = ZSTD_inBuffer{in_buf_.data(), got, 0};
      }
      size_t ret = ZSTD_decompressStream(dctx_, &out, &in_);
      if (ZSTD_isError(ret)) {
        return absl::DataLossError(absl::StrCat("corrupt zstd stream: ", ZSTD_getErrorName(ret)));
      }
      last_ret_ = ret;
    }
    return out.pos;
  }
  uint64_t consumed() const override { return consumed_; }

 private:
  std::FILE* f_;
  ZSTD_DCtx* dctx_;
  std::vector<char> in_buf_;
  ZSTD_inBuffer in_{nullptr, 0, 0};
  size_t last_ret_ = 0;
  uint64_t consumed_ = 0;
};

// gzip (and concatenated gzip members) through zlib's inflate with automatic header
// detection (windowBits 15 + 32).
class GzipStream : public ByteStream {
 public:
  explicit GzipStream(std::FILE* f) : f_(f), in_buf_(kInBufBytes) {
    std::memset(&zs_, 0, sizeof(zs_));
    ok_ = inflateInit2(&zs_, 15 + 32) == Z_OK;
  }
  ~GzipStream() override {
    inflateEnd(&zs_);
    std::fclose(f_);
  }
  absl::StatusOr<size_t> Read(char* buf, size_t n) override {
    if (!ok_) return absl::InternalError("zlib initialisation failed");
    zs_.next_out = reinterpret_cast<Bytef*>(buf);
    zs_.avail_out = static_cast<uInt>(n);
    while (zs_.avail_out == n) {
      if (zs_.avail_in == 0) {
        size_t got = std::fread(in_buf_.data(), 1, in_buf_.size(), f_);
        consumed_ += got;
        if (got == 0) {
          if (std::ferror(f_)) return absl::DataLossError(std::strerror(errno));
          if (in_member_) return absl::DataLossError("truncated gzip stream");
          return 0;
        }
        zs_.next_in = reinterpret_cast<Bytef*>(in_buf_.data());
        zs_.avail_in = static_cast<uInt>(got);
      }
      in_member_ = true;
      int ret = inflate(&zs_, Z_NO_FLUSH);
      if (ret == Z_STREAM_END) {
        in_member_ = false;
        inflateReset(&zs_);  // a following member, if any
      } else if (ret != Z_OK && ret != Z_BUF_ERROR) {
        return absl::DataLossError(
            absl::StrCat("corrupt gzip stream: ", zs_.msg ? zs_.msg : "inflate error"));
      }
    }
    return n - zs_.avail_out;
  }
  uint64_t consumed() const override { return consumed_; }

 private:
  std::FILE* f_;
  z_stream zs_;
  bool ok_ = false;
  bool in_member_ = false;
  std::vector<char> in_buf_;
  uint64_t consumed_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ByteStream>> OpenByteStream(const std::string& path,
                                                           InputFile::Compression compression) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    const int err = errno;
    std::string msg = absl::StrCat(path, ": ", std::strerror(err));
    if (err == ENOENT) return absl::NotFoundError(msg);
    if (err == EACCES) return absl::PermissionDeniedError(msg);
    return absl::InvalidArgumentError(msg);
  }
  std::setvbuf(f, nullptr, _IONBF, 0);  // we read in MB chunks ourselves
  switch (compression) {
    case InputFile::kZstd:
      return std::unique_ptr<ByteStream>(new ZstdStream(f));
    case InputFile::kGzip:
      return std::unique_ptr<ByteStream>(new GzipStream(f));
    case InputFile::kNone:
      break;
  }
  return std::unique_ptr<ByteStream>(new FileStream(f));
}

absl::StatusOr<std::unique_ptr<ByteStream>> OpenInputStream(const InputFile& in) {
  if (in.range_end == 0 || in.compression != InputFile::kNone) {
    return OpenByteStream(in.path, in.compression);
  }
  std::FILE* f = std::fopen(in.path.c_str(), "rb");
  if (f == nullptr) return OpenByteStream(in.path, in.compression);  // its error
  if (fseeko(f, static_cast<off_t>(in.range_begin), SEEK_SET) != 0) {
    std::fclose(f);
    return absl::DataLossError(absl::StrCat(in.path, ": cannot seek to byte ", in.range_begin));
  }
  std::setvbuf(f, nullptr, _IONBF, 0);
  return std::unique_ptr<ByteStream>(
      new FileStream(f, in.range_end > in.range_begin ? in.range_end - in.range_begin : 0));
}

}  // namespace trainscope::data
