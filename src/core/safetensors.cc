// The safetensors header rules of the reference reader (huggingface/safetensors
// Metadata::validate), checked in one order so that every caller reports the same first
// problem of a file; the callers word it.
#include "trainscope/core/safetensors.h"

#include <algorithm>
#include <utility>

#include "nlohmann/json.hpp"

namespace trainscope::safetensors {
namespace {

using nlohmann::json;

bool MulOk(uint64_t a, uint64_t b, uint64_t* out) { return !__builtin_mul_overflow(a, b, out); }

// "a string", "an array", "a negative number", "a fractional number", "a number" (unsigned).
std::string JsonTypeName(const json& v) {
  const std::string n = v.type_name();
  if (v.is_number_float()) return "a fractional number";
  if (v.is_number_integer() && !v.is_number_unsigned()) return "a negative number";
  return (n == "array" || n == "object" ? "an " : "a ") + n;
}

// One header entry, checked field by field in the order the error names them.
bool ParseEntry(const std::string& name, const json& info, uint64_t data_len,
                const ParseOptions& options, Entry* out, HeaderError* error) {
  Entry& e = error->tensor;
  e.name = name;
  auto fail = [&](HeaderProblem p, std::string field = "", const json* found = nullptr) {
    error->problem = p;
    error->field = std::move(field);
    if (found) error->found = JsonTypeName(*found);
    return false;
  };
  if (!info.is_object()) return fail(HeaderProblem::kEntryNotObject, "", &info);
  auto dt = info.find("dtype");
  if (dt == info.end()) return fail(HeaderProblem::kFieldMissing, "dtype");
  if (!dt->is_string()) return fail(HeaderProblem::kFieldType, "dtype", &*dt);
  e.dtype = dt->get_ref<const std::string&>();
  e.info = FindDType(e.dtype);
  auto sh = info.find("shape");
  if (sh == info.end()) return fail(HeaderProblem::kFieldMissing, "shape");
  if (!sh->is_array()) return fail(HeaderProblem::kFieldType, "shape", &*sh);
  for (size_t i = 0; i < sh->size(); ++i) {
    const json& d = (*sh)[i];
    if (!d.is_number_unsigned()) {
      error->dimension = i;
      return fail(HeaderProblem::kDimension, "shape", &d);
    }
    e.shape.push_back(d.get<uint64_t>());
  }
  auto off = info.find("data_offsets");
  if (off == info.end()) return fail(HeaderProblem::kFieldMissing, "data_offsets");
  if (!off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
      !(*off)[1].is_number_unsigned()) {
    return fail(HeaderProblem::kFieldType, "data_offsets", &*off);
  }
  e.begin = (*off)[0].get<uint64_t>();
  e.end = (*off)[1].get<uint64_t>();
  if (e.end < e.begin) return fail(HeaderProblem::kOffsetsReversed, "data_offsets");
  if (e.end > data_len) return fail(HeaderProblem::kOffsetsPastEnd, "data_offsets");
  if (!ElementCount(e.shape, &e.count) && (e.info || options.count_unknown_dtypes)) {
    return fail(HeaderProblem::kCountOverflow, "shape");
  }
  if (e.info) {
    if (HeaderProblem p = ByteSize(*e.info, e.count, &error->want_bytes);
        p != HeaderProblem::kNone) {
      return fail(p, "shape");
    }
    if (error->want_bytes != e.end - e.begin) return fail(HeaderProblem::kSizeMismatch, "shape");
    error->want_bytes = 0;
  }
  *out = std::move(e);
  error->tensor = Entry();
  return true;
}

// Sorted by offset, each tensor begins where the previous one ends, and the last ends at the
// end of the data section.
bool CheckTiling(const std::vector<Entry>& entries, HeaderError* error) {
  std::vector<const Entry*> order;
  for (const Entry& e : entries) order.push_back(&e);
  std::sort(order.begin(), order.end(), [](const Entry* a, const Entry* b) {
    return std::make_pair(a->begin, a->end) < std::make_pair(b->begin, b->end);
  });
  uint64_t at = 0;
  const Entry* prev = nullptr;
  for (const Entry* e : order) {
    if (e->begin != at) {
      error->problem = e->begin < at ? HeaderProblem::kOverlap : HeaderProblem::kGap;
      error->tensor = *e;
      if (prev) error->other = *prev;
      error->at = at;
      return false;
    }
    at = e->end;
    prev = e;
  }
  if (at != error->data_len) {
    error->problem = HeaderProblem::kTrailing;
    error->at = at;
    error->byte = 8 + error->header_bytes + at;
    return false;
  }
  return true;
}

}  // namespace

const DType* FindDType(std::string_view name) {
  // clang-format off
  static const DType kTypes[] = {
      {"F64", 64, 'f', "float64"}, {"F32", 32, 'f', "float32"}, {"F16", 16, 'h', "float16"},
      {"BF16", 16, 'b', "bfloat16"}, {"I64", 64, 'i', "int64"}, {"I32", 32, 'i', "int32"},
      {"I16", 16, 'i', "int16"}, {"I8", 8, 'i', "int8"}, {"U64", 64, 'u', "uint64"},
      {"U32", 32, 'u', "uint32"}, {"U16", 16, 'u', "uint16"}, {"U8", 8, 'u', "uint8"},
      {"BOOL", 8, '?', "bool"}, {"F8_E5M2", 8, 0, "F8_E5M2"}, {"F8_E4M3", 8, 0, "F8_E4M3"},
      {"F8_E8M0", 8, 0, "F8_E8M0"}, {"F8_E4M3FNUZ", 8, 0, "F8_E4M3FNUZ"},
      {"F8_E5M2FNUZ", 8, 0, "F8_E5M2FNUZ"}, {"C64", 64, 0, "C64"}, {"F4", 4, 0, "F4"},
      {"F6_E2M3", 6, 0, "F6_E2M3"}, {"F6_E3M2", 6, 0, "F6_E3M2"},
  };
  // clang-format on
  for (const DType& d : kTypes) {
    if (name == d.name) return &d;
  }
  return nullptr;
}

bool ElementCount(const std::vector<uint64_t>& shape, uint64_t* count) {
  *count = 1;
  for (uint64_t d : shape) {
    if (!MulOk(*count, d, count)) return false;
  }
  return true;
}

HeaderProblem ByteSize(const DType& dtype, uint64_t count, uint64_t* bytes) {
  uint64_t bits = 0;
  if (!MulOk(count, static_cast<uint64_t>(dtype.bits), &bits)) return HeaderProblem::kBytesOverflow;
  if (bits % 8) return HeaderProblem::kPartialBytes;
  *bytes = bits / 8;
  return HeaderProblem::kNone;
}

const char* OverflowText(HeaderProblem problem) {
  if (problem == HeaderProblem::kCountOverflow) return "the element count overflows 64 bits";
  return problem == HeaderProblem::kBytesOverflow ? "the byte size overflows 64 bits" : "";
}

bool ParseHeader(std::string_view json_text, uint64_t file_size, const ParseOptions& options,
                 Header* out, HeaderError* error) {
  *error = HeaderError();
  error->file_size = file_size;
  error->header_bytes = json_text.size();
  Header h;
  h.header_bytes = json_text.size();
  h.data_start = 8 + h.header_bytes;
  if (h.data_start > file_size) {
    error->problem = HeaderProblem::kLengthPastEnd;
    error->byte = 8;
    return false;
  }
  error->data_len = file_size - h.data_start;
  json j;
  if (!ParseJsonText(json_text, kJsonMaxDepth, &j, &error->json)) {
    error->problem = HeaderProblem::kJson;
    error->byte = 8 + error->json.byte;
    return false;
  }
  if (!j.is_object()) {
    error->problem = HeaderProblem::kNotObject;
    error->byte = 8;
    return false;
  }
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() != "__metadata__") {
      Entry e;
      if (!ParseEntry(it.key(), *it, error->data_len, options, &e, error)) return false;
      h.tensors.push_back(std::move(e));
      continue;
    }
    if (!it->is_object()) {
      error->problem = HeaderProblem::kMetadataNotObject;
      return false;
    }
    for (auto m = it->begin(); m != it->end(); ++m) {
      if (!m->is_string()) {
        error->problem = HeaderProblem::kMetadataNotString;
        error->key = m.key();
        return false;
      }
      h.metadata[m.key()] = m->get<std::string>();
    }
  }
  if (!CheckTiling(h.tensors, error)) return false;
  std::sort(h.tensors.begin(), h.tensors.end(),
            [](const Entry& a, const Entry& b) { return a.name < b.name; });
  *out = std::move(h);
  return true;
}

absl::StatusOr<ReadResult> ReadHeader(uint64_t file_size, ReadAtFn read_at,
                                      const ParseOptions& options) {
  ReadResult r;
  HeaderError& error = r.error;
  error.file_size = file_size;
  if (file_size < 8) {
    error.problem = HeaderProblem::kTooShort;
    return r;
  }
  unsigned char len[8];
  if (absl::Status s = read_at(0, 8, reinterpret_cast<char*>(len)); !s.ok()) return s;
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
  error.header_bytes = n;
  if (n > kMaxHeaderBytes || n > file_size - 8) {
    error.problem =
        n > kMaxHeaderBytes ? HeaderProblem::kLengthOverLimit : HeaderProblem::kLengthPastEnd;
    error.byte = n > kMaxHeaderBytes ? 0 : 8;
    return r;
  }
  std::string text(n, '\0');
  if (absl::Status s = read_at(8, n, text.data()); !s.ok()) return s;
  ParseHeader(text, file_size, options, &r.header, &error);
  return r;
}

}  // namespace trainscope::safetensors
