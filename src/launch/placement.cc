// Where each rank runs: CPU sets (NUMA-aware), local devices, a free rendezvous port.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "trainscope/launch/launch.h"

namespace trainscope::launch {

absl::StatusOr<std::vector<int>> ParseCpuList(const std::string& text) {
  std::set<int> cpus;
  std::string t(absl::StripAsciiWhitespace(text));
  if (t.empty()) return std::vector<int>();
  for (absl::string_view part : absl::StrSplit(t, ',')) {
    std::vector<absl::string_view> ends = absl::StrSplit(part, '-');
    int lo, hi;
    if (ends.size() == 1 && absl::SimpleAtoi(ends[0], &lo)) {
      hi = lo;
    } else if (ends.size() != 2 || !absl::SimpleAtoi(ends[0], &lo) ||
               !absl::SimpleAtoi(ends[1], &hi) || lo > hi || lo < 0) {
      return absl::InvalidArgumentError(absl::StrCat("malformed CPU list '", text, "'"));
    }
    if (lo < 0 || hi > 1 << 20) {
      return absl::InvalidArgumentError(absl::StrCat("malformed CPU list '", text, "'"));
    }
    for (int c = lo; c <= hi; ++c) cpus.insert(c);
  }
  return std::vector<int>(cpus.begin(), cpus.end());
}

std::vector<std::vector<int>> ReadNumaNodes(const std::string& sysfs_root,
                                            const std::vector<int>& allowed, Os* os) {
  std::set<int> allow(allowed.begin(), allowed.end());
  std::vector<std::pair<int, std::vector<int>>> nodes;
  std::string dir = sysfs_root + "/devices/system/node";
  absl::StatusOr<std::vector<std::string>> entries = os->ListDir(dir);
  for (const std::string& entry : entries.ok() ? *entries : std::vector<std::string>()) {
    int id;
    absl::string_view name(entry);
    if (!absl::ConsumePrefix(&name, "node") || !absl::SimpleAtoi(name, &id)) continue;
    absl::StatusOr<std::string> text = os->ReadFile(dir + "/" + entry + "/cpulist");
    auto cpus = ParseCpuList(text.ok() ? *text : std::string());  // unreadable: as if empty
    if (!cpus.ok()) continue;
    std::vector<int> mine;
    for (int c : *cpus)
      if (allow.count(c)) mine.push_back(c);
    if (!mine.empty()) nodes.emplace_back(id, std::move(mine));
  }
  std::sort(nodes.begin(), nodes.end());
  std::vector<std::vector<int>> out;
  std::set<int> covered;
  for (auto& [id, cpus] : nodes) {
    covered.insert(cpus.begin(), cpus.end());
    out.push_back(std::move(cpus));
  }
  // Allowed CPUs no node claims (no sysfs, or a partial tree) form one more node.
  std::vector<int> rest;
  for (int c : allowed)
    if (!covered.count(c)) rest.push_back(c);
  if (!rest.empty()) out.push_back(std::move(rest));
  return out;
}

std::vector<std::vector<int>> PlanAffinity(const std::vector<std::vector<int>>& nodes, int nranks) {
  std::vector<std::vector<int>> plan(nranks);
  if (nodes.empty() || nranks <= 0) return plan;
  const int n_nodes = static_cast<int>(nodes.size());
  // Ranks per node, in rank order: rank i -> node i * n_nodes / nranks when ranks >= nodes,
  // else node i (the first nranks nodes).
  std::vector<std::vector<int>> ranks_on(n_nodes);
  for (int i = 0; i < nranks; ++i) {
    int node = nranks >= n_nodes ? static_cast<int>(static_cast<int64_t>(i) * n_nodes / nranks) : i;
    ranks_on[node].push_back(i);
  }
  for (int n = 0; n < n_nodes; ++n) {
    const auto& cpus = nodes[n];
    const int k = static_cast<int>(ranks_on[n].size());
    if (k == 0) continue;
    const int c = static_cast<int>(cpus.size());
    for (int j = 0; j < k; ++j) {
      if (k <= c) {  // contiguous, even split; the first c % k ranks get one more
        int begin = j * (c / k) + std::min(j, c % k);
        int len = c / k + (j < c % k ? 1 : 0);
        plan[ranks_on[n][j]].assign(cpus.begin() + begin, cpus.begin() + begin + len);
      } else {  // more ranks than CPUs: share round-robin
        plan[ranks_on[n][j]] = {cpus[j % c]};
      }
    }
  }
  return plan;
}

LocalDevices DetectLocalDevices(const std::string& dev_root, Os* os) {
  LocalDevices out;
  int nvidia = 0, davinci = 0;
  absl::StatusOr<std::vector<std::string>> entries = os->ListDir(dev_root);
  for (const std::string& entry : entries.ok() ? *entries : std::vector<std::string>()) {
    absl::string_view name(entry);
    int id;
    if (absl::ConsumePrefix(&name, "nvidia") && absl::SimpleAtoi(name, &id)) ++nvidia;
    name = entry;
    if (absl::ConsumePrefix(&name, "davinci") && absl::SimpleAtoi(name, &id)) ++davinci;
  }
  if (nvidia > 0) {
    out.count = nvidia;
    out.visible_var = "CUDA_VISIBLE_DEVICES";
  } else if (davinci > 0) {
    out.count = davinci;
    out.visible_var = "ASCEND_RT_VISIBLE_DEVICES";
  }
  return out;
}

std::vector<std::string> PlanRankDevices(const std::vector<std::string>& visible,
                                         const std::vector<std::string>& placed, int nproc) {
  std::vector<std::string> out;
  if (placed.empty() && visible.empty()) return out;
  for (int lr = 0; lr < nproc; ++lr) {
    out.push_back(placed.empty() ? visible[lr % visible.size()]
                                 : placed[static_cast<size_t>(lr) % placed.size()]);
  }
  return out;
}

absl::StatusOr<int> PickFreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  a.sin_port = 0;
  socklen_t len = sizeof(a);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    int err = errno;
    ::close(fd);
    return absl::InternalError(absl::StrCat("cannot find a free port: ", std::strerror(err)));
  }
  ::close(fd);
  return static_cast<int>(ntohs(a.sin_port));
}

}  // namespace trainscope::launch
