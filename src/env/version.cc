#include "env/version.h"

#include <cctype>
#include <vector>

#include "absl/strings/ascii.h"

namespace trainscope::env {
namespace {

struct Part {
  bool numeric = false;
  unsigned long long num = 0;
  std::string text;  // lower-case letters
};

// Tokenizes into digit runs and letter runs; '+' ends the comparable part.
std::vector<Part> Split(absl::string_view v) {
  std::vector<Part> parts;
  size_t i = 0;
  while (i < v.size() && v[i] != '+') {
    unsigned char c = v[i];
    if (std::isdigit(c)) {
      Part p;
      p.numeric = true;
      while (i < v.size() && std::isdigit(static_cast<unsigned char>(v[i]))) {
        if (p.num < (1ull << 60)) p.num = p.num * 10 + (v[i] - '0');
        ++i;
      }
      parts.push_back(p);
    } else if (std::isalpha(c)) {
      Part p;
      while (i < v.size() && std::isalpha(static_cast<unsigned char>(v[i]))) {
        p.text.push_back(absl::ascii_tolower(v[i]));
        ++i;
      }
      parts.push_back(p);
    } else {
      ++i;
    }
  }
  return parts;
}

// Letter markers that mean "after the release" rather than "before it".
bool IsPostMarker(const std::string& s) { return s == "post" || s == "p" || s == "b"; }

}  // namespace

int CompareVersions(absl::string_view a, absl::string_view b) {
  std::vector<Part> pa = Split(a), pb = Split(b);
  size_t n = std::max(pa.size(), pb.size());
  for (size_t i = 0; i < n; ++i) {
    if (i >= pa.size() || i >= pb.size()) {
      // One ran out. The longer one is greater, unless its next part is a pre-release
      // marker ("2.1.0" vs "2.1.0rc1": rc1 is smaller).
      const Part& extra = i >= pa.size() ? pb[i] : pa[i];
      int sign = i >= pa.size() ? 1 : -1;                            // +1: b is longer
      if (!extra.numeric && !IsPostMarker(extra.text)) return sign;  // b has "rc": a > b
      return -sign;
    }
    const Part& x = pa[i];
    const Part& y = pb[i];
    if (x.numeric && y.numeric) {
      if (x.num != y.num) return x.num < y.num ? -1 : 1;
    } else if (!x.numeric && !y.numeric) {
      if (x.text != y.text) {
        if (IsPostMarker(x.text) != IsPostMarker(y.text)) return IsPostMarker(x.text) ? 1 : -1;
        return x.text < y.text ? -1 : 1;
      }
    } else {
      // A number against letters: "8.0.0" vs "8.0.RC1" -> the release (number) is
      // greater than a pre-release, smaller than a post-release.
      const Part& letters = x.numeric ? y : x;
      bool letters_is_x = !x.numeric;
      bool letters_greater = IsPostMarker(letters.text);
      return (letters_greater == letters_is_x) ? 1 : -1;
    }
  }
  return 0;
}

bool VersionMatches(absl::string_view version, absl::string_view pattern) {
  std::string p = absl::AsciiStrToLower(pattern);
  std::string v = absl::AsciiStrToLower(version);
  if (p.size() >= 2 && (p.substr(p.size() - 2) == ".*" || p.substr(p.size() - 2) == ".x")) {
    std::string prefix = p.substr(0, p.size() - 2);
    if (v.size() < prefix.size() || v.compare(0, prefix.size(), prefix) != 0) return false;
    return v.size() == prefix.size() || !std::isdigit(static_cast<unsigned char>(v[prefix.size()]));
  }
  return CompareVersions(v, p) == 0 && Split(v).size() == Split(p).size();
}

std::string MajorMinor(absl::string_view version) {
  if (version.empty() || !std::isdigit(static_cast<unsigned char>(version[0]))) return "";
  size_t i = 0;
  while (i < version.size() && std::isdigit(static_cast<unsigned char>(version[i]))) ++i;
  if (i + 1 < version.size() && version[i] == '.' &&
      std::isdigit(static_cast<unsigned char>(version[i + 1]))) {
    ++i;
    while (i < version.size() && std::isdigit(static_cast<unsigned char>(version[i]))) ++i;
  }
  return std::string(version.substr(0, i));
}

}  // namespace trainscope::env
