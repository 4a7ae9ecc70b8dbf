// trainscope._core.FlightRecorder: the comm module's flight recorder
// (include/trainscope/comm/flight_recorder.h) filled from Python by
// trainscope.distributed.record, one start()/complete() pair per torch.distributed call. Its
// dumps are the ones `trainscope hang analyze` reads (docs/formats.md "Flight recorder
// dump"), so a hang in a user's torch job gets the same verdict as one in our trainer.
//
// Sequence numbers follow Communicator::Dispatch: per group, op_id counts every op from 1,
// collective_seq_id counts collectives from 1 (a p2p op carries the current value) and
// p2p_seq_id counts p2p ops likewise. Methods run with the GIL held (the Python calls are
// serialised by it; the recorder has its own mutex for its watchdog readers), except
// dump(), which releases it while writing.
//
// The per-call path: record's wrappers run beside every torch.distributed call, so they use
// fast_calls(), two plain CPython METH_FASTCALL functions taking only integers (op, dtype,
// group and call site as codes resolved once: op_code, dtype_code, group_id, site_id) instead
// of pybind11 methods taking strings. Through pybind11's dispatcher (overload resolution, one
// caster per argument, a std::string per text) a start()+complete() pair cost 1.3 us from
// Python, through these 0.4 us, and about 3x that each beside a real collective, whose
// thread hand-off leaves the caches cold (docs/PERFORMANCE.md "`import trainscope` in a
// user's loop").
#include "trainscope/comm/flight_recorder.h"

#include <fcntl.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "convert.h"
#include "trainscope/comm/comm.h"

namespace py = pybind11;

namespace trainscope::python {
namespace {

int64_t MonotonicNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

class PyFlightRecorder {
 public:
  PyFlightRecorder(int rank, int world_size, size_t capacity, const std::string& backend,
                   int64_t timeout_ms) {
    comm::FlightRecorderOptions o;
    o.rank = rank;
    o.world_size = world_size;
    o.capacity = capacity;
    rec_ = ValueOrThrow(comm::FlightRecorder::Create(o));
    std::vector<int> ranks(world_size);
    for (int r = 0; r < world_size; ++r) ranks[r] = r;
    RegisterGroup("0", ranks, "default_pg", backend, timeout_ms);
  }

  int RegisterGroup(const std::string& name, const std::vector<int>& ranks, const std::string& desc,
                    const std::string& backend, int64_t timeout_ms) {
    comm::ProcessGroupInfo info;
    info.name = name;
    info.desc = desc;
    info.ranks = ranks;
    info.backend = backend;
    info.timeout_ms = timeout_ms;
    const int id = ValueOrThrow(rec_->RegisterProcessGroup(std::move(info)));
    groups_[name] = id;
    counters_.resize(id + 1);
    return id;
  }

  int64_t Start(const std::string& op_name, int64_t seq, int64_t count, const std::string& dtype,
                const std::string& group, const std::string& call_site, int peer,
                int64_t output_count, bool async) {
    auto g = groups_.find(group);
    if (g == groups_.end()) {
      throw StatusError(absl::InvalidArgumentError(absl::StrCat(
          "flight recorder: unknown process group '", group, "' (register_group it first)")));
    }
    return Record(ValueOrThrow(comm::ParseOp(op_name)), seq, count, ParseDTypeOrFloat(dtype),
                  g->second, call_site, peer, output_count, async);
  }

  // The fast path's start: codes checked (a bad one is a bug of the caller: ValueError).
  int64_t StartCodes(int64_t op, int64_t count, int64_t dtype, int64_t pg_id, int64_t site,
                     int64_t peer, int64_t output_count, bool async) {
    if (op < 0 || op > static_cast<int64_t>(comm::OpType::kRecv) || dtype < 0 ||
        dtype > static_cast<int64_t>(comm::DType::kInt64) || pg_id < 0 ||
        pg_id >= static_cast<int64_t>(counters_.size()) || site < 0 ||
        site >= static_cast<int64_t>(sites_.size())) {
      throw py::value_error(absl::StrCat("flight recorder: bad code (op ", op, ", dtype ", dtype,
                                         ", group ", pg_id, ", site ", site, ")"));
    }
    return Record(static_cast<comm::OpType>(op), -1, count, static_cast<comm::DType>(dtype),
                  static_cast<int>(pg_id), sites_[site], static_cast<int>(peer), output_count,
                  async);
  }

