#include "trainscope/core/proc_table.h"

#include <dirent.h>

#include <cstdio>
#include <cstring>

#include "absl/strings/numbers.h"

namespace trainscope {

std::map<pid_t, ProcEntry> ReadProcTable(const std::string& proc_root) {
  std::map<pid_t, ProcEntry> out;
  DIR* dir = ::opendir(proc_root.c_str());
  if (dir == nullptr) return out;
  while (dirent* e = ::readdir(dir)) {
    int pid;
    if (!absl::SimpleAtoi(e->d_name, &pid) || pid <= 0) continue;
    const std::string path = proc_root + "/" + e->d_name + "/stat";
    std::FILE* f = std::fopen(path.c_str(), "r");
    if (f == nullptr) continue;
    char buf[1024];
    const size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
    std::fclose(f);
    buf[n] = 0;
    // "pid (comm) state ppid pgrp ...": comm may hold spaces and ')', so parse after the
    // last ')'.
    const char* close = std::strrchr(buf, ')');
    if (close == nullptr) continue;
    int ppid = 0, pgrp = 0;
    char state = '?';
    if (std::sscanf(close + 1, " %c %d %d", &state, &ppid, &pgrp) != 3) continue;
    out[pid] = ProcEntry{pid, ppid, pgrp, state};
  }
  ::closedir(dir);
  return out;
}

std::vector<pid_t> DescendantsOf(pid_t root, const std::map<pid_t, ProcEntry>& table,
                                 const std::set<pid_t>& skip) {
  std::multimap<pid_t, pid_t> children;
  for (const auto& [pid, p] : table) children.emplace(p.ppid, pid);
  std::vector<pid_t> out, stack = {root};
  while (!stack.empty()) {
    const pid_t p = stack.back();
    stack.pop_back();
    auto range = children.equal_range(p);
    for (auto it = range.first; it != range.second; ++it) {
      if (skip.count(it->second)) continue;
      out.push_back(it->second);
      stack.push_back(it->second);
    }
  }
  return out;
}

}  // namespace trainscope
