// hang::PickleLoader backed by libtorch's unpickler (torch::jit::unpickle), for the
// libtorch binary (trainscope-torch) only: ts_hang itself never links libtorch.
//
// Reads what PyTorch's Flight Recorder writes (torch::jit::Pickler, protocol 2: dict, list,
// tuple, str, int, float, bool, None) and what Python's pickle.dumps writes for the same
// values at the protocols libtorch 1.13's unpickler knows (see docs/formats.md "Hang
// analysis"). Anything else (tensors, objects, unknown opcodes) is a one-line error.
// Thread-safe.
#ifndef TRAINSCOPE_HANG_INTERNAL_PICKLE_TORCH_H_
#define TRAINSCOPE_HANG_INTERNAL_PICKLE_TORCH_H_

#include "trainscope/hang/analyze.h"

namespace trainscope::hang {

PickleLoader TorchPickleLoader();

}  // namespace trainscope::hang

#endif  // TRAINSCOPE_HANG_INTERNAL_PICKLE_TORCH_H_
