// `trainscope compare A B`: precision alignment of two msprobe dumps (GPU vs NPU, before
// vs after an upgrade): entries matched by name, then by structure, metrics per tensor as
// msprobe's compare computes them, pass / warning / error by msprobe's rules, and the first
// divergence by data flow. Formulas and thresholds: docs/cli.md "compare".
//
// Contract:
//  - A and B are paths at any level (dump root, step folder, rank folder); their dump
//    folders are paired by step and rank name, else in order when each side has one.
//  - Matching, per pair: identical entry names (after Options::mapping's renames), then for
//    the entries left over, in execution order, the k-th entry of one structural key on A
//    with the k-th of the same key on B; the key is the prefix, API name or module class,
//    direction and the number of rows (call indices and module paths may differ).
//  - Bad input is counted and named, never fatal while a side has something readable:
//    a dump.json cut short, missing or unreadable tensor files, different frameworks.
//    Errors: NotFound / InvalidArgument naming the path when a side has no readable dump.
//  - Pure function of the files; thread-safe.
#ifndef TRAINSCOPE_COMPARE_COMPARE_H_
#define TRAINSCOPE_COMPARE_COMPARE_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "trainscope/compare/dump.h"
#include "trainscope/core/finding.h"

namespace trainscope::compare {

enum class Mode { kStatistics, kTensor, kMd5 };
const char* ModeName(Mode m);  // "statistics", "tensor", "md5"

struct Options {
  // Renames applied to A's entry names before matching: each pair replaces the first
  // occurrence of `from` in a name with `to` (longest `from` first).
  std::vector<std::pair<std::string, std::string>> mapping;
  // A tensor differs (for the first divergence) when its error exceeds `rtol`: statistics
  // mode, the largest relative error of Max, Min and Norm, and of Mean against the
  // tensor's scale; tensor mode, MaxAbsErr over the bench's largest magnitude, or a
  // Cosine under `cosine`; md5 mode, a different CRC.
  double rtol = 1e-3;
  double cosine = 0.99;
  // The first op's inputs come from outside the model (data, seed, weights): they agree
  // only within `input_rtol` (reduction order may change Mean and Norm in the last bits).
  double input_rtol = 1e-5;
  int top = 10;  // rows of the worst-entries table
};

// Reads the files of a mapping (--mapping): JSON {"a": "b", ...} or the YAML subset
// `a: b` per line (`#` comments, optional quotes). InvalidArgument "<path>: line N: ...".
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ReadMapping(
    const std::string& path);

// One matched pair of rows with its metrics. Numbers that do not apply are NaN, with the
// reason in `message`; `csv` holds msprobe's text of each compare column.
struct RowCompare {
  const Tensor* a = nullptr;  // never null
  const Tensor* b = nullptr;  // null: no bench row
  // Statistics: A - B of Max, Min, Mean, Norm and |A - B| / |B| (NaN when B is 0 or either
  // is missing; msprobe prints those as "N/A" / "inf").
  double diff[4], rel[4];
  // Tensor mode: Cosine, EucDist, MaxAbsErr, MaxRelativeErr, One Thousandth Err Ratio,
  // Five Thousandths Err Ratio (NaN: not computed; see `message`).
  double metric[6];
  // msprobe's text of the compare columns: Max diff .. NormRelativeErr (statistics), the six
  // metrics (tensor mode): "0", "12.5%", "inf", "N/A", "Nan", "unsupported", ...
  std::string stat_text[8];
  std::string metric_text[6];
  bool tensors_read = false;  // tensor mode: both files read
  double error = 0;           // the divergence measure of Options::rtol (0 when equal)
  bool differs = false;
  // Inputs in two float dtypes agree within the narrower one's rounding (2^-8 bfloat16,
  // 2^-11 float16): that tolerance, 0 when the dtypes are equal.
  double cast_tolerance = 0;
  bool nonfinite_a = false, nonfinite_b = false;  // NaN/Inf in Max or Min
  std::string result;                 // "pass", "warning", "error" (msprobe's rules), "" unmatched
  std::vector<std::string> messages;  // msprobe's Err_message items (its checkers' words)
  std::vector<std::string> notes;     // why a metric was not computed, files not read
};

struct EntryCompare {
  const Entry* a = nullptr;
  const Entry* b = nullptr;  // null: unmatched
  std::string how;           // "name", "mapping", "structure"
  std::vector<RowCompare> rows;
  std::string result;  // worst row result
  double input_error = 0, output_error = 0;
  bool inputs_differ = false, outputs_differ = false;
  bool inputs_differ_strict = false;  // an input row off by more than Options::input_rtol
};

struct FirstDivergence {
  std::string name;  // A's entry name
  std::string b_name;
  std::string kind;                // "input" or "output"
  std::string module;              // construct.json's enclosing module ("" at the top)
  std::vector<std::string> stack;  // stack.json's frames
  std::string step, rank;
  bool communication = false;  // a Distributed.* op turned agreeing inputs into differing outputs
  const EntryCompare* entry = nullptr;
  std::string meaning;  // one sentence: what it means and what to try
};

struct PairReport {
  Dump a, b;
  Mode mode = Mode::kStatistics;
  std::vector<EntryCompare> entries;  // A's order; B's unmatched entries are not here
  std::vector<std::string> unmatched_a, unmatched_b;
  int matched = 0;
  int tensor_files_missing = 0, tensor_files_unreadable = 0;
  std::vector<std::string> tensor_file_errors;  // the first few, naming the files
  bool has_divergence = false;
  FirstDivergence first;  // valid when has_divergence
};

// Rows, entries and first_pair point into the report's own vectors: move a Report, never
// copy it.
struct Report {
  std::string path_a, path_b;
  std::vector<PairReport> pairs;
  std::vector<std::string> unpaired_a, unpaired_b;  // dump folders without a partner
  std::vector<Finding> findings;  // bad input and the divergence, most severe first
  int matched = 0;
  bool diverged = false;
  const PairReport* first_pair = nullptr;  // the pair of the first divergence, or null
};

// Compares the dumps under `a` and `b`. Errors: those of FindDumps; InvalidArgument
// "<path>: ..." when every dump.json of a side is unreadable.
absl::StatusOr<Report> CompareDumps(const std::string& a, const std::string& b,
                                    const Options& options);

// The same for two dumps already read (tests, the Python binding).
PairReport ComparePair(Dump a, Dump b, const Options& options);

// The metrics of two tensors' values, msprobe's definitions (docs/cli.md): `metric` as in
// RowCompare::metric; `message` gets msprobe's reason for each one not computed; `scale`
// (when not null) the largest magnitude of either side's finite values, once both passed the
// NaN/Inf position check (0 otherwise).
void TensorMetrics(const TensorData& a, const TensorData& b, double metric[6],
                   std::vector<std::string>* messages, double* scale = nullptr);

// --json: {"format": "trainscope.compare", "version", "matched", "unmatched": {"a", "b"},
// "first_divergence": null | {...}, "entries": [...], "inputs", "findings"}.
nlohmann::json ReportToJson(const Report& report);
// The table of the first divergence and the top-N worst entries grouped by module (120
// columns), and the sentence of what to try.
std::string FormatReportText(const Report& report, int top);
// msprobe's compare_result csv (the header of its mode, with NPU = A and Bench = B).
std::string ReportToCsv(const Report& report);
// Severity-ordered findings (bad input, the divergence).
std::vector<Finding> FindingsFrom(const Report& report);

}  // namespace trainscope::compare

#endif  // TRAINSCOPE_COMPARE_COMPARE_H_
