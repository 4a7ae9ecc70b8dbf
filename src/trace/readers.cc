// Input dispatch (Chrome trace, torch_npu directory or CSVs, phase logs) and the small readers.
// Every file is looked at and read through an Os (ReadOptions::os), so tests can use a FakeOs.
#include <algorithm>
#include <cctype>
#include <climits>
#include <cmath>
#include <map>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "trace/ascend_rank.h"
#include "trace/ascend_rank_csv.h"
#include "trace/chrome_reader.h"
#include "trainscope/core/json_text.h"
#include "trainscope/core/paths.h"
#include "trainscope/core/run_dir.h"
#include "trainscope/core/status.h"
#include "trainscope/core/utf8.h"
#include "trainscope/trace/trace.h"

namespace trainscope::trace {
namespace {

std::string Base(std::string_view p) { return BaseName(p); }

bool IsTraceFileName(const std::string& n) {
  return absl::EndsWith(n, ".json") || absl::EndsWith(n, ".json.gz") || absl::EndsWith(n, ".jsonl");
}
// j[key] when it is an integer in [0, INT_MAX] (nlohmann's get<int> would wrap larger ones).
bool SmallInt(const nlohmann::json& j, const char* key, int* out) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer()) return false;
  if (it->is_number_unsigned()) {
    uint64_t v = it->get<uint64_t>();
    if (v > static_cast<uint64_t>(INT_MAX)) return false;
    *out = static_cast<int>(v);
    return true;
  }
  int64_t v = it->get<int64_t>();
  if (v < 0 || v > INT_MAX) return false;
  *out = static_cast<int>(v);
  return true;
}

// trainscope phase log: one JSON object per line, {"step": N, "phases": {"data_wait_ms": ..}}
// or the phases flat on the line ({"step": N, "forward_ms": ..}); "rank" when present.
absl::Status ReadPhaseLog(const std::string& path, Os* os, RankTrace* t) {
  TS_ASSIGN_OR_RETURN(std::string text, internal::SlurpFile(path, os));
  t->format = "phase-log";
  int64_t line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    nlohmann::json j;
    if (!ParseJsonRecord(std::string_view(line.data(), line.size()), &j) || !j.is_object()) {
      ++t->stats.malformed;
      if (t->stats.warnings.size() < 20)
        t->stats.warnings.push_back(absl::StrCat("line ", line_no, ": not a JSON object"));
      continue;
    }
    int rank = -1;
    if (t->rank < 0 && SmallInt(j, "rank", &rank) && rank < kMaxRank) {
      t->rank = rank;
      t->rank_source = "phase log";
    }
    int world = 0;
    if (SmallInt(j, "world_size", &world) && world > 0 && world <= kMaxRank) t->world_size = world;
    // trainscope train's metrics.rank<R>.jsonl: only "step" records carry phases.
    if (j.contains("type") && j["type"] != "step") continue;
    if (!j.contains("step") || !j["step"].is_number()) continue;  // other records
    double step = j["step"].get<double>();
    if (!internal::ValidStep(step)) {
      internal::CsvBadRow(t, &t->stats.bad_values, path, line_no,
                          "a step that is not an integer in [0, 2^53]");
      continue;
    }
    PhaseStep ps;
    ps.step = static_cast<int64_t>(step);
    const nlohmann::json* src = &j;
    bool nested = false;
    for (const char* k : {"phases_ms", "phases"}) {
      if (j.contains(k) && j[k].is_object()) {
        src = &j[k];
        nested = true;
        break;
      }
    }
    bool bad = false;
    for (auto it = src->begin(); it != src->end(); ++it) {
      if (!it.value().is_number()) continue;
      std::string k = it.key();
      double scale = 0;
      if (absl::EndsWith(k, "_ms")) {
        scale = 1;
        k.resize(k.size() - 3);
      } else if (absl::EndsWith(k, "_us")) {
        scale = 1e-3;
        k.resize(k.size() - 3);
      } else if (nested) {
        scale = 1;  // bare numbers inside "phases"/"phases_ms" are ms
      }
      if (scale == 0 || k == "step" || k == "rank" || (!nested && k == "comm")) continue;
      double ms = it.value().get<double>() * scale;
      bad |= !internal::ValidUs(ms * 1e3);
      ps.phases_ms[k] = ms;
    }
    if (nested && j.contains("step_ms") && j["step_ms"].is_number()) {
      double ms = j["step_ms"].get<double>();
      bad |= !internal::ValidUs(ms * 1e3);
      ps.phases_ms["step"] = ms;
    }
    if (bad) {
      internal::CsvBadRow(t, &t->stats.bad_values, path, line_no,
                          "a phase time that is negative or longer than 7 days");
      continue;
    }
    if (ps.phases_ms.empty()) {
      ++t->stats.missing_fields;
      continue;
    }
    t->phase_steps.push_back(std::move(ps));
    ++t->stats.events_kept;
  }
  // A resumed trainer run appends to the same file and repeats the steps after its
  // checkpoint: the last record of a step wins.
  std::map<int64_t, size_t> last_of_step;
  for (size_t i = 0; i < t->phase_steps.size(); ++i) last_of_step[t->phase_steps[i].step] = i;
  if (last_of_step.size() != t->phase_steps.size()) {
    std::vector<PhaseStep> kept;
    for (size_t i = 0; i < t->phase_steps.size(); ++i) {
      if (last_of_step[t->phase_steps[i].step] == i) kept.push_back(std::move(t->phase_steps[i]));
    }
    t->stats.events_kept -= static_cast<int64_t>(t->phase_steps.size() - kept.size());
    t->phase_steps = std::move(kept);
  }
  t->stats.bytes = static_cast<int64_t>(text.size());
  if (t->phase_steps.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": line 1: no step records with phase times (\"step\", \"phases\")"));
  }
  return absl::OkStatus();
}

