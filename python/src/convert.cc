#include "convert.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace py = pybind11;

namespace trainscope::python {

void RegisterError(py::module_& m) {
  py::register_exception<StatusError>(m, "Error", PyExc_RuntimeError);
}

py::object ToPython(const nlohmann::json& j) {
  using Type = nlohmann::json::value_t;
  switch (j.type()) {
    case Type::null:
    case Type::discarded:
      return py::none();
    case Type::boolean:
      return py::bool_(j.get<bool>());
    case Type::number_integer:
      return py::int_(j.get<int64_t>());
    case Type::number_unsigned:
      return py::int_(j.get<uint64_t>());
    case Type::number_float:
      return py::float_(j.get<double>());
    case Type::string: {
      const std::string& s = j.get_ref<const std::string&>();
      PyObject* u = PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "replace");
      if (u == nullptr) throw py::error_already_set();
      return py::reinterpret_steal<py::object>(u);
    }
    case Type::binary:
      return py::bytes(reinterpret_cast<const char*>(j.get_binary().data()), j.get_binary().size());
    case Type::array: {
      py::list list(j.size());
      size_t i = 0;
      for (const auto& v : j) list[i++] = ToPython(v);
      return std::move(list);
    }
    case Type::object: {
      py::dict dict;
      for (auto it = j.begin(); it != j.end(); ++it) dict[py::str(it.key())] = ToPython(it.value());
      return std::move(dict);
    }
  }
  return py::none();
}

namespace {

nlohmann::json FromPythonAt(const py::handle& obj, const std::string& what, const std::string& at) {
  if (obj.is_none()) return nullptr;
  if (py::isinstance<py::bool_>(obj)) return obj.cast<bool>();
  if (py::isinstance<py::int_>(obj)) {
    try {
      return obj.cast<int64_t>();
    } catch (const py::cast_error&) {
      throw StatusError(absl::InvalidArgumentError(
          absl::StrCat(what, ": ", at, ": integer out of the 64-bit range")));
    }
  }
  if (py::isinstance<py::float_>(obj)) {
    const double d = obj.cast<double>();
    if (!std::isfinite(d)) {
      throw StatusError(absl::InvalidArgumentError(
          absl::StrCat(what, ": ", at, ": ", d, " cannot be stored in JSON")));
    }
    return d;
  }
  if (py::isinstance<py::str>(obj)) return obj.cast<std::string>();
  if (py::isinstance<py::list>(obj) || py::isinstance<py::tuple>(obj)) {
    nlohmann::json a = nlohmann::json::array();
    size_t i = 0;
    for (const py::handle& v : obj)
      a.push_back(FromPythonAt(v, what, absl::StrCat(at, "[", i++, "]")));
    return a;
  }
  if (py::isinstance<py::dict>(obj)) {
    nlohmann::json o = nlohmann::json::object();
    for (const auto& [k, v] : obj.cast<py::dict>()) {
      if (!py::isinstance<py::str>(k)) {
        throw StatusError(absl::InvalidArgumentError(
            absl::StrCat(what, ": ", at, ": key ", std::string(py::repr(k)), " is not a str")));
      }
      const std::string key = k.cast<std::string>();
      o[key] = FromPythonAt(v, what, absl::StrCat(at, ".", key));
    }
    return o;
  }
  throw StatusError(absl::InvalidArgumentError(
      absl::StrCat(what, ": ", at, ": a ", std::string(py::str(obj.get_type().attr("__name__"))),
                   " cannot be stored in JSON (use None, bool, int, float, str, list or dict)")));
}

}  // namespace

nlohmann::json FromPython(const py::handle& obj, const std::string& what) {
  return FromPythonAt(obj, what, "$");
}

}  // namespace trainscope::python
