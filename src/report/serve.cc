// The live report server (serve.h) on cpp-httplib (Debian libcpp-httplib-dev, header-only,
// included here only). Two exact routes and nothing else: the server never maps a URL onto
// the file system, which is what rules out path traversal and directory listings. The run
// directory is read through ServeOptions::report.os; the socket is the machine's.
#include "trainscope/report/serve.h"

#include <httplib.h>
#include <sys/socket.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "report/collect.h"
#include "trainscope/core/run_dir.h"

namespace trainscope::report {

namespace {

constexpr int kServeMaxDepth = 4;  // run/train/tb/rank0/file is the deepest part read

// DNS rebinding: a page of another site whose name is made to resolve to 127.0.0.1 could read
// the run through the visitor's browser. Such a request carries that site's name in its Host
// header, so a server on a loopback address answers only Host names that are loopback.
bool ServeIsLoopbackName(std::string_view host) {
  if (host == "localhost" || host == "::1") return true;
  if (host.substr(0, 4) != "127.") return false;
  return host.find_first_not_of("0123456789.") == std::string_view::npos;  // 127.x.y.z
}

bool ServeLoopbackHostHeader(std::string_view host) {
  if (!host.empty() && host.front() == '[') {  // [::1]:8765
    host.remove_prefix(1);
    const size_t end = host.find(']');
    if (end == std::string_view::npos) return false;
    host = host.substr(0, end);
  } else if (const size_t colon = host.rfind(':'); colon != std::string_view::npos) {
    host = host.substr(0, colon);
  }
  return ServeIsLoopbackName(host);
}

std::string ServeHostForUrl(const std::string& bind) {
  return bind.find(':') != std::string::npos ? absl::StrCat("[", bind, "]") : bind;
}

}  // namespace

struct Server::Impl {
  ServeOptions options;
  httplib::Server http;
  std::thread thread;

  // One collection: the data model and its data.json body, shared with the requests that
  // read it (a new collection replaces the pointer; requests in flight keep the old one).
  struct Snapshot {
    nlohmann::json data;
    std::string body;
  };

  std::mutex mu;
  std::unique_ptr<ReportCollector> collector;  // guarded by mu: reads on where it stopped
  std::string fingerprint;  // guarded by mu: of the run directory when `snapshot` was collected
  std::shared_ptr<const Snapshot> snapshot;  // guarded by mu: null before the first request
  int64_t collections = 0;                   // guarded by mu

  // The run's data, collected again when the run directory changed; null with `error` set
  // when it cannot be collected.
  std::shared_ptr<const Snapshot> Data(std::string* error) {
    const std::string now = DirStamp(options.run_dir, kServeMaxDepth, options.report.os);
    std::lock_guard<std::mutex> lock(mu);
    if (snapshot != nullptr && now == fingerprint && !collector->findings_pending())
      return snapshot;
    if (collector == nullptr)
      collector = std::make_unique<ReportCollector>(std::vector<std::string>{options.run_dir},
                                                    options.report);
    absl::StatusOr<nlohmann::json> j = collector->Collect();
    if (!j.ok()) {
      *error = std::string(j.status().message());
      return nullptr;
    }
    auto next = std::make_shared<Snapshot>();
    next->body = j->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    next->data = *std::move(j);
    snapshot = std::move(next);
    fingerprint = std::move(now);
    ++collections;
    return snapshot;
  }

  void Routes() {
    if (ServeIsLoopbackName(options.bind)) {
      http.set_pre_routing_handler([](const httplib::Request& req, httplib::Response& res) {
        if (ServeLoopbackHostHeader(req.get_header_value("Host")))
          return httplib::Server::HandlerResponse::Unhandled;
        res.status = 403;
        res.set_content("trainscope serve answers only to localhost / 127.0.0.1 (Host header)\n",
                        "text/plain");
        return httplib::Server::HandlerResponse::Handled;
      });
    }
    http.Get("/", [this](const httplib::Request&, httplib::Response& res) {
      std::string error;
      const std::shared_ptr<const Snapshot> snap = Data(&error);
      if (snap == nullptr) {
        res.status = 503;
        res.set_content(absl::StrCat("trainscope serve: ", error, "\n"), "text/plain");
        return;
      }
      res.set_header("Cache-Control", "no-store");
      res.set_content(RenderReportHtml(snap->data, options.report), "text/html; charset=utf-8");
    });
    http.Get("/data.json", [this](const httplib::Request&, httplib::Response& res) {
      std::string error;
      res.set_header("Cache-Control", "no-store");
      const std::shared_ptr<const Snapshot> snap = Data(&error);
      if (snap == nullptr) {
        res.status = 503;
        res.set_content(nlohmann::json({{"error", error}}).dump(), "application/json");
        return;
      }
      res.set_content(snap->body, "application/json");
    });
    // Every other path, and any method but GET/HEAD on these two: a plain 404 body that
    // echoes nothing of the request.
    http.set_error_handler([](const httplib::Request&, httplib::Response& res) {
      if (res.status == 404 || res.status == 405 || res.status == 400) {
        res.status = 404;
        res.set_content("not found\n", "text/plain");
      }
    });
    http.Post(".*", [](const httplib::Request&, httplib::Response& res) { res.status = 404; });
    http.Put(".*", [](const httplib::Request&, httplib::Response& res) { res.status = 404; });
    http.Delete(".*", [](const httplib::Request&, httplib::Response& res) { res.status = 404; });
    // Open keep-alive connections would hold Stop() for the default 5 s.
    http.set_keep_alive_timeout(1);
    // httplib's default sets SO_REUSEPORT, with which a second server binds the same port and
    // the kernel splits the connections between the two: SO_REUSEADDR only (a restarted
    // server still binds while the old connections sit in TIME_WAIT), so a busy port fails.
    http.set_socket_options([](socket_t sock) {
      int yes = 1;
      setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    });
  }
};

Server::Server(std::unique_ptr<Impl> impl, int port) : impl_(std::move(impl)), port_(port) {}

absl::StatusOr<std::unique_ptr<Server>> Server::Start(const ServeOptions& options) {
  if (!options.report.os->IsDirectory(options.run_dir)) {
    return absl::NotFoundError(absl::StrCat(options.run_dir, ": no such run directory"));
  }
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("port ", options.port, " is not in 0..65535 (0: any free port)"));
  }
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->options.report.live = true;
  impl->Routes();
  int port = options.port;
  bool bound = port == 0 ? (port = impl->http.bind_to_any_port(options.bind)) > 0
                         : impl->http.bind_to_port(options.bind, port);
  if (!bound) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", ServeHostForUrl(options.bind),
                                               ":", options.port,
                                               " (in use, or not an address of this machine)"));
  }
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] { raw->http.listen_after_bind(); });
  // The socket already queues connections; wait until the accept loop runs, so that a
  // Stop() right after Start() cannot come before it (httplib ignores a stop then).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!impl->http.is_running() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return std::unique_ptr<Server>(new Server(std::move(impl), port));
}

Server::~Server() {
  Stop();
  Wait();
}

std::string Server::url() const {
  return absl::StrCat("http://", ServeHostForUrl(impl_->options.bind), ":", port_, "/");
}

int64_t Server::data_collections() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->collections;
}

void Server::Stop() { impl_->http.stop(); }

void Server::Wait() {
  if (impl_->thread.joinable()) impl_->thread.join();
}

}  // namespace trainscope::report
