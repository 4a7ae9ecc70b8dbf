// A standalone torch.save file as a one-storage DCP chunk (trainscope/ckpt/torch_save.h).
#include "trainscope/ckpt/torch_save.h"

#include <sys/stat.h>

#include <utility>

#include "ckpt/dcp.h"
#include "trainscope/core/status.h"

namespace trainscope::ckpt {

absl::StatusOr<TorchSaveTensor> LocateTorchSaveTensor(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return absl::NotFoundError(path + ": cannot open");
  const size_t slash = path.rfind('/');
  DcpStorage s;
  s.file = slash == std::string::npos ? path : path.substr(slash + 1);
  s.length = static_cast<uint64_t>(st.st_size);
  TS_ASSIGN_OR_RETURN(DcpChunkData chunk,
                      ReadDcpChunk(slash == std::string::npos ? "." : path.substr(0, slash), s));
  TorchSaveTensor t;
  t.dtype = std::move(chunk.dtype);
  t.shape = std::move(chunk.shape);
  t.stride = std::move(chunk.stride);
  t.offset = chunk.offset;
  t.bytes = chunk.bytes;
  return t;
}

}  // namespace trainscope::ckpt