  // Index of `call_site` in this recorder's table of call sites (added when new).
  int64_t SiteId(const std::string& call_site) {
    auto [it, added] = site_ids_.try_emplace(call_site, static_cast<int64_t>(sites_.size()));
    if (added) sites_.push_back(call_site);
    return it->second;
  }

  // pg_id of a registered group name. Errors: unknown name (trainscope._core.Error).
  int GroupId(const std::string& group) const {
    auto g = groups_.find(group);
    if (g == groups_.end()) {
      throw StatusError(absl::InvalidArgumentError(
          absl::StrCat("flight recorder: unknown process group '", group, "'")));
    }
    return g->second;
  }

  static int OpCode(const std::string& op) {
    return static_cast<int>(ValueOrThrow(comm::ParseOp(op)));
  }
  static int DTypeCode(const std::string& dtype) {
    return static_cast<int>(ParseDTypeOrFloat(dtype));
  }

  void Complete(int64_t id, const std::string& error) {
    rec_->RecordCompleted(id, MonotonicNs(),
                          error.empty() ? absl::OkStatus() : absl::UnknownError(error));
  }

  void CompleteOk(int64_t id) { rec_->RecordCompleted(id, MonotonicNs(), absl::OkStatus()); }

  void Dump(const std::string& path, const std::string& reason, bool only_active) {
    comm::FlightDumpOptions o;
    o.reason = reason;
    o.only_active = only_active;
    absl::Status st;
    {
      py::gil_scoped_release nogil;
      st = rec_->DumpJson(path, o);
    }
    ThrowIfError(st);
  }

  std::string DumpString(const std::string& reason, bool only_active) {
    comm::FlightDumpOptions o;
    o.reason = reason;
    o.only_active = only_active;
    return rec_->DumpJsonString(o);
  }

  // Age in seconds of the oldest op that was started and has not returned (0 when none),
  // and its description: what a watchdog needs to decide to dump.
  py::tuple OldestPending() const {
    const int64_t now = rec_->NowNs();
    for (const comm::FlightEntry& e : rec_->Snapshot()) {
      if (e.retired) continue;
      return py::make_tuple((now - e.time_created_ns) / 1e9, comm::OpName(e.op),
                            e.is_p2p ? e.p2p_seq_id : e.collective_seq_id, std::string(e.caller));
    }
    return py::make_tuple(0.0, "", 0, "");
  }

  // The training step later ops are recorded with (the dump's `step`); -1: none.
  void SetStep(int64_t step) { step_ = step; }
  int64_t step() const { return step_; }

  // Arms the std::terminate path (see ArmTerminate below) for this recorder.
  void ArmTerminate(const std::string& path, py::object on_crash);

  int64_t recorded() const { return rec_->recorded(); }
  size_t capacity() const { return rec_->capacity(); }

 private:
  // Dtypes the comm module has no name for (float64, uint8, ...) are recorded as float32:
  // every rank records the same call the same way, so matching across ranks still holds.
  static comm::DType ParseDTypeOrFloat(const std::string& dtype) {
    std::string d = dtype.rfind("torch.", 0) == 0 ? dtype.substr(6) : dtype;
    absl::StatusOr<comm::DType> t = comm::ParseDType(d);
    return t.ok() ? *t : comm::DType::kFloat32;
  }

  // One op: sequence numbers (seq < 0: the group's next), then scheduled and started at once
  // (a torch call is running once issued).
  int64_t Record(comm::OpType op_type, int64_t seq, int64_t count, comm::DType dtype, int pg_id,
                 absl::string_view call_site, int peer, int64_t output_count, bool async) {
    comm::FlightOp op;
    op.op = op_type;
    op.dtype = dtype;
    op.pg_id = pg_id;
    Counters& c = counters_[op.pg_id];
    op.op_id = ++c.ops;
    if (comm::IsP2P(op.op)) {
      c.p2p = seq >= 0 ? seq : c.p2p + 1;
    } else {
      c.collective = seq >= 0 ? seq : c.collective + 1;
    }
    op.collective_seq_id = c.collective;
    op.p2p_seq_id = c.p2p;
    op.input_numel = count;
    op.output_numel = output_count >= 0 ? output_count : count;
    op.peer = peer;
    op.async = async;
    op.step = step_;
    op.enqueue_mono_ns = MonotonicNs();
    int64_t id;
    {
      comm::ScopedCallerTag tag(call_site);
      id = rec_->RecordScheduled(op);
    }
    rec_->RecordStarted(id, op.enqueue_mono_ns);
    return id;
  }

