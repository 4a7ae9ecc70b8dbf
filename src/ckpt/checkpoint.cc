// The writer and the checks of our checkpoint directory. Atomicity comes from the rename:
// everything, manifest.json last, is written and fsynced in step-<N>.tmp-<pid>, which is
// then renamed to step-<N> and the parent fsynced. A reader therefore sees either no
// step-<N> or a complete one; a leftover .tmp- directory is an interrupted save.
#include "trainscope/ckpt/checkpoint.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "ckpt/file_io.h"

namespace trainscope::ckpt {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// The string member `key` of the object j, or "" when it is absent or not a string: these
// files come from disk, and nlohmann's value() throws on a member of another type.
std::string StringMember(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// Writes and hashes one file; fsyncs it when asked.
class OutFile {
 public:
  absl::Status Open(const std::string& path) {
    path_ = path;
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd_ < 0) return ErrnoStatus(path, "cannot create");
    state_ = XXH3_createState();
    XXH3_64bits_reset(state_);
    return absl::OkStatus();
  }
  ~OutFile() {
    if (fd_ >= 0) ::close(fd_);
    if (state_) XXH3_freeState(state_);
  }
  absl::Status Write(const void* data, uint64_t n) {
    XXH3_64bits_update(state_, data, n);
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      ssize_t w = ::write(fd_, p, std::min<uint64_t>(n, 1 << 30));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) return ErrnoStatus(path_, "write failed");
      p += w;
      n -= static_cast<uint64_t>(w);
      bytes_ += static_cast<uint64_t>(w);
    }
    return absl::OkStatus();
  }
  absl::Status Close(bool sync) {
    if (sync && ::fsync(fd_) != 0) return ErrnoStatus(path_, "fsync failed");
    int r = ::close(fd_);
    fd_ = -1;
    if (r != 0) return ErrnoStatus(path_, "close failed");
    return absl::OkStatus();
  }
  uint64_t bytes() const { return bytes_; }
  std::string hash() const { return HashHex(XXH3_64bits_digest(state_)); }

 private:
  std::string path_;
  int fd_ = -1;
  XXH3_state_t* state_ = nullptr;
  uint64_t bytes_ = 0;
};

struct Writer {
  std::string tmp;
  const WriteOptions& options;
  json files = json::array();

  // `detail`: more members of the file's manifest entry (a safetensors file's "header" and
  // "tensors").
  absl::Status Put(const std::string& name,
                   const std::vector<std::pair<const void*, uint64_t>>& parts,
                   json detail = json::object()) {
    OutFile f;
    if (auto s = f.Open(tmp + "/" + name); !s.ok()) return s;
    for (const auto& [p, n] : parts) {
      if (auto s = f.Write(p, n); !s.ok()) return s;
    }
    if (auto s = f.Close(options.fsync); !s.ok()) return s;
    json entry = {{"path", name}, {"bytes", f.bytes()}, {"xxh3", f.hash()}};
    entry.update(detail);
    files.push_back(std::move(entry));
    if (options.after_file) return options.after_file(name);
    return absl::OkStatus();
  }
  absl::Status PutText(const std::string& name, const std::string& text) {
    return Put(name, {{text.data(), text.size()}});
  }
  absl::Status PutTensors(const std::string& name, const std::vector<TensorView>& tensors) {
    auto header = EncodeHeader(tensors, {{"format", "pt"}});
    if (!header.ok())
      return absl::InvalidArgumentError(absl::StrCat(name, ": ", header.status().message()));
    std::vector<std::pair<const void*, uint64_t>> parts{{header->data(), header->size()}};
    // Per-part hashes let verify name the damaged tensor (or the header) rather than only the
    // file: each tensor's absolute byte range in the file and its xxh3. EncodeHeader lays the
    // data out in the order given, right after the header.
    json detail = {{"header",
                    {{"bytes", header->size()},
                     {"xxh3", HashHex(XXH3_64bits(header->data(), header->size()))}}},
                   {"tensors", json::array()}};
    uint64_t at = header->size();
    for (const TensorView& t : tensors) {
      parts.push_back({t.data, t.bytes});
      detail["tensors"].push_back({{"name", t.name},
                                   {"begin", at},
                                   {"bytes", t.bytes},
                                   {"xxh3", HashHex(XXH3_64bits(t.data, t.bytes))}});
      at += t.bytes;
    }
    return Put(name, parts, std::move(detail));
  }
};

