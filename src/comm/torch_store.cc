// TorchStoreClient: PyTorch's TCPStore protocol from the client side (torch_store.h has the
// format). Written from the protocol's facts, sharing no code with torch.
#include "comm/torch_store.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "comm/store.h"

namespace trainscope::comm {
namespace {
// A named namespace: the unity build puts this file's helpers next to store.cc's.
namespace torch_wire {

enum Query : uint8_t {
  kValidate = 0,
  kSet = 1,
  kGet = 3,
  kAdd = 4,
  kCheck = 5,
  kWait = 6,
  kCancelWait = 12,
  kPing = 13,
};
constexpr uint32_t kValidationMagic = 0x3C85F7CE;
constexpr uint8_t kReady = 0;         // CHECK
constexpr uint8_t kStopWaiting = 0;   // WAIT
constexpr uint8_t kWaitCanceled = 1;  // CANCEL_WAIT

void AppendLe(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint64_t LoadLe(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(p[i])) << (8 * i);
  return v;
}
// torch.distributed.TCPStore's methods store every key under "/".
void AppendKey(std::string& out, std::string_view key) {
  AppendLe(out, key.size() + 1, 8);
  out.push_back('/');
  out.append(key.data(), key.size());
}
void AppendBytes(std::string& out, std::string_view value) {
  AppendLe(out, value.size(), 8);
  out.append(value.data(), value.size());
}
std::string KeyList(Query q, const std::vector<std::string>& keys) {
  std::string out(1, static_cast<char>(q));
  AppendLe(out, keys.size(), 8);
  for (const std::string& k : keys) AppendKey(out, k);
  return out;
}

int Remaining(std::chrono::steady_clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  return static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(left.count(), 1 << 30)));
}

// Non-blocking connect bounded by `deadline`; -1 with *error set when it fails.
int ConnectOnce(const addrinfo* ai, std::chrono::steady_clock::time_point deadline,
                std::string* error) {
  int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
  if (fd < 0) {
    *error = std::strerror(errno);
    return -1;
  }
  if (::connect(fd, ai->ai_addr, ai->ai_addrlen) != 0 && errno != EINPROGRESS) {
    *error = std::strerror(errno);
    ::close(fd);
    return -1;
  }
  pollfd p{fd, POLLOUT, 0};
  int r = ::poll(&p, 1, torch_wire::Remaining(deadline));
  int err = 0;
  socklen_t len = sizeof(err);
  if (r <= 0) {
    err = r == 0 ? ETIMEDOUT : errno;
  } else if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) {
    err = errno;
  }
  if (err != 0) {
    *error = std::strerror(err);
    ::close(fd);
    return -1;
  }
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

}  // namespace torch_wire
}  // namespace

std::string EncodeTorchStoreValidate() {
  std::string out(1, static_cast<char>(torch_wire::kValidate));
  torch_wire::AppendLe(out, torch_wire::kValidationMagic, 4);
  return out;
}

std::string EncodeTorchStorePing(uint32_t nonce) {
  std::string out(1, static_cast<char>(torch_wire::kPing));
  torch_wire::AppendLe(out, nonce, 4);
  return out;
}

std::string EncodeTorchStoreSet(std::string_view key, std::string_view value) {
  std::string out(1, static_cast<char>(torch_wire::kSet));
  torch_wire::AppendKey(out, key);
  torch_wire::AppendBytes(out, value);
  return out;
}

std::string EncodeTorchStoreGet(std::string_view key) {
  std::string out(1, static_cast<char>(torch_wire::kGet));
  torch_wire::AppendKey(out, key);
  return out;
}

std::string EncodeTorchStoreAdd(std::string_view key, int64_t delta) {
  std::string out(1, static_cast<char>(torch_wire::kAdd));
  torch_wire::AppendKey(out, key);
  torch_wire::AppendLe(out, static_cast<uint64_t>(delta), 8);
  return out;
}

std::string EncodeTorchStoreCheck(const std::vector<std::string>& keys) {
  return torch_wire::KeyList(torch_wire::kCheck, keys);
}

