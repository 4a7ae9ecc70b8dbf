// The one safetensors header reader and dtype table: `data stats` (data/) and `ckpt
// inspect/verify/diff` (ckpt/) both parse through it, and each words its own messages from
// the structured HeaderError it returns.
// Layout (huggingface/safetensors): u64 little-endian header length N, N bytes of UTF-8 JSON
// {"<name>": {"dtype", "shape", "data_offsets": [begin, end)}, "__metadata__": {str: str}},
// then the data section; offsets are relative to byte 8+N. The rules follow the reference
// reader (Metadata::validate): every entry is checked field by field, and the entries, sorted
// by offset, must tile the data section exactly.
// Pure functions and constant tables, thread-safe; nothing here aborts on bad input.
#ifndef TRAINSCOPE_CORE_SAFETENSORS_H_
#define TRAINSCOPE_CORE_SAFETENSORS_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "trainscope/core/json_text.h"

namespace trainscope::safetensors {

// The format's own limit on N (decimal 100 MB).
inline constexpr uint64_t kMaxHeaderBytes = 100'000'000;

// One dtype of the format.
struct DType {
  const char* name;   // the format's spelling: "F32", "BF16", "F8_E4M3"
  int bits;           // element size in bits (F4: 4, F6_*: 6)
  char kind;          // 'f' F32/F64, 'h' F16, 'b' BF16, 'i' signed, 'u' unsigned, '?' BOOL,
                      // 0: size known, values not decoded here
  const char* numpy;  // numpy's spelling ("float32", "bfloat16", "bool"); the format's
                      // spelling for the kinds numpy has no name for
};

// The entry of `name` in the table, or null for a dtype this build does not know (its size
// is then not checked). The table lives for the whole program.
const DType* FindDType(std::string_view name);

// One tensor of a header.
struct Entry {
  std::string name;
  std::string dtype;            // as written
  const DType* info = nullptr;  // FindDType(dtype): null when unknown
  std::vector<uint64_t> shape;
  uint64_t count = 0;           // elements (the product of shape; meaningless when that
                                // overflows, which only count_unknown_dtypes=false lets by)
  uint64_t begin = 0, end = 0;  // data_offsets: [begin, end) relative to the data section
};

struct Header {
  uint64_t header_bytes = 0;                    // N
  uint64_t data_start = 0;                      // 8 + N
  std::vector<Entry> tensors;                   // in name order
  std::map<std::string, std::string> metadata;  // __metadata__
};

// What is wrong with a file, in the order the reader checks it.
enum class HeaderProblem {
  kNone,
  kTooShort,           // the file is shorter than the 8-byte length
  kLengthOverLimit,    // N > kMaxHeaderBytes
  kLengthPastEnd,      // 8 + N > file size
  kJson,               // the header text is not JSON under core/json_text.h's policy: `json`
  kNotObject,          // the header is not a JSON object
  kMetadataNotObject,  // __metadata__ is not an object
  kMetadataNotString,  // __metadata__'s value of `key` is not a string
  kEntryNotObject,     // a tensor's entry is not an object
  kFieldMissing,       // `field` ("dtype", "shape", "data_offsets") is missing
  kFieldType,          // `field` is not a string / an array / [begin, end] of two unsigned
  kDimension,          // shape's `dimension` is not a non-negative integer
  kOffsetsReversed,    // data_offsets end before they begin
  kOffsetsPastEnd,     // data_offsets end past the data section
  kCountOverflow,      // the element count overflows 64 bits
  kBytesOverflow,      // the size in bits overflows 64 bits (known dtypes)
  kPartialBytes,       // the size is not a whole number of bytes (known dtypes)
  kSizeMismatch,       // dtype x shape needs `want_bytes`, data_offsets span another size
  kOverlap,            // `tensor` begins before `other` (the tensor before it) ends
  kGap,                // bytes [at, tensor.begin) of the data section belong to no tensor
  kTrailing,           // the tensors end at `at`, before the end of the data section
};

// A structured error: the problem and what a message needs to name it. Fields beyond the
// ones a problem names keep what was known when it was found.
struct HeaderError {
  HeaderProblem problem = HeaderProblem::kNone;
  uint64_t byte = 0;  // file offset of the problem, where it has one (length,
                      // JSON, not an object: 0 or 8 + the JSON's byte; trailing)
  uint64_t file_size = 0;
  uint64_t header_bytes = 0;  // N, once read
  uint64_t data_len = 0;      // bytes after the header, once known
  JsonTextError json;         // kJson
  std::string key;            // kMetadataNotString
  std::string field;          // kFieldMissing, kFieldType
  std::string found;          // the JSON found where it was wrong: "a string", "an array",
                              // "a negative number", "a fractional number"
  size_t dimension = 0;       // kDimension
  Entry tensor;               // the entry at fault, as far as it was read
  Entry other;                // kOverlap: the tensor before it
  uint64_t at = 0;            // kGap, kTrailing: where the tensors before end (relative)
  uint64_t want_bytes = 0;    // kSizeMismatch
};

// The product of `shape` in *count; false when it overflows 64 bits.
bool ElementCount(const std::vector<uint64_t>& shape, uint64_t* count);
// The bytes of `count` elements of `dtype` in *bytes: kNone, or kBytesOverflow when the size
// in bits overflows 64 bits, kPartialBytes when it is not a whole number of bytes (F4, F6).
HeaderProblem ByteSize(const DType& dtype, uint64_t count, uint64_t* bytes);

// The words every caller uses for kCountOverflow and kBytesOverflow ("the element count
// overflows 64 bits"); "" for the other problems, which each caller words itself.
const char* OverflowText(HeaderProblem problem);

struct ParseOptions {
  // An element count that overflows 64 bits is an error for every dtype (the data reader);
  // false: only for known dtypes, whose byte size is checked (the checkpoint reader).
  bool count_unknown_dtypes = true;
};

// Parses and validates the header text (the N bytes after the length) of a file of
// `file_size` bytes. True with *out filled, or false with *error filled.
bool ParseHeader(std::string_view json_text, uint64_t file_size, const ParseOptions& options,
                 Header* out, HeaderError* error);

// Exactly `n` bytes at `offset` of the file into `buf`.
using ReadAtFn = absl::FunctionRef<absl::Status(uint64_t offset, size_t n, char* buf)>;

// A header read: `error.problem` is kNone when `header` is valid.
struct ReadResult {
  Header header;
  HeaderError error;
  bool ok() const { return error.problem == HeaderProblem::kNone; }
};

// Reads the length and the header of a file of `file_size` bytes through `read_at` and calls
// ParseHeader. Returns the status of a failed `read_at` as it is; a file that breaks the
// format is an OK status whose result carries the error. Blocks as `read_at` does.
absl::StatusOr<ReadResult> ReadHeader(uint64_t file_size, ReadAtFn read_at,
                                      const ParseOptions& options);

}  // namespace trainscope::safetensors

#endif  // TRAINSCOPE_CORE_SAFETENSORS_H_
