// The pickle machine's own object graph (pickle.cc builds it, pickle_tree.cc copies it into
// the public Value tree). Python's unpickler works on shared, mutable objects: a dict is
// memoized while empty and filled by a later SETITEMS, and every GET of it must see the
// filled dict. So the machine keeps nodes in an arena, refers to them by pointer (cycles
// are harmless there: the arena owns every node), and only the final copy into a tree
// checks for cycles and for expansion past the budget.
#ifndef TRAINSCOPE_SRC_CORE_PICKLE_INTERNAL_H_
#define TRAINSCOPE_SRC_CORE_PICKLE_INTERNAL_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "trainscope/core/pickle.h"

namespace trainscope::pickle::internal {

struct Node;

struct NodeRecord {
  std::string class_name;
  std::vector<Node*> args;
  std::vector<Node*> kwargs;  // key, value, key, value, ...
  Node* state = nullptr;      // nullptr: no BUILD
  std::vector<Node*> list_items;
  std::vector<Node*> dict_items;  // key, value, ...
};

struct Node {
  Value::Kind kind = Value::Kind::kNone;
  bool on_path = false;  // set while the tree copy is inside this node (cycle check)
  int64_t integer = 0;
  double real = 0;
  uint64_t offset = 0;  // byte offset of the opcode that made it
  std::string text;
  // List, tuple, set, persistent id (one item); dict: key, value, key, value, ...
  std::vector<Node*> items;
  std::unique_ptr<NodeRecord> record;
  // Dict: key signature -> index of the key in `items`, so that a key set twice keeps one
  // entry, as in Python (scalar keys only; made on first use).
  std::unique_ptr<std::unordered_map<std::string, size_t>> key_index;
};

// Owns every node of one parse; addresses are stable.
class Arena {
 public:
  Node* New(Value::Kind kind, uint64_t offset) {
    nodes_.emplace_back();
    nodes_.back().kind = kind;
    nodes_.back().offset = offset;
    return &nodes_.back();
  }
  size_t size() const { return nodes_.size(); }

 private:
  std::deque<Node> nodes_;
};

// pickle_text.cc: the opcode's name ("BINUNICODE"), or nullptr for an unknown one.
const char* PickleOpName(uint8_t op);
// Code point -> UTF-8 (surrogates too: ValidUtf8 replaces them where text is printed).
void AppendUtf8(uint32_t cp, std::string* out);
// UNICODE's argument (raw-unicode-escape) -> UTF-8; false on a bad \u escape.
bool DecodeRawUnicodeEscape(std::string_view s, std::string* out);
// STRING's argument (a quoted Python 2 literal) -> its bytes; false when not quoted.
bool DecodeQuotedString(std::string_view s, std::string* out);
// LONG1/LONG4's little-endian two's complement -> decimal text ("0x..." when very long).
std::string LongBytesToText(std::string_view b);
// Decimal text -> *small when it fits int64, else *big = canonical digits; false if not
// a decimal integer.
bool ParseDecimal(std::string_view s, int64_t* small, std::string* big);

// pickle_tree.cc: dict keys. Python's == on scalar keys (str, bytes, int and bool, big int,
// None; other keys only equal themselves), and a text form of a scalar key for a large
// dict's index ("" for others).
bool SameKey(const Node* a, const Node* b);
std::string KeySignature(const Node* k);

// Copies the graph under `root` into a tree: InvalidArgument when it contains itself, nests
// deeper than max_depth, or expands past max_nodes nodes / max_text_bytes bytes of text.
absl::StatusOr<Value> ToTree(Node* root, int max_depth, uint64_t max_nodes,
                             uint64_t max_text_bytes);

}  // namespace trainscope::pickle::internal

#endif  // TRAINSCOPE_SRC_CORE_PICKLE_INTERNAL_H_
