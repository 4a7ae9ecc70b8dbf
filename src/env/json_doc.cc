#include "env/json_doc.h"

#include <regex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "trainscope/core/status.h"

namespace trainscope::env {

using nlohmann::json;

absl::StatusOr<json> ParseJsonText(absl::string_view text, const std::string& name) {
  try {
    return json::parse(text.begin(), text.end());
  } catch (const json::parse_error& e) {
    // e.byte is the 1-based offset of the character that failed.
    size_t byte = e.byte == 0 ? 0 : e.byte - 1;
    int line = 1, col = 1;
    for (size_t i = 0; i < byte && i < text.size(); ++i) {
      if (text[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    std::string what = e.what();
    // nlohmann: "[json.exception.parse_error.101] parse error at line 1, column 2: reason"
    size_t colon = what.find(": ");
    std::string reason = colon == std::string::npos ? what : what.substr(colon + 2);
    return absl::InvalidArgumentError(absl::StrCat(name, ":", line, ":", col, ": ", reason));
  }
}

absl::StatusOr<json> ReadJsonFile(Os* os, const std::string& path) {
  absl::StatusOr<std::string> text = os->ReadFile(path);
  if (!text.ok()) return text.status();
  if (text->empty()) return absl::InvalidArgumentError(absl::StrCat(path, ":1:1: empty file"));
  return ParseJsonText(*text, path);
}

namespace {

std::string TypeOf(const json& v) {
  switch (v.type()) {
    case json::value_t::object:
      return "object";
    case json::value_t::array:
      return "array";
    case json::value_t::string:
      return "string";
    case json::value_t::boolean:
      return "boolean";
    case json::value_t::null:
      return "null";
    case json::value_t::number_float:
      return "number";
    default:
      return "integer";
  }
}

bool TypeMatches(const json& v, const std::string& type) {
  std::string t = TypeOf(v);
  return t == type || (type == "number" && t == "integer");
}

std::string Short(const json& v) {
  std::string s = v.dump();
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

// Depth-first validation; returns the first violation as "path: reason", "" when none.
class Validator {
 public:
  explicit Validator(const json& root) : root_(root) {}

  std::string Check(const json& v, const json& schema, const std::string& path, int depth) {
    if (depth > 64) return path + ": schema nesting too deep";
    if (!schema.is_object()) return "";
    if (auto ref = schema.find("$ref"); ref != schema.end()) {
      const std::string& r = ref->get_ref<const std::string&>();
      const std::string prefix = "#/$defs/";
      if (r.compare(0, prefix.size(), prefix) != 0) return path + ": unsupported $ref " + r;
      auto defs = root_.find("$defs");
      if (defs == root_.end() || !defs->contains(r.substr(prefix.size()))) {
        return path + ": unknown $ref " + r;
      }
      std::string e = Check(v, (*defs)[r.substr(prefix.size())], path, depth + 1);
      if (!e.empty()) return e;
    }
    if (auto any = schema.find("anyOf"); any != schema.end()) {
      std::vector<std::string> why;
      bool ok = false;
      for (const json& alt : *any) {
        std::string e = Check(v, alt, path, depth + 1);
        if (e.empty()) {
          ok = true;
          break;
        }
        why.push_back(e);
      }
      if (!ok) {
        return absl::StrCat(path, ": ", Short(v), " matches none of the allowed forms (",
                            absl::StrJoin(why, "; "), ")");
      }
    }
    if (auto type = schema.find("type"); type != schema.end()) {
      bool ok = false;
      std::vector<std::string> names;
      if (type->is_string()) names.push_back(type->get<std::string>());
      if (type->is_array()) {
        for (const json& t : *type) names.push_back(t.get<std::string>());
      }
      for (const std::string& t : names) ok = ok || TypeMatches(v, t);
      if (!ok) {
        return absl::StrCat(path, ": expected ", absl::StrJoin(names, " or "), ", found ",
                            TypeOf(v), " ", Short(v));
      }
    }
    if (auto en = schema.find("enum"); en != schema.end()) {
      bool ok = false;
      for (const json& e : *en) ok = ok || e == v;
      if (!ok) return absl::StrCat(path, ": ", Short(v), " is not one of ", Short(*en));
    }
    if (auto c = schema.find("const"); c != schema.end() && *c != v) {
      return absl::StrCat(path, ": expected ", Short(*c), ", found ", Short(v));
    }
    if (auto m = schema.find("minimum");
        m != schema.end() && v.is_number() && v.get<double>() < m->get<double>()) {
      return absl::StrCat(path, ": ", Short(v), " is below the minimum ", Short(*m));
    }
    if (auto p = schema.find("pattern"); p != schema.end() && v.is_string()) {
      std::regex re(p->get<std::string>());
      if (!std::regex_search(v.get_ref<const std::string&>(), re)) {
        return absl::StrCat(path, ": ", Short(v), " does not match /", p->get<std::string>(), "/");
      }
    }
    if (v.is_object()) {
      if (auto req = schema.find("required"); req != schema.end()) {
        for (const json& k : *req) {
          if (!v.contains(k.get<std::string>())) {
            return absl::StrCat(path, ": missing required field \"", k.get<std::string>(), "\"");
          }
        }
      }
      const json* props = schema.contains("properties") ? &schema["properties"] : nullptr;
      auto addl = schema.find("additionalProperties");
      for (auto it = v.begin(); it != v.end(); ++it) {
        std::string sub = path + "." + it.key();
        if (props && props->contains(it.key())) {
          std::string e = Check(it.value(), (*props)[it.key()], sub, depth + 1);
          if (!e.empty()) return e;
        } else if (addl != schema.end()) {
          if (addl->is_boolean() && !addl->get<bool>()) {
            return absl::StrCat(sub, ": unknown field");
          }
          std::string e = Check(it.value(), *addl, sub, depth + 1);
          if (!e.empty()) return e;
        }
      }
    }
    if (v.is_array()) {
      if (auto items = schema.find("items"); items != schema.end()) {
        for (size_t i = 0; i < v.size(); ++i) {
          std::string e = Check(v[i], *items, absl::StrCat(path, "[", i, "]"), depth + 1);
          if (!e.empty()) return e;
        }
      }
    }
    return "";
  }

 private:
  const json& root_;
};

}  // namespace

absl::Status ValidateAgainstSchema(const json& doc, const json& schema, const std::string& name) {
  std::string e = Validator(schema).Check(doc, schema, "$", 0);
  if (e.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(name, ": ", e));
}

}  // namespace trainscope::env
