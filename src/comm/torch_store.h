// TorchStoreClient: a libtorch-free client of PyTorch's c10d TCPStore (the store torchrun's
// elastic agent hosts on MASTER_ADDR:MASTER_PORT), speaking its wire protocol, for the few
// operations a rendezvous needs. Used by JoinWorld (join.h) under torchrun; the trainscope
// binary that runs `selftest comm` and `data scan` has no libtorch.
//
// The protocol (torch/csrc/distributed/c10d/TCPStore.cpp, TCPStoreBackend.cpp and
// TCPStoreLibUvBackend.cpp, both server backends; native byte order, little-endian on every
// platform torch ships): a request is a u8 query type and its fields, strings and byte
// vectors as u64 length + bytes, key lists as u64 count + strings. There is no framing and
// no authentication. A connection must begin with VALIDATE (0) + u32 0x3C85F7CE (no reply);
// the server ignores anything else until then. Then:
//   PING   13: u32 nonce                 -> u32 the same nonce
//   SET     1: key, value                -> (no reply)
//   GET     3: key                       -> value (only ask for a key known to exist)
//   ADD     4: key, i64 delta            -> i64 new value (the key holds decimal text)
//   CHECK   5: keys                      -> u8 0 READY (all present) | 1 NOT_READY
//   WAIT    6: keys                      -> u8 0 STOP_WAITING, once every key exists
//   CANCEL_WAIT 12 (after a WAIT)        -> u8 1 WAIT_CANCELED (after a STOP_WAITING that
//                                           was already on its way, if any)
// torch.distributed.TCPStore's methods prepend "/" to every key; so does this client, so a
// key means the same here and in Python (`store.get("trainscope/x")`).
#ifndef TRAINSCOPE_SRC_COMM_TORCH_STORE_H_
#define TRAINSCOPE_SRC_COMM_TORCH_STORE_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace trainscope::comm {

// Largest value GET accepts from the server (a rendezvous value is a few bytes).
inline constexpr uint64_t kMaxTorchStoreValueBytes = 64u << 20;

// Request encodings (exposed for tests of the wire format). Keys are given as the user sees
// them; the "/" is added here.
std::string EncodeTorchStoreValidate();
std::string EncodeTorchStorePing(uint32_t nonce);
std::string EncodeTorchStoreSet(std::string_view key, std::string_view value);
std::string EncodeTorchStoreGet(std::string_view key);
std::string EncodeTorchStoreAdd(std::string_view key, int64_t delta);
std::string EncodeTorchStoreCheck(const std::vector<std::string>& keys);
std::string EncodeTorchStoreWait(const std::vector<std::string>& keys);

// One connection to a TCPStore server. Thread-safe (requests are serialised). Every call
// ends within its timeout (a reply is awaited at most `io_timeout`, 30 s by default); after
// a call failed mid-reply the connection is unusable and every later call is Unavailable.
class TorchStoreClient {
 public:
  // Connects to host:port, retrying until `timeout` (the agent may start its store later),
  // validates and pings. Unavailable when nothing listens there within the timeout, or what
  // listens does not answer the ping like a TCPStore.
  static absl::StatusOr<std::unique_ptr<TorchStoreClient>> Connect(
      const std::string& host, int port, std::chrono::milliseconds timeout);
  ~TorchStoreClient();

  absl::Status Set(std::string_view key, std::string_view value);
  // Waits for `key` (up to `timeout`) and returns its value. DeadlineExceeded naming the key.
  absl::StatusOr<std::string> Get(std::string_view key, std::chrono::milliseconds timeout);
  // Waits until every key exists. DeadlineExceeded naming the keys after `timeout`.
  absl::Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  // True when every key exists (does not wait).
  absl::StatusOr<bool> Check(const std::vector<std::string>& keys);
  // Adds `delta` to the integer at `key` (absent: 0) and returns the new value.
  absl::StatusOr<int64_t> Add(std::string_view key, int64_t delta);

  const std::string& endpoint() const { return endpoint_; }
  void set_io_timeout(std::chrono::milliseconds t) { io_timeout_ = t; }

 private:
  TorchStoreClient(int fd, std::string endpoint) : fd_(fd), endpoint_(std::move(endpoint)) {}
  // Callers hold mu_.
  absl::Status SendLocked(const std::string& bytes);
  // Reads exactly n bytes, waiting until `deadline`. Unavailable (and the connection
  // marked broken) on a timeout or a closed connection.
  absl::Status RecvLocked(char* p, size_t n, std::chrono::steady_clock::time_point deadline,
                          const char* what);
  absl::Status WaitLocked(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  absl::Status Broken(const std::string& why);

  std::mutex mu_;
  int fd_;
  bool broken_ = false;  // guarded by mu_
  const std::string endpoint_;
  std::chrono::milliseconds io_timeout_{30000};
};

}  // namespace trainscope::comm

#endif  // TRAINSCOPE_SRC_COMM_TORCH_STORE_H_
