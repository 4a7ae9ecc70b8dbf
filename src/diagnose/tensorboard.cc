// TensorBoard event files (series.h): TFRecord framing (tb/tfrecord.h) around tensorflow.Event
// protos (proto/tensorboard, compiled by protoc into ts_tbproto). Scalars come two ways:
// Summary.Value.simple_value (TF1, PyTorch's SummaryWriter, tensorboardX) and a one-element
// tensor (TF2's tf.summary.scalar: the "scalars" plugin, float_val or tensor_content). The
// step is the Event's; the tag is mapped like a column name (CanonicalMetric).
#include <cmath>
#include <cstring>
#include <limits>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "diagnose/series_builder.h"
#include "tensorboard/event.pb.h"
#include "tensorboard/summary.pb.h"
#include "tensorboard/tensor.pb.h"
#include "trainscope/core/half.h"
#include "trainscope/tb/tfrecord.h"

namespace trainscope::diagnose::internal {
namespace {

// The element of `content` (little-endian, T's layout) when it holds exactly one.
template <typename T>
bool TbContentScalar(const std::string& content, double* out) {
  if (content.size() != sizeof(T)) return false;
  T v;
  std::memcpy(&v, content.data(), sizeof(T));
  *out = static_cast<double>(v);
  return true;
}

// A one-element numeric tensor's value; false for anything else (histograms, text, images).
bool TbTensorScalar(const tensorflow::TensorProto& t, double* out) {
  if (t.tensor_shape().unknown_rank()) return false;
  for (const auto& d : t.tensor_shape().dim())
    if (d.size() != 1) return false;
  const std::string& c = t.tensor_content();
  switch (t.dtype()) {
    case tensorflow::DT_FLOAT:
      if (!c.empty()) return TbContentScalar<float>(c, out);
      if (t.float_val_size() != 1) return false;
      *out = t.float_val(0);
      return true;
    case tensorflow::DT_DOUBLE:
      if (!c.empty()) return TbContentScalar<double>(c, out);
      if (t.double_val_size() != 1) return false;
      *out = t.double_val(0);
      return true;
    case tensorflow::DT_HALF:
    case tensorflow::DT_BFLOAT16: {
      uint16_t bits;
      if (!c.empty()) {
        if (c.size() != 2) return false;
        std::memcpy(&bits, c.data(), 2);
      } else if (t.half_val_size() == 1) {
        bits = static_cast<uint16_t>(t.half_val(0));
      } else {
        return false;
      }
      *out = t.dtype() == tensorflow::DT_HALF ? HalfToFloat(static_cast<uint16_t>(bits))
                                              : BFloat16ToFloat(static_cast<uint16_t>(bits));
      return true;
    }
    case tensorflow::DT_INT32:
      if (!c.empty()) return TbContentScalar<int32_t>(c, out);
      if (t.int_val_size() != 1) return false;
      *out = t.int_val(0);
      return true;
    case tensorflow::DT_INT64:
      if (!c.empty()) return TbContentScalar<int64_t>(c, out);
      if (t.int64_val_size() != 1) return false;
      *out = static_cast<double>(t.int64_val(0));
      return true;
    default:
      return false;
  }
}

// Per tag: the Metric it feeds (kNumMetrics: none). A tag whose first value names a plugin
// other than "scalars" is not a scalar series, whatever its name.
class TbTagMap {
 public:
  Metric Of(const tensorflow::Summary::Value& v) {
    auto it = map_.find(v.tag());
    if (it == map_.end()) it = map_.emplace(v.tag(), MetricIndex(CanonicalMetric(v.tag()))).first;
    if (v.has_metadata() && !v.metadata().plugin_data().plugin_name().empty() &&
        v.metadata().plugin_data().plugin_name() != "scalars")
      it->second = kNumMetrics;
    return it->second;
  }

 private:
  std::unordered_map<std::string, Metric> map_;
};

}  // namespace

absl::StatusOr<Series> ParseTensorBoard(std::string_view path, std::string_view file) {
  SeriesBuilder b(path, "tensorboard");
  Series& s = b.series();
  tb::TfRecordReader reader(file);
  TbTagMap tags;
  tensorflow::Event event;
  std::string_view rec;
  while (reader.Next(&rec)) {
    ++s.records;
    if (rec.size() > static_cast<size_t>(std::numeric_limits<int>::max()) ||
        !event.ParseFromArray(rec.data(), static_cast<int>(rec.size()))) {
      b.Bad(absl::StrCat("byte ", rec.data() - file.data() - 12), "not an Event protobuf");
      continue;
    }
    if (!event.has_summary()) continue;  // file_version, graphs, session logs
    for (const tensorflow::Summary::Value& v : event.summary().value()) {
      Metric m = tags.Of(v);
      if (m == kNumMetrics) continue;
      double x;
      if (v.value_case() == tensorflow::Summary::Value::kSimpleValue) {
        x = v.simple_value();
      } else if (v.value_case() == tensorflow::Summary::Value::kTensor) {
        if (!TbTensorScalar(v.tensor(), &x)) continue;
      } else {
        continue;
      }
      b.Add(m, event.step(), x);
    }
  }
  // The framing's damage, counted with the records' own (and named first: a CRC mismatch
  // says more about the file than a record that does not parse).
  if (reader.bad_records() > 0) {
    s.bad_records += reader.bad_records();
    s.first_bad = reader.first_bad();
  }
  if (reader.truncated_bytes() > 0) {
    b.Bad(absl::StrCat("byte ", file.size() - static_cast<size_t>(reader.truncated_bytes())),
          absl::StrCat("last record cut short (", reader.truncated_bytes(),
                       " bytes; a file still being written?)"));
  }
  return b.Finish("tag");
}

}  // namespace trainscope::diagnose::internal
