// Helpers shared by the libFuzzer targets in this folder.
#ifndef TRAINSCOPE_FUZZ_FUZZ_UTIL_H_
#define TRAINSCOPE_FUZZ_FUZZ_UTIL_H_

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace trainscope::fuzz {

// A directory of this fuzzing process (under $TMPDIR or /tmp), made once, reused by every
// input: the parsers under test read files, so each input is written to one.
inline const std::string& WorkDir() {
  static const std::string* dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/ts_fuzz_XXXXXX";
    char* made = mkdtemp(pattern.data());
    if (made == nullptr) {
      std::perror("ts fuzz: mkdtemp");
      std::abort();
    }
    return new std::string(made);
  }();
  return *dir;
}

// Writes `data` to WorkDir()/name and returns the path (aborts on I/O errors: those are
// the harness's problem, not a finding).
inline std::string WriteInput(const std::string& name, std::string_view data) {
  std::string path = WorkDir() + "/" + name;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr || std::fwrite(data.data(), 1, data.size(), f) != data.size() ||
      std::fclose(f) != 0) {
    std::perror("ts fuzz: write input");
    std::abort();
  }
  return path;
}

// Splits an input in two at a length taken from its first two bytes (the rest of the input
// when that length is larger): lets one input carry two files (.idx + .bin, A + B).
inline void SplitTwo(std::string_view data, std::string_view* a, std::string_view* b) {
  if (data.size() < 2) {
    *a = data;
    *b = {};
    return;
  }
  size_t n = (static_cast<uint8_t>(data[0]) << 8) | static_cast<uint8_t>(data[1]);
  data.remove_prefix(2);
  n = n < data.size() ? n : data.size();
  *a = data.substr(0, n);
  *b = data.substr(n);
}

}  // namespace trainscope::fuzz

#endif  // TRAINSCOPE_FUZZ_FUZZ_UTIL_H_
