// Strict JSON config parsing: every section is walked key by key against a table of known
// keys, so a typo is an error naming the key rather than a silently ignored setting.
#include "trainscope/train/config.h"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <map>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "trainscope/core/os.h"
#include "trainscope/core/status.h"
#include "trainscope/core/subprocess.h"

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

  void Int(const std::string& key, int* out) {
    setters_[key] = [this, key, out](const json& v) -> absl::Status {
      if (!v.is_number_integer() && !v.is_number_unsigned()) return TypeError(key, "integer", v);
      int64_t x = v.get<int64_t>();
      if (x < INT32_MIN || x > INT32_MAX) return Error(key, "integer out of range");
      *out = static_cast<int>(x);
      return absl::OkStatus();
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
    return absl::InvalidArgumentError(absl::StrCat(source_, ": key \"", Path(key), "\": ", what));
  }
  absl::Status TypeError(const std::string& key, const char* want, const json& got) const {
    return Error(key, absl::StrCat("expected ", want, ", got ", TypeName(got), " ", got.dump()));
  }

  std::string source_;
  std::string prefix_;
  std::map<std::string, std::function<absl::Status(const json&)>> setters_;
};

absl::Status KeyError(const TrainConfig& c, const std::string& key, const std::string& what) {
  return absl::InvalidArgumentError(
      absl::StrCat(c.source.empty() ? "config" : c.source, ": key \"", key, "\": ", what));
}

}  // namespace

absl::Status ValidateTrainConfig(const TrainConfig& c) {
  const ModelConfig& m = c.model;
  if (m.layers < 1) return KeyError(c, "model.layers", "must be >= 1");
  if (m.heads < 1) return KeyError(c, "model.heads", "must be >= 1");
  if (m.width < 1) return KeyError(c, "model.width", "must be >= 1");
  if (m.width % m.heads != 0)
    return KeyError(
        c, "model.heads",
        absl::StrCat(m.heads, " heads do not divide model.width ", m.width, " (impossible shape)"));
  if (m.seq_len < 2) return KeyError(c, "model.seq_len", "must be >= 2");
  if (m.vocab < 0) return KeyError(c, "model.vocab", "must be >= 0 (0: from the tokenizer)");
  if (m.mlp_ratio < 1) return KeyError(c, "model.mlp_ratio", "must be >= 1");
  const DataConfig& d = c.data;
  if (d.corpus.empty()) return KeyError(c, "data.corpus", "no corpus given");
  if (d.format != "auto" && d.format != "text" && d.format != "jsonl")
    return KeyError(c, "data.format", absl::StrCat("\"", d.format, "\" is not auto|text|jsonl"));
  if (d.num_workers < 0 || d.num_workers > 64)
    return KeyError(c, "data.num_workers", "must be in 0..64");
  if (d.prefetch < 1) return KeyError(c, "data.prefetch", "must be >= 1");
  if (d.worker_delay_ms < 0) return KeyError(c, "data.worker_delay_ms", "must be >= 0");
  const OptimConfig& o = c.optim;
  if (!(o.lr >= 0) || !std::isfinite(o.lr)) return KeyError(c, "optim.lr", "must be >= 0");
  if (!(o.min_lr >= 0) || (o.min_lr > o.lr && o.lr > 0))
    return KeyError(c, "optim.min_lr", "must be in 0..optim.lr");
  if (o.warmup_steps < 0) return KeyError(c, "optim.warmup_steps", "must be >= 0");
  if (!(o.weight_decay >= 0)) return KeyError(c, "optim.weight_decay", "must be >= 0");
  if (!(o.beta1 >= 0 && o.beta1 < 1)) return KeyError(c, "optim.beta1", "must be in [0, 1)");
  if (!(o.beta2 >= 0 && o.beta2 < 1)) return KeyError(c, "optim.beta2", "must be in [0, 1)");
  if (!(o.eps > 0)) return KeyError(c, "optim.eps", "must be > 0");
  if (!(o.grad_clip >= 0)) return KeyError(c, "optim.grad_clip", "must be >= 0");
  const RunConfig& r = c.train;
  if (r.steps < 1) return KeyError(c, "train.steps", "must be >= 1");
  if (r.micro_batch < 1) return KeyError(c, "train.micro_batch", "must be >= 1");
  if (r.grad_accum < 1) return KeyError(c, "train.grad_accum", "must be >= 1");
  if (r.threads < 0) return KeyError(c, "train.threads", "must be >= 0");
  if (r.precision != "fp32" && r.precision != "bf16")
    return KeyError(c, "train.precision", absl::StrCat("\"", r.precision, "\" is not fp32|bf16"));
  if (!(r.max_seconds >= 0)) return KeyError(c, "train.max_seconds", "must be >= 0");
  if (r.log_every < 0) return KeyError(c, "train.log_every", "must be >= 0");
  if (r.layer_norms_every < 0) return KeyError(c, "train.layer_norms_every", "must be >= 0");
  if (!(r.bucket_mb > 0)) return KeyError(c, "train.bucket_mb", "must be > 0");
  if (!(r.target_loss >= 0)) return KeyError(c, "train.target_loss", "must be >= 0");
  return absl::OkStatus();
}

