// libFuzzer target for the reader of a torch.distributed.checkpoint entry's bytes
// (src/ckpt/dcp.h ReadDcpArchive / ReadDcpChunk): the torch.save zip FileSystemWriter stores
// per entry (central directory, zip64 records, local headers, data.pkl's
// _rebuild_tensor_v2 call, the storage member). `ckpt diff` runs it on every .distcp chunk.
// The input is one entry's bytes, written to a file the reader opens; the entry spans the
// whole file. Properties: no crash, out-of-bounds read or allocation beyond the input's
// size; a chunk it accepts lies inside the file. Seeds: fuzz/seeds/dcp_chunk (torch.save
// archives of small tensors written by the venv's torch 2.15).
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "ckpt/dcp.h"

namespace {

// One folder per process for the entry file (libFuzzer runs inputs one after another).
const std::string& FuzzDir() {
  static const std::string dir = [] {
    std::string tmpl = "/tmp/ts_dcp_chunk_fuzz_XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) std::abort();
    return tmpl;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& dir = FuzzDir();
  const std::string path = dir + "/entry.distcp";
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) std::abort();
  if (size > 0 && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
  trainscope::ckpt::DcpStorage s;
  s.file = "entry.distcp";
  s.offset = 0;
  s.length = size;
  s.chunk_offsets = {0};
  (void)trainscope::ckpt::ReadDcpArchive(dir, s);
  auto chunk = trainscope::ckpt::ReadDcpChunk(dir, s);
  if (chunk.ok() && (chunk->offset > size || chunk->bytes > size - chunk->offset)) std::abort();
  return 0;
}
