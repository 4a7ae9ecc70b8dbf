// trainscope._core's run-directory names (core/run_dir.h): the one place Python takes the
// layout from, so that watch, distributed.record, checkpoint and dump write where the CLI's
// readers look. Pure functions.
#include "trainscope/core/run_dir.h"

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <map>
#include <string>

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
                                         {"tensorboard", run_dir::kTensorBoard}};
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
}

}  // namespace trainscope::python
