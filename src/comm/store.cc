#include "comm/store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "trainscope/core/env_vars.h"

namespace trainscope::comm {

bool WriteAll(int fd, const char* data, size_t n, int timeout_ms) {
  while (n > 0) {
    ssize_t w = ::send(fd, data, n, MSG_NOSIGNAL);
    if (w > 0) {
      data += w;
      n -= static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      if (::poll(&p, 1, timeout_ms) <= 0) return false;
      continue;
    }
    return false;
  }
  return true;
}

namespace {

enum Reply : uint8_t { kOk = 0, kMissing = 1, kError = 2 };

// A connection that has not authenticated within this long is closed: a silent stray
// client must not hold a slot forever.
constexpr auto kAuthTimeout = std::chrono::seconds(10);
// Connections beyond this many are closed on accept (a job has one per rank).
constexpr size_t kMaxConnections = 8192;

void PutU32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void PutI64(std::string& out, int64_t v) {
  uint64_t u = static_cast<uint64_t>(v);
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((u >> (8 * i)) & 0xff));
}
void PutBytes(std::string& out, std::string_view s) {
  PutU32(out, static_cast<uint32_t>(s.size()));
  out.append(s.data(), s.size());
}
uint32_t GetU32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<uint8_t>(p[i])) << (8 * i);
  return v;
}

// Bounds-checked reader over one frame: a field that runs past the end sets ok = false
// and yields zero / empty, so a truncated frame never reads out of bounds.
struct Reader {
  std::string_view s;
  size_t pos = 0;
  bool ok = true;
  uint64_t Uint(int bytes) {
    if (!ok || s.size() - pos < static_cast<size_t>(bytes)) {
      ok = false;
      return 0;
    }
    uint64_t v = 0;
    for (int i = 0; i < bytes; ++i)
      v |= static_cast<uint64_t>(static_cast<uint8_t>(s[pos + i])) << (8 * i);
    pos += bytes;
    return v;
  }
  std::string Bytes() {
    uint64_t len = Uint(4);
    if (!ok || len > s.size() - pos) {  // checked before anything is allocated
      ok = false;
      return {};
    }
    std::string out(s.substr(pos, len));
    pos += len;
    return out;
  }
};

bool SendReply(int fd, uint8_t status, const std::string& payload) {
  std::string frame;
  PutU32(frame, static_cast<uint32_t>(payload.size() + 1));
  frame.push_back(static_cast<char>(status));
  frame += payload;
  return WriteAll(fd, frame.data(), frame.size(), 5000);
}

void SetNonBlocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

std::string NumericHost(const sockaddr* sa, socklen_t len) {
  char host[NI_MAXHOST] = "?";
  char serv[NI_MAXSERV] = "";
  ::getnameinfo(sa, len, host, sizeof(host), serv, sizeof(serv), NI_NUMERICHOST | NI_NUMERICSERV);
  return host;
}

std::string PeerName(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "?";
  int port = 0;
  if (ss.ss_family == AF_INET) port = ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  if (ss.ss_family == AF_INET6) port = ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  return absl::StrCat(NumericHost(reinterpret_cast<sockaddr*>(&ss), len), ":", port);
}

const char* OpName(StoreOp op) {
  switch (op) {
    case StoreOp::kHello:
      return "hello";
    case StoreOp::kBye:
      return "bye";
    case StoreOp::kSet:
      return "set";
    case StoreOp::kCheck:
      return "check";
    case StoreOp::kAdd:
      return "add";
    case StoreOp::kDead:
      return "dead";
    case StoreOp::kAuth:
      return "auth";
  }
  return "?";
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Messages.

absl::StatusOr<StoreRequest> DecodeStoreRequest(std::string_view frame) {
  if (frame.empty()) return absl::InvalidArgumentError("store: empty request frame");
  if (frame.size() > kMaxStoreFrameBytes) {
    return absl::InvalidArgumentError(absl::StrCat("store: request frame of ", frame.size(),
                                                   " bytes is over the ", kMaxStoreFrameBytes,
                                                   "-byte cap"));
  }
  Reader r{frame};
  StoreRequest req;
  const uint8_t op = static_cast<uint8_t>(r.Uint(1));
  req.op = static_cast<StoreOp>(op);
  switch (req.op) {
    case StoreOp::kAuth:
      req.value = r.Bytes();
      if (r.ok && req.value.size() > kMaxJobTokenBytes) {
        return absl::InvalidArgumentError(absl::StrCat("store: auth token of ", req.value.size(),
                                                       " bytes is over the ", kMaxJobTokenBytes,
                                                       "-byte cap"));
      }
      break;
    case StoreOp::kHello:
      req.rank = static_cast<int32_t>(static_cast<uint32_t>(r.Uint(4)));
      req.world_size = static_cast<int32_t>(static_cast<uint32_t>(r.Uint(4)));
      break;
    case StoreOp::kBye:
    case StoreOp::kDead:
      break;
    case StoreOp::kSet:
      req.key = r.Bytes();
      req.value = r.Bytes();
      break;
    case StoreOp::kCheck:
      req.key = r.Bytes();
      break;
    case StoreOp::kAdd:
      req.key = r.Bytes();
      req.delta = static_cast<int64_t>(r.Uint(8));
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat("store: unknown op ", op));
  }
  if (!r.ok) {
    return absl::InvalidArgumentError(
        absl::StrCat("store: truncated ", OpName(req.op), " request (", frame.size(), " bytes)"));
  }
  if (r.pos != frame.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "store: ", frame.size() - r.pos, " trailing bytes after a ", OpName(req.op), " request"));
  }
  return req;
}

