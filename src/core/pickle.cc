// The pickle machine: Python's unpickler (Lib/pickle.py, _Unpickler) restated over an arena
// of plain nodes. It keeps the same stack, metastack of MARKs and memo, so every opcode
// means what it means to Python; the one difference is that a call of a global never runs
// code: it makes a record (or, for the few well-known reductions, the natural value).
#include "trainscope/core/pickle.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/pickle_internal.h"
#include "trainscope/core/status.h"

namespace trainscope::pickle {
namespace {

using internal::Arena;
using internal::DecodeQuotedString;
using internal::DecodeRawUnicodeEscape;
using internal::LongBytesToText;
using internal::Node;
using internal::NodeRecord;
using internal::ParseDecimal;
using internal::PickleOpName;
using Kind = Value::Kind;

constexpr uint64_t kMaxNodesCap = uint64_t{1} << 23;      // ~1 GB of nodes at worst
constexpr uint64_t kMaxTextBytesCap = uint64_t{1} << 30;  // text copied into the tree
constexpr size_t kMaxLongDecimalBytes = 256;              // longer LONG1/4: hex digits

// The opcode families Machine::Step dispatches to, one method each, in a 256-entry table so
// that the dispatch stays one load and one jump.
enum class OpFamily : uint8_t {
  kUnknown,
  kControl,     // PROTO, FRAME, STOP, MARK, POP, POP_MARK, DUP
  kNumber,      // integers, floats, None, True, False
  kText,        // strings and bytes
  kMemo,        // GET, PUT, MEMOIZE
  kObject,      // globals, calls, BUILD, persistent ids
  kCollection,  // new lists, tuples, dicts, sets
  kFill,        // APPEND(S), ADDITEMS, SETITEM(S)
  kExtension,   // EXT1/2/4
  kBuffer,      // NEXT_BUFFER, READONLY_BUFFER
};
constexpr std::array<OpFamily, 256> MakeOpFamilyTable() {
  // The opcodes of each family, in the enum's order; NUL-terminated (no opcode is 0).
  constexpr const char* kOps[] = {"",
                                  "\x80\x95.(012",
                                  "KMJ\x8a\x8bILFGN\x88\x89",
                                  "SVTUCXB\x8c\x8d\x8e\x96",
                                  "ghjpqr\x94",
                                  "ci\x93R\x81\x92obPQ",
                                  "])}d\x8f\x85\x86\x87lt\x91",
                                  "ae\x90su",
                                  "\x82\x83\x84",
                                  "\x97\x98"};
  std::array<OpFamily, 256> t = {};
  for (size_t f = 0; f < sizeof(kOps) / sizeof(kOps[0]); ++f)
    for (const char* c = kOps[f]; *c; ++c) t[static_cast<uint8_t>(*c)] = OpFamily(f);
  return t;
}
constexpr std::array<OpFamily, 256> kOpFamilies = MakeOpFamilyTable();
static_assert(kOpFamilies['B'] == OpFamily::kText && kOpFamilies[0x98] == OpFamily::kBuffer,
              "an opcode list above lost a character to a hex escape");

class Machine {
 public:
  Machine(std::string_view in, const Options& o) : in_(in), options_(o) {
    max_nodes_ = o.max_nodes ? o.max_nodes
                             : std::min<uint64_t>(kMaxNodesCap, 64 * uint64_t{in.size()} + 4096);
    none_ = arena_.New(Kind::kNone, 0);
    true_ = arena_.New(Kind::kBool, 0);
    true_->integer = 1;
    false_ = arena_.New(Kind::kBool, 0);
  }

  absl::StatusOr<Value> Run();

