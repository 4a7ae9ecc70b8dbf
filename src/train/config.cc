// Strict JSON config parsing: every section is walked key by key against a table of known
// keys, so a typo is an error naming the key rather than a silently ignored setting.
#include "trainscope/train/config.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "nlohmann/json.hpp"
#include "trainscope/core/formats.h"
#include "trainscope/core/json_text.h"
#include "trainscope/core/os.h"
#include "trainscope/core/status.h"
#include "trainscope/core/subprocess.h"
#include "trainscope/core/table.h"
#include "trainscope/core/utf8.h"
#include "trainscope/train/trainer.h"

namespace trainscope::train {
namespace {

using json = nlohmann::json;

const char* TypeName(const json& v) {
  if (v.is_boolean()) return "boolean";
  if (v.is_number_integer() || v.is_number_unsigned()) return "integer";
  if (v.is_number()) return "number";
  if (v.is_string()) return "string";
  if (v.is_array()) return "array";
  if (v.is_object()) return "object";
  return "null";
}

// Binds JSON keys of one section to typed fields.
class Section {
 public:
  Section(std::string source, std::string prefix) : source_(std::move(source)), prefix_(prefix) {}

  // A JSON integer, or a number with an integral value (1e9), within the int range.
  void Int(const std::string& key, int* out) {
    setters_[key] = [this, key, out](const json& v) -> absl::Status {
      if (v.is_number_unsigned()) {
        if (v.get<uint64_t>() > static_cast<uint64_t>(INT32_MAX)) return OutOfRange(key, v);
        *out = static_cast<int>(v.get<uint64_t>());
        return absl::OkStatus();
      }
      if (v.is_number_integer()) {
        int64_t x = v.get<int64_t>();
        if (x < INT32_MIN || x > INT32_MAX) return OutOfRange(key, v);
        *out = static_cast<int>(x);
        return absl::OkStatus();
      }
      if (v.is_number_float()) {
        double x = v.get<double>();
        if (x != std::floor(x))
          return Error(key, absl::StrCat("expected integer, got ", Excerpt(v.dump())));
        if (x < INT32_MIN || x > INT32_MAX) return OutOfRange(key, v);
        *out = static_cast<int>(x);
        return absl::OkStatus();
      }
      return TypeError(key, "integer", v);
    };
  }
  void U64(const std::string& key, uint64_t* out) {
    setters_[key] = [this, key, out](const json& v) -> absl::Status {
      if (v.is_number_unsigned()) {
        *out = v.get<uint64_t>();
      } else if (v.is_number_integer() && v.get<int64_t>() >= 0) {
        *out = static_cast<uint64_t>(v.get<int64_t>());
      } else {
        return TypeError(key, "non-negative integer", v);
      }
      return absl::OkStatus();
    };
  }
  void Double(const std::string& key, double* out) {
    setters_[key] = [this, key, out](const json& v) -> absl::Status {
      if (!v.is_number()) return TypeError(key, "number", v);
      *out = v.get<double>();
      return absl::OkStatus();
    };
  }
  void Bool(const std::string& key, bool* out) {
    setters_[key] = [this, key, out](const json& v) -> absl::Status {
      if (!v.is_boolean()) return TypeError(key, "boolean", v);
      *out = v.get<bool>();
      return absl::OkStatus();
    };
  }
  void String(const std::string& key, std::string* out) {
    setters_[key] = [this, key, out](const json& v) -> absl::Status {
      if (!v.is_string()) return TypeError(key, "string", v);
      *out = v.get<std::string>();
      return absl::OkStatus();
    };
  }
  // A string or an array of strings.
  void Strings(const std::string& key, std::vector<std::string>* out) {
    setters_[key] = [this, key, out](const json& v) -> absl::Status {
      out->clear();
      if (v.is_string()) {
        out->push_back(v.get<std::string>());
        return absl::OkStatus();
      }
      if (!v.is_array()) return TypeError(key, "string or array of strings", v);
      for (const json& e : v) {
        if (!e.is_string()) return TypeError(key, "array of strings", e);
        out->push_back(e.get<std::string>());
      }
      return absl::OkStatus();
    };
  }

  absl::Status Apply(const json& obj) {
    if (!obj.is_object()) return TypeError("", "object", obj);
    for (auto it = obj.begin(); it != obj.end(); ++it) {
      auto s = setters_.find(it.key());
      if (s == setters_.end()) {
        std::string known;
        for (const auto& [k, f] : setters_) absl::StrAppend(&known, known.empty() ? "" : ", ", k);
        return Error(it.key(),
                     absl::StrCat("unknown key (known keys of ", prefix_, ": ", known, ")"));
      }
      TS_RETURN_IF_ERROR(s->second(it.value()));
    }
    return absl::OkStatus();
  }

