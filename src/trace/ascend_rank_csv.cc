// torch_npu CSVs: the shared CSV helpers, step_trace_time.csv and kernel_details.csv.
#include "trace/ascend_rank_csv.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "trace/ascend_rank.h"
#include "trainscope/core/status.h"

namespace trainscope::trace::internal {

std::vector<std::vector<std::string>> ParseCsv(const std::string& text) {
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> row;
  std::string cell;
  bool q = false;
  auto end_cell = [&] {
    row.push_back(std::string(absl::StripAsciiWhitespace(cell)));
    cell.clear();
  };
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (q) {
      if (c == '"') {
        if (i + 1 < text.size() && text[i + 1] == '"') {
          cell += '"';
          ++i;
        } else {
          q = false;
        }
      } else {
        cell += c;
      }
    } else if (c == '"') {
      q = true;
    } else if (c == ',') {
      end_cell();
    } else if (c == '\n') {
      end_cell();
      rows.push_back(std::move(row));
      row.clear();
    } else if (c != '\r') {
      cell += c;
    }
  }
  if (!cell.empty() || !row.empty()) {
    end_cell();
    rows.push_back(std::move(row));
  }
  return rows;
}

absl::StatusOr<std::string> SlurpFile(const std::string& path, Os* os) {
  absl::StatusOr<std::string> bytes = os->ReadFile(path);
  if (!bytes.ok()) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  return bytes;
}

int CsvCol(const std::vector<std::string>& header, std::initializer_list<const char*> names) {
  for (const char* n : names) {
    for (size_t i = 0; i < header.size(); ++i)
      if (header[i] == n) return static_cast<int>(i);
  }
  return -1;
}

std::string CsvCell(const std::vector<std::string>& row, int col) {
  return (col >= 0 && col < static_cast<int>(row.size())) ? row[col] : std::string();
}

bool ValidUs(double us) { return std::isfinite(us) && us >= 0 && us <= kMaxDurNs / 1e3; }

double CsvNum(const std::vector<std::string>& row, int col, bool* ok, bool* bad) {
  double v = 0;
  if (col < 0 || col >= static_cast<int>(row.size()) || row[col] == "N/A" || row[col].empty() ||
      !absl::SimpleAtod(row[col], &v)) {
    *ok = false;
    return 0;
  }
  if (!ValidUs(v)) {
    *bad = true;
    return 0;
  }
  return v;
}

bool ValidStep(double v) {
  return std::isfinite(v) && v >= 0 && v <= 9007199254740992.0 && v == std::floor(v);
}

void CsvBadRow(RankTrace* t, int64_t* counter, const std::string& path, int64_t line,
               const char* why) {
  ++*counter;
  size_t s = path.rfind('/');
  if (t->stats.warnings.size() < 20)
    t->stats.warnings.push_back(absl::StrCat(s == std::string::npos ? path : path.substr(s + 1),
                                             ": line ", line, ": ", why));
}

void AddKernelFacts(const std::string& name, const std::string& type, const std::string& core,
                    const std::string& dtypes, const std::string& shapes, double dur_us,
                    AscendRankData* d) {
  if (core == "HCCL" || core == "COMMUNICATION") return;
  ++d->kernel_tasks;
  d->kernel_total_us += dur_us;
  if (!type.empty() && type != "N/A" && !shapes.empty() && shapes != "N/A") {
    auto& set = d->shapes_by_type[type];
    if (set.size() < AscendRankData::kMaxShapesPerType) set.insert(shapes);
  }
  if (core != "AI_CPU") return;
  for (AscendAiCpuOp& op : d->ai_cpu) {
    if (op.name == name && op.type == type && op.dtypes == dtypes) {
      ++op.count;
      op.total_us += dur_us;
      op.max_us = std::max(op.max_us, dur_us);
      return;
    }
  }
  if (d->ai_cpu.size() < 1000) d->ai_cpu.push_back({name, type, dtypes, 1, dur_us, dur_us});
}

