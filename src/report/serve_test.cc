// The live report server (serve.h): the two routes, data.json following a metrics file that
// grows (and cached while it does not; a line written in two parts read as a full collection
// reads it), 404 for every other path (traversal with dots, encoded dots, the run
// directory's real files, directories), a clean stop with a connection open, and no answer
// on a non-loopback address of this machine unless --bind asks for one.
#include "trainscope/report/serve.h"

#include <arpa/inet.h>
#include <httplib.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace trainscope::report {
namespace {

namespace fs = std::filesystem;

std::string ServeStepLine(int step) {
  nlohmann::json j = {{"type", "step"},
                      {"step", step},
                      {"loss", 4.0 - 0.01 * step},
                      {"lr", 1e-3},
                      {"grad_norm", 1.5},
                      {"tokens", 512},
                      {"step_ms", 20.0},
                      {"tokens_per_s", 25600.0},
                      {"phases_ms",
                       {{"data_wait", 1.0},
                        {"h2d", 0.5},
                        {"forward", 6.0},
                        {"backward", 10.0},
                        {"comm_wait", 0.0},
                        {"optimizer", 2.5}}},
                      {"comm_ms", 0.0},
                      {"host_rss_bytes", 100000000},
                      {"device_mem_allocated_bytes", nullptr},
                      {"device_mem_peak_bytes", nullptr}};
  return j.dump() + "\n";
}

class ServeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() /
            ("serve_test." + std::to_string(getpid()) + "." +
             ::testing::UnitTest::GetInstance()->current_test_info()->name()))
               .string();
    fs::remove_all(dir_);
    fs::create_directories(dir_ + "/train");
    metrics_ = dir_ + "/train/metrics.rank0.jsonl";
    nlohmann::json header = {{"type", "header"},
                             {"format", "trainscope.train_metrics"},
                             {"version", 1},
                             {"rank", 0},
                             {"world_size", 1},
                             {"params", 1000},
                             {"start_unix_us", 1750000000000000LL},
                             {"config", nlohmann::json::object()}};
    std::ofstream out(metrics_);
    out << header.dump() << "\n";
    for (int s = 1; s <= 20; ++s) out << ServeStepLine(s);
  }
  void TearDown() override { fs::remove_all(dir_); }

  void Append(int step) {
    std::ofstream out(metrics_, std::ios::app);
    out << ServeStepLine(step);
  }

  std::string dir_, metrics_;
};

// The last step of rank 0's loss series in a data.json body.
int64_t ServeLastLossStep(const std::string& body) {
  nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded()) return -1;
  const nlohmann::json& x = j["runs"][0]["ranks"][0]["series"]["loss"]["x"];
  return x.empty() ? -1 : x.back().get<int64_t>();
}

// One request written byte for byte (a client library could normalise the path); the
// status code and body of the answer.
int ServeRawGet(int port, const std::string& target, std::string* body,
                const std::string& host = "127.0.0.1") {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return -1;
  }
  const std::string req =
      "GET " + target + " HTTP/1.1\r\nHost: " + host + "\r\nConnection: close\r\n\r\n";
  if (write(fd, req.data(), req.size()) != static_cast<ssize_t>(req.size())) {
    close(fd);
    return -1;
  }
  std::string resp;
  char buf[4096];
  for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) resp.append(buf, static_cast<size_t>(n));
  close(fd);
  if (resp.compare(0, 9, "HTTP/1.1 ") != 0) return -1;
  const size_t blank = resp.find("\r\n\r\n");
  *body = blank == std::string::npos ? "" : resp.substr(blank + 4);
  return std::stoi(resp.substr(9, 3));
}

