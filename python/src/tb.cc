// trainscope._core.TensorBoardWriter: the trainer's TensorBoard scalar writer (tb/event_writer.h)
// for trainscope.watch, so a user's loop gets the same event files as `trainscope train`
// (<run_dir>/train/tb/rank<R>/) without the tensorboard package. Writes are small and buffered
// (flushed every flush_every_s), so the GIL is kept. Not thread-safe, as the writer: one
// training thread writes.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "convert.h"
#include "trainscope/tb/event_writer.h"

namespace py = pybind11;

namespace trainscope::python {
namespace {

// The writer, closed (flushed and released) by close() or when Python collects the object.
class PyTensorBoardWriter {
 public:
  PyTensorBoardWriter(const std::string& dir, double flush_every_s) {
    tb::EventWriterOptions o;
    o.flush_every_s = flush_every_s;
    writer_ = ValueOrThrow(tb::EventWriter::Open(dir, o));
    path_ = writer_->path();
  }

  void AddScalars(int64_t step, int64_t wall_time_us, const std::vector<tb::Scalar>& scalars) {
    ThrowIfError(Open("add_scalars")->AddScalars(step, wall_time_us, scalars));
  }
  void Flush() { ThrowIfError(Open("flush")->Flush()); }
  void Close() {
    if (writer_ == nullptr) return;
    absl::Status st = writer_->Flush();
    events_at_close_ = writer_->events();
    writer_.reset();
    ThrowIfError(st);
  }
  const std::string& path() const { return path_; }
  int64_t events() const { return writer_ == nullptr ? events_at_close_ : writer_->events(); }

 private:
  tb::EventWriter* Open(const char* what) {
    if (writer_ == nullptr) {
      throw StatusError(absl::FailedPreconditionError(
          absl::StrCat("TensorBoardWriter.", what, ": the writer of ", path_, " is closed")));
    }
    return writer_.get();
  }

  std::unique_ptr<tb::EventWriter> writer_;
  std::string path_;
  int64_t events_at_close_ = 0;
};

}  // namespace

void RegisterTensorBoard(py::module_& m) {
  py::class_<PyTensorBoardWriter>(
      m, "TensorBoardWriter",
      "TensorBoard scalars as `trainscope train` writes them (docs/formats.md, \"TensorBoard "
      "scalars\"): a new events.out.tfevents.<unix s>.<host> file in `dir` (created).")
      .def(py::init<const std::string&, double>(), py::arg("dir"), py::kw_only(),
           py::arg("flush_every_s") = 2.0,
           "Creates `dir` and a new event file in it. Raises Error naming the path when it "
           "cannot be created.")
      .def("add_scalars", &PyTensorBoardWriter::AddScalars, py::arg("step"),
           py::arg("wall_time_us"), py::arg("scalars"),
           "One event at `step`: a value per (tag, float) pair of `scalars` (NaN/Inf kept).")
      .def("flush", &PyTensorBoardWriter::Flush, "Writes the buffered events to the file.")
      .def("close", &PyTensorBoardWriter::Close, "Flushes and closes; idempotent.")
      .def_property_readonly("path", &PyTensorBoardWriter::path)
      .def_property_readonly("events", &PyTensorBoardWriter::events);
}

}  // namespace trainscope::python
