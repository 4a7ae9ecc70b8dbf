// A small XML reader for the documents trainscope parses (nvidia-smi -q -x): elements,
// attributes and text; comments, <?...?> and <!DOCTYPE ...> are skipped; the five
// predefined entities and numeric character references are decoded. No namespaces, no
// CDATA sections, no DTD processing. Not thread-safe per node; nodes are plain values.
#ifndef TRAINSCOPE_SRC_ENV_XML_H_
#define TRAINSCOPE_SRC_ENV_XML_H_

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace trainscope::env {

struct XmlNode {
  std::string name;
  std::map<std::string, std::string> attributes;
  std::string text;  // concatenated character data directly inside, whitespace-trimmed
  std::vector<XmlNode> children;

  // First child with this name, or nullptr.
  const XmlNode* Child(absl::string_view child_name) const;
  // Text of the element at a '/'-separated path below this node ("fb_memory_usage/total"),
  // or "" when any step is missing.
  std::string Text(absl::string_view path) const;
  // All children with this name.
  std::vector<const XmlNode*> Children(absl::string_view child_name) const;
};

// Parses a whole document and returns its root element. InvalidArgument naming the line
// and column of the first syntax error (unbalanced tags, unterminated markup).
absl::StatusOr<XmlNode> ParseXml(absl::string_view text);

}  // namespace trainscope::env

#endif  // TRAINSCOPE_SRC_ENV_XML_H_
