// Batch-size probe, the measuring side: each candidate is a child `trainscope train` (the
// same executable, so the figures are the real trainer's), and the host's memory limit.
//
// Peak memory is the child's peak RSS as the child reports it (getrusage's ru_maxrss at its
// end: the figure /usr/bin/time and wait4 give, the one the plan's memory model was validated
// against in docs/PERFORMANCE.md), or the device's peak when its metrics carry one. The
// probe compares the whole process (libtorch, corpus and loader included) with the limit:
// that is what has to fit, so no baseline is subtracted here.
#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "nlohmann/json.hpp"
#include "trainscope/core/env_vars.h"
#include "trainscope/core/json_text.h"
#include "trainscope/core/os.h"
#include "trainscope/core/stats.h"
#include "trainscope/core/table.h"
#include "trainscope/tokenizer/tokenizer.h"
#include "trainscope/train/probe.h"

namespace trainscope::train {
namespace {

// A cgroup figure in bytes; -1 for "max", absent, or the v1 "no limit" (~2^63 rounded down).
int64_t ProbeCgroupBytes(Os* os, const std::string& path) {
  absl::StatusOr<std::string> text = os->ReadFile(path);
  if (!text.ok()) return -1;
  int64_t v = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &v) || v < 0) return -1;
  return v >= (int64_t{1} << 60) ? -1 : v;
}

std::string ProbeSignalText(int sig) {
  const char* name = sig == SIGKILL   ? "SIGKILL"
                     : sig == SIGSEGV ? "SIGSEGV"
                     : sig == SIGABRT ? "SIGABRT"
                     : sig == SIGBUS  ? "SIGBUS"
                     : sig == SIGTERM ? "SIGTERM"
                                      : nullptr;
  std::string s = absl::StrCat("killed by signal ", sig);
  if (name != nullptr) absl::StrAppend(&s, " (", name, ")");
  if (sig == SIGKILL) absl::StrAppend(&s, ": out of memory?");
  return s;
}

// The child's one-line error: its last "error:" line on stderr, else its last line.
std::string ProbeChildError(const std::string& err) {
  std::string last;
  for (absl::string_view line : absl::StrSplit(err, '\n', absl::SkipWhitespace())) {
    if (line.find("error:") != absl::string_view::npos) last = std::string(line);
  }
  if (last.empty()) {
    std::vector<absl::string_view> lines = absl::StrSplit(err, '\n', absl::SkipWhitespace());
    if (!lines.empty()) last = std::string(lines.back());
  }
  // "trainscope train: error: MESSAGE": the message.
  if (size_t at = last.find("error: "); at != std::string::npos) last = last.substr(at + 7);
  if (last.size() > 300) last = last.substr(0, 300) + "...";
  return last.empty() ? "(no message)" : last;
}

// The figures of one finished child: its --json result and its metrics file.
void ReadProbeChild(Os* os, const std::string& stdout_text, int warmup_steps, ProbeMeasurement* m) {
  nlohmann::json result;
  if (!ParseJsonText(stdout_text, kJsonMaxDepth, &result, nullptr) || !result.is_object() ||
      !result.contains("metrics_path") || !result["metrics_path"].is_string()) {
    m->ok = false;
    m->failure = "the trainer printed no JSON result";
    return;
  }
  const std::string path = result["metrics_path"].get<std::string>();
  absl::StatusOr<std::string> text = os->ReadFile(path);
  if (!text.ok()) {
    m->ok = false;
    m->failure = absl::StrCat("cannot read ", path, ": ", text.status().message());
    return;
  }
  std::vector<double> step_ms, opt_ms, tokens;
  double rss_sampled = 0, device_peak = -1;
  int steps = 0;
  for (absl::string_view line : absl::StrSplit(*text, '\n', absl::SkipWhitespace())) {
    nlohmann::json j;
    if (!ParseJsonRecord(std::string_view(line.data(), line.size()), &j) || !j.is_object() ||
        j.value("type", "") != "step") {
      continue;
    }
    ++steps;
    if (j.contains("host_rss_bytes") && j["host_rss_bytes"].is_number()) {
      rss_sampled = std::max(rss_sampled, j["host_rss_bytes"].get<double>());
    }
    if (j.contains("device_mem_peak_bytes") && j["device_mem_peak_bytes"].is_number()) {
      device_peak = std::max(device_peak, j["device_mem_peak_bytes"].get<double>());
    }
    if (steps <= warmup_steps) continue;
    if (!j.contains("step_ms") || !j["step_ms"].is_number()) continue;
    step_ms.push_back(j["step_ms"].get<double>());
    const nlohmann::json& ph = j.contains("phases_ms") ? j["phases_ms"] : nlohmann::json();
    opt_ms.push_back(ph.is_object() && ph.contains("optimizer") && ph["optimizer"].is_number()
                         ? ph["optimizer"].get<double>()
                         : 0.0);
    tokens.push_back(j.contains("tokens") && j["tokens"].is_number() ? j["tokens"].get<double>()
                                                                     : 0.0);
  }
  m->steps = steps;
  if (step_ms.empty()) {
    m->ok = false;
    m->failure = absl::StrCat(path, ": no step after the ", warmup_steps, " warm-up steps");
    return;
  }
  m->step_ms = trainscope::Median(step_ms);
  m->optimizer_ms = trainscope::Median(opt_ms);
  m->tokens_per_s = m->step_ms > 0 ? 1000.0 * trainscope::Median(tokens) / m->step_ms : 0;
  if (device_peak >= 0) {
    m->peak_memory_bytes = device_peak;
    m->memory_source = "device";
  } else if (result.contains("peak_rss_bytes") && result["peak_rss_bytes"].is_number() &&
             result["peak_rss_bytes"].get<double>() > 0) {
    m->peak_memory_bytes = result["peak_rss_bytes"].get<double>();
    m->memory_source = "host_rss";
  } else {
    m->peak_memory_bytes = rss_sampled;  // sampled at step ends: a lower bound
    m->memory_source = "host_rss_sampled";
  }
}

