// NCCL backend. Built when the CUDA toolkit's headers and NCCL are found; libcudart and
// libnccl are loaded with dlopen() on first use, so that one trainscope binary runs on
// machines without CUDA (the backend then reports Unavailable) and CPU-only test builds
// (AddressSanitizer included) never initialise the CUDA runtime.
//
// Rendezvous: rank 0 creates the ncclUniqueId and publishes it in our TCP store; every
// rank creates a non-blocking communicator (ncclCommInitRankConfig, blocking = 0) so that
// init and every op can be bounded: an op is enqueued on the backend's stream, then the
// host polls cudaStreamQuery and ncclCommGetAsyncError until it finishes, fails, or the
// deadline passes, when ncclCommAbort unblocks the GPU and the op returns DeadlineExceeded.
//
// Buffers: device memory, as the contract says. Host buffers (the self-test's) are staged
// through device scratch memory; the copies are part of the measured time.
// NCCL has no message tags: send/recv between two ranks match in issue order.
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <nccl.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/backend.h"
#include "comm/store.h"

#ifndef TS_NCCL_LIB_DIR
#define TS_NCCL_LIB_DIR ""
#endif
#ifndef TS_CUDART_LIB_DIR
#define TS_CUDART_LIB_DIR ""
#endif

namespace trainscope::comm {
namespace {

// The entry points we use, resolved once.
struct Api {
  cudaError_t (*GetDeviceCount)(int*);
  cudaError_t (*SetDevice)(int);
  cudaError_t (*StreamCreateWithFlags)(cudaStream_t*, unsigned int);
  cudaError_t (*StreamDestroy)(cudaStream_t);
  cudaError_t (*StreamQuery)(cudaStream_t);
  cudaError_t (*Malloc)(void**, size_t);
  cudaError_t (*Free)(void*);
  cudaError_t (*Memcpy)(void*, const void*, size_t, cudaMemcpyKind);
  cudaError_t (*PointerGetAttributes)(cudaPointerAttributes*, const void*);
  const char* (*GetErrorString)(cudaError_t);
  ncclResult_t (*GetUniqueId)(ncclUniqueId*);
  ncclResult_t (*CommInitRankConfig)(ncclComm_t*, int, ncclUniqueId, int, ncclConfig_t*);
  ncclResult_t (*CommGetAsyncError)(ncclComm_t, ncclResult_t*);
  ncclResult_t (*CommAbort)(ncclComm_t);
  ncclResult_t (*CommDestroy)(ncclComm_t);
  ncclResult_t (*AllReduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                            cudaStream_t);
  ncclResult_t (*AllGather)(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
  ncclResult_t (*ReduceScatter)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                                cudaStream_t);
  ncclResult_t (*Broadcast)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t,
                            cudaStream_t);
  ncclResult_t (*Send)(const void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*Recv)(void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*GroupStart)();
  ncclResult_t (*GroupEnd)();
  const char* (*GetErrorStringNccl)(ncclResult_t);
};

void* OpenFirst(const std::vector<std::string>& names, std::string* tried) {
  for (const std::string& n : names) {
    if (void* h = ::dlopen(n.c_str(), RTLD_NOW | RTLD_GLOBAL)) return h;
    *tried += (tried->empty() ? "" : ", ") + n;
  }
  return nullptr;
}

absl::StatusOr<const Api*> LoadApi() {
  static Api api;
  static absl::Status status = [] {
    std::string tried;
    std::string cudart_dir = TS_CUDART_LIB_DIR, nccl_dir = TS_NCCL_LIB_DIR;
    void* cudart = OpenFirst(
        {"libcudart.so", "libcudart.so.13", "libcudart.so.12", cudart_dir + "/libcudart.so"},
        &tried);
    if (cudart == nullptr) {
      return absl::UnavailableError("cannot load the CUDA runtime (tried " + tried + ")");
    }
    tried.clear();
    void* nccl = OpenFirst({"libnccl.so.2", "libnccl.so", nccl_dir + "/libnccl.so.2"}, &tried);
    if (nccl == nullptr) return absl::UnavailableError("cannot load NCCL (tried " + tried + ")");
    std::string missing;
    auto sym = [&](void* lib, const char* name, auto& fn) {
      void* p = ::dlsym(lib, name);
      if (p == nullptr) missing += std::string(missing.empty() ? "" : ", ") + name;
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
    };
    sym(cudart, "cudaGetDeviceCount", api.GetDeviceCount);
    sym(cudart, "cudaSetDevice", api.SetDevice);
    sym(cudart, "cudaStreamCreateWithFlags", api.StreamCreateWithFlags);
    sym(cudart, "cudaStreamDestroy", api.StreamDestroy);
    sym(cudart, "cudaStreamQuery", api.StreamQuery);
    sym(cudart, "cudaMalloc", api.Malloc);
    sym(cudart, "cudaFree", api.Free);
    sym(cudart, "cudaMemcpy", api.Memcpy);
    sym(cudart, "cudaPointerGetAttributes", api.PointerGetAttributes);
    sym(cudart, "cudaGetErrorString", api.GetErrorString);
    sym(nccl, "ncclGetUniqueId", api.GetUniqueId);
    sym(nccl, "ncclCommInitRankConfig", api.CommInitRankConfig);
    sym(nccl, "ncclCommGetAsyncError", api.CommGetAsyncError);
    sym(nccl, "ncclCommAbort", api.CommAbort);
    sym(nccl, "ncclCommDestroy", api.CommDestroy);
    sym(nccl, "ncclAllReduce", api.AllReduce);
    sym(nccl, "ncclAllGather", api.AllGather);
    sym(nccl, "ncclReduceScatter", api.ReduceScatter);
    sym(nccl, "ncclBroadcast", api.Broadcast);
    sym(nccl, "ncclSend", api.Send);
    sym(nccl, "ncclRecv", api.Recv);
    sym(nccl, "ncclGroupStart", api.GroupStart);
    sym(nccl, "ncclGroupEnd", api.GroupEnd);
    sym(nccl, "ncclGetErrorString", api.GetErrorStringNccl);
    if (!missing.empty()) {
      return absl::UnavailableError("CUDA/NCCL libraries lack: " + missing + " (too old?)");
    }
    return absl::OkStatus();
  }();
  if (!status.ok()) return status;
  return &api;
}

ncclDataType_t NcclType(DType d) {
  switch (d) {
    case DType::kFloat32:
      return ncclFloat32;
    case DType::kBFloat16:
      return ncclBfloat16;
    case DType::kFloat16:
      return ncclFloat16;
    case DType::kInt32:
      return ncclInt32;
    case DType::kInt64:
      return ncclInt64;
  }
  return ncclFloat32;
}

ncclRedOp_t NcclOp(ReduceOp op) {
  return op == ReduceOp::kMax ? ncclMax : op == ReduceOp::kMin ? ncclMin : ncclSum;
}

class NcclBackend : public Backend {
 public:
  NcclBackend(const Api* api, const CommOptions& o, std::unique_ptr<StoreSession> store,
              ncclComm_t comm, cudaStream_t stream)
      : api_(api), options_(o), store_(std::move(store)), comm_(comm), stream_(stream) {}
  ~NcclBackend() override {
    if (aborted_) {
      // Already aborted after a failure.
    } else {
      api_->CommDestroy(comm_);
    }
    for (void* p : scratch_)
      if (p != nullptr) api_->Free(p);
    api_->StreamDestroy(stream_);
  }