bool ValidJsonName(const std::string& n) {
  return !n.empty() && n.find('/') == std::string::npos && n != run_dir::kCheckpointMeta &&
         n != run_dir::kCheckpointManifest && n[0] != '.' && absl::EndsWith(n, ".json");
}

// [anomaly-]step-<N> or [anomaly-]step-<N>.tmp-<pid>: the step, or -1.
int64_t StepFromName(const std::string& name, bool* tmp) {
  *tmp = false;
  std::string rest = name;
  if (absl::StartsWith(rest, kAnomalyPrefix)) rest = rest.substr(sizeof(kAnomalyPrefix) - 1);
  if (!absl::StartsWith(rest, run_dir::kCheckpointStepPrefix)) return -1;
  rest = rest.substr(sizeof(run_dir::kCheckpointStepPrefix) - 1);
  size_t t = rest.find(run_dir::kCheckpointTmpInfix);
  if (t != std::string::npos) {
    *tmp = true;
    rest = rest.substr(0, t);
  }
  int64_t step;
  if (rest.empty() || !absl::SimpleAtoi(rest, &step) || step < 0) return -1;
  return step;
}

// rank<R>.json: a rank's state (RNG, data position), which resume reads as a JSON object.
bool IsRankStateName(const std::string& name) {
  if (!absl::StartsWith(name, "rank") || !absl::EndsWith(name, ".json")) return false;
  const std::string digits = name.substr(4, name.size() - 9);
  return !digits.empty() && digits.find_first_not_of("0123456789") == std::string::npos;
}

// What is wrong with a JSON file of a checkpoint whose size and hash match the manifest, or
// "": resume parses each, so one that is not JSON (a rank state: not a JSON object) would
// be refused there. meta.json is checked on its own, for its keys.
std::string JsonFileProblem(const std::string& file, const std::string& name, Os* os) {
  auto j = ReadJsonFile(file, os);
  if (!j.ok()) {
    std::string why(j.status().message());
    if (absl::StartsWith(why, file + ": ")) why = why.substr(file.size() + 2);
    return absl::StrCat("corrupt: ", why);
  }
  if (IsRankStateName(name) && !j->is_object()) return "corrupt: not a JSON object";
  return "";
}

// meta.json's problem, or "": a JSON object of format trainscope.checkpoint with an integer
// step and world_size.
std::string MetaProblem(const absl::StatusOr<json>& meta) {
  if (!meta.ok() || !meta->is_object() || StringMember(*meta, "format") != kCheckpointFormat)
    return "corrupt: missing or not of format trainscope.checkpoint";
  for (const char* k : {"step", "world_size"}) {
    if (meta->contains(k) && !(*meta)[k].is_number_integer())
      return absl::StrCat("corrupt: \"", k, "\" is not an integer");
  }
  if (meta->contains("anomaly") && !(*meta)["anomaly"].is_boolean())
    return "corrupt: \"anomaly\" is not a boolean";
  if (!meta->contains("step")) return "corrupt: no \"step\"";
  return "";
}

// The xxh3 of bytes [begin, begin + n) of `f` when it differs from `want`, else "" (also
// when the range cannot be read: the size check already named a short file).
std::string RangeMismatch(const File& f, uint64_t begin, uint64_t n, const std::string& want) {
  auto h = HashRange(f, begin, n);
  return h.ok() && *h != want ? *h : std::string();
}

