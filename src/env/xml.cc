#include "env/xml.h"

#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace trainscope::env {

const XmlNode* XmlNode::Child(absl::string_view child_name) const {
  for (const XmlNode& c : children) {
    if (c.name == child_name) return &c;
  }
  return nullptr;
}

std::vector<const XmlNode*> XmlNode::Children(absl::string_view child_name) const {
  std::vector<const XmlNode*> out;
  for (const XmlNode& c : children) {
    if (c.name == child_name) out.push_back(&c);
  }
  return out;
}

std::string XmlNode::Text(absl::string_view path) const {
  const XmlNode* node = this;
  for (absl::string_view step : absl::StrSplit(path, '/')) {
    node = node->Child(absl::string_view(step.data(), step.size()));
    if (!node) return "";
  }
  return node->text;
}

namespace {

// Recursive-descent reader over the whole text; `pos_` always points at the next
// unread character. Depth is bounded so a hostile document cannot exhaust the stack.
class Reader {
 public:
  explicit Reader(absl::string_view s) : s_(s) {}

  absl::StatusOr<XmlNode> Document() {
    SkipMisc();
    if (pos_ >= s_.size() || s_[pos_] != '<') return Error("expected the root element");
    XmlNode root;
    absl::Status st = Element(&root, 0);
    if (!st.ok()) return st;
    return root;
  }

 private:
  absl::Status Error(absl::string_view what) const {
    int line = 1, col = 1;
    for (size_t i = 0; i < pos_ && i < s_.size(); ++i) {
      if (s_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    return absl::InvalidArgumentError(absl::StrCat("line ", line, ":", col, ": ", what));
  }

  bool StartsWith(absl::string_view p) const { return s_.substr(pos_, p.size()) == p; }

  // Skips whitespace, comments, processing instructions and DOCTYPE.
  void SkipMisc() {
    while (pos_ < s_.size()) {
      if (absl::ascii_isspace(s_[pos_])) {
        ++pos_;
      } else if (StartsWith("<!--")) {
        size_t end = s_.find("-->", pos_ + 4);
        pos_ = end == absl::string_view::npos ? s_.size() : end + 3;
      } else if (StartsWith("<?") || StartsWith("<!")) {
        size_t end = s_.find('>', pos_);
        pos_ = end == absl::string_view::npos ? s_.size() : end + 1;
      } else {
        return;
      }
    }
  }

  static std::string Decode(absl::string_view raw) {
    std::string out;
    for (size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] != '&') {
        out.push_back(raw[i]);
        continue;
      }
      size_t semi = raw.find(';', i);
      if (semi == absl::string_view::npos) {
        out.push_back('&');
        continue;
      }
      absl::string_view ent = raw.substr(i + 1, semi - i - 1);
      if (ent == "lt")
        out.push_back('<');
      else if (ent == "gt")
        out.push_back('>');
      else if (ent == "amp")
        out.push_back('&');
      else if (ent == "quot")
        out.push_back('"');
      else if (ent == "apos")
        out.push_back('\'');
      else if (!ent.empty() && ent[0] == '#') {
        long cp = ent.size() > 1 && (ent[1] == 'x' || ent[1] == 'X')
                      ? std::strtol(std::string(ent.substr(2)).c_str(), nullptr, 16)
                      : std::strtol(std::string(ent.substr(1)).c_str(), nullptr, 10);
        if (cp > 0 && cp < 0x80)
          out.push_back(static_cast<char>(cp));
        else
          out.push_back('?');
      } else {
        absl::StrAppend(&out, raw.substr(i, semi - i + 1));
      }
      i = semi;
    }
    return out;
  }

  std::string Name() {
    size_t start = pos_;
    while (pos_ < s_.size() && !absl::ascii_isspace(s_[pos_]) && s_[pos_] != '>' &&
           s_[pos_] != '/' && s_[pos_] != '=') {
      ++pos_;
    }
    return std::string(s_.substr(start, pos_ - start));
  }

  absl::Status Element(XmlNode* node, int depth) {
    if (depth > 64) return Error("elements nested too deeply");
    ++pos_;  // '<'
    node->name = Name();
    if (node->name.empty()) return Error("empty element name");
    // Attributes.
    while (true) {
      while (pos_ < s_.size() && absl::ascii_isspace(s_[pos_])) ++pos_;
      if (pos_ >= s_.size()) return Error(absl::StrCat("unterminated tag <", node->name, ">"));
      if (StartsWith("/>")) {
        pos_ += 2;
        return absl::OkStatus();
      }
      if (s_[pos_] == '>') {
        ++pos_;
        break;
      }
      std::string key = Name();
      if (key.empty() || pos_ >= s_.size() || s_[pos_] != '=') {
        return Error(absl::StrCat("malformed attribute in <", node->name, ">"));
      }
      ++pos_;
      if (pos_ >= s_.size() || (s_[pos_] != '"' && s_[pos_] != '\'')) {
        return Error("attribute value must be quoted");
      }
      char q = s_[pos_++];
      size_t end = s_.find(q, pos_);
      if (end == absl::string_view::npos) return Error("unterminated attribute value");
      node->attributes[key] = Decode(s_.substr(pos_, end - pos_));
      pos_ = end + 1;
    }
    // Content.
    std::string text;
    while (true) {
      if (pos_ >= s_.size()) return Error(absl::StrCat("missing </", node->name, ">"));
      if (StartsWith("</")) {
        pos_ += 2;
        std::string close = Name();
        if (close != node->name) {
          return Error(absl::StrCat("</", close, "> closes <", node->name, ">"));
        }
        while (pos_ < s_.size() && s_[pos_] != '>') ++pos_;
        if (pos_ >= s_.size()) return Error("unterminated closing tag");
        ++pos_;
        node->text = std::string(absl::StripAsciiWhitespace(Decode(text)));
        return absl::OkStatus();
      }
      if (StartsWith("<!--") || StartsWith("<?") || StartsWith("<!")) {
        SkipMisc();
        continue;
      }
      if (s_[pos_] == '<') {
        node->children.emplace_back();
        absl::Status st = Element(&node->children.back(), depth + 1);
        if (!st.ok()) return st;
        continue;
      }
      size_t next = s_.find('<', pos_);
      if (next == absl::string_view::npos) next = s_.size();
      absl::StrAppend(&text, s_.substr(pos_, next - pos_));
      pos_ = next;
    }
  }

  absl::string_view s_;
  size_t pos_ = 0;
};

}  // namespace

absl::StatusOr<XmlNode> ParseXml(absl::string_view text) { return Reader(text).Document(); }

}  // namespace trainscope::env
