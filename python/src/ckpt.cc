// Checkpoint primitives for trainscope.checkpoint (python/trainscope): the same atomic,
// hashed step-<N> folders as the trainer's checkpoints (include/trainscope/ckpt/checkpoint.h,
// docs/formats.md "Checkpoint"), so `trainscope ckpt verify` and resume accept them.
// Tensors come in through the buffer protocol (numpy arrays, memoryview, bytes): the
// writer reads the caller's memory in place, without the GIL.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "convert.h"
#include "trainscope/ckpt/checkpoint.h"
#include "trainscope/ckpt/safetensors.h"
#include "trainscope/core/json_text.h"
#include "trainscope/core/os.h"
#include "trainscope/core/run_dir.h"

namespace py = pybind11;

namespace trainscope::python {
namespace {

// A Py_buffer held for the duration of a call (released with the GIL held).
class HeldBuffer {
 public:
  HeldBuffer(const py::handle& obj, const std::string& what) {
    if (PyObject_GetBuffer(obj.ptr(), &view_, PyBUF_C_CONTIGUOUS) != 0) {
      PyErr_Clear();
      throw StatusError(absl::InvalidArgumentError(absl::StrCat(
          what,
          ": the data must support the buffer protocol and be C-contiguous (a numpy "
          "array, memoryview or bytes; for a torch tensor pass t.contiguous().numpy(), "
          "bfloat16 as t.view(torch.int16).numpy())")));
    }
    held_ = true;
  }
  ~HeldBuffer() {
    if (held_) PyBuffer_Release(&view_);
  }
  HeldBuffer(const HeldBuffer&) = delete;
  HeldBuffer& operator=(const HeldBuffer&) = delete;
  const void* data() const { return view_.buf; }
  uint64_t bytes() const { return static_cast<uint64_t>(view_.len); }