std::string EncodeStoreRequest(const StoreRequest& req) {
  std::string out(1, static_cast<char>(req.op));
  switch (req.op) {
    case StoreOp::kAuth:
      PutBytes(out, req.value);
      break;
    case StoreOp::kHello:
      PutU32(out, static_cast<uint32_t>(req.rank));
      PutU32(out, static_cast<uint32_t>(req.world_size));
      break;
    case StoreOp::kBye:
    case StoreOp::kDead:
      break;
    case StoreOp::kSet:
      PutBytes(out, req.key);
      PutBytes(out, req.value);
      break;
    case StoreOp::kCheck:
      PutBytes(out, req.key);
      break;
    case StoreOp::kAdd:
      PutBytes(out, req.key);
      PutI64(out, req.delta);
      break;
  }
  return out;
}

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  // Every byte of the longer string is visited whatever the contents; the length
  // difference is folded into the result rather than returned early.
  const size_t n = std::max(a.size(), b.size());
  unsigned diff = a.size() == b.size() ? 0u : 1u;
  for (size_t i = 0; i < n; ++i) {
    unsigned x = i < a.size() ? static_cast<uint8_t>(a[i]) : 0u;
    unsigned y = i < b.size() ? static_cast<uint8_t>(b[i]) : 0u;
    diff |= x ^ y;
  }
  return diff == 0;
}

std::string JobTokenFromEnvironment() {
  const char* v = std::getenv(envvar::kJobToken);
  return v != nullptr ? std::string(v) : std::string();
}

// ---------------------------------------------------------------------------------------
// Server.

struct TcpStoreServer::Conn {
  int fd = -1;
  int rank = -1;
  bool said_bye = false;
  bool authed = false;
  std::chrono::steady_clock::time_point accepted;
  std::string peer;
  std::string in;  // received bytes not yet consumed as whole frames
};

absl::StatusOr<std::unique_ptr<TcpStoreServer>> TcpStoreServer::Start(int port, int world_size) {
  StoreServerOptions o;
  o.port = port;
  o.world_size = world_size;
  return Start(o);
}