std::string EncodeTorchStoreWait(const std::vector<std::string>& keys) {
  return torch_wire::KeyList(torch_wire::kWait, keys);
}

absl::StatusOr<std::unique_ptr<TorchStoreClient>> TorchStoreClient::Connect(
    const std::string& host, int port, std::chrono::milliseconds timeout) {
  const std::string endpoint = absl::StrCat(host, ":", port);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string last_error = "no attempt";
  int delay_ms = 5;
  int fd = -1;
  while (fd < 0) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    int gai = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
    if (gai != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot resolve the TCPStore host '", host, "': ", ::gai_strerror(gai)));
    }
    for (const addrinfo* ai = res; ai != nullptr && fd < 0; ai = ai->ai_next) {
      fd = torch_wire::ConnectOnce(ai, deadline, &last_error);
    }
    ::freeaddrinfo(res);
    if (fd >= 0) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      return absl::UnavailableError(absl::StrCat("cannot reach the TCPStore at ", endpoint,
                                                 " within ", timeout.count(), " ms (", last_error,
                                                 ")"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    delay_ms = std::min(delay_ms * 2, 200);
  }
  std::unique_ptr<TorchStoreClient> client(new TorchStoreClient(fd, endpoint));
  // A TCPStore answers the ping with the nonce; anything else (our own store, another
  // service) closes the connection or says something else.
  const uint32_t nonce = static_cast<uint32_t>(::getpid());
  std::lock_guard<std::mutex> lock(client->mu_);
  absl::Status st = client->SendLocked(EncodeTorchStoreValidate() + EncodeTorchStorePing(nonce));
  char reply[4];
  if (st.ok()) {
    const auto ping_deadline =
        std::chrono::steady_clock::now() +
        std::max(std::chrono::milliseconds(1000), std::min(timeout, client->io_timeout_));
    st = client->RecvLocked(reply, sizeof(reply), ping_deadline, "the ping");
  }
  if (!st.ok() || torch_wire::LoadLe(reply, 4) != nonce) {
    return absl::UnavailableError(
        absl::StrCat("what listens at ", endpoint, " did not answer a PyTorch TCPStore ping (",
                     st.ok() ? "wrong nonce" : std::string(st.message()), ")"));
  }
  return client;
}

TorchStoreClient::~TorchStoreClient() { ::close(fd_); }

absl::Status TorchStoreClient::Broken(const std::string& why) {
  broken_ = true;
  return absl::UnavailableError(absl::StrCat("TCPStore at ", endpoint_, ": ", why));
}

absl::Status TorchStoreClient::SendLocked(const std::string& bytes) {
  if (broken_)
    return absl::UnavailableError(
        absl::StrCat("TCPStore at ", endpoint_, ": unusable after an earlier error"));
  const auto deadline = std::chrono::steady_clock::now() + io_timeout_;
  errno = 0;
  if (!WriteAll(fd_, bytes.data(), bytes.size(), torch_wire::Remaining(deadline))) {
    if (errno == 0 || errno == EAGAIN || errno == EWOULDBLOCK)
      return Broken("timed out sending a request");
    return Broken(absl::StrCat("connection lost (", std::strerror(errno), ")"));
  }
  return absl::OkStatus();
}

absl::Status TorchStoreClient::RecvLocked(char* p, size_t n,
                                          std::chrono::steady_clock::time_point deadline,
                                          const char* what) {
  while (n > 0) {
    ssize_t got = ::recv(fd_, p, n, 0);
    if (got > 0) {
      p += got;
      n -= static_cast<size_t>(got);
      continue;
    }
    if (got == 0) return Broken(absl::StrCat("the server closed the connection awaiting ", what));
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      return Broken(
          absl::StrCat("connection lost awaiting ", what, " (", std::strerror(errno), ")"));
    }
    pollfd pfd{fd_, POLLIN, 0};
    int r = ::poll(&pfd, 1, torch_wire::Remaining(deadline));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return Broken(absl::StrCat("no reply to ", what, " in time"));
  }
  return absl::OkStatus();
}

absl::Status TorchStoreClient::Set(std::string_view key, std::string_view value) {
  std::lock_guard<std::mutex> lock(mu_);
  return SendLocked(EncodeTorchStoreSet(key, value));
}

