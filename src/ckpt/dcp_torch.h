// ckpt::DcpMetadataLoader backed by libtorch's unpickler, for trainscope-torch only: ts_ckpt
// never links libtorch. Reads a torch.distributed.checkpoint `.metadata` pickle; every class
// it names (Metadata, TensorStorageMetadata, torch.Size, ...) becomes a plain record of its
// pickled state, from which tensor names, global shapes, dtypes and chunk counts are read.
// Errors: InvalidArgument naming the file (unreadable pickle, unexpected structure).
// Thread-safe.
#ifndef TRAINSCOPE_SRC_CKPT_DCP_TORCH_H_
#define TRAINSCOPE_SRC_CKPT_DCP_TORCH_H_

#include "trainscope/ckpt/inspect.h"

namespace trainscope::ckpt {

DcpMetadataLoader TorchDcpMetadataLoader();

}  // namespace trainscope::ckpt

#endif  // TRAINSCOPE_SRC_CKPT_DCP_TORCH_H_
