// Accelerator, toolkit and framework probes.
#include <cctype>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "env/json_doc.h"
#include "env/parsers.h"
#include "env/probes.h"
#include "trainscope/core/env_vars.h"
#include "trainscope/topo/topo.h"

namespace trainscope::env {

using nlohmann::json;

namespace {

const char* ArchDir() {
#if defined(__aarch64__)
  return "aarch64-linux";
#else
  return "x86_64-linux";
#endif
}

// Reads the first of `paths` that exists. Returns false when none does.
bool ReadFirst(Os* os, const std::vector<std::string>& paths, std::string* text,
               std::string* found) {
  for (const std::string& p : paths) {
    absl::StatusOr<std::string> s = os->ReadFile(p);
    if (s.ok()) {
      *text = std::move(*s);
      *found = p;
      return true;
    }
  }
  return false;
}

std::string EnvOr(Os* os, const char* name, const std::string& fallback) {
  std::string v;
  return os->GetEnv(name, &v) && !v.empty() ? v : fallback;
}

// The highest "libNAME.so.X.Y.Z" in `dirs`, as "X.Y.Z"; "" when none.
std::string LibraryVersion(Os* os, const std::vector<std::string>& dirs, const std::string& lib) {
  std::string best;
  std::string prefix = "lib" + lib + ".so.";
  for (const std::string& d : dirs) {
    absl::StatusOr<std::vector<std::string>> names = os->ListDir(d);
    if (!names.ok()) continue;
    for (const std::string& n : *names) {
      if (!absl::StartsWith(n, prefix)) continue;
      std::string v = n.substr(prefix.size());
      if (std::count(v.begin(), v.end(), '.') >= 1 && v.size() > best.size()) best = v;
    }
  }
  return best;
}

// Version of an installed Debian package from the dpkg database; "" when not installed.
std::string DpkgVersion(Os* os, const std::string& package) {
  absl::StatusOr<std::string> status = os->ReadFile("/var/lib/dpkg/status");
  if (!status.ok()) return "";
  std::string needle = "Package: " + package + "\n";
  size_t pos = 0;
  while ((pos = status->find(needle, pos)) != std::string::npos) {
    if (pos == 0 || (*status)[pos - 1] == '\n') {
      size_t end = status->find("\n\n", pos);
      absl::string_view stanza(status->data() + pos,
                               (end == std::string::npos ? status->size() : end) - pos);
      if (!absl::StrContains(stanza, "Status: install ok installed")) return "";
      size_t v = stanza.find("\nVersion: ");
      if (v == absl::string_view::npos) return "";
      absl::string_view rest = stanza.substr(v + 10);
      return std::string(rest.substr(0, rest.find('\n')));
    }
    pos += needle.size();
  }
  return "";
}

json CudaToolkit(Os* os, const std::string& home, std::chrono::milliseconds timeout) {
  absl::StatusOr<std::string> vj = os->ReadFile(home + "/version.json");
  if (vj.ok()) {
    absl::StatusOr<json> j = ParseJsonText(*vj, home + "/version.json");
    if (j.ok() && j->contains("cuda") && (*j)["cuda"].contains("version")) {
      return (*j)["cuda"]["version"];
    }
  }
  absl::StatusOr<std::string> vt = os->ReadFile(home + "/version.txt");
  if (vt.ok()) {  // "CUDA Version 10.2.89"
    std::vector<std::string> t = absl::StrSplit(*vt, absl::ByAnyChar(" \n"), absl::SkipEmpty());
    if (t.size() >= 3) return t[2];
  }
  absl::StatusOr<std::string> h = os->ReadFile(home + "/include/cuda.h");
  if (h.ok()) {  // #define CUDA_VERSION 12040
    auto d = ParseDefines(*h, {"CUDA_VERSION"});
    int v;
    if (d.count("CUDA_VERSION") && absl::SimpleAtoi(d["CUDA_VERSION"], &v)) {
      return absl::StrCat(v / 1000, ".", (v % 1000) / 10);
    }
  }
  std::string out;
  json failure;
  if (!RunTool(os, {home + "/bin/nvcc", "--version"}, timeout, &out, &failure)) return failure;
  // "Cuda compilation tools, release 12.4, V12.4.131"
  size_t v = out.find(", V");
  if (v != std::string::npos) {
    absl::string_view rest = absl::string_view(out).substr(v + 3);
    return std::string(rest.substr(0, rest.find_first_of(" \n")));
  }
  return ProbeError("nvcc --version: no version in its output");
}

}  // namespace

json ProbeTopology(Os* os, const std::vector<std::string>& argv,
                   std::chrono::milliseconds timeout) {
  std::string out;
  json failure;
  if (!RunTool(os, argv, timeout, &out, &failure)) return failure;
  const std::string source = absl::StrJoin(argv, " ");
  json t;
  t["source"] = source;
  t["raw"] = out;
  absl::StatusOr<topo::Topology> parsed = topo::ParseTopology(out, source);
  if (parsed.ok()) {
    t["summary"] = topo::TopologySummary(*parsed, topo::BandwidthModel());
  } else {
    t["error"] = std::string(parsed.status().message());
  }
  return t;
}

json ProbeNvidia(Os* os, std::chrono::milliseconds timeout) {
  std::string out;
  json failure;
  if (RunTool(os, {"nvidia-smi", "-q", "-x"}, timeout, &out, &failure)) {
    absl::StatusOr<json> parsed = ParseNvidiaSmiXml(out);
    if (!parsed.ok())
      return ProbeError(absl::StrCat("nvidia-smi -q -x: ", parsed.status().message()));
    (*parsed)["source"] = "nvidia-smi";
    (*parsed)["topology"] = ProbeTopology(os, {"nvidia-smi", "topo", "-m"}, timeout);
    return *parsed;
  }
  // No usable nvidia-smi: the kernel module still tells the driver version.
  absl::StatusOr<std::string> proc = os->ReadFile("/proc/driver/nvidia/version");
  if (!proc.ok()) return failure;  // "absent", or nvidia-smi's error
  json n;
  std::string v = ParseNvidiaProcVersion(*proc);
  n["source"] = "/proc/driver/nvidia/version";
  n["driver_version"] =
      v.empty() ? json(ProbeError("no version in /proc/driver/nvidia/version")) : json(v);
  n["cuda_driver_version"] = kAbsent;
  n["gpu_count"] = failure;
  n["gpus"] = failure;
  n["nvidia_smi"] = failure;
  return n;
}

json ProbeAscend(Os* os, std::chrono::milliseconds timeout) {
  const std::string root = "/usr/local/Ascend";
  auto version_info = [&](const std::string& path) -> json {
    absl::StatusOr<std::string> s = os->ReadFile(path);
    if (!s.ok())
      return absl::IsNotFound(s.status()) ? json(kAbsent)
                                          : json(ProbeError(std::string(s.status().message())));
    auto kv = ParseKeyValues(*s);
    if (kv.count("version")) return kv["version"];
    return ProbeError(path + ": no Version= line");
  };
  json driver = version_info(root + "/driver/version.info");
  json firmware = version_info(root + "/firmware/version.info");
  std::string out;
  json failure;
  bool ran = RunTool(os, {"npu-smi", "info"}, timeout, &out, &failure);
  if (!ran && failure == kAbsent && driver == kAbsent && firmware == kAbsent) return kAbsent;
  json a;
  a["driver_version"] = driver;
  a["firmware_version"] = firmware;
  if (!ran) {
    a["npu_smi_version"] = failure;
    a["npu_count"] = failure;
    a["npus"] = failure;
    return a;
  }
  absl::StatusOr<json> parsed = ParseNpuSmiInfo(out);
  if (!parsed.ok()) {
    json e = ProbeError(absl::StrCat("npu-smi info: ", parsed.status().message()));
    a["npu_smi_version"] = e;
    a["npu_count"] = e;
    a["npus"] = e;
    return a;
  }
  a["npu_smi_version"] = (*parsed)["npu_smi_version"];
  // npu-smi's "Version:" is the driver version; version.info is preferred when present.
  if (driver == kAbsent) a["driver_version"] = (*parsed)["driver_version"];
  a["npu_count"] = static_cast<int>((*parsed)["npus"].size());
  a["npus"] = (*parsed)["npus"];
  // Lines of npu-smi info outside its table, and NPU rows cut off before their chip row.
  json info_errors = json::array();
  for (const json& l : (*parsed)["skipped_lines"])
    info_errors.push_back("npu-smi info: skipped " + l.get<std::string>());
  if (int n = (*parsed)["incomplete_npu_rows"].get<int>(); n > 0)
    info_errors.push_back(absl::StrCat("npu-smi info: ", n, " NPU rows without a chip row"));
  if (!info_errors.empty()) a["npu_smi_errors"] = info_errors;
  ProbeNpuSmiDetails(os, timeout, &a);
  a["topology"] = ProbeTopology(os, {"npu-smi", "info", "-t", "topo"}, timeout);
  return a;
}

json ProbeToolkits(Os* os, std::chrono::milliseconds timeout) {
  json t;
  const std::string cuda =
      EnvOr(os, envvar::kCudaHome, EnvOr(os, envvar::kCudaPath, "/usr/local/cuda"));
  const std::string multiarch = std::string(ArchDir()).substr(0, std::string(ArchDir()).find('-'));
  const std::string lib_multi = "/usr/lib/" + multiarch + "-linux-gnu";
  if (os->FileExists(cuda)) {
    t["cuda_toolkit"] = CudaToolkit(os, cuda, timeout);
    t["cuda_toolkit_path"] = cuda;
  } else {
    t["cuda_toolkit"] = kAbsent;
    t["cuda_toolkit_path"] = kAbsent;
  }
  std::vector<std::string> include_dirs = {cuda + "/include", "/usr/include",
                                           "/usr/include/" + multiarch + "-linux-gnu",
                                           "/usr/local/include"};
  std::vector<std::string> lib_dirs = {cuda + "/lib64", cuda + "/lib",    lib_multi,
                                       "/usr/lib64",    "/usr/local/lib", "/usr/local/nccl/lib"};
  auto from_headers = [&](const std::vector<std::string>& files, const char* maj, const char* min,
                          const char* patch) -> std::string {
    for (const std::string& dir : include_dirs) {
      for (const std::string& f : files) {
        absl::StatusOr<std::string> h = os->ReadFile(dir + "/" + f);
        if (!h.ok()) continue;
        auto d = ParseDefines(*h, {maj, min, patch});
        if (d.count(maj) && d.count(min)) {
          return absl::StrCat(d[maj], ".", d[min], d.count(patch) ? "." + d[patch] : "");
        }
      }
    }
    return "";
  };
  std::string cudnn = from_headers({"cudnn_version.h", "cudnn.h"}, "CUDNN_MAJOR", "CUDNN_MINOR",
                                   "CUDNN_PATCHLEVEL");
  if (cudnn.empty()) cudnn = LibraryVersion(os, lib_dirs, "cudnn");
  t["cudnn"] = cudnn.empty() ? json(kAbsent) : json(cudnn);
  std::string nccl = from_headers({"nccl.h"}, "NCCL_MAJOR", "NCCL_MINOR", "NCCL_PATCH");
  if (nccl.empty()) nccl = LibraryVersion(os, lib_dirs, "nccl");
  t["nccl"] = nccl.empty() ? json(kAbsent) : json(nccl);
  // MPI: Open MPI's mpi.h carries OMPI_*_VERSION; MPICH's MPICH_VERSION.
  std::string mpi;
  for (const std::string& p :
       {lib_multi + "/openmpi/include/mpi.h", std::string("/usr/include/mpi.h"),
        lib_multi + "/mpich/include/mpi.h", std::string("/usr/local/include/mpi.h")}) {
    absl::StatusOr<std::string> h = os->ReadFile(p);
    if (!h.ok()) continue;
    auto d = ParseDefines(
        *h, {"OMPI_MAJOR_VERSION", "OMPI_MINOR_VERSION", "OMPI_RELEASE_VERSION", "MPICH_VERSION"});
    if (d.count("OMPI_MAJOR_VERSION")) {
      mpi = absl::StrCat("Open MPI ", d["OMPI_MAJOR_VERSION"], ".", d["OMPI_MINOR_VERSION"], ".",
                         d["OMPI_RELEASE_VERSION"]);
    } else if (d.count("MPICH_VERSION")) {
      mpi = "MPICH " + d["MPICH_VERSION"];
    }
    if (!mpi.empty()) break;
  }
  if (mpi.empty()) {
    std::string out;
    json failure;
    if (RunTool(os, {"mpirun", "--version"}, timeout, &out, &failure)) {
      mpi = std::string(absl::StripAsciiWhitespace(out.substr(0, out.find('\n'))));
    } else {
      t["mpi"] = failure;
    }
  }
  if (!mpi.empty()) t["mpi"] = mpi;
  std::string gloo = DpkgVersion(os, "libgloo-dev");
  t["gloo"] = gloo.empty() ? json(kAbsent) : json(gloo);
  t["libtorch"] = kBuiltWithLibtorch[0] ? json(std::string(kBuiltWithLibtorch)) : json(kAbsent);
  // CANN: ascend_toolkit_install.info under $ASCEND_HOME_PATH or the default roots;
  // version.cfg's *_running_version as a fallback.
  std::vector<std::string> homes;
  for (const char* var : {envvar::kAscendHomePath, envvar::kAscendToolkitHome}) {
    std::string v = EnvOr(os, var, "");
    if (!v.empty()) homes.push_back(v);
  }
  homes.push_back("/usr/local/Ascend/ascend-toolkit/latest");
  homes.push_back("/usr/local/Ascend/cann");
  t["cann"] = kAbsent;
  t["cann_path"] = kAbsent;
  for (const std::string& h : homes) {
    std::string text, found;
    if (ReadFirst(os,
                  {h + "/" + ArchDir() + "/ascend_toolkit_install.info",
                   h + "/ascend_toolkit_install.info"},
                  &text, &found)) {
      auto kv = ParseKeyValues(text);
      if (kv.count("version")) {
        t["cann"] = kv["version"];
        t["cann_path"] = found;
        break;
      }
    }
    absl::StatusOr<std::string> cfg = os->ReadFile(h + "/version.cfg");
    if (cfg.ok()) {
      std::string v = ParseCannVersionCfg(*cfg);
      if (!v.empty()) {
        t["cann"] = v;
        t["cann_path"] = h + "/version.cfg";
        break;
      }
    }
  }
  return t;
}

// Asks the interpreter in two stages, each printed as one JSON line. Stage 1 reads
// versions without importing torch (executing torch/version.py, package metadata), so it
// answers in tens of milliseconds; stage 2 imports torch and torch_npu for the cuDNN/NCCL
// versions, the distributed backends and whether torch_npu imports at all (importing torch
// takes about a second, more on a loaded machine). If the time limit cuts stage 2 off, the
// stage 1 answers stay. The script never raises: each field is a value, "absent" or
// "error: ...".
static const char kPythonScript[] = R"PY(
import json, os, sys
r = {"executable": sys.executable, "python_version": "%d.%d.%d" % tuple(sys.version_info[:3])}
def err(e):
    return ("error: %s: %s" % (type(e).__name__, e)).splitlines()[0][:200]
def spec(name):
    try:
        import importlib.util
        return importlib.util.find_spec(name)
    except Exception:
        return None
def version_py(s):
    try:
        d = {}
        path = os.path.join(list(s.submodule_search_locations)[0], "version.py")
        with open(path) as f:
            exec(compile(f.read(), path, "exec"), d)
        return d
    except Exception:
        return {}
def dist_version(name):
    try:
        import importlib.metadata
        return importlib.metadata.version(name)
    except Exception:
        return None
ts, ns = spec("torch"), spec("torch_npu")
if ts is None:
    r["torch"] = "absent"
else:
    v = version_py(ts)
    r["torch"] = v.get("__version__") or dist_version("torch") or "error: no version"
    r["torch_cuda"] = v.get("cuda") or "absent"
r["torch_npu"] = "absent" if ns is None else (version_py(ns).get("__version__") or dist_version("torch_npu") or "error: no version")
print(json.dumps(r), flush=True)
if ts is not None:
    try:
        import torch
        r["torch"] = torch.__version__
        r["torch_cuda"] = torch.version.cuda or "absent"
        try:
            r["torch_cudnn"] = str(torch.backends.cudnn.version()) if torch.backends.cudnn.is_available() else "absent"
        except Exception as e:
            r["torch_cudnn"] = err(e)
        try:
            if torch.version.cuda:
                v = torch.cuda.nccl.version()
                if isinstance(v, int):
                    v = (v // 10000, v % 10000 // 100, v % 100) if v >= 10000 else (v // 1000, v % 1000 // 100, v % 100)
                r["torch_nccl"] = ".".join(str(x) for x in v)
            else:
                r["torch_nccl"] = "absent"
        except Exception as e:
            r["torch_nccl"] = err(e)
        try:
            import torch.distributed as d
            b = []
            if d.is_available():
                for n in ("gloo", "nccl", "mpi"):
                    f = getattr(d, "is_%s_available" % n, None)
                    if f is not None and f():
                        b.append(n)
            r["distributed_backends"] = ",".join(b) if b else "absent"
        except Exception as e:
            r["distributed_backends"] = err(e)
    except Exception as e:
        r["torch"] = err(e)
    if ns is not None:
        try:
            import torch_npu
            r["torch_npu"] = torch_npu.__version__
        except Exception as e:
            r["torch_npu"] = err(e)
else:
    for k in ("torch_cuda", "torch_cudnn", "torch_nccl", "distributed_backends"):
        r[k] = "absent"
r["complete"] = True
print(json.dumps(r), flush=True)
)PY";

json ProbePython(Os* os, const std::string& python, std::chrono::milliseconds timeout) {
  json p;
  p["python"] = python;
  static const char* kFields[] = {"executable",           "python_version", "torch",
                                  "torch_cuda",           "torch_cudnn",    "torch_nccl",
                                  "distributed_backends", "torch_npu"};
  RunOptions ro;
  ro.timeout = timeout;
  ro.kill_grace = std::chrono::milliseconds(200);
  absl::StatusOr<RunResult> run = os->Run({python, "-c", kPythonScript}, ro);
  auto fail = [&](const json& why) {
    p["status"] = why;
    for (const char* f : kFields) p[f] = why;
    return p;
  };
  if (!run.ok()) {
    return fail(absl::IsNotFound(run.status())
                    ? json(kAbsent)
                    : json(ProbeError(std::string(run.status().message()))));
  }
  // The last complete JSON line is the most informative (site hooks may print before it).
  json record;
  for (absl::string_view line : absl::StrSplit(run->out, '\n', absl::SkipWhitespace())) {
    absl::StatusOr<json> j = ParseJsonText(absl::StripAsciiWhitespace(line), python);
    if (j.ok() && j->is_object() && j->contains("python_version")) record = std::move(*j);
  }
  if (record.is_null()) {
    if (run->timed_out) {
      return fail(ProbeError(absl::StrCat(python, " timed out after ", timeout.count(), " ms")));
    }
    std::string msg(absl::StripAsciiWhitespace(run->err.empty() ? run->out : run->err));
    return fail(ProbeError(
        absl::StrCat(python, " printed no version record", msg.empty() ? "" : ": ", msg)));
  }
  const bool complete = record.value("complete", false);
  std::string cut;
  if (run->timed_out) {
    cut = ProbeError(absl::StrCat("importing torch took longer than ", timeout.count(), " ms"));
  } else {
    std::string last(absl::StripAsciiWhitespace(run->err));
    size_t nl = last.rfind('\n');
    if (nl != std::string::npos) last = last.substr(nl + 1);
    cut =
        ProbeError(absl::StrCat(python,
                                run->exited ? absl::StrCat(" exited ", run->exit_code)
                                            : absl::StrCat(" killed by signal ", run->term_signal),
                                " while importing torch", last.empty() ? "" : ": ", last));
  }
  p["status"] = "ok";
  for (const char* f : kFields) {
    auto it = record.find(f);
    if (it != record.end() && it->is_string()) {
      p[f] = *it;
    } else {
      p[f] = complete ? json(kAbsent) : json(cut);
    }
  }
  return p;
}

}  // namespace trainscope::env
