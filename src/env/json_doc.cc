#include "env/json_doc.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <regex>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "trainscope/core/json_text.h"
#include "trainscope/core/paths.h"
#include "trainscope/core/status.h"

namespace trainscope::env {

using nlohmann::json;

namespace {

// Second pass after a failed parse: where and why it stopped. nlohmann reports every
// failure here, including out_of_range.406 (1e309), which is no parse_error and carries
// no position in its exception.
class ErrorLocator : public nlohmann::json_sax<json> {
 public:
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return true; }
  bool key(string_t&) override { return true; }
  bool end_object() override { return true; }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t position, const std::string& last_token,
                   const nlohmann::detail::exception& ex) override {
    // A syntax error is reported at the byte that broke it (1-based); a number out of
    // range after the whole token: point at its first byte instead.
    byte_ = position == 0 ? 0 : position - 1;
    if (ex.id == 406 && last_token.size() <= position) byte_ = position - last_token.size();
    what_ = ex.what();
    return false;
  }

  size_t byte_ = 0;  // 0-based offset of the offending byte
  std::string what_;
};

// "[json.exception.parse_error.101] parse error at line 4, column 22: syntax error ..."
// -> "syntax error ..."; "[json.exception.out_of_range.406] number overflow parsing
// '1e309'" -> "number overflow parsing '1e309'".
std::string Reason(std::string what) {
  if (!what.empty() && what[0] == '[') {
    size_t end = what.find("] ");
    if (end != std::string::npos) what = what.substr(end + 2);
  }
  if (absl::StartsWith(what, "parse error")) {
    size_t colon = what.find(": ");
    if (colon != std::string::npos) what = what.substr(colon + 2);
  }
  return what;
}

absl::Status PositionedError(absl::string_view text, const std::string& name, size_t byte,
                             const std::string& reason) {
  int line = 1, col = 1;
  for (size_t i = 0; i < byte && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat(name, ":", line, ":", col, ": ", ValidUtf8(reason), " (byte ", byte, ")"));
}

const char* FileKind(mode_t mode) {
  return S_ISFIFO(mode)   ? "a FIFO or pipe"
         : S_ISCHR(mode)  ? "a character device"
         : S_ISBLK(mode)  ? "a block device"
         : S_ISSOCK(mode) ? "a socket"
                          : "not a plain file";
}

// The real file system, bounded: refuses what is not a regular file without reading it
// (O_NONBLOCK: opening a FIFO without a writer does not block) and reads at most
// kMaxJsonDocumentBytes + 1 bytes.
absl::StatusOr<std::string> ReadRegularFile(const std::string& path) {
  absl::StatusOr<int> opened = OpenNonBlocking(path);
  if (!opened.ok()) return opened.status();
  const int fd = *opened;
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
  struct stat st;
  if (fstat(fd, &st) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", std::strerror(errno)));
  }
  if (S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": is a directory, not a JSON file"));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": not a regular file (", FileKind(st.st_mode), "); give the path of a JSON file"));
  }
  auto too_big = [&](uint64_t n) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", n, " bytes or more, over the ",
                                                   kMaxJsonDocumentBytes >> 20,
                                                   " MiB limit for a JSON document"));
  };
  if (static_cast<uint64_t>(st.st_size) > kMaxJsonDocumentBytes) return too_big(st.st_size);
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  std::string data(static_cast<size_t>(st.st_size) + 1, '\0');  // +1: notice growth
  size_t n = 0;
  while (true) {
    if (n == data.size()) {
      if (data.size() > kMaxJsonDocumentBytes) return too_big(data.size());
      data.resize(std::min(data.size() * 2, kMaxJsonDocumentBytes + 1));
    }
    const ssize_t k = read(fd, data.data() + n, data.size() - n);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) return absl::InvalidArgumentError(absl::StrCat(path, ": ", std::strerror(errno)));
    if (k == 0) break;
    n += static_cast<size_t>(k);
  }
  data.resize(n);
  return data;
}

}  // namespace

absl::StatusOr<json> ParseJsonText(absl::string_view text, const std::string& name) {
  // The shared policy (core/json_text.h); this reader words its errors NAME:LINE:COL.
  json doc;
  JsonTextError e;
  if (trainscope::ParseJsonText(std::string_view(text.data(), text.size()), kMaxJsonDepth, &doc,
                                &e)) {
    return doc;
  }
  if (e.too_deep) {
    return PositionedError(text, name, e.byte,
                           absl::StrCat("nested deeper than ", kMaxJsonDepth, " levels"));
  }
  if (e.out_of_range && e.what.find("out_of_range") == std::string::npos) {
    return PositionedError(text, name, e.byte, e.what);  // an integer beyond 64 bits
  }
  ErrorLocator where;
  json::sax_parse(text.begin(), text.end(), &where);
  return PositionedError(text, name, where.byte_, Reason(where.what_));
}

absl::StatusOr<json> ReadJsonFile(Os* os, const std::string& path) {
  absl::StatusOr<std::string> text =
      os == Os::Default() ? ReadRegularFile(path) : os->ReadFile(path);
  if (!text.ok()) return text.status();
  if (text->size() > kMaxJsonDocumentBytes) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", text->size(), " bytes, over the ",
                                                   kMaxJsonDocumentBytes >> 20,
                                                   " MiB limit for a JSON document"));
  }
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
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
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
      // libstdc++'s regex recurses per character: bound the input.
      if (v.get_ref<const std::string&>().size() > kMaxPatternInputBytes) {
        return absl::StrCat(path, ": a string of ", v.get_ref<const std::string&>().size(),
                            " bytes, too long to match /", p->get<std::string>(), "/ (limit ",
                            kMaxPatternInputBytes, ")");
      }
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
