// TcpStore: the rendezvous key-value store (the role of c10d's TCPStore), libtorch-free.
// Rank 0 hosts a TcpStoreServer on master_port; every rank (rank 0 included) talks to it
// through a TcpStoreClient over one persistent TCP connection.
//
// Besides set/get/wait/add, the server knows which rank holds each connection (Hello) and
// so can tell who vanished: a connection that closes without Bye marks its rank dead,
// which is how a surviving rank names the missing one after a failed collective.
// It also checks that every rank agrees on the world size.
//
// Security: the server listens on one address only (127.0.0.1 for a single-node job, the
// master address otherwise; never 0.0.0.0), and the first message of every connection
// must be Auth carrying the job token (TRAINSCOPE_JOB_TOKEN, set by `trainscope launch`;
// empty when the ranks were started some other way). A connection whose first message is
// not an Auth with the right token (compared in constant time) is answered with an error
// and closed before any of its requests touches the store.
//
// Wire format (little-endian): request = u32 length, then the frame: u8 op and its fields;
// strings are u32 length + bytes; a frame has no trailing bytes. Response = u32 length,
// u8 status (0 ok, 1 missing, 2 error), payload. One request in flight per connection.
//   Auth  = 7: string token                 Hello = 1: i32 rank, i32 world_size
//   Bye   = 2                               Set   = 3: string key, string value
//   Check = 4: string key                   Add   = 5: string key, i64 delta
//   Dead  = 6
// Limits: a request frame is at most kMaxStoreFrameBytes (before Auth: kMaxAuthFrameBytes);
// a length prefix beyond the cap, a truncated or malformed frame, or an unknown op closes
// the connection without reading (or allocating) the claimed size; the server counts each
// refusal (TcpStoreServer::stats) and reports the first of each kind through its log hook.
#ifndef TRAINSCOPE_SRC_COMM_STORE_H_
#define TRAINSCOPE_SRC_COMM_STORE_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "trainscope/comm/comm.h"

namespace trainscope::comm {

// Largest request frame the server accepts once a connection is authenticated (64 MiB:
// rendezvous values are addresses, a few KiB even for thousands of ranks).
inline constexpr uint32_t kMaxStoreFrameBytes = 64u << 20;
// Largest frame before Auth succeeded: an unauthenticated peer cannot make the server
// buffer more than this.
inline constexpr uint32_t kMaxAuthFrameBytes = 1024;
// Largest job token (bytes).
inline constexpr size_t kMaxJobTokenBytes = 512;

enum class StoreOp : uint8_t {
  kHello = 1,
  kBye = 2,
  kSet = 3,
  kCheck = 4,
  kAdd = 5,
  kDead = 6,
  kAuth = 7,
};

// One decoded request. Fields an op does not carry are left at their defaults.
struct StoreRequest {
  StoreOp op = StoreOp::kBye;
  int32_t rank = 0;        // Hello
  int32_t world_size = 0;  // Hello
  std::string key;         // Set, Check, Add
  std::string value;       // Set: the value; Auth: the token
  int64_t delta = 0;       // Add
};

// Decodes one request frame (the bytes after the u32 length prefix). Pure: no allocation
// beyond the decoded strings, which are bounded by the frame itself. InvalidArgument naming
// what is wrong: empty frame, unknown op, a field running past the end, trailing bytes,
// a frame over kMaxStoreFrameBytes.
absl::StatusOr<StoreRequest> DecodeStoreRequest(std::string_view frame);
// The frame for `request` (without the length prefix); DecodeStoreRequest inverts it.
std::string EncodeStoreRequest(const StoreRequest& request);

// True when `a` equals `b`; the time taken depends only on the lengths, not on where the
// strings differ.
bool ConstantTimeEquals(std::string_view a, std::string_view b);

// The job token handed to this process (TRAINSCOPE_JOB_TOKEN), "" when unset.
std::string JobTokenFromEnvironment();

// Writes all of `data` to the socket `fd`, waiting up to `timeout_ms` at a time for it to
// drain. False on an error or a wait that timed out (errno then says which: EAGAIN for the
// wait).
bool WriteAll(int fd, const char* data, size_t n, int timeout_ms);

// The address of this host that routes to host:port (IPv4; a UDP connect sends nothing):
// where a listener must bind to be reached by the ranks that reach host:port. "127.0.0.1"
// when host does not resolve or has no route.
std::string LocalAddressToward(const std::string& host, int port);

struct StoreServerOptions {
  std::string bind_host = "127.0.0.1";  // numeric address or host name; one address is bound
  int port = 0;                         // 0: any free port
  int world_size = 1;                   // the host rank's view, against which Hellos are checked
  std::string token;                    // what Auth must present ("" allowed, still required)
  // Called on the server thread with one line for the first refused connection of each kind
  // (bad token, malformed frame); never with the token. Unset: refusals are only counted.
  std::function<void(const std::string&)> log;
};

// Serves the store on a background thread. Thread-safe; the destructor stops it.
class TcpStoreServer {
 public:
  // Binds options.bind_host:port. Unavailable naming the port when it is in use,
  // InvalidArgument when bind_host does not resolve or is not an address of this host.
  static absl::StatusOr<std::unique_ptr<TcpStoreServer>> Start(const StoreServerOptions& options);
  // Loopback, no token: Start({"127.0.0.1", port, world_size, ""}).
  static absl::StatusOr<std::unique_ptr<TcpStoreServer>> Start(int port, int world_size);
  ~TcpStoreServer();

