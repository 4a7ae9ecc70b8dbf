// TorchStoreClient: the wire format, then against a real torch.distributed.TCPStore (the
// venv's torch, both server backends) started by a Python child, and JoinWorld through it as
// torchrun's agent store. Skipped when there is no Python with torch.
#include "comm/torch_store.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "comm/store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainscope/comm/join.h"

namespace trainscope::comm {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

TEST(TorchStoreWireTest, Encodings) {
  EXPECT_EQ(EncodeTorchStoreValidate(), std::string("\x00\xce\xf7\x85\x3c", 5));
  EXPECT_EQ(EncodeTorchStorePing(0x01020304), std::string("\x0d\x04\x03\x02\x01", 5));
  // SET: u8 1, key "/k" as u64 length + bytes, value as u64 length + bytes.
  EXPECT_EQ(EncodeTorchStoreSet("k", "vv"),
            std::string("\x01\x02\0\0\0\0\0\0\0/k\x02\0\0\0\0\0\0\0vv", 1 + 8 + 2 + 8 + 2));
  EXPECT_EQ(EncodeTorchStoreGet("k"), std::string("\x03\x02\0\0\0\0\0\0\0/k", 11));
  EXPECT_EQ(EncodeTorchStoreAdd("k", -1),
            std::string("\x04\x02\0\0\0\0\0\0\0/k", 11) + std::string(8, '\xff'));
  // WAIT / CHECK: u8, u64 key count, keys.
  EXPECT_EQ(EncodeTorchStoreWait({"a", "b"}), std::string("\x06\x02\0\0\0\0\0\0\0", 9) +
                                                  std::string("\x02\0\0\0\0\0\0\0/a", 10) +
                                                  std::string("\x02\0\0\0\0\0\0\0/b", 10));
  EXPECT_EQ(EncodeTorchStoreCheck({"a"})[0], '\x05');
}

TEST(TorchStoreWireTest, RefusesWhatIsNoTcpStore) {
  // Nothing listens: Unavailable within the timeout.
  auto none = TorchStoreClient::Connect("127.0.0.1", 1, 200ms);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kUnavailable);
  // trainscope's own store closes a connection whose first frame is not its Auth.
  auto ours = TcpStoreServer::Start(0, 1);
  ASSERT_TRUE(ours.ok());
  auto c = TorchStoreClient::Connect("127.0.0.1", (*ours)->port(), 2s);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("TCPStore ping"));
}

// The Python side: a TCPStore server (torch's own), driven through stdin/stdout.
constexpr char kServerScript[] = R"PY(
import sys, time
from datetime import timedelta
try:
    from torch.distributed import TCPStore
except Exception as e:
    print("NO_TORCH", e, flush=True)
    sys.exit(0)
mode, libuv = sys.argv[1], sys.argv[2] == "1"
s = TCPStore("127.0.0.1", 0, 1, True, timeout=timedelta(seconds=30),
             wait_for_workers=False, use_libuv=libuv)
if mode == "serve":
    print("PORT", s.port, flush=True)
    sys.stdin.read()
    sys.exit(0)
s.set("py_key", b"hello from python")
print("PORT", s.port, flush=True)
s.wait(["cpp_key"])
time.sleep(0.3)
s.set("late", "arrived")
s.wait(["cpp_done"])
print("GOT", s.get("cpp_key").decode(), s.add("counter", 0), flush=True)
sys.stdin.read()
)PY";

std::string FindPython() {
  if (const char* p = std::getenv("TS_PYTHON3"); p != nullptr && *p != '\0') return p;
  if (const char* src = std::getenv("TS_SOURCE_DIR"); src != nullptr) {
    std::string venv = std::string(src) + "/.venv/bin/python";
    if (std::filesystem::exists(venv)) return venv;
  }
  return "";
}

