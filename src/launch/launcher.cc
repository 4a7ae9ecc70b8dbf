// The launcher's event loop: fork/exec every rank, multiplex their output into logs and
// the terminal, reap them, and stop the job when one fails or a signal arrives.
//
// Single-threaded on purpose: fork() from a multi-threaded process is a minefield, and one
// poll() loop over the output pipes, a self-pipe for signals and a short timeout for
// waitpid() is all the concurrency a launcher needs.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "launch/hang_dump.h"
#include "launch/reaper.h"
#include "nlohmann/json.hpp"
#include "trainscope/core/env_vars.h"
#include "trainscope/core/os.h"
#include "trainscope/core/run_dir.h"
#include "trainscope/core/run_dir_lock.h"
#include "trainscope/launch/launch.h"

extern char** environ;

namespace trainscope::launch {
namespace {

std::string HostName() {
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) return "localhost";
  return host;
}

int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// Signal plumbing: the handler only records the signal and wakes poll().
volatile sig_atomic_t g_signals_seen = 0;
volatile sig_atomic_t g_last_signal = 0;
int g_wake_fd = -1;

void OnSignal(int sig) {
  g_last_signal = sig;
  g_signals_seen = g_signals_seen + 1;
  if (g_wake_fd >= 0) {
    int saved = errno;
    char c = 1;
    (void)!::write(g_wake_fd, &c, 1);
    errno = saved;
  }
}

std::string SignalName(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev != nullptr ? absl::StrCat("SIG", abbrev) : absl::StrCat("signal ", sig);
}

std::string CpuListText(const std::vector<int>& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    absl::StrAppend(&out, out.empty() ? "" : ",", cpus[i]);
    if (j > i) absl::StrAppend(&out, "-", cpus[j]);
    i = j + 1;
  }
  return out;
}

struct Stream {
  int fd = -1;      // read end of the rank's pipe; -1 once closed
  int log_fd = -1;  // rank<R>/{stdout,stderr}.log
  FILE* live = nullptr;
  std::string partial;  // bytes after the last newline
};

struct Child {
  RankStatus status;
  pid_t pid = -1;
  bool reaped = false;
  int exec_fd = -1;  // CLOEXEC pipe: EOF = exec'd, 4 bytes = errno of a failed exec
  Stream out, err;
  std::deque<std::string> tail;
};

void WriteAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void AddTail(Child& c, std::string line, int max_lines) {
  c.tail.push_back(std::move(line));
  while (static_cast<int>(c.tail.size()) > max_lines) c.tail.pop_front();
}

void EchoLine(FILE* f, int rank, const std::string& line, const LaunchOptions& o) {
  if (o.live_prefix) {
    std::fprintf(f, "[rank %d] %s\n", rank, line.c_str());
  } else {
    std::fprintf(f, "%s\n", line.c_str());
  }
}

// Emits complete lines of `s` (all of it when `flush`) live with the rank prefix.
void EmitLines(Child& c, Stream& s, bool flush, const LaunchOptions& o) {
  size_t start = 0;
  while (true) {
    size_t nl = s.partial.find('\n', start);
    if (nl == std::string::npos) break;
    std::string line = s.partial.substr(start, nl - start);
    if (o.live_output && s.live != nullptr) EchoLine(s.live, c.status.rank, line, o);
    AddTail(c, std::move(line), o.tail_lines);
    start = nl + 1;
  }
  s.partial.erase(0, start);
  if (flush && !s.partial.empty()) {
    if (o.live_output && s.live != nullptr) EchoLine(s.live, c.status.rank, s.partial, o);
    AddTail(c, s.partial, o.tail_lines);
    s.partial.clear();
  }
  if (o.live_output && s.live != nullptr) std::fflush(s.live);
}

