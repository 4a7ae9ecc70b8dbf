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

namespace trainscope::ckpt {

// Where one chunk (or one non-tensor entry) lies: storage_data's _StorageInfo.
struct DcpStorage {
  std::string file;  // relative_path, relative to the checkpoint folder
  uint64_t offset = 0, length = 0;
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
absl::StatusOr<DcpMetadata> ReadDcpMetadata(const std::string& path);

// The same from the file's bytes (`path` only names it in errors).
absl::StatusOr<DcpMetadata> ParseDcpMetadata(const std::string& bytes, const std::string& path);

}  // namespace trainscope::ckpt

#endif  // TRAINSCOPE_SRC_CKPT_DCP_H_
