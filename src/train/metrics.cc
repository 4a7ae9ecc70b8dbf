// Metrics JSONL writer and validator, LR schedule, loader verdict.
#include "trainscope/train/metrics.h"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "absl/strings/str_cat.h"
#include "trainscope/core/json_text.h"
#include "trainscope/core/os.h"
#include "trainscope/core/table.h"
#include "trainscope/tb/event_writer.h"

namespace trainscope::train {

using json = nlohmann::json;

void PhaseTimes::Add(const PhaseTimes& o, double s) {
  data_wait_ms += s * o.data_wait_ms;
  h2d_ms += s * o.h2d_ms;
  forward_ms += s * o.forward_ms;
  backward_ms += s * o.backward_ms;
  comm_wait_ms += s * o.comm_wait_ms;
  optimizer_ms += s * o.optimizer_ms;
}

json PhaseTimesToJson(const PhaseTimes& p) {
  return {{"data_wait", p.data_wait_ms}, {"h2d", p.h2d_ms},
          {"forward", p.forward_ms},     {"backward", p.backward_ms},
          {"comm_wait", p.comm_wait_ms}, {"optimizer", p.optimizer_ms}};
}

static json OrNull(int64_t v) { return v < 0 ? json(nullptr) : json(v); }
static json Finite(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

json StepRecordToJson(const StepRecord& r) {
  json j = {{"type", "step"},
            {"step", r.step},
            {"loss", Finite(r.loss)},
            {"lr", r.lr},
            {"grad_norm", Finite(r.grad_norm)},
            {"tokens", r.tokens},
            {"step_ms", r.step_ms},
            {"tokens_per_s", r.tokens_per_s},
            {"phases_ms", PhaseTimesToJson(r.phases)},
            {"comm_ms", r.comm_ms},
            {"comm_bytes", r.comm_bytes},
            {"compress_ms", r.compress_ms},
            {"host_rss_bytes", r.host_rss_bytes},
            {"device_mem_allocated_bytes", OrNull(r.device_mem_allocated_bytes)},
            {"device_mem_peak_bytes", OrNull(r.device_mem_peak_bytes)}};
  if (r.has_val) {
    j["val_loss"] = Finite(r.val_loss);
    j["eval_ms"] = r.eval_ms;
  }
  return j;
}

std::vector<std::pair<std::string, double>> StepScalars(const StepRecord& r) {
  std::vector<std::pair<std::string, double>> s = {
      {"train/loss", r.loss},
      {"train/lr", r.lr},
      {"train/grad_norm", r.grad_norm},
      {"train/tokens_per_s", r.tokens_per_s},
      {"train/step_ms", r.step_ms},
      {"phase/data_wait_ms", r.phases.data_wait_ms},
      {"phase/h2d_ms", r.phases.h2d_ms},
      {"phase/forward_ms", r.phases.forward_ms},
      {"phase/backward_ms", r.phases.backward_ms},
      {"phase/comm_wait_ms", r.phases.comm_wait_ms},
      {"phase/optimizer_ms", r.phases.optimizer_ms},
      {"comm/ms", r.comm_ms},
      {"memory/rss_bytes", static_cast<double>(r.host_rss_bytes)}};
  if (r.device_mem_allocated_bytes >= 0)
    s.push_back({"memory/device_bytes", static_cast<double>(r.device_mem_allocated_bytes)});
  if (r.device_mem_peak_bytes >= 0)
    s.push_back({"memory/device_peak_bytes", static_cast<double>(r.device_mem_peak_bytes)});
  if (r.has_val) s.push_back({"val/loss", r.val_loss});
  return s;
}

double LearningRate(const OptimConfig& o, int step, int total_steps) {
  if (o.warmup_steps > 0 && step <= o.warmup_steps) {
    return o.lr * static_cast<double>(step) / o.warmup_steps;
  }
  int decay_steps = total_steps - o.warmup_steps;
  if (decay_steps <= 0) return o.lr;
  double progress = static_cast<double>(step - o.warmup_steps) / decay_steps;
  progress = std::min(1.0, std::max(0.0, progress));
  double cosine = 0.5 * (1.0 + std::cos(M_PI * progress));
  return o.min_lr + (o.lr - o.min_lr) * cosine;
}

int64_t HostRssBytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  long long size = 0, resident = 0;
  int n = std::fscanf(f, "%lld %lld", &size, &resident);
  std::fclose(f);
  if (n != 2) return 0;
  return resident * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

LoaderVerdict JudgeDataLoader(double data_wait_ms, double step_ms, int num_workers) {
  LoaderVerdict v;
  v.num_workers = num_workers;
  v.data_wait_fraction = step_ms > 0 ? data_wait_ms / step_ms : 0;
  v.data_bound = v.data_wait_fraction > kDataBoundFraction;
  if (!v.data_bound) {
    v.message = absl::StrCat("data loader keeps up: data wait is ",
                             FormatDouble(100 * v.data_wait_fraction, 1), "% of step time");
    return v;
  }
  // With w workers each needing b ms per batch and c ms of compute per batch, the loader
  // delivers a batch every b/w ms, so wait = b/w - c and b = w * (c + wait). Enough workers:
  // ceil(b / c). With no workers the step thread builds the batch itself: b = wait.
  double compute = std::max(1e-3, step_ms - data_wait_ms);
  double build = num_workers > 0 ? num_workers * step_ms : data_wait_ms;
  v.suggested_workers = std::max(num_workers + 1, static_cast<int>(std::ceil(build / compute)));
  v.message = absl::StrCat("data-bound: data wait is ", FormatDouble(100 * v.data_wait_fraction, 1),
                           "% of step time (over ", static_cast<int>(kDataBoundFraction * 100),
                           "%) with num_workers ", num_workers, "; set data.num_workers to ",
                           v.suggested_workers, " (or run with --sweep-workers)");
  return v;
}

absl::StatusOr<std::unique_ptr<MetricsWriter>> MetricsWriter::Open(const std::string& path,
                                                                   json header, bool append) {
  std::filesystem::path p(path);
  if (p.has_parent_path()) {
    absl::Status st = MakeDirs(p.parent_path().string());
    if (!st.ok()) return st;
  }
  if (append) {
    // Drop a last line a kill cut short (no newline), so the new header starts a line.
    std::error_code ec;
    const uintmax_t size = std::filesystem::file_size(path, ec);
    if (!ec && size > 0) {
      std::ifstream in(path, std::ios::binary);
      std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      const size_t keep = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
      if (keep != text.size()) std::filesystem::resize_file(path, keep, ec);
      if (ec) return absl::InternalError(absl::StrCat(path, ": cannot trim: ", ec.message()));
    }
  }
  std::FILE* f = std::fopen(path.c_str(), append ? "a" : "w");
  if (f == nullptr) {
    return absl::InternalError(absl::StrCat(path, ": cannot create metrics file"));
  }
  std::unique_ptr<MetricsWriter> w(new MetricsWriter(path, f));
  header["type"] = "header";
  header["format"] = kMetricsFormat;
  header["version"] = kMetricsVersion;
  absl::Status st = w->WriteLine(header);
  if (!st.ok()) return st;
  return w;
}

MetricsWriter::MetricsWriter(std::string path, std::FILE* f) : path_(std::move(path)), f_(f) {}

MetricsWriter::~MetricsWriter() {
  if (f_ != nullptr) std::fclose(f_);
}

absl::Status MetricsWriter::AttachTensorBoard(const std::string& dir) {
  absl::StatusOr<std::unique_ptr<tb::EventWriter>> w = tb::EventWriter::Open(dir, {});
  if (!w.ok()) return w.status();
  std::lock_guard<std::mutex> lock(mu_);
  tb_ = std::move(*w);
  return absl::OkStatus();
}

absl::Status MetricsWriter::WriteLine(const json& j) {
  std::lock_guard<std::mutex> lock(mu_);
  if (ended_) return absl::OkStatus();  // the end record stays the last line
  return WriteLineLocked(j);
}

absl::Status MetricsWriter::WriteLineLocked(const json& j) {
  std::string line = j.dump(-1, ' ', false, json::error_handler_t::replace);
  line.push_back('\n');
  if (std::fwrite(line.data(), 1, line.size(), f_) != line.size() || std::fflush(f_) != 0) {
    return absl::InternalError(absl::StrCat(path_, ": write failed (disk full?)"));
  }
  return absl::OkStatus();
}

absl::Status MetricsWriter::WriteStep(const StepRecord& r) {
  std::lock_guard<std::mutex> lock(mu_);
  if (ended_) return absl::OkStatus();
  absl::Status st = WriteLineLocked(StepRecordToJson(r));
  // The event's wall time is the step's end, as the JSONL line's (written just now).
  if (st.ok() && tb_ != nullptr) {
    st = tb_->AddScalars(r.step, Os::Default()->WallUs(), StepScalars(r));
  }
  return st;
}

absl::Status MetricsWriter::WriteLayerNorms(int step, const std::vector<LayerNorms>& layers) {
  json arr = json::array();
  for (const LayerNorms& l : layers) {
    arr.push_back({{"name", l.name},
                   {"weight_norm", Finite(l.weight_norm)},
                   {"grad_norm", Finite(l.grad_norm)}});
  }
  return WriteLine({{"type", "layer_norms"}, {"step", step}, {"layers", std::move(arr)}});
}

absl::Status MetricsWriter::WriteRecord(const std::string& type, json fields) {
  fields["type"] = type;
  return WriteLine(fields);
}

json EndRecordToJson(const EndRecord& e) {
  json j = {{"type", "end"},
            {"reason", e.reason},
            {"step", e.step},
            {"rank", e.rank},
            {"time_unix_us", e.time_unix_us},
            {"elapsed_s", Finite(e.elapsed_s)}};
  if (!e.signal.empty()) j["signal"] = e.signal;
  if (!e.error.empty()) j["error"] = e.error;
  return j;
}

absl::Status MetricsWriter::WriteEnd(const EndRecord& end) {
  std::lock_guard<std::mutex> lock(mu_);
  if (ended_) return absl::OkStatus();
  ended_ = true;
  absl::Status st = WriteLineLocked(EndRecordToJson(end));
  if (tb_ != nullptr) {
    absl::Status flushed = tb_->Flush();
    if (st.ok()) st = flushed;
  }
  return st;
}

bool MetricsWriter::ended() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ended_;
}

// ---- Validation against docs/formats.md ----
namespace {

bool IsNum(const json& v) { return v.is_number(); }
bool IsNumOrNull(const json& v) { return v.is_number() || v.is_null(); }
bool IsInt(const json& v) { return v.is_number_integer() || v.is_number_unsigned(); }
bool IsIntOrNull(const json& v) { return IsInt(v) || v.is_null(); }
bool IsObject(const json& v) { return v.is_object(); }

using Check = bool (*)(const json&);
struct Field {
  const char* key;
  Check check;
  const char* want;
};

bool IsHex16(const json& v) {
  if (!v.is_string()) return false;
  const std::string& s = v.get_ref<const std::string&>();
  return s.size() == 16 && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

std::string CheckFields(const json& j, std::initializer_list<Field> fields) {
  for (const Field& f : fields) {
    auto it = j.find(f.key);
    if (it == j.end()) return absl::StrCat("missing key \"", f.key, "\"");
    if (!f.check(*it)) return absl::StrCat("key \"", f.key, "\" is not ", f.want);
  }
  return "";
}

bool IsString(const json& v) { return v.is_string(); }
bool IsBool(const json& v) { return v.is_boolean(); }
bool IsArray(const json& v) { return v.is_array(); }

// What the validation has seen so far, across the file's segments.
struct MetricsScan {
  MetricsFileInfo info;
  int64_t last_step = 0;           // of this segment (its resumed_from_step at its header)
  std::set<int64_t> step_numbers;  // a step a resumed run repeated counts once
};

// A header starts a segment. Each Check* returns what is wrong with one record, "" if nothing.
std::string CheckHeader(const json& j, int64_t line_no, MetricsScan* scan) {
  ++scan->info.segments;
  scan->info.ended = false;
  scan->last_step = 0;
  if (j.contains("resumed_from_step")) {
    if (!IsInt(j["resumed_from_step"])) return "key \"resumed_from_step\" is not an integer";
    scan->last_step = j["resumed_from_step"].get<int64_t>();
  } else if (line_no > 1) {
    return "a header after line 1 without \"resumed_from_step\"";
  }
  if (j.value("format", "") != kMetricsFormat) return "format is not trainscope.train_metrics";
  if (j.value("version", 0) != kMetricsVersion) return "unsupported version";
  std::string why = CheckFields(j, {{"rank", IsInt, "an integer"},
                                    {"world_size", IsInt, "an integer"},
                                    {"params", IsInt, "an integer"},
                                    {"start_unix_us", IsInt, "an integer"},
                                    {"config", IsObject, "an object"}});
  // Optional (files written before it existed lack it): 16 hex digits of xxh3.
  if (why.empty() && j.contains("data_order_hash") && !IsHex16(j["data_order_hash"]))
    why = "key \"data_order_hash\" is not 16 hex digits";
  return why;
}

// A step record; its step must increase within the segment.
std::string CheckStep(const json& j, MetricsScan* scan) {
  std::string why =
      CheckFields(j, {{"step", IsInt, "an integer"},
                      {"loss", IsNumOrNull, "a number"},
                      {"lr", IsNum, "a number"},
                      {"grad_norm", IsNumOrNull, "a number"},
                      {"tokens", IsInt, "an integer"},
                      {"step_ms", IsNum, "a number"},
                      {"tokens_per_s", IsNum, "a number"},
                      {"phases_ms", IsObject, "an object"},
                      {"comm_ms", IsNum, "a number"},
                      {"host_rss_bytes", IsInt, "an integer"},
                      {"device_mem_allocated_bytes", IsIntOrNull, "an integer or null"},
                      {"device_mem_peak_bytes", IsIntOrNull, "an integer or null"}});
  if (why.empty()) {
    why = CheckFields(j["phases_ms"], {{"data_wait", IsNum, "a number"},
                                       {"h2d", IsNum, "a number"},
                                       {"forward", IsNum, "a number"},
                                       {"backward", IsNum, "a number"},
                                       {"comm_wait", IsNum, "a number"},
                                       {"optimizer", IsNum, "a number"}});
    if (!why.empty()) why = "phases_ms: " + why;
  }
  // Optional: steps an evaluation followed (config "eval").
  if (why.empty() && j.contains("val_loss") && !IsNumOrNull(j["val_loss"]))
    why = "key \"val_loss\" is not a number";
  if (why.empty() && j.contains("eval_ms") && !IsNum(j["eval_ms"]))
    why = "key \"eval_ms\" is not a number";
  if (why.empty()) {
    int64_t s = j["step"].get<int64_t>();
    if (s <= scan->last_step) why = absl::StrCat("step ", s, " does not increase");
    scan->last_step = s;
    scan->step_numbers.insert(s);
  }
  return why;
}

// The end record of a segment: its reason, and what MetricsFileInfo::end keeps of it.
std::string CheckEnd(const json& j, MetricsScan* scan) {
  std::string why = CheckFields(j, {{"reason", IsString, "a string"},
                                    {"step", IsInt, "an integer"},
                                    {"rank", IsInt, "an integer"},
                                    {"time_unix_us", IsInt, "an integer"},
                                    {"elapsed_s", IsNumOrNull, "a number"}});
  const std::string reason = why.empty() ? j["reason"].get<std::string>() : "";
  if (why.empty() && reason != kEndDone && reason != kEndInterrupted && reason != kEndError)
    why = absl::StrCat("end reason \"", reason, "\" is not done|interrupted|error");
  for (const char* k : {"signal", "error"}) {
    if (why.empty() && j.contains(k) && !j[k].is_string())
      why = absl::StrCat("key \"", k, "\" is not a string");
  }
  if (why.empty()) {
    MetricsFileInfo& info = scan->info;
    info.ended = true;
    info.end.reason = reason;
    info.end.step = j["step"].get<int>();
    info.end.rank = j["rank"].get<int>();
    info.end.signal = j.value("signal", "");
    info.end.error = j.value("error", "");
    info.end.time_unix_us = j["time_unix_us"].get<int64_t>();
    info.end.elapsed_s = j["elapsed_s"].is_number() ? j["elapsed_s"].get<double>() : 0;
  }
  return why;
}

std::string CheckLayerNorms(const json& j) {
  std::string why =
      CheckFields(j, {{"step", IsInt, "an integer"}, {"layers", IsArray, "an array"}});
  if (why.empty()) {
    for (const json& l : j["layers"]) {
      why = CheckFields(l, {{"name", IsString, "a string"},
                            {"weight_norm", IsNumOrNull, "a number"},
                            {"grad_norm", IsNumOrNull, "a number"}});
      if (!why.empty()) break;
    }
  }
  return why;
}

// The records that change no state, by type; unknown types are an error.
std::string CheckOther(const std::string& type, const json& j) {
  if (type == "layer_norms") return CheckLayerNorms(j);
  if (type == "checkpoint") {
    return CheckFields(j, {{"step", IsInt, "an integer"},
                           {"path", IsString, "a string"},
                           {"bytes", IsInt, "an integer"},
                           {"write_ms", IsNum, "a number"},
                           {"ok", IsBool, "a boolean"}});
  }
  if (type == "nonfinite") {  // train/anomaly.h NonfiniteToJson
    return CheckFields(j, {{"step", IsInt, "an integer"},
                           {"rank", IsInt, "an integer"},
                           {"phase", IsString, "a string"},
                           {"module", IsString, "a string"},
                           {"class", IsString, "a string"},
                           {"fix", IsString, "a string"}});
  }
  if (type == "spike") {
    return CheckFields(j, {{"step", IsInt, "an integer"},
                           {"loss", IsNum, "a number"},
                           {"threshold", IsNum, "a number"}});
  }
  if (type == "nonfinite_checks")
    return CheckFields(j, {{"check_ms", IsNum, "a number"}, {"loop_ms", IsNum, "a number"}});
  if (type == "loss_scale") {
    return CheckFields(j, {{"step", IsInt, "an integer"},
                           {"scale", IsNum, "a number"},
                           {"skipped", IsBool, "a boolean"}});
  }
  if (type == "scalars")  // trainscope.watch's mon.log(step=...) after a step
    return CheckFields(j, {{"step", IsInt, "an integer"}, {"scalars", IsObject, "an object"}});
  if (type != "event" && type != "summary" && type != "error")  // free-form ones
    return absl::StrCat("unknown type \"", type, "\"");
  return "";
}

}  // namespace

absl::StatusOr<MetricsFileInfo> ValidateMetricsFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot read metrics file"));
  std::string line;
  int64_t line_no = 0;
  MetricsScan scan;
  MetricsFileInfo& info = scan.info;
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(path, ":", line_no, ": ", why));
  };
  while (std::getline(in, line)) {
    ++line_no;
    json j;
    const bool parsed = ParseJsonRecord(line, &j);
    if ((!parsed || !j.is_object()) && in.eof() && !info.ended && line_no > 1) {
      // A last line without its newline: the writer was killed in the middle of it.
      info.truncated_last_line = true;
      break;
    }
    if (!parsed || !j.is_object()) return bad("not a JSON object");
    if (!j.contains("type") || !j["type"].is_string()) return bad("missing string key \"type\"");
    const std::string type = j["type"];
    // A resumed run appends a new segment (header, steps from the checkpoint's step + 1,
    // end) to the file of the run it continues; only a header may follow an end record.
    if (info.ended && type != "header") return bad("a line after the end record");
    if (line_no == 1 && type != "header") return bad("first line is not the header");
    const std::string why = type == "header" ? CheckHeader(j, line_no, &scan)
                            : type == "step" ? CheckStep(j, &scan)
                            : type == "end"  ? CheckEnd(j, &scan)
                                             : CheckOther(type, j);
    if (!why.empty()) return bad(why);
  }
  if (line_no == 0) return absl::InvalidArgumentError(absl::StrCat(path, ": empty metrics file"));
  info.steps = static_cast<int64_t>(scan.step_numbers.size());
  info.state = info.ended ? info.end.reason : "running_or_killed";
  return info;
}

}  // namespace trainscope::train
