// `data stats` on .safetensors files: the header is read and validated by the one shared
// reader (core/safetensors.h, the rules of huggingface/safetensors Metadata::validate), whose
// structured errors are worded here as `data stats` words them; each decoded tensor is
// reduced as one population.
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "data/feature_stats_internal.h"
#include "trainscope/core/safetensors.h"
#include "trainscope/core/status.h"
#include "trainscope/core/utf8.h"

namespace trainscope::data::internal {
namespace {

using safetensors::HeaderError;
using safetensors::HeaderProblem;

// The shared table's dtype as the npy and safetensors reductions take it.
DType ElementType(const safetensors::DType& d) {
  char kind = 0;
  switch (d.kind) {
    case 'f':
    case 'h':
      kind = 'f';
      break;
    case 'b':
      kind = 'h';
      break;
    case '?':
      kind = 'b';
      break;
    default:
      kind = d.kind;  // 'i', 'u', or 0: not decoded
  }
  return DType{d.numpy, static_cast<size_t>(std::max(1, d.bits / 8)), kind};
}

// "[json.exception.parse_error.101] parse error at line 1, column 2: why" -> "why";
// "[json.exception.out_of_range.406] number overflow parsing '1e999'" -> the rest, at the
// header's file offset: a syntax error's byte is nlohmann's, one past the bad character; a
// number's is its start.
std::string JsonProblem(const std::string& path, const JsonTextError& e) {
  if (e.too_deep) {
    return absl::StrCat(path, ": byte ", 8 + e.byte, ": header nested deeper than ",
                        kMaxHeaderJsonDepth, " levels");
  }
  std::string what = e.what;
  if (size_t end = what.find("] "); !what.empty() && what[0] == '[' && end != std::string::npos) {
    what = what.substr(end + 2);
  }
  if (size_t colon = what.find(": "); !e.out_of_range && colon != std::string::npos) {
    what = what.substr(colon + 2);
  }
  const size_t at = e.out_of_range || e.byte == 0 ? e.byte : e.byte - 1;
  return absl::StrCat(path, ": byte ", 8 + at, ": header is not valid JSON: ", ValidUtf8(what));
}

// What is wrong with one tensor's entry, after "<path>: tensor <name>: ".
std::string EntryProblem(const HeaderError& e) {
  const safetensors::Entry& t = e.tensor;
  const std::string range = absl::StrCat("[", t.begin, ", ", t.end, "]");
  const std::string shape = absl::StrCat("shape ", ShapeText(t.shape, false), " of ", t.dtype);
  switch (e.problem) {
    case HeaderProblem::kEntryNotObject:
      return absl::StrCat("expected an object with dtype, shape and data_offsets, found ", e.found);
    case HeaderProblem::kFieldMissing:
      return absl::StrCat(e.field, ": missing");
    case HeaderProblem::kFieldType:
      if (e.field == "data_offsets") {
        return "data_offsets: expected [begin, end], two non-negative integers";
      }
      return absl::StrCat(e.field, ": expected ", e.field == "dtype" ? "a string" : "an array",
                          ", found ", e.found);
    case HeaderProblem::kDimension:
      return absl::StrCat("shape: dimension ", e.dimension, " is ", e.found,
                          ", not a non-negative integer");
    case HeaderProblem::kOffsetsReversed:
      return absl::StrCat("data_offsets: ", range, " ends before it begins");
    case HeaderProblem::kOffsetsPastEnd:
      return absl::StrCat("data_offsets: ", range, " ends past the data section (", e.data_len,
                          " bytes after the header)");
    case HeaderProblem::kCountOverflow:
    case HeaderProblem::kBytesOverflow:
      return absl::StrCat(shape, ": ", safetensors::OverflowText(e.problem));
    case HeaderProblem::kPartialBytes:
      return absl::StrCat(shape, " is not a whole number of bytes");
    case HeaderProblem::kOverlap:
      return absl::StrCat("data_offsets ", range, " overlap tensor ", Quote(e.other.name), " [",
                          e.other.begin, ", ", e.other.end, "]");
    case HeaderProblem::kGap:
      return absl::StrCat("data_offsets ", range, " leave a gap: bytes [", e.at, ", ", t.begin,
                          ") of the data section belong to no tensor");
    default:  // kSizeMismatch
      return absl::StrCat(shape, " needs ", e.want_bytes, " bytes, data_offsets ", range, " span ",
                          t.end - t.begin);
  }
}

// The reader's error as `data stats` words it: "<path>: [byte B: ]<what>".
absl::Status HeaderStatus(const std::string& path, const HeaderError& e) {
  auto invalid = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
  };
  switch (e.problem) {
    case HeaderProblem::kTooShort:
      return absl::DataLossError(
          absl::StrCat(path, ": byte 0: shorter than the 8-byte header size"));
    case HeaderProblem::kLengthOverLimit:
      return invalid(absl::StrCat("byte 0: header length ", e.header_bytes,
                                  " exceeds the format's limit of ", kMaxSafetensorsHeaderBytes,
                                  " bytes"));
    case HeaderProblem::kLengthPastEnd:
      return absl::DataLossError(absl::StrCat(path, ": byte 8: header of ", e.header_bytes,
                                              " bytes runs past the end (the file has ",
                                              e.file_size, ")"));
    case HeaderProblem::kJson:
      return absl::InvalidArgumentError(JsonProblem(path, e.json));
    case HeaderProblem::kNotObject:
      return invalid("byte 8: header is not a JSON object");
    case HeaderProblem::kMetadataNotObject:
    case HeaderProblem::kMetadataNotString:
      return invalid("__metadata__: expected an object of strings");
    case HeaderProblem::kTrailing:
      return invalid(absl::StrCat("byte ", e.byte, ": trailing bytes: the tensors end at offset ",
                                  e.at, " but the data section has ", e.data_len, " bytes"));
    default:
      return invalid(absl::StrCat("tensor ", Quote(e.tensor.name), ": ", EntryProblem(e)));
  }
}

}  // namespace