absl::Status ReadStepTraceCsv(const std::string& path, RankTrace* t, Os* os) {
  TS_ASSIGN_OR_RETURN(std::string text, SlurpFile(path, os));
  auto rows = ParseCsv(text);
  if (rows.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": line 1: empty"));
  const auto& h = rows[0];
  int c_step = CsvCol(h, {"Step"}), c_comp = CsvCol(h, {"Computing"}),
      c_cno = CsvCol(h, {"Communication(Not Overlapped)"}), c_ov = CsvCol(h, {"Overlapped"}),
      c_comm = CsvCol(h, {"Communication"}), c_free = CsvCol(h, {"Free"}),
      c_stage = CsvCol(h, {"Stage"}), c_bub = CsvCol(h, {"Bubble"}),
      c_prep = CsvCol(h, {"Preparing"});
  if (c_comp < 0 || c_free < 0 || c_cno < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(path,
                     ": line 1: not a step_trace_time.csv (needs Computing, "
                     "Communication(Not Overlapped), Free columns)"));
  }
  static const std::set<std::string> kKnown = {
      "Device_id",  "Step",
      "Computing",  "Communication(Not Overlapped)",
      "Overlapped", "Communication",
      "Free",       "Stage",
      "Bubble",     "Communication(Not Overlapped and Exclude Receive)",
      "Preparing"};
  for (const std::string& c : h)
    if (!kKnown.count(c)) AscendData(t)->unknown_columns["step_trace_time.csv"].push_back(c);
  for (size_t i = 1; i < rows.size(); ++i) {
    const auto& r = rows[i];
    if (r.size() <= 1 && (r.empty() || r[0].empty())) continue;
    bool ok = true, bad = false;
    AscendStepRow s;
    // The step column is optional ("N/A" or absent: -1); a number there must be a step number.
    double step = -1;
    if (c_step >= 0 && c_step < static_cast<int>(r.size()) && !r[c_step].empty() &&
        r[c_step] != "N/A" && (!absl::SimpleAtod(r[c_step], &step) || !ValidStep(step)))
      bad = true;
    s.step = bad ? -1 : static_cast<int64_t>(step);
    s.computing_us = CsvNum(r, c_comp, &ok, &bad);
    s.comm_not_overlapped_us = CsvNum(r, c_cno, &ok, &bad);
    s.free_us = CsvNum(r, c_free, &ok, &bad);
    bool opt = true;
    s.overlapped_us = CsvNum(r, c_ov, &opt, &bad);
    s.comm_us = CsvNum(r, c_comm, &opt, &bad);
    s.stage_us = CsvNum(r, c_stage, &opt, &bad);
    s.bubble_us = CsvNum(r, c_bub, &opt, &bad);
    s.preparing_us = CsvNum(r, c_prep, &opt, &bad);
    if (!ok) {
      CsvBadRow(t, &t->stats.malformed, path, static_cast<int64_t>(i + 1), "bad row");
      continue;
    }
    if (bad) {
      CsvBadRow(t, &t->stats.bad_values, path, static_cast<int64_t>(i + 1),
                "a step that is not an integer, or a time that is negative, non-finite or > 7 "
                "days");
      continue;
    }
    t->ascend_steps.push_back(s);
  }
  return absl::OkStatus();
}

namespace {
// kernel_details.csv columns across torch_npu versions (the documented ones, plus the PMU
// counters aic_*/aiv_*); any other is listed as unknown.
const std::set<std::string>& KernelColumns() {
  static const std::set<std::string> k = {
      "Step Id",       "Device_id",         "Model ID",
      "Task ID",       "Stream ID",         "Name",
      "Type",          "OP State",          "Accelerator Core",
      "Task Type",     "Start Time(us)",    "Duration(us)",
      "Wait Time(us)", "Block Dim",         "Block Num",
      "Mix Block Dim", "Mix Block Num",     "HF32 Eligible",
      "Input Shapes",  "Input Data Types",  "Input Formats",
      "Output Shapes", "Output Data Types", "Output Formats",
      "Context ID",    "aicore_time(us)",   "cube_utilization(%)"};
  return k;
}
}  // namespace

