// trainscope._core: the native half of `import trainscope` (docs/python.md). The analyses
// return the same dicts as the CLI's --json (one library function each, shared with the
// CLI); the checkpoint primitives (ckpt.cc) and the flight recorder (flight_recorder.cc)
// serve the pure-Python layer. Links only libtorch-free libraries: the user's script brings
// its own torch into the process.
//
// Rules every function here follows: a failing absl::Status raises trainscope._core.Error
// (convert.h, the one place); long calls release the GIL; nothing is printed (the library
// has no progress sink unless an executable sets one, core/progress.h) and no process-wide
// state (signals, allocator) is touched. Memory-mapped corpus reads are off by default (a
// file truncated under a mapping raises SIGBUS, which would kill the interpreter).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "convert.h"
#include "trainscope/ckpt/inspect.h"
#include "trainscope/core/os.h"
#include "trainscope/core/paths.h"
#include "trainscope/core/run_dir_lock.h"
#include "trainscope/data/reader.h"
#include "trainscope/data/scan.h"
#include "trainscope/diagnose/diagnose.h"
#include "trainscope/env/fingerprint.h"
#include "trainscope/hang/analyze.h"
#include "trainscope/tokenizer/tokenizer.h"
#include "trainscope/trace/analysis.h"

namespace py = pybind11;

