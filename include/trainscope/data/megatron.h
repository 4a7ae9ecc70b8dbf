// Megatron-LM indexed datasets (.bin/.idx), per megatron/core/datasets/indexed_dataset.py:
//   .idx: "MMIDIDX\0\0", u64 version 1, u8 dtype code, u64 sequence count N, u64 document
//         count D (= documents + 1), int32 lengths[N], int64 byte pointers[N],
//         int64 document_indices[D] (0, ..., N), [int8 modes[N] when multimodal]
//   .bin: the raw tokens, no header.
// All integers little-endian; the int64 arrays start unaligned (read with memcpy).
#ifndef TRAINSCOPE_DATA_MEGATRON_H_
#define TRAINSCOPE_DATA_MEGATRON_H_

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace trainscope::data {

// Megatron's DType codes.
enum class MegatronDType : uint8_t {
  kUint8 = 1,
  kInt8 = 2,
  kInt16 = 3,
  kInt32 = 4,
  kInt64 = 5,
  kFloat64 = 6,
  kFloat32 = 7,
  kUint16 = 8,
};
// Bytes per item; 0 for an unknown code.
size_t MegatronItemSize(uint8_t code);
// uint16 when vocab_size < 65500, else int32 (DType.optimal_dtype).
MegatronDType MegatronOptimalDType(int64_t vocab_size);

struct MegatronIndex {
  uint8_t dtype_code = 0;
  std::vector<int32_t> lengths;   // tokens per sequence
  std::vector<int64_t> pointers;  // byte offsets into .bin
  std::vector<int64_t> doc_idx;   // sequence index where each document starts; last = N
  bool multimodal = false;
  size_t num_documents() const { return doc_idx.empty() ? 0 : doc_idx.size() - 1; }
};

// "<prefix>.idx" / "<prefix>.bin" from a path with either extension or none.
std::string MegatronPrefix(const std::string& path);

// Reads and validates "<prefix>.idx" against "<prefix>.bin" (magic, version, dtype, file
// sizes, monotone pointers consistent with lengths, document indices). DataLoss /
// InvalidArgument naming the file and the byte offset of the first inconsistency; the
// header's sequence and document counts are checked against the file size before any
// allocation. NotFound for a missing file; InvalidArgument when either is not a regular
// file (a device, a FIFO: neither is opened).
absl::StatusOr<MegatronIndex> ReadMegatronIndex(const std::string& prefix);

// Writes "<prefix>.idx" for sequences of `lengths` tokens stored back to back in .bin
// (atomically; a symlink is written through: its target is replaced, the link stays).
absl::Status WriteMegatronIndex(const std::string& prefix, MegatronDType dtype,
                                const std::vector<int32_t>& lengths,
                                const std::vector<int64_t>& doc_idx);

// Reads sequence i of an opened dataset as int64 tokens. `bin` is the open .bin file.
absl::Status ReadMegatronSequence(std::FILE* bin, const MegatronIndex& index, size_t i,
                                  std::vector<int64_t>* tokens);

}  // namespace trainscope::data

#endif  // TRAINSCOPE_DATA_MEGATRON_H_
