// JoinWorld: the rendezvous of every launcher (join.h), then Communicator::Create.
#include "trainscope/comm/join.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "comm/store.h"
#include "comm/torch_store.h"
#include "trainscope/comm/comm.h"
#include "trainscope/core/os.h"

namespace trainscope::comm {
namespace {

// What rank 0 writes under the agent store key: "<magic> <host> <port> <token>".
constexpr char kAnnouncementMagic[] = "trainscope.store/1";

struct Announcement {
  std::string host;
  int port = 0;
  std::string token;
};

absl::StatusOr<Announcement> ParseAnnouncement(const std::string& text, const std::string& key) {
  std::vector<std::string> f = absl::StrSplit(text, ' ');
  Announcement a;
  if (f.size() != 4 || f[0] != kAnnouncementMagic || f[1].empty() ||
      !absl::SimpleAtoi(f[2], &a.port) || a.port <= 0 || a.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the agent store's key '", key, "' does not hold a trainscope store address (", text.size(),
        " bytes): another program uses this key, or the ranks run different "
        "trainscope versions"));
  }
  a.host = f[1];
  a.token = f[3];
  return a;
}

// torchrun with the agent's store on MASTER_PORT: rank 0 starts ours on a free port and
// announces it there; the others wait for the announcement. Then as under trainscope launch.
absl::StatusOr<std::unique_ptr<Communicator>> JoinThroughAgentStore(const JoinOptions& jo) {
  CommOptions co = jo.comm;
  const std::string& key = jo.agent_store_key;
  auto agent = TorchStoreClient::Connect(co.master_addr, co.master_port, co.timeout);
  if (!agent.ok()) {
    return absl::Status(agent.status().code(),
                        absl::StrCat("torchrun's agent store (MASTER_ADDR:MASTER_PORT, "
                                     "TORCHELASTIC_USE_AGENT_STORE=True): ",
                                     agent.status().message()));
  }
  std::shared_ptr<TorchStoreClient> client = std::move(*agent);
  if (co.rank == 0) {
    auto token = RandomHexToken();
    if (!token.ok()) return token.status();
    co.job_token = *token;
    co.master_addr = LocalAddressToward(co.master_addr, co.master_port);
    co.master_port = 0;  // any free port: the agent's store holds MASTER_PORT
    // Called inside Create below, while `client` is held here; the communicator's copy of
    // the options must not keep the agent connection open for the whole job.
    std::weak_ptr<TorchStoreClient> weak = client;
    co.on_store_listening = [weak, key, token = *token](const std::string& host,
                                                        int port) -> absl::Status {
      std::shared_ptr<TorchStoreClient> c = weak.lock();
      if (c == nullptr) return absl::FailedPreconditionError("torchrun's agent store is closed");
      absl::Status st =
          c->Set(key, absl::StrCat(kAnnouncementMagic, " ", host, " ", port, " ", token));
      if (st.ok()) {
        // A round trip: the server has stored the key before this rank goes on.
        auto there = c->Check({key});
        st = !there.ok() ? there.status()
             : *there    ? absl::OkStatus()
                         : absl::InternalError("the key is not there after setting it");
      }
      if (st.ok()) return st;
      return absl::Status(st.code(), absl::StrCat("announcing the rendezvous store in "
                                                  "torchrun's agent store failed: ",
                                                  st.message()));
    };
    return Communicator::Create(co);
  }
  auto text = client->Get(key, co.timeout);
  if (!text.ok()) {
    if (absl::IsDeadlineExceeded(text.status())) {
      return absl::DeadlineExceededError(absl::StrCat(
          "rank 0 did not announce its rendezvous store within ", co.timeout.count() / 1000.0,
          " s (key '", key, "' in torchrun's agent store at ", client->endpoint(),
          "): is rank 0 running trainscope too, with the same backend?"));
    }
    return text.status();
  }
  auto a = ParseAnnouncement(*text, key);
  if (!a.ok()) return a.status();
  client.reset();  // the announcement is all this rank needs from the agent
  co.master_addr = a->host;
  co.master_port = a->port;
  co.job_token = a->token;
  return Communicator::Create(co);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> JoinWorld(const JoinOptions& options) {
  if (options.rendezvous == Rendezvous::kAgentStore) return JoinThroughAgentStore(options);
  if (options.comm.world_size == 1) {
    // Nobody else connects: any free loopback port, not MASTER_PORT (which torchrun's agent
    // store, or another job, may hold).
    CommOptions co = options.comm;
    co.master_addr = "127.0.0.1";
    co.master_port = 0;
    return Communicator::Create(co);
  }
  return Communicator::Create(options.comm);
}

}  // namespace trainscope::comm
