// Format detection and the readers behind `ckpt inspect|verify|diff`. Every reader fills
// the same CheckpointReport; tensor data of safetensors files is streamed in chunks of
// whole elements so a checkpoint larger than memory can be inspected.
#include "trainscope/ckpt/inspect.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "ckpt/dcp.h"
#include "ckpt/file_io.h"
#include "trainscope/core/run_dir.h"
#include "trainscope/core/utf8.h"

namespace trainscope::ckpt {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr uint64_t kChunkBytes = 4 << 20;
constexpr char kIndexName[] = "model.safetensors.index.json";

std::string Join(const std::string& dir, const std::string& file) {
  return file.empty() ? dir : dir + "/" + file;
}

// Streams one tensor's bytes in whole-element chunks into `fn(data, bytes)`.
absl::Status ReadTensor(const File& f, const TensorReport& t,
                        const std::function<void(const char*, uint64_t)>& fn) {
  const int bits = DTypeBits(t.dtype);
  const uint64_t elem = bits >= 8 ? bits / 8 : 1;
  const uint64_t chunk = std::max<uint64_t>(elem, kChunkBytes / elem * elem);
  std::string buf(std::min(chunk, t.bytes), '\0');
  for (uint64_t at = 0; at < t.bytes; at += chunk) {
    const uint64_t n = std::min(chunk, t.bytes - at);
    if (auto s = f.ReadAt(t.offset + at, n, buf.data()); !s.ok()) return s;
    fn(buf.data(), n);
  }
  return absl::OkStatus();
}

// Adds the tensors of one safetensors file (relative name `file`) to `r`.
void AddSafetensors(const std::string& dir, const std::string& file, const InspectOptions& o,
                    CheckpointReport* r, std::set<std::string>* names = nullptr) {
  const std::string path = Join(dir, file);
  auto h = ReadHeader(path, o.os);
  if (!h.ok()) {
    std::string msg(h.status().message());
    if (absl::StartsWith(msg, path + ": ")) msg = msg.substr(path.size() + 2);  // said once
    // CheckCheckpoint's second pass over a file that failed its hash may have said it.
    const bool said = std::any_of(r->problems.begin(), r->problems.end(), [&](const Problem& p) {
      return p.file == path && absl::StartsWith(p.problem, "corrupt: damaged safetensors header");
    });
    if (!said) r->problems.push_back({path, absl::StrCat("corrupt: ", msg)});
    return;
  }
  auto f = File::Open(path, o.os);
  for (const TensorEntry& e : h->tensors) {
    TensorReport t;
    t.name = e.name;
    t.dtype = e.dtype;
    t.file = file;
    t.shape = e.shape;
    t.bytes = e.bytes();
    t.offset = e.begin;
    r->total_bytes += t.bytes;
    if (names) names->insert(e.name);
    if (o.stats && f.ok()) {
      StatsAccumulator acc(t.dtype);
      auto s = ReadTensor(*f, t, [&](const char* p, uint64_t n) {
        acc.Add(p, n);
        if (o.on_bytes) o.on_bytes(n);
      });
      if (!s.ok()) r->problems.push_back({path, std::string(s.message())});
      t.stats = acc.Finish();
      if (t.stats.nonfinite) {
        r->problems.push_back({path, absl::StrCat("non-finite: tensor \"", t.name, "\" has ",
                                                  t.stats.nonfinite, " NaN/Inf values")});
      }
    }
    r->tensors.push_back(std::move(t));
  }
}

CheckpointReport InspectOurs(const std::string& path, const InspectOptions& o) {
  CheckpointReport r;
  r.path = path;
  r.format = "trainscope";
  Os* os = o.os;
  CheckResult c = CheckCheckpoint(path, o.hash, o.on_bytes, os);
  r.step = c.step;
  r.complete = c.complete;
  r.incomplete = c.incomplete;
  r.anomaly = c.anomaly || absl::StartsWith(fs::path(path).filename().string(), kAnomalyPrefix);
  r.problems = c.problems;
  if (!c.complete) return r;
  for (const char* f : {"model.safetensors", "optimizer.safetensors"}) {
    if (os->IsRegularFile(Join(path, f))) AddSafetensors(path, f, o, &r);
  }
  // Further tensor files (CheckpointData::tensor_files: the trainer's gradient-compression
  // state), in name order.
  std::set<std::string> more;
  absl::StatusOr<std::vector<std::string>> names = os->ListDir(path);
  for (const std::string& name : names.ok() ? *names : std::vector<std::string>()) {
    if (IsExtraTensorFileName(name) && os->IsRegularFile(Join(path, name))) more.insert(name);
  }
  for (const std::string& f : more) AddSafetensors(path, f, o, &r);
  return r;
}

// HuggingFace sharded folder: completeness per huggingface_hub's index rules.
CheckpointReport InspectSharded(const std::string& dir, const InspectOptions& o) {
  CheckpointReport r;
  r.path = dir;
  r.format = "hf-sharded";
  const std::string index_path = Join(dir, kIndexName);
  Os* os = o.os;
  auto index = ReadJsonFile(index_path, os);
  if (!index.ok() || !index->is_object() || !index->contains("weight_map") ||
      !(*index)["weight_map"].is_object()) {
    r.complete = false;
    r.problems.push_back({index_path, "corrupt: not JSON with a weight_map object"});
    return r;
  }
  std::map<std::string, std::string> weight_map;  // tensor -> shard
  std::set<std::string> shards;
  for (auto it = (*index)["weight_map"].begin(); it != (*index)["weight_map"].end(); ++it) {
    if (!it->is_string() || it->get<std::string>().find('/') != std::string::npos) {
      r.problems.push_back({index_path, absl::StrCat("corrupt: weight_map \"", it.key(),
                                                     "\" is not a shard file name")});
      continue;
    }
    weight_map[it.key()] = it->get<std::string>();
    shards.insert(it->get<std::string>());
  }
  for (const std::string& shard : shards) {
    if (!os->IsRegularFile(Join(dir, shard))) {
      r.complete = false;
      r.problems.push_back({Join(dir, shard), "missing: named by the index but absent"});
      continue;
    }
    std::set<std::string> names;
    AddSafetensors(dir, shard, o, &r, &names);
    for (const std::string& n : names) {
      auto w = weight_map.find(n);
      if (w == weight_map.end() || w->second != shard) {
        r.problems.push_back(
            {Join(dir, shard),
             absl::StrCat("tensor \"", n, "\" is not mapped to this shard by the index")});
      }
    }
    for (const auto& [name, s] : weight_map) {
      if (s == shard && !names.count(name)) {
        r.complete = false;
        r.problems.push_back(
            {Join(dir, shard),
             absl::StrCat("missing: tensor \"", name, "\" of the index is not in the shard")});
      }
    }
  }
  const json* total = nullptr;
  if ((*index).contains("metadata") && (*index)["metadata"].is_object() &&
      (*index)["metadata"].contains("total_size")) {
    total = &(*index)["metadata"]["total_size"];
  }
  if (total && total->is_number_unsigned() && r.complete &&
      total->get<uint64_t>() != r.total_bytes) {
    r.problems.push_back(
        {index_path, absl::StrCat("total_size ", total->get<uint64_t>(),
                                  " differs from the shards' tensor bytes ", r.total_bytes)});
  }
  std::sort(r.tensors.begin(), r.tensors.end(),
            [](const TensorReport& a, const TensorReport& b) { return a.name < b.name; });
  return r;
}

uint64_t TorchDTypeBytes(const std::string& d) {
  static const std::map<std::string, uint64_t> kSizes = {
      {"float64", 8}, {"float32", 4}, {"float16", 2},   {"bfloat16", 2},
      {"int64", 8},   {"int32", 4},   {"int16", 2},     {"int8", 1},
      {"uint8", 1},   {"bool", 1},    {"complex64", 8}, {"complex128", 16}};
  auto it = kSizes.find(d);
  return it == kSizes.end() ? 0 : it->second;
}

// A relative_path that is empty, absolute or has a ".." component.
bool DcpPathLeavesFolder(const std::string& file) {
  if (file.empty() || file[0] == '/') return true;
  for (size_t at = 0; at <= file.size();) {
    size_t slash = file.find('/', at);
    if (slash == std::string::npos) slash = file.size();
    if (file.compare(at, slash - at, "..") == 0) return true;
    at = slash + 1;
  }
  return false;
}

// Where each chunk lies (storage_data): every file must exist inside the folder and reach
// the chunk's end. Each file is reported once, with the furthest end any chunk needs.
void CheckDcpStorage(const std::string& dir, const DcpMetadata& meta, CheckpointReport* r, Os* os) {
  std::map<std::string, std::pair<uint64_t, std::string>> need;  // file -> (end, tensor)
  for (const DcpEntry& e : meta.entries) {
    if (meta.has_storage_data && e.is_tensor && static_cast<int>(e.storage.size()) < e.chunks) {
      r->complete = false;
      r->problems.push_back(
          {Join(dir, ".metadata"),
           absl::StrCat("missing: tensor \"", e.name, "\" has ", e.chunks, " chunks, ",
                        e.storage.size(), " of them in storage_data")});
    } else if (meta.has_storage_data && !e.is_tensor && e.storage.empty()) {
      r->complete = false;
      r->problems.push_back({Join(dir, ".metadata"), absl::StrCat("missing: entry \"", e.name,
                                                                  "\" is not in storage_data")});
    }
    for (const DcpStorage& s : e.storage) {
      if (DcpPathLeavesFolder(s.file)) {
        r->problems.push_back(
            {Join(dir, ".metadata"), absl::StrCat("corrupt: entry \"", e.name, "\" is stored in \"",
                                                  s.file, "\", outside the folder")});
        continue;
      }
      uint64_t end = 0;
      if (__builtin_add_overflow(s.offset, s.length, &end)) end = UINT64_MAX;
      auto& n = need[s.file];
      if (end > n.first || n.second.empty()) n = {end, e.name};
    }
  }
  for (const auto& [file, end_and_name] : need) {
    const std::string p = Join(dir, file);
    if (!os->IsRegularFile(p)) {
      r->complete = false;
      r->problems.push_back({p, absl::StrCat("missing: holds chunks of \"", end_and_name.second,
                                             "\" (named by .metadata) but is absent")});
      continue;
    }
    absl::StatusOr<uint64_t> got = os->FileSize(p);
    const uint64_t size = got.ok() ? *got : 0;
    if (got.ok() && size < end_and_name.first) {
      r->problems.push_back(
          {p, absl::StrCat("truncated: ", size, " bytes, but \"", end_and_name.second,
                           "\" is stored up to byte ", end_and_name.first)});
    }
  }
}

absl::StatusOr<CheckpointReport> InspectDcp(const std::string& dir, Os* os) {
  CheckpointReport r;
  r.path = dir;
  r.format = "dcp";
  auto meta = ReadDcpMetadata(Join(dir, ".metadata"), os);
  if (!meta.ok()) return meta.status();  // unreadable input: exit 2, not "corrupt"
  uint64_t distcp_bytes = 0;
  int distcp_files = 0;
  absl::StatusOr<std::vector<std::string>> names = os->ListDir(dir);
  for (const std::string& name : names.ok() ? *names : std::vector<std::string>()) {
    if (absl::EndsWith(name, ".distcp")) {
      ++distcp_files;
      distcp_bytes += os->FileSize(Join(dir, name)).value_or(0);
    }
  }
  if (distcp_files == 0) {
    r.complete = false;
    r.problems.push_back({dir, "incomplete: no .distcp data files next to .metadata"});
  }
  for (const DcpEntry& d : meta->entries) {
    TensorReport t;
    t.name = d.name;
    t.dtype = d.dtype;
    t.shape = d.shape;
    t.chunks = d.chunks;
    uint64_t numel = 1;
    for (uint64_t x : d.shape) numel = __builtin_mul_overflow(numel, x, &numel) ? 0 : numel;
    if (d.is_tensor && !IsTorchDtypeName(d.dtype)) {
      r.problems.push_back({Join(dir, ".metadata"),
                            absl::StrCat("corrupt: tensor \"", Excerpt(d.name), "\" has dtype \"",
                                         Excerpt(d.dtype), "\", which is not a torch dtype")});
    }
    if (d.is_tensor) {
      uint64_t n = TorchDTypeBytes(d.dtype);
      t.bytes = __builtin_mul_overflow(n, numel, &n) ? 0 : n;
      if (d.chunk_elements < numel) {
        r.complete = false;
        r.problems.push_back(
            {Join(dir, ".metadata"),
             absl::StrCat("incomplete: the chunks of tensor \"", d.name, "\" cover ",
                          d.chunk_elements, " of its ", numel, " elements")});
      } else if (d.chunk_elements > numel) {
        r.problems.push_back({Join(dir, ".metadata"),
                              absl::StrCat("corrupt: the chunks of tensor \"", d.name, "\" hold ",
                                           d.chunk_elements, " elements, more than its ", numel)});
      }
    } else {
      for (const DcpStorage& s : d.storage) t.bytes += s.length;  // the pickled object
    }
    // The file, when the entry lies in one.
    for (const DcpStorage& s : d.storage) {
      t.file = t.file.empty() || t.file == s.file ? s.file : "(several)";
    }
    r.total_bytes += t.bytes;
    r.tensors.push_back(std::move(t));
  }
  std::sort(r.tensors.begin(), r.tensors.end(),
            [](const TensorReport& a, const TensorReport& b) { return a.name < b.name; });
  if (meta->has_storage_data) {
    CheckDcpStorage(dir, *meta, &r, os);
  } else if (distcp_files && distcp_bytes < r.total_bytes) {
    r.problems.push_back({dir, absl::StrCat("truncated: the .distcp files hold ", distcp_bytes,
                                            " bytes, less than the ", r.total_bytes,
                                            " bytes of tensors the metadata lists")});
  }
  return r;
}

absl::Status UnknownFormat(const std::string& path) {
  return absl::InvalidArgumentError(absl::StrCat(
      path, ": unknown checkpoint format (expected a .safetensors file, a folder with ", kIndexName,
      " or .metadata, or a trainscope step-<N> checkpoint)"));
}

}  // namespace