absl::StatusOr<TrainConfig> ParseTrainConfig(const std::string& text, const std::string& source) {
  TrainConfig c;
  c.source = source;
  const std::string src = source.empty() ? "config" : source;
  json root;
  try {
    root = json::parse(text);
  } catch (const json::parse_error& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(src, ": not valid JSON at byte ", e.byte, ": ", e.what()));
  }
  if (!root.is_object())
    return absl::InvalidArgumentError(absl::StrCat(src, ": expected a JSON object at the top"));

  Section model(src, "model"), data(src, "data"), optim(src, "optim"), train(src, "train");
  model.Int("layers", &c.model.layers);
  model.Int("heads", &c.model.heads);
  model.Int("width", &c.model.width);
  model.Int("seq_len", &c.model.seq_len);
  model.Int("vocab", &c.model.vocab);
  model.Int("mlp_ratio", &c.model.mlp_ratio);
  model.Bool("tied_head", &c.model.tied_head);
  data.Strings("corpus", &c.data.corpus);
  data.String("format", &c.data.format);
  data.String("text_field", &c.data.text_field);
  data.String("tokenizer", &c.data.tokenizer);
  data.Int("num_workers", &c.data.num_workers);
  data.Int("prefetch", &c.data.prefetch);
  data.Double("worker_delay_ms", &c.data.worker_delay_ms);
  optim.Double("lr", &c.optim.lr);
  optim.Double("min_lr", &c.optim.min_lr);
  optim.Int("warmup_steps", &c.optim.warmup_steps);
  optim.Double("weight_decay", &c.optim.weight_decay);
  optim.Double("beta1", &c.optim.beta1);
  optim.Double("beta2", &c.optim.beta2);
  optim.Double("eps", &c.optim.eps);
  optim.Double("grad_clip", &c.optim.grad_clip);
  train.Int("steps", &c.train.steps);
  train.Int("micro_batch", &c.train.micro_batch);
  train.Int("grad_accum", &c.train.grad_accum);
  train.U64("seed", &c.train.seed);
  train.Bool("deterministic", &c.train.deterministic);
  train.Int("threads", &c.train.threads);
  train.String("precision", &c.train.precision);
  train.Double("max_seconds", &c.train.max_seconds);
  train.Int("log_every", &c.train.log_every);
  train.Int("layer_norms_every", &c.train.layer_norms_every);
  train.Bool("observability", &c.train.observability);
  train.Bool("keep_host_memory", &c.train.keep_host_memory);
  train.Double("bucket_mb", &c.train.bucket_mb);
  train.Double("target_loss", &c.train.target_loss);

  for (auto it = root.begin(); it != root.end(); ++it) {
    const std::string& k = it.key();
    if (k == "model") {
      TS_RETURN_IF_ERROR(model.Apply(it.value()));
    } else if (k == "data") {
      TS_RETURN_IF_ERROR(data.Apply(it.value()));
    } else if (k == "optim") {
      TS_RETURN_IF_ERROR(optim.Apply(it.value()));
    } else if (k == "train") {
      TS_RETURN_IF_ERROR(train.Apply(it.value()));
    } else if (k == "format") {
      if (!it.value().is_string() || it.value().get<std::string>() != "trainscope.train_config")
        return absl::InvalidArgumentError(
            absl::StrCat(src, ": key \"format\": expected \"trainscope.train_config\", got ",
                         it.value().dump()));
    } else if (k == "version") {
      if (!it.value().is_number_integer() || it.value().get<int64_t>() != 1)
        return absl::InvalidArgumentError(
            absl::StrCat(src, ": key \"version\": expected 1, got ", it.value().dump()));
    } else if (k == "comment") {
      // free text, ignored
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          src, ": key \"", k,
          "\": unknown key (known: format, version, comment, model, data, optim, train)"));
    }
  }
  // Corpus paths relative to the config file's directory.
  if (!source.empty()) {
    std::filesystem::path dir = std::filesystem::path(source).parent_path();
    for (std::string& p : c.data.corpus) {
      if (!p.empty() && p[0] != '/') p = (dir / p).lexically_normal().string();
    }
    if (c.data.tokenizer != "byte" && !c.data.tokenizer.empty() && c.data.tokenizer[0] != '/')
      c.data.tokenizer = (dir / c.data.tokenizer).lexically_normal().string();
  }
  TS_RETURN_IF_ERROR(ValidateTrainConfig(c));
  return c;
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
  j["format"] = "trainscope.train_config";
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
                {"max_seconds", c.train.max_seconds},
                {"log_every", c.train.log_every},
                {"layer_norms_every", c.train.layer_norms_every},
                {"observability", c.train.observability},
                {"keep_host_memory", c.train.keep_host_memory},
                {"bucket_mb", c.train.bucket_mb},
                {"target_loss", c.train.target_loss}};
  return j;
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

}  // namespace trainscope::train
