// A standalone torch.save file as a one-storage DCP chunk (trainscope/ckpt/torch_save.h).
#include "trainscope/ckpt/torch_save.h"

#include <utility>

#include "ckpt/dcp.h"
#include "trainscope/core/status.h"

namespace trainscope::ckpt {

absl::StatusOr<TorchSaveTensor> LocateTorchSaveTensor(const std::string& path, Os* os) {
  absl::StatusOr<uint64_t> size = os->FileSize(path);
  if (!size.ok()) return absl::NotFoundError(path + ": cannot open");
  const size_t slash = path.rfind('/');
  DcpStorage s;
  s.file = slash == std::string::npos ? path : path.substr(slash + 1);
  s.length = *size;
  TS_ASSIGN_OR_RETURN(
      DcpChunkData chunk,
      ReadDcpChunk(slash == std::string::npos ? "." : path.substr(0, slash), s, os));
  TorchSaveTensor t;
  t.dtype = std::move(chunk.dtype);
  t.shape = std::move(chunk.shape);
  t.stride = std::move(chunk.stride);
  t.offset = chunk.offset;
  t.bytes = chunk.bytes;
  return t;
}

}  // namespace trainscope::ckpt
