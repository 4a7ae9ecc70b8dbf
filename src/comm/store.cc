#include "comm/store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace trainscope::comm {
namespace {

enum Command : uint8_t { kHello = 1, kBye = 2, kSet = 3, kCheck = 4, kAdd = 5, kDead = 6 };
enum Reply : uint8_t { kOk = 0, kMissing = 1, kError = 2 };

void PutU32(std::vector<char>& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void PutI64(std::vector<char>& out, int64_t v) {
  uint64_t u = static_cast<uint64_t>(v);
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((u >> (8 * i)) & 0xff));
}
void PutBytes(std::vector<char>& out, const char* p, size_t n) {
  PutU32(out, static_cast<uint32_t>(n));
  out.insert(out.end(), p, p + n);
}

// Bounds-checked reader over one frame.
struct Reader {
  const char* p;
  size_t n;
  size_t pos = 0;
  bool ok = true;
  uint64_t Uint(int bytes) {
    if (pos + bytes > n) {
      ok = false;
      return 0;
    }
    uint64_t v = 0;
    for (int i = 0; i < bytes; ++i)
      v |= static_cast<uint64_t>(static_cast<uint8_t>(p[pos + i])) << (8 * i);
    pos += bytes;
    return v;
  }
  std::string Bytes() {
    uint64_t len = Uint(4);
    if (!ok || pos + len > n) {
      ok = false;
      return {};
    }
    std::string s(p + pos, len);
    pos += len;
    return s;
  }
};

// Writes all of `data`, waiting for the socket to drain (bounded).
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

void SetNonBlocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

}  // namespace

struct TcpStoreServer::Conn {
  int fd = -1;
  int rank = -1;
  bool said_bye = false;
  std::vector<char> in;
};

absl::StatusOr<std::unique_ptr<TcpStoreServer>> TcpStoreServer::Start(int port, int world_size) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("store: socket: ", std::strerror(errno)));
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    int err = errno;
    ::close(fd);
    if (err == EADDRINUSE) {
      return absl::UnavailableError(
          absl::StrCat("rendezvous port ", port,
                       " is already in use (another job or store listens there); pick another "
                       "MASTER_PORT or let `trainscope launch` choose a free one"));
    }
    return absl::UnavailableError(
        absl::StrCat("store: cannot bind port ", port, ": ", std::strerror(err)));
  }
  if (::listen(fd, 1024) != 0) {
    int err = errno;
    ::close(fd);
    return absl::UnavailableError(
        absl::StrCat("store: cannot listen on port ", port, ": ", std::strerror(err)));
  }
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  SetNonBlocking(fd);
  std::unique_ptr<TcpStoreServer> server(new TcpStoreServer(fd, ntohs(addr.sin_port), world_size));
  return server;
}

TcpStoreServer::TcpStoreServer(int listen_fd, int port, int world_size)
    : listen_fd_(listen_fd), port_(port), world_size_(world_size) {
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

void TcpStoreServer::Serve() {
  std::set<int> dead;
  std::vector<pollfd> fds;
  while (!stop_) {
    fds.clear();
    fds.push_back({listen_fd_, POLLIN, 0});
    fds.push_back({wake_pipe_[0], POLLIN, 0});
    for (auto& c : conns_) fds.push_back({c->fd, POLLIN, 0});
    int r = ::poll(fds.data(), fds.size(), 1000);
    if (r < 0 && errno != EINTR) break;
    if (r <= 0) continue;
    if (fds[0].revents & POLLIN) {
      while (true) {
        int cfd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (cfd < 0) break;
        int one = 1;
        ::setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        auto conn = std::make_unique<Conn>();
        conn->fd = cfd;
        conns_.push_back(std::move(conn));
      }
    }
    // Connections are indexed from 2 in fds; new ones accepted above are not polled yet.
    std::vector<size_t> to_close;
    for (size_t i = 2; i < fds.size(); ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      Conn& c = *conns_[i - 2];
      bool open = true;
      char buf[65536];
      while (true) {
        ssize_t n = ::recv(c.fd, buf, sizeof(buf), 0);
        if (n > 0) {
          c.in.insert(c.in.end(), buf, buf + n);
          continue;
        }
        if (n == 0) open = false;
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) open = false;
        break;
      }
      if (!Handle(c)) open = false;
      if (!open) to_close.push_back(i - 2);
    }
    for (auto it = to_close.rbegin(); it != to_close.rend(); ++it) {
      Conn& c = *conns_[*it];
      if (c.rank >= 0) {
        std::string key = "__dead__";
        if (!c.said_bye) {
          // Record the rank as gone; DeadRanks() reads this list.
          auto& v = data_[key];
          std::string s(v.begin(), v.end());
          s += std::to_string(c.rank) + ",";
          v.assign(s.begin(), s.end());
        }
        std::lock_guard<std::mutex> lock(mu_);
        present_.erase(c.rank);
      }
      ::close(c.fd);
      conns_.erase(conns_.begin() + static_cast<long>(*it));
    }
  }
}