absl::StatusOr<std::unique_ptr<TcpStoreServer>> TcpStoreServer::Start(
    const StoreServerOptions& options) {
  const int port = options.port;
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("store: ", port, " is not a TCP port"));
  }
  if (options.token.size() > kMaxJobTokenBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("the job token is longer than ", kMaxJobTokenBytes, " bytes"));
  }
  // One address: the first IPv4 result for bind_host, else the first result.
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  int gai = ::getaddrinfo(options.bind_host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (gai != 0 || res == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot resolve the master address '", options.bind_host,
                     "' for the rendezvous store: ", ::gai_strerror(gai)));
  }
  const addrinfo* pick = res;
  for (const addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    if (ai->ai_family == AF_INET) {
      pick = ai;
      break;
    }
  }
  sockaddr_storage addr{};
  std::memcpy(&addr, pick->ai_addr, pick->ai_addrlen);
  socklen_t addr_len = pick->ai_addrlen;
  const int family = pick->ai_family;
  ::freeaddrinfo(res);
  const std::string numeric = NumericHost(reinterpret_cast<sockaddr*>(&addr), addr_len);

  int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("store: socket: ", std::strerror(errno)));
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), addr_len) != 0) {
    int err = errno;
    ::close(fd);
    if (err == EADDRINUSE) {
      return absl::UnavailableError(
          absl::StrCat("rendezvous port ", port,
                       " is already in use (another job or store listens there); pick another "
                       "MASTER_PORT or let `trainscope launch` choose a free one"));
    }
    if (err == EADDRNOTAVAIL) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the master address ", options.bind_host, " (", numeric,
          ") is not an address of this host, where rank 0 hosts the rendezvous store; set "
          "MASTER_ADDR (--master-addr) to an address of node 0"));
    }
    return absl::UnavailableError(
        absl::StrCat("store: cannot bind ", numeric, " port ", port, ": ", std::strerror(err)));
  }
  if (::listen(fd, 1024) != 0) {
    int err = errno;
    ::close(fd);
    return absl::UnavailableError(
        absl::StrCat("store: cannot listen on port ", port, ": ", std::strerror(err)));
  }
  addr_len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &addr_len);
  const int bound_port = family == AF_INET6
                             ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                             : ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  SetNonBlocking(fd);
  return std::unique_ptr<TcpStoreServer>(new TcpStoreServer(fd, numeric, bound_port, options));
}

TcpStoreServer::TcpStoreServer(int listen_fd, std::string host, int port,
                               StoreServerOptions options)
    : listen_fd_(listen_fd), host_(std::move(host)), port_(port), options_(std::move(options)) {
  if (::pipe2(wake_pipe_, O_CLOEXEC | O_NONBLOCK) != 0) wake_pipe_[0] = wake_pipe_[1] = -1;
  thread_ = std::thread([this] { Serve(); });
}

TcpStoreServer::~TcpStoreServer() {
  stop_ = true;
  if (wake_pipe_[1] >= 0) {
    char c = 1;
    (void)!::write(wake_pipe_[1], &c, 1);
  }
  if (thread_.joinable()) thread_.join();
  for (auto& c : conns_) ::close(c->fd);
  ::close(listen_fd_);
  if (wake_pipe_[0] >= 0) ::close(wake_pipe_[0]);
  if (wake_pipe_[1] >= 0) ::close(wake_pipe_[1]);
}