  struct Counters {
    int64_t ops = 0, collective = 0, p2p = 0;
  };
  std::shared_ptr<comm::FlightRecorder> rec_;
  int64_t step_ = -1;
  std::unordered_map<std::string, int> groups_;  // name -> pg_id
  std::vector<Counters> counters_;               // by pg_id
  std::vector<std::string> sites_;               // by site id
  std::unordered_map<std::string, int64_t> site_ids_;
};

// ---- Evidence when the process dies (opted into by trainscope.distributed.record, never by
// the library itself). gloo reports a mismatched collective by throwing from its own I/O
// thread (`op.preamble.length <= op.nbytes`), which ends the process in std::terminate and
// SIGABRT before any Python code runs again. The terminate handler below writes the
// recorder's dump first (no GIL needed), then, when the interpreter is still up, calls the
// Python callback (the thread stacks; it takes the GIL, which the main thread releases while
// it waits in a collective), then hands over to the previous handler (abort).
struct TerminateHook {
  std::mutex mu;
  std::shared_ptr<comm::FlightRecorder> rec;
  std::string path;
  PyObject* on_crash = nullptr;  // a new reference, kept for the process's life
  std::terminate_handler previous = nullptr;
  std::atomic<bool> fired{false};
};
TerminateHook& Hook() {
  static TerminateHook* h = new TerminateHook;  // never destroyed: used while dying
  return *h;
}

void OnTerminate() {
  TerminateHook& h = Hook();
  if (!h.fired.exchange(true)) {
    std::string reason = "std::terminate";
    if (std::exception_ptr e = std::current_exception()) {
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& x) {
        reason = absl::StrCat("std::terminate: ", x.what());
      } catch (...) {
      }
    }
    std::shared_ptr<comm::FlightRecorder> rec;
    std::string path;
    PyObject* cb = nullptr;
    {
      std::lock_guard<std::mutex> l(h.mu);
      rec = h.rec;
      path = h.path;
      cb = h.on_crash;
    }
    if (rec != nullptr) {
      comm::FlightDumpOptions o;
      o.reason = reason.substr(0, 400);
      (void)rec->DumpJson(path, o);
    }
    if (cb != nullptr && Py_IsInitialized()) {
      PyGILState_STATE g = PyGILState_Ensure();
      PyObject* r = PyObject_CallFunction(cb, "s", reason.c_str());
      if (r == nullptr) PyErr_Clear();
      Py_XDECREF(r);
      PyGILState_Release(g);
    }
  }
  if (h.previous != nullptr) h.previous();
  std::abort();
}

void PyFlightRecorder::ArmTerminate(const std::string& path, py::object on_crash) {
  TerminateHook& h = Hook();
  std::lock_guard<std::mutex> l(h.mu);
  h.rec = rec_;
  h.path = path;
  if (h.on_crash != nullptr) Py_DECREF(h.on_crash);
  h.on_crash = on_crash.is_none() ? nullptr : on_crash.inc_ref().ptr();
  std::terminate_handler prev = std::set_terminate(OnTerminate);
  if (prev != OnTerminate) h.previous = prev;
}

// SIGUSR1 (`trainscope launch` asks a failed job's ranks for their dumps with it): the handler
// only writes a byte to a pipe (async-signal-safe); a Python thread reading the pipe writes the
// dump, whatever the main thread is blocked in.
int g_sigusr1_pipe[2] = {-1, -1};
void OnSigusr1(int) {
  const int saved = errno;
  char b = 1;
  ssize_t n = ::write(g_sigusr1_pipe[1], &b, 1);
  (void)n;
  errno = saved;
}

// The pipe's read end (the same one on later calls). Errors: OSError.
int ArmSigusr1() {
  if (g_sigusr1_pipe[0] < 0) {
    if (::pipe(g_sigusr1_pipe) != 0) {
      PyErr_SetFromErrno(PyExc_OSError);
      throw py::error_already_set();
    }
    ::fcntl(g_sigusr1_pipe[1], F_SETFL, O_NONBLOCK);
    ::fcntl(g_sigusr1_pipe[0], F_SETFD, FD_CLOEXEC);
    ::fcntl(g_sigusr1_pipe[1], F_SETFD, FD_CLOEXEC);
  }
  struct sigaction sa = {};
  sa.sa_handler = OnSigusr1;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  ::sigaction(SIGUSR1, &sa, nullptr);
  return g_sigusr1_pipe[0];
}

// ---- fast_calls(): start(op, count, dtype, pg, site, peer, output_count, async) -> id and
// complete(id), as METH_FASTCALL builtins whose `self` is a capsule holding the recorder and a
// reference to its Python object (so the recorder outlives them).
struct FrFastSelf {
  PyFlightRecorder* rec;
  PyObject* owner;
};
constexpr const char* kFrFastCapsule = "trainscope.FlightRecorder.fast";

PyFlightRecorder* FrFastRecorder(PyObject* self) {
  return static_cast<FrFastSelf*>(PyCapsule_GetPointer(self, kFrFastCapsule))->rec;
}

PyObject* FrFastStart(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 8) {
    PyErr_SetString(PyExc_TypeError,
                    "start(op, count, dtype, group, site, peer, output_count, async_op) takes 8 "
                    "positional arguments");
    return nullptr;
  }
  int64_t v[7];
  for (int i = 0; i < 7; ++i) {
    v[i] = PyLong_AsLongLong(args[i]);
    if (v[i] == -1 && PyErr_Occurred()) return nullptr;
  }
  const int async = PyObject_IsTrue(args[7]);
  if (async < 0) return nullptr;
  try {
    return PyLong_FromLongLong(
        FrFastRecorder(self)->StartCodes(v[0], v[1], v[2], v[3], v[4], v[5], v[6], async != 0));
  } catch (py::builtin_exception& e) {
    e.set_error();
  } catch (std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  }
  return nullptr;
}

