// `data stats` on .safetensors files (layout and rules: huggingface/safetensors,
// Metadata::validate): every header entry is checked field by field, the tensors must tile
// the data section, and each decoded tensor is reduced as one population.
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "data/feature_stats_internal.h"
#include "nlohmann/json.hpp"
#include "trainscope/core/json_text.h"
#include "trainscope/core/status.h"
#include "trainscope/core/utf8.h"

namespace trainscope::data::internal {
namespace {

using nlohmann::json;

struct SafetensorsDType {
  const char* name;
  DType t;   // kind 0: not decoded here
  int bits;  // element size
};

const SafetensorsDType* FindSafetensorsDType(const std::string& s) {
  static const SafetensorsDType kTypes[] = {
      {"F64", {"float64", 8, 'f'}, 64},
      {"F32", {"float32", 4, 'f'}, 32},
      {"F16", {"float16", 2, 'f'}, 16},
      {"BF16", {"bfloat16", 2, 'h'}, 16},
      {"I64", {"int64", 8, 'i'}, 64},
      {"I32", {"int32", 4, 'i'}, 32},
      {"I16", {"int16", 2, 'i'}, 16},
      {"I8", {"int8", 1, 'i'}, 8},
      {"U64", {"uint64", 8, 'u'}, 64},
      {"U32", {"uint32", 4, 'u'}, 32},
      {"U16", {"uint16", 2, 'u'}, 16},
      {"U8", {"uint8", 1, 'u'}, 8},
      {"BOOL", {"bool", 1, 'b'}, 8},
      {"F8_E5M2", {"F8_E5M2", 1, 0}, 8},
      {"F8_E4M3", {"F8_E4M3", 1, 0}, 8},
      {"F8_E8M0", {"F8_E8M0", 1, 0}, 8},
      {"F8_E4M3FNUZ", {"F8_E4M3FNUZ", 1, 0}, 8},
      {"F8_E5M2FNUZ", {"F8_E5M2FNUZ", 1, 0}, 8},
      {"C64", {"C64", 8, 0}, 64},
      {"F4", {"F4", 1, 0}, 4},
      {"F6_E2M3", {"F6_E2M3", 1, 0}, 6},
      {"F6_E3M2", {"F6_E3M2", 1, 0}, 6},
  };
  for (const auto& d : kTypes) {
    if (s == d.name) return &d;
  }
  return nullptr;
}

std::string JsonTypeName(const json& v) {
  const std::string n = v.type_name();
  if (v.is_number_float()) return "a fractional number";
  if (v.is_number_integer() && !v.is_number_unsigned()) return "a negative number";
  return (n == "array" || n == "object" ? "an " : "a ") + n;
}

struct TensorEntry {
  std::string name;
  const SafetensorsDType* dtype = nullptr;  // null: unknown, size not checked
  std::string dtype_text;
  std::vector<uint64_t> shape;
  uint64_t count = 0, begin = 0, end = 0;
};

// One header entry, checked field by field; errors name the file, tensor and field.
absl::StatusOr<TensorEntry> ParseTensorEntry(const std::string& path, const std::string& name,
                                             const json& info, uint64_t data_len) {
  const std::string where = absl::StrCat(path, ": tensor ", Quote(name), ": ");
  auto bad = [&](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(where, what));
  };
  if (!info.is_object()) {
    return bad(absl::StrCat("expected an object with dtype, shape and data_offsets, found ",
                            JsonTypeName(info)));
  }
  TensorEntry e;
  e.name = name;
  auto dt = info.find("dtype");
  if (dt == info.end()) return bad("dtype: missing");
  if (!dt->is_string())
    return bad(absl::StrCat("dtype: expected a string, found ", JsonTypeName(*dt)));
  e.dtype_text = dt->get_ref<const std::string&>();
  e.dtype = FindSafetensorsDType(e.dtype_text);
  auto sh = info.find("shape");
  if (sh == info.end()) return bad("shape: missing");
  if (!sh->is_array())
    return bad(absl::StrCat("shape: expected an array, found ", JsonTypeName(*sh)));
  for (size_t i = 0; i < sh->size(); ++i) {
    const json& d = (*sh)[i];
    if (!d.is_number_unsigned()) {
      return bad(absl::StrCat("shape: dimension ", i, " is ", JsonTypeName(d),
                              ", not a non-negative integer"));
    }
    e.shape.push_back(d.get<uint64_t>());
  }
  auto off = info.find("data_offsets");
  if (off == info.end()) return bad("data_offsets: missing");
  if (!off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
      !(*off)[1].is_number_unsigned()) {
    return bad("data_offsets: expected [begin, end], two non-negative integers");
  }
  e.begin = (*off)[0].get<uint64_t>();
  e.end = (*off)[1].get<uint64_t>();
  if (e.end < e.begin)
    return bad(absl::StrCat("data_offsets: [", e.begin, ", ", e.end, "] ends before it begins"));
  if (e.end > data_len) {
    return bad(absl::StrCat("data_offsets: [", e.begin, ", ", e.end,
                            "] ends past the data section (", data_len,
                            " bytes after the header)"));
  }
  const std::string shape = absl::StrCat("shape ", ShapeText(e.shape, false), " of ", e.dtype_text);
  e.count = 1;
  for (uint64_t d : e.shape) {
    if (!MulOk(e.count, d, &e.count))
      return bad(absl::StrCat(shape, ": the element count overflows 64 bits"));
  }
  if (e.dtype) {
    uint64_t bits = 0;
    if (!MulOk(e.count, e.dtype->bits, &bits)) {
      return bad(absl::StrCat(shape, ": the byte size overflows 64 bits"));
    }
    if (bits % 8) return bad(absl::StrCat(shape, " is not a whole number of bytes"));
    if (bits / 8 != e.end - e.begin) {
      return bad(absl::StrCat(shape, " needs ", bits / 8, " bytes, data_offsets [", e.begin, ", ",
                              e.end, "] span ", e.end - e.begin));
    }
  }
  return e;
}

// The tensors must tile the data section: sorted by offset, each begins where the
// previous one ends, and the last ends at the end of the file.
absl::Status CheckTiling(const std::string& path, const std::vector<TensorEntry>& entries,
                         uint64_t data_off, uint64_t data_len) {
  std::vector<const TensorEntry*> order;
  for (const auto& e : entries) order.push_back(&e);
  std::sort(order.begin(), order.end(), [](const TensorEntry* a, const TensorEntry* b) {
    return std::make_pair(a->begin, a->end) < std::make_pair(b->begin, b->end);
  });
  uint64_t at = 0;
  const TensorEntry* prev = nullptr;
  for (const TensorEntry* e : order) {
    const std::string range = absl::StrCat("[", e->begin, ", ", e->end, "]");
    if (e->begin < at) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": tensor ", Quote(e->name), ": data_offsets ", range, " overlap tensor ",
          Quote(prev->name), " [", prev->begin, ", ", prev->end, "]"));
    }
    if (e->begin > at) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": tensor ", Quote(e->name), ": data_offsets ", range, " leave a gap: bytes [", at,
          ", ", e->begin, ") of the data section belong to no tensor"));
    }
    at = e->end;
    prev = e;
  }
  if (at != data_len) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": byte ", data_off + at, ": trailing bytes: the tensors end at offset ",
                     at, " but the data section has ", data_len, " bytes"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<FeatureReport> Safetensors(const StatsInput& in, const FeatureStatsOptions& o) {
  const std::string& path = in.path();
  const uint64_t size = in.size();
  if (size < 8) {
    return absl::DataLossError(absl::StrCat(path, ": byte 0: shorter than the 8-byte header size"));
  }
  uint64_t n;
  TS_RETURN_IF_ERROR(in.ReadAt(0, 8, reinterpret_cast<char*>(&n)));
  if (n > kMaxSafetensorsHeaderBytes) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": byte 0: header length ", n,
                                                   " exceeds the format's limit of ",
                                                   kMaxSafetensorsHeaderBytes, " bytes"));
  }
  if (n > size - 8) {
    return absl::DataLossError(absl::StrCat(path, ": byte 8: header of ", n,
                                            " bytes runs past the end (the file has ", size, ")"));
  }
  std::string text(n, '\0');
  TS_RETURN_IF_ERROR(in.ReadAt(8, n, text.data()));
  json h;
  if (JsonTextError e; !ParseJsonText(text, kMaxHeaderJsonDepth, &h, &e)) {
    if (e.too_deep) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": byte ", 8 + e.byte,
                                                     ": header nested deeper than ",
                                                     kMaxHeaderJsonDepth, " levels"));
    }
    // "[json.exception.parse_error.101] parse error at line 1, column 2: why" -> "why";
    // "[json.exception.out_of_range.406] number overflow parsing '1e999'" -> the rest.
    std::string what = e.what;
    if (size_t end = what.find("] "); !what.empty() && what[0] == '[' && end != std::string::npos) {
      what = what.substr(end + 2);
    }
    if (size_t colon = what.find(": "); !e.out_of_range && colon != std::string::npos) {
      what = what.substr(colon + 2);
    }
    // A syntax error's byte is nlohmann's, one past the bad character; a number's is its start.
    const size_t at = e.out_of_range || e.byte == 0 ? e.byte : e.byte - 1;
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": byte ", 8 + at, ": header is not valid JSON: ", ValidUtf8(what)));
  }
  if (!h.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": byte 8: header is not a JSON object"));
  }
  const uint64_t data_off = 8 + n, data_len = size - data_off;
  std::vector<TensorEntry> entries;
  for (auto it = h.begin(); it != h.end(); ++it) {
    if (it.key() == "__metadata__") {
      bool ok = it->is_object();
      for (auto m = it->begin(); ok && m != it->end(); ++m) ok = m->is_string();
      if (!ok) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": __metadata__: expected an object of strings"));
      }
      continue;
    }
    TS_ASSIGN_OR_RETURN(TensorEntry e, ParseTensorEntry(path, it.key(), *it, data_len));
    entries.push_back(std::move(e));
  }
  TS_RETURN_IF_ERROR(CheckTiling(path, entries, data_off, data_len));
  FeatureReport r;
  r.path = path;
  r.format = "safetensors";
  for (const TensorEntry& e : entries) {
    if (!e.dtype || e.dtype->t.kind == 0) {
      ArrayStats a;
      a.name = e.name;
      a.dtype = e.dtype ? e.dtype->t.name : e.dtype_text;
      a.shape = e.shape;
      r.findings.push_back(absl::StrCat(
          "tensor ", Quote(e.name), " is ", e.dtype_text,
          e.dtype ? ": not decoded, no statistics"
                  : ": a dtype unknown to trainscope (size not checked), no statistics"));
      r.arrays.push_back(std::move(a));
      continue;
    }
    // A tensor in a checkpoint is one population (weights, not features): one line of
    // statistics per tensor, and no normalisation advice.
    TS_ASSIGN_OR_RETURN(ArrayStats a,
                        Reduce(in, data_off + e.begin, e.dtype->t, e.shape, e.count, false, e.name,
                               absl::StrCat(path, ": tensor ", Quote(e.name), ": shape ",
                                            ShapeText(e.shape, false), ": "),
                               o, /*whole=*/true));
    for (FeatureStats& f : a.features) f.suggest.clear();
    r.arrays.push_back(std::move(a));
  }
  return r;
}

}  // namespace trainscope::data::internal
