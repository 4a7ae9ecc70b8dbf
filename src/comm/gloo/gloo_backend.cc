// Gloo backend: gloo's TCP transport, full mesh, rendezvous through our TcpStore.
// Uses gloo's own algorithms (ring allreduce, allgather, broadcast, alltoall, barrier) and
// unbound buffers for send/recv, each with the communicator's timeout, exactly as
// PyTorch's ProcessGroupGloo drives them. Gloo has no reduce-scatter collective in its
// options API; like ProcessGroupGloo we compute it as an allreduce of the full buffer and
// keep our block.
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <exception>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "comm/backend.h"
#include "comm/half.h"
#include "comm/store.h"
#include "gloo/allgather.h"
#include "gloo/allreduce.h"
#include "gloo/alltoall.h"
#include "gloo/barrier.h"
#include "gloo/broadcast.h"
#include "gloo/common/error.h"
#include "gloo/math.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/prefix_store.h"
#include "gloo/rendezvous/store.h"
#include "gloo/transport/tcp/device.h"
#include "gloo/transport/unbound_buffer.h"
#include "gloo/types.h"

namespace trainscope::comm {
namespace {

// gloo::rendezvous::Store over our TcpStoreClient. Gloo expects exceptions.
class GlooStoreAdapter : public gloo::rendezvous::Store {
 public:
  GlooStoreAdapter(TcpStoreClient* client, std::chrono::milliseconds timeout)
      : client_(client), timeout_(timeout) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    Throw(client_->Set(key, data));
  }
  std::vector<char> get(const std::string& key) override {
    auto v = client_->Get(key, timeout_);
    Throw(v.status());
    return std::move(*v);
  }
  void wait(const std::vector<std::string>& keys) override { Throw(client_->Wait(keys, timeout_)); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& t) override {
    Throw(client_->Wait(keys, t));
  }

 private:
  static void Throw(const absl::Status& st) {
    if (!st.ok()) throw gloo::IoException(std::string(st.message()));
  }
  TcpStoreClient* client_;
  std::chrono::milliseconds timeout_;
};

absl::Status FromException(const std::exception& e) {
  std::string msg = e.what();
  if (absl::StrContains(msg, "Timed out") || absl::StrContains(msg, "timed out")) {
    return absl::DeadlineExceededError(msg);
  }
  return absl::UnavailableError(msg);
}

// Runs `fn`, turning gloo's exceptions into a Status.
template <typename Fn>
absl::Status Guard(Fn&& fn) {
  try {
    fn();
    return absl::OkStatus();
  } catch (const std::exception& e) {
    return FromException(e);
  }
}

using ReduceFn = std::function<void(void*, const void*, const void*, size_t)>;
using RawFn = void (*)(void*, const void*, const void*, size_t);

float AddF(float a, float b) { return a + b; }
float MaxF(float a, float b) { return a > b ? a : b; }
float MinF(float a, float b) { return a < b ? a : b; }

template <typename T>
ReduceFn GlooReduce(ReduceOp op) {
  switch (op) {
    case ReduceOp::kMax:
      return ReduceFn(static_cast<RawFn>(&gloo::max<T>));
    case ReduceOp::kMin:
      return ReduceFn(static_cast<RawFn>(&gloo::min<T>));
    case ReduceOp::kSum:
    default:
      return ReduceFn(static_cast<RawFn>(&gloo::sum<T>));
  }
}

ReduceFn BFloat16Reduce(ReduceOp op) {
  float (*f)(float, float) = op == ReduceOp::kMax ? MaxF : op == ReduceOp::kMin ? MinF : AddF;
  return [f](void* c, const void* a, const void* b, size_t n) {
    Reduce16<BFloat16ToFloat, FloatToBFloat16>(c, a, b, n, f);
  };
}

class GlooBackend : public Backend {
 public:
  GlooBackend(const CommOptions& options, std::unique_ptr<StoreSession> store,
              std::shared_ptr<gloo::rendezvous::Context> context,
              std::shared_ptr<gloo::transport::Device> device)
      : options_(options),
        store_(std::move(store)),
        device_(std::move(device)),
        context_(std::move(context)) {}
  ~GlooBackend() override {
    context_.reset();  // close pairs before leaving the store
    device_.reset();
    store_.reset();
  }

  const std::string& name() const override { return name_; }
  int rank() const override { return options_.rank; }
  int world_size() const override { return options_.world_size; }

  absl::Status AllReduce(void* buf, size_t count, DType dtype, ReduceOp op, uint32_t tag) override {
    return Guard([&] {
      gloo::AllreduceOptions opts(context_);
      opts.setTag(tag);
      opts.setTimeout(options_.timeout);
      switch (dtype) {
        case DType::kFloat32:
          opts.setOutput(static_cast<float*>(buf), count);
          opts.setReduceFunction(GlooReduce<float>(op));
          break;
        case DType::kFloat16:
          opts.setOutput(static_cast<gloo::float16*>(buf), count);
          opts.setReduceFunction(GlooReduce<gloo::float16>(op));
          break;
        case DType::kBFloat16:
          opts.setOutput(static_cast<uint16_t*>(buf), count);
          opts.setReduceFunction(BFloat16Reduce(op));
          break;
        case DType::kInt32:
          opts.setOutput(static_cast<int32_t*>(buf), count);
          opts.setReduceFunction(GlooReduce<int32_t>(op));
          break;
        case DType::kInt64:
          opts.setOutput(static_cast<int64_t*>(buf), count);
          opts.setReduceFunction(GlooReduce<int64_t>(op));
          break;
      }
      gloo::allreduce(opts);
    });
  }