 private:
  std::string Path(const std::string& key) const {
    return key.empty() ? prefix_ : absl::StrCat(prefix_, ".", key);
  }
  absl::Status Error(const std::string& key, const std::string& what) const {
    return absl::InvalidArgumentError(
        absl::StrCat(source_, ": key \"", Excerpt(Path(key)), "\": ", what));
  }
  absl::Status OutOfRange(const std::string& key, const json& got) const {
    return Error(key, absl::StrCat(Excerpt(got.dump()),
                                   " does not fit an integer (-2147483648..2147483647)"));
  }
  absl::Status TypeError(const std::string& key, const char* want, const json& got) const {
    return Error(
        key, absl::StrCat("expected ", want, ", got ", TypeName(got), " ", Excerpt(got.dump())));
  }

  std::string source_;
  std::string prefix_;
  std::map<std::string, std::function<absl::Status(const json&)>> setters_;
};

absl::Status KeyError(const TrainConfig& c, const std::string& key, const std::string& what) {
  return absl::InvalidArgumentError(
      absl::StrCat(c.source.empty() ? "config" : c.source, ": key \"", key, "\": ", what));
}

// `key` must be in lo..hi (the documented range; hi is the key's cap).
template <typename T>
absl::Status InRange(const TrainConfig& c, const char* key, T v, T lo, T hi) {
  if (v >= lo && v <= hi) return absl::OkStatus();
  return KeyError(c, key, absl::StrCat(v, " is out of range: must be in ", lo, "..", hi));
}

}  // namespace

int MaxTrainThreads() {
  const int hw = static_cast<int>(std::thread::hardware_concurrency());
  return hw > 0 ? std::min(1024, 4 * hw) : 1024;
}

absl::Status ValidateTrainConfig(const TrainConfig& c) {
  const ModelConfig& m = c.model;
  TS_RETURN_IF_ERROR(InRange(c, "model.layers", m.layers, 1, kMaxLayers));
  TS_RETURN_IF_ERROR(InRange(c, "model.heads", m.heads, 1, kMaxHeads));
  TS_RETURN_IF_ERROR(InRange(c, "model.width", m.width, 1, kMaxWidth));
  if (m.width % m.heads != 0)
    return KeyError(
        c, "model.heads",
        absl::StrCat(m.heads, " heads do not divide model.width ", m.width, " (impossible shape)"));
  TS_RETURN_IF_ERROR(InRange(c, "model.seq_len", m.seq_len, 2, kMaxSeqLen));
  if (m.vocab < 0) return KeyError(c, "model.vocab", "must be >= 0 (0: from the tokenizer)");
  TS_RETURN_IF_ERROR(InRange(c, "model.vocab", m.vocab, 0, kMaxVocab));
  TS_RETURN_IF_ERROR(InRange(c, "model.mlp_ratio", m.mlp_ratio, 1, kMaxMlpRatio));
  const DataConfig& d = c.data;
  if (d.corpus.empty()) return KeyError(c, "data.corpus", "no corpus given");
  if (d.format != "auto" && d.format != "text" && d.format != "jsonl")
    return KeyError(c, "data.format",
                    absl::StrCat("\"", Excerpt(d.format), "\" is not auto|text|jsonl"));
  TS_RETURN_IF_ERROR(InRange(c, "data.num_workers", d.num_workers, 0, kMaxWorkers));
  TS_RETURN_IF_ERROR(InRange(c, "data.prefetch", d.prefetch, 1, kMaxPrefetch));
  TS_RETURN_IF_ERROR(InRange(c, "data.worker_delay_ms", d.worker_delay_ms, 0.0, kMaxWorkerDelayMs));
  const EvalConfig& e = c.eval;
  if (!(e.fraction >= 0 && e.fraction <= kMaxEvalFraction))
    return KeyError(c, "eval.fraction",
                    absl::StrCat(e.fraction, " is out of range: must be in 0..", kMaxEvalFraction,
                                 " (0 = no held-out slice)"));
  if (e.fraction > 0 && !e.corpus.empty())
    return KeyError(c, "eval.corpus",
                    "set eval.fraction or eval.corpus, not both (eval.fraction holds out part "
                    "of data.corpus; eval.corpus is separate text)");
  TS_RETURN_IF_ERROR(InRange(c, "eval.every_steps", e.every_steps, 0, kMaxSteps));
  TS_RETURN_IF_ERROR(InRange(c, "eval.batches", e.batches, 1, kMaxEvalBatches));
  const OptimConfig& o = c.optim;
  if (!(o.lr >= 0) || !std::isfinite(o.lr)) return KeyError(c, "optim.lr", "must be >= 0");
  if (!(o.min_lr >= 0) || (o.min_lr > o.lr && o.lr > 0))
    return KeyError(c, "optim.min_lr", "must be in 0..optim.lr");
  TS_RETURN_IF_ERROR(InRange(c, "optim.warmup_steps", o.warmup_steps, 0, kMaxSteps));
  if (!(o.weight_decay >= 0)) return KeyError(c, "optim.weight_decay", "must be >= 0");
  if (!(o.beta1 >= 0 && o.beta1 < 1)) return KeyError(c, "optim.beta1", "must be in [0, 1)");
  if (!(o.beta2 >= 0 && o.beta2 < 1)) return KeyError(c, "optim.beta2", "must be in [0, 1)");
  if (!(o.eps > 0)) return KeyError(c, "optim.eps", "must be > 0");
  if (!(o.grad_clip >= 0)) return KeyError(c, "optim.grad_clip", "must be >= 0");
  const RunConfig& r = c.train;
  TS_RETURN_IF_ERROR(InRange(c, "train.steps", r.steps, 1, kMaxSteps));
  TS_RETURN_IF_ERROR(InRange(c, "train.micro_batch", r.micro_batch, 1, kMaxMicroBatch));
  TS_RETURN_IF_ERROR(InRange(c, "train.grad_accum", r.grad_accum, 1, kMaxGradAccum));
  if (r.threads < 0 || r.threads > MaxTrainThreads())
    return KeyError(
        c, "train.threads",
        absl::StrCat(r.threads, " is out of range: must be in 0..", MaxTrainThreads(),
                     " (0 = automatic; at most 4 x the ", std::thread::hardware_concurrency(),
                     " hardware threads, and 1024)"));
  if (r.precision != "fp32" && r.precision != "bf16" && r.precision != "fp16")
    return KeyError(c, "train.precision",
                    absl::StrCat("\"", Excerpt(r.precision), "\" is not fp32|bf16|fp16"));
  for (absl::Status st :
       {ValidateSpikeOptions(c.anomaly.spike), ValidateLossScalerOptions(c.fp16)}) {
    if (!st.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(c.source.empty() ? "config" : c.source, ": key ", st.message()));
    }
  }
  if (absl::StatusOr<DeviceSpec> d = ParseDevice(r.device); !d.ok()) {
    return KeyError(c, "train.device", std::string(d.status().message()));
  }
  if (!(r.device_tflops >= 0 && r.device_tflops <= kMaxDeviceTflops))
    return KeyError(c, "train.device_tflops",
                    absl::StrCat(r.device_tflops, " is out of range: must be in 0..",
                                 kMaxDeviceTflops, " (0 = from the device)"));
  if (!(r.max_seconds >= 0)) return KeyError(c, "train.max_seconds", "must be >= 0");
  if (r.log_every < 0) return KeyError(c, "train.log_every", "must be >= 0");
  if (r.layer_norms_every < 0) return KeyError(c, "train.layer_norms_every", "must be >= 0");
  if (!(r.bucket_mb > 0 && r.bucket_mb <= kMaxBucketMb))
    return KeyError(
        c, "train.bucket_mb",
        absl::StrCat(r.bucket_mb, " is out of range: must be in (0, ", kMaxBucketMb, "]"));
  if (!(r.target_loss >= 0)) return KeyError(c, "train.target_loss", "must be >= 0");
  TS_RETURN_IF_ERROR(InRange(c, "checkpoint.every_steps", c.checkpoint.every_steps, 0, kMaxSteps));
  TS_RETURN_IF_ERROR(InRange(c, "checkpoint.keep", c.checkpoint.keep, 0, kMaxSteps));
  if (!(c.comm.timeout_s > 0 && c.comm.timeout_s <= kMaxCommTimeoutS))
    return KeyError(c, "comm.timeout_s",
                    absl::StrCat(c.comm.timeout_s, " is out of range: must be in (0, ",
                                 kMaxCommTimeoutS, "] seconds"));
  const std::string& z = c.comm.compression;
  if (z != "none" && z != "fp16" && z != "bf16" && z != "powersgd" && z != "topk")
    return KeyError(c, "comm.compression",
                    absl::StrCat("\"", Excerpt(z), "\" is not none|fp16|bf16|powersgd|topk"));
  TS_RETURN_IF_ERROR(InRange(c, "comm.powersgd_rank", c.comm.powersgd_rank, 1, kMaxPowerSgdRank));
  if (!(c.comm.topk_ratio > 0 && c.comm.topk_ratio <= 1))
    return KeyError(c, "comm.topk_ratio",
                    absl::StrCat(c.comm.topk_ratio, " is out of range: must be in (0, 1]"));
  TS_RETURN_IF_ERROR(
      InRange(c, "comm.compression_warmup_steps", c.comm.compression_warmup_steps, 0, kMaxSteps));
  return absl::OkStatus();
}