 private:
  // --- errors and input
  absl::Status Fail(const std::string& why) const {
    const char* name = PickleOpName(op_);
    return absl::InvalidArgumentError(absl::StrCat(
        "byte ", op_at_, ": ",
        name ? std::string(name) : absl::StrCat("opcode 0x", absl::Hex(op_, absl::kZeroPad2)), ": ",
        why));
  }
  bool Take(uint64_t n, std::string_view* out) {
    if (n > in_.size() - at_) return false;
    *out = in_.substr(at_, n);
    at_ += n;
    return true;
  }
  absl::Status TakeOr(uint64_t n, std::string_view* out) {
    if (Take(n, out)) return absl::OkStatus();
    return Fail(absl::StrCat("needs ", n, " bytes, ", in_.size() - at_, " left (truncated)"));
  }
  absl::Status Line(std::string_view* out) {
    size_t nl = in_.find('\n', at_);
    if (nl == std::string_view::npos) return Fail("no end of line (truncated)");
    *out = in_.substr(at_, nl - at_);
    at_ = nl + 1;
    return absl::OkStatus();
  }
  absl::StatusOr<uint64_t> UnsignedLE(int bytes) {
    std::string_view b;
    if (auto s = TakeOr(bytes, &b); !s.ok()) return s;
    uint64_t v = 0;
    for (int i = bytes; i-- > 0;) v = (v << 8) | static_cast<uint8_t>(b[i]);
    return v;
  }

  // --- nodes, stack, marks
  absl::StatusOr<Node*> New(Kind kind) {
    if (arena_.size() >= max_nodes_) return Fail(absl::StrCat("more than ", max_nodes_, " values"));
    return arena_.New(kind, op_at_);
  }
  absl::Status Push(Node* n) {
    if (stack_.size() >= max_nodes_) return Fail("stack too deep");
    stack_.push_back(n);
    return absl::OkStatus();
  }
  size_t Base() const { return marks_.empty() ? 0 : marks_.back(); }
  absl::StatusOr<Node*> Pop() {
    if (stack_.size() <= Base())
      return Fail(stack_.empty() ? "the stack is empty" : "the stack is empty above the MARK");
    Node* n = stack_.back();
    stack_.pop_back();
    return n;
  }
  absl::StatusOr<Node*> Top() {
    if (stack_.size() <= Base()) return Fail("the stack is empty");
    return stack_.back();
  }
  absl::StatusOr<std::vector<Node*>> PopMark() {
    if (marks_.empty()) return Fail("no MARK on the stack");
    std::vector<Node*> items(stack_.begin() + marks_.back(), stack_.end());
    stack_.resize(marks_.back());
    marks_.pop_back();
    return items;
  }

  // --- values
  absl::Status PushNew(Kind kind, std::string text = {}) {
    auto n = New(kind);
    if (!n.ok()) return n.status();
    (*n)->text = std::move(text);
    return Push(*n);
  }
  absl::Status PushInt(int64_t v) {
    auto n = New(Kind::kInt);
    if (!n.ok()) return n.status();
    (*n)->integer = v;
    return Push(*n);
  }
  absl::Status PushSequence(Kind kind, std::vector<Node*> items) {
    auto n = New(kind);
    if (!n.ok()) return n.status();
    (*n)->items = std::move(items);
    return Push(*n);
  }
  absl::Status SetItem(Node* target, Node* key, Node* value);
  absl::Status Extend(Node* target, const std::vector<Node*>& items, bool set_add);
  absl::StatusOr<Node*> Call(Node* callee, const std::vector<Node*>& args,
                             std::vector<Node*> kwargs);
  absl::StatusOr<Node*> WellKnown(const std::string& name, const std::vector<Node*>& args);

  // --- opcodes by family (OpFamilyOf)
  absl::Status Step(bool* stop);
  absl::Status ControlOp(bool* stop);
  absl::Status NumberOp();
  absl::Status TextOp();
  absl::Status MemoOp();
  absl::Status ObjectOp();
  absl::Status CollectionOp();
  absl::Status FillOp();