bool TcpStoreServer::Handle(Conn& c) {
  size_t consumed = 0;
  bool keep = true;
  while (keep && c.in.size() - consumed >= 4) {
    Reader hdr{c.in.data() + consumed, 4};
    uint32_t len = static_cast<uint32_t>(hdr.Uint(4));
    if (len > (256u << 20)) return false;  // not our protocol
    if (c.in.size() - consumed - 4 < len) break;
    Reader r{c.in.data() + consumed + 4, len};
    consumed += 4 + len;
    uint8_t cmd = static_cast<uint8_t>(r.Uint(1));
    std::vector<char> out;
    uint8_t status = kOk;
    switch (cmd) {
      case kHello: {
        int rank = static_cast<int32_t>(r.Uint(4));
        int world = static_cast<int32_t>(r.Uint(4));
        std::string err;
        if (world != world_size_) {
          err = absl::StrCat("world sizes disagree: rank ", rank, " has WORLD_SIZE=", world,
                             " but rank 0 has WORLD_SIZE=", world_size_);
        } else if (rank < 0 || rank >= world_size_) {
          err = absl::StrCat("rank ", rank, " is out of range for world size ", world_size_);
        } else {
          std::lock_guard<std::mutex> lock(mu_);
          if (present_.count(rank)) {
            err = absl::StrCat("two processes claim rank ", rank);
          } else {
            present_.insert(rank);
            c.rank = rank;
          }
        }
        if (!err.empty()) {
          status = kError;
          out.assign(err.begin(), err.end());
        }
        break;
      }
      case kBye:
        c.said_bye = true;
        break;
      case kSet: {
        std::string key = r.Bytes();
        std::string value = r.Bytes();
        data_[key].assign(value.begin(), value.end());
        break;
      }
      case kCheck: {
        std::string key = r.Bytes();
        auto it = data_.find(key);
        if (it == data_.end()) {
          status = kMissing;
        } else {
          out = it->second;
        }
        break;
      }
      case kAdd: {
        std::string key = r.Bytes();
        int64_t delta = static_cast<int64_t>(r.Uint(8));
        auto& v = data_[key];
        int64_t cur = v.empty() ? 0 : std::stoll(std::string(v.begin(), v.end()));
        cur += delta;
        std::string s = std::to_string(cur);
        v.assign(s.begin(), s.end());
        PutI64(out, cur);
        break;
      }
      case kDead: {
        auto it = data_.find("__dead__");
        if (it != data_.end()) out = it->second;
        break;
      }
      default:
        return false;
    }
    if (!r.ok) return false;
    std::vector<char> frame;
    PutU32(frame, static_cast<uint32_t>(out.size() + 1));
    frame.push_back(static_cast<char>(status));
    frame.insert(frame.end(), out.begin(), out.end());
    if (!WriteAll(c.fd, frame.data(), frame.size(), 5000)) keep = false;
  }
  c.in.erase(c.in.begin(), c.in.begin() + static_cast<long>(consumed));
  return keep;
}

// ---------------------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<TcpStoreClient>> TcpStoreClient::Connect(
    const std::string& host, int port, std::chrono::milliseconds timeout) {
  std::string endpoint = absl::StrCat(host, ":", port);
  auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string last_error = "no attempt";
  int delay_ms = 1;
  while (true) {
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
        ::freeaddrinfo(res);
        int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        return std::unique_ptr<TcpStoreClient>(new TcpStoreClient(fd, endpoint));
      }
      last_error = std::strerror(errno);
      ::close(fd);
    }
    ::freeaddrinfo(res);
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    delay_ms = std::min(delay_ms * 2, 100);
  }
  return absl::UnavailableError(absl::StrCat("cannot reach the rendezvous store at ", endpoint,
                                             " within ", timeout.count(), " ms (", last_error,
                                             "): is rank 0 running, and MASTER_ADDR/PORT right?"));
}

TcpStoreClient::~TcpStoreClient() { ::close(fd_); }

absl::StatusOr<std::pair<uint8_t, std::vector<char>>> TcpStoreClient::Call(
    const std::vector<char>& request) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<char> frame;
  PutU32(frame, static_cast<uint32_t>(request.size()));
  frame.insert(frame.end(), request.begin(), request.end());
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
  Reader r{hdr, 4};
  uint32_t len = static_cast<uint32_t>(r.Uint(4));
  if (len == 0 || len > (256u << 20)) return lost();
  std::vector<char> body(len);
  if (!read_n(body.data(), len)) return lost();
  uint8_t status = static_cast<uint8_t>(body[0]);
  return std::make_pair(status, std::vector<char>(body.begin() + 1, body.end()));
}