TEST_F(ServeTest, PageAndDataFollowTheMetricsFile) {
  ServeOptions o;
  o.run_dir = dir_;
  o.port = 0;
  auto server = Server::Start(o);
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  ASSERT_GT(port, 0);
  EXPECT_EQ((*server)->url(), "http://127.0.0.1:" + std::to_string(port) + "/");

  httplib::Client client("127.0.0.1", port);
  auto page = client.Get("/");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_NE(page->get_header_value("Content-Type").find("text/html"), std::string::npos);
  EXPECT_NE(page->body.find("data.json"), std::string::npos) << "the live page polls data.json";

  auto data = client.Get("/data.json");
  ASSERT_TRUE(data);
  EXPECT_EQ(data->status, 200);
  EXPECT_EQ(ServeLastLossStep(data->body), 20);
  // Unchanged files: the cached body, not collected again.
  const int64_t collections = (*server)->data_collections();
  auto again = client.Get("/data.json");
  ASSERT_TRUE(again);
  EXPECT_EQ(again->body, data->body);
  EXPECT_EQ((*server)->data_collections(), collections);

  Append(21);
  auto grown = client.Get("/data.json");
  ASSERT_TRUE(grown);
  EXPECT_EQ(ServeLastLossStep(grown->body), 21);
  EXPECT_EQ((*server)->data_collections(), collections + 1);
}

// data.json is collected incrementally: a line written in two parts shows once complete, and
// every rank's data equals a collection from scratch (findings may lag: serve.h).
TEST_F(ServeTest, DataFollowsALineWrittenInTwoPartsAsAFullCollectionWould) {
  ServeOptions o;
  o.run_dir = dir_;
  o.port = 0;
  auto server = Server::Start(o);
  ASSERT_TRUE(server.ok()) << server.status();
  httplib::Client client("127.0.0.1", (*server)->port());
  auto ranks_of = [](const std::string& body) {
    return nlohmann::json::parse(body, nullptr, false)["runs"][0]["ranks"];
  };
  auto full_ranks = [&] {
    absl::StatusOr<nlohmann::json> j = CollectReportData({dir_}, o.report);
    return j.ok() ? (*j)["runs"][0]["ranks"] : nlohmann::json();
  };
  ASSERT_TRUE(client.Get("/data.json"));
  const std::string line = ServeStepLine(21);
  { std::ofstream(metrics_, std::ios::app) << line.substr(0, 30); }
  auto partial = client.Get("/data.json");
  ASSERT_TRUE(partial);
  EXPECT_EQ(ServeLastLossStep(partial->body), 20);
  EXPECT_EQ(ranks_of(partial->body)[0]["truncated_last_line"], true);
  EXPECT_EQ(ranks_of(partial->body), full_ranks());
  { std::ofstream(metrics_, std::ios::app) << line.substr(30); }
  Append(22);
  auto done = client.Get("/data.json");
  ASSERT_TRUE(done);
  EXPECT_EQ(ServeLastLossStep(done->body), 22);
  EXPECT_EQ(ranks_of(done->body)[0]["truncated_last_line"], false);
  EXPECT_EQ(ranks_of(done->body), full_ranks());
}

TEST_F(ServeTest, EverythingElseIs404) {
  ServeOptions o;
  o.run_dir = dir_;
  o.port = 0;
  auto server = Server::Start(o);
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  std::string body;
  ASSERT_EQ(ServeRawGet(port, "/data.json", &body), 200);  // the control
  for (const char* target :
       {"/../etc/passwd", "/../../../../etc/passwd", "/%2e%2e/%2e%2e/etc/passwd", "/%2e%2e/",
        "/..%2fetc%2fpasswd", "/data.json/../../etc/passwd", "//etc/passwd", "/etc/passwd",
        "/train/", "/train", "/train/metrics.rank0.jsonl", "/index.html", "/./data.json",
        "/data.json%00"}) {
    SCOPED_TRACE(target);
    const int code = ServeRawGet(port, target, &body);
    EXPECT_TRUE(code == 404 || code == 400) << code;
    EXPECT_EQ(body.find("root:"), std::string::npos);
    EXPECT_EQ(body.find("metrics.rank0"), std::string::npos);  // no listing
    EXPECT_EQ(body.find("\"step\""), std::string::npos);       // no file content
  }
  // Query strings are ignored: the page is still the page.
  EXPECT_EQ(ServeRawGet(port, "/?x=1", &body), 200);
}

