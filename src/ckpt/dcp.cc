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
// Each entry's bytes are the torch.save archive of the tensor or object (ReadDcpChunk).
#include "ckpt/dcp.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "ckpt/file_io.h"
#include "trainscope/ckpt/safetensors.h"
#include "trainscope/core/pickle.h"
#include "trainscope/core/status.h"
#include "trainscope/core/utf8.h"

namespace trainscope::ckpt {
namespace {

using pickle::Value;

constexpr uint64_t kZipLocal = 0x04034b50, kZipCentral = 0x02014b50, kZipEnd = 0x06054b50,
                   kZip64Locator = 0x07064b50, kZip64End = 0x06064b50;

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
        absl::StrCat(path, ": state_dict_metadata \"", Excerpt(e->name), "\": ", what));
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
    DcpStorage storage{file->text, static_cast<uint64_t>(offset->integer),
                       static_cast<uint64_t>(length->integer)};
    DcpShape(sd.dict[i].key.Find("offset"), &storage.chunk_offsets);  // None: a non-tensor
    const Value* transforms = info.Find("transform_descriptors");
    storage.transformed = transforms && transforms->kind != Value::Kind::kNone &&
                          !(transforms->kind == Value::Kind::kList && transforms->items.empty());
    (*out)[fqn->text].push_back(std::move(storage));
  }
  return absl::OkStatus();
}

uint64_t Le(const std::string& b, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(b[at + i]);
  return v;
}

// torch.save's storage classes (torch/storage.py's legacy names) in safetensors spelling.
const char* StorageDtype(const std::string& cls) {
  static const std::pair<const char*, const char*> kTypes[] = {
      {"torch.DoubleStorage", "F64"}, {"torch.FloatStorage", "F32"},
      {"torch.HalfStorage", "F16"},   {"torch.BFloat16Storage", "BF16"},
      {"torch.LongStorage", "I64"},   {"torch.IntStorage", "I32"},
      {"torch.ShortStorage", "I16"},  {"torch.CharStorage", "I8"},
      {"torch.ByteStorage", "U8"},    {"torch.BoolStorage", "BOOL"}};
  for (const auto& [name, dtype] : kTypes) {
    if (cls == name) return dtype;
  }
  return nullptr;
}

}  // namespace

bool IsTorchDtypeName(const std::string& dtype) {
  // clang-format off
  static const char* const kNames[] = {
      "float32", "float64", "float16", "bfloat16", "complex32", "complex64", "complex128",
      "bcomplex32", "bool", "uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32",
      "int64", "uint1", "uint2", "uint3", "uint4", "uint5", "uint6", "uint7", "int1", "int2",
      "int3", "int4", "int5", "int6", "int7", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2",
      "float8_e5m2fnuz", "float8_e8m0fnu", "float4_e2m1fn_x2", "qint8", "quint8", "qint32",
      "quint4x2", "quint2x4", "bits1x8", "bits2x4", "bits4x2", "bits8", "bits16"};
  // clang-format on
  for (const char* n : kNames) {
    if (dtype == n) return true;
  }
  return false;
}

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