TcpStoreServer::Stats TcpStoreServer::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void TcpStoreServer::WaitForClientsToLeave(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (present_.empty()) return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

void TcpStoreServer::Refuse(bool auth, const std::string& why) {
  bool first;
  {
    std::lock_guard<std::mutex> lock(mu_);
    int64_t& n = auth ? stats_.refused_auth : stats_.refused_malformed;
    first = n == 0;
    ++n;
  }
  if (first && options_.log) {
    options_.log(absl::StrCat(why,
                              "; connection closed (further refusals of this kind are "
                              "counted, not logged)"));
  }
}

void TcpStoreServer::Serve() {
  std::vector<pollfd> fds;
  while (!stop_) {
    fds.clear();
    fds.push_back({listen_fd_, POLLIN, 0});
    fds.push_back({wake_pipe_[0], POLLIN, 0});
    for (auto& c : conns_) fds.push_back({c->fd, POLLIN, 0});
    int r = ::poll(fds.data(), fds.size(), 1000);
    if (r < 0 && errno != EINTR) break;
    const auto now = std::chrono::steady_clock::now();
    std::vector<size_t> to_close;
    // Connections are indexed from 2 in fds; new ones accepted below are not polled yet.
    for (size_t i = 2; r > 0 && i < fds.size(); ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      Conn& c = *conns_[i - 2];
      // Frames are handled after every chunk, so at most one frame (bounded by the cap
      // checked on its length prefix) plus one chunk is ever buffered.
      bool open = true;
      char buf[65536];
      while (open) {
        ssize_t n = ::recv(c.fd, buf, sizeof(buf), 0);
        if (n > 0) {
          c.in.append(buf, static_cast<size_t>(n));
          if (!Handle(c)) open = false;
          continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
          open = false;
          if (!c.in.empty()) {
            Refuse(false, absl::StrCat("rendezvous store: ", c.peer, " sent a truncated frame (",
                                       c.in.size(), " bytes) and hung up"));
          }
        }
        break;
      }
      if (!open) to_close.push_back(i - 2);
    }
    for (size_t i = 0; i < conns_.size(); ++i) {
      Conn& c = *conns_[i];
      if (!c.authed && now - c.accepted > kAuthTimeout &&
          std::find(to_close.begin(), to_close.end(), i) == to_close.end()) {
        Refuse(true, absl::StrCat("rendezvous store: ", c.peer, " did not authenticate within ",
                                  kAuthTimeout.count(), " s"));
        to_close.push_back(i);
      }
    }
    std::sort(to_close.begin(), to_close.end());
    for (auto it = to_close.rbegin(); it != to_close.rend(); ++it) {
      Conn& c = *conns_[*it];
      if (c.rank >= 0) {
        if (!c.said_bye) dead_.insert(c.rank);  // DeadRanks() reads this list
        std::lock_guard<std::mutex> lock(mu_);
        present_.erase(c.rank);
      }
      ::close(c.fd);
      conns_.erase(conns_.begin() + static_cast<long>(*it));
    }
    if (r > 0 && (fds[0].revents & POLLIN)) {
      while (true) {
        int cfd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (cfd < 0) break;
        if (conns_.size() >= kMaxConnections) {
          ::close(cfd);
          continue;
        }
        int one = 1;
        ::setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        auto conn = std::make_unique<Conn>();
        conn->fd = cfd;
        conn->accepted = std::chrono::steady_clock::now();
        conn->peer = PeerName(cfd);
        conns_.push_back(std::move(conn));
      }
    }
    if (r > 0 && (fds[1].revents & POLLIN)) {
      char b[64];
      while (::read(wake_pipe_[0], b, sizeof(b)) > 0) {
      }
    }
  }
}

// Consumes every whole frame in c.in. The length prefix is checked against the cap before
// the frame is awaited, so a huge claimed length closes the connection at once.
bool TcpStoreServer::Handle(Conn& c) {
  size_t consumed = 0;
  bool keep = true;
  while (keep && c.in.size() - consumed >= 4) {
    const uint32_t len = GetU32(c.in.data() + consumed);
    const uint32_t cap = c.authed ? kMaxStoreFrameBytes : kMaxAuthFrameBytes;
    if (len > cap) {
      Refuse(!c.authed, absl::StrCat("rendezvous store: ", c.peer, " sent a length prefix of ", len,
                                     " bytes, over the ", cap, "-byte cap",
                                     c.authed ? "" : " before authenticating"));
      return false;
    }
    if (c.in.size() - consumed - 4 < len) break;
    std::string_view frame(c.in.data() + consumed + 4, len);
    consumed += 4 + static_cast<size_t>(len);
    auto req = DecodeStoreRequest(frame);
    if (!req.ok()) {
      Refuse(!c.authed, absl::StrCat("rendezvous store: ", c.peer, " sent a malformed frame (",
                                     req.status().message(), ")"));
      return false;
    }
    if (!c.authed) {
      // The first message must be Auth with this job's token; nothing else is looked at.
      if (req->op != StoreOp::kAuth || !ConstantTimeEquals(req->value, options_.token)) {
        Refuse(true, absl::StrCat("rendezvous store: refused ", c.peer, ": ",
                                  req->op != StoreOp::kAuth ? "first message is not auth"
                                                            : "wrong job token"));
        (void)SendReply(c.fd, kError,
                        "the rendezvous store refused this process's job token: "
                        "TRAINSCOPE_JOB_TOKEN must be the same on every node of the job");
        return false;
      }
      c.authed = true;
      keep = SendReply(c.fd, kOk, "");
      continue;
    }
    std::string out;
    uint8_t status = Apply(c, *req, out);
    keep = SendReply(c.fd, status, out);
  }
  c.in.erase(0, consumed);
  return keep;
}

uint8_t TcpStoreServer::Apply(Conn& c, const StoreRequest& req, std::string& out) {
  switch (req.op) {
    case StoreOp::kAuth:
      out = "already authenticated";
      return kError;
    case StoreOp::kHello: {
      const int world_size = options_.world_size;
      if (req.world_size != world_size) {
        out = absl::StrCat("world sizes disagree: rank ", req.rank,
                           " has WORLD_SIZE=", req.world_size,
                           " but rank 0 has WORLD_SIZE=", world_size);
        return kError;
      }
      if (req.rank < 0 || req.rank >= world_size) {
        out = absl::StrCat("rank ", req.rank, " is out of range for world size ", world_size);
        return kError;
      }
      if (c.rank >= 0) {
        out = absl::StrCat("this connection already is rank ", c.rank);
        return kError;
      }
      std::lock_guard<std::mutex> lock(mu_);
      if (present_.count(req.rank)) {
        out = absl::StrCat("two processes claim rank ", req.rank);
        return kError;
      }
      present_.insert(req.rank);
      c.rank = req.rank;
      return kOk;
    }
    case StoreOp::kBye:
      c.said_bye = true;
      return kOk;
    case StoreOp::kSet:
      data_[req.key] = req.value;
      return kOk;
    case StoreOp::kCheck: {
      auto it = data_.find(req.key);
      if (it == data_.end()) return kMissing;
      out = it->second;
      return kOk;
    }
    case StoreOp::kAdd: {
      int64_t cur = 0;
      auto it = data_.find(req.key);
      if (it != data_.end() && !absl::SimpleAtoi(it->second, &cur)) {
        out = absl::StrCat("store key '", req.key, "' does not hold an integer");
        return kError;
      }
      if (__builtin_add_overflow(cur, req.delta, &cur)) {
        out = absl::StrCat("store key '", req.key, "' would overflow");
        return kError;
      }
      data_[req.key] = std::to_string(cur);
      PutI64(out, cur);
      return kOk;
    }
    case StoreOp::kDead:
      out = absl::StrJoin(dead_, ",");
      return kOk;
  }
  out = "unknown op";
  return kError;
}

// ---------------------------------------------------------------------------------------
// Client.

absl::StatusOr<std::unique_ptr<TcpStoreClient>> TcpStoreClient::Connect(
    const std::string& host, int port, std::chrono::milliseconds timeout,
    const std::string& token) {
  std::string endpoint = absl::StrCat(host, ":", port);
  auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string last_error = "no attempt";
  int delay_ms = 1;
  std::unique_ptr<TcpStoreClient> client;
  while (client == nullptr) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    int gai = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
    if (gai != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot resolve MASTER_ADDR '", host, "': ", ::gai_strerror(gai)));
    }
    for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
      int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
      if (fd < 0) continue;
      if (::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
        int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        client.reset(new TcpStoreClient(fd, endpoint));
        break;
      }
      last_error = std::strerror(errno);
      ::close(fd);
    }
    ::freeaddrinfo(res);
    if (client != nullptr) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      return absl::UnavailableError(absl::StrCat(
          "cannot reach the rendezvous store at ", endpoint, " within ", timeout.count(), " ms (",
          last_error, "): is rank 0 running, and MASTER_ADDR/PORT right?"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    delay_ms = std::min(delay_ms * 2, 100);
  }
  StoreRequest auth;
  auth.op = StoreOp::kAuth;
  auth.value = token;
  auto reply = client->Call(auth);
  if (!reply.ok()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "the rendezvous store at ", endpoint,
        " closed the connection on authentication (is TRAINSCOPE_JOB_TOKEN the same on every "
        "node?)"));
  }
  if (reply->first != kOk && token.empty()) {  // a rank started by hand, not by `launch`
    return absl::PermissionDeniedError(
        absl::StrCat("the rendezvous store at ", endpoint,
                     " requires a job token and this process has none (", envvar::kJobToken,
                     " unset: start the ranks with `trainscope launch`, or export the token)"));
  }
  if (reply->first != kOk) {
    return absl::PermissionDeniedError(absl::StrCat(
        std::string(reply->second.begin(), reply->second.end()), " (store at ", endpoint, ")"));
  }
  return client;
}

