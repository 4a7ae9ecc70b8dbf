// safetensors header rules follow the reference reader (huggingface/safetensors
// Metadata::validate): entries sorted by offset must tile the data section exactly.
#include "trainscope/ckpt/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "ckpt/file_io.h"
#include "nlohmann/json.hpp"
#include "trainscope/core/half.h"
#include "trainscope/core/json_text.h"

namespace trainscope::ckpt {
namespace {

using json = nlohmann::json;

struct DTypeInfo {
  const char* name;
  int bits;
  char kind;  // 'f' float, 'h' f16, 'b' bf16, 'i' signed, 'u' unsigned, '?' bool, 0 opaque
};

const DTypeInfo* Find(std::string_view s) {
  static const DTypeInfo kTypes[] = {
      {"F64", 64, 'f'},      {"F32", 32, 'f'},      {"F16", 16, 'h'},  {"BF16", 16, 'b'},
      {"I64", 64, 'i'},      {"I32", 32, 'i'},      {"I16", 16, 'i'},  {"I8", 8, 'i'},
      {"U64", 64, 'u'},      {"U32", 32, 'u'},      {"U16", 16, 'u'},  {"U8", 8, 'u'},
      {"BOOL", 8, '?'},      {"F8_E5M2", 8, 0},     {"F8_E4M3", 8, 0}, {"F8_E8M0", 8, 0},
      {"F8_E4M3FNUZ", 8, 0}, {"F8_E5M2FNUZ", 8, 0}, {"C64", 64, 0},    {"F4", 4, 0},
      {"F6_E2M3", 6, 0},     {"F6_E3M2", 6, 0},
  };
  for (const auto& d : kTypes) {
    if (s == d.name) return &d;
  }
  return nullptr;
}

bool MulOk(uint64_t a, uint64_t b, uint64_t* out) { return !__builtin_mul_overflow(a, b, out); }

std::string ShapeForError(const std::vector<uint64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) absl::StrAppend(&s, i ? ", " : "", shape[i]);
  return s + "]";
}

// Expected byte size of dtype x shape; error text in *why when it cannot be computed.
bool ByteSize(const DTypeInfo& d, const std::vector<uint64_t>& shape, uint64_t* bytes,
              std::string* why) {
  uint64_t n = 1;
  for (uint64_t x : shape) {
    if (!MulOk(n, x, &n)) return *why = "the element count overflows 64 bits", false;
  }
  uint64_t bits = 0;
  if (!MulOk(n, static_cast<uint64_t>(d.bits), &bits)) {
    return *why = "the byte size overflows 64 bits", false;
  }
  if (bits % 8) return *why = "is not a whole number of bytes", false;
  *bytes = bits / 8;
  return true;
}

absl::StatusOr<TensorEntry> ParseEntry(const std::string& path, const std::string& name,
                                       const json& v, uint64_t data_start, uint64_t data_len) {
  auto bad = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": tensor \"", name, "\": ", what));
  };
  if (!v.is_object()) return bad("expected an object with dtype, shape and data_offsets");
  TensorEntry e;
  e.name = name;
  auto dt = v.find("dtype");
  if (dt == v.end() || !dt->is_string()) return bad("dtype: missing or not a string");
  e.dtype = dt->get<std::string>();
  auto sh = v.find("shape");
  if (sh == v.end() || !sh->is_array()) return bad("shape: missing or not an array");
  for (const json& d : *sh) {
    if (!d.is_number_unsigned()) return bad("shape: a dimension is not a non-negative integer");
    e.shape.push_back(d.get<uint64_t>());
  }
  auto off = v.find("data_offsets");
  if (off == v.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
      !(*off)[1].is_number_unsigned()) {
    return bad("data_offsets: expected [begin, end], two non-negative integers");
  }
  const uint64_t b = (*off)[0].get<uint64_t>(), en = (*off)[1].get<uint64_t>();
  if (en < b) return bad(absl::StrCat("data_offsets [", b, ", ", en, "] end before they begin"));
  if (en > data_len) {
    return bad(absl::StrCat("data_offsets [", b, ", ", en, "] end past the data section (",
                            data_len, " bytes)"));
  }
  if (const DTypeInfo* d = Find(e.dtype)) {
    uint64_t want = 0;
    std::string why;
    if (!ByteSize(*d, e.shape, &want, &why)) {
      return bad(absl::StrCat("shape ", ShapeForError(e.shape), " of ", e.dtype, ": ", why));
    }
    if (want != en - b) {
      return bad(absl::StrCat("shape ", ShapeForError(e.shape), " of ", e.dtype, " needs ", want,
                              " bytes, data_offsets span ", en - b));
    }
  }
  e.begin = data_start + b;
  e.end = data_start + en;
  return e;
}

}  // namespace