// Where a file whose xxh3 differs from its manifest entry was changed. For a safetensors
// file: the header (it no longer parses: corrupt; or its bytes differ from the entry's
// "header" hash) and each tensor whose byte range differs from its "tensors" hash, the
// tensor named. Manifests written before those hashes were recorded have only the header
// check. Empty when nothing more precise than the whole file can be said.
std::vector<Problem> LocateDamage(const std::string& file, const json& entry, Os* os) {
  std::vector<Problem> out;
  if (!absl::EndsWith(file, ".safetensors")) return out;
  auto f = File::Open(file, os);
  if (!f.ok()) return out;
  auto header = ReadHeader(file, os);
  // "hash mismatch of bytes [0, H) (...)" when the entry has a header hash and it differs.
  std::string mismatch;
  auto hh = entry.find("header");
  if (hh != entry.end() && hh->is_object() && hh->contains("bytes") &&
      (*hh)["bytes"].is_number_unsigned() && hh->contains("xxh3") && (*hh)["xxh3"].is_string()) {
    const uint64_t n = (*hh)["bytes"];
    const std::string want = (*hh)["xxh3"];
    if (std::string got = RangeMismatch(*f, 0, n, want); !got.empty()) {
      mismatch = absl::StrCat("hash mismatch of bytes [0, ", n, ") (xxh3 ", got,
                              ", the manifest says ", want, ")");
    }
  }
  if (!header.ok()) {
    std::string why(header.status().message());
    if (absl::StartsWith(why, file + ": ")) why = why.substr(file.size() + 2);
    out.push_back({file, absl::StrCat("corrupt: damaged safetensors header: ", mismatch,
                                      mismatch.empty() ? "" : "; ", why)});
  } else if (!mismatch.empty()) {
    out.push_back({file, absl::StrCat("corrupt: damaged safetensors header: ", mismatch)});
  }
  if (!entry.contains("tensors") || !entry["tensors"].is_array()) return out;
  // By the manifest's byte ranges, so a damaged header does not hide damaged data.
  for (const json& t : entry["tensors"]) {
    if (!t.is_object() || !t.contains("name") || !t["name"].is_string() || !t.contains("begin") ||
        !t["begin"].is_number_unsigned() || !t.contains("bytes") ||
        !t["bytes"].is_number_unsigned() || !t.contains("xxh3") || !t["xxh3"].is_string()) {
      continue;  // a malformed entry: the file-level mismatch stands for it
    }
    const std::string name = t["name"], want = t["xxh3"];
    const uint64_t begin = t["begin"], n = t["bytes"];
    if (std::string got = RangeMismatch(*f, begin, n, want); !got.empty()) {
      out.push_back(
          {file,
           absl::StrCat("corrupt: tensor \"", name, "\": hash mismatch of bytes [", begin, ", ",
                        begin + n, ") (xxh3 ", got, ", the manifest says ", want, ")"),
           name});
    }
  }
  return out;
}

}  // namespace

bool IsExtraTensorFileName(const std::string& n) {
  return !n.empty() && n.find('/') == std::string::npos && n != "model.safetensors" &&
         n != "optimizer.safetensors" && n[0] != '.' && absl::EndsWith(n, ".safetensors");
}