absl::StatusOr<FeatureReport> Safetensors(const StatsInput& in, const FeatureStatsOptions& o) {
  const std::string& path = in.path();
  TS_ASSIGN_OR_RETURN(
      safetensors::ReadResult read,
      safetensors::ReadHeader(
          in.size(), [&](uint64_t at, size_t n, char* buf) { return in.ReadAt(at, n, buf); },
          safetensors::ParseOptions{}));
  if (!read.ok()) return HeaderStatus(path, read.error);
  const uint64_t data_off = read.header.data_start;
  FeatureReport r;
  r.path = path;
  r.format = "safetensors";
  for (const safetensors::Entry& e : read.header.tensors) {
    if (!e.info || e.info->kind == 0) {
      ArrayStats a;
      a.name = e.name;
      a.dtype = e.info ? e.info->numpy : e.dtype;
      a.shape = e.shape;
      r.findings.push_back(absl::StrCat(
          "tensor ", Quote(e.name), " is ", e.dtype,
          e.info ? ": not decoded, no statistics"
                 : ": a dtype unknown to trainscope (size not checked), no statistics"));
      r.arrays.push_back(std::move(a));
      continue;
    }
    // A tensor in a checkpoint is one population (weights, not features): one line of
    // statistics per tensor, and no normalisation advice.
    TS_ASSIGN_OR_RETURN(
        ArrayStats a,
        Reduce(in, data_off + e.begin, ElementType(*e.info), e.shape, e.count, false, e.name,
               absl::StrCat(path, ": tensor ", Quote(e.name), ": shape ", ShapeText(e.shape, false),
                            ": "),
               o, /*whole=*/true));
    for (FeatureStats& f : a.features) f.suggest.clear();
    r.arrays.push_back(std::move(a));
  }
  return r;
}

}  // namespace trainscope::data::internal