std::string DeviceSpec::Name() const { return cuda ? absl::StrCat("cuda:", index) : "cpu"; }

absl::StatusOr<DeviceSpec> ParseDevice(const std::string& text) {
  DeviceSpec d;
  if (text == "cpu") return d;
  d.cuda = true;
  if (text == "cuda") return d;
  absl::string_view rest = text;
  int index = -1;
  if (absl::ConsumePrefix(&rest, "cuda:") && !rest.empty() && rest.size() <= 4 &&
      std::all_of(rest.begin(), rest.end(), [](char ch) { return ch >= '0' && ch <= '9'; }) &&
      absl::SimpleAtoi(rest, &index) && index <= kMaxCudaIndex) {
    d.index = index;
    return d;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("\"", Excerpt(text), "\" is not cpu|cuda|cuda:N (N in 0..", kMaxCudaIndex, ")"));
}

double DevicePeakTflops(const std::string& device_name, const std::string& precision) {
  // Dense (no 2:4 sparsity) tensor-core peaks from NVIDIA's data sheets, SXM parts; the
  // first row whose key the name contains wins, so longer keys come first. fp32 training
  // runs its matmuls on TF32 tensor cores (libtorch's default allows TF32 for cuDNN only,
  // so an fp32 run's MFU against this figure is a lower bound). V100 and T4 have no bf16:
  // their 16-bit figure is fp16's.
  struct Row {
    const char* key;
    double bf16_tflops;
    double tf32_tflops;
  };
  static const Row kRows[] = {
      {"H200", 989, 494.5}, {"GH200", 989, 494.5}, {"H100 PCIe", 756, 378}, {"H100 NVL", 835, 418},
      {"H100", 989, 494.5}, {"A100", 312, 156},    {"L40S", 362, 183},      {"L4", 121, 60},
      {"A10", 125, 62.5},   {"V100", 125, 15.7},   {"T4", 65, 8.1},
  };
  for (const Row& r : kRows) {
    if (device_name.find(r.key) == std::string::npos) continue;
    return precision == "fp32" ? r.tf32_tflops : r.bf16_tflops;
  }
  return 0;
}

