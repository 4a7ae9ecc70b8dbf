// One tensor saved by torch.save (PyTorch's zip archive: data.pkl naming
// torch._utils._rebuild_tensor_v2(storage, offset, size, stride) and data/<key>, the storage),
// located without Python or libtorch: the bytes of its elements inside the file. The reader of
// msprobe's tensor files (compare) and of DCP chunks (ckpt) share it.
// Thread-safety: pure functions of the file system.
#ifndef TRAINSCOPE_CKPT_TORCH_SAVE_H_
#define TRAINSCOPE_CKPT_TORCH_SAVE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainscope/core/os.h"

namespace trainscope::ckpt {

struct TorchSaveTensor {
  std::string dtype;            // safetensors spelling ("F32", "BF16"), as ToDoubles takes it
  std::vector<uint64_t> shape;  // sizes
  // Element strides when not row-major (a transposed, expanded or sliced view): element
  // (i0, i1, ...) is at i0 * stride[0] + ... from `offset`; `bytes` spans up to the last one.
  // Empty: row-major, `bytes` = the elements' bytes in order.
  std::vector<uint64_t> stride;
  uint64_t offset = 0, bytes = 0;  // in the file
};

// The tensor of the torch.save file at `path`. Errors: NotFound (no file); InvalidArgument
// naming the file and byte range (not a torch.save zip of one tensor, storage too short);
// Unimplemented (a storage type not decoded, a big-endian archive). Read through `os`.
absl::StatusOr<TorchSaveTensor> LocateTorchSaveTensor(const std::string& path,
                                                      Os* os = Os::Default());

}  // namespace trainscope::ckpt

#endif  // TRAINSCOPE_CKPT_TORCH_SAVE_H_