  int port() const { return port_; }
  // The address actually bound, numeric ("127.0.0.1", "10.0.0.1", "::1").
  const std::string& host() const { return host_; }

  struct Stats {
    int64_t refused_auth = 0;       // first message not Auth, or the wrong token
    int64_t refused_malformed = 0;  // over the cap, truncated, unknown op, garbage
  };
  Stats stats() const;

  // Blocks until every rank that said Hello has said Bye or disconnected, or `timeout`.
  void WaitForClientsToLeave(std::chrono::milliseconds timeout);

 private:
  TcpStoreServer(int listen_fd, std::string host, int port, StoreServerOptions options);
  void Serve();
  struct Conn;
  bool Handle(Conn& conn);  // false: close the connection
  // The reply to one decoded request of an authenticated connection.
  uint8_t Apply(Conn& conn, const StoreRequest& request, std::string& out);
  void Refuse(bool auth, const std::string& why);

  // Constant after construction.
  const int listen_fd_;
  const std::string host_;
  const int port_;
  const StoreServerOptions options_;
  int wake_pipe_[2] = {-1, -1};
  std::thread thread_;
  std::atomic<bool> stop_{false};

  // Owned by the server thread.
  std::map<std::string, std::string> data_;
  std::set<int> dead_;  // ranks whose connection closed without Bye
  std::vector<std::unique_ptr<Conn>> conns_;
  // Guarded by mu_ (read by WaitForClientsToLeave and stats()).
  mutable std::mutex mu_;
  std::set<int> present_;  // ranks with an open, greeted connection
  Stats stats_;
};

// One connection to a TcpStoreServer. Thread-safe (requests are serialised).
class TcpStoreClient {
 public:
  // Connects to host:port, retrying until `timeout` (the server may start later), and
  // authenticates with `token`. PermissionDenied when the server refuses the token; with an
  // empty `token` the message says this process has none (a rank not started by `launch`).
  static absl::StatusOr<std::unique_ptr<TcpStoreClient>> Connect(const std::string& host, int port,
                                                                 std::chrono::milliseconds timeout,
                                                                 const std::string& token = "");
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
  // FailedPrecondition when the key holds something that is not an integer.
  absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta);
  // Ranks whose connection closed without Bye, ascending.
  absl::StatusOr<std::vector<int>> DeadRanks();

  const std::string& endpoint() const { return endpoint_; }

 private:
  TcpStoreClient(int fd, std::string endpoint) : fd_(fd), endpoint_(std::move(endpoint)) {}
  absl::StatusOr<std::pair<uint8_t, std::vector<char>>> Call(const StoreRequest& request);

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

// Starts the server on rank 0, bound to master_addr (resolved; one address, not 0.0.0.0)
// at master_port, connects and greets; the job token is JobTokenFromEnvironment(). No host
// to tell (CommHost::notice): refused connections are counted, not reported. Errors:
// Unavailable (port in use, store unreachable), InvalidArgument (world sizes disagree,
// duplicate rank, master_addr not an address of rank 0's host), PermissionDenied (this
// rank's job token is not rank 0's).
absl::StatusOr<std::unique_ptr<StoreSession>> JoinStore(const std::string& master_addr,
                                                        int master_port, int rank, int world_size,
                                                        std::chrono::milliseconds timeout);
// The same from a communicator's options (master_addr, master_port, rank, world_size,
// timeout), with their job token (CommOptions::job_token; unset: the environment's) and, on
// rank 0, their on_store_listening hook, called with the bound address before rank 0
// connects (its error is returned as is), and their host's notice, which hears of the first
// refused connection of each kind ("rendezvous store: ..."). What the backends call.
absl::StatusOr<std::unique_ptr<StoreSession>> JoinStore(const CommOptions& options);

}  // namespace trainscope::comm

#endif  // TRAINSCOPE_SRC_COMM_STORE_H_