// Reads what is available; closes the stream at EOF.
void Drain(Child& c, Stream& s, const LaunchOptions& o) {
  char buf[65536];
  while (s.fd >= 0) {
    ssize_t n = ::read(s.fd, buf, sizeof(buf));
    if (n > 0) {
      WriteAll(s.log_fd, buf, static_cast<size_t>(n));
      s.partial.append(buf, static_cast<size_t>(n));
      EmitLines(c, s, false, o);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    ::close(s.fd);  // EOF or error
    s.fd = -1;
    EmitLines(c, s, true, o);
  }
}

// The same cap as the store's (comm/store.h kMaxJobTokenBytes); launch does not link comm.
constexpr size_t kMaxJobTokenBytes = 512;

// The job token every rank gets: given, inherited, or (one node only) generated.
absl::StatusOr<std::string> ResolveJobToken(const LaunchOptions& o) {
  std::string token = o.job_token;
  if (token.empty()) {
    if (auto it = o.env.find(envvar::kJobToken); it != o.env.end()) {
      token = it->second;
    } else if (const char* v = std::getenv(envvar::kJobToken)) {
      token = v;
    }
  }
  if (token.size() > kMaxJobTokenBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(envvar::kJobToken, " is longer than ", kMaxJobTokenBytes, " bytes"));
  }
  if (!token.empty()) return token;
  if (o.nnodes > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--nnodes > 1 needs the same ", envvar::kJobToken,
                     " on every node (the rendezvous store refuses ranks without it); e.g. "
                     "export ",
                     envvar::kJobToken,
                     "=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \\n') "
                     "and pass that value to every node's launcher"));
  }
  return RandomHexToken();
}

// Node 0 hosts rank 0's store on exactly the master address: it must be one of ours.
absl::Status CheckMasterAddressIsLocal(const std::string& addr) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int gai = ::getaddrinfo(addr.c_str(), "0", &hints, &res);
  if (gai != 0 || res == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot resolve --master-addr '", addr, "': ", ::gai_strerror(gai)));
  }
  const addrinfo* pick = res;
  for (const addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    if (ai->ai_family == AF_INET) {
      pick = ai;
      break;
    }
  }
  int fd = ::socket(pick->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int err = 0;
  if (fd < 0 || ::bind(fd, pick->ai_addr, pick->ai_addrlen) != 0) err = errno;
  if (fd >= 0) ::close(fd);
  ::freeaddrinfo(res);
  if (err == EADDRNOTAVAIL) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--master-addr ", addr,
        " is not an address of this host, but node 0 hosts rank 0's rendezvous store there; "
        "give node 0's own address (the store listens on it only)"));
  }
  return absl::OkStatus();
}

// "rank 1 (pid 42) was" / "ranks 1 (pid 42), 3 (pid 44) were".
std::string NameRanks(const std::vector<const Child*>& ranks) {
  std::vector<std::string> names;
  for (const Child* c : ranks) names.push_back(absl::StrCat(c->status.rank, " (pid ", c->pid, ")"));
  return absl::StrCat(ranks.size() == 1 ? "rank " : "ranks ", absl::StrJoin(names, ", "),
                      ranks.size() == 1 ? " was" : " were");
}

// The one sentence on a rank that failed on its own (LaunchResult::failure).
std::string RankFailure(const RankStatus& s, int pid) {
  return absl::StrCat("rank ", s.rank, " (pid ", pid, ") ",
                      s.exited ? absl::StrCat("exited with code ", s.exit_code)
                               : absl::StrCat("was killed by ", SignalName(s.term_signal)),
                      " after ", absl::StrFormat("%.2f", s.end_s), " s");
}

// Whether `pid` (a child) has exited already, without reaping it: a rank that ended by
// itself before the launcher signals it was not stopped by the launcher.
bool ExitedAlready(pid_t pid) {
  siginfo_t info = {};
  return ::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
         info.si_pid == pid;
}

std::string Seconds(std::chrono::milliseconds d) {
  return absl::StrFormat("%g s", static_cast<double>(d.count()) / 1000.0);
}

}  // namespace