namespace {

// One binder per config section: the keys of the section's JSON object and the fields they set.
void BindModel(ModelConfig* m, Section* s) {
  s->Int("layers", &m->layers);
  s->Int("heads", &m->heads);
  s->Int("width", &m->width);
  s->Int("seq_len", &m->seq_len);
  s->Int("vocab", &m->vocab);
  s->Int("mlp_ratio", &m->mlp_ratio);
  s->Bool("tied_head", &m->tied_head);
}

void BindData(DataConfig* d, Section* s) {
  s->Strings("corpus", &d->corpus);
  s->String("format", &d->format);
  s->String("text_field", &d->text_field);
  s->String("tokenizer", &d->tokenizer);
  s->Int("num_workers", &d->num_workers);
  s->Int("prefetch", &d->prefetch);
  s->Double("worker_delay_ms", &d->worker_delay_ms);
}

void BindEval(EvalConfig* e, Section* s) {
  s->Double("fraction", &e->fraction);
  s->Strings("corpus", &e->corpus);
  s->Int("every_steps", &e->every_steps);
  s->Int("batches", &e->batches);
}

void BindOptim(OptimConfig* o, Section* s) {
  s->Double("lr", &o->lr);
  s->Double("min_lr", &o->min_lr);
  s->Int("warmup_steps", &o->warmup_steps);
  s->Double("weight_decay", &o->weight_decay);
  s->Double("beta1", &o->beta1);
  s->Double("beta2", &o->beta2);
  s->Double("eps", &o->eps);
  s->Double("grad_clip", &o->grad_clip);
}

void BindRun(RunConfig* r, Section* s) {
  s->Int("steps", &r->steps);
  s->Int("micro_batch", &r->micro_batch);
  s->Int("grad_accum", &r->grad_accum);
  s->U64("seed", &r->seed);
  s->Bool("deterministic", &r->deterministic);
  s->Int("threads", &r->threads);
  s->String("precision", &r->precision);
  s->String("device", &r->device);
  s->Double("device_tflops", &r->device_tflops);
  s->Double("max_seconds", &r->max_seconds);
  s->Int("log_every", &r->log_every);
  s->Int("layer_norms_every", &r->layer_norms_every);
  s->Bool("observability", &r->observability);
  s->Bool("tensorboard", &r->tensorboard);
  s->Bool("keep_host_memory", &r->keep_host_memory);
  s->Double("bucket_mb", &r->bucket_mb);
  s->Double("target_loss", &r->target_loss);
}

void BindComm(CommConfig* c, Section* s) {
  s->Double("timeout_s", &c->timeout_s);
  s->String("compression", &c->compression);
  s->Int("powersgd_rank", &c->powersgd_rank);
  s->Double("topk_ratio", &c->topk_ratio);
  s->Int("compression_warmup_steps", &c->compression_warmup_steps);
}

void BindCheckpoint(CheckpointConfig* c, Section* s) {
  s->Int("every_steps", &c->every_steps);
  s->Int("keep", &c->keep);
  s->Bool("async", &c->async);
  s->String("dir", &c->dir);
}

void BindAnomaly(AnomalyConfig* a, Section* s) {
  s->Bool("nonfinite_checks", &a->nonfinite_checks);
  s->String("spike_rule", &a->spike.rule);
  s->Int("spike_window", &a->spike.window);
  s->Int("spike_min_samples", &a->spike.min_samples);
  s->Double("spike_k", &a->spike.k);
  s->Double("spike_factor", &a->spike.factor);
  s->Bool("spike_checkpoint", &a->spike_checkpoint);
}

void BindFp16(LossScalerOptions* f, Section* s) {
  s->Double("initial_scale", &f->initial_scale);
  s->Int("growth_interval", &f->growth_interval);
  s->Double("growth_factor", &f->growth_factor);
  s->Double("backoff_factor", &f->backoff_factor);
  s->Int("hysteresis", &f->hysteresis);
  s->Double("min_scale", &f->min_scale);
}

// The top-level keys that are not sections: "format" and "version" must name this format,
// "comment" is free text. Unknown keys are an error listing the known ones.
absl::Status CheckTopLevelKey(const std::string& src, const std::string& k, const json& v) {
  if (k == "format") {
    if (!v.is_string() || v.get<std::string>() != formats::kTrainConfig)
      return absl::InvalidArgumentError(absl::StrCat(src, ": key \"format\": expected \"",
                                                     formats::kTrainConfig, "\", got ",
                                                     Excerpt(v.dump())));
  } else if (k == "version") {
    if (!v.is_number_integer() || v.get<int64_t>() != 1)
      return absl::InvalidArgumentError(
          absl::StrCat(src, ": key \"version\": expected 1, got ", Excerpt(v.dump())));
  } else if (k != "comment") {  // free text, ignored
    return absl::InvalidArgumentError(
        absl::StrCat(src, ": key \"", Excerpt(k),
                     "\": unknown key (known: format, version, comment, model, data, optim, "
                     "train, comm, checkpoint, anomaly, fp16, eval)"));
  }
  return absl::OkStatus();
}

// Corpus and tokenizer paths relative to the config file's directory.
void ResolveRelativePaths(const std::string& source, TrainConfig* c) {
  if (source.empty()) return;
  std::filesystem::path dir = std::filesystem::path(source).parent_path();
  for (std::vector<std::string>* paths : {&c->data.corpus, &c->eval.corpus}) {
    for (std::string& p : *paths) {
      if (!p.empty() && p[0] != '/') p = (dir / p).lexically_normal().string();
    }
  }
  if (c->data.tokenizer != "byte" && !c->data.tokenizer.empty() && c->data.tokenizer[0] != '/')
    c->data.tokenizer = (dir / c->data.tokenizer).lexically_normal().string();
}

}  // namespace