uint64_t DataBytes(const std::string& path) {
  uint64_t total = 0;
  std::error_code ec;
  if (std::error_code e; fs::is_regular_file(path, e)) return fs::file_size(path, ec);
  for (fs::recursive_directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->is_regular_file(ec) && absl::EndsWith(it->path().string(), ".safetensors")) {
      total += it->file_size(ec);
    }
  }
  return total;
}

absl::StatusOr<CheckpointReport> Inspect(const std::string& path, const InspectOptions& o) {
  Os* os = o.os;
  if (!os->FileExists(path))
    return absl::NotFoundError(absl::StrCat(path, ": no such file or directory"));
  if (os->IsRegularFile(path)) {
    const std::string name = fs::path(path).filename().string();
    const std::string parent = fs::path(path).parent_path().string();
    if (name == kIndexName) return Inspect(parent.empty() ? "." : parent, o);
    if (name == ".metadata") return InspectDcp(parent.empty() ? "." : parent, os);
    auto h = ReadHeader(path, os);
    if (!h.ok() && !absl::EndsWith(name, ".safetensors")) return UnknownFormat(path);
    CheckpointReport r;
    r.path = path;
    r.format = "safetensors";
    AddSafetensors(path, "", o, &r);
    if (!h.ok()) r.complete = false;
    return r;
  }
  if (!os->IsDirectory(path)) return UnknownFormat(path);
  if (os->IsRegularFile(Join(path, kIndexName))) return InspectSharded(path, o);
  if (os->IsRegularFile(Join(path, ".metadata"))) return InspectDcp(path, os);
  if (LooksLikeCheckpoint(path, os)) return InspectOurs(path, o);
  return UnknownFormat(path);
}