absl::Status ReadChromeFile(const std::string& path, const ReadOptions& opt, RankTrace* t) {
  TS_ASSIGN_OR_RETURN(auto src, internal::OpenByteSource(path, opt.os));
  return internal::ReadChromeTrace(src.get(), path, opt, t);
}

}  // namespace

std::string internal::ExecutionTraceSchema(const std::string& path, Os* os) {
  if (!os->IsRegularFile(path)) return "";  // a FIFO must not be read twice
  auto src = internal::OpenByteSource(path, os);
  if (!src.ok()) return "";
  std::string head(64 << 10, '\0');
  size_t n = 0;
  while (n < head.size()) {
    const int64_t got = (*src)->Read(head.data() + n, head.size() - n);
    if (got <= 0) break;
    n += static_cast<size_t>(got);
  }
  head.resize(n);
  const size_t open = head.find_first_not_of(" \t\r\n");
  if (open == std::string::npos || head[open] != '{') return "";
  if (head.find("\"traceEvents\"") != std::string::npos) return "";
  if (head.find("\"nodes\"") == std::string::npos) return "";
  // "schema": "1.1.1-chakra.0.0.4" (a string of at most a few dozen characters).
  size_t at = head.find("\"schema\"");
  if (at == std::string::npos) return "";
  at = head.find_first_not_of(" \t\r\n", at + 8);
  if (at == std::string::npos || head[at] != ':') return "";
  at = head.find_first_not_of(" \t\r\n", at + 1);
  if (at == std::string::npos || head[at] != '"') return "";
  const size_t end = head.find('"', at + 1);
  if (end == std::string::npos || end == at + 1 || end - at > 64) return "";
  return ValidUtf8(std::string_view(head).substr(at + 1, end - at - 1));
}

int RankFromFileName(std::string_view path) {
  std::string b = absl::AsciiStrToLower(Base(path));
  for (const char* key : {"rank", "worker"}) {
    size_t at = b.rfind(key);
    if (at == std::string::npos) continue;
    size_t i = at + strlen(key);
    while (i < b.size() && (b[i] == '-' || b[i] == '_' || b[i] == '=')) ++i;
    size_t j = i;
    while (j < b.size() && isdigit(static_cast<unsigned char>(b[j]))) ++j;
    int r = 0;
    if (j > i && absl::SimpleAtoi(b.substr(i, j - i), &r) && r < kMaxRank) return r;
  }
  return -1;
}

