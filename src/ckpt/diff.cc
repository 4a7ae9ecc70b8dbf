// `ckpt diff A B`: tensors matched by name; values of common tensors with equal shape and
// decodable dtypes are streamed side by side in chunks and compared in double.
#include <algorithm>
#include <cmath>
#include <map>

#include "absl/strings/str_cat.h"
#include "ckpt/file_io.h"
#include "trainscope/ckpt/inspect.h"

namespace trainscope::ckpt {
namespace {

constexpr uint64_t kChunkElems = 1 << 20;

std::map<std::string, const TensorReport*> ByName(const CheckpointReport& r) {
  std::map<std::string, const TensorReport*> m;
  for (const TensorReport& t : r.tensors) m.emplace(t.name, &t);  // first file wins
  return m;
}

std::string FilePath(const CheckpointReport& r, const TensorReport& t) {
  return t.file.empty() ? r.path : r.path + "/" + t.file;
}

// Compares the values of two same-shaped tensors; fills max_abs, max_rel, differs.
absl::Status CompareValues(const CheckpointReport& ra, const TensorReport& a,
                           const CheckpointReport& rb, const TensorReport& b, TensorDiff* d,
                           const InspectOptions& o) {
  auto fa = File::Open(FilePath(ra, a));
  if (!fa.ok()) return fa.status();
  auto fb = File::Open(FilePath(rb, b));
  if (!fb.ok()) return fb.status();
  const uint64_t ea = DTypeBits(a.dtype) / 8, eb = DTypeBits(b.dtype) / 8;
  const uint64_t count = ea ? a.bytes / ea : 0;
  std::string ba, bb;
  std::vector<double> va, vb;
  for (uint64_t at = 0; at < count; at += kChunkElems) {
    const uint64_t n = std::min(kChunkElems, count - at);
    ba.resize(n * ea);
    bb.resize(n * eb);
    if (auto s = fa->ReadAt(a.offset + at * ea, n * ea, ba.data()); !s.ok()) return s;
    if (auto s = fb->ReadAt(b.offset + at * eb, n * eb, bb.data()); !s.ok()) return s;
    if (o.on_bytes) o.on_bytes(n * (ea + eb));
    va.clear();
    vb.clear();
    ToDoubles(a.dtype, ba.data(), ba.size(), &va);
    ToDoubles(b.dtype, bb.data(), bb.size(), &vb);
    for (uint64_t i = 0; i < n; ++i) {
      const double x = va[i], y = vb[i];
      if (std::isnan(x) || std::isnan(y) || std::isinf(x) || std::isinf(y)) {
        const bool same = (std::isnan(x) && std::isnan(y)) || x == y;
        if (!same) d->differs = true;
        continue;
      }
      const double abs = std::fabs(x - y);
      const double scale = std::max(std::fabs(x), std::fabs(y));
      if (abs > 0) d->differs = true;
      d->max_abs = std::max(d->max_abs, abs);
      if (scale > 0) d->max_rel = std::max(d->max_rel, abs / scale);
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<DiffReport> Diff(const std::string& a, const std::string& b,
                                const InspectOptions& options) {
  InspectOptions o = options;
  o.stats = false;
  auto ra = Inspect(a, o);
  if (!ra.ok()) return ra.status();
  auto rb = Inspect(b, o);
  if (!rb.ok()) return rb.status();
  DiffReport d;
  d.a = a;
  d.b = b;
  const auto ma = ByName(*ra), mb = ByName(*rb);
  for (const auto& [name, t] : ma) {
    if (!mb.count(name)) d.only_a.push_back(name);
  }
  for (const auto& [name, t] : mb) {
    if (!ma.count(name)) d.only_b.push_back(name);
  }
  for (const auto& [name, ta] : ma) {
    auto it = mb.find(name);
    if (it == mb.end()) continue;
    const TensorReport* tb = it->second;
    TensorDiff td;
    td.name = name;
    if (ta->shape != tb->shape) {
      td.change = "shape";
      td.differs = true;
    } else if (ta->dtype != tb->dtype) {
      td.change = "dtype";
      td.differs = true;
    }
    const bool data = ra->format != "dcp" && rb->format != "dcp";
    if (ta->shape == tb->shape && data && DTypeDecodable(ta->dtype) && DTypeDecodable(tb->dtype)) {
      if (auto s = CompareValues(*ra, *ta, *rb, *tb, &td, o); !s.ok()) return s;
    } else if (td.change.empty()) {
      td.change = "not compared";
    }
    if (td.differs && d.first_different.empty()) d.first_different = name;
    d.tensors.push_back(std::move(td));
  }
  return d;
}

}  // namespace trainscope::ckpt
