// Corpus inputs: files, directories (walked), glob patterns and Megatron dataset prefixes
// expanded into the list of InputFile the reader reads, each with its format and
// compression from its name; and the check that no output overwrites an input.
#include <glob.h>
#include <sys/stat.h>

#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "trainscope/core/os.h"
#include "trainscope/core/paths.h"
#include "trainscope/core/status.h"
#include "trainscope/data/megatron.h"
#include "trainscope/data/reader.h"

namespace trainscope::data {

namespace {

bool IsDir(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

absl::Status AddFile(const std::string& path, InputFormat forced, const std::string& root,
                     std::vector<InputFile>* out) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat(path, ": no such file"));
  }
  // Pipes are read as streams (<(zcat ...)); a device would be read without end.
  if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) || S_ISSOCK(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a regular file (",
                                                   std::string(FileTypeName(st.st_mode)),
                                                   "): corpora are read from files or pipes"));
  }
  InputFile f;
  f.path = path;
  f.root = root;
  f.size_bytes = st.st_size;
  std::string name = path;
  if (absl::EndsWith(name, ".zst") || absl::EndsWith(name, ".zstd")) {
    f.compression = InputFile::kZstd;
    name = name.substr(0, name.rfind('.'));
  } else if (absl::EndsWith(name, ".gz")) {
    f.compression = InputFile::kGzip;
    name = name.substr(0, name.size() - 3);
  }
  if (forced != InputFormat::kAuto) {
    f.format = forced;
  } else if (absl::EndsWith(name, ".jsonl") || absl::EndsWith(name, ".json") ||
             absl::EndsWith(name, ".ndjson")) {
    f.format = InputFormat::kJsonl;
  } else if (absl::EndsWith(name, ".idx") || absl::EndsWith(name, ".bin")) {
    f.format = InputFormat::kMegatron;
  } else {
    f.format = InputFormat::kText;
  }
  if (f.format == InputFormat::kMegatron) {
    // A dataset is one input however it is named (.bin, .idx or the prefix).
    f.path = MegatronPrefix(path) + ".idx";
    struct stat bs;
    if (stat((MegatronPrefix(path) + ".bin").c_str(), &bs) == 0) f.size_bytes = bs.st_size;
    for (const auto& e : *out) {
      if (e.path == f.path) return absl::OkStatus();
    }
  }
  out->push_back(std::move(f));
  return absl::OkStatus();
}

// `root`: the directory argument the walk started from.
absl::Status AddDir(const std::string& dir, InputFormat forced, const std::string& root,
                    std::vector<InputFile>* out) {
  TS_ASSIGN_OR_RETURN(auto names, Os::Default()->ListDir(dir));
  for (const auto& n : names) {
    if (n.empty() || n[0] == '.') continue;
    std::string p = absl::StrCat(dir, "/", n);
    if (IsDir(p)) {
      TS_RETURN_IF_ERROR(AddDir(p, forced, root, out));
    } else {
      TS_RETURN_IF_ERROR(AddFile(p, forced, root, out));
    }
  }
  return absl::OkStatus();
}

// A Megatron dataset named by its prefix (docs/formats.md): no file of that name, but
// PREFIX.idx or PREFIX.bin exists (a missing half is reported when the dataset is read).
bool IsMegatronPrefix(const std::string& a, InputFormat format) {
  if (format != InputFormat::kAuto && format != InputFormat::kMegatron) return false;
  Os* os = Os::Default();
  if (os->FileExists(a)) return false;
  return os->FileExists(a + ".idx") || os->FileExists(a + ".bin");
}

}  // namespace

absl::StatusOr<std::vector<InputFile>> ExpandInputs(const std::vector<std::string>& args,
                                                    InputFormat format) {
  std::vector<InputFile> out;
  for (const auto& a : args) {
    if (a.find_first_of("*?[") != std::string::npos && !Os::Default()->FileExists(a)) {
      glob_t g;
      int rc = glob(a.c_str(), 0, nullptr, &g);
      if (rc != 0) {
        globfree(&g);
        return absl::NotFoundError(absl::StrCat(a, ": no file matches this pattern"));
      }
      std::vector<std::string> paths(g.gl_pathv, g.gl_pathv + g.gl_pathc);
      globfree(&g);
      for (const auto& p : paths) {
        TS_RETURN_IF_ERROR(IsDir(p) ? AddDir(p, format, p, &out) : AddFile(p, format, "", &out));
      }
    } else if (IsDir(a)) {
      TS_RETURN_IF_ERROR(AddDir(a, format, a, &out));
    } else if (IsMegatronPrefix(a, format)) {
      TS_RETURN_IF_ERROR(AddFile(a + ".idx", InputFormat::kMegatron, "", &out));
    } else {
      TS_RETURN_IF_ERROR(AddFile(a, format, "", &out));
    }
  }
  if (out.empty()) return absl::InvalidArgumentError("no input files");
  return out;
}

absl::Status CheckOutputsAgainstInputs(const std::vector<std::string>& outputs,
                                       const std::vector<InputFile>& inputs) {
  for (const std::string& o : outputs) TS_RETURN_IF_ERROR(CheckOutputFile(o));
  std::vector<std::string> paths;
  std::set<std::string> roots;
  for (const InputFile& in : inputs) {
    if (in.format == InputFormat::kMegatron) {
      const std::string prefix = MegatronPrefix(in.path);
      paths.push_back(prefix + ".idx");
      paths.push_back(prefix + ".bin");
    } else {
      paths.push_back(in.path);
    }
    if (!in.root.empty()) roots.insert(in.root);
  }
  paths.insert(paths.end(), roots.begin(), roots.end());
  return CheckOutputNotInput(outputs, paths);
}

std::string DocLocation(const std::vector<InputFile>& inputs, const DocRef& doc) {
  const std::string& p = doc.file < inputs.size() ? inputs[doc.file].path : std::string("?");
  return absl::StrCat(p, ":", doc.line);
}

}  // namespace trainscope::data
