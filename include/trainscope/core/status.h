// Status helpers shared by every module. Library code returns absl::Status /
// absl::StatusOr<T>; only main() turns a Status into an exit code (see exit.h).
#ifndef TRAINSCOPE_CORE_STATUS_H_
#define TRAINSCOPE_CORE_STATUS_H_

#include <cstdio>
#include <cstdlib>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

// Always-on invariant check for bugs (never for user errors: those are Status).
#define TS_CHECK(cond)                                                                \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                   \
    }                                                                                 \
  } while (0)

#define TS_RETURN_IF_ERROR(expr)               \
  do {                                         \
    ::absl::Status ts_status_ = (expr);        \
    if (!ts_status_.ok()) return ts_status_;   \
  } while (0)

#define TS_CONCAT_INNER_(a, b) a##b
#define TS_CONCAT_(a, b) TS_CONCAT_INNER_(a, b)

// TS_ASSIGN_OR_RETURN(auto x, FunctionReturningStatusOr());
#define TS_ASSIGN_OR_RETURN(lhs, expr) \
  TS_ASSIGN_OR_RETURN_IMPL_(TS_CONCAT_(ts_statusor_, __LINE__), lhs, expr)
#define TS_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()

#endif  // TRAINSCOPE_CORE_STATUS_H_
