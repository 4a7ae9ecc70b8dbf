// DCP's .metadata through core/pickle.h. What the pickle holds (torch 1.13 and 2.x alike):
//   Metadata{state_dict_metadata: {fqn: TensorStorageMetadata | BytesStorageMetadata},
//            planner_data, storage_data: {MetadataIndex(fqn, offset, index): _StorageInfo}}
//   TensorStorageMetadata{properties: TensorProperties, size: torch.Size, chunks: [...]}
//   TensorProperties' state: (dtype, layout, requires_grad, memory_format, pin_memory), a
//     tuple from its __getstate__ (a dict of fields when a version pickles it plainly)
//   ChunkStorageMetadata{offsets: torch.Size, sizes: torch.Size}
//   _StorageInfo{relative_path, offset, length}
// Dataclasses pickle as NEWOBJ + BUILD(dict of fields): records whose Find() reads a field;
// torch.Size is a tuple and torch.float32 the global "torch.float32" (core/pickle.h).
#include "ckpt/dcp.h"

#include <fstream>
#include <map>
#include <sstream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "trainscope/core/pickle.h"

namespace trainscope::ckpt {
namespace {

using pickle::Value;

bool DcpIsClass(const Value& v, const char* last_name) {
  const std::string& c = v.class_name();
  return c == last_name || absl::EndsWith(c, absl::StrCat(".", last_name));
}

// torch.Size (a tuple after reading) or a list of non-negative ints.
bool DcpShape(const Value* v, std::vector<uint64_t>* out) {
  if (!v || (v->kind != Value::Kind::kTuple && v->kind != Value::Kind::kList)) return false;
  out->clear();
  for (const Value& d : v->items) {
    if (d.kind != Value::Kind::kInt || d.integer < 0) return false;
    out->push_back(static_cast<uint64_t>(d.integer));
  }
  return true;
}

// "torch.float32" -> "float32"; a record (a dtype some torch pickles otherwise) -> its class.
std::string DcpDtypeName(const Value* v) {
  if (!v) return "unknown";
  if (v->kind == Value::Kind::kGlobal || v->kind == Value::Kind::kString) {
    return absl::StartsWith(v->text, "torch.") ? v->text.substr(6) : v->text;
  }
  return v->kind == Value::Kind::kRecord ? v->class_name() : "unknown";
}

const Value* DcpDtype(const Value* properties) {
  if (!properties || properties->kind != Value::Kind::kRecord) return nullptr;
  const Value& s = properties->record->state;
  if (s.kind == Value::Kind::kTuple && !s.items.empty()) return &s.items[0];
  return properties->Find("dtype");
}

absl::Status DcpTensorEntry(const Value& v, const std::string& path, DcpEntry* e) {
  auto bad = [&](const std::string& what) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": state_dict_metadata \"", e->name, "\": ", what));
  };
  if (!DcpShape(v.Find("size"), &e->shape)) return bad("no size (a torch.Size of ints)");
  e->dtype = DcpDtypeName(DcpDtype(v.Find("properties")));
  const Value* chunks = v.Find("chunks");
  if (!chunks || chunks->kind != Value::Kind::kList) return bad("no chunks list");
  e->chunks = static_cast<int>(chunks->items.size());
  for (size_t i = 0; i < chunks->items.size(); ++i) {
    std::vector<uint64_t> sizes;
    if (!DcpShape(chunks->items[i].Find("sizes"), &sizes))
      return bad(absl::StrCat("chunk ", i, " has no sizes"));
    uint64_t n = 1;
    for (uint64_t d : sizes) n = __builtin_mul_overflow(n, d, &n) ? UINT64_MAX : n;
    e->chunk_elements = __builtin_add_overflow(e->chunk_elements, n, &e->chunk_elements)
                            ? UINT64_MAX
                            : e->chunk_elements;
  }
  return absl::OkStatus();
}

// storage_data: {MetadataIndex: _StorageInfo} -> fqn -> storages. Entries that are not
// shaped so are an error: verify could not say which chunk lives where.
absl::Status DcpStorageData(const Value& sd, const std::string& path,
                            std::map<std::string, std::vector<DcpStorage>>* out) {
  for (size_t i = 0; i < sd.dict.size(); ++i) {
    const Value* fqn = sd.dict[i].key.Find("fqn");
    const Value& info = sd.dict[i].value;
    const Value* file = info.Find("relative_path");
    const Value* offset = info.Find("offset");
    const Value* length = info.Find("length");
    if (!fqn || !fqn->is_string() || !file || !file->is_string() || !offset ||
        offset->kind != Value::Kind::kInt || offset->integer < 0 || !length ||
        length->kind != Value::Kind::kInt || length->integer < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": storage_data entry ", i,
          " is not MetadataIndex(fqn) -> _StorageInfo(relative_path, offset, length)"));
    }
    (*out)[fqn->text].push_back({file->text, static_cast<uint64_t>(offset->integer),
                                 static_cast<uint64_t>(length->integer)});
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<DcpMetadata> ParseDcpMetadata(const std::string& bytes, const std::string& path) {
  auto root = pickle::Parse(bytes);
  if (!root.ok())
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", root.status().message()));
  const Value* sdm = root->Find("state_dict_metadata");
  if (!sdm || sdm->kind != Value::Kind::kDict) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": a pickle of ",
        root->kind == Value::Kind::kRecord ? root->class_name() : pickle::KindName(root->kind),
        " without a state_dict_metadata dict (not a DCP .metadata?)"));
  }
  DcpMetadata out;
  std::map<std::string, std::vector<DcpStorage>> storage;
  if (const Value* sd = root->Find("storage_data"); sd && sd->kind == Value::Kind::kDict) {
    out.has_storage_data = true;
    if (auto s = DcpStorageData(*sd, path, &storage); !s.ok()) return s;
  }
  for (const pickle::DictItem& item : sdm->dict) {
    if (!item.key.is_string())
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": a state_dict_metadata key is a ", pickle::KindName(item.key.kind)));
    DcpEntry e;
    e.name = item.key.text;
    if (DcpIsClass(item.value, "BytesStorageMetadata")) {
      e.is_tensor = false;
      e.dtype = "bytes";
    } else if (auto s = DcpTensorEntry(item.value, path, &e); !s.ok()) {
      return s;
    }
    if (auto it = storage.find(e.name); it != storage.end()) e.storage = std::move(it->second);
    out.entries.push_back(std::move(e));
  }
  return out;
}

absl::StatusOr<DcpMetadata> ReadDcpMetadata(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseDcpMetadata(ss.str(), path);
}

}  // namespace trainscope::ckpt
