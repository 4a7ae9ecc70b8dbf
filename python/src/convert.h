// The two conversions every binding of trainscope._core goes through: an absl::Status that
// is not ok becomes trainscope._core.Error (the one place that does it), and
// nlohmann::json becomes plain Python objects (and back, for the few inputs taken as JSON).
#ifndef TRAINSCOPE_PYTHON_CONVERT_H_
#define TRAINSCOPE_PYTHON_CONVERT_H_

#include <pybind11/pybind11.h>

#include <stdexcept>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace trainscope::python {

// Thrown by ThrowIfError; pybind11 translates it into trainscope._core.Error (a subclass of
// RuntimeError, registered by RegisterError) whose message is the status message.
class StatusError : public std::runtime_error {
 public:
  explicit StatusError(const absl::Status& status)
      : std::runtime_error(std::string(status.message())) {}
};

// Registers trainscope._core.Error on `m`. Call once, before anything can throw.
void RegisterError(pybind11::module_& m);

// Throws StatusError when `status` is not ok. Call with the GIL held or not: the exception
// is translated when it reaches pybind11, which holds the GIL by then.
inline void ThrowIfError(const absl::Status& status) {
  if (!status.ok()) throw StatusError(status);
}
template <typename T>
T ValueOrThrow(absl::StatusOr<T> v) {
  ThrowIfError(v.status());
  return std::move(v).value();
}

// JSON -> None, bool, int, float, str (invalid UTF-8 replaced, as the CLI's --json does),
// list, dict (keys in the JSON's order). Needs the GIL.
pybind11::object ToPython(const nlohmann::json& j);

// None, bool, int, float, str, list/tuple, dict with str keys -> JSON. Anything else (or a
// float that is NaN or infinite, which JSON cannot hold) throws StatusError naming `what`
// and the offending key path. Needs the GIL.
nlohmann::json FromPython(const pybind11::handle& obj, const std::string& what);

}  // namespace trainscope::python

#endif  // TRAINSCOPE_PYTHON_CONVERT_H_
