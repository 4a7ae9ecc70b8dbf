// trainscope._core.classify_nonfinite: the trainer's non-finite classification rules
// (diagnose/nonfinite.h) for the Python NaN tracer (python/trainscope/nonfinite.py), so the
// two never drift apart. Keywords in, (class, fix) out; pure arithmetic, so the GIL is kept.
#include "trainscope/diagnose/nonfinite.h"

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "convert.h"

namespace py = pybind11;

namespace trainscope::python {
namespace {

py::tuple PyClassifyNonfinite(const std::string& phase, const std::string& module, bool replayed,
                              bool reproducible, bool embedding_output, bool weights_nonfinite,
                              bool fp16, double max_abs_activation, double lr,
                              const std::vector<std::pair<int, double>>& lr_history,
                              const std::vector<double>& grad_norms, const std::string& wording,
                              bool input_nonfinite) {
  diagnose::NonfiniteEvidence e;
  e.phase = ValueOrThrow(diagnose::ParseNonfinitePhase(phase));
  e.module = module;
  e.replayed = replayed;
  e.reproducible = reproducible;
  e.embedding_output = embedding_output;
  e.input_nonfinite = input_nonfinite;
  e.weights_nonfinite = weights_nonfinite;
  e.fp16 = fp16;
  e.max_abs_activation = max_abs_activation;
  e.lr = lr;
  const diagnose::LrJump jump = diagnose::FindLrJump(lr_history);
  e.lr_jump = jump.ratio;
  e.lr_jump_step = jump.step;
  e.grad_norms = grad_norms;
  diagnose::NonfiniteWording w;
  if (wording == "user") {
    w = diagnose::NonfiniteWording::UserLoop();
  } else if (wording == "trainer") {
    w = diagnose::NonfiniteWording::Trainer();
  } else {
    throw StatusError(absl::InvalidArgumentError(
        absl::StrCat("classify_nonfinite: wording '", wording, "': expected user or trainer")));
  }
  diagnose::NonfiniteVerdict v = diagnose::ClassifyNonfinite(e, w);
  return py::make_tuple(std::move(v.cls), std::move(v.finding.fix));
}

}  // namespace

void RegisterNonfinite(py::module_& m) {
  m.def("classify_nonfinite", &PyClassifyNonfinite, py::kw_only(), py::arg("phase"),
        py::arg("module") = "", py::arg("replayed") = false, py::arg("reproducible") = false,
        py::arg("embedding_output") = false, py::arg("weights_nonfinite") = false,
        py::arg("fp16") = false, py::arg("max_abs_activation") = 0.0, py::arg("lr") = 0.0,
        py::arg("lr_history") = std::vector<std::pair<int, double>>(),
        py::arg("grad_norms") = std::vector<double>(), py::arg("wording") = "user",
        py::arg("input_nonfinite") = false,
        "The cause of a non-finite step, by the trainer's rules (docs/metrics.md, \"Loss spikes "
        "and non-finite localisation\") -> (class, fix). phase: 'forward', 'backward', 'loss' or "
        "'optimizer'; module: where it turned non-finite ('' = unknown); replayed / "
        "reproducible: the step was replayed / both replays turned non-finite at the same place; "
        "embedding_output: the first non-finite output was an embedding's; weights_nonfinite: "
        "parameters were non-finite before the step; fp16: the model computes in fp16; "
        "max_abs_activation: the largest finite |activation| seen by the replay; lr: this step's "
        "learning rate; lr_history: [(step, lr)] oldest first, ending with this step; "
        "grad_norms: recent global gradient norms, oldest first (non-finite ones ignored); "
        "wording: 'user' (plain words) or 'trainer' (the trainer's config keys); "
        "input_nonfinite: the model's input (the batch) was already non-finite. Raises Error "
        "for an unknown phase or wording.");
}

}  // namespace trainscope::python
