// The pickle machine's graph -> the public Value tree, and the tree's helpers (Find,
// ToJson). The copy is a depth-first walk that marks the nodes on its path: meeting one
// again is a structure that contains itself (Python can pickle `l = []; l.append(l)`, a
// tree cannot hold it). Shared nodes are copied each time they are met, so a pickle of a
// few hundred bytes could ask for 2^100 copies (each level a tuple of the one below, twice):
// the walk counts nodes and text bytes and stops at the budget.
#include <cmath>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/pickle_internal.h"
#include "trainscope/core/pickle.h"
#include "trainscope/core/utf8.h"

namespace trainscope::pickle {
namespace internal {
namespace {

using Kind = Value::Kind;

// The kind of equality Python's dict uses for a scalar key: 's' str, 'b' bytes, 'i' int and
// bool (True == 1), 'I' big int, 'n' None; 0 for keys compared by identity here.
char PickleKeyClass(const Node* k) {
  switch (k->kind) {
    case Kind::kString:
      return 's';
    case Kind::kBytes:
      return 'b';
    case Kind::kInt:
    case Kind::kBool:
      return 'i';
    case Kind::kBigInt:
      return 'I';
    case Kind::kNone:
      return 'n';
    default:
      return 0;
  }
}

class TreeCopier {
 public:
  TreeCopier(int max_depth, uint64_t max_nodes, uint64_t max_text_bytes)
      : max_depth_(max_depth), max_nodes_(max_nodes), max_text_bytes_(max_text_bytes) {}

  absl::Status Copy(Node* n, int depth, Value* out) {
    if (depth > max_depth_)
      return Error(n, absl::StrCat("nested deeper than ", max_depth_, " levels"));
    if (n->on_path) return Error(n, "a structure that contains itself");
    if (++nodes_ > max_nodes_)
      return Error(n,
                   absl::StrCat("shared references expand to more than ", max_nodes_, " values"));
    text_bytes_ += n->text.size();
    if (text_bytes_ > max_text_bytes_)
      return Error(n, absl::StrCat("shared references expand to more than ", max_text_bytes_,
                                   " bytes of text"));
    out->kind = n->kind;
    out->integer = n->integer;
    out->real = n->real;
    out->text = n->text;
    n->on_path = true;
    absl::Status s = CopyChildren(n, depth, out);
    n->on_path = false;
    return s;
  }

 private:
  absl::Status Error(const Node* n, const std::string& why) const {
    return absl::InvalidArgumentError(
        absl::StrCat("byte ", n->offset, ": the ", KindName(n->kind), " made here: ", why));
  }

  absl::Status CopyList(const std::vector<Node*>& in, int depth, std::vector<Value>* out) {
    out->resize(in.size());
    for (size_t i = 0; i < in.size(); ++i)
      if (auto s = Copy(in[i], depth + 1, &(*out)[i]); !s.ok()) return s;
    return absl::OkStatus();
  }

