#include "trainscope/train/omp.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "trainscope/core/env_vars.h"
#include "trainscope/core/subprocess.h"

namespace trainscope::train {

void ReexecWithPassiveOmpWaitIfUnset() {
  if (std::getenv(envvar::kOmpWaitPolicy) != nullptr) return;
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string exe = SelfExecutablePath();
  if (raw.empty() || exe.empty()) return;
  std::vector<std::string> args;
  size_t start = 0;
  while (start < raw.size()) {
    size_t end = raw.find('\0', start);
    if (end == std::string::npos) end = raw.size();
    args.push_back(raw.substr(start, end - start));
    start = end + 1;
  }
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  setenv(envvar::kOmpWaitPolicy, "PASSIVE", 1);
  std::fflush(stdout);
  std::fflush(stderr);
  execv(exe.c_str(), argv.data());
  // exec failed: carry on with the default policy in this process.
  unsetenv(envvar::kOmpWaitPolicy);
}

}  // namespace trainscope::train