// The zip as PyTorchStreamWriter writes it (APPNOTE.TXT 4.3): local headers whose sizes
// are in a data descriptor, so the central directory is the index; members are stored
// (method 0). Offsets in the zip are relative to the archive's start, the entry's offset.
absl::StatusOr<std::vector<DcpArchiveMember>> ReadDcpArchive(const std::string& dir,
                                                             const DcpStorage& s, Os* os) {
  const std::string path = dir + "/" + s.file;
  auto bad = [&](const std::string& what) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": bytes [", s.offset, ", ", s.offset + s.length, "): ", what));
  };
  if (s.transformed) {
    return absl::UnimplementedError(
        absl::StrCat(path, ": an entry stored through transform_descriptors"));
  }
  TS_ASSIGN_OR_RETURN(File f, File::Open(path, os));
  if (s.offset > f.size() || s.length > f.size() - s.offset) {
    return absl::DataLossError(absl::StrCat(
        path, ": ", f.size(), " bytes, but an entry is stored up to byte ", s.offset + s.length));
  }
  auto read = [&](uint64_t at, uint64_t n, std::string* out) -> absl::Status {
    if (at > s.length || n > s.length - at)
      return bad(absl::StrCat("a zip record at byte ", at, " runs past the entry"));
    out->resize(n);
    return f.ReadAt(s.offset + at, n, out->data());
  };
  // The end record: the last 22 bytes, unless the archive ends with a comment.
  std::string tail;
  const uint64_t tail_at = s.length - std::min<uint64_t>(s.length, 22 + 0xffff);
  TS_RETURN_IF_ERROR(read(tail_at, s.length - tail_at, &tail));
  size_t end = std::string::npos;
  for (size_t i = tail.size() >= 22 ? tail.size() - 21 : 0; end == std::string::npos && i-- > 0;) {
    if (Le(tail, i, 4) == kZipEnd) end = i;
  }
  if (end == std::string::npos) return bad("not a zip archive (no end of central directory)");
  uint64_t count = Le(tail, end + 10, 2), cd_size = Le(tail, end + 12, 4),
           cd_at = Le(tail, end + 16, 4);
  if (count == 0xffff || cd_size == 0xffffffff || cd_at == 0xffffffff) {  // zip64
    std::string loc, end64;
    if (tail_at + end < 20) return bad("zip64 end record without its locator");
    TS_RETURN_IF_ERROR(read(tail_at + end - 20, 20, &loc));
    if (Le(loc, 0, 4) != kZip64Locator) return bad("zip64 end record without its locator");
    TS_RETURN_IF_ERROR(read(Le(loc, 8, 8), 56, &end64));
    if (Le(end64, 0, 4) != kZip64End) return bad("bad zip64 end of central directory");
    count = Le(end64, 32, 8);
    cd_size = Le(end64, 40, 8);
    cd_at = Le(end64, 48, 8);
  }
  std::string cd;
  TS_RETURN_IF_ERROR(read(cd_at, cd_size, &cd));
  std::vector<DcpArchiveMember> members;
  for (uint64_t i = 0, at = 0; i < count; ++i) {
    if (at + 46 > cd.size() || Le(cd, at, 4) != kZipCentral)
      return bad(absl::StrCat("zip central directory entry ", i, " is malformed"));
    const uint64_t method = Le(cd, at + 10, 2), name_len = Le(cd, at + 28, 2),
                   extra_len = Le(cd, at + 30, 2), comment_len = Le(cd, at + 32, 2);
    uint64_t size = Le(cd, at + 24, 4), packed = Le(cd, at + 20, 4), local = Le(cd, at + 42, 4);
    if (at + 46 + name_len + extra_len + comment_len > cd.size())
      return bad(absl::StrCat("zip central directory entry ", i, " is malformed"));
    std::string name = cd.substr(at + 46, name_len);
    // The zip64 extra field (id 1) holds the 64-bit value of each field that reads
    // 0xffffffff, in the order uncompressed size, compressed size, local header offset.
    for (uint64_t x = at + 46 + name_len, x_end = x + extra_len; x + 4 <= x_end;) {
      const uint64_t id = Le(cd, x, 2), v_end = std::min(x_end, x + 4 + Le(cd, x + 2, 2));
      uint64_t v = x + 4;
      for (uint64_t* field : {&size, &packed, &local}) {
        if (id != 1 || *field != 0xffffffff || v + 8 > v_end) continue;
        *field = Le(cd, v, 8);
        v += 8;
      }
      x = v_end;
    }
    if (method != 0) {
      return absl::UnimplementedError(
          absl::StrCat(path, ": zip member \"", name, "\" is compressed (method ", method, ")"));
    }
    std::string header;
    TS_RETURN_IF_ERROR(read(local, 30, &header));
    if (Le(header, 0, 4) != kZipLocal)
      return bad(absl::StrCat("zip member \"", name, "\": no local header"));
    const uint64_t data = local + 30 + Le(header, 26, 2) + Le(header, 28, 2);
    if (data > s.length || size > s.length - data)
      return bad(absl::StrCat("zip member \"", name, "\" runs past the entry"));
    // torch.save names members "<archive>/data.pkl": drop the top folder.
    name = name.substr(name.find('/') == std::string::npos ? 0 : name.find('/') + 1);
    members.push_back({std::move(name), s.offset + data, size});
    at += 46 + name_len + extra_len + comment_len;
  }
  return members;
}