// Runs one candidate in <work_dir>/mb<B>/. *usage_error: the child refused its input (exit 2).
ProbeMeasurement RunProbeChild(const TrainConfig& base, int micro_batch, const ProbeOptions& o,
                               Os* os, std::string* usage_error) {
  ProbeMeasurement m;
  const std::string dir = absl::StrCat(o.work_dir, "/mb", micro_batch);
  TrainConfig c = base;
  c.train.micro_batch = micro_batch;
  c.train.grad_accum = 1;
  c.train.steps = o.steps;
  c.train.max_seconds = 0;
  c.train.log_every = 0;
  c.train.layer_norms_every = 0;
  c.train.observability = true;
  c.train.target_loss = 0;
  c.checkpoint.every_steps = 0;
  c.anomaly.spike_checkpoint = false;
  // The child's config lives elsewhere: paths that were relative to the working directory
  // (a config given by a relative path) are made absolute.
  for (std::string& p : c.data.corpus) {
    if (!p.empty() && p[0] != '/') p = std::filesystem::absolute(p).lexically_normal().string();
  }
  if (c.data.tokenizer != "byte" && !c.data.tokenizer.empty() && c.data.tokenizer[0] != '/') {
    c.data.tokenizer = std::filesystem::absolute(c.data.tokenizer).lexically_normal().string();
  }
  const std::string config_path = dir + "/config.json";
  if (absl::Status s = MakeDirs(dir); !s.ok()) {
    m.failure = std::string(s.message());
    return m;
  }
  if (absl::Status s = WriteFileAtomic(config_path, TrainConfigToJson(c).dump(2) + "\n"); !s.ok()) {
    m.failure = std::string(s.message());
    return m;
  }
  RunOptions ro;
  ro.timeout = std::chrono::milliseconds(static_cast<int64_t>(o.candidate_timeout_s * 1000));
  ro.kill_grace = std::chrono::milliseconds(5000);
  // One rank on its own, whatever launched the probe; no progress bars.
  ro.env = {{"TRAINSCOPE_NO_PROGRESS", "1"},
            {"RANK", "0"},
            {"WORLD_SIZE", "1"},
            {"LOCAL_RANK", "0"},
            {"LOCAL_WORLD_SIZE", "1"}};
  absl::StatusOr<RunResult> r =
      os->Run({o.binary, "train", "--config", config_path, "--run-dir", dir, "--json"}, ro);
  if (!r.ok()) {
    m.failure = std::string(r.status().message());
    return m;
  }
  if (r->timed_out) {
    m.failure = absl::StrCat("timed out after ", FormatDouble(o.candidate_timeout_s, 0), " s");
  } else if (!r->exited) {
    m.failure = ProbeSignalText(r->term_signal);
  } else if (r->exit_code != 0) {
    m.failure = absl::StrCat("exit ", r->exit_code, ": ", ProbeChildError(r->err));
    // Exit 2 is bad input (a corpus that is not there), except the trainer's memory refusals
    // (ResourceExhausted also exits 2: its estimate over the memory available, bad_alloc),
    // which are this candidate not fitting.
    const std::string error = ProbeChildError(r->err);
    if (r->exit_code == 2 && error.find("memory") == std::string::npos) *usage_error = error;
  } else {
    m.ok = true;
    ReadProbeChild(os, r->out, o.warmup_steps, &m);
  }
  return m;
}

}  // namespace