  std::string_view in_;
  Options options_;
  uint64_t max_nodes_;
  uint64_t at_ = 0, op_at_ = 0;
  uint8_t op_ = 0;
  Arena arena_;
  Node *none_, *true_, *false_;
  std::vector<Node*> stack_;
  std::vector<size_t> marks_;
  // Memo: indices below the input's size (MEMOIZE's, and every PUT Python writes) in a
  // vector, others in a map; memo_count_ is Python's len(memo).
  std::vector<Node*> memo_dense_;
  std::unordered_map<uint64_t, Node*> memo_sparse_;
  uint64_t memo_count_ = 0;
};

constexpr size_t kPickleLinearKeys = 32;  // dicts up to this size find a key by scanning

absl::Status Machine::SetItem(Node* target, Node* key, Node* value) {
  if (target->kind == Kind::kRecord) {
    target->record->dict_items.push_back(key);
    target->record->dict_items.push_back(value);
    return absl::OkStatus();
  }
  if (target->kind != Kind::kDict)
    return Fail(absl::StrCat("the target is a ", KindName(target->kind), ", not a dict"));
  // A key set twice keeps one entry, as in Python. Small dicts (FR entries, dataclass
  // fields) scan; a large one keeps an index of its scalar keys' signatures.
  std::vector<Node*>& items = target->items;
  if (items.size() / 2 < kPickleLinearKeys) {
    for (size_t i = 0; i < items.size(); i += 2) {
      if (internal::SameKey(items[i], key)) {
        items[i + 1] = value;
        return absl::OkStatus();
      }
    }
  } else {
    if (!target->key_index) {
      target->key_index = std::make_unique<std::unordered_map<std::string, size_t>>();
      for (size_t i = 0; i < items.size(); i += 2) {
        std::string sig = internal::KeySignature(items[i]);
        if (!sig.empty()) target->key_index->emplace(std::move(sig), i);
      }
    }
    std::string sig = internal::KeySignature(key);
    if (!sig.empty()) {
      auto [it, inserted] = target->key_index->emplace(std::move(sig), items.size());
      if (!inserted) {
        items[it->second + 1] = value;
        return absl::OkStatus();
      }
    }
  }
  target->items.push_back(key);
  target->items.push_back(value);
  return absl::OkStatus();
}

absl::Status Machine::Extend(Node* target, const std::vector<Node*>& items, bool set_add) {
  if (target->kind == Kind::kRecord) {
    auto& out = target->record->list_items;
    out.insert(out.end(), items.begin(), items.end());
    return absl::OkStatus();
  }
  if (target->kind != (set_add ? Kind::kSet : Kind::kList))
    return Fail(absl::StrCat("the target is a ", KindName(target->kind), ", not a ",
                             set_add ? "set" : "list"));
  target->items.insert(target->items.end(), items.begin(), items.end());
  return absl::OkStatus();
}

// The natural value of a call of a well-known global, or nullptr (then: a record).
absl::StatusOr<Node*> Machine::WellKnown(const std::string& name, const std::vector<Node*>& args) {
  auto strip = [&](const char* prefix) {
    const size_t n = std::strlen(prefix);
    return name.compare(0, n, prefix) == 0 ? name.substr(n) : std::string();
  };
  std::string builtin = strip("builtins.");
  if (builtin.empty()) builtin = strip("__builtin__.");
  auto is_seq = [](const Node* n) {
    return n->kind == Kind::kList || n->kind == Kind::kTuple || n->kind == Kind::kSet;
  };
  auto make = [&](Kind k) -> absl::StatusOr<Node*> { return New(k); };
  if (name == "collections.OrderedDict" || builtin == "dict") {
    if (args.size() > 1) return nullptr;
    auto d = make(Kind::kDict);
    if (!d.ok() || args.empty()) return d;
    if (args[0]->kind == Kind::kDict) {
      for (size_t i = 0; i + 1 < args[0]->items.size(); i += 2)
        if (auto s = SetItem(*d, args[0]->items[i], args[0]->items[i + 1]); !s.ok()) return s;
      return d;
    }
    if (!is_seq(args[0])) return nullptr;
    for (Node* pair : args[0]->items) {
      if (!is_seq(pair) || pair->items.size() != 2) return nullptr;
      if (auto s = SetItem(*d, pair->items[0], pair->items[1]); !s.ok()) return s;
    }
    return d;
  }
  if (builtin == "set" || builtin == "frozenset" || builtin == "list" || builtin == "tuple") {
    if (args.size() > 1 || (args.size() == 1 && !is_seq(args[0]))) return nullptr;
    auto n = make(builtin == "list" ? Kind::kList : builtin == "tuple" ? Kind::kTuple : Kind::kSet);
    if (n.ok() && !args.empty()) (*n)->items = args[0]->items;
    return n;
  }
  if (name == "torch.Size") {
    if (args.size() != 1 || !is_seq(args[0])) return nullptr;
    for (const Node* d : args[0]->items)
      if (d->kind != Kind::kInt) return nullptr;
    auto n = make(Kind::kTuple);
    if (n.ok()) (*n)->items = args[0]->items;
    return n;
  }
  // bytes: bytes(), bytes(b"..."), bytearray(b"..."), and protocols 0-2's spelling
  // _codecs.encode("\x00\xff", "latin1") / bytearray("\x00\xff", "latin-1").
  if (builtin == "bytes" || builtin == "bytearray" || name == "_codecs.encode") {
    std::string out;
    if (args.empty() && name != "_codecs.encode") {
    } else if (args.size() == 1 && args[0]->kind == Kind::kBytes) {
      out = args[0]->text;
    } else if (args.size() == 2 && args[0]->kind == Kind::kString &&
               args[1]->kind == Kind::kString &&
               (args[1]->text == "latin1" || args[1]->text == "latin-1")) {
      const std::string& s = args[0]->text;  // UTF-8 of code points below U+0100
      for (size_t i = 0; i < s.size(); ++i) {
        const uint8_t c = s[i];
        if (c < 0x80) {
          out.push_back(static_cast<char>(c));
        } else if ((c == 0xC2 || c == 0xC3) && i + 1 < s.size() &&
                   (static_cast<uint8_t>(s[i + 1]) & 0xC0) == 0x80) {
          out.push_back(static_cast<char>(((c & 0x1F) << 6) | (s[++i] & 0x3F)));
        } else {
          return nullptr;  // not latin-1: Python would raise; keep the call as a record
        }
      }
    } else {
      return nullptr;
    }
    auto n = make(Kind::kBytes);
    if (n.ok()) (*n)->text = std::move(out);
    return n;
  }
  if (builtin == "getattr" && args.size() == 2 && args[0]->kind == Kind::kGlobal &&
      args[1]->kind == Kind::kString) {
    auto n = make(Kind::kGlobal);
    if (n.ok()) (*n)->text = args[0]->text + "." + args[1]->text;
    return n;
  }
  if (name == "torch.serialization._get_layout" && args.size() == 1 &&
      args[0]->kind == Kind::kString) {
    auto n = make(Kind::kGlobal);
    if (n.ok()) (*n)->text = args[0]->text;
    return n;
  }
  return nullptr;
}

// REDUCE / NEWOBJ / NEWOBJ_EX / OBJ / INST: a record of the call, or a well-known value.
absl::StatusOr<Node*> Machine::Call(Node* callee, const std::vector<Node*>& args,
                                    std::vector<Node*> kwargs) {
  std::string name;
  std::vector<Node*> record_args;
  if (callee->kind == Kind::kGlobal) {
    name = callee->text;
    if (kwargs.empty()) {
      auto known = WellKnown(name, args);
      if (!known.ok() || *known) return known;
    }
    record_args = args;
    // copyreg._reconstructor(cls, base, state): protocols 0-1's spelling of cls.__new__.
    if ((name == "copyreg._reconstructor" || name == "copy_reg._reconstructor") &&
        args.size() == 3 && args[0]->kind == Kind::kGlobal) {
      name = args[0]->text;
      record_args.clear();
      if (args[2]->kind != Kind::kNone) record_args.push_back(args[2]);
    }
  } else {
    record_args.push_back(callee);  // e.g. a method of an object: class_name stays ""
    record_args.insert(record_args.end(), args.begin(), args.end());
  }
  auto n = New(Kind::kRecord);
  if (!n.ok()) return n;
  (*n)->record = std::make_unique<NodeRecord>();
  (*n)->record->class_name = std::move(name);
  (*n)->record->args = std::move(record_args);
  (*n)->record->kwargs = std::move(kwargs);
  return n;
}

absl::Status Machine::NumberOp() {
  switch (op_) {
    case 'N':
      return Push(none_);
    case 0x88:
      return Push(true_);
    case 0x89:
      return Push(false_);
    case 'K':
    case 'M':
    case 'J': {
      const int width = op_ == 'K' ? 1 : op_ == 'M' ? 2 : 4;
      auto v = UnsignedLE(width);
      if (!v.ok()) return v.status();
      return PushInt(width == 4 ? static_cast<int32_t>(static_cast<uint32_t>(*v))
                                : static_cast<int64_t>(*v));
    }
    case 0x8a:
    case 0x8b: {
      auto len = UnsignedLE(op_ == 0x8a ? 1 : 4);
      if (!len.ok()) return len.status();
      if (op_ == 0x8b && static_cast<int32_t>(*len) < 0) return Fail("negative byte count");
      std::string_view b;
      if (auto s = TakeOr(*len, &b); !s.ok()) return s;
      if (b.size() <= 8) {
        uint64_t v = 0;
        for (size_t i = b.size(); i-- > 0;) v = (v << 8) | static_cast<uint8_t>(b[i]);
        if (!b.empty() && b.size() < 8 && (static_cast<uint8_t>(b.back()) & 0x80))
          v |= ~uint64_t{0} << (8 * b.size());  // sign-extend
        return PushInt(static_cast<int64_t>(v));
      }
      std::string text = LongBytesToText(b);
      int64_t small = 0;
      std::string big;
      if (ParseDecimal(text, &small, &big) && big.empty()) return PushInt(small);
      return PushNew(Kind::kBigInt, std::move(text));
    }
    case 'I':
    case 'L': {
      std::string_view line;
      if (auto s = Line(&line); !s.ok()) return s;
      if (op_ == 'I' && (line == "00" || line == "01")) return Push(line == "01" ? true_ : false_);
      if (op_ == 'L' && !line.empty() && line.back() == 'L') line.remove_suffix(1);
      int64_t small = 0;
      std::string big;
      if (!ParseDecimal(line, &small, &big)) return Fail("not a decimal integer");
      return big.empty() ? PushInt(small) : PushNew(Kind::kBigInt, std::move(big));
    }
    case 'F':
    case 'G': {
      double v = 0;
      if (op_ == 'G') {
        auto bits = UnsignedLE(8);  // big-endian on the wire: byte-swap below
        if (!bits.ok()) return bits.status();
        uint64_t be = __builtin_bswap64(*bits);
        std::memcpy(&v, &be, 8);
      } else {
        std::string_view line;
        if (auto s = Line(&line); !s.ok()) return s;
        std::string text(line);
        char* end = nullptr;
        v = std::strtod(text.c_str(), &end);
        if (text.empty() || *end != '\0') return Fail("not a float");
      }
      auto n = New(Kind::kFloat);
      if (!n.ok()) return n.status();
      (*n)->real = v;
      return Push(*n);
    }
  }
  return Fail("internal: not a number opcode");
}

absl::Status Machine::TextOp() {
  uint64_t len = 0;
  Kind kind = Kind::kString;
  switch (op_) {
    case 'S':
    case 'V': {
      std::string_view line;
      if (auto s = Line(&line); !s.ok()) return s;
      std::string out;
      bool ok = op_ == 'S' ? DecodeQuotedString(line, &out) : DecodeRawUnicodeEscape(line, &out);
      if (!ok) return Fail(op_ == 'S' ? "not a quoted string" : "a bad \\u escape");
      return PushNew(Kind::kString, std::move(out));
    }
    case 'T': {  // signed 4-byte length
      auto v = UnsignedLE(4);
      if (!v.ok()) return v.status();
      if (static_cast<int32_t>(*v) < 0) return Fail("negative byte count");
      len = *v;
      break;
    }
    case 'U':
    case 'C':
    case 0x8c: {
      auto v = UnsignedLE(1);
      if (!v.ok()) return v.status();
      len = *v;
      kind = op_ == 'C' ? Kind::kBytes : Kind::kString;
      break;
    }
    case 'X':
    case 'B': {
      auto v = UnsignedLE(4);
      if (!v.ok()) return v.status();
      len = *v;
      kind = op_ == 'B' ? Kind::kBytes : Kind::kString;
      break;
    }
    default: {  // BINUNICODE8, BINBYTES8, BYTEARRAY8
      auto v = UnsignedLE(8);
      if (!v.ok()) return v.status();
      len = *v;
      kind = op_ == 0x8d ? Kind::kString : Kind::kBytes;
    }
  }
  std::string_view b;
  if (auto s = TakeOr(len, &b); !s.ok()) return s;
  return PushNew(kind, std::string(b));
}

absl::Status Machine::MemoOp() {
  uint64_t index = 0;
  if (op_ == 'g' || op_ == 'p') {
    std::string_view line;
    if (auto s = Line(&line); !s.ok()) return s;
    int64_t v = 0;
    std::string big;
    if (!ParseDecimal(line, &v, &big) || !big.empty() || v < 0) return Fail("a bad memo index");
    index = static_cast<uint64_t>(v);
  } else if (op_ == 'h' || op_ == 'q') {
    auto v = UnsignedLE(1);
    if (!v.ok()) return v.status();
    index = *v;
  } else if (op_ == 'j' || op_ == 'r') {
    auto v = UnsignedLE(4);
    if (!v.ok()) return v.status();
    index = *v;
  } else {  // MEMOIZE
    index = memo_count_;
  }
  const bool dense = index < in_.size() + 1024;
  Node** slot = nullptr;
  if (dense && index < memo_dense_.size()) {
    slot = &memo_dense_[index];
  } else if (!dense) {
    auto it = memo_sparse_.find(index);
    if (it != memo_sparse_.end()) slot = &it->second;
  }
  if (op_ == 'g' || op_ == 'h' || op_ == 'j') {
    if (!slot || !*slot) return Fail(absl::StrCat("memo entry ", index, " was never set"));
    return Push(*slot);
  }
  auto top = Top();
  if (!top.ok()) return top.status();
  if (!slot || !*slot) {
    if (memo_count_ >= options_.max_memo_entries)
      return Fail(absl::StrCat("more than ", options_.max_memo_entries, " memo entries"));
    ++memo_count_;
    if (dense) {
      if (index >= memo_dense_.size()) memo_dense_.resize(index + 1, nullptr);
      slot = &memo_dense_[index];
    } else {
      slot = &memo_sparse_[index];
    }
  }
  *slot = *top;
  return absl::OkStatus();
}

absl::Status Machine::ObjectOp() {
  switch (op_) {
    case 'c':
    case 'i': {  // GLOBAL module\nname\n ; INST module\nname\n (args above a MARK)
      std::string_view module, name;
      if (auto s = Line(&module); !s.ok()) return s;
      if (auto s = Line(&name); !s.ok()) return s;
      auto g = New(Kind::kGlobal);
      if (!g.ok()) return g.status();
      (*g)->text = absl::StrCat(std::string(module), ".", std::string(name));
      if (op_ == 'c') return Push(*g);
      auto args = PopMark();
      if (!args.ok()) return args.status();
      auto n = Call(*g, *args, {});
      return n.ok() ? Push(*n) : n.status();
    }
    case 0x93: {  // STACK_GLOBAL
      auto name = Pop();
      if (!name.ok()) return name.status();
      auto module = Pop();
      if (!module.ok()) return module.status();
      if ((*name)->kind != Kind::kString || (*module)->kind != Kind::kString)
        return Fail("module and name are not strings");
      return PushNew(Kind::kGlobal, absl::StrCat((*module)->text, ".", (*name)->text));
    }
    case 'R':
    case 0x81:
    case 0x92: {  // REDUCE f args; NEWOBJ cls args; NEWOBJ_EX cls args kwargs
      std::vector<Node*> kwargs;
      if (op_ == 0x92) {
        auto kw = Pop();
        if (!kw.ok()) return kw.status();
        if ((*kw)->kind != Kind::kDict) return Fail("kwargs are not a dict");
        kwargs = (*kw)->items;
      }
      auto args = Pop();
      if (!args.ok()) return args.status();
      auto callee = Pop();
      if (!callee.ok()) return callee.status();
      if ((*args)->kind != Kind::kTuple) return Fail("the arguments are not a tuple");
      auto n = Call(*callee, (*args)->items, std::move(kwargs));
      return n.ok() ? Push(*n) : n.status();
    }
    case 'o': {  // OBJ: MARK cls args...
      auto items = PopMark();
      if (!items.ok()) return items.status();
      if (items->empty()) return Fail("no class above the MARK");
      std::vector<Node*> args(items->begin() + 1, items->end());
      auto n = Call(items->front(), args, {});
      return n.ok() ? Push(*n) : n.status();
    }
    case 'b': {  // BUILD obj state
      auto state = Pop();
      if (!state.ok()) return state.status();
      auto obj = Top();
      if (!obj.ok()) return obj.status();
      // Only records keep a state; a natural value (a dict made from an OrderedDict, ...)
      // keeps its items, as Python's would, and the state (its __dict__) is not read.
      if ((*obj)->kind == Kind::kRecord) (*obj)->record->state = *state;
      return absl::OkStatus();
    }
    case 'P':
    case 'Q': {  // PERSID id\n ; BINPERSID (id on the stack)
      Node* id = nullptr;
      if (op_ == 'P') {
        std::string_view line;
        if (auto s = Line(&line); !s.ok()) return s;
        auto n = New(Kind::kString);
        if (!n.ok()) return n.status();
        (*n)->text = std::string(line);
        id = *n;
      } else {
        auto n = Pop();
        if (!n.ok()) return n.status();
        id = *n;
      }
      return PushSequence(Kind::kPersistentId, {id});
    }
  }
  return Fail("internal: not an object opcode");
}

absl::Status Machine::ControlOp(bool* stop) {
  switch (op_) {
    case 0x80: {
      TS_ASSIGN_OR_RETURN(uint64_t v, UnsignedLE(1));
      if (v > 5) return Fail(absl::StrCat("unsupported protocol ", v));
      return absl::OkStatus();
    }
    case 0x95: {
      TS_ASSIGN_OR_RETURN(uint64_t v, UnsignedLE(8));
      if (v > in_.size() - at_) return Fail("a frame longer than the input (truncated)");
      return absl::OkStatus();
    }
    case '.': {
      TS_ASSIGN_OR_RETURN(Node * v, Pop());
      stack_.push_back(v);
      *stop = true;
      return absl::OkStatus();
    }
    case '(':
      if (marks_.size() >= max_nodes_) return Fail("too many MARKs");
      marks_.push_back(stack_.size());
      return absl::OkStatus();
    case '0':
      if (stack_.size() > Base()) {
        stack_.pop_back();
        return absl::OkStatus();
      }
      return PopMark().status();  // POP of a MARK, as Python's load_pop
    case '1':
      return PopMark().status();
    case '2': {
      auto t = Top();
      return t.ok() ? Push(*t) : t.status();
    }
  }
  return Fail("internal: not a control opcode");
}

absl::Status Machine::CollectionOp() {
  switch (op_) {
    case ']':
      return PushSequence(Kind::kList, {});
    case ')':
      return PushSequence(Kind::kTuple, {});
    case '}':
      return PushSequence(Kind::kDict, {});
    case 0x8f:
      return PushSequence(Kind::kSet, {});
    case 0x85:
    case 0x86:
    case 0x87: {
      std::vector<Node*> items(op_ - 0x84);
      for (size_t i = items.size(); i-- > 0;) {
        TS_ASSIGN_OR_RETURN(Node * v, Pop());
        items[i] = v;
      }
      return PushSequence(Kind::kTuple, std::move(items));
    }
    case 'l':
    case 't':
    case 0x91: {
      TS_ASSIGN_OR_RETURN(std::vector<Node*> items, PopMark());
      return PushSequence(op_ == 'l'   ? Kind::kList
                          : op_ == 't' ? Kind::kTuple
                                       : Kind::kSet,
                          std::move(items));
    }
    case 'd': {
      TS_ASSIGN_OR_RETURN(std::vector<Node*> items, PopMark());
      if (items.size() % 2) return Fail("an odd number of items");
      TS_ASSIGN_OR_RETURN(Node * d, New(Kind::kDict));
      for (size_t i = 0; i < items.size(); i += 2)
        TS_RETURN_IF_ERROR(SetItem(d, items[i], items[i + 1]));
      return Push(d);
    }
  }
  return Fail("internal: not a collection opcode");
}

absl::Status Machine::FillOp() {
  switch (op_) {
    case 'a': {
      TS_ASSIGN_OR_RETURN(Node * v, Pop());
      TS_ASSIGN_OR_RETURN(Node * target, Top());
      return Extend(target, {v}, false);
    }
    case 'e':
    case 0x90: {
      TS_ASSIGN_OR_RETURN(std::vector<Node*> items, PopMark());
      TS_ASSIGN_OR_RETURN(Node * target, Top());
      return Extend(target, items, op_ == 0x90);
    }
    case 's': {
      TS_ASSIGN_OR_RETURN(Node * v, Pop());
      TS_ASSIGN_OR_RETURN(Node * k, Pop());
      TS_ASSIGN_OR_RETURN(Node * target, Top());
      return SetItem(target, k, v);
    }
    case 'u': {
      TS_ASSIGN_OR_RETURN(std::vector<Node*> items, PopMark());
      if (items.size() % 2) return Fail("an odd number of items");
      TS_ASSIGN_OR_RETURN(Node * target, Top());
      for (size_t i = 0; i < items.size(); i += 2)
        TS_RETURN_IF_ERROR(SetItem(target, items[i], items[i + 1]));
      return absl::OkStatus();
    }
  }
  return Fail("internal: not a fill opcode");
}

absl::Status Machine::Step(bool* stop) {
  op_at_ = at_;
  std::string_view b;
  if (!Take(1, &b)) {
    op_ = 0;
    return absl::InvalidArgumentError(absl::StrCat("byte ", at_, ": no STOP opcode (truncated)"));
  }
  op_ = static_cast<uint8_t>(b[0]);
  switch (kOpFamilies[op_]) {
    case OpFamily::kControl:
      return ControlOp(stop);
    case OpFamily::kNumber:
      return NumberOp();
    case OpFamily::kText:
      return TextOp();
    case OpFamily::kMemo:
      return MemoOp();
    case OpFamily::kObject:
      return ObjectOp();
    case OpFamily::kCollection:
      return CollectionOp();
    case OpFamily::kFill:
      return FillOp();
    case OpFamily::kExtension:
      return Fail("extension codes (copyreg's registry) are not supported");
    case OpFamily::kBuffer:
      return Fail("out-of-band buffers (protocol 5, pickle.PickleBuffer) are not supported");
    case OpFamily::kUnknown:
      break;
  }
  return Fail("unknown opcode");
}

absl::StatusOr<Value> Machine::Run() {
  bool stop = false;
  while (!stop) {
    if (auto s = Step(&stop); !s.ok()) return s;
  }
  const uint64_t text_budget =
      std::min<uint64_t>(kMaxTextBytesCap, 64 * uint64_t{in_.size()} + (uint64_t{16} << 20));
  return internal::ToTree(stack_.back(), options_.max_depth, max_nodes_, text_budget);
}

}  // namespace

absl::StatusOr<Value> Parse(std::string_view bytes, const Options& options) {
  Machine m(bytes, options);
  return m.Run();
}

bool LooksLikePickle(std::string_view bytes) {
  return bytes.size() >= 2 && static_cast<uint8_t>(bytes[0]) == 0x80 &&
         static_cast<uint8_t>(bytes[1]) >= 2 && static_cast<uint8_t>(bytes[1]) <= 5;
}

}  // namespace trainscope::pickle