absl::Status ReadKernelDetailsCsv(const std::string& path, bool timeline_has_device, RankTrace* t,
                                  Os* os) {
  TS_ASSIGN_OR_RETURN(std::string text, SlurpFile(path, os));
  auto rows = ParseCsv(text);
  if (rows.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": line 1: empty"));
  const auto& h = rows[0];
  int c_name = CsvCol(h, {"Name"}), c_type = CsvCol(h, {"Type"}),
      c_core = CsvCol(h, {"Accelerator Core", "Task Type"}),
      c_start = CsvCol(h, {"Start Time(us)"}), c_dur = CsvCol(h, {"Duration(us)"}),
      c_shapes = CsvCol(h, {"Input Shapes"}), c_types = CsvCol(h, {"Input Data Types"}),
      c_stream = CsvCol(h, {"Stream ID"}), c_state = CsvCol(h, {"OP State"});
  if (c_name < 0 || c_start < 0 || c_dur < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": line 1: not a kernel_details.csv (needs Name, Start Time(us), Duration(us))"));
  }
  AscendRankData* d = AscendData(t);
  for (const std::string& c : h)
    if (!KernelColumns().count(c) && !absl::StartsWith(c, "aic_") && !absl::StartsWith(c, "aiv_"))
      d->unknown_columns["kernel_details.csv"].push_back(c);
  uint32_t pid = t->strings.Intern("kernel_details.csv");
  for (size_t i = 1; i < rows.size(); ++i) {
    const auto& r = rows[i];
    const int64_t line = static_cast<int64_t>(i + 1);
    if (r.size() <= 1) continue;
    if (r.size() < h.size()) {  // a cut last line, or a row that lost cells
      CsvBadRow(t, &t->stats.malformed, path, line, "row shorter than the header");
      continue;
    }
    int64_t ts = 0, dur = 0;
    if (static_cast<int>(r.size()) <= std::max(c_start, c_dur) || r[c_start].empty() ||
        r[c_dur].empty() || r[c_start] == "N/A" || r[c_dur] == "N/A") {
      CsvBadRow(t, &t->stats.missing_fields, path, line, "row without start or duration");
      continue;
    }
    if (!ParseUsToNs(r[c_start], &ts) || ts < kMinTsNs || ts > kMaxTsNs) {
      CsvBadRow(t, &t->stats.bad_ts, path, line, "start time that is not a number in range");
      continue;
    }
    if (!ParseUsToNs(r[c_dur], &dur)) {
      CsvBadRow(t, &t->stats.bad_dur, path, line, "duration that is not a number");
      continue;
    }
    if (dur < 0 || dur > kMaxDurNs) {
      CsvBadRow(t, &t->stats.negative_or_huge_dur, path, line, "negative or > 7 day duration");
      continue;
    }
    Event e;
    e.ts_ns = ts;
    e.dur_ns = dur;
    e.name = t->strings.Intern(CsvCell(r, c_name));
    e.pid = pid;
    std::string stream = CsvCell(r, c_stream);
    int32_t s = -1;
    e.stream = absl::SimpleAtoi(stream, &s) ? s : 0;
    e.tid = t->strings.Intern(stream);
    e.cat = Category::kKernel;
    e.flags = kFlagDevice;
    if (timeline_has_device) e.flags |= kFlagFromCsv;
    std::string shapes = CsvCell(r, c_shapes);
    if (!shapes.empty() && shapes != "N/A") e.input_dims = t->strings.Intern(shapes);
    if (absl::StrContains(CsvCell(r, c_types), "DOUBLE")) e.flags |= kFlagFloat64;
    std::string core = CsvCell(r, c_core), type = CsvCell(r, c_type);
    std::string state = absl::AsciiStrToLower(CsvCell(r, c_state));
    if (state == "static") ++d->op_state_static;
    if (state == "dynamic") ++d->op_state_dynamic;
    if (core == "AI_CPU") e.flags |= kFlagAiCpu;
    AddKernelFacts(CsvCell(r, c_name), type, core, CsvCell(r, c_types), shapes, dur / 1e3, d);
    if (core == "HCCL" || core == "COMMUNICATION" || absl::StartsWithIgnoreCase(type, "hcom"))
      e.kind = DeviceKind::kComm;
    else if (absl::StrContains(type, "MEMCPY") || absl::StrContains(core, "SDMA"))
      e.kind = DeviceKind::kMemory;
    else
      e.kind = ClassifyAscendName(CsvCell(r, c_name));
    t->events.push_back(e);
    ++t->stats.events_kept;
  }
  return absl::OkStatus();
}

}  // namespace trainscope::trace::internal
