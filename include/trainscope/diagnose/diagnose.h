// `trainscope diagnose PATH...`: reads every piece of evidence under the paths (metrics logs
// of trainscope runs and of the user's own jobs, trainscope reports that carry findings),
// classifies each loss curve (curve.h), turns the evidence into facts and evaluates the rule
// file (rules.h) on them, and ranks all findings together: most severe first, then the most
// specific (the rule file's order: a fixed-step NaN before a generic plateau; document
// findings no rule absorbed after the rules' findings).
//
// Inputs (docs/formats.md "Diagnose inputs"):
//   - files: metrics JSONL / CSV / trainer_state.json / trainscope metrics (series.h), and
//     trainscope documents with findings: env check (trainscope.env.check), trace analysis
//     (trainscope.trace.analysis), doctor report (trainscope.doctor: failed and warned
//     checks), hang analysis (hang/analysis.json); documents that give facts: data scan
//     (trainscope.data.scan), environment fingerprint (trainscope.env.fingerprint), ckpt
//     verify --json; checkpoint folders (<run>/checkpoints/step-<N>: listed, never read
//     whole: a step directory without manifest.json, a .tmp- save);
//   - folders, walked recursively (in name order, at most 8 levels): files of any other kind
//     are listed as skipped with the reason, never an error.
// Errors: the rule file's errors (rules.h LoadRules); NotFound for a path that does not exist;
// InvalidArgument naming the file for a file given by name whose kind is unknown or that holds no
// usable record; InvalidArgument when the paths hold no evidence at all. A bad record inside a file
// is counted, not an error. Thread-safety: pure function of the files read.
#ifndef TRAINSCOPE_DIAGNOSE_DIAGNOSE_H_
#define TRAINSCOPE_DIAGNOSE_DIAGNOSE_H_

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json_fwd.hpp"
#include "trainscope/core/finding.h"
#include "trainscope/core/os.h"
#include "trainscope/diagnose/curve.h"
#include "trainscope/diagnose/series.h"

namespace trainscope::diagnose {

struct Options {
  CurveOptions curve;
  std::string rules_file;  // a rule file (rules.h); "" = the bundled rules
  // For a caller that needs the same files (the report, report/collect.cc), so that each is
  // read once: called for every file diagnose reads, on the calling thread, in walk order,
  // with its bytes and, when diagnose parsed it as a JSON document, that document (else
  // nullptr); both valid during the call only. Not called for what diagnose only lists
  // (checkpoint folders). Empty: nobody is told.
  std::function<void(const std::string& path, std::string_view bytes, const nlohmann::json* doc)>
      on_file;
  // The file system the paths are walked and read in (a FakeOs in tests).
  Os* os = Os::Default();
};

// One metrics series and its class.
struct RunResult {
  std::string path, format;
  int rank = -1;
  size_t loss_points = 0, val_points = 0;
  int64_t first_step = 0, last_step = 0;
  int64_t bad_records = 0, repeated_steps = 0;
  std::string first_bad, end_reason;
  CurveResult curve;
};

struct SkippedFile {
  std::string path, reason;
};

struct Report {
  std::vector<RunResult> runs;
  std::vector<Finding> findings;       // ranked
  std::vector<std::string> documents;  // trainscope reports whose findings were taken
  std::vector<SkippedFile> skipped;    // files of unknown kinds, or unreadable
  // Known files of a folder that hold nothing to diagnose, counted rather than listed:
  // "logs" (a rank's stdout.log / stderr.log, doctor's *.stdout / *.stderr, hang stacks, any
  // *.log, *.out, *.err without Megatron-LM iteration lines), "lock" (a run directory's
  // LOCK), "hang_dumps" (flight_recorder.rank<R>.*, for `hang analyze`) and, by format,
  // trainscope documents without findings or facts ("trainscope.launch": launch.json).
  std::map<std::string, int> not_needed;
  bool has_error() const;
};

absl::StatusOr<Report> Diagnose(const std::vector<std::string>& paths, const Options& options = {});

// The ranked findings (Report::findings).
std::vector<Finding> FindingsFrom(const Report& report);

// {"format": "trainscope.diagnose", "version": 1, "findings": [Finding...], "runs": [{"path",
// "format", "rank", "loss_points", "val_points", "first_step", "last_step", "bad_records",
// "repeated_steps", "curve": {"class", "first_bad_step", "nan_step", "nan_after_divergence",
// "spike_steps", "evidence": {...}, "fix"}}], "documents": [...], "skipped": [{"path",
// "reason"}], "not_needed": {"logs": N, ...}, "errors", "warnings"}.
nlohmann::json ReportToJson(const Report& report);

// One sentence per finding first, then a table of the runs (120 columns), then evidence and
// fix per finding, then the skipped files.
std::string ReportToText(const Report& report);

}  // namespace trainscope::diagnose

#endif  // TRAINSCOPE_DIAGNOSE_DIAGNOSE_H_
