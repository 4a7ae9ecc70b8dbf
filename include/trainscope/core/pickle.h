// A safe reader of Python pickles (protocols 0-5) into a plain value tree, for the pickles
// trainscope meets without libtorch: torch.distributed.checkpoint `.metadata` files (ckpt)
// and PyTorch Flight Recorder dumps (hang).
//
// Contract:
//  - Never executes anything: GLOBAL / STACK_GLOBAL only name a class or function, and
//    calling one (REDUCE, NEWOBJ, NEWOBJ_EX, OBJ, INST) makes a Record of the name, its
//    arguments and the state a later BUILD gives it. A few well-known reductions become the
//    natural value instead (docs/formats.md "Pickle"): collections.OrderedDict and
//    builtins.dict -> dict, builtins.set / frozenset -> set, builtins.list / tuple, bytes
//    and bytearray (also _codecs.encode(s, "latin1"), protocols 0-2) -> bytes, torch.Size ->
//    tuple, copyreg._reconstructor(cls, ...) -> a Record of cls, builtins.getattr(global,
//    "NAME") and torch.serialization._get_layout("torch.strided") -> a Global. An enum
//    member is the Record of its class with the value as the one argument.
//  - Shared references (memo GET, DUP) are copied into the tree; a structure that contains
//    itself is an error. Bounded: nesting depth (Options::max_depth), memo entries, and the
//    size of the tree (Options::max_nodes; a pickle whose shared references would expand
//    past it is an error); every length field is checked against the bytes left.
//  - Errors: InvalidArgument "byte <offset>: <opcode>: <reason>" for anything malformed
//    (truncated, unknown opcode, stack underflow, a mark missing, a type an opcode cannot
//    apply to, EXT1/2/4 extension codes, protocol-5 out-of-band buffers).
//  - Pure functions; thread-safe.
#ifndef TRAINSCOPE_CORE_PICKLE_H_
#define TRAINSCOPE_CORE_PICKLE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace trainscope::pickle {

struct Record;
struct DictItem;

// One value of the tree. Which members hold data depends on `kind`.
struct Value {
  enum class Kind {
    kNone,
    kBool,          // `integer` is 0 or 1
    kInt,           // `integer`
    kBigInt,        // `text`: decimal digits with an optional '-' (beyond int64)
    kFloat,         // `real`
    kString,        // `text`: UTF-8 as the pickle had it (may be invalid for STRING opcodes)
    kBytes,         // `text`: raw bytes
    kList,          // `items`
    kTuple,         // `items`
    kSet,           // `items` (set and frozenset), in pickle order
    kDict,          // `dict`, in insertion order; keys of any kind
    kGlobal,        // `text`: "module.name" of a class or function that was not called
    kRecord,        // `record`: an instance of a class (or the result of calling a function)
    kPersistentId,  // `items[0]`: the persistent id (PERSID / BINPERSID)
  };
  Kind kind = Kind::kNone;
  int64_t integer = 0;
  double real = 0;
  std::string text;
  std::vector<Value> items;
  std::vector<DictItem> dict;
  std::shared_ptr<const Record> record;

  // The value of dict key `key` (a kString key), or nullptr. For a Record, the member
  // `key` of its state when that is a dict (a dataclass's fields), else nullptr.
  const Value* Find(std::string_view key) const;
  bool is_string() const { return kind == Kind::kString; }
  bool is_int() const { return kind == Kind::kInt || kind == Kind::kBool; }
  // "builtins.set" style class name of a Record, else "".
  const std::string& class_name() const;
};

struct DictItem {
  Value key, value;
};

struct Record {
  std::string class_name;        // "module.Name" ("" when the callee was not a global)
  std::vector<Value> args;       // REDUCE's / NEWOBJ's argument tuple (or INST/OBJ's)
  std::vector<DictItem> kwargs;  // NEWOBJ_EX
  bool has_state = false;
  Value state;                       // BUILD's argument
  std::vector<Value> list_items;     // APPEND(S) on the instance (a list subclass)
  std::vector<DictItem> dict_items;  // SETITEM(S) on the instance (a dict subclass)
};

struct Options {
  int max_depth = 200;     // nesting of the tree
  uint64_t max_nodes = 0;  // 0: 64 per input byte plus 4096
  uint64_t max_memo_entries = 1 << 24;
};

// Parses one pickle (up to its STOP; bytes after it are ignored).
absl::StatusOr<Value> Parse(std::string_view bytes, const Options& options = {});

// "none", "bool", "int", "big int", "float", "str", "bytes", "list", "tuple", "set", "dict",
// "global", "record", "persistent id".
const char* KindName(Value::Kind kind);

// True when `bytes` starts like a binary pickle (PROTO 2-5).
bool LooksLikePickle(std::string_view bytes);

// For debugging and --json: none -> null, bool, int, big int -> its digits as a string,
// float (non-finite -> null), str (made valid UTF-8), bytes -> {"bytes": size, "hex": first
// 64 bytes}, list/tuple/set -> array, dict -> object (a non-string key is written as its
// JSON text), global -> "module.name", record -> {"class", "args", "state", ...: the
// members that are set}, persistent id -> {"persistent_id": ...}.
nlohmann::json ToJson(const Value& v);

}  // namespace trainscope::pickle

#endif  // TRAINSCOPE_CORE_PICKLE_H_
