// `ckpt diff A B`: tensors matched by name; values of common tensors with equal shape and
// decodable dtypes are streamed side by side in chunks and compared in double. DCP folders:
// the chunks of a tensor are matched by their offsets in the global tensor, each one the
// torch.save archive ReadDcpChunk finds the elements in.
#include <algorithm>
#include <cmath>
#include <map>

#include "absl/strings/str_cat.h"
#include "ckpt/dcp.h"
#include "ckpt/file_io.h"
#include "trainscope/ckpt/inspect.h"
#include "trainscope/core/status.h"

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

// `bytes` bytes of `dtype` from byte `offset` of `file`: one tensor's elements, row-major.
struct Span {
  std::string file, dtype;
  uint64_t offset = 0, bytes = 0;
};

// Compares the values of two same-shaped tensors; fills max_abs, max_rel, differs.
absl::Status CompareValues(const Span& a, const Span& b, TensorDiff* d, const InspectOptions& o) {
  TS_ASSIGN_OR_RETURN(File fa, File::Open(a.file, o.os));
  TS_ASSIGN_OR_RETURN(File fb, File::Open(b.file, o.os));
  const uint64_t ea = DTypeBits(a.dtype) / 8, eb = DTypeBits(b.dtype) / 8;
  const uint64_t count = ea ? a.bytes / ea : 0;
  std::string ba, bb;
  std::vector<double> va, vb;
  for (uint64_t at = 0; at < count; at += kChunkElems) {
    const uint64_t n = std::min(kChunkElems, count - at);
    ba.resize(n * ea);
    bb.resize(n * eb);
    TS_RETURN_IF_ERROR(fa.ReadAt(a.offset + at * ea, n * ea, ba.data()));
    TS_RETURN_IF_ERROR(fb.ReadAt(b.offset + at * eb, n * eb, bb.data()));
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

// A DCP tensor: the chunks of A and B paired by their offsets. Other chunk boundaries (a
// save with another sharding) or a chunk ReadDcpChunk does not decode: "not compared".
absl::Status CompareDcpTensor(const std::string& dir_a, const DcpEntry& a, const std::string& dir_b,
                              const DcpEntry& b, TensorDiff* d, const InspectOptions& o) {
  std::map<std::vector<uint64_t>, const DcpStorage*> chunks_b;
  for (const DcpStorage& s : b.storage) chunks_b.emplace(s.chunk_offsets, &s);
  bool paired = !a.storage.empty() && a.storage.size() == b.storage.size() &&
                chunks_b.size() == b.storage.size();
  for (const DcpStorage& s : a.storage) paired = paired && chunks_b.count(s.chunk_offsets);
  for (size_t i = 0; paired && i < a.storage.size(); ++i) {
    auto ca = ReadDcpChunk(dir_a, a.storage[i], o.os);
    auto cb = ReadDcpChunk(dir_b, *chunks_b[a.storage[i].chunk_offsets], o.os);
    for (const auto* c : {&ca, &cb}) {
      if (!c->ok() && !absl::IsUnimplemented(c->status())) return c->status();
    }
    paired = ca.ok() && cb.ok() && ca->shape == cb->shape && ca->dtype == cb->dtype &&
             ca->stride.empty() && cb->stride.empty();
    if (paired) {
      TS_RETURN_IF_ERROR(CompareValues({ca->file, ca->dtype, ca->offset, ca->bytes},
                                       {cb->file, cb->dtype, cb->offset, cb->bytes}, d, o));
    }
  }
  if (!paired) d->change = "not compared";
  return absl::OkStatus();
}

// A DCP non-tensor entry, the torch.save archive of a Python object: equal when the
// archives hold the same members with the same bytes (.data/serialization_id aside: it
// names the save, not the value).
absl::Status CompareDcpObject(const std::string& dir_a, const DcpEntry& a, const std::string& dir_b,
                              const DcpEntry& b, TensorDiff* d, Os* os) {
  if (a.storage.size() != 1 || b.storage.size() != 1) {
    d->change = "not compared";
    return absl::OkStatus();
  }
  auto ma = ReadDcpArchive(dir_a, a.storage[0], os);
  auto mb = ReadDcpArchive(dir_b, b.storage[0], os);
  for (const auto* m : {&ma, &mb}) {
    if (!m->ok() && !absl::IsUnimplemented(m->status())) return m->status();
  }
  if (!ma.ok() || !mb.ok()) {
    d->change = "not compared";
    return absl::OkStatus();
  }
  auto contents = [os](const std::string& dir, const DcpStorage& s,
                       const std::vector<DcpArchiveMember>& members)
      -> absl::StatusOr<std::map<std::string, std::string>> {
    TS_ASSIGN_OR_RETURN(File f, File::Open(dir + "/" + s.file, os));
    std::map<std::string, std::string> out;
    for (const DcpArchiveMember& m : members) {
      if (m.name == ".data/serialization_id") continue;
      std::string& bytes = out[m.name];
      bytes.resize(m.size);  // within the entry: at most its stored length
      TS_RETURN_IF_ERROR(f.ReadAt(m.offset, m.size, bytes.data()));
    }
    return out;
  };
  TS_ASSIGN_OR_RETURN(auto ca, contents(dir_a, a.storage[0], *ma));
  TS_ASSIGN_OR_RETURN(auto cb, contents(dir_b, b.storage[0], *mb));
  d->differs = ca != cb;
  return absl::OkStatus();
}

absl::StatusOr<std::map<std::string, DcpEntry>> DcpEntries(const CheckpointReport& r, Os* os) {
  TS_ASSIGN_OR_RETURN(DcpMetadata meta, ReadDcpMetadata(r.path + "/.metadata", os));
  std::map<std::string, DcpEntry> out;
  for (DcpEntry& e : meta.entries) out.emplace(e.name, std::move(e));
  return out;
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
  std::map<std::string, DcpEntry> dcp_a, dcp_b;
  if (ra->format == "dcp" && rb->format == "dcp") {
    TS_ASSIGN_OR_RETURN(dcp_a, DcpEntries(*ra, o.os));
    TS_ASSIGN_OR_RETURN(dcp_b, DcpEntries(*rb, o.os));
  }
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
    const bool dcp = ra->format == "dcp" && rb->format == "dcp";
    const bool data = ra->format != "dcp" && rb->format != "dcp";
    if (dcp && td.change.empty()) {
      const DcpEntry& ea = dcp_a.at(name);
      const DcpEntry& eb = dcp_b.at(name);
      TS_RETURN_IF_ERROR(ea.is_tensor ? CompareDcpTensor(ra->path, ea, rb->path, eb, &td, o)
                                      : CompareDcpObject(ra->path, ea, rb->path, eb, &td, o.os));
    } else if (ta->shape == tb->shape && data && DTypeDecodable(ta->dtype) &&
               DTypeDecodable(tb->dtype)) {
      TS_RETURN_IF_ERROR(CompareValues({FilePath(*ra, *ta), ta->dtype, ta->offset, ta->bytes},
                                       {FilePath(*rb, *tb), tb->dtype, tb->offset, tb->bytes}, &td,
                                       o));
    } else if (td.change.empty()) {
      td.change = "not compared";
    }
    if (td.differs && d.first_different.empty()) d.first_different = name;
    d.tensors.push_back(std::move(td));
  }
  return d;
}

}  // namespace trainscope::ckpt
