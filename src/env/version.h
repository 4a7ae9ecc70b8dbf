// Version strings as the tools print them ("535.104.05", "8.0.RC2", "24.1.rc1.b030",
// "2.1.0.post12", "12.4", "1.13.0a0+git...") and an ordering that is right for the
// comparisons the compatibility matrix needs.
#ifndef TRAINSCOPE_SRC_ENV_VERSION_H_
#define TRAINSCOPE_SRC_ENV_VERSION_H_

#include <string>
#include <string_view>

#include "absl/strings/string_view.h"

namespace trainscope::env {

// Compares two version strings: split into runs of digits and runs of letters (any other
// character separates); digit runs compare as numbers, letter runs case-insensitively;
// a missing component is smaller than a number ("12.4" < "12.4.1"), but a release is
// greater than a pre-release marker ("8.0.RC1" < "8.0.0", "2.1.0rc1" < "2.1.0").
// Anything after '+' (local build tags like "+cu121") is ignored. Returns <0, 0, >0.
int CompareVersions(absl::string_view a, absl::string_view b);

// True when `version` equals `pattern` component by component, or `pattern` ends in
// ".*" / ".x" and `version` starts with the components before it ("12.4.1" matches
// "12.4.*"; "8.0.RC2" matches "8.0.RC2"). Case-insensitive.
bool VersionMatches(absl::string_view version, absl::string_view pattern);

// The first "major.minor" of a version ("12.4.127" -> "12.4"; "13" -> "13"). Empty when
// the string does not start with a digit.
std::string MajorMinor(absl::string_view version);

}  // namespace trainscope::env

#endif  // TRAINSCOPE_SRC_ENV_VERSION_H_