// A browser sends the name it resolved in Host: another site's name (DNS rebinding) is refused
// on the loopback address; loopback names with or without a port are served.
TEST_F(ServeTest, LoopbackServerRefusesForeignHostNames) {
  ServeOptions o;
  o.run_dir = dir_;
  o.port = 0;
  auto server = Server::Start(o);
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  std::string body;
  for (const std::string& host :
       std::vector<std::string>{"127.0.0.1", "localhost", "127.0.0.1:" + std::to_string(port),
                                "localhost:" + std::to_string(port), "[::1]:80"}) {
    SCOPED_TRACE(host);
    EXPECT_EQ(ServeRawGet(port, "/data.json", &body, host), 200);
  }
  for (const std::string& host :
       std::vector<std::string>{"evil.example", "evil.example:" + std::to_string(port),
                                "127.0.0.1.evil.example", "", "[::1"}) {
    SCOPED_TRACE(host);
    EXPECT_EQ(ServeRawGet(port, "/data.json", &body, host), 403);
    EXPECT_EQ(body.find("\"step\""), std::string::npos);
  }
}

TEST_F(ServeTest, StopsWithAConnectionOpen) {
  ServeOptions o;
  o.run_dir = dir_;
  o.port = 0;
  auto server = Server::Start(o);
  ASSERT_TRUE(server.ok()) << server.status();
  httplib::Client client("127.0.0.1", (*server)->port());
  client.set_keep_alive(true);
  ASSERT_TRUE(client.Get("/data.json"));
  const auto t0 = std::chrono::steady_clock::now();
  (*server)->Stop();
  (*server)->Wait();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 3.0);
  std::string body;
  EXPECT_EQ(ServeRawGet((*server)->port(), "/", &body), -1);  // nothing listens any more
}

TEST_F(ServeTest, BadRunDirectoryAndBusyPort) {
  ServeOptions o;
  o.run_dir = dir_ + "/nonexistent";
  o.port = 0;
  auto missing = Server::Start(o);
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(absl::IsNotFound(missing.status())) << missing.status();
  EXPECT_NE(missing.status().message().find(o.run_dir), std::string::npos);

  o.run_dir = dir_;
  auto first = Server::Start(o);
  ASSERT_TRUE(first.ok()) << first.status();
  o.port = (*first)->port();
  auto second = Server::Start(o);
  ASSERT_FALSE(second.ok());
  EXPECT_TRUE(absl::IsUnavailable(second.status())) << second.status();
  EXPECT_NE(second.status().message().find(std::to_string(o.port)), std::string::npos);
}

// An IPv4 address of an interface that is up and not loopback; "" when there is none.
std::string ServeNonLoopbackAddress() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return "";
  std::string found;
  for (ifaddrs* i = list; i != nullptr && found.empty(); i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    if ((i->ifa_flags & IFF_UP) == 0 || (i->ifa_flags & IFF_LOOPBACK) != 0) continue;
    char text[INET_ADDRSTRLEN];
    const auto* a = reinterpret_cast<const sockaddr_in*>(i->ifa_addr);
    if ((ntohl(a->sin_addr.s_addr) >> 24) == 127) continue;
    if (inet_ntop(AF_INET, &a->sin_addr, text, sizeof(text)) != nullptr) found = text;
  }
  freeifaddrs(list);
  return found;
}

bool ServeCanConnect(const std::string& ip, int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, ip.c_str(), &a.sin_addr);
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  close(fd);
  return ok;
}

TEST_F(ServeTest, NotReachableOnANonLoopbackAddressByDefault) {
  const std::string ip = ServeNonLoopbackAddress();
  if (ip.empty()) GTEST_SKIP() << "this machine has no non-loopback IPv4 address to try";
  ServeOptions o;
  o.run_dir = dir_;
  o.port = 0;
  {
    auto server = Server::Start(o);
    ASSERT_TRUE(server.ok()) << server.status();
    EXPECT_TRUE(ServeCanConnect("127.0.0.1", (*server)->port()));
    EXPECT_FALSE(ServeCanConnect(ip, (*server)->port())) << ip;
  }
  // The control: asked to, the server does answer on that address, so the check above can
  // tell the two apart.
  o.bind = "0.0.0.0";
  auto open = Server::Start(o);
  ASSERT_TRUE(open.ok()) << open.status();
  EXPECT_TRUE(ServeCanConnect(ip, (*open)->port())) << ip;
}

}  // namespace
}  // namespace trainscope::report
