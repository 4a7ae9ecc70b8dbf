// libtorch's unpickler -> nlohmann::json. Exceptions from libtorch (c10::Error and the
// std::exception it derives from) are caught here and become a Status.
#include "hang/pickle_torch.h"

#include <torch/csrc/jit/serialization/pickle.h>

#include <string>

#include "absl/status/status.h"
#include "trainscope/core/utf8.h"

namespace trainscope::hang {
namespace {

constexpr int kMaxDepth = 64;  // dumps nest 5 deep

absl::StatusOr<nlohmann::json> ToJson(const c10::IValue& v, int depth) {
  using nlohmann::json;
  if (depth > kMaxDepth) return absl::InvalidArgumentError("nested deeper than 64 levels");
  if (v.isNone()) return json(nullptr);
  if (v.isBool()) return json(v.toBool());
  if (v.isInt()) return json(v.toInt());
  if (v.isDouble()) return json(v.toDouble());
  if (v.isString()) return json(ValidUtf8(v.toStringRef()));
  if (v.isList() || v.isTuple()) {
    json out = json::array();
    if (v.isTuple()) {
      for (const c10::IValue& x : v.toTupleRef().elements()) {
        auto j = ToJson(x, depth + 1);
        if (!j.ok()) return j;
        out.push_back(*std::move(j));
      }
    } else {
      for (const c10::IValue& x : v.toListRef()) {
        auto j = ToJson(x, depth + 1);
        if (!j.ok()) return j;
        out.push_back(*std::move(j));
      }
    }
    return out;
  }
  if (v.isGenericDict()) {
    json out = json::object();
    for (const auto& kv : v.toGenericDict()) {
      const c10::IValue& k = kv.key();
      std::string key;
      if (k.isString()) {
        key = ValidUtf8(k.toStringRef());
      } else if (k.isInt()) {
        key = std::to_string(k.toInt());
      } else {
        return absl::InvalidArgumentError("a dict key that is neither str nor int");
      }
      auto j = ToJson(kv.value(), depth + 1);
      if (!j.ok()) return j;
      out[key] = *std::move(j);
    }
    return out;
  }
  return absl::InvalidArgumentError("a value of type " + v.tagKind() +
                                    " (dumps hold only dict, list, tuple, str, int, float, "
                                    "bool, None)");
}

}  // namespace

PickleLoader TorchPickleLoader() {
  return [](const std::string& bytes) -> absl::StatusOr<nlohmann::json> {
    c10::IValue v;
    try {
      v = torch::jit::unpickle(bytes.data(), bytes.size());
    } catch (const std::exception& e) {
      std::string what = e.what();
      size_t nl = what.find('\n');
      if (nl != std::string::npos) what.resize(nl);  // c10::Error appends a backtrace
      return absl::InvalidArgumentError("libtorch's unpickler: " + what);
    }
    return ToJson(v, 0);
  };
}

}  // namespace trainscope::hang