absl::StatusOr<TrainConfig> ParseTrainConfig(const std::string& text, const std::string& source) {
  TrainConfig c;
  c.source = source;
  const std::string src = source.empty() ? "config" : source;
  // A config nests 3 deep; the limit only keeps a hostile file from the parser's worst case.
  auto parsed = ParseJsonText(text, kJsonMaxDepth, src);
  if (!parsed.ok()) return parsed.status();
  const json root = *std::move(parsed);
  if (!root.is_object())
    return absl::InvalidArgumentError(absl::StrCat(src, ": expected a JSON object at the top"));

  Section model(src, "model"), data(src, "data"), optim(src, "optim"), train(src, "train"),
      comm(src, "comm"), ckpt(src, "checkpoint"), anomaly(src, "anomaly"), fp16(src, "fp16"),
      eval(src, "eval");
  BindModel(&c.model, &model);
  BindData(&c.data, &data);
  BindEval(&c.eval, &eval);
  BindOptim(&c.optim, &optim);
  BindRun(&c.train, &train);
  BindComm(&c.comm, &comm);
  BindCheckpoint(&c.checkpoint, &ckpt);
  BindAnomaly(&c.anomaly, &anomaly);
  BindFp16(&c.fp16, &fp16);
  const std::map<std::string, Section*> sections = {
      {"model", &model},     {"data", &data}, {"optim", &optim},
      {"train", &train},     {"comm", &comm}, {"checkpoint", &ckpt},
      {"anomaly", &anomaly}, {"fp16", &fp16}, {"eval", &eval}};
  // In the file's key order (nlohmann's: sorted), so the first error is the same every time.
  for (auto it = root.begin(); it != root.end(); ++it) {
    auto section = sections.find(it.key());
    if (section != sections.end()) {
      TS_RETURN_IF_ERROR(section->second->Apply(it.value()));
    } else {
      TS_RETURN_IF_ERROR(CheckTopLevelKey(src, it.key(), it.value()));
    }
  }
  ResolveRelativePaths(source, &c);
  TS_RETURN_IF_ERROR(ValidateTrainConfig(c));
  return c;
}

