// The `trainscope data` verbs, one call each: what a verb does between parsing its flags and
// printing its report. A corpus verb loads the tokenizer, expands the inputs, joins the world
// (--distributed: comm/join.h), runs scan.h / clean.h / pack.h / compare.h, renders the
// report (text, or JSON) and says whether the check found problems; `stats` does the same for
// feature_stats.h.
//
// Nothing here prints, installs a signal handler or changes where progress goes: the
// executable prints VerbResult, turns it into an exit code (0; 1 problems; 2 strict_error or
// an error status), and keeps the process settings (the stop signals that remove temporary
// files, where the communicator's notices go, the progress sink of ranks other than 0)
// through DistributedRun's hooks.
// Each call blocks for the whole verb (in collectives up to the comm timeout each, when
// distributed). Main thread only.
#ifndef TRAINSCOPE_DATA_VERBS_H_
#define TRAINSCOPE_DATA_VERBS_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainscope/comm/comm.h"
#include "trainscope/data/clean.h"
#include "trainscope/data/compare.h"
#include "trainscope/data/distributed.h"
#include "trainscope/data/pack.h"
#include "trainscope/data/reader.h"
#include "trainscope/data/scan.h"

namespace trainscope::data {

// --distributed (scan and clean): this process is one rank of a job started by `trainscope
// launch`, torchrun, srun or mpirun (comm/join.h); only rank 0 reports.
struct DistributedRun {
  bool on = false;
  std::string backend = "gloo";  // gloo | mpi
  double timeout_s = 3600;       // ranks wait in collectives while the slowest finishes its share
  bool merge = false;            // clean: rank 0 joins the ranks' outputs into the output
  DistributedOptions options;
  // The executable's hooks, each may be empty: before this rank connects, and once it has
  // joined (ranks other than 0 show no progress); where the communicator's notices go and
  // how a stuck mpi op ends (comm.h).
  std::function<void()> before_connect;
  std::function<void(const comm::Communicator& world)> on_joined;
  comm::CommHost comm_host;
};

// What the corpus verbs share.
struct CorpusRun {
  std::vector<std::string> inputs;  // files, directories or globs (ExpandInputs)
  ReaderOptions reader;
  // "" or "byte": byte-level; else a SentencePiece .model or a HuggingFace tokenizer.json,
  // which must be a regular file (a directory or /dev/zero is an InvalidArgument, not a read
  // until memory runs out).
  std::string tokenizer;
  bool strict = false;  // bad records are an error (strict_error)
  bool json = false;    // the report as JSON
  DistributedRun distributed;
};

struct VerbResult {
  std::string output;  // the report: text, or JSON and a newline; "" on ranks other than 0
  // --strict and bad records were counted: "<N> bad record(s); first: <where>" (after the
  // output, exit 2).
  std::string strict_error;
  bool problems = false;  // the check found problems (exit 1)
};

// `data scan`: problems when options.fail and ScanProblems is not empty. Errors: the
// tokenizer's, ExpandInputs' (distributed: naming the rank and its host), the join's, RunScan's
// or RunDistributedScan's.
absl::StatusOr<VerbResult> RunScanVerb(const CorpusRun& run, ScanOptions options);
// `data clean` (run.strict also makes a bad record an error before anything is written).
// Errors: as RunScanVerb, RunClean's or RunDistributedClean's.
absl::StatusOr<VerbResult> RunCleanVerb(const CorpusRun& run, CleanOptions options);
// `data pack` (the tokenizer defaults to byte-level; never distributed). Errors: the
// tokenizer's, ExpandInputs', RunPack's.
absl::StatusOr<VerbResult> RunPackVerb(const CorpusRun& run, PackOptions options);
// `data compare REFERENCE CANDIDATE`: problems when the candidate does not cover the
// reference. run.inputs, strict and distributed are not used. Errors: the tokenizer's,
// CompareCorpora's.
absl::StatusOr<VerbResult> RunCompareVerb(const std::string& reference,
                                          const std::string& candidate, const CorpusRun& run,
                                          CompareOptions options);
// `data stats FILE`: problems when a column holds NaN or Inf. InvalidArgument when `path` is
// not a regular file (the formats need its size); FeatureStatsOfFile's errors.
absl::StatusOr<VerbResult> RunStatsVerb(const std::string& path, bool json);

}  // namespace trainscope::data

#endif  // TRAINSCOPE_DATA_VERBS_H_