absl::Status TcpStoreClient::Hello(int rank, int world_size) {
  std::vector<char> req{static_cast<char>(kHello)};
  PutU32(req, static_cast<uint32_t>(rank));
  PutU32(req, static_cast<uint32_t>(world_size));
  auto reply = Call(req);
  if (!reply.ok()) return reply.status();
  if (reply->first == kError) {
    return absl::InvalidArgumentError(std::string(reply->second.begin(), reply->second.end()));
  }
  return absl::OkStatus();
}

absl::Status TcpStoreClient::Bye() {
  std::vector<char> req{static_cast<char>(kBye)};
  return Call(req).status();
}

absl::Status TcpStoreClient::Set(const std::string& key, const std::vector<char>& value) {
  std::vector<char> req{static_cast<char>(kSet)};
  PutBytes(req, key.data(), key.size());
  PutBytes(req, value.data(), value.size());
  return Call(req).status();
}

absl::StatusOr<std::optional<std::vector<char>>> TcpStoreClient::Check(const std::string& key) {
  std::vector<char> req{static_cast<char>(kCheck)};
  PutBytes(req, key.data(), key.size());
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
  std::vector<char> req{static_cast<char>(kAdd)};
  PutBytes(req, key.data(), key.size());
  PutI64(req, delta);
  auto reply = Call(req);
  if (!reply.ok()) return reply.status();
  Reader r{reply->second.data(), reply->second.size()};
  int64_t v = static_cast<int64_t>(r.Uint(8));
  if (!r.ok) return absl::InternalError("store: malformed add reply");
  return v;
}

absl::StatusOr<std::vector<int>> TcpStoreClient::DeadRanks() {
  std::vector<char> req{static_cast<char>(kDead)};
  auto reply = Call(req);
  if (!reply.ok()) return reply.status();
  std::set<int> ranks;
  std::string s(reply->second.begin(), reply->second.end());
  size_t start = 0;
  while (start < s.size()) {
    size_t comma = s.find(',', start);
    if (comma == std::string::npos) comma = s.size();
    if (comma > start) ranks.insert(std::stoi(s.substr(start, comma - start)));
    start = comma + 1;
  }
  return std::vector<int>(ranks.begin(), ranks.end());
}

}  // namespace trainscope::comm

namespace trainscope::comm {

absl::StatusOr<std::unique_ptr<StoreSession>> JoinStore(const std::string& master_addr,
                                                        int master_port, int rank, int world_size,
                                                        std::chrono::milliseconds timeout) {
  auto session = std::make_unique<StoreSession>();
  session->timeout = timeout;
  if (rank == 0) {
    auto server = TcpStoreServer::Start(master_port, world_size);
    if (!server.ok()) return server.status();
    session->server = std::move(*server);
  }
  // Rank 0 reaches its own server over loopback, whatever MASTER_ADDR says.
  int port = session->server != nullptr ? session->server->port() : master_port;
  auto client = TcpStoreClient::Connect(rank == 0 ? "127.0.0.1" : master_addr, port, timeout);
  if (!client.ok()) return client.status();
  session->client = std::move(*client);
  auto st = session->client->Hello(rank, world_size);
  if (!st.ok()) return st;
  return session;
}

StoreSession::~StoreSession() {
  if (client != nullptr) (void)client->Bye();
  client.reset();
  if (server != nullptr) {
    server->WaitForClientsToLeave(std::min(timeout, std::chrono::milliseconds(10000)));
  }
}

std::string StoreSession::DescribeMissingRanks(int64_t seq, int rank, int world_size,
                                               std::chrono::milliseconds wait) {
  auto deadline = std::chrono::steady_clock::now() + wait;
  const std::string prefix = absl::StrCat("failed/", seq, "/");
  bool posted = false;
  while (true) {
    auto dead = client->DeadRanks();
    if (!dead.ok()) {
      return "rank 0 is gone (the rendezvous store it hosts at " + client->endpoint() + " closed)";
    }
    if (!dead->empty()) {
      return absl::StrCat(dead->size() == 1 ? "rank " : "ranks ", absl::StrJoin(*dead, ", "),
                          dead->size() == 1 ? " is" : " are",
                          " gone (store connection closed: the process exited or was killed)");
    }
    if (!posted) {
      (void)client->Set(prefix + std::to_string(rank), {'1'});
      posted = true;
    }
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  // Nobody died: name the ranks that did not fail this op like we did.
  std::vector<int> absent;
  for (int r = 0; r < world_size; ++r) {
    if (r == rank) continue;
    auto v = client->Check(prefix + std::to_string(r));
    if (v.ok() && !v->has_value()) absent.push_back(r);
  }
  if (absent.empty()) return "";
  return absl::StrCat(absent.size() == 1 ? "rank " : "ranks ", absl::StrJoin(absent, ", "),
                      absent.size() == 1 ? " is" : " are",
                      " alive but unresponsive: it did not fail this op like us (stopped, hung, or "
                      "stuck in other work)");
}

}  // namespace trainscope::comm