absl::Status ApplyOverrides(const TrainOverrides& o, TrainConfig* config) {
  if (o.comm_timeout_s != -1) {
    if (!(o.comm_timeout_s > 0 && o.comm_timeout_s <= kMaxCommTimeoutS)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--comm-timeout ", o.comm_timeout_s, ": must be in (0, ", kMaxCommTimeoutS, "] seconds"));
    }
    config->comm.timeout_s = o.comm_timeout_s;
  }
  if (!o.compression.empty()) config->comm.compression = o.compression;
  if (!o.device.empty()) config->train.device = o.device;
  if (o.device_tflops > 0) config->train.device_tflops = o.device_tflops;
  TS_RETURN_IF_ERROR(ValidateTrainConfig(*config));
  if (o.steps > 0) config->train.steps = o.steps;
  if (o.max_seconds >= 0) config->train.max_seconds = o.max_seconds;
  return absl::OkStatus();
}

absl::StatusOr<TrainConfig> LoadTrainConfig(const std::string& path) {
  auto text = Os::Default()->ReadFile(path);
  if (!text.ok()) {
    return absl::NotFoundError(
        absl::StrCat(path, ": cannot read the config (", text.status().message(), ")"));
  }
  return ParseTrainConfig(*text, path);
}

nlohmann::json TrainConfigToJson(const TrainConfig& c) {
  json j;
  j["format"] = formats::kTrainConfig;
  j["version"] = 1;
  j["model"] = {{"layers", c.model.layers},      {"heads", c.model.heads},
                {"width", c.model.width},        {"seq_len", c.model.seq_len},
                {"vocab", c.model.vocab},        {"mlp_ratio", c.model.mlp_ratio},
                {"tied_head", c.model.tied_head}};
  j["data"] = {{"corpus", c.data.corpus},
               {"format", c.data.format},
               {"text_field", c.data.text_field},
               {"tokenizer", c.data.tokenizer},
               {"num_workers", c.data.num_workers},
               {"prefetch", c.data.prefetch},
               {"worker_delay_ms", c.data.worker_delay_ms}};
  j["eval"] = {{"fraction", c.eval.fraction},
               {"corpus", c.eval.corpus},
               {"every_steps", c.eval.every_steps},
               {"batches", c.eval.batches}};
  j["optim"] = {{"lr", c.optim.lr},
                {"min_lr", c.optim.min_lr},
                {"warmup_steps", c.optim.warmup_steps},
                {"weight_decay", c.optim.weight_decay},
                {"beta1", c.optim.beta1},
                {"beta2", c.optim.beta2},
                {"eps", c.optim.eps},
                {"grad_clip", c.optim.grad_clip}};
  j["train"] = {{"steps", c.train.steps},
                {"micro_batch", c.train.micro_batch},
                {"grad_accum", c.train.grad_accum},
                {"seed", c.train.seed},
                {"deterministic", c.train.deterministic},
                {"threads", c.train.threads},
                {"precision", c.train.precision},
                {"device", c.train.device},
                {"device_tflops", c.train.device_tflops},
                {"max_seconds", c.train.max_seconds},
                {"log_every", c.train.log_every},
                {"layer_norms_every", c.train.layer_norms_every},
                {"observability", c.train.observability},
                {"tensorboard", c.train.tensorboard},
                {"keep_host_memory", c.train.keep_host_memory},
                {"bucket_mb", c.train.bucket_mb},
                {"target_loss", c.train.target_loss}};
  j["comm"] = {{"timeout_s", c.comm.timeout_s},
               {"compression", c.comm.compression},
               {"powersgd_rank", c.comm.powersgd_rank},
               {"topk_ratio", c.comm.topk_ratio},
               {"compression_warmup_steps", c.comm.compression_warmup_steps}};
  j["checkpoint"] = {{"every_steps", c.checkpoint.every_steps},
                     {"keep", c.checkpoint.keep},
                     {"async", c.checkpoint.async},
                     {"dir", c.checkpoint.dir}};
  j["anomaly"] = {{"nonfinite_checks", c.anomaly.nonfinite_checks},
                  {"spike_rule", c.anomaly.spike.rule},
                  {"spike_window", c.anomaly.spike.window},
                  {"spike_min_samples", c.anomaly.spike.min_samples},
                  {"spike_k", c.anomaly.spike.k},
                  {"spike_factor", c.anomaly.spike.factor},
                  {"spike_checkpoint", c.anomaly.spike_checkpoint}};
  j["fp16"] = {{"initial_scale", c.fp16.initial_scale}, {"growth_interval", c.fp16.growth_interval},
               {"growth_factor", c.fp16.growth_factor}, {"backoff_factor", c.fp16.backoff_factor},
               {"hysteresis", c.fp16.hysteresis},       {"min_scale", c.fp16.min_scale}};
  return j;
}