  const std::string& name() const override { return name_; }
  int rank() const override { return options_.rank; }
  int world_size() const override { return options_.world_size; }

  absl::Status AllReduce(void* buf, size_t count, DType d, ReduceOp op, uint32_t) override {
    size_t bytes = count * DTypeSize(d);
    return Staged({{buf, bytes, true, true}}, [&](void** dev) {
      return api_->AllReduce(dev[0], dev[0], count, NcclType(d), NcclOp(op), comm_, stream_);
    });
  }
  absl::Status AllGather(const void* send, void* recv, size_t count, DType d, uint32_t) override {
    size_t bytes = count * DTypeSize(d);
    return Staged({{const_cast<void*>(send), bytes, true, false},
                   {recv, bytes * options_.world_size, false, true}},
                  [&](void** dev) {
                    return api_->AllGather(dev[0], dev[1], count, NcclType(d), comm_, stream_);
                  });
  }
  absl::Status ReduceScatter(const void* send, void* recv, size_t count, DType d, ReduceOp op,
                             uint32_t) override {
    size_t bytes = count * DTypeSize(d);
    return Staged({{const_cast<void*>(send), bytes * options_.world_size, true, false},
                   {recv, bytes, false, true}},
                  [&](void** dev) {
                    return api_->ReduceScatter(dev[0], dev[1], count, NcclType(d), NcclOp(op),
                                               comm_, stream_);
                  });
  }
  absl::Status Broadcast(void* buf, size_t count, DType d, int root, uint32_t) override {
    return Staged({{buf, count * DTypeSize(d), true, true}}, [&](void** dev) {
      return api_->Broadcast(dev[0], dev[0], count, NcclType(d), root, comm_, stream_);
    });
  }
  absl::Status AllToAll(const void* send, void* recv, size_t count, DType d, uint32_t) override {
    const size_t block = count * DTypeSize(d);
    const int n = options_.world_size;
    return Staged(
        {{const_cast<void*>(send), block * n, true, false}, {recv, block * n, false, true}},
        [&](void** dev) {
          // All-to-all as one group of point-to-point transfers (as PyTorch does).
          ncclResult_t r = api_->GroupStart();
          for (int p = 0; p < n && r == ncclSuccess; ++p) {
            r = api_->Send(static_cast<char*>(dev[0]) + p * block, count, NcclType(d), p, comm_,
                           stream_);
            if (r == ncclSuccess) {
              r = api_->Recv(static_cast<char*>(dev[1]) + p * block, count, NcclType(d), p, comm_,
                             stream_);
            }
          }
          ncclResult_t end = api_->GroupEnd();
          return r != ncclSuccess ? r : end;
        });
  }
  absl::Status Barrier(uint32_t tag) override {
    int32_t one = 1;
    return AllReduce(&one, 1, DType::kInt32, ReduceOp::kSum, tag);
  }
  absl::Status Send(const void* buf, size_t count, DType d, int dst, int) override {
    return Staged({{const_cast<void*>(buf), count * DTypeSize(d), true, false}}, [&](void** dev) {
      return api_->Send(dev[0], count, NcclType(d), dst, comm_, stream_);
    });
  }
  absl::Status Recv(void* buf, size_t count, DType d, int src, int) override {
    return Staged({{buf, count * DTypeSize(d), false, true}}, [&](void** dev) {
      return api_->Recv(dev[0], count, NcclType(d), src, comm_, stream_);
    });
  }