absl::StatusOr<std::string> WriteCheckpoint(const std::string& dir, const CheckpointData& data,
                                            const WriteOptions& options) {
  for (const auto& [name, blob] : data.json_files) {
    if (!ValidJsonName(name)) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": not a plain <name>.json file name"));
    }
  }
  for (const auto& [name, tensors] : data.tensor_files) {
    if (!IsExtraTensorFileName(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": not a plain <name>.safetensors file name"));
    }
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat(dir, ": cannot create: ", ec.message()));
  const std::string final_path = absl::StrCat(dir, "/", CheckpointDirName(data.step, data.anomaly));
  if (fs::exists(final_path, ec)) {
    return absl::AlreadyExistsError(absl::StrCat(final_path, ": a checkpoint of this step exists"));
  }
  Writer w{absl::StrCat(final_path, run_dir::kCheckpointTmpInfix, ::getpid()), options};
  fs::remove_all(w.tmp, ec);  // a leftover of an earlier process with our pid
  if (::mkdir(w.tmp.c_str(), 0755) != 0) return ErrnoStatus(w.tmp, "cannot create");
  if (auto s = w.PutTensors("model.safetensors", data.model); !s.ok()) return s;
  if (!data.optimizer.empty()) {
    if (auto s = w.PutTensors("optimizer.safetensors", data.optimizer); !s.ok()) return s;
  }
  for (const auto& [name, tensors] : data.tensor_files) {
    if (auto s = w.PutTensors(name, tensors); !s.ok()) return s;
  }
  for (const auto& [name, blob] : data.json_files) {
    if (auto s = w.PutText(name, blob.dump(2) + "\n"); !s.ok()) return s;
  }
  json meta = {
      {"format", kCheckpointFormat},   {"version", kCheckpointVersion},   {"step", data.step},
      {"world_size", data.world_size}, {"config_hash", data.config_hash}, {"anomaly", data.anomaly},
      {"extra", data.meta_extra}};
  if (auto s = w.PutText(run_dir::kCheckpointMeta, meta.dump(2) + "\n"); !s.ok()) return s;
  json manifest = {{"format", kManifestFormat},
                   {"version", kCheckpointVersion},
                   {"step", data.step},
                   {"files", w.files}};
  if (auto s = w.PutText(run_dir::kCheckpointManifest, manifest.dump(2) + "\n"); !s.ok()) return s;
  if (options.fsync) {
    if (auto s = FsyncDir(w.tmp); !s.ok()) return s;
  }
  if (::rename(w.tmp.c_str(), final_path.c_str()) != 0) {
    return ErrnoStatus(final_path, "cannot rename the temporary directory to");
  }
  if (options.fsync) {
    if (auto s = FsyncDir(dir); !s.ok()) return s;
  }
  return final_path;
}

bool LooksLikeCheckpoint(const std::string& path, Os* os) {
  if (!os->IsDirectory(path)) return false;
  bool tmp;
  if (StepFromName(fs::path(path).filename().string(), &tmp) >= 0) return true;
  for (const char* f : {run_dir::kCheckpointMeta, run_dir::kCheckpointManifest}) {
    auto j = ReadJsonFile(absl::StrCat(path, "/", f), os);
    if (j.ok() && j->is_object()) {
      const std::string fmt = StringMember(*j, "format");
      if (fmt == kCheckpointFormat || fmt == kManifestFormat) return true;
    }
  }
  return false;
}

