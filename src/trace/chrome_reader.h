// Private: the streaming Chrome-trace reader behind ReadRankTrace / ParseChromeTrace.
#ifndef TRAINSCOPE_SRC_TRACE_CHROME_READER_H_
#define TRAINSCOPE_SRC_TRACE_CHROME_READER_H_

#include <cstdint>
#include <cstdio>
#include <string>

#include "absl/status/status.h"
#include "trainscope/core/os.h"
#include "trainscope/trace/trace.h"

namespace trainscope::trace::internal {

// A stream of bytes (a plain file, a gzip file, or memory).
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  // Reads up to n bytes; 0 at the end; -1 on an I/O error (message in error()).
  virtual int64_t Read(char* dst, size_t n) = 0;
  virtual std::string error() const { return "read error"; }
  // Bytes in the underlying file when known (progress), else 0.
  virtual int64_t size_hint() const { return 0; }
};

// Opens `path` through `os` (gzip detected by its magic bytes and inflated with zlib, on a
// thread of its own that reads ahead). NotFound "<path>: no such file" / PermissionDenied.
// The sources are in byte_source.cc.
absl::StatusOr<std::unique_ptr<ByteSource>> OpenByteSource(const std::string& path,
                                                           Os* os = Os::Default());
std::unique_ptr<ByteSource> MemoryByteSource(std::string_view data);

// Reads a whole Chrome trace (object form with "traceEvents" or a bare list) from `src` into
// `out` (events, names, rank from distributedInfo, stats). `name` prefixes messages.
// InvalidArgument when the data is not a Chrome trace at all.
absl::Status ReadChromeTrace(ByteSource* src, const std::string& name, const ReadOptions& options,
                             RankTrace* out);

// The "schema" of a PyTorch execution trace (ExecutionTraceObserver's JSON, the *_et.json HTA
// reads beside a Kineto trace: an object with "schema" and "nodes" and no "traceEvents"),
// sniffed from the first 64 KB of `path` (plain or gzip, read through `os`); "" when it is not
// one or cannot be read. An execution trace holds operators without times, so it is skipped,
// not analysed.
std::string ExecutionTraceSchema(const std::string& path, Os* os = Os::Default());

// Marks device events that have no category by their process (torch_npu trace_view.json:
// "Ascend Hardware", "HCCL", "Communication" processes) and classifies device kinds.
void ClassifyDeviceEvents(RankTrace* trace);

}  // namespace trainscope::trace::internal

#endif  // TRAINSCOPE_SRC_TRACE_CHROME_READER_H_
