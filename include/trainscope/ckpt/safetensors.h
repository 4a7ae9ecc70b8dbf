// safetensors: header parsing, validation and encoding, and per-tensor statistics.
// Layout (huggingface/safetensors): u64 little-endian header length N, N bytes of UTF-8 JSON
// {"<name>": {"dtype", "shape", "data_offsets": [begin, end)}, "__metadata__": {str: str}},
// then the data section; offsets are relative to byte 8+N. The header is read and validated
// by the one shared reader and dtype table (core/safetensors.h); this is ckpt's view of it,
// with absolute offsets and ckpt's wording of its errors. Pure functions, thread-safe;
// nothing here aborts on bad input: every error is a Status whose message names the file.
#ifndef TRAINSCOPE_CKPT_SAFETENSORS_H_
#define TRAINSCOPE_CKPT_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "trainscope/core/os.h"
#include "trainscope/core/safetensors.h"

namespace trainscope::ckpt {

// The format's own limit on N (decimal 100 MB).
inline constexpr uint64_t kMaxHeaderBytes = safetensors::kMaxHeaderBytes;

// Element size of a safetensors dtype string in bits (safetensors::FindDType); 0 for a
// dtype this build does not know (its size is then not checked, and no statistics are computed).
int DTypeBits(std::string_view dtype);
// True for dtypes whose values ComputeStats decodes (F64 F32 F16 BF16, integers, BOOL).
bool DTypeDecodable(std::string_view dtype);

struct TensorEntry {
  std::string name, dtype;
  std::vector<uint64_t> shape;
  uint64_t begin = 0, end = 0;  // absolute file offsets, [begin, end)
  uint64_t bytes() const { return end - begin; }
};

struct Header {
  uint64_t header_bytes = 0;                    // N
  uint64_t data_start = 0;                      // 8 + N
  std::vector<TensorEntry> tensors;             // in name order
  std::map<std::string, std::string> metadata;  // __metadata__
};

// Parses and validates a header: JSON object, field types, dtype x shape = bytes (known
// dtypes), offsets inside the data section, no overlap, and no gap or trailing bytes (the
// reference reader's rules). `json_text` is the N header bytes; `file_size` the whole file.
// Errors: InvalidArgument / DataLoss "<path>: <what>".
absl::StatusOr<Header> ParseHeader(const std::string& path, std::string_view json_text,
                                   uint64_t file_size);
// Reads the first 8+N bytes of `path` and calls ParseHeader. Errors: NotFound/PermissionDenied
// when unreadable, DataLoss when shorter than its header, InvalidArgument when malformed.
// The file is read through `os`.
absl::StatusOr<Header> ReadHeader(const std::string& path, Os* os = Os::Default());

// A tensor to encode: the caller keeps `data` alive during the call.
struct TensorView {
  std::string name, dtype;
  std::vector<uint64_t> shape;
  const void* data = nullptr;
  uint64_t bytes = 0;
};
// The 8-byte length plus JSON header (space-padded to a multiple of 8) for `tensors` laid
// out in the given order. Errors: InvalidArgument when a dtype is unknown or dtype x shape
// does not match `bytes`, or a name repeats.
absl::StatusOr<std::string> EncodeHeader(const std::vector<TensorView>& tensors,
                                         const std::map<std::string, std::string>& metadata);

struct TensorStats {
  uint64_t count = 0;       // elements
  uint64_t nonfinite = 0;   // NaN and +-Inf (floating dtypes only)
  double l2 = 0;            // over finite values
  double min = 0, max = 0;  // over finite values; both 0 when there are none
  bool decoded = false;     // false: dtype not decodable, only `count` is set
};
// Accumulates statistics over consecutive chunks of one tensor (chunks hold whole elements).
class StatsAccumulator {
 public:
  explicit StatsAccumulator(std::string_view dtype);
  void Add(const char* data, uint64_t bytes);
  TensorStats Finish() const;

 private:
  std::string dtype_;
  TensorStats s_;
  double sum_sq_ = 0;
  bool any_finite_ = false;
};

// Converts `bytes` of `dtype` to doubles (little endian); false when not decodable.
bool ToDoubles(std::string_view dtype, const char* data, uint64_t bytes, std::vector<double>* out);

}  // namespace trainscope::ckpt

#endif  // TRAINSCOPE_CKPT_SAFETENSORS_H_