CheckResult CheckCheckpoint(const std::string& path, bool hash,
                            const std::function<void(uint64_t)>& on_bytes, Os* os) {
  CheckResult r;
  r.path = path;
  bool tmp = false;
  r.step = StepFromName(fs::path(path).filename().string(), &tmp);
  auto problem = [&](const std::string& file, std::string what) {
    r.problems.push_back({file, std::move(what)});
  };
  const std::string meta_path = absl::StrCat(path, "/", run_dir::kCheckpointMeta);
  auto meta = ReadJsonFile(meta_path, os);
  if (meta.ok() && meta->is_object()) {
    if (meta->contains("step") && (*meta)["step"].is_number_integer()) r.step = (*meta)["step"];
    auto anomaly = meta->find("anomaly");
    r.anomaly = anomaly != meta->end() && anomaly->is_boolean() && anomaly->get<bool>();
  }
  const std::string mpath = absl::StrCat(path, "/", run_dir::kCheckpointManifest);
  if (tmp || !os->FileExists(mpath)) {
    r.incomplete = true;
    problem(tmp ? path : mpath,
            tmp ? "incomplete: a save in progress or interrupted (temporary directory)"
                : "incomplete: no manifest.json (the save did not finish)");
    return r;
  }
  auto manifest = ReadJsonFile(mpath, os);
  if (!manifest.ok()) {
    problem(mpath, "corrupt: the manifest is not valid JSON");
    return r;
  }
  const json& m = *manifest;
  if (!m.is_object() || StringMember(m, "format") != kManifestFormat || !m.contains("files") ||
      !m["files"].is_array()) {
    problem(mpath, absl::StrCat("corrupt: not a manifest of format ", kManifestFormat));
    return r;
  }
  r.complete = true;
  for (const json& f : m["files"]) {
    if (!f.is_object() || !f.contains("path") || !f["path"].is_string() || !f.contains("bytes") ||
        !f["bytes"].is_number_unsigned() || !f.contains("xxh3") || !f["xxh3"].is_string()) {
      problem(mpath, "corrupt: a manifest entry lacks path, bytes or xxh3");
      r.complete = false;
      continue;
    }
    const std::string name = f["path"], file = path + "/" + name;
    if (name.find('/') != std::string::npos || name.empty() || name[0] == '.') {
      problem(mpath, absl::StrCat("corrupt: manifest names a file outside the checkpoint: ", name));
      r.complete = false;
      continue;
    }
    const uint64_t want = f["bytes"];
    absl::StatusOr<uint64_t> size = os->FileSize(file);
    if (!size.ok()) {
      problem(file, "missing: listed in the manifest but absent");
      r.complete = false;
      continue;
    }
    if (*size != want) {
      problem(file, absl::StrCat(*size < want ? "truncated" : "wrong size", ": ", *size,
                                 " bytes, the manifest says ", want));
      r.complete = false;
      continue;
    }
    if (hash) {
      auto h = HashFile(file, on_bytes, os);
      if (!h.ok()) {
        problem(file, std::string(h.status().message()));
        continue;
      }
      if (*h != f["xxh3"].get<std::string>()) {
        std::vector<Problem> where = LocateDamage(file, f, os);
        if (where.empty()) {
          problem(file, absl::StrCat("hash mismatch: xxh3 ", *h, ", the manifest says ",
                                     f["xxh3"].get<std::string>(),
                                     absl::EndsWith(name, ".safetensors") && !f.contains("tensors")
                                         ? " (this manifest has no per-tensor hashes: the "
                                           "damaged tensor cannot be named)"
                                         : ""));
        }
        for (Problem& p : where) r.problems.push_back(std::move(p));
        continue;
      }
    }
    // A hash matches the bytes the writer wrote, not that they are what resume can read.
    if (absl::EndsWith(name, ".json") && name != run_dir::kCheckpointMeta &&
        name != run_dir::kCheckpointManifest) {
      if (std::string why = JsonFileProblem(file, name, os); !why.empty()) problem(file, why);
    }
  }
  if (std::string why = MetaProblem(meta); !why.empty()) problem(meta_path, why);
  return r;
}

std::vector<std::string> ListCheckpointDirs(const std::string& dir, Os* os) {
  std::vector<std::pair<int64_t, std::string>> found;
  absl::StatusOr<std::vector<std::string>> names = os->ListDir(dir);
  for (const std::string& name : names.ok() ? *names : std::vector<std::string>()) {
    bool tmp;
    const int64_t step = StepFromName(name, &tmp);
    // The path as std::filesystem joins it ("dir/" + name gives no double slash).
    const std::string path = (fs::path(dir) / name).string();
    if (step >= 0 && os->IsDirectory(path)) found.push_back({step, path});
  }
  // Newest first; at equal steps the final name before a temporary one.
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
}

