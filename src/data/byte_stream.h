// Sequential byte streams over a file, optionally zstd or gzip compressed. Used by the
// corpus reader; not thread-safe (one reader thread owns a stream).
#ifndef TRAINSCOPE_DATA_BYTE_STREAM_H_
#define TRAINSCOPE_DATA_BYTE_STREAM_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "trainscope/data/reader.h"

namespace trainscope::data {

class ByteStream {
 public:
  virtual ~ByteStream() = default;
  // Reads up to `n` bytes. 0 at end of stream. DataLoss when a compressed stream is
  // truncated or corrupt (message says which; the bytes before it were delivered).
  virtual absl::StatusOr<size_t> Read(char* buf, size_t n) = 0;
  // Compressed bytes consumed so far (for progress).
  virtual uint64_t consumed() const = 0;
};

// Opens `path`. NotFound / PermissionDenied naming the file.
absl::StatusOr<std::unique_ptr<ByteStream>> OpenByteStream(const std::string& path,
                                                           InputFile::Compression compression);
// Opens `in`: the whole file as OpenByteStream does, or, for an uncompressed file with a
// byte range (InputFile::range_*), just [range_begin, range_end). DataLoss when the range's
// start cannot be reached.
absl::StatusOr<std::unique_ptr<ByteStream>> OpenInputStream(const InputFile& in);

}  // namespace trainscope::data

#endif  // TRAINSCOPE_DATA_BYTE_STREAM_H_
