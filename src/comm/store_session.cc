// StoreSession and JoinStore: a rank's membership in the job's rendezvous store (store.h).
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "comm/store.h"
#include "trainscope/core/env_vars.h"

namespace trainscope::comm {

absl::StatusOr<std::unique_ptr<StoreSession>> JoinStore(const std::string& master_addr,
                                                        int master_port, int rank, int world_size,
                                                        std::chrono::milliseconds timeout) {
  CommOptions o;
  o.master_addr = master_addr;
  o.master_port = master_port;
  o.rank = rank;
  o.world_size = world_size;
  o.timeout = timeout;
  return JoinStore(o);
}

absl::StatusOr<std::unique_ptr<StoreSession>> JoinStore(const CommOptions& options) {
  const std::string& master_addr = options.master_addr;
  const int master_port = options.master_port;
  const int rank = options.rank;
  const int world_size = options.world_size;
  const std::chrono::milliseconds timeout = options.timeout;
  auto session = std::make_unique<StoreSession>();
  session->timeout = timeout;
  const std::string token = options.job_token.value_or(JobTokenFromEnvironment());
  if (token.size() > kMaxJobTokenBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(envvar::kJobToken, " is longer than ", kMaxJobTokenBytes, " bytes"));
  }
  if (rank == 0) {
    StoreServerOptions so;
    so.bind_host = master_addr;
    so.port = master_port;
    so.world_size = world_size;
    so.token = token;
    so.log = options.host.notice;  // the first refused connection of each kind
    auto server = TcpStoreServer::Start(so);
    if (!server.ok()) return server.status();
    session->server = std::move(*server);
    if (options.on_store_listening) {
      auto st = options.on_store_listening(session->server->host(), session->server->port());
      if (!st.ok()) return st;
    }
  }
  // Rank 0 reaches its own server at the address it bound.
  const std::string host = session->server != nullptr ? session->server->host() : master_addr;
  const int port = session->server != nullptr ? session->server->port() : master_port;
  auto client = TcpStoreClient::Connect(host, port, timeout, token);
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

std::string LocalAddressToward(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0) {
    return "127.0.0.1";
  }
  std::string out = "127.0.0.1";
  int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd >= 0 && ::connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
    sockaddr_in local{};
    socklen_t len = sizeof(local);
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      char buf[INET_ADDRSTRLEN];
      if (::inet_ntop(AF_INET, &local.sin_addr, buf, sizeof(buf)) != nullptr) out = buf;
    }
  }
  if (fd >= 0) ::close(fd);
  ::freeaddrinfo(res);
  return out;
}

}  // namespace trainscope::comm