 private:
  Py_buffer view_{};
  bool held_ = false;
};

// torch/numpy dtype names -> safetensors names; safetensors names pass through.
std::string SafetensorsDType(std::string d) {
  static const std::map<std::string, std::string> kNames = {
      {"float64", "F64"}, {"double", "F64"}, {"float32", "F32"},   {"float", "F32"},
      {"float16", "F16"}, {"half", "F16"},   {"bfloat16", "BF16"}, {"int64", "I64"},
      {"long", "I64"},    {"int32", "I32"},  {"int", "I32"},       {"int16", "I16"},
      {"short", "I16"},   {"int8", "I8"},    {"uint8", "U8"},      {"bool", "BOOL"}};
  if (d.rfind("torch.", 0) == 0) d = d.substr(6);
  auto it = kNames.find(d);
  return it == kNames.end() ? d : it->second;
}

// (name, dtype, shape, buffer) tuples -> views into held buffers.
void CollectTensors(const py::handle& list, const char* part, std::vector<ckpt::TensorView>* views,
                    std::vector<std::unique_ptr<HeldBuffer>>* held) {
  if (list.is_none()) return;
  for (const py::handle& item : list) {
    py::tuple t;
    try {
      t = item.cast<py::tuple>();
    } catch (const py::cast_error&) {
      throw StatusError(absl::InvalidArgumentError(
          absl::StrCat(part, ": each tensor is a tuple (name, dtype, shape, buffer)")));
    }
    if (t.size() != 4) {
      throw StatusError(absl::InvalidArgumentError(
          absl::StrCat(part, ": each tensor is a tuple (name, dtype, shape, buffer), got ",
                       t.size(), " items")));
    }
    ckpt::TensorView v;
    try {
      v.name = t[0].cast<std::string>();
      v.dtype = SafetensorsDType(py::str(t[1]).cast<std::string>());
      for (const py::handle& d : t[2]) v.shape.push_back(d.cast<uint64_t>());
    } catch (const py::cast_error&) {
      throw StatusError(absl::InvalidArgumentError(absl::StrCat(
          part, ": tensor ", py::repr(t[0]).cast<std::string>(),
          ": name must be a str, dtype a str, shape a sequence of non-negative ints")));
    }
    held->push_back(std::make_unique<HeldBuffer>(t[3], absl::StrCat(part, ": tensor ", v.name)));
    v.data = held->back()->data();
    v.bytes = held->back()->bytes();
    views->push_back(std::move(v));
  }
}

std::string CkptWrite(const std::string& dir, int64_t step, const py::object& tensors,
                      const py::object& meta, const py::object& optimizer,
                      const py::object& json_files, int world_size, const std::string& config_hash,
                      bool anomaly, bool fsync) {
  ckpt::CheckpointData data;
  data.step = step;
  data.world_size = world_size;
  data.config_hash = config_hash;
  data.anomaly = anomaly;
  std::vector<std::unique_ptr<HeldBuffer>> held;
  CollectTensors(tensors, "model", &data.model, &held);
  CollectTensors(optimizer, "optimizer", &data.optimizer, &held);
  if (!meta.is_none()) data.meta_extra = FromPython(meta, "meta");
  if (!json_files.is_none()) {
    for (const auto& [k, v] : json_files.cast<py::dict>()) {
      const std::string name = py::str(k).cast<std::string>();
      data.json_files[name] = FromPython(v, name);
    }
  }
  ckpt::WriteOptions wo;
  wo.fsync = fsync;
  absl::StatusOr<std::string> path;
  {
    py::gil_scoped_release nogil;  // the buffers stay held (and unchanged: caller's contract)
    path = ckpt::WriteCheckpoint(dir, data, wo);
  }
  return ValueOrThrow(std::move(path));
}

// A checkpoint that is incomplete or fails its manifest (hashes included): DataLoss naming
// the first problem; ok otherwise.
absl::Status CheckReadable(const std::string& path) {
  ckpt::CheckResult c = ckpt::CheckCheckpoint(path, /*hash=*/true);
  if (c.ok()) return absl::OkStatus();
  std::string why = c.problems.empty()
                        ? "incomplete (no valid manifest)"
                        : c.problems.front().file + ": " + c.problems.front().problem;
  return absl::DataLossError(absl::StrCat(path, ": not a complete, intact checkpoint: ", why));
}

py::tuple CkptRead(const std::string& path, const std::string& part, bool verify) {
  if (part != "model" && part != "optimizer") {
    throw StatusError(absl::InvalidArgumentError(
        absl::StrCat("part '", part, "': expected 'model' or 'optimizer'")));
  }
  absl::Status check;
  absl::StatusOr<std::vector<ckpt::TensorData>> tensors;
  absl::StatusOr<std::string> meta_text;
  {
    py::gil_scoped_release nogil;
    if (verify) check = CheckReadable(path);
    if (!check.ok()) tensors = check;  // read nothing more
    const std::string file = absl::StrCat(path, "/", part, ".safetensors");
    if (check.ok())
      tensors =
          std::filesystem::exists(file) || part == "model"
              ? ckpt::ReadSafetensors(file)
              : absl::StatusOr<std::vector<ckpt::TensorData>>(std::vector<ckpt::TensorData>{});
    meta_text = Os::Default()->ReadFile(absl::StrCat(path, "/", run_dir::kCheckpointMeta));
  }
  ThrowIfError(check);
  std::vector<ckpt::TensorData> list = ValueOrThrow(std::move(tensors));
  nlohmann::json meta;
  if (!ParseJsonText(ValueOrThrow(std::move(meta_text)), kJsonMaxDepth, &meta, nullptr) ||
      !meta.is_object()) {
    throw StatusError(absl::DataLossError(
        absl::StrCat(path, "/", run_dir::kCheckpointMeta, ": not a JSON object")));
  }
  py::list out;
  for (ckpt::TensorData& t : list) {
    py::list shape;
    for (uint64_t d : t.entry.shape) shape.append(d);
    out.append(py::make_tuple(t.entry.name, t.entry.dtype, shape, py::bytes(t.bytes)));
    std::string().swap(t.bytes);  // free as we go
  }
  return py::make_tuple(out, ToPython(meta.value("extra", nlohmann::json::object())));
}

py::object CkptReadJson(const std::string& path, const std::string& name) {
  absl::StatusOr<std::string> text;
  {
    py::gil_scoped_release nogil;
    text = Os::Default()->ReadFile(absl::StrCat(path, "/", name));
  }
  // The shared policy (core/json_text.h): "PATH/NAME: not valid JSON at byte B: why".
  absl::StatusOr<nlohmann::json> j =
      ParseJsonText(ValueOrThrow(std::move(text)), kJsonMaxDepth, absl::StrCat(path, "/", name));
  if (!j.ok()) throw StatusError(absl::DataLossError(j.status().message()));
  return ToPython(*j);
}

std::vector<std::string> CkptPrune(const std::string& dir, int keep) {
  absl::StatusOr<std::vector<std::string>> removed;
  {
    py::gil_scoped_release nogil;
    removed = ckpt::Prune(dir, keep);
  }
  return ValueOrThrow(std::move(removed));
}

py::object CkptLatest(const std::string& dir, bool hash) {
  absl::StatusOr<ckpt::Latest> latest;
  {
    py::gil_scoped_release nogil;
    latest = ckpt::FindLatestComplete(dir, hash);
  }
  if (absl::IsNotFound(latest.status())) return py::none();  // no such folder yet
  ckpt::Latest l = ValueOrThrow(std::move(latest));
  if (l.path.empty()) return py::none();
  return py::str(l.path);
}

// FindLatestComplete with what it passed over: {"path": str or None, "step": int or None,
// "skipped": [{"path", "reason", "tensor"}, ...] newest first}.
py::dict CkptFindLatest(const std::string& dir, bool hash) {
  absl::StatusOr<ckpt::Latest> latest;
  {
    py::gil_scoped_release nogil;
    latest = ckpt::FindLatestComplete(dir, hash);
  }
  py::dict out;
  out["path"] = py::none();
  out["step"] = py::none();
  out["skipped"] = py::list();
  if (absl::IsNotFound(latest.status())) return out;  // no such folder yet
  ckpt::Latest l = ValueOrThrow(std::move(latest));
  py::list skipped;
  for (const ckpt::Problem& p : l.skipped) {
    py::dict s;
    s["path"] = p.file;
    s["reason"] = p.problem;
    s["tensor"] = p.tensor.empty() ? py::object(py::none()) : py::object(py::str(p.tensor));
    skipped.append(s);
  }
  out["skipped"] = skipped;
  if (!l.path.empty()) {
    out["path"] = l.path;
    out["step"] = l.step;
  }
  return out;
}

}  // namespace

void RegisterCheckpoint(py::module_& m) {
  m.def("ckpt_write", &CkptWrite, py::arg("dir"), py::arg("step"), py::arg("tensors"),
        py::arg("meta") = py::none(), py::kw_only(), py::arg("optimizer") = py::none(),
        py::arg("json_files") = py::none(), py::arg("world_size") = 1, py::arg("config_hash") = "",
        py::arg("anomaly") = false, py::arg("fsync") = true,
        "Writes <dir>/step-<step>/ atomically (temporary folder, fsync, hashed manifest.json "
        "last, rename) and returns its path. tensors (-> model.safetensors) and optimizer (-> "
        "optimizer.safetensors, omitted when None/empty): lists of (name, dtype, shape, "
        "buffer); dtype a safetensors name (F32, BF16, F16, F64, I64, I32, I16, I8, U8, BOOL) "
        "or a torch/numpy name ('float32', 'torch.bfloat16', ...); buffer any C-contiguous "
        "buffer (numpy array, memoryview, bytes) of exactly dtype x shape bytes, read in "
        "place. meta: JSON-able dict stored as meta.json 'extra'. json_files: {'rank0.json': "
        "obj, ...} plain file names. anomaly: writes anomaly-step-<step>/ (never pruned, "
        "never 'latest'). Raises Error (the folder exists, a bad tensor, I/O naming the path).");
  m.def("ckpt_read", &CkptRead, py::arg("path"), py::kw_only(), py::arg("part") = "model",
        py::arg("verify") = true,
        "Reads a checkpoint folder written by ckpt_write (or the trainer): returns (tensors, "
        "meta) with tensors a list of (name, dtype, shape, bytes) in name order from "
        "<part>.safetensors (part 'model' or 'optimizer'; a missing optimizer file gives []) "
        "and meta the dict given to ckpt_write (meta.json 'extra'). verify: first checks the "
        "manifest, sizes and hashes and raises Error naming the bad file.");
  m.def("ckpt_read_json", &CkptReadJson, py::arg("path"), py::arg("name"),
        "One JSON file of a checkpoint folder (a json_files entry, meta.json, manifest.json).");
  m.def("ckpt_prune", &CkptPrune, py::arg("dir"), py::arg("keep"),
        "Removes complete step-<N> checkpoints under dir beyond the newest `keep` (never "
        "anomaly or incomplete ones; leftovers of dead writers are removed too); returns the "
        "removed paths. keep <= 0 keeps everything.");
  m.def("ckpt_latest", &CkptLatest, py::arg("dir"), py::kw_only(), py::arg("hash") = true,
        "The newest complete, intact, non-anomaly checkpoint under dir (its checkpoints/ "
        "folder when present), or None (none yet, or no such folder).");
  m.def("ckpt_find_latest", &CkptFindLatest, py::arg("dir"), py::kw_only(), py::arg("hash") = true,
        "As ckpt_latest, with what was passed over: {'path': str or None, 'step': int or None, "
        "'skipped': [{'path', 'reason', 'tensor' (the damaged tensor or None)}, ...]}, the "
        "newer checkpoints that are damaged or unfinished, newest first.");
}

}  // namespace trainscope::python