int DTypeBits(std::string_view dtype) {
  const DTypeInfo* d = Find(dtype);
  return d ? d->bits : 0;
}

bool DTypeDecodable(std::string_view dtype) {
  const DTypeInfo* d = Find(dtype);
  return d && d->kind != 0;
}

absl::StatusOr<Header> ParseHeader(const std::string& path, std::string_view json_text,
                                   uint64_t file_size) {
  Header h;
  h.header_bytes = json_text.size();
  h.data_start = 8 + h.header_bytes;
  if (h.data_start > file_size) {
    return absl::DataLossError(absl::StrCat(path, ": header of ", h.header_bytes,
                                            " bytes runs past the end of the file (", file_size,
                                            " bytes)"));
  }
  const uint64_t data_len = file_size - h.data_start;
  json j;
  if (JsonTextError e; !ParseJsonText(json_text, kJsonMaxDepth, &j, &e)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": byte ", 8 + e.byte, ": the safetensors header is ",
                     e.too_deep ? absl::StrCat("nested deeper than ", kJsonMaxDepth, " levels")
                                : absl::StrCat("not valid JSON: ", e.what)));
  }
  if (!j.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": the safetensors header is not a JSON object"));
  }
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) {
        return absl::InvalidArgumentError(absl::StrCat(path, ": __metadata__ is not an object"));
      }
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string()) {
          return absl::InvalidArgumentError(
              absl::StrCat(path, ": __metadata__ \"", m.key(), "\" is not a string"));
        }
        h.metadata[m.key()] = m->get<std::string>();
      }
      continue;
    }
    auto e = ParseEntry(path, it.key(), *it, h.data_start, data_len);
    if (!e.ok()) return e.status();
    h.tensors.push_back(std::move(*e));
  }
  // Sorted by offset, the entries must tile [data_start, file_size) exactly.
  std::vector<const TensorEntry*> by_off;
  for (const auto& t : h.tensors) by_off.push_back(&t);
  std::sort(by_off.begin(), by_off.end(), [](const TensorEntry* a, const TensorEntry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t at = h.data_start;
  for (const TensorEntry* t : by_off) {
    if (t->begin < at) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": tensor \"", t->name, "\" overlaps the tensor before it"));
    }
    if (t->begin > at) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": tensor \"", t->name, "\" leaves a gap of ", t->begin - at, " bytes before it"));
    }
    at = t->end;
  }
  if (at != file_size) {
    return absl::DataLossError(absl::StrCat(path, ": the tensors cover ", at - h.data_start,
                                            " data bytes but the file has ", data_len));
  }
  std::sort(h.tensors.begin(), h.tensors.end(),
            [](const TensorEntry& a, const TensorEntry& b) { return a.name < b.name; });
  return h;
}

absl::StatusOr<Header> ReadHeader(const std::string& path) {
  auto f = File::Open(path);
  if (!f.ok()) return f.status();
  const uint64_t size = f->size();
  if (size < 8) {
    return absl::DataLossError(absl::StrCat(path, ": shorter than the 8-byte header length"));
  }
  unsigned char len_bytes[8];
  if (auto s = f->ReadAt(0, 8, reinterpret_cast<char*>(len_bytes)); !s.ok()) return s;
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len_bytes[i];
  if (n > kMaxHeaderBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": header length ", n, " is over the format's limit (not a safetensors file?)"));
  }
  if (n > size - 8) {
    return absl::DataLossError(absl::StrCat(path, ": header length ", n,
                                            " runs past the end of the file (", size,
                                            " bytes; truncated?)"));
  }
  std::string text(n, '\0');
  if (auto s = f->ReadAt(8, n, text.data()); !s.ok()) return s;
  return ParseHeader(path, text, size);
}

