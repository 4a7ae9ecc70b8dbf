// `trainscope serve RUN_DIR`: the report page (report.h), live, over HTTP, so a run can be
// watched in a browser while `trainscope train` (or a user job writing the metrics format)
// writes into its run directory.
//
// Routes (GET and HEAD; anything else is 404, so there is no path traversal and no
// directory listing: no request names a file):
//   /           RenderReportHtml(live = true): the page, which fetches data.json every 2 s
//   /data.json  The run directory's report data (ReportCollector: only the metrics lines
//               appended since the last collection are parsed); cached, and collected again
//               only when a file of the run directory changed size or modification time.
//               Findings (diagnose reads the whole run) follow appended metrics lines with a
//               delay of up to 10x diagnose's own duration (CollectorOptions), at once any
//               other change.
//
// Listens on 127.0.0.1 unless ServeOptions::bind names another address: the page shows the
// run's paths, host names and configuration, which should not reach the network unasked.
// Thread-safety: Start, Stop and Wait may be called from any thread; requests are served on
// the server's own threads. The library installs no signal handler (the CLI stops the server
// on SIGINT/SIGTERM by calling Stop).
#ifndef TRAINSCOPE_REPORT_SERVE_H_
#define TRAINSCOPE_REPORT_SERVE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "trainscope/report/report.h"

namespace trainscope::report {

inline constexpr char kDefaultBindAddress[] = "127.0.0.1";
inline constexpr int kDefaultServePort = 8765;

struct ServeOptions {
  std::string run_dir;
  std::string bind = kDefaultBindAddress;  // a numeric IPv4/IPv6 address or a host name
  int port = kDefaultServePort;            // 0: any free port (Server::port() says which)
  // `live` is set by the server; `report.os` is the file system run_dir is read in (the
  // HTTP socket is always the machine's).
  ReportOptions report;
};

class Server {
 public:
  // Checks that run_dir is a directory, binds the address and starts serving on a thread of
  // its own; returns once connections are accepted. Errors: NotFound (no such directory),
  // InvalidArgument (port outside 0..65535), Unavailable naming the address and port when it
  // cannot be bound (in use, not an address of this machine).
  static absl::StatusOr<std::unique_ptr<Server>> Start(const ServeOptions& options);
  ~Server();  // Stop() and Wait()
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  int port() const { return port_; }  // the bound port
  // "http://<bind>:<port>/" (an IPv6 address in brackets).
  std::string url() const;
  // How many times data.json was collected (not served from the cache) so far.
  int64_t data_collections() const;

  // Asks the server to stop: no new connection is accepted and open ones end within about a
  // second. Non-blocking, idempotent, safe from any thread (not from a signal handler).
  void Stop();
  // Blocks until the serving thread has ended (after Stop()). One thread waits.
  void Wait();

  struct Impl;  // serve.cc

 private:
  explicit Server(std::unique_ptr<Impl> impl, int port);
  std::unique_ptr<Impl> impl_;
  const int port_;
};

}  // namespace trainscope::report

#endif  // TRAINSCOPE_REPORT_SERVE_H_
