// TcpStore: the rendezvous key-value store (the role of c10d's TCPStore), libtorch-free.
// Rank 0 hosts a TcpStoreServer on master_port; every rank (rank 0 included) talks to it
// through a TcpStoreClient over one persistent TCP connection.
//
// Besides set/get/wait/add, the server knows which rank holds each connection (Hello) and
// so can tell who vanished: a connection that closes without Bye marks its rank dead,
// which is how a surviving rank names the missing one after a failed collective.
// It also checks that every rank agrees on the world size.
//
// Wire format (little-endian): request = u32 length, then u8 command and fields; strings
// are u32 length + bytes. Response = u32 length, u8 status (0 ok, 1 missing, 2 error),
// payload. One request in flight per connection.
#ifndef TRAINSCOPE_SRC_COMM_STORE_H_
#define TRAINSCOPE_SRC_COMM_STORE_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace trainscope::comm {

// Serves the store on a background thread. Thread-safe; the destructor stops it.
class TcpStoreServer {
 public:
  // Binds 0.0.0.0:port (port 0: any free port). Unavailable naming the port when it is
  // in use. `world_size` is the host rank's view, against which Hellos are checked.
  static absl::StatusOr<std::unique_ptr<TcpStoreServer>> Start(int port, int world_size);
  ~TcpStoreServer();

  int port() const { return port_; }
  // Blocks until every rank that said Hello has said Bye or disconnected, or `timeout`.
  void WaitForClientsToLeave(std::chrono::milliseconds timeout);

 private:
  TcpStoreServer(int listen_fd, int port, int world_size);
  void Serve();
  struct Conn;
  bool Handle(Conn& conn);  // false: close the connection

  // Constant after construction.
  const int listen_fd_;
  const int port_;
  const int world_size_;
  int wake_pipe_[2] = {-1, -1};
  std::thread thread_;
  std::atomic<bool> stop_{false};

  // Owned by the server thread.
  std::map<std::string, std::vector<char>> data_;
  std::vector<std::unique_ptr<Conn>> conns_;
  // Guarded by mu_ (read by WaitForClientsToLeave).
  std::mutex mu_;
  std::set<int> present_;  // ranks with an open, greeted connection
};

// One connection to a TcpStoreServer. Thread-safe (requests are serialised).
class TcpStoreClient {
 public:
  // Connects to host:port, retrying until `timeout` (the server may start later).
  static absl::StatusOr<std::unique_ptr<TcpStoreClient>> Connect(const std::string& host, int port,
                                                                 std::chrono::milliseconds timeout);
  ~TcpStoreClient();

  // Registers this connection as `rank` of `world_size`. InvalidArgument when the world
  // size disagrees with the host's, the rank is out of range or already taken.
  absl::Status Hello(int rank, int world_size);
  // Clean goodbye: the rank is not reported dead when the connection closes.
  absl::Status Bye();

  absl::Status Set(const std::string& key, const std::vector<char>& value);
  // Value of `key`, or std::nullopt when absent (does not wait).
  absl::StatusOr<std::optional<std::vector<char>>> Check(const std::string& key);
  // Waits until every key exists; DeadlineExceeded naming the first missing key.
  absl::Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  absl::StatusOr<std::vector<char>> Get(const std::string& key, std::chrono::milliseconds timeout);
  // Atomically adds `delta` to the integer at `key` (absent: 0); returns the new value.
  absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta);
  // Ranks whose connection closed without Bye, ascending.
  absl::StatusOr<std::vector<int>> DeadRanks();

  const std::string& endpoint() const { return endpoint_; }

 private:
  TcpStoreClient(int fd, std::string endpoint) : fd_(fd), endpoint_(std::move(endpoint)) {}
  absl::StatusOr<std::pair<uint8_t, std::vector<char>>> Call(const std::vector<char>& request);

  std::mutex mu_;
  int fd_;
  const std::string endpoint_;
};

// A rank's membership in the job's store: rank 0 hosts the server, every rank holds a
// greeted client. Used by the backends that rendezvous through the store (gloo, nccl).
struct StoreSession {
  std::unique_ptr<TcpStoreServer> server;  // rank 0 only
  std::unique_ptr<TcpStoreClient> client;
  std::chrono::milliseconds timeout{60000};
  // Says Bye; on rank 0 also waits (bounded) for the other ranks to leave before the
  // server closes, so that late ranks do not lose the store.
  ~StoreSession();
  // After op `seq` failed on `rank`: "rank 2 is gone (...)" when the store knows of dead
  // ranks; otherwise every failing rank posts "failed/<seq>/<rank>" and the ranks that do not
  // post within `wait` are named as the ones that never reached the op (stopped, stuck in
  // an earlier op). Empty when nothing can be said.
  std::string DescribeMissingRanks(int64_t seq, int rank, int world_size,
                                   std::chrono::milliseconds wait);
};

// Starts the server on rank 0 (at master_port), connects and greets. Errors: Unavailable
// (port in use, store unreachable), InvalidArgument (world sizes disagree, duplicate rank).
absl::StatusOr<std::unique_ptr<StoreSession>> JoinStore(const std::string& master_addr,
                                                        int master_port, int rank, int world_size,
                                                        std::chrono::milliseconds timeout);

}  // namespace trainscope::comm

#endif  // TRAINSCOPE_SRC_COMM_STORE_H_
