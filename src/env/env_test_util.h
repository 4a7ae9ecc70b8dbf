// Test-only helpers shared by the env module's test files.
#ifndef TRAINSCOPE_SRC_ENV_ENV_TEST_UTIL_H_
#define TRAINSCOPE_SRC_ENV_ENV_TEST_UTIL_H_

#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace trainscope::env {

// Contents of tests/data/env/<name>; a failed expectation when it cannot be read.
inline std::string Fixture(const std::string& name) {
  std::ifstream f(std::string(TS_SOURCE_DIR) + "/tests/data/env/" + name);
  EXPECT_TRUE(f.good()) << name;
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace trainscope::env

#endif  // TRAINSCOPE_SRC_ENV_ENV_TEST_UTIL_H_