PyObject* FrFastComplete(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 1) {
    PyErr_SetString(PyExc_TypeError, "complete(id) takes 1 positional argument");
    return nullptr;
  }
  const int64_t id = PyLong_AsLongLong(args[0]);
  if (id == -1 && PyErr_Occurred()) return nullptr;
  FrFastRecorder(self)->CompleteOk(id);
  Py_RETURN_NONE;
}

PyMethodDef kFrFastStartDef = {
    "start", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(FrFastStart)),
    METH_FASTCALL,
    "start(op, count, dtype, group, site, peer, "
    "output_count, async_op) -> id (codes; see fast_calls)"};
PyMethodDef kFrFastCompleteDef = {
    "complete", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(FrFastComplete)),
    METH_FASTCALL, "complete(id): the call returned"};

py::tuple FastCalls(py::object self) {
  auto* holder = new FrFastSelf{self.cast<PyFlightRecorder*>(), self.inc_ref().ptr()};
  py::object capsule =
      py::reinterpret_steal<py::object>(PyCapsule_New(holder, kFrFastCapsule, [](PyObject* c) {
        auto* h = static_cast<FrFastSelf*>(PyCapsule_GetPointer(c, kFrFastCapsule));
        Py_DECREF(h->owner);
        delete h;
      }));
  if (!capsule) {
    Py_DECREF(holder->owner);
    delete holder;
    throw py::error_already_set();
  }
  py::object start =
      py::reinterpret_steal<py::object>(PyCFunction_New(&kFrFastStartDef, capsule.ptr()));
  py::object complete =
      py::reinterpret_steal<py::object>(PyCFunction_New(&kFrFastCompleteDef, capsule.ptr()));
  if (!start || !complete) throw py::error_already_set();
  return py::make_tuple(start, complete);
}

}  // namespace