int64_t HostMemoryLimitBytes(Os* os, std::string* source) {
  int64_t best = AvailableHostMemoryBytes(os);
  *source = "MemAvailable";
  // cgroup v2, then v1 (as mounted in this process's namespace).
  struct CgroupFiles {
    const char* limit;
    const char* usage;
  };
  const CgroupFiles files[] = {{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"},
                               {"/sys/fs/cgroup/memory/memory.limit_in_bytes",
                                "/sys/fs/cgroup/memory/memory.usage_in_bytes"}};
  for (const CgroupFiles& f : files) {
    const int64_t limit = ProbeCgroupBytes(os, f.limit);
    if (limit < 0) continue;
    const int64_t usage = std::max<int64_t>(0, ProbeCgroupBytes(os, f.usage));
    const int64_t room = std::max<int64_t>(0, limit - usage);
    if (best < 0 || room < best) {
      best = room;
      *source = absl::StrCat("cgroup ", f.limit, " - usage");
    }
    break;
  }
  return best;
}

int64_t DeviceMemoryLimitBytes(Os* os, int cuda_index, std::string* source) {
  // cuda:N counts the visible devices; nvidia-smi -i takes the physical index or a UUID.
  std::string id = std::to_string(cuda_index);
  std::string visible;
  if (os->GetEnv(envvar::kCudaVisibleDevices, &visible) && !visible.empty()) {
    std::vector<std::string> ids = absl::StrSplit(visible, ',', absl::SkipWhitespace());
    if (cuda_index >= static_cast<int>(ids.size())) return -1;
    id = std::string(absl::StripAsciiWhitespace(ids[cuda_index]));
  }
  RunOptions ro;
  ro.timeout = std::chrono::milliseconds(20000);
  absl::StatusOr<RunResult> r = os->Run({"nvidia-smi", "--query-gpu=memory.total,memory.used",
                                         "--format=csv,noheader,nounits", "-i", id},
                                        ro);
  if (!r.ok() || !r->ok()) return -1;
  // "143771, 512" (MiB)
  std::vector<std::string> fields =
      absl::StrSplit(absl::StripAsciiWhitespace(r->out), ',', absl::SkipWhitespace());
  int64_t total = 0, used = 0;
  if (fields.size() != 2 || !absl::SimpleAtoi(absl::StripAsciiWhitespace(fields[0]), &total) ||
      !absl::SimpleAtoi(absl::StripAsciiWhitespace(fields[1]), &used) || total <= 0 || used < 0) {
    return -1;
  }
  *source = absl::StrCat("nvidia-smi memory.total - memory.used, GPU ", id);
  return std::max<int64_t>(0, total - used) * 1024 * 1024;
}

absl::StatusOr<ProbeReport> ProbeBatch(const TrainConfig& config, const ProbeOptions& o, Os* os) {
  if (o.binary.empty() || o.work_dir.empty()) {
    return absl::InvalidArgumentError("probe: binary and work_dir are required");
  }
  int64_t limit = o.memory_limit_bytes;
  std::string source = "--probe-memory-limit";
  const bool explicit_limit = limit > 0;
  absl::StatusOr<DeviceSpec> device = ParseDevice(config.train.device);
  if (!device.ok()) return device.status();
  if (!explicit_limit && device->cuda) {
    limit = DeviceMemoryLimitBytes(os, device->index, &source);
    if (limit <= 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot tell the memory of ", device->Name(),
                       " (nvidia-smi did not answer); pass --probe-memory-limit GB"));
    }
  } else if (!explicit_limit) {
    limit = HostMemoryLimitBytes(os, &source);
    if (limit <= 0) {
      return absl::FailedPreconditionError(
          "cannot tell how much host memory is available (no MemAvailable in /proc/meminfo); "
          "pass --probe-memory-limit GB");
    }
    limit /= std::max(1, o.ranks);
    if (o.ranks > 1) absl::StrAppend(&source, " / ", o.ranks, " ranks");
  }
  int vocab = config.model.vocab;
  if (vocab <= 0) {
    absl::StatusOr<std::unique_ptr<tokenizer::Tokenizer>> tok =
        tokenizer::LoadTokenizer(config.data.tokenizer);
    if (!tok.ok()) return tok.status();
    vocab = (*tok)->vocab_size();
  }
  auto estimate = [&config, vocab](int micro_batch) {
    TrainConfig c = config;
    c.train.micro_batch = micro_batch;
    return EstimateTrainMemory(c, vocab).total_bytes;
  };
  std::string usage_error;
  bool device_without_limit = false;
  bool measured = false;
  CandidateRunner runner = [&](int micro_batch) {
    std::string refused;
    ProbeMeasurement m = RunProbeChild(config, micro_batch, o, os, &refused);
    if (!measured) usage_error = refused;  // later candidates differ only in their size
    measured = measured || m.ok;
    // A device figure against a host limit (a trainer that reports device memory on a
    // device this probe does not know) would compare unlike things.
    if (m.ok && m.memory_source == "device" && !explicit_limit && !device->cuda) {
      device_without_limit = true;
      m.ok = false;
      m.failure = "the trainer reports device memory; the limit must be the device's";
    }
    return m;
  };
  absl::StatusOr<ProbeReport> r = RunProbe(config, o, limit, source, estimate, runner);
  if (!r.ok()) return r;
  if (!usage_error.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the trainer refused the probe's run: ", usage_error));
  }
  if (device_without_limit) {
    return absl::FailedPreconditionError(
        "the trainer reports device memory: pass --probe-memory-limit GB (the device's memory)");
  }
  return r;
}

}  // namespace trainscope::train