class PythonStore {
 public:
  // Starts the script; returns false (with why) when Python or torch is missing.
  bool Start(const std::string& mode, bool libuv, std::string* why) {
    const std::string python = FindPython();
    if (python.empty()) {
      *why = "no venv Python (TS_SOURCE_DIR/.venv/bin/python)";
      return false;
    }
    int in[2], out[2];
    if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0) return false;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(in[0], 0);
      ::dup2(out[1], 1);
      ::execl(python.c_str(), python.c_str(), "-c", kServerScript, mode.c_str(), libuv ? "1" : "0",
              static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ::close(in[0]);
    ::close(out[1]);
    stdin_ = in[1];
    stdout_ = out[0];
    std::string line = ReadLine(60s);
    if (line.rfind("PORT ", 0) != 0) {
      *why = "the Python TCPStore did not start: " + line;
      return false;
    }
    port_ = std::stoi(line.substr(5));
    return true;
  }
  // One line of the script's stdout ("" on timeout or EOF).
  std::string ReadLine(std::chrono::milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      size_t nl = buf_.find('\n');
      if (nl != std::string::npos) {
        std::string line = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        return line;
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return "";
      pollfd p{stdout_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return "";
      char b[512];
      ssize_t n = ::read(stdout_, b, sizeof(b));
      if (n <= 0) return "";
      buf_.append(b, static_cast<size_t>(n));
    }
  }
  int port() const { return port_; }
  ~PythonStore() {
    if (stdin_ >= 0) ::close(stdin_);  // the script ends on EOF
    if (pid_ > 0) {
      int status;
      for (int i = 0; i < 100 && ::waitpid(pid_, &status, WNOHANG) == 0; ++i) {
        std::this_thread::sleep_for(50ms);
        if (i == 60) ::kill(pid_, SIGKILL);
      }
    }
    if (stdout_ >= 0) ::close(stdout_);
  }

 private:
  pid_t pid_ = -1;
  int stdin_ = -1;
  int stdout_ = -1;
  int port_ = 0;
  std::string buf_;
};

class TorchStoreTest : public ::testing::TestWithParam<bool> {};  // libuv backend or not

TEST_P(TorchStoreTest, TalksToARealTcpStore) {
  PythonStore py;
  std::string why;
  if (!py.Start("drive", GetParam(), &why)) GTEST_SKIP() << why;
  auto c = TorchStoreClient::Connect("127.0.0.1", py.port(), 10s);
  ASSERT_TRUE(c.ok()) << c.status();
  TorchStoreClient& store = **c;
  auto v = store.Get("py_key", 5s);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, "hello from python");
  EXPECT_TRUE(*store.Check({"py_key"}));
  EXPECT_FALSE(*store.Check({"py_key", "nope"}));
  // A wait that times out is cancelled; the connection stays usable.
  auto st = store.Wait({"never"}, 300ms);
  EXPECT_EQ(st.code(), absl::StatusCode::kDeadlineExceeded) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr("'never'"));
  EXPECT_TRUE(*store.Check({"py_key"}));
  ASSERT_TRUE(store.Set("cpp_key", "hi from c++").ok());
  // Set by Python 0.3 s after it saw cpp_key: Get waits for it.
  v = store.Get("late", 10s);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, "arrived");
  EXPECT_EQ(*store.Add("counter", 5), 5);
  EXPECT_EQ(*store.Add("counter", 2), 7);
  ASSERT_TRUE(store.Set("cpp_done", "1").ok());
  EXPECT_EQ(py.ReadLine(20s), "GOT hi from c++ 7");
}

bool HaveGloo() {
  for (const std::string& b : AvailableBackends())
    if (b == "gloo") return true;
  return false;
}

TEST(JoinWorldTest, AWorldOfOneTakesAnyFreePort) {
  if (!HaveGloo()) GTEST_SKIP() << "gloo backend not built";
  auto busy = TcpStoreServer::Start(0, 1);  // holds "MASTER_PORT", as torchrun's agent does
  ASSERT_TRUE(busy.ok());
  JoinOptions jo;
  jo.launcher = Launcher::kTorchrun;
  jo.comm.master_port = (*busy)->port();
  jo.comm.timeout = 5s;
  auto c = JoinWorld(jo);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE((*c)->Barrier().ok());
}

TEST_P(TorchStoreTest, JoinWorldThroughTheAgentStore) {
  if (!HaveGloo()) GTEST_SKIP() << "gloo backend not built";
  PythonStore py;
  std::string why;
  if (!py.Start("serve", GetParam(), &why)) GTEST_SKIP() << why;
  constexpr int kWorld = 3;
  std::vector<absl::Status> results(kWorld);
  std::vector<std::thread> ranks;
  for (int r = 0; r < kWorld; ++r) {
    ranks.emplace_back([&, r] {
      JoinOptions jo;
      jo.launcher = Launcher::kTorchrun;
      jo.rendezvous = Rendezvous::kAgentStore;
      jo.agent_store_key = "trainscope/test/0/store";
      jo.comm.rank = r;
      jo.comm.world_size = kWorld;
      jo.comm.master_addr = "127.0.0.1";
      jo.comm.master_port = py.port();
      jo.comm.timeout = 20s;
      jo.comm.flight_recorder_entries = 0;
      auto c = JoinWorld(jo);
      if (!c.ok()) {
        results[r] = c.status();
        return;
      }
      int64_t x = r + 1;
      results[r] = (*c)->AllReduce(&x, 1, DType::kInt64);
      if (results[r].ok() && x != 6) results[r] = absl::InternalError("wrong sum");
    });
  }
  for (auto& t : ranks) t.join();
  for (int r = 0; r < kWorld; ++r)
    EXPECT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r];
}

TEST_P(TorchStoreTest, JoinWorldNamesAMissingRankZero) {
  PythonStore py;
  std::string why;
  if (!py.Start("serve", GetParam(), &why)) GTEST_SKIP() << why;
  JoinOptions jo;
  jo.rendezvous = Rendezvous::kAgentStore;
  jo.agent_store_key = "trainscope/test/0/store";
  jo.comm.rank = 1;
  jo.comm.world_size = 2;
  jo.comm.master_addr = "127.0.0.1";
  jo.comm.master_port = py.port();
  jo.comm.timeout = 500ms;
  auto c = JoinWorld(jo);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kDeadlineExceeded) << c.status();
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("rank 0 did not announce"));
}

INSTANTIATE_TEST_SUITE_P(Backends, TorchStoreTest, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return i.param ? "libuv" : "classic";
                         });

}  // namespace
}  // namespace trainscope::comm