absl::Status BecomeChildSubreaper() {
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
    return absl::InternalError(
        absl::StrCat("cannot become a child subreaper: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::StatusOr<LaunchResult> Launch(const LaunchOptions& o) {
  const int64_t t0 = NowNs();
  auto since = [t0] { return (NowNs() - t0) / 1e9; };
  if (o.argv.empty()) return absl::InvalidArgumentError("no program given to launch");
  if (o.nnodes < 1) return absl::InvalidArgumentError("--nnodes must be >= 1");
  if (o.node_rank < 0 || o.node_rank >= o.nnodes) {
    return absl::InvalidArgumentError(
        absl::StrCat("--node-rank ", o.node_rank, " is out of range for --nnodes ", o.nnodes));
  }
  if (o.nproc_per_node < 0) return absl::InvalidArgumentError("-n must be >= 1");
  if (o.master_port < 0 || o.master_port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--master-port ", o.master_port, " is not a TCP port"));
  }
  if (o.nnodes > 1 && o.master_port == 0) {
    return absl::InvalidArgumentError(
        "--master-port is required with --nnodes > 1 (every node must agree on it)");
  }
  if (o.exit_timeout.count() < 0 || o.job_timeout.count() < 0) {
    return absl::InvalidArgumentError("--timeout and --job-timeout must be >= 0");
  }
  auto token = ResolveJobToken(o);
  if (!token.ok()) return token.status();
  if (o.nnodes > 1 && o.node_rank == 0) {
    absl::Status local = CheckMasterAddressIsLocal(o.master_addr);
    if (!local.ok()) return local;
  }

  LaunchResult result;
  LocalDevices devices = DetectLocalDevices(o.dev_root);
  const int nproc = o.nproc_per_node > 0 ? o.nproc_per_node : std::max(devices.count, 1);
  result.nproc_per_node = nproc;
  result.world_size = nproc * o.nnodes;
  // One node: the store listens on loopback only, whatever --master-addr says.
  result.master_addr = o.nnodes == 1 ? std::string("127.0.0.1") : o.master_addr;
  if (o.master_port > 0) {
    result.master_port = o.master_port;
  } else {
    auto port = PickFreePort();
    if (!port.ok()) return port.status();
    result.master_port = *port;
  }
  result.run_dir = o.run_dir.empty() ? run_dir::DefaultRunDir("launch") : o.run_dir;

  // Device pinning: a user-given visible list is honoured and split among local ranks.
  std::vector<std::string> visible;
  if (!devices.visible_var.empty()) {
    std::string given;
    if (auto it = o.env.find(devices.visible_var); it != o.env.end()) {
      given = it->second;
    } else if (const char* v = std::getenv(devices.visible_var.c_str())) {
      given = v;
    }
    for (absl::string_view d : absl::StrSplit(given, ',', absl::SkipEmpty())) {
      visible.emplace_back(d);
    }
    if (visible.empty()) {
      for (int d = 0; d < devices.count; ++d) visible.push_back(std::to_string(d));
    }
  }

  // A placement (launch --placement topo) names each rank's device itself.
  if (!o.rank_devices.empty()) {
    if (static_cast<int>(o.rank_devices.size()) < nproc) {
      return absl::InvalidArgumentError(absl::StrCat("the placement names ", o.rank_devices.size(),
                                                     " devices for ", nproc, " local ranks"));
    }
    if (!o.rank_devices_var.empty()) devices.visible_var = o.rank_devices_var;
    if (devices.visible_var.empty()) {
      return absl::InvalidArgumentError(
          "a device placement needs the visible-devices variable (no devices detected)");
    }
  }
  const std::vector<std::string> rank_device = PlanRankDevices(visible, o.rank_devices, nproc);

  // CPU affinity plan over the CPUs this launcher may use.
  std::vector<std::vector<int>> plan(nproc);
  if (o.bind_cpus) {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (::sched_getaffinity(0, sizeof(set), &set) == 0) {
      std::vector<int> allowed;
      for (int c = 0; c < CPU_SETSIZE; ++c)
        if (CPU_ISSET(c, &set)) allowed.push_back(c);
      plan = PlanAffinity(ReadNumaNodes(o.sysfs_root, allowed), nproc);
    }
  }

  std::error_code ec;
  std::filesystem::create_directories(result.run_dir, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot create run directory ", result.run_dir, ": ", ec.message()));
  }
  const std::string abs_run_dir = std::filesystem::absolute(result.run_dir).string();
  // One job, one writer (core/run_dir_lock.h): the launcher holds the run directory's lock
  // until it returns, and its ranks carry its job id, so that a rank writing the same
  // directory joins it while any other job is refused. With several nodes the id is the
  // rendezvous endpoint, the same on every node (one shared run directory is one job).
  const std::string job_id =
      o.nnodes > 1 ? absl::StrCat("launch/", result.master_addr, ":", result.master_port)
                   : absl::StrCat("launch/", HostName(), "/", static_cast<int>(::getpid()));
  run_dir::LockOptions lock_options;
  lock_options.job_id = job_id;
  absl::StatusOr<run_dir::RunDirLock> lock = run_dir::LockRunDir(result.run_dir, lock_options);
  if (!lock.ok()) return lock.status();

  // Everything the children need is built before fork(): the child only calls
  // async-signal-safe functions.
  std::vector<Child> children(nproc);
  std::vector<std::vector<std::string>> envs(nproc);
  std::map<std::string, std::string> base;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv(*e);
    size_t eq = kv.find('=');
    if (eq != std::string::npos) base[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& [k, v] : o.env) base[k] = v;
  base[envvar::kJobToken] = *token;
  base[envvar::kJobId] = job_id;
  for (int lr = 0; lr < nproc; ++lr) {
    Child& c = children[lr];
    c.status.local_rank = lr;
    c.status.rank = o.node_rank * nproc + lr;
    c.status.cpus = plan[lr];
    std::string dir = run_dir::RankLogDir(result.run_dir, c.status.rank);
    std::filesystem::create_directories(dir, ec);
    c.status.stdout_log = dir + "/stdout.log";
    c.status.stderr_log = dir + "/stderr.log";
    c.out.log_fd =
        ::open(c.status.stdout_log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    c.err.log_fd =
        ::open(c.status.stderr_log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (c.out.log_fd < 0 || c.err.log_fd < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot write logs in ", dir, ": ", std::strerror(errno)));
    }
    const bool echoed = o.live_rank < 0 || o.live_rank == c.status.rank;
    c.out.live = echoed ? o.live_stdout : nullptr;
    c.err.live = echoed ? o.live_stderr : nullptr;
    std::map<std::string, std::string> env = base;
    env[envvar::kRank] = std::to_string(c.status.rank);
    env[envvar::kWorldSize] = std::to_string(result.world_size);
    env[envvar::kLocalRank] = std::to_string(lr);
    env[envvar::kLocalWorldSize] = std::to_string(nproc);
    env[envvar::kGroupRank] = std::to_string(o.node_rank);
    env[envvar::kMasterAddr] = result.master_addr;
    env[envvar::kMasterPort] = std::to_string(result.master_port);
    env[envvar::kRunDir] = abs_run_dir;
    if (!rank_device.empty()) {
      c.status.device = rank_device[lr];
      env[devices.visible_var] = c.status.device;
    }
    // Threads per rank: the CPUs it is bound to, unless the user chose.
    if (!c.status.cpus.empty() && !env.count(envvar::kOmpNumThreads)) {
      env[envvar::kOmpNumThreads] = std::to_string(c.status.cpus.size());
    }
    // Live output of Python ranks would otherwise arrive in 4 KiB lumps.
    if (!env.count("PYTHONUNBUFFERED")) env["PYTHONUNBUFFERED"] = "1";
    for (const auto& [k, v] : env) envs[lr].push_back(k + "=" + v);
  }

  std::vector<char*> argv_c;
  for (const auto& a : o.argv) argv_c.push_back(const_cast<char*>(a.c_str()));
  argv_c.push_back(nullptr);

  // Signals: record and wake the loop; restored on return.
  int wake[2];
  if (::pipe2(wake, O_CLOEXEC | O_NONBLOCK) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  g_wake_fd = wake[1];
  g_signals_seen = 0;
  g_last_signal = 0;
  struct sigaction sa {
  }, old_int{}, old_term{}, old_hup{};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, &old_int);
  ::sigaction(SIGTERM, &sa, &old_term);
  ::sigaction(SIGHUP, &sa, &old_hup);
  auto restore = [&] {
    ::sigaction(SIGINT, &old_int, nullptr);
    ::sigaction(SIGTERM, &old_term, nullptr);
    ::sigaction(SIGHUP, &old_hup, nullptr);
    g_wake_fd = -1;
    ::close(wake[0]);
    ::close(wake[1]);
  };

  const pid_t launcher_pid = ::getpid();
  // The caller's own children are not the job's: the end-of-job sweep leaves them alone.
  const std::set<pid_t> callers_children = ChildrenOfSelf();
  absl::Status start_error;
  for (int lr = 0; lr < nproc && start_error.ok(); ++lr) {
    Child& c = children[lr];
    int out_p[2], err_p[2], exec_p[2];
    if (::pipe2(out_p, O_CLOEXEC) != 0 || ::pipe2(err_p, O_CLOEXEC) != 0 ||
        ::pipe2(exec_p, O_CLOEXEC) != 0) {
      start_error = absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
      break;
    }
    std::vector<char*> envp;
    for (auto& kv : envs[lr]) envp.push_back(kv.data());
    envp.push_back(nullptr);
    cpu_set_t cpus;
    CPU_ZERO(&cpus);
    for (int cpu : c.status.cpus) CPU_SET(cpu, &cpus);
    const bool bind = !c.status.cpus.empty();

    pid_t pid = ::fork();
    if (pid == 0) {
      // Child: own process group, die with the launcher, pinned, output to the pipes.
      ::setpgid(0, 0);
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != launcher_pid) ::_exit(127);
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      ::signal(SIGINT, SIG_DFL);
      ::signal(SIGTERM, SIG_DFL);
      ::signal(SIGHUP, SIG_DFL);
      ::signal(SIGPIPE, SIG_DFL);
      if (bind) ::sched_setaffinity(0, sizeof(cpus), &cpus);
      int devnull = ::open("/dev/null", O_RDONLY);
      if (devnull >= 0) ::dup2(devnull, 0);
      ::dup2(out_p[1], 1);
      ::dup2(err_p[1], 2);
      ::execvpe(argv_c[0], argv_c.data(), envp.data());
      int err = errno;
      (void)!::write(exec_p[1], &err, sizeof(err));
      ::_exit(127);
    }
    if (pid < 0) {
      start_error = absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
      for (int fd : {out_p[0], out_p[1], err_p[0], err_p[1], exec_p[0], exec_p[1]}) ::close(fd);
      break;
    }
    ::setpgid(pid, pid);  // also here, so signals sent right away reach the group
    ::close(out_p[1]);
    ::close(err_p[1]);
    ::close(exec_p[1]);
    c.pid = pid;
    c.status.pid = pid;
    c.out.fd = out_p[0];
    c.err.fd = err_p[0];
    c.exec_fd = exec_p[0];
    ::fcntl(c.out.fd, F_SETFL, O_NONBLOCK);
    ::fcntl(c.err.fd, F_SETFL, O_NONBLOCK);
  }
  // Wait for every exec (pipe EOF) or its errno.
  std::string exec_failure;
  for (Child& c : children) {
    if (c.exec_fd < 0) continue;
    int err = 0;
    ssize_t n;
    do {
      n = ::read(c.exec_fd, &err, sizeof(err));
    } while (n < 0 && errno == EINTR);
    ::close(c.exec_fd);
    c.exec_fd = -1;
    c.status.start_s = since();
    if (n == sizeof(err) && exec_failure.empty()) {
      exec_failure = absl::StrCat("cannot execute '", o.argv[0], "': ", std::strerror(err));
    }
  }
  result.all_running_s = since();

  // Stop helpers.
  int64_t kill_deadline_ns = 0;  // 0: no stop in progress
  auto signal_all = [&](int sig, bool mark) {
    for (Child& c : children) {
      if (c.pid <= 0 || c.reaped) continue;
      if (mark && !ExitedAlready(c.pid)) c.status.stopped_by_us = true;
      ::kill(-c.pid, sig);
    }
  };
  auto begin_stop = [&](int sig) {
    signal_all(sig, true);
    if (kill_deadline_ns == 0) {
      kill_deadline_ns = NowNs() + std::chrono::nanoseconds(o.stop_grace).count();
    }
  };
  if (!start_error.ok() || !exec_failure.empty()) {
    signal_all(SIGKILL, true);
    kill_deadline_ns = NowNs();
  }
  // A failure or a timeout: first ask the ranks still running for a hang dump (those that
  // catch SIGUSR1), and stop them once they wrote it or exited, or after dump_wait.
  int64_t dump_deadline_ns = 0;  // 0: no dump phase
  std::vector<Child*> dump_asked;
  std::vector<HangDumpFiles> dump_files_before;  // of each asked rank, before it was asked
  auto stop_after_dumps = [&] {
    if (kill_deadline_ns != 0 || dump_deadline_ns != 0) return;
    for (Child& c : children) {
      if (!o.request_dumps || c.pid <= 0 || c.reaped) continue;
      HangDumpFiles before = StatHangDump(abs_run_dir, c.status.rank);
      if (!AskRankToDump(c.pid)) continue;
      dump_asked.push_back(&c);
      dump_files_before.push_back(std::move(before));
      result.hang.asked_ranks.push_back(c.status.rank);
    }
    if (dump_asked.empty()) {
      begin_stop(SIGTERM);
    } else {
      dump_deadline_ns = NowNs() + std::chrono::nanoseconds(o.dump_wait).count();
    }
  };
  auto dumps_done = [&] {
    if (NowNs() >= dump_deadline_ns) return true;
    for (size_t i = 0; i < dump_asked.size(); ++i) {
      const Child* c = dump_asked[i];
      if (!c->reaped && !HangDumpWritten(abs_run_dir, c->status.rank, dump_files_before[i])) {
        return false;
      }
    }
    return true;
  };

  // Timeouts: stop the ranks still running and name them as the failure.
  int64_t first_ok_exit_ns = 0;  // when the first rank exited with code 0
  std::string first_ok_name;
  auto time_out = [&](const std::string& why) {
    std::vector<const Child*> running;
    for (const Child& c : children)
      if (c.pid > 0 && !c.reaped) running.push_back(&c);
    if (running.empty()) return;
    for (const Child* c : running) result.timed_out_ranks.push_back(c->status.rank);
    result.first_failed_rank = running.front()->status.rank;
    result.failure = absl::StrCat(NameRanks(running), " still running ", why, "; stopped");
    stop_after_dumps();
  };

  // Event loop.
  int64_t settle_deadline_ns = 0;  // a rank failed: stop the others then (0: none pending)
  int signals_handled = 0;
  int64_t all_reaped_ns = 0;
  while (true) {
    bool any_open = false, all_reaped = true;
    std::vector<pollfd> fds{{wake[0], POLLIN, 0}};
    std::vector<std::pair<Child*, Stream*>> owners{{nullptr, nullptr}};
    for (Child& c : children) {
      all_reaped = all_reaped && (c.reaped || c.pid <= 0);
      for (Stream* s : {&c.out, &c.err}) {
        if (s->fd < 0) continue;
        any_open = true;
        fds.push_back({s->fd, POLLIN, 0});
        owners.emplace_back(&c, s);
      }
    }
    if (all_reaped && !any_open) break;
    if (all_reaped) {
      // Grandchildren may hold the pipes: give them a moment, then kill the groups.
      if (all_reaped_ns == 0) all_reaped_ns = NowNs();
      if (NowNs() - all_reaped_ns > 500000000) {
        for (Child& c : children)
          if (c.pid > 0) ::kill(-c.pid, SIGKILL);
        for (Child& c : children)
          for (Stream* s : {&c.out, &c.err})
            if (s->fd >= 0) {
              Drain(c, *s, o);
              if (s->fd >= 0) ::close(s->fd), s->fd = -1;
            }
        continue;
      }
    }
    int r = ::poll(fds.data(), fds.size(), 20);
    if (r > 0) {
      for (size_t i = 1; i < fds.size(); ++i) {
        if (fds[i].revents != 0) Drain(*owners[i].first, *owners[i].second, o);
      }
      if (fds[0].revents & POLLIN) {
        char buf[64];
        while (::read(wake[0], buf, sizeof(buf)) > 0) {
        }
      }
    }
    // Signals to the launcher: forward the first, escalate on the second.
    int seen = g_signals_seen;
    if (seen > signals_handled) {
      int sig = g_last_signal;
      if (result.interrupted_by == 0) result.interrupted_by = sig;
      if (signals_handled == 0) {
        begin_stop(sig);
      } else {
        signal_all(SIGKILL, true);
      }
      signals_handled = seen;
    }
    // Reap.
    for (Child& c : children) {
      if (c.pid <= 0 || c.reaped) continue;
      int wstatus;
      pid_t w = ::waitpid(c.pid, &wstatus, WNOHANG);
      if (w != c.pid) continue;
      c.reaped = true;
      c.status.end_s = since();
      if (WIFEXITED(wstatus)) {
        c.status.exited = true;
        c.status.exit_code = WEXITSTATUS(wstatus);
      } else if (WIFSIGNALED(wstatus)) {
        c.status.term_signal = WTERMSIG(wstatus);
      }
      ::kill(-c.pid, SIGTERM);  // the rank's own leftovers, if any
      if (!c.status.failed() && first_ok_exit_ns == 0) {
        first_ok_exit_ns = NowNs();
        first_ok_name = absl::StrCat("rank ", c.status.rank);
      }
      if (c.status.failed() && !c.status.stopped_by_us && result.first_failed_rank < 0 &&
          result.interrupted_by == 0) {
        result.first_failed_rank = c.status.rank;
        result.failure = RankFailure(c.status, c.pid);
        settle_deadline_ns = NowNs() + std::chrono::nanoseconds(o.failure_settle).count();
      }
    }
    // A failure: the others had failure_settle to fail by themselves; stop the rest.
    if (settle_deadline_ns != 0 && NowNs() >= settle_deadline_ns) {
      settle_deadline_ns = 0;
      stop_after_dumps();
    }
    if (kill_deadline_ns == 0 && result.interrupted_by == 0 && result.first_failed_rank < 0) {
      const int64_t now = NowNs();
      if (o.exit_timeout.count() > 0 && first_ok_exit_ns != 0 &&
          now - first_ok_exit_ns >= std::chrono::nanoseconds(o.exit_timeout).count()) {
        time_out(absl::StrCat(Seconds(o.exit_timeout), " after ", first_ok_name,
                              " exited OK (--timeout ", Seconds(o.exit_timeout), ")"));
      } else if (o.job_timeout.count() > 0 &&
                 now - t0 >= std::chrono::nanoseconds(o.job_timeout).count()) {
        time_out(absl::StrCat("when the job timeout expired (--job-timeout ",
                              Seconds(o.job_timeout), ")"));
      }
    }
    if (dump_deadline_ns != 0 && kill_deadline_ns == 0 && dumps_done()) begin_stop(SIGTERM);
    if (kill_deadline_ns != 0 && NowNs() >= kill_deadline_ns) signal_all(SIGKILL, true);
  }
  // Descendants that escaped their rank's process group (setsid, double fork) were
  // re-parented to us if the caller made us a subreaper: stop them now.
  result.strays_killed =
      KillStrays(callers_children, std::min(o.stop_grace, std::chrono::milliseconds(1000)));
  restore();
  for (Child& c : children) {
    ::close(c.out.log_fd);
    ::close(c.err.log_fd);
    c.status.tail.assign(c.tail.begin(), c.tail.end());
    result.ranks.push_back(c.status);
  }
  result.hang = AnalyzeHangDumps(abs_run_dir, std::move(result.hang));
  result.total_s = since();
  {
    std::ofstream json(run_dir::Join(result.run_dir, run_dir::kLaunchJson));
    json << LaunchResultJson(result, o) << "\n";
  }
  if (!start_error.ok()) return start_error;
  if (!exec_failure.empty()) return absl::NotFoundError(exec_failure);
  return result;
}

std::string LaunchResultJson(const LaunchResult& r, const LaunchOptions& o) {
  nlohmann::json j;
  j["format"] = "trainscope.launch";
  j["version"] = 1;
  j["argv"] = o.argv;
  j["run_dir"] = r.run_dir;
  j["nnodes"] = o.nnodes;
  j["node_rank"] = o.node_rank;
  j["nproc_per_node"] = r.nproc_per_node;
  j["world_size"] = r.world_size;
  j["master_addr"] = r.master_addr;
  j["master_port"] = r.master_port;
  j["all_running_s"] = r.all_running_s;
  j["total_s"] = r.total_s;
  j["ok"] = r.ok();
  j["first_failed_rank"] =
      r.first_failed_rank >= 0 ? nlohmann::json(r.first_failed_rank) : nlohmann::json(nullptr);
  j["failure"] = r.failure;
  j["timed_out_ranks"] = r.timed_out_ranks;
  j["strays_killed"] = r.strays_killed;
  j["hang"] =
      r.hang.analyzed || !r.hang.error.empty() || !r.hang.asked_ranks.empty()
          ? nlohmann::json{{"asked_ranks", r.hang.asked_ranks}, {"analysis", r.hang.analysis_path},
                           {"problem", r.hang.problem},         {"findings", r.hang.findings},
                           {"verdict", r.hang.sentences},       {"error", r.hang.error}}
          : nlohmann::json(nullptr);
  j["interrupted_by"] = r.interrupted_by != 0 ? nlohmann::json(SignalName(r.interrupted_by))
                                              : nlohmann::json(nullptr);
  nlohmann::json ranks = nlohmann::json::array();
  for (const RankStatus& s : r.ranks) {
    nlohmann::json x;
    x["rank"] = s.rank;
    x["local_rank"] = s.local_rank;
    x["pid"] = s.pid;
    x["exit_code"] = s.exited ? nlohmann::json(s.exit_code) : nlohmann::json(nullptr);
    x["signal"] =
        s.term_signal != 0 ? nlohmann::json(SignalName(s.term_signal)) : nlohmann::json(nullptr);
    x["stopped_by_launcher"] = s.stopped_by_us;
    x["start_s"] = s.start_s;
    x["end_s"] = s.end_s;
    x["cpus"] = CpuListText(s.cpus);
    x["device"] = s.device;
    x["stdout_log"] = s.stdout_log;
    x["stderr_log"] = s.stderr_log;
    ranks.push_back(std::move(x));
  }
  j["ranks"] = std::move(ranks);
  return j.dump(2);
}

}  // namespace trainscope::launch