void RegisterFlightRecorder(py::module_& m) {
  py::class_<PyFlightRecorder>(
      m, "FlightRecorder",
      "A ring of this rank's last collective and p2p calls, dumped in the format `trainscope "
      "hang analyze` reads. FlightRecorder(rank, world_size, capacity=2000, backend='gloo', "
      "timeout_ms=0) registers the default group '0' (all ranks, desc 'default_pg'); "
      "timeout_ms is the group's op timeout written in the dump.")
      .def(py::init<int, int, size_t, const std::string&, int64_t>(), py::arg("rank"),
           py::arg("world_size"), py::arg("capacity") = 2000, py::arg("backend") = "gloo",
           py::arg("timeout_ms") = 0)
      .def("register_group", &PyFlightRecorder::RegisterGroup, py::arg("name"), py::arg("ranks"),
           py::arg("desc") = "", py::arg("backend") = "gloo", py::arg("timeout_ms") = 0,
           "Adds a process group (name unique, ranks = global ranks in group-rank order); "
           "returns its pg_id.")
      .def("start", &PyFlightRecorder::Start, py::arg("op"), py::arg("seq") = -1,
           py::arg("count") = 0, py::arg("dtype") = "float32", py::arg("group") = "0",
           py::arg("call_site") = "", py::arg("peer") = -1, py::arg("output_count") = -1,
           py::arg("async_op") = false,
           "Records a call as started; returns its id for complete(). op: all_reduce, "
           "all_gather, reduce_scatter, broadcast, all_to_all, barrier, send, recv. seq: the "
           "group's collective (or p2p) sequence number, -1 to count from 1 automatically. "
           "count: elements of the input (output_count: of the output, -1 = count). dtype: "
           "float32, bfloat16, float16, int32, int64 ('torch.' prefix allowed; others are "
           "recorded as float32). call_site: 'file.py:123' (the dump's caller; hang analyze "
           "names it). peer: the peer's group rank for send/recv, the root for broadcast.")
      .def("fast_calls", &FastCalls,
           "(start, complete): the per-call path of trainscope.distributed.record, builtins "
           "taking integers only: start(op, count, dtype, group, site, peer, output_count, "
           "async_op) -> id, with op from op_code(), dtype from dtype_code(), group from "
           "group_id() (or register_group), site from site_id(), output_count -1 = count, and "
           "sequence numbers counted per group; complete(id) marks the call completed (a "
           "failed call goes through complete(id, error)). A bad code raises ValueError. They "
           "keep the recorder alive.")
      .def("site_id", &PyFlightRecorder::SiteId, py::arg("call_site"),
           "The code of a call site ('file.py:123') for fast_calls' start.")
      .def("group_id", &PyFlightRecorder::GroupId, py::arg("name"),
           "pg_id of a registered group ('0' = default).")
      .def_static("op_code", &PyFlightRecorder::OpCode, py::arg("op"),
                  "The code of an op name for fast_calls' start.")
      .def_static("dtype_code", &PyFlightRecorder::DTypeCode, py::arg("dtype"),
                  "The code of a dtype name for fast_calls' start (unknown names: float32's).")
      .def("complete", &PyFlightRecorder::Complete, py::arg("id"), py::arg("error") = "",
           "Marks the call returned: completed, or failed with `error` when not empty.")
      .def("dump", &PyFlightRecorder::Dump, py::arg("path"), py::arg("reason") = "", py::kw_only(),
           py::arg("only_active") = false,
           "Writes the dump (JSON, atomically; parent folders created). reason: why "
           "(trainscope.reason in the dump). Releases the GIL while writing.")
      .def("dump_string", &PyFlightRecorder::DumpString, py::arg("reason") = "", py::kw_only(),
           py::arg("only_active") = false, "The dump as a JSON string.")
      .def("oldest_pending", &PyFlightRecorder::OldestPending,
           "(age_s, op, seq, call_site) of the oldest call not returned yet; (0.0, '', 0, '') "
           "when none.")
      .def_property("step", &PyFlightRecorder::step, &PyFlightRecorder::SetStep,
                    "The training step later calls are recorded with (the dump's `step`); -1: "
                    "none (trainscope.watch sets it at each step).")
      .def("arm_terminate", &PyFlightRecorder::ArmTerminate, py::arg("path"),
           py::arg("on_crash") = py::none(),
           "When the process ends in std::terminate (gloo's mismatch check in its I/O thread), "
           "dump to `path` (reason: the exception), call on_crash(reason) with the GIL, then "
           "abort as before. For trainscope.distributed.record(dump_on_crash=True).")
      .def_static("arm_sigusr1", &ArmSigusr1,
                  "Catches SIGUSR1 by writing a byte to a pipe; returns its read end (for a "
                  "thread that dumps). For trainscope.distributed.record(dump_on_crash=True).")
      .def_property_readonly("recorded", &PyFlightRecorder::recorded, "calls recorded so far")
      .def_property_readonly("capacity", &PyFlightRecorder::capacity, "entries kept");
}

}  // namespace trainscope::python