absl::StatusOr<std::vector<CheckpointReport>> InspectPaths(const std::vector<std::string>& paths,
                                                           const InspectOptions& o) {
  std::vector<CheckpointReport> reports;
  for (const std::string& p : paths) {
    auto r = InspectPath(p, o);
    if (!r.ok()) return r.status();
    for (auto& x : *r) reports.push_back(std::move(x));
  }
  return reports;
}

absl::StatusOr<std::vector<CheckpointReport>> InspectPath(const std::string& path,
                                                          const InspectOptions& o) {
  std::vector<CheckpointReport> out;
  Os* os = o.os;
  std::string dir = path;
  if (os->IsDirectory(path) && !os->IsRegularFile(Join(path, kIndexName)) &&
      !os->IsRegularFile(Join(path, ".metadata")) && !LooksLikeCheckpoint(path, os)) {
    if (os->IsDirectory(Join(path, run_dir::kCheckpoints))) dir = Join(path, run_dir::kCheckpoints);
    std::vector<std::string> dirs = ListCheckpointDirs(dir, os);
    if (!dirs.empty()) {
      std::reverse(dirs.begin(), dirs.end());  // oldest first reads naturally
      for (const std::string& d : dirs) {
        auto r = Inspect(d, o);
        if (!r.ok()) return r.status();
        // In a folder of checkpoints an unfinished save is expected (a writer may be
        // running, or was killed): listed as incomplete, not a problem.
        if (r->problems.size() == 1 && absl::StartsWith(r->problems[0].problem, "incomplete")) {
          bool tmp =
              absl::StrContains(fs::path(d).filename().string(), run_dir::kCheckpointTmpInfix);
          if (tmp) r->problems.clear();
        }
        out.push_back(std::move(*r));
      }
      return out;
    }
  }
  auto r = Inspect(path, o);
  if (!r.ok()) return r.status();
  out.push_back(std::move(*r));
  return out;
}

}  // namespace trainscope::ckpt
