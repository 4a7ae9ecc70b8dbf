#include "trainscope/core/check.h"

namespace trainscope {

nlohmann::json CheckToJson(const Check& c) {
  return {{"name", c.name},
          {"verdict", c.verdict},
          {"value", c.value},
          {"expected", c.expected},
          {"advice", c.advice}};
}

Check CheckFromJson(const nlohmann::json& j) {
  auto str = [&](const char* key) {
    auto it = j.find(key);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  return Check{str("name"), str("verdict"), str("value"), str("expected"), str("advice")};
}

}  // namespace trainscope