  absl::Status CopyPairs(const std::vector<Node*>& in, int depth, std::vector<DictItem>* out) {
    out->resize(in.size() / 2);
    for (size_t i = 0; i + 1 < in.size(); i += 2) {
      if (auto s = Copy(in[i], depth + 1, &(*out)[i / 2].key); !s.ok()) return s;
      if (auto s = Copy(in[i + 1], depth + 1, &(*out)[i / 2].value); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

  absl::Status CopyChildren(Node* n, int depth, Value* out) {
    if (n->kind == Value::Kind::kDict) return CopyPairs(n->items, depth, &out->dict);
    if (n->kind != Value::Kind::kRecord) return CopyList(n->items, depth, &out->items);
    const NodeRecord& in = *n->record;
    auto r = std::make_shared<Record>();
    r->class_name = in.class_name;
    if (auto s = CopyList(in.args, depth, &r->args); !s.ok()) return s;
    if (auto s = CopyPairs(in.kwargs, depth, &r->kwargs); !s.ok()) return s;
    if (in.state) {
      r->has_state = true;
      if (auto s = Copy(in.state, depth + 1, &r->state); !s.ok()) return s;
    }
    if (auto s = CopyList(in.list_items, depth, &r->list_items); !s.ok()) return s;
    if (auto s = CopyPairs(in.dict_items, depth, &r->dict_items); !s.ok()) return s;
    out->record = std::move(r);
    return absl::OkStatus();
  }

  const int max_depth_;
  const uint64_t max_nodes_, max_text_bytes_;
  uint64_t nodes_ = 0, text_bytes_ = 0;
};

}  // namespace

// A signature of a scalar key (Python's == on str, bytes, int, bool, None), "" for others.
std::string KeySignature(const Node* k) {
  switch (k->kind) {
    case Kind::kString:
      return "s" + k->text;
    case Kind::kBytes:
      return "b" + k->text;
    case Kind::kInt:
    case Kind::kBool:
      return absl::StrCat("i", k->integer);
    case Kind::kBigInt:
      return "i" + k->text;
    case Kind::kNone:
      return "n";
    default:
      return "";
  }
}

bool SameKey(const Node* a, const Node* b) {
  if (a == b) return true;
  const char c = PickleKeyClass(a);
  if (c == 0 || c != PickleKeyClass(b)) return false;
  return c == 'i' ? a->integer == b->integer : a->text == b->text;
}

absl::StatusOr<Value> ToTree(Node* root, int max_depth, uint64_t max_nodes,
                             uint64_t max_text_bytes) {
  Value out;
  TreeCopier copier(max_depth, max_nodes, max_text_bytes);
  if (auto s = copier.Copy(root, 0, &out); !s.ok()) return s;
  return out;
}

}  // namespace internal

const char* KindName(Value::Kind kind) {
  switch (kind) {
    case Value::Kind::kNone:
      return "none";
    case Value::Kind::kBool:
      return "bool";
    case Value::Kind::kInt:
      return "int";
    case Value::Kind::kBigInt:
      return "big int";
    case Value::Kind::kFloat:
      return "float";
    case Value::Kind::kString:
      return "str";
    case Value::Kind::kBytes:
      return "bytes";
    case Value::Kind::kList:
      return "list";
    case Value::Kind::kTuple:
      return "tuple";
    case Value::Kind::kSet:
      return "set";
    case Value::Kind::kDict:
      return "dict";
    case Value::Kind::kGlobal:
      return "global";
    case Value::Kind::kRecord:
      return "record";
    case Value::Kind::kPersistentId:
      return "persistent id";
  }
  return "?";
}

const Value* Value::Find(std::string_view key) const {
  const std::vector<DictItem>* items = &dict;
  if (kind == Kind::kRecord) {
    if (!record->has_state || record->state.kind != Kind::kDict) return nullptr;
    items = &record->state.dict;
  } else if (kind != Kind::kDict) {
    return nullptr;
  }
  for (const DictItem& it : *items)
    if (it.key.kind == Kind::kString && it.key.text == key) return &it.value;
  return nullptr;
}

const std::string& Value::class_name() const {
  static const std::string* kEmpty = new std::string();
  return kind == Kind::kRecord ? record->class_name : *kEmpty;
}

namespace {

nlohmann::json PickleItemsJson(const std::vector<Value>& items) {
  nlohmann::json out = nlohmann::json::array();
  for (const Value& v : items) out.push_back(ToJson(v));
  return out;
}

nlohmann::json PickleDictJson(const std::vector<DictItem>& items) {
  nlohmann::json out = nlohmann::json::object();
  for (const DictItem& it : items) {
    std::string key =
        it.key.kind == Value::Kind::kString
            ? ValidUtf8(it.key.text)
            : ToJson(it.key).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    out[key] = ToJson(it.value);
  }
  return out;
}

}  // namespace

nlohmann::json ToJson(const Value& v) {
  using json = nlohmann::json;
  switch (v.kind) {
    case Value::Kind::kNone:
      return nullptr;
    case Value::Kind::kBool:
      return v.integer != 0;
    case Value::Kind::kInt:
      return v.integer;
    case Value::Kind::kBigInt:
      return v.text;
    case Value::Kind::kFloat:
      return std::isfinite(v.real) ? json(v.real) : json(nullptr);
    case Value::Kind::kString:
      return ValidUtf8(v.text);
    case Value::Kind::kGlobal:
      return ValidUtf8(v.text);
    case Value::Kind::kBytes: {
      static const char kHex[] = "0123456789abcdef";
      std::string hex;
      for (size_t i = 0; i < v.text.size() && i < 64; ++i) {
        hex.push_back(kHex[static_cast<uint8_t>(v.text[i]) >> 4]);
        hex.push_back(kHex[static_cast<uint8_t>(v.text[i]) & 15]);
      }
      return {{"bytes", v.text.size()}, {"hex", hex}};
    }
    case Value::Kind::kList:
    case Value::Kind::kTuple:
    case Value::Kind::kSet:
      return PickleItemsJson(v.items);
    case Value::Kind::kDict:
      return PickleDictJson(v.dict);
    case Value::Kind::kPersistentId:
      return {{"persistent_id", v.items.empty() ? json(nullptr) : ToJson(v.items[0])}};
    case Value::Kind::kRecord: {
      const Record& r = *v.record;
      json out = {{"class", ValidUtf8(r.class_name)}, {"args", PickleItemsJson(r.args)}};
      if (!r.kwargs.empty()) out["kwargs"] = PickleDictJson(r.kwargs);
      if (r.has_state) out["state"] = ToJson(r.state);
      if (!r.list_items.empty()) out["items"] = PickleItemsJson(r.list_items);
      if (!r.dict_items.empty()) out["dict_items"] = PickleDictJson(r.dict_items);
      return out;
    }
  }
  return nullptr;
}

}  // namespace trainscope::pickle
