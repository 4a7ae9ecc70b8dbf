// What the trace module's test files share: core/test_util.h's scratch directories and
// whole-file writes, under the names they have always used here.
#ifndef TRAINSCOPE_TRACE_TRACE_TEST_UTIL_H_
#define TRAINSCOPE_TRACE_TRACE_TEST_UTIL_H_

#include "core/test_util.h"

namespace trainscope::trace::testing {

inline std::string TempDir() { return test_util::TempDir("trace_test"); }
using test_util::WriteFile;

}  // namespace trainscope::trace::testing

#endif  // TRAINSCOPE_TRACE_TRACE_TEST_UTIL_H_