TcpStoreClient::~TcpStoreClient() { ::close(fd_); }

absl::StatusOr<std::pair<uint8_t, std::vector<char>>> TcpStoreClient::Call(
    const StoreRequest& request) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string body = EncodeStoreRequest(request);
  if (body.size() > kMaxStoreFrameBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "store: a ", body.size(), "-byte request is over the ", kMaxStoreFrameBytes, "-byte cap"));
  }
  std::string frame;
  PutU32(frame, static_cast<uint32_t>(body.size()));
  frame += body;
  auto lost = [&] {
    return absl::UnavailableError(absl::StrCat("lost the connection to the rendezvous store at ",
                                               endpoint_, " (rank 0, which hosts it, is gone)"));
  };
  if (!WriteAll(fd_, frame.data(), frame.size(), 30000)) return lost();
  auto read_n = [&](char* p, size_t n) {
    while (n > 0) {
      pollfd pfd{fd_, POLLIN, 0};
      int r = ::poll(&pfd, 1, 30000);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return false;
      ssize_t got = ::recv(fd_, p, n, 0);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) return false;
      p += got;
      n -= static_cast<size_t>(got);
    }
    return true;
  };
  char hdr[4];
  if (!read_n(hdr, 4)) return lost();
  uint32_t len = GetU32(hdr);
  if (len == 0 || len > kMaxStoreFrameBytes + 1) return lost();
  std::vector<char> body_in(len);
  if (!read_n(body_in.data(), len)) return lost();
  uint8_t status = static_cast<uint8_t>(body_in[0]);
  return std::make_pair(status, std::vector<char>(body_in.begin() + 1, body_in.end()));
}

