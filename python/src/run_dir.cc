// trainscope._core's run-directory names (core/run_dir.h): the one place Python takes the
// layout from, so that watch, distributed.record, checkpoint and dump write where the CLI's
// readers look; and the format names (core/formats.h) the Python writers put in "format".
// Pure functions.
#include "trainscope/core/run_dir.h"

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <map>
#include <string>

#include "absl/strings/str_replace.h"
#include "trainscope/core/formats.h"
#include "trainscope/core/run_dir_lock.h"

namespace py = pybind11;

namespace trainscope::python {

void RegisterRunDir(py::module_& m) {
  m.attr("RUN_DIR_PARTS") =
      std::map<std::string, std::string>{{"train", run_dir::kTrain},
                                         {"hang", run_dir::kHang},
                                         {"checkpoints", run_dir::kCheckpoints},
                                         {"data", run_dir::kData},
                                         {"trace", run_dir::kTrace},
                                         {"compare", run_dir::kCompare},
                                         {"dump", run_dir::kDump},
                                         {"tensorboard", run_dir::kTensorBoard},
                                         {"parts", run_dir::kParts}};
  // The files Python reads or names (the rest of core/run_dir.h is the CLI's).
  m.attr("RUN_DIR_FILES") =
      std::map<std::string, std::string>{{"lock", run_dir::kLockFile},
                                         {"train_config", run_dir::kTrainConfigJson},
                                         {"checkpoint_meta", run_dir::kCheckpointMeta},
                                         {"checkpoint_manifest", run_dir::kCheckpointManifest}};
  // {"train_metrics": "trainscope.train_metrics", ...}: each name of core/formats.h under
  // its tail ("trainscope." dropped, "." -> "_"), and FORMAT_VERSIONS {name: version}.
  std::map<std::string, std::string> names;
  std::map<std::string, int> versions;
  for (const formats::Format& f : formats::kFormats) {
    const std::string name = f.name;
    names[absl::StrReplaceAll(name.substr(name.find('.') + 1), {{".", "_"}})] = name;
    versions[name] = f.version;
  }
  m.attr("FORMATS") = names;
  m.attr("FORMAT_VERSIONS") = versions;
  m.def("default_run_dir", &run_dir::DefaultRunDir, py::arg("kind"),
        "runs/<kind>-<UTC YYYYmmdd-HHMMSS>-<pid>, as the CLI names a new run directory");
  m.def("metrics_path", &run_dir::TrainMetricsPath, py::arg("run_dir"), py::arg("rank"),
        "<run_dir>/train/metrics.rank<R>.jsonl");
  m.def("tensorboard_dir", &run_dir::TrainTensorBoardDir, py::arg("run_dir"), py::arg("rank"),
        "<run_dir>/train/tb/rank<R>");
  m.def("hang_dump_path", &run_dir::HangDumpPath, py::arg("run_dir"), py::arg("rank"),
        "<run_dir>/hang/flight_recorder.rank<R>.json");
  m.def("hang_stacks_path", &run_dir::HangStacksPath, py::arg("run_dir"), py::arg("rank"),
        "<run_dir>/hang/stacks.rank<R>.txt");
  m.def("checkpoint_dir_name", &run_dir::CheckpointDirName, py::arg("step"),
        py::arg("anomaly") = false, "step-<N>, or anomaly-step-<N> when anomaly");
  m.def("checkpoint_step_dir", &run_dir::CheckpointStepDir, py::arg("dir"), py::arg("step"),
        "<dir>/step-<N> (dir: a run directory's checkpoints folder, or any folder of them)");
  m.def(
      "is_checkpoint_step_name",
      [](const std::string& name) { return run_dir::IsCheckpointStepName(name); }, py::arg("name"),
      "whether name is a finished checkpoint's folder name ([anomaly-]step-<N>)");
}

}  // namespace trainscope::python
