#include "trainscope/core/utf8.h"

namespace trainscope {

size_t Utf8SequenceLength(std::string_view s) {
  if (s.empty()) return 0;
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const unsigned c = p[0];
  if (c < 0x80) return 1;
  size_t len = 0;
  unsigned lo = 0x80, hi = 0xBF;  // range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    if (c == 0xE0) lo = 0xA0;  // overlong
    if (c == 0xED) hi = 0x9F;  // surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    if (c == 0xF0) lo = 0x90;  // overlong
    if (c == 0xF4) hi = 0x8F;  // beyond U+10FFFF
  } else {
    return 0;
  }
  if (s.size() < len || p[1] < lo || p[1] > hi) return 0;
  for (size_t i = 2; i < len; ++i) {
    if (p[i] < 0x80 || p[i] > 0xBF) return 0;
  }
  return len;
}

std::string ValidUtf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const size_t len = Utf8SequenceLength(s.substr(i));
    if (len == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
    } else {
      out.append(s.data() + i, len);
      i += len;
    }
  }
  return out;
}

std::string Excerpt(std::string_view s, size_t max_bytes) {
  if (s.size() <= max_bytes) return ValidUtf8(s);
  size_t cut = 0;
  while (cut < max_bytes) {
    const size_t len = Utf8SequenceLength(s.substr(cut));
    if (cut + (len == 0 ? 1 : len) > max_bytes) break;
    cut += len == 0 ? 1 : len;
  }
  return ValidUtf8(s.substr(0, cut)) + "... (" + std::to_string(s.size()) + " bytes)";
}

void SanitizeUtf8(nlohmann::json* doc) {
  if (doc->is_string()) {
    std::string& s = doc->get_ref<std::string&>();
    std::string valid = ValidUtf8(s);
    if (valid != s) s = std::move(valid);
  } else if (doc->is_array()) {
    for (nlohmann::json& e : *doc) SanitizeUtf8(&e);
  } else if (doc->is_object()) {
    bool bad_key = false;
    for (auto it = doc->begin(); it != doc->end(); ++it) {
      SanitizeUtf8(&it.value());
      bad_key = bad_key || ValidUtf8(it.key()) != it.key();
    }
    if (bad_key) {
      nlohmann::json fixed = nlohmann::json::object();
      for (auto it = doc->begin(); it != doc->end(); ++it) {
        fixed[ValidUtf8(it.key())] = std::move(it.value());
      }
      *doc = std::move(fixed);
    }
  }
}

}  // namespace trainscope