absl::Status TorchStoreClient::WaitLocked(const std::vector<std::string>& keys,
                                          std::chrono::milliseconds timeout) {
  if (auto st = SendLocked(EncodeTorchStoreWait(keys)); !st.ok()) return st;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    pollfd pfd{fd_, POLLIN, 0};
    int r = ::poll(&pfd, 1, torch_wire::Remaining(deadline));
    if (r < 0 && errno == EINTR) continue;
    if (r > 0) {
      char c;
      auto st = RecvLocked(&c, 1, std::chrono::steady_clock::now() + io_timeout_, "a wait");
      if (!st.ok()) return st;
      if (static_cast<uint8_t>(c) != torch_wire::kStopWaiting) return Broken("bad reply to a wait");
      return absl::OkStatus();
    }
    break;
  }
  // Timed out: cancel. The server answers WAIT_CANCELED, after the STOP_WAITING it may have
  // sent in the meantime (then the keys did arrive).
  if (auto st = SendLocked(std::string(1, static_cast<char>(torch_wire::kCancelWait))); !st.ok()) {
    return st;
  }
  const auto io_deadline = std::chrono::steady_clock::now() + io_timeout_;
  char c;
  if (auto st = RecvLocked(&c, 1, io_deadline, "a cancelled wait"); !st.ok()) return st;
  bool arrived = false;
  if (static_cast<uint8_t>(c) == torch_wire::kStopWaiting) {
    arrived = true;
    if (auto st = RecvLocked(&c, 1, io_deadline, "a cancelled wait"); !st.ok()) return st;
  }
  if (static_cast<uint8_t>(c) != torch_wire::kWaitCanceled) {
    return Broken("bad reply to a cancelled wait");
  }
  if (arrived) return absl::OkStatus();
  return absl::DeadlineExceededError(absl::StrCat(
      "timed out after ", timeout.count(), " ms waiting for key", keys.size() == 1 ? " '" : "s '",
      absl::StrJoin(keys, "', '"), "' in the TCPStore at ", endpoint_));
}

absl::Status TorchStoreClient::Wait(const std::vector<std::string>& keys,
                                    std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lock(mu_);
  return WaitLocked(keys, timeout);
}

absl::StatusOr<std::string> TorchStoreClient::Get(std::string_view key,
                                                  std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto st = WaitLocked({std::string(key)}, timeout); !st.ok()) return st;
  if (auto st = SendLocked(EncodeTorchStoreGet(key)); !st.ok()) return st;
  const auto deadline = std::chrono::steady_clock::now() + io_timeout_;
  char len_bytes[8];
  if (auto st = RecvLocked(len_bytes, 8, deadline, "a get"); !st.ok()) return st;
  const uint64_t len = torch_wire::LoadLe(len_bytes, 8);
  if (len > kMaxTorchStoreValueBytes) {
    return Broken(absl::StrCat("a ", len, "-byte value for '", std::string(key), "' is over the ",
                               kMaxTorchStoreValueBytes, "-byte cap"));
  }
  std::string value(len, '\0');
  if (auto st = RecvLocked(value.data(), len, deadline, "a get"); !st.ok()) return st;
  return value;
}

absl::StatusOr<bool> TorchStoreClient::Check(const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto st = SendLocked(EncodeTorchStoreCheck(keys)); !st.ok()) return st;
  char c;
  if (auto st = RecvLocked(&c, 1, std::chrono::steady_clock::now() + io_timeout_, "a check");
      !st.ok()) {
    return st;
  }
  return static_cast<uint8_t>(c) == torch_wire::kReady;
}

absl::StatusOr<int64_t> TorchStoreClient::Add(std::string_view key, int64_t delta) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto st = SendLocked(EncodeTorchStoreAdd(key, delta)); !st.ok()) return st;
  char v[8];
  if (auto st = RecvLocked(v, 8, std::chrono::steady_clock::now() + io_timeout_, "an add");
      !st.ok()) {
    return st;
  }
  return static_cast<int64_t>(torch_wire::LoadLe(v, 8));
}

}  // namespace trainscope::comm