absl::Status TcpStoreClient::Hello(int rank, int world_size) {
  StoreRequest req;
  req.op = StoreOp::kHello;
  req.rank = rank;
  req.world_size = world_size;
  auto reply = Call(req);
  if (!reply.ok()) return reply.status();
  if (reply->first == kError) {
    return absl::InvalidArgumentError(std::string(reply->second.begin(), reply->second.end()));
  }
  return absl::OkStatus();
}

absl::Status TcpStoreClient::Bye() {
  StoreRequest req;
  req.op = StoreOp::kBye;
  return Call(req).status();
}

absl::Status TcpStoreClient::Set(const std::string& key, const std::vector<char>& value) {
  StoreRequest req;
  req.op = StoreOp::kSet;
  req.key = key;
  req.value.assign(value.begin(), value.end());
  return Call(req).status();
}

absl::StatusOr<std::optional<std::vector<char>>> TcpStoreClient::Check(const std::string& key) {
  StoreRequest req;
  req.op = StoreOp::kCheck;
  req.key = key;
  auto reply = Call(req);
  if (!reply.ok()) return reply.status();
  if (reply->first == kMissing) return std::optional<std::vector<char>>();
  return std::optional<std::vector<char>>(std::move(reply->second));
}
absl::Status TcpStoreClient::Wait(const std::vector<std::string>& keys,
                                  std::chrono::milliseconds timeout) {
  // Polling keeps the protocol to one request in flight; rendezvous is not latency-bound.
  auto deadline = std::chrono::steady_clock::now() + timeout;
  int delay_us = 200;
  for (const std::string& key : keys) {
    while (true) {
      auto v = Check(key);
      if (!v.ok()) return v.status();
      if (v->has_value()) break;
      if (std::chrono::steady_clock::now() >= deadline) {
        return absl::DeadlineExceededError(absl::StrCat("timed out after ", timeout.count(),
                                                        " ms waiting for store key '", key, "' at ",
                                                        endpoint_));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
      delay_us = std::min(delay_us * 2, 20000);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<char>> TcpStoreClient::Get(const std::string& key,
                                                      std::chrono::milliseconds timeout) {
  auto st = Wait({key}, timeout);
  if (!st.ok()) return st;
  auto v = Check(key);
  if (!v.ok()) return v.status();
  if (!v->has_value()) return absl::InternalError("store key vanished: " + key);
  return std::move(**v);
}

absl::StatusOr<int64_t> TcpStoreClient::Add(const std::string& key, int64_t delta) {
  StoreRequest req;
  req.op = StoreOp::kAdd;
  req.key = key;
  req.delta = delta;
  auto reply = Call(req);
  if (!reply.ok()) return reply.status();
  if (reply->first == kError) {
    return absl::FailedPreconditionError(std::string(reply->second.begin(), reply->second.end()));
  }
  Reader r{std::string_view(reply->second.data(), reply->second.size())};
  int64_t v = static_cast<int64_t>(r.Uint(8));
  if (!r.ok) return absl::InternalError("store: malformed add reply");
  return v;
}

absl::StatusOr<std::vector<int>> TcpStoreClient::DeadRanks() {
  StoreRequest req;
  req.op = StoreOp::kDead;
  auto reply = Call(req);
  if (!reply.ok()) return reply.status();
  std::set<int> ranks;
  std::string s(reply->second.begin(), reply->second.end());
  for (absl::string_view part : absl::StrSplit(s, ',', absl::SkipEmpty())) {
    int rank;
    if (!absl::SimpleAtoi(part, &rank)) return absl::InternalError("store: malformed dead list");
    ranks.insert(rank);
  }
  return std::vector<int>(ranks.begin(), ranks.end());
}

}  // namespace trainscope::comm