  absl::Status AllGather(const void* send, void* recv, size_t count, DType dtype,
                         uint32_t tag) override {
    size_t bytes = count * DTypeSize(dtype);
    return Guard([&] {
      gloo::AllgatherOptions opts(context_);
      opts.setTag(tag);
      opts.setTimeout(options_.timeout);
      opts.setInput(static_cast<char*>(const_cast<void*>(send)), bytes);
      opts.setOutput(static_cast<char*>(recv), bytes * options_.world_size);
      gloo::allgather(opts);
    });
  }

  absl::Status ReduceScatter(const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                             uint32_t tag) override {
    size_t elem = DTypeSize(dtype);
    std::vector<char> tmp(static_cast<const char*>(send),
                          static_cast<const char*>(send) + count * elem * options_.world_size);
    absl::Status st = AllReduce(tmp.data(), count * options_.world_size, dtype, op, tag);
    if (!st.ok()) return st;
    std::memcpy(recv, tmp.data() + count * elem * options_.rank, count * elem);
    return absl::OkStatus();
  }

  absl::Status Broadcast(void* buf, size_t count, DType dtype, int root, uint32_t tag) override {
    return Guard([&] {
      gloo::BroadcastOptions opts(context_);
      opts.setTag(tag);
      opts.setTimeout(options_.timeout);
      opts.setRoot(root);
      opts.setOutput(static_cast<char*>(buf), count * DTypeSize(dtype));
      gloo::broadcast(opts);
    });
  }

  absl::Status AllToAll(const void* send, void* recv, size_t count, DType dtype,
                        uint32_t tag) override {
    size_t bytes = count * DTypeSize(dtype) * options_.world_size;
    return Guard([&] {
      gloo::AlltoallOptions opts(context_);
      opts.setTag(tag);
      opts.setTimeout(options_.timeout);
      opts.setInput(static_cast<char*>(const_cast<void*>(send)), bytes);
      opts.setOutput(static_cast<char*>(recv), bytes);
      gloo::alltoall(opts);
    });
  }

  absl::Status Barrier(uint32_t tag) override {
    return Guard([&] {
      gloo::BarrierOptions opts(context_);
      opts.setTag(tag);
      opts.setTimeout(options_.timeout);
      gloo::barrier(opts);
    });
  }

  absl::Status Send(const void* buf, size_t count, DType dtype, int dst, int tag) override {
    return Guard([&] {
      auto ub = context_->createUnboundBuffer(const_cast<void*>(buf), count * DTypeSize(dtype));
      ub->send(dst, static_cast<uint64_t>(static_cast<uint32_t>(tag)));
      if (!ub->waitSend(options_.timeout)) throw gloo::IoException("send aborted");
    });
  }

  absl::Status Recv(void* buf, size_t count, DType dtype, int src, int tag) override {
    return Guard([&] {
      auto ub = context_->createUnboundBuffer(buf, count * DTypeSize(dtype));
      ub->recv(src, static_cast<uint64_t>(static_cast<uint32_t>(tag)));
      if (!ub->waitRecv(options_.timeout)) throw gloo::IoException("recv aborted");
    });
  }

  std::string DescribeMissingRanks(int64_t seq, std::chrono::milliseconds wait) override {
    return store_->DescribeMissingRanks(seq, options_.rank, options_.world_size, wait);
  }

 private:
  const std::string name_ = "gloo";
  const CommOptions options_;
  std::unique_ptr<StoreSession> store_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::rendezvous::Context> context_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> CreateGlooBackend(const CommOptions& options) {
  auto store = JoinStore(options);
  if (!store.ok()) return store.status();
  try {
    gloo::transport::tcp::attr attr;
    if (!options.iface.empty()) {
      attr.iface = options.iface;
    } else {
      attr.hostname = LocalAddressToward(options.master_addr, options.master_port);
    }
    auto device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(options.rank, options.world_size);
    context->setTimeout(options.timeout);
    GlooStoreAdapter adapter((*store)->client.get(), options.timeout);
    gloo::rendezvous::PrefixStore prefixed("gloo", adapter);
    context->connectFullMesh(prefixed, device);
    return std::unique_ptr<Backend>(
        new GlooBackend(options, std::move(*store), std::move(context), std::move(device)));
  } catch (const std::exception& e) {
    std::string missing = (*store)->DescribeMissingRanks(-1, options.rank, options.world_size,
                                                         std::chrono::milliseconds(200));
    return absl::UnavailableError(absl::StrCat("gloo rendezvous failed on rank ", options.rank,
                                               ": ", e.what(),
                                               missing.empty() ? "" : "; " + missing));
  }
}

}  // namespace trainscope::comm