absl::StatusOr<DcpChunkData> ReadDcpChunk(const std::string& dir, const DcpStorage& s, Os* os) {
  const std::string path = dir + "/" + s.file;
  auto bad = [&](const std::string& what) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": bytes [", s.offset, ", ", s.offset + s.length, "): ", what));
  };
  TS_ASSIGN_OR_RETURN(std::vector<DcpArchiveMember> members, ReadDcpArchive(dir, s, os));
  auto member = [&](const std::string& name) -> const DcpArchiveMember* {
    for (const DcpArchiveMember& m : members) {
      if (m.name == name) return &m;
    }
    return nullptr;
  };
  TS_ASSIGN_OR_RETURN(File f, File::Open(path, os));
  auto contents = [&](const DcpArchiveMember& m, std::string* out) {
    out->resize(m.size);
    return f.ReadAt(m.offset, m.size, out->data());
  };
  std::string text;
  if (const DcpArchiveMember* order = member("byteorder")) {
    TS_RETURN_IF_ERROR(contents(*order, &text));
    if (text != "little") return absl::UnimplementedError(absl::StrCat(path, ": byteorder ", text));
  }
  const DcpArchiveMember* pkl = member("data.pkl");
  if (!pkl) return bad("a zip without data.pkl (not a torch.save archive)");
  TS_RETURN_IF_ERROR(contents(*pkl, &text));
  auto root = pickle::Parse(text);
  if (!root.ok()) return bad(absl::StrCat("data.pkl: ", root.status().message()));
  const Value* v = &*root;
  // nn.Parameter: _rebuild_parameter(tensor, requires_grad, hooks).
  if (v->kind == Value::Kind::kRecord && DcpIsClass(*v, "_rebuild_parameter") &&
      !v->record->args.empty())
    v = &v->record->args[0];
  if (v->kind != Value::Kind::kRecord || !DcpIsClass(*v, "_rebuild_tensor_v2") ||
      v->record->args.size() < 4 || v->record->args[0].kind != Value::Kind::kPersistentId ||
      v->record->args[0].items.empty()) {
    return absl::UnimplementedError(
        absl::StrCat(path, ": data.pkl is ",
                     v->kind == Value::Kind::kRecord ? v->class_name() : pickle::KindName(v->kind),
                     ", not _rebuild_tensor_v2(storage, ...)"));
  }
  const std::vector<Value>& args = v->record->args;
  const Value& pid = args[0].items[0];  // ("storage", storage class, key, location, numel)
  if (pid.kind != Value::Kind::kTuple || pid.items.size() < 5 || !pid.items[2].is_string() ||
      pid.items[4].kind != Value::Kind::kInt || !args[1].is_int() || args[1].integer < 0)
    return bad("data.pkl: not a storage reference (\"storage\", class, key, location, numel)");
  const char* dtype = StorageDtype(pid.items[1].text);
  if (!dtype) return absl::UnimplementedError(absl::StrCat(path, ": storage ", pid.items[1].text));
  DcpChunkData out{path, dtype};
  std::vector<uint64_t> stride;
  if (!DcpShape(&args[2], &out.shape) || !DcpShape(&args[3], &stride) ||
      stride.size() != out.shape.size())
    return bad("data.pkl: size and stride are not tuples of ints of one length");
  // Row-major when each dimension's stride is the product of the sizes after it (a size-1
  // dimension's stride does not matter); else the elements span up to the last one.
  uint64_t numel = 1, span = 1;
  bool row_major = true;
  for (size_t i = out.shape.size(); i-- > 0;) {
    row_major = row_major && (out.shape[i] == 1 || stride[i] == numel);
    uint64_t reach = 0;
    if (__builtin_mul_overflow(numel, out.shape[i], &numel) ||
        (out.shape[i] > 0 && (__builtin_mul_overflow(out.shape[i] - 1, stride[i], &reach) ||
                              __builtin_add_overflow(span, reach, &span))))
      return bad("data.pkl: size overflows");
  }
  if (!row_major) out.stride = stride;
  if (numel == 0 || row_major) span = numel;
  const uint64_t elem = DTypeBits(dtype) / 8, first = static_cast<uint64_t>(args[1].integer);
  const DcpArchiveMember* data = member("data/" + pid.items[2].text);
  uint64_t need = 0;
  if (!data || __builtin_add_overflow(first, span, &need) ||
      __builtin_mul_overflow(need, elem, &need) || need > data->size) {
    return bad(absl::StrCat("storage \"data/", pid.items[2].text, "\" is missing or shorter than ",
                            span, " elements from element ", first));
  }
  out.offset = data->offset + first * elem;
  out.bytes = span * elem;
  return out;
}

absl::StatusOr<DcpMetadata> ReadDcpMetadata(const std::string& path, Os* os) {
  absl::StatusOr<std::string> bytes = os->ReadFile(path);
  if (!bytes.ok()) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  return ParseDcpMetadata(*bytes, path);
}

}  // namespace trainscope::ckpt