absl::StatusOr<std::string> EncodeHeader(const std::vector<TensorView>& tensors,
                                         const std::map<std::string, std::string>& metadata) {
  json j = json::object();
  if (!metadata.empty()) j["__metadata__"] = metadata;
  uint64_t at = 0;
  for (const TensorView& t : tensors) {
    const DTypeInfo* d = Find(t.dtype);
    if (!d) return absl::InvalidArgumentError(absl::StrCat(t.name, ": unknown dtype ", t.dtype));
    uint64_t want = 0;
    std::string why;
    if (!ByteSize(*d, t.shape, &want, &why) || want != t.bytes) {
      return absl::InvalidArgumentError(absl::StrCat(t.name, ": shape ", ShapeForError(t.shape),
                                                     " of ", t.dtype, " needs ", want,
                                                     " bytes, given ", t.bytes, " ", why));
    }
    if (t.name == "__metadata__" || j.contains(t.name)) {
      return absl::InvalidArgumentError(absl::StrCat(t.name, ": tensor name repeated or reserved"));
    }
    j[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {at, at + t.bytes}}};
    at += t.bytes;
  }
  std::string text = j.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + text;
}

// ---- values

namespace {

template <class T>
void Decode(const char* p, uint64_t n, double* out) {
  for (uint64_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, p + i * sizeof(T), sizeof(T));
    out[i] = static_cast<double>(v);
  }
}

}  // namespace

bool ToDoubles(std::string_view dtype, const char* data, uint64_t bytes, std::vector<double>* out) {
  const DTypeInfo* d = Find(dtype);
  if (!d || !d->kind) return false;
  const uint64_t size = d->bits / 8, n = bytes / size;
  // Written in place after one resize: a compare of two gigabyte dumps decodes every element.
  const size_t at = out->size();
  out->resize(at + n);
  double* o = out->data() + at;
  const std::string_view name = d->name;
  switch (d->kind) {
    case 'h':
    case 'b':
      for (uint64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, data + 2 * i, 2);
        o[i] = d->kind == 'h' ? HalfToFloat(h) : BFloat16ToFloat(h);
      }
      return true;
    case 'f':
      name == "F64" ? Decode<double>(data, n, o) : Decode<float>(data, n, o);
      return true;
    case '?':
    case 'u':
      if (size == 1) Decode<uint8_t>(data, n, o);
      if (size == 2) Decode<uint16_t>(data, n, o);
      if (size == 4) Decode<uint32_t>(data, n, o);
      if (size == 8) Decode<uint64_t>(data, n, o);
      return true;
    default:
      if (size == 1) Decode<int8_t>(data, n, o);
      if (size == 2) Decode<int16_t>(data, n, o);
      if (size == 4) Decode<int32_t>(data, n, o);
      if (size == 8) Decode<int64_t>(data, n, o);
      return true;
  }
}

StatsAccumulator::StatsAccumulator(std::string_view dtype) : dtype_(dtype) {
  s_.decoded = DTypeDecodable(dtype);
}

void StatsAccumulator::Add(const char* data, uint64_t bytes) {
  const int bits = DTypeBits(dtype_);
  if (!s_.decoded) {
    if (bits) s_.count += bytes * 8 / bits;
    return;
  }
  std::vector<double> v;
  ToDoubles(dtype_, data, bytes, &v);
  s_.count += v.size();
  for (double x : v) {
    if (!std::isfinite(x)) {
      ++s_.nonfinite;
      continue;
    }
    sum_sq_ += x * x;
    if (!any_finite_) {
      s_.min = s_.max = x;
      any_finite_ = true;
    } else {
      s_.min = std::min(s_.min, x);
      s_.max = std::max(s_.max, x);
    }
  }
}

TensorStats StatsAccumulator::Finish() const {
  TensorStats s = s_;
  s.l2 = std::sqrt(sum_sq_);
  return s;
}

}  // namespace trainscope::ckpt