// ---- Memory estimate ----

int64_t CountParams(const ModelConfig& c, int vocab) {
  const int64_t w = c.width, h = int64_t{c.mlp_ratio} * c.width;
  int64_t block = 2 * (2 * w)                   // two LayerNorms
                  + (w * 3 * w + 3 * w)         // qkv
                  + (w * w + w)                 // proj
                  + (w * h + h) + (h * w + w);  // MLP
  int64_t total = int64_t{vocab} * w + int64_t{c.seq_len} * w + c.layers * block + 2 * w;
  if (!c.tied_head) total += int64_t{vocab} * w;
  return total;
}

// Each term follows what the model (model.cc) keeps alive at the peak, the end of the
// forward pass of a micro-batch with everything backward needs still saved:
//   state       16 B/param: fp32 weights, grads, AdamW exp_avg and exp_avg_sq (+2 B/param
//               under bf16 for autocast's cached bf16 copies of the weights);
//   activations per layer and token, fp32: (12 + 2 x mlp_ratio) x C floats (LayerNorm
//               inputs/outputs, q k v, attention output before and after the projection,
//               residuals, MLP hidden before and after GELU) and 3 x heads x T floats
//               (attention scores, masked, softmax);
//   logits      B x T x V floats, 3 times (logits, log-softmax saved by the loss, and their
//               gradient);
//   mask        the causal T x T bool mask;
//   loader      (prefetch + num_workers + 1) batches of inputs and targets, int64.
// It is a rough figure (allocator slack, libtorch's workspace and the corpus itself are not
// in it): meant to refuse configs that are off by orders of magnitude, not to pack memory.
MemoryEstimate EstimateTrainMemory(const TrainConfig& c, int vocab) {
  const ModelConfig& m = c.model;
  const RunConfig& r = c.train;
  const double b = r.micro_batch, t = m.seq_len, w = m.width, v = vocab;
  MemoryEstimate e;
  e.params = static_cast<double>(CountParams(m, vocab));
  e.state_bytes = e.params * (r.precision == "bf16" ? 18.0 : 16.0);
  e.activation_bytes =
      4.0 * m.layers * b * t * ((12.0 + 2.0 * m.mlp_ratio) * w + 3.0 * m.heads * t);
  e.logits_bytes = 3.0 * 4.0 * b * t * v;
  e.mask_bytes = t * t;
  e.loader_bytes = (c.data.prefetch + c.data.num_workers + 1.0) * b * t * 16.0;
  e.total_bytes =
      e.state_bytes + e.activation_bytes + e.logits_bytes + e.mask_bytes + e.loader_bytes;
  // Name the keys of the largest term.
  auto kv = [](const char* key, int value) { return absl::StrCat(key, "=", value); };
  std::vector<std::pair<double, std::string>> terms = {
      {e.state_bytes,
       absl::StrCat(kv("model.layers", m.layers), ", ", kv("model.width", m.width),
                    m.vocab > 0 ? ", " + kv("model.vocab", m.vocab) : std::string())},
      {e.activation_bytes,
       absl::StrCat(kv("model.layers", m.layers), ", ", kv("train.micro_batch", r.micro_batch),
                    ", ", kv("model.seq_len", m.seq_len), ", ", kv("model.width", m.width))},
      {e.logits_bytes,
       absl::StrCat(kv("train.micro_batch", r.micro_batch), ", ", kv("model.seq_len", m.seq_len),
                    ", ", kv("model.vocab", vocab))},
      {e.mask_bytes, kv("model.seq_len", m.seq_len)},
      {e.loader_bytes,
       absl::StrCat(kv("data.prefetch", c.data.prefetch), ", ",
                    kv("train.micro_batch", r.micro_batch), ", ", kv("model.seq_len", m.seq_len))}};
  e.drivers = std::max_element(terms.begin(), terms.end())->second;
  return e;
}