absl::StatusOr<RankTrace> ParseChromeTrace(std::string_view data, const std::string& name,
                                           const ReadOptions& options) {
  RankTrace t;
  t.path = name;
  auto src = internal::MemoryByteSource(data);
  TS_RETURN_IF_ERROR(internal::ReadChromeTrace(src.get(), name, options, &t));
  if (t.rank < 0) {
    t.rank = RankFromFileName(name);
    if (t.rank >= 0) t.rank_source = "file name";
  }
  return t;
}

absl::StatusOr<RankTrace> ReadRankTrace(const std::string& path, const ReadOptions& options) {
  RankTrace t;
  t.path = path;
  Os* os = options.os;
  if (os->IsDirectory(path)) {
    std::string out_dir = internal::AscendOutputDir(path, os);
    if (out_dir.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": a directory without torch_npu profiler output"));
    }
    TS_RETURN_IF_ERROR(internal::ReadAscendDir(path, out_dir, options, &t));
  } else if (!os->IsRegularFile(path)) {
    return absl::NotFoundError(absl::StrCat(path, ": no such file"));
  } else if (absl::EndsWith(path, ".jsonl")) {
    TS_RETURN_IF_ERROR(ReadPhaseLog(path, os, &t));
  } else if (absl::EndsWith(path, "step_trace_time.csv")) {
    t.format = "ascend";
    TS_RETURN_IF_ERROR(internal::ReadStepTraceCsv(path, &t, os));
  } else if (absl::EndsWith(path, "kernel_details.csv")) {
    t.format = "ascend";
    TS_RETURN_IF_ERROR(internal::ReadKernelDetailsCsv(path, false, &t, os));
  } else {
    TS_RETURN_IF_ERROR(ReadChromeFile(path, options, &t));
  }
  if (t.rank < 0) {
    t.rank = RankFromFileName(path);
    if (t.rank >= 0) t.rank_source = "file name";
  }
  return t;
}

absl::StatusOr<std::vector<std::string>> ExpandTracePaths(const std::vector<std::string>& paths,
                                                          Os* os) {
  std::set<std::string> out;
  for (const std::string& p : paths) {
    if (os->IsDirectory(p)) {
      if (!internal::AscendOutputDir(p, os).empty()) {
        out.insert(p);
        continue;
      }
      // A trainscope run directory (DIR or DIR/train): the per-rank metrics logs only.
      bool run_dir = false;
      for (const std::string& d : {trainscope::run_dir::Join(p, trainscope::run_dir::kTrain), p}) {
        if (!os->IsDirectory(d)) continue;
        for (const std::string& n : os->ListNames(d)) {
          if (trainscope::run_dir::IsTrainMetricsName(n)) {
            out.insert(d + "/" + n);
            run_dir = true;
          }
        }
        if (run_dir) break;
      }
      if (run_dir) continue;
      size_t before = out.size();
      for (const std::string& n : os->ListNames(p)) {
        std::string full = p + "/" + n;
        if (os->IsDirectory(full) && !internal::AscendOutputDir(full, os).empty()) {
          out.insert(full);
        } else if (os->IsRegularFile(full) && IsTraceFileName(n)) {
          out.insert(full);
        }
      }
      if (out.size() == before) {
        return absl::InvalidArgumentError(
            absl::StrCat(p, ": no traces (*.json, *.json.gz, *.jsonl, torch_npu output) in it"));
      }
    } else if (os->IsRegularFile(p)) {
      out.insert(p);
    } else {
      return absl::NotFoundError(absl::StrCat(p, ": no such file or directory"));
    }
  }
  return std::vector<std::string>(out.begin(), out.end());
}

}  // namespace trainscope::trace
