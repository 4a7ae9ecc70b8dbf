// Reading a torch.distributed.checkpoint folder's `.metadata` (a Python pickle of DCP's
// dataclasses) with core/pickle.h: no libtorch, no Python. Module paths differ between
// torch versions (torch.distributed.checkpoint.metadata in 2.x,
// torch.distributed._shard.checkpoint.metadata in 1.13): classes are matched by their
// last name (TensorStorageMetadata, BytesStorageMetadata, MetadataIndex, _StorageInfo).
// Thread-safe.
#ifndef TRAINSCOPE_SRC_CKPT_DCP_H_
#define TRAINSCOPE_SRC_CKPT_DCP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainscope/core/os.h"

namespace trainscope::ckpt {

// Where one chunk (or one non-tensor entry) lies: storage_data's _StorageInfo.
struct DcpStorage {
  std::string file;  // relative_path, relative to the checkpoint folder
  uint64_t offset = 0, length = 0;
  std::vector<uint64_t> chunk_offsets;  // MetadataIndex.offset: the chunk's first element
                                        // in the global tensor; empty for a non-tensor
  bool transformed = false;  // transform_descriptors set (e.g. compressed by an extension)
};

// One entry of state_dict_metadata.
struct DcpEntry {
  std::string name;                 // the state dict key (FQN)
  bool is_tensor = true;            // false: BytesStorageMetadata (a pickled Python object)
  std::string dtype;                // "float32", ... as torch names it; "bytes" for non-tensors
  std::vector<uint64_t> shape;      // global shape
  int chunks = 0;                   // TensorStorageMetadata.chunks
  uint64_t chunk_elements = 0;      // sum over chunks of the product of their sizes
  std::vector<DcpStorage> storage;  // storage_data entries of this name, in pickle order
};

struct DcpMetadata {
  std::vector<DcpEntry> entries;  // in state_dict_metadata order
  bool has_storage_data = false;  // storage_data was a dict (FileSystemWriter's)
};

// Reads and interprets `path` (a .metadata file). Errors: NotFound "<path>: cannot open";
// InvalidArgument "<path>: byte N: OPCODE: ..." for a malformed pickle and "<path>: ..."
// naming the entry for one that is not DCP metadata.
absl::StatusOr<DcpMetadata> ReadDcpMetadata(const std::string& path, Os* os = Os::Default());

// The same from the file's bytes (`path` only names it in errors).
absl::StatusOr<DcpMetadata> ParseDcpMetadata(const std::string& bytes, const std::string& path);

// Whether `dtype` ("float32", as DcpEntry::dtype spells it) is one of torch's dtypes (2.15's
// list: str(x) for every torch.dtype): anything else in a .metadata is corruption.
bool IsTorchDtypeName(const std::string& dtype);

// FileSystemWriter stores each entry as the torch.save archive of the tensor (or of the
// Python object): an uncompressed zip inside [offset, offset + length) of the .distcp file.
struct DcpArchiveMember {
  std::string name;  // without the archive's top folder: "data.pkl", "data/0", "byteorder"
  uint64_t offset = 0, size = 0;  // absolute in the .distcp file
};

// The members of the archive in `s` (`dir` is the checkpoint folder), from the zip's
// central directory (zip64 included). Errors: those of reading the file (NotFound,
// DataLoss when it is shorter than the entry); InvalidArgument "<file>: bytes [A, B): ..."
// when the range is not an uncompressed zip; Unimplemented for a transformed entry.
absl::StatusOr<std::vector<DcpArchiveMember>> ReadDcpArchive(const std::string& dir,
                                                             const DcpStorage& s,
                                                             Os* os = Os::Default());

// The elements of one chunk, as torch.save laid them out: `bytes` bytes of `dtype` in
// row-major order from byte `offset` of `file`.
struct DcpChunkData {
  std::string file;             // path of the .distcp file
  std::string dtype;            // safetensors spelling ("F32", "BF16"), as ToDoubles takes it
  std::vector<uint64_t> shape;  // the chunk's sizes
  // The elements' strides when they are not row-major (a transposed or expanded tensor):
  // element (i0, i1, ...) is at i0 * stride[0] + i1 * stride[1] + ... from `offset`, and
  // `bytes` spans the last one. Empty: row-major, `bytes` = the elements' bytes in order.
  std::vector<uint64_t> stride;
  uint64_t offset = 0, bytes = 0;
};

// Reads data.pkl of the chunk's archive (torch._utils._rebuild_tensor_v2(storage,
// storage_offset, size, stride, ...)) and finds its storage member. Errors: those of
// ReadDcpArchive; InvalidArgument "<file>: bytes [A, B): ..." when the archive is not a
// torch.save of one tensor or its storage is shorter than the tensor; Unimplemented for
// what is not decoded here: a storage type other than the float, integer and bool ones,
// a big-endian archive. A strided layout is read (DcpChunkData::stride).
absl::StatusOr<DcpChunkData> ReadDcpChunk(const std::string& dir, const DcpStorage& s,
                                          Os* os = Os::Default());

}  // namespace trainscope::ckpt

#endif  // TRAINSCOPE_SRC_CKPT_DCP_H_