absl::Status CheckTrainMemory(const TrainConfig& c, int vocab, int local_ranks,
                              int64_t available_bytes, const std::string& available_what) {
  if (available_bytes < 0) return absl::OkStatus();
  const MemoryEstimate e = EstimateTrainMemory(c, vocab);
  const double need = e.total_bytes * std::max(1, local_ranks);
  if (need <= static_cast<double>(available_bytes)) return absl::OkStatus();
  return absl::ResourceExhaustedError(
      absl::StrCat(c.source.empty() ? "config" : c.source, ": ", e.drivers, ": needs ~",
                   FormatBytes(e.total_bytes),
                   local_ranks > 1 ? absl::StrCat(" per rank x ", local_ranks, " local ranks") : "",
                   ", ", FormatBytes(static_cast<double>(available_bytes)), " available (",
                   available_what, "); estimate: weights+grads+AdamW ", FormatBytes(e.state_bytes),
                   ", activations ", FormatBytes(e.activation_bytes), ", logits ",
                   FormatBytes(e.logits_bytes), " (docs/metrics.md, \"Trainer memory estimate\")"));
}

int64_t AvailableHostMemoryBytes(Os* os) {
  auto text = os->ReadFile("/proc/meminfo");
  if (!text.ok()) return -1;
  // "MemAvailable:   21402340 kB"
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    if (!absl::ConsumePrefix(&line, "MemAvailable:")) continue;
    line = absl::StripAsciiWhitespace(line);
    if (!absl::ConsumeSuffix(&line, "kB")) return -1;
    int64_t kb = 0;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &kb) || kb < 0) return -1;
    return kb * 1024;
  }
  return -1;
}

std::string FindBundledConfig(const std::string& name) {
  std::vector<std::string> candidates;
  std::string exe = SelfExecutablePath();
  if (!exe.empty()) {
    std::filesystem::path bin = std::filesystem::path(exe).parent_path();
    candidates.push_back((bin / "../share/trainscope/configs" / name).lexically_normal().string());
  }
#ifdef TS_SOURCE_DIR
  candidates.push_back(std::string(TS_SOURCE_DIR) + "/configs/" + name);
#endif
  for (const std::string& c : candidates) {
    if (access(c.c_str(), R_OK) == 0) return c;
  }
  return "";
}

absl::StatusOr<std::string> ConfigPathOrDefault(const std::string& path) {
  if (!path.empty()) return path;
  std::string bundled = FindBundledConfig("default.json");
  if (bundled.empty()) {
    return absl::NotFoundError("bundled configs/default.json not found; pass --config FILE");
  }
  return bundled;
}

}  // namespace trainscope::train