  std::string DescribeMissingRanks(int64_t seq, std::chrono::milliseconds wait) override {
    return store_->DescribeMissingRanks(seq, options_.rank, options_.world_size, wait);
  }

 private:
  struct Arg {
    void* ptr;
    size_t bytes;
    bool in;   // copy host -> device before
    bool out;  // copy device -> host after
  };

  bool IsDevice(const void* p) {
    cudaPointerAttributes attr{};
    if (api_->PointerGetAttributes(&attr, p) != cudaSuccess) return false;
    return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
  }

  absl::Status Cuda(cudaError_t e, const char* what) {
    if (e == cudaSuccess) return absl::OkStatus();
    return absl::InternalError(absl::StrCat(what, ": ", api_->GetErrorString(e)));
  }

  // Stages host arguments through device scratch, enqueues, waits with the deadline.
  template <typename Fn>
  absl::Status Staged(std::vector<Arg> args, Fn enqueue) {
    if (aborted_) return absl::FailedPreconditionError("NCCL communicator was aborted");
    std::vector<void*> dev(args.size());
    for (size_t i = 0; i < args.size(); ++i) {
      if (args[i].bytes == 0 || IsDevice(args[i].ptr)) {
        dev[i] = args[i].ptr;
        continue;
      }
      if (scratch_.size() <= i) {
        scratch_.resize(i + 1, nullptr);
        scratch_bytes_.resize(i + 1, 0);
      }
      if (scratch_bytes_[i] < args[i].bytes) {
        if (scratch_[i] != nullptr) api_->Free(scratch_[i]);
        scratch_[i] = nullptr;
        if (auto st = Cuda(api_->Malloc(&scratch_[i], args[i].bytes), "cudaMalloc"); !st.ok())
          return st;
        scratch_bytes_[i] = args[i].bytes;
      }
      dev[i] = scratch_[i];
      if (args[i].in) {
        auto st = Cuda(api_->Memcpy(dev[i], args[i].ptr, args[i].bytes, cudaMemcpyHostToDevice),
                       "cudaMemcpy to device");
        if (!st.ok()) return st;
      }
    }
    ncclResult_t r = enqueue(dev.data());
    if (r != ncclSuccess && r != ncclInProgress) {
      return absl::InternalError(absl::StrCat("NCCL: ", api_->GetErrorStringNccl(r)));
    }
    if (auto st = WaitStream(); !st.ok()) return st;
    for (size_t i = 0; i < args.size(); ++i) {
      if (dev[i] != args[i].ptr && args[i].out) {
        auto st = Cuda(api_->Memcpy(args[i].ptr, dev[i], args[i].bytes, cudaMemcpyDeviceToHost),
                       "cudaMemcpy to host");
        if (!st.ok()) return st;
      }
    }
    return absl::OkStatus();
  }