absl::StatusOr<Latest> FindLatestComplete(const std::string& run_dir, bool hash, Os* os) {
  if (!os->IsDirectory(run_dir)) {
    return absl::NotFoundError(absl::StrCat(run_dir, ": no such directory"));
  }
  std::string dir = run_dir;
  const std::string checkpoints = absl::StrCat(run_dir, "/", run_dir::kCheckpoints);
  if (os->IsDirectory(checkpoints)) dir = checkpoints;
  Latest latest;
  for (const std::string& p : ListCheckpointDirs(dir, os)) {
    // Anomaly checkpoints (a loss spike, or the last good state before a non-finite step)
    // are kept for inspection, never resumed from by "latest": the run they belong to went
    // wrong right after them. Skipped by name before any hashing, and by meta.json for
    // checkpoints written under a step-<N> name.
    if (absl::StartsWith(fs::path(p).filename().string(), kAnomalyPrefix)) continue;
    CheckResult c = CheckCheckpoint(p, hash, {}, os);
    if (c.anomaly) continue;
    if (c.ok()) {
      latest.path = p;
      latest.step = c.step;
      break;
    }
    if (c.problems.empty()) {
      latest.skipped.push_back({p, "not complete"});
      continue;
    }
    const Problem& first = c.problems[0];
    const std::string inside =
        absl::StartsWith(first.file, p + "/") ? first.file.substr(p.size() + 1) : std::string();
    latest.skipped.push_back(
        {p, inside.empty() ? first.problem : absl::StrCat(inside, ": ", first.problem),
         first.tensor});
  }
  return latest;
}

absl::StatusOr<std::vector<TensorData>> ReadSafetensors(const std::string& path, Os* os) {
  auto header = ReadHeader(path, os);
  if (!header.ok()) return header.status();
  auto f = File::Open(path, os);
  if (!f.ok()) return f.status();
  std::vector<TensorData> out;
  out.reserve(header->tensors.size());
  for (const TensorEntry& e : header->tensors) {
    TensorData t;
    t.entry = e;
    t.bytes.resize(e.bytes());
    if (auto s = f->ReadAt(e.begin, e.bytes(), t.bytes.data()); !s.ok()) return s;
    out.push_back(std::move(t));
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> Prune(const std::string& dir, int keep) {
  std::vector<std::string> removed;
  if (keep <= 0) return removed;
  int kept = 0;
  for (const std::string& p : ListCheckpointDirs(dir)) {
    CheckResult c = CheckCheckpoint(p, /*hash=*/false);
    if (!c.complete || c.anomaly) continue;
    if (kept < keep) {
      ++kept;
      continue;
    }
    // Renamed out of the step-<N> namespace first: a kill during remove_all would otherwise
    // leave a step-<N> without its manifest, which reads as a damaged checkpoint.
    std::error_code ec;
    const std::string doomed = absl::StrCat(p, ".deleting-", ::getpid());
    if (::rename(p.c_str(), doomed.c_str()) != 0)
      return ErrnoStatus(p, "cannot rename for removal");
    fs::remove_all(doomed, ec);
    if (ec)
      return absl::InvalidArgumentError(absl::StrCat(doomed, ": cannot remove: ", ec.message()));
    removed.push_back(p);
  }
  // Leftovers of removals a kill interrupted.
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    bool tmp = false;
    int pid = 0;
    const size_t at = name.find(run_dir::kCheckpointTmpInfix);
    // A temporary directory of a writer that is gone (killed mid-save).
    const bool dead_writer =
        StepFromName(name, &tmp) >= 0 && tmp &&
        absl::SimpleAtoi(name.substr(at + sizeof(run_dir::kCheckpointTmpInfix) - 1), &pid) &&
        pid > 0 && pid != ::getpid() && ::kill(pid, 0) != 0 && errno == ESRCH;
    if (dead_writer || (absl::StartsWith(name, run_dir::kCheckpointStepPrefix) &&
                        absl::StrContains(name, ".deleting-"))) {
      std::error_code ec2;
      fs::remove_all(it->path(), ec2);
    }
  }
  return removed;
}

}  // namespace trainscope::ckpt
