// What the unit tests of every module share: scratch directories that are removed when the
// test binary exits, and whole-file reads and writes. Test code only (gtest assertions).
// Thread-compatible: call TempDir from the test thread.
#ifndef TRAINSCOPE_CORE_TEST_UTIL_H_
#define TRAINSCOPE_CORE_TEST_UTIL_H_

#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "gtest/gtest.h"

namespace trainscope::test_util {

// A fresh directory "<$TMPDIR or /tmp>/ts_<tag>_XXXXXX" (its real path, symlinks resolved),
// removed with everything in it when the test binary exits.
inline std::string TempDir(std::string_view tag = "test") {
  static std::vector<std::string>* dirs = [] {
    std::atexit([] {
      std::error_code ec;
      for (const std::string& d : *dirs) std::filesystem::remove_all(d, ec);
    });
    return new std::vector<std::string>;
  }();
  const char* t = std::getenv("TMPDIR");
  std::string tmpl = std::string(t && *t ? t : "/tmp") + "/ts_" + std::string(tag) + "_XXXXXX";
  const char* d = ::mkdtemp(tmpl.data());
  EXPECT_NE(d, nullptr) << tmpl;
  if (d == nullptr) return "/tmp";
  char* real = ::realpath(d, nullptr);
  std::string out = real ? real : d;
  std::free(real);
  dirs->push_back(out);
  return out;
}

// The whole file; "" when it cannot be read.
inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void WriteFile(const std::string& path, const std::string& data) {
  std::ofstream f(path, std::ios::binary);
  f << data;
  EXPECT_TRUE(f.good()) << path;
}

}  // namespace trainscope::test_util

#endif  // TRAINSCOPE_CORE_TEST_UTIL_H_