  absl::Status WaitStream() {
    auto deadline = std::chrono::steady_clock::now() + options_.timeout;
    int spins = 0;
    while (true) {
      ncclResult_t async = ncclSuccess;
      api_->CommGetAsyncError(comm_, &async);
      if (async != ncclSuccess && async != ncclInProgress) {
        api_->CommAbort(comm_);
        aborted_ = true;
        return absl::UnavailableError(absl::StrCat("NCCL: ", api_->GetErrorStringNccl(async)));
      }
      if (async == ncclSuccess) {
        cudaError_t q = api_->StreamQuery(stream_);
        if (q == cudaSuccess) return absl::OkStatus();
        if (q != cudaErrorNotReady) return Cuda(q, "cudaStreamQuery");
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        api_->CommAbort(comm_);
        aborted_ = true;
        return absl::DeadlineExceededError("NCCL op timed out; communicator aborted");
      }
      if (++spins > 1000) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  const std::string name_ = "nccl";
  const Api* api_;
  const CommOptions options_;
  std::unique_ptr<StoreSession> store_;
  ncclComm_t comm_;
  cudaStream_t stream_;
  bool aborted_ = false;
  std::vector<void*> scratch_;
  std::vector<size_t> scratch_bytes_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> CreateNcclBackend(const CommOptions& options) {
  auto api_or = LoadApi();
  if (!api_or.ok()) return api_or.status();
  const Api* api = *api_or;
  int devices = 0;
  if (api->GetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    return absl::UnavailableError("no CUDA device is visible: the nccl backend needs a GPU");
  }
  if (api->SetDevice(options.local_rank % devices) != cudaSuccess) {
    return absl::UnavailableError(
        absl::StrCat("cudaSetDevice(", options.local_rank % devices, ") failed"));
  }
  auto store = JoinStore(options);
  if (!store.ok()) return store.status();
  ncclUniqueId id;
  if (options.rank == 0) {
    if (api->GetUniqueId(&id) != ncclSuccess) return absl::InternalError("ncclGetUniqueId failed");
    std::vector<char> v(reinterpret_cast<char*>(&id), reinterpret_cast<char*>(&id) + sizeof(id));
    if (auto st = (*store)->client->Set("nccl/id", v); !st.ok()) return st;
  } else {
    auto v = (*store)->client->Get("nccl/id", options.timeout);
    if (!v.ok()) return v.status();
    if (v->size() != sizeof(id)) return absl::InternalError("malformed ncclUniqueId in the store");
    std::memcpy(&id, v->data(), sizeof(id));
  }
  cudaStream_t stream;
  if (api->StreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) {
    return absl::InternalError("cudaStreamCreateWithFlags failed");
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm;
  ncclResult_t r = api->CommInitRankConfig(&comm, options.world_size, id, options.rank, &config);
  auto deadline = std::chrono::steady_clock::now() + options.timeout;
  while (r == ncclInProgress || r == ncclSuccess) {
    ncclResult_t state = ncclSuccess;
    api->CommGetAsyncError(comm, &state);
    if (state == ncclSuccess) break;
    if (state != ncclInProgress) {
      r = state;
      break;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      api->CommAbort(comm);
      api->StreamDestroy(stream);
      return absl::DeadlineExceededError(
          absl::StrCat("NCCL init did not finish within ", options.timeout.count(), " ms"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (r != ncclSuccess && r != ncclInProgress) {
    api->StreamDestroy(stream);
    return absl::UnavailableError(absl::StrCat("NCCL init failed: ", api->GetErrorStringNccl(r)));
  }
  return std::unique_ptr<Backend>(new NcclBackend(api, options, std::move(*store), comm, stream));
}

}  // namespace trainscope::comm
