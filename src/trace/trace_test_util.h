// What the trace module's test files share: scratch directories removed at exit, and files
// written whole.
#ifndef TRAINSCOPE_TRACE_TRACE_TEST_UTIL_H_
#define TRAINSCOPE_TRACE_TRACE_TEST_UTIL_H_

#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace trainscope::trace::testing {

// A fresh temporary directory, removed when the test binary exits.
inline std::string TempDir() {
  static std::vector<std::string>* dirs = [] {
    std::atexit([] {
      for (const std::string& d : *dirs) std::filesystem::remove_all(d);
    });
    return new std::vector<std::string>;
  }();
  char tmpl[] = "/tmp/ts_trace_test_XXXXXX";
  const char* d = mkdtemp(tmpl);
  EXPECT_NE(d, nullptr);
  if (!d) return "/tmp";
  dirs->push_back(d);
  return d;
}

inline void WriteFile(const std::string& path, const std::string& data) {
  std::ofstream f(path, std::ios::binary);
  f << data;
}

}  // namespace trainscope::trace::testing

#endif  // TRAINSCOPE_TRACE_TRACE_TEST_UTIL_H_