namespace trainscope::python {

void RegisterCheckpoint(py::module_& m);      // ckpt.cc
void RegisterFlightRecorder(py::module_& m);  // flight_recorder.cc
void RegisterNonfinite(py::module_& m);       // nonfinite.cc
void RegisterTensorBoard(py::module_& m);     // tb.cc
void RegisterRunDir(py::module_& m);          // run_dir.cc

namespace {

using Json = nlohmann::json;

// Runs `f` (returning absl::StatusOr<Json>) without the GIL, then converts with it.
template <typename F>
py::object JsonCall(F&& f) {
  absl::StatusOr<Json> r;
  {
    py::gil_scoped_release nogil;
    r = f();
  }
  return ToPython(ValueOrThrow(std::move(r)));
}

py::object TraceAnalyze(const std::vector<std::string>& paths, double gap_threshold_pct, int top,
                        bool strict, bool include_last_step, bool ns_precision) {
  trace::AnalyzePathsOptions o;
  o.analyze.iteration_gap_threshold_pct = gap_threshold_pct;
  o.analyze.top_k = top;
  o.analyze.include_last_step = include_last_step;
  o.analyze.ns_precision = ns_precision;
  o.strict = strict;
  return JsonCall([&]() -> absl::StatusOr<Json> {
    absl::StatusOr<trace::Report> rep = trace::AnalyzePaths(paths, o);
    if (!rep.ok()) return rep.status();
    return trace::ReportToJson(*rep);
  });
}

data::InputFormat ParseFormat(const std::string& format) {
  return ValueOrThrow(data::ParseInputFormat(format));
}

py::object DataScan(const std::vector<std::string>& paths, const py::kwargs& kw) {
  data::ScanOptions o;
  o.threads = data::DefaultScanThreads();
  std::string format = "auto", fail_on = "duplicates=0.05,noise=0.2", tokenizer_path;
  bool exact_only = false;
  data::ReaderOptions& r = o.reader;
  r.raw_jsonl_mmap = false;  // see the file comment
  for (const auto& [key, value] : kw) {
    const std::string k = key.cast<std::string>();
    try {
      if (k == "format")
        format = value.cast<std::string>();
      else if (k == "text_field")
        r.text_field = value.cast<std::string>();
      else if (k == "id_field")
        r.id_field = value.cast<std::string>();
      else if (k == "blocks")
        r.text_blocks = value.cast<bool>();
      else if (k == "max_doc_bytes")
        r.max_doc_bytes = value.cast<size_t>();
      else if (k == "mmap")
        r.raw_jsonl_mmap = value.cast<bool>();
      else if (k == "seq_len")
        o.seq_len = value.cast<decltype(o.seq_len)>();
      else if (k == "batch_size")
        o.batch_size = value.cast<decltype(o.batch_size)>();
      else if (k == "threshold")
        o.threshold = value.cast<double>();
      else if (k == "verdicts")
        o.verdicts_path = value.cast<std::string>();
      else if (k == "threads")
        o.threads = value.cast<int>();
      else if (k == "ngram")
        o.ngram = value.cast<int>();
      else if (k == "bands")
        o.bands = value.cast<int>();
      else if (k == "rows")
        o.rows = value.cast<int>();
      else if (k == "seed")
        o.minhash_seed = value.cast<decltype(o.minhash_seed)>();
      else if (k == "shuffle_seed")
        o.shuffle_seed = value.cast<decltype(o.shuffle_seed)>();
      else if (k == "c4_min_sentences")
        o.c4_min_sentences = value.cast<int>();
      else if (k == "tmp_dir")
        o.tmp_dir = value.cast<std::string>();
      else if (k == "near_dup")
        o.near_dup = value.cast<bool>();
      else if (k == "language")
        o.language = value.cast<bool>();
      else if (k == "noise")
        o.noise = value.cast<bool>();
      else if (k == "exact_only")
        exact_only = value.cast<bool>();
      else if (k == "fail_on")
        fail_on = value.cast<std::string>();
      else if (k == "tokenizer")
        tokenizer_path = value.cast<std::string>();
      else
        throw StatusError(absl::InvalidArgumentError(absl::StrCat(
            "data_scan: unknown option '", k,
            "' (format, text_field, id_field, blocks, max_doc_bytes, mmap, seq_len, batch_size, "
            "threshold, verdicts, threads, ngram, bands, rows, seed, shuffle_seed, "
            "c4_min_sentences, tmp_dir, near_dup, language, noise, exact_only, fail_on, "
            "tokenizer)")));
    } catch (const py::cast_error&) {
      throw StatusError(absl::InvalidArgumentError(
          absl::StrCat("data_scan: option '", k, "' has the wrong type (",
                       std::string(py::str(value.get_type().attr("__name__"))), ")")));
    }
  }
  r.format = ParseFormat(format);
  if (exact_only) o.near_dup = o.language = o.noise = false;
  ThrowIfError(data::ParseFailOn(fail_on, &o));
  std::unique_ptr<tokenizer::Tokenizer> tok;
  if (!tokenizer_path.empty() && tokenizer_path != "byte") {  // as the CLI's --tokenizer
    ThrowIfError(CheckRegularFile(tokenizer_path, "a SentencePiece model is read whole"));
    tok = ValueOrThrow(tokenizer::LoadTokenizer(tokenizer_path));
    o.tokenizer = tok.get();
  }
  return JsonCall([&]() -> absl::StatusOr<Json> {
    auto inputs = data::ExpandInputs(paths, o.reader.format);
    if (!inputs.ok()) return inputs.status();
    auto res = data::RunScan(*inputs, o);
    if (!res.ok()) return res.status();
    return data::ScanResultToJson(*res, o);
  });
}

py::object Diagnose(const std::vector<std::string>& paths, const std::string& rules) {
  if (paths.empty()) {
    throw StatusError(absl::InvalidArgumentError("diagnose: give at least one path"));
  }
  diagnose::Options o;
  o.rules_file = rules;
  return JsonCall([&]() -> absl::StatusOr<Json> {
    auto rep = diagnose::Diagnose(paths, o);
    if (!rep.ok()) return rep.status();
    return diagnose::ReportToJson(*rep);
  });
}

py::object EnvFingerprint(int timeout_ms) {
  env::FingerprintOptions o;
  o.tool_timeout = std::chrono::milliseconds(timeout_ms);
  return JsonCall([&]() { return env::Fingerprint(Os::Default(), o); });
}

py::object HangAnalyze(const std::vector<std::string>& paths, int mismatch_cap) {
  if (paths.empty()) {
    throw StatusError(absl::InvalidArgumentError("hang_analyze: give at least one path"));
  }
  hang::AnalyzeOptions o;
  o.mismatch_cap = mismatch_cap;
  return JsonCall([&]() -> absl::StatusOr<Json> {
    auto rep = hang::AnalyzePaths(paths, o);
    if (!rep.ok()) return rep.status();  // no dump at all is an error there, as in the CLI
    return hang::ReportToJson(*rep);
  });
}

py::object CkptInspect(const std::vector<std::string>& paths, bool with_tensors) {
  return JsonCall([&]() -> absl::StatusOr<Json> {
    auto reports = ckpt::InspectPaths(paths, ckpt::InspectOptions{});
    if (!reports.ok()) return reports.status();
    return ckpt::ReportsToJson(*reports, with_tensors);
  });
}

py::object CkptDiff(const std::string& a, const std::string& b) {
  ckpt::InspectOptions o;
  o.hash = false;  // as the CLI
  return JsonCall([&]() -> absl::StatusOr<Json> {
    auto d = ckpt::Diff(a, b, o);
    if (!d.ok()) return d.status();
    return ckpt::DiffToJson(*d);
  });
}

// A str or a list of str (the CLI takes several paths; a lone path is the common case).
std::vector<std::string> Paths(const py::object& p, const char* what) {
  if (py::isinstance<py::str>(p)) return {p.cast<std::string>()};
  try {
    return p.cast<std::vector<std::string>>();
  } catch (const py::cast_error&) {
    throw StatusError(
        absl::InvalidArgumentError(absl::StrCat(what, ": paths must be a str or a list of str")));
  }
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() =
      "trainscope's native module: the analyses as dicts (same as the CLI's --json), "
      "checkpoint primitives, the flight recorder and the NaN tracer's classifier. Errors raise "
      "trainscope._core.Error.";
  RegisterError(m);
  m.def(
      "version", [] { return std::string(TS_VERSION); }, "trainscope's version string.");
  m.def(
      "trace_analyze",
      [](const py::object& paths, double gap_threshold_pct, int top, bool strict,
         bool include_last_step, bool ns_precision) {
        return TraceAnalyze(Paths(paths, "trace_analyze"), gap_threshold_pct, top, strict,
                            include_last_step, ns_precision);
      },
      py::arg("paths"), py::kw_only(), py::arg("gap_threshold_pct") = 20.0, py::arg("top") = 10,
      py::arg("strict") = false, py::arg("include_last_step") = false,
      py::arg("ns_precision") = false,
      "Profiler traces (files or directories, one per rank) -> the dict of `trainscope trace "
      "analyze --json`. Options as the CLI's flags: gap_threshold_pct, top, strict, "
      "include_last_step, ns_precision.");
  m.def(
      "data_scan",
      [](const py::object& paths, const py::kwargs& kw) {
        return DataScan(Paths(paths, "data_scan"), kw);
      },
      py::arg("paths"),
      "Corpus files, directories or globs -> the dict of `trainscope data scan --json`. "
      "Options (keywords, as the CLI's flags with '_' for '-'): format, text_field, id_field, "
      "blocks, max_doc_bytes, seq_len, batch_size, threshold, verdicts, threads, ngram, bands, "
      "rows, seed, shuffle_seed, c4_min_sentences, tmp_dir, near_dup, language, noise, "
      "exact_only, fail_on, tokenizer (a SentencePiece .model or HuggingFace tokenizer.json; "
      "default byte-level); mmap=False by default (True maps uncompressed JSONL: faster, but "
      "a file truncated during the scan then kills the process with SIGBUS).");
  m.def(
      "diagnose",
      [](const py::object& paths, const std::string& rules) {
        return Diagnose(Paths(paths, "diagnose"), rules);
      },
      py::arg("paths"), py::kw_only(), py::arg("rules") = "",
      "Run directories, folders of logs or log files -> the dict of `trainscope diagnose "
      "--json`. rules: a rule file instead of the bundled one.");
  m.def("env_fingerprint", &EnvFingerprint, py::kw_only(), py::arg("timeout_ms") = 2000,
        "This machine -> the dict of `trainscope env fingerprint --json` (timeout_ms: limit per "
        "probe program). Starts child programs (nvidia-smi, python3 for the torch version, ...).");
  m.def(
      "hang_analyze",
      [](const py::object& paths, int mismatch_cap) {
        return HangAnalyze(Paths(paths, "hang_analyze"), mismatch_cap);
      },
      py::arg("paths"), py::kw_only(), py::arg("mismatch_cap") = 10,
      "Flight recorder dumps (run directories, folders or files) -> the dict of `trainscope "
      "hang analyze --json`. Raises Error when no dump could be read.");
  m.def(
      "ckpt_inspect",
      [](const py::object& paths) { return CkptInspect(Paths(paths, "ckpt_inspect"), true); },
      py::arg("paths"),
      "Checkpoints (or folders of them) -> the dict of `trainscope ckpt inspect --json`: "
      "{'ok', 'checkpoints': [...]} with per-tensor statistics.");
  m.def(
      "ckpt_verify",
      [](const py::object& paths) { return CkptInspect(Paths(paths, "ckpt_verify"), false); },
      py::arg("paths"),
      "Checkpoints (or folders of them) -> the dict of `trainscope ckpt verify --json`: "
      "{'ok': False when any hash, size, header or value is wrong, 'checkpoints': [...]}.");
  m.def("ckpt_diff", &CkptDiff, py::arg("a"), py::arg("b"),
        "Two checkpoints -> the dict of `trainscope ckpt diff --json`.");
  // One writer per run directory (core/run_dir_lock.h), for watch / record / checkpoint.save.
  py::class_<run_dir::RunDirLock>(m, "RunDirLock",
                                  "A held (or joined) run-directory lock; release() or "
                                  "garbage collection releases it.")
      .def_property_readonly("holds", &run_dir::RunDirLock::holds,
                             "True: this process holds the flock; False: it joined its "
                             "job's holder, or was released.")
      .def_property_readonly("dir", &run_dir::RunDirLock::dir)
      .def_property_readonly("holder_pid",
                             [](const run_dir::RunDirLock& l) { return l.holder().pid; })
      .def_property_readonly("job_id",
                             [](const run_dir::RunDirLock& l) { return l.holder().job_id; })
      .def("release", &run_dir::RunDirLock::Release);
  m.def(
      "lock_run_dir",
      [](const std::string& dir, const std::optional<std::string>& job_id,
         const std::string& command) {
        run_dir::LockOptions o;
        o.job_id = job_id ? *job_id : run_dir::CurrentJobId();
        o.command = command;
        absl::StatusOr<run_dir::RunDirLock> l;
        {
          py::gil_scoped_release nogil;
          l = run_dir::LockRunDir(dir, o);
        }
        return ValueOrThrow(std::move(l));
      },
      py::arg("dir"), py::kw_only(), py::arg("job_id") = py::none(), py::arg("command") = "",
      "Creates run directory `dir` and takes its lock (<dir>/LOCK, flock), as `trainscope "
      "train` does -> RunDirLock. job_id: this process's job (default: job_id()); a holder "
      "of the same non-empty job is joined. command: recorded for a refused writer to quote "
      "(default: this process's command line). Raises Error \"DIR is in use by pid P "
      "(COMMAND); ...\" when another writer holds it.");
  m.def("job_id", &run_dir::CurrentJobId,
        "This process's job identity for the run-directory lock (TRAINSCOPE_JOB_ID, else the "
        "rendezvous endpoint of a world of more than one process, ...; docs/formats.md); '' "
        "for a process of its own.");
  RegisterCheckpoint(m);
  RegisterFlightRecorder(m);
  RegisterNonfinite(m);
  RegisterTensorBoard(m);
  RegisterRunDir(m);
}

}  // namespace trainscope::python
