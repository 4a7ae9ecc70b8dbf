// safetensors for the checkpoint commands: the header is read by the one shared reader
// (core/safetensors.h), whose structured errors are worded here as ckpt has always worded
// them; the encoder, the value decoding and the statistics are ckpt's own.
#include "trainscope/ckpt/safetensors.h"

#include <algorithm>
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
using safetensors::HeaderProblem;

std::string ShapeForError(const std::vector<uint64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) absl::StrAppend(&s, i ? ", " : "", shape[i]);
  return s + "]";
}

// Expected byte size of dtype x shape; error text in *why when it cannot be computed.
bool ByteSize(const safetensors::DType& d, const std::vector<uint64_t>& shape, uint64_t* bytes,
              std::string* why) {
  uint64_t count = 0;
  const HeaderProblem p = safetensors::ElementCount(shape, &count)
                              ? safetensors::ByteSize(d, count, bytes)
                              : HeaderProblem::kCountOverflow;
  if (p == HeaderProblem::kPartialBytes) {
    *why = "is not a whole number of bytes";
  } else if (p != HeaderProblem::kNone) {
    *why = safetensors::OverflowText(p);
  }
  return p == HeaderProblem::kNone;
}

// What is wrong with one tensor's entry, after "<path>: tensor \"<name>\": ".
std::string EntryProblem(const safetensors::HeaderError& e) {
  const safetensors::Entry& t = e.tensor;
  const std::string range = absl::StrCat("data_offsets [", t.begin, ", ", t.end, "]");
  const std::string shape = absl::StrCat("shape ", ShapeForError(t.shape), " of ", t.dtype);
  switch (e.problem) {
    case HeaderProblem::kEntryNotObject:
      return "expected an object with dtype, shape and data_offsets";
    case HeaderProblem::kFieldMissing:
    case HeaderProblem::kFieldType:
      if (e.field == "dtype") return "dtype: missing or not a string";
      if (e.field == "shape") return "shape: missing or not an array";
      return "data_offsets: expected [begin, end], two non-negative integers";
    case HeaderProblem::kDimension:
      return "shape: a dimension is not a non-negative integer";
    case HeaderProblem::kOffsetsReversed:
      return absl::StrCat(range, " end before they begin");
    case HeaderProblem::kOffsetsPastEnd:
      return absl::StrCat(range, " end past the data section (", e.data_len, " bytes)");
    case HeaderProblem::kCountOverflow:
    case HeaderProblem::kBytesOverflow:
      return absl::StrCat(shape, ": ", safetensors::OverflowText(e.problem));
    case HeaderProblem::kPartialBytes:
      return absl::StrCat(shape, ": is not a whole number of bytes");
    default:  // kSizeMismatch
      return absl::StrCat(shape, " needs ", e.want_bytes, " bytes, data_offsets span ",
                          t.end - t.begin);
  }
}

// The reader's error as ckpt words it: "<path>: <what>".
absl::Status HeaderStatus(const std::string& path, const safetensors::HeaderError& e) {
  auto invalid = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
  };
  switch (e.problem) {
    case HeaderProblem::kTooShort:
      return absl::DataLossError(absl::StrCat(path, ": shorter than the 8-byte header length"));
    case HeaderProblem::kLengthOverLimit:
      return invalid(absl::StrCat("header length ", e.header_bytes,
                                  " is over the format's limit (not a safetensors file?)"));
    case HeaderProblem::kLengthPastEnd:
      return absl::DataLossError(absl::StrCat(path, ": header length ", e.header_bytes,
                                              " runs past the end of the file (", e.file_size,
                                              " bytes; truncated?)"));
    case HeaderProblem::kJson:
      return invalid(absl::StrCat(
          "byte ", e.byte, ": the safetensors header is ",
          e.json.too_deep ? absl::StrCat("nested deeper than ", kJsonMaxDepth, " levels")
                          : absl::StrCat("not valid JSON: ", e.json.what)));
    case HeaderProblem::kNotObject:
      return invalid("the safetensors header is not a JSON object");
    case HeaderProblem::kMetadataNotObject:
      return invalid("__metadata__ is not an object");
    case HeaderProblem::kMetadataNotString:
      return invalid(absl::StrCat("__metadata__ \"", e.key, "\" is not a string"));
    case HeaderProblem::kOverlap:
      return invalid(absl::StrCat("tensor \"", e.tensor.name, "\" overlaps the tensor before it"));
    case HeaderProblem::kGap:
      return invalid(absl::StrCat("tensor \"", e.tensor.name, "\" leaves a gap of ",
                                  e.tensor.begin - e.at, " bytes before it"));
    case HeaderProblem::kTrailing:
      return absl::DataLossError(absl::StrCat(path, ": the tensors cover ", e.at,
                                              " data bytes but the file has ", e.data_len));
    default:
      return invalid(absl::StrCat("tensor \"", e.tensor.name, "\": ", EntryProblem(e)));
  }
}

// The shared reader's header with ckpt's absolute offsets.
Header FromShared(const safetensors::Header& s) {
  Header h;
  h.header_bytes = s.header_bytes;
  h.data_start = s.data_start;
  h.metadata = s.metadata;
  for (const safetensors::Entry& e : s.tensors) {
    h.tensors.push_back({e.name, e.dtype, e.shape, s.data_start + e.begin, s.data_start + e.end});
  }
  return h;
}

// ckpt checks the element count only where the dtype, and so the byte size, is known.
constexpr safetensors::ParseOptions kParseOptions{/*count_unknown_dtypes=*/false};

}  // namespace

int DTypeBits(std::string_view dtype) {
  const safetensors::DType* d = safetensors::FindDType(dtype);
  return d ? d->bits : 0;
}

bool DTypeDecodable(std::string_view dtype) {
  const safetensors::DType* d = safetensors::FindDType(dtype);
  return d && d->kind != 0;
}

absl::StatusOr<Header> ParseHeader(const std::string& path, std::string_view json_text,
                                   uint64_t file_size) {
  safetensors::Header h;
  safetensors::HeaderError e;
  if (safetensors::ParseHeader(json_text, file_size, kParseOptions, &h, &e)) return FromShared(h);
  if (e.problem == HeaderProblem::kLengthPastEnd) {  // the text given is longer than the file
    return absl::DataLossError(absl::StrCat(path, ": header of ", e.header_bytes,
                                            " bytes runs past the end of the file (", file_size,
                                            " bytes)"));
  }
  return HeaderStatus(path, e);
}

absl::StatusOr<Header> ReadHeader(const std::string& path, Os* os) {
  auto f = File::Open(path, os);
  if (!f.ok()) return f.status();
  auto read = safetensors::ReadHeader(
      f->size(), [&](uint64_t at, size_t n, char* buf) { return f->ReadAt(at, n, buf); },
      kParseOptions);
  if (!read.ok()) return read.status();
  if (!read->ok()) return HeaderStatus(path, read->error);
  return FromShared(read->header);
}

absl::StatusOr<std::string> EncodeHeader(const std::vector<TensorView>& tensors,
                                         const std::map<std::string, std::string>& metadata) {
  json j = json::object();
  if (!metadata.empty()) j["__metadata__"] = metadata;
  uint64_t at = 0;
  for (const TensorView& t : tensors) {
    const safetensors::DType* d = safetensors::FindDType(t.dtype);
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
  const safetensors::DType* d = safetensors::FindDType(dtype);
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
