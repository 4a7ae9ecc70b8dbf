// Parsing of --inject values (see inject.h).
#include "trainscope/train/inject.h"

#include <cmath>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace trainscope::train {
namespace {

struct KindInfo {
  InjectKind kind;
  const char* name;
  const char* keys;      // accepted keys, for messages
  const char* required;  // keys that must be given, comma-separated
};
constexpr KindInfo kKinds[] = {
    {InjectKind::kSkipCollective, "skip_collective", "rank, step", "rank,step"},
    {InjectKind::kWrongOp, "wrong_op", "rank, step", "rank,step"},
    {InjectKind::kWrongSize, "wrong_size", "rank, step", "rank,step"},
    {InjectKind::kWrongDtype, "wrong_dtype", "rank, step", "rank,step"},
    {InjectKind::kSleep, "sleep", "rank, step, seconds", "rank,step,seconds"},
    {InjectKind::kExit, "exit", "rank, step, code", "rank,step"},
    {InjectKind::kNanForward, "nan_forward", "layer, step, rank", "layer,step"},
    {InjectKind::kNanBackward, "nan_backward", "layer, step, rank", "layer,step"},
    {InjectKind::kInfWeight, "inf_weight", "layer, step", "layer,step"},
    {InjectKind::kLrSpike, "lr_spike", "factor, step", "factor,step"},
    {InjectKind::kNanData, "nan_data", "step, rank", "step"},
};

bool KeyAllowed(const KindInfo& info, const std::string& key) {
  for (absl::string_view k : absl::StrSplit(info.keys, ", ")) {
    if (k == key) return true;
  }
  return false;
}

absl::Status Bad(const std::string& text, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("--inject '", text, "': ", why));
}

absl::Status IntKey(const std::string& text, const std::string& key, const std::string& value,
                    int lo, int hi, int* out) {
  if (!absl::SimpleAtoi(value, out) || *out < lo || *out > hi) {
    return Bad(text, absl::StrCat(key, "=", value, " is not an integer in ", lo, "..", hi));
  }
  return absl::OkStatus();
}

}  // namespace

const char* InjectKindName(InjectKind kind) {
  for (const KindInfo& k : kKinds)
    if (k.kind == kind) return k.name;
  return "?";
}

bool IsCommFault(InjectKind kind) {
  switch (kind) {
    case InjectKind::kSkipCollective:
    case InjectKind::kWrongOp:
    case InjectKind::kWrongSize:
    case InjectKind::kWrongDtype:
    case InjectKind::kSleep:
    case InjectKind::kExit:
      return true;
    default:
      return false;
  }
}

absl::StatusOr<Injection> ParseInjection(const std::string& text) {
  Injection inj;
  inj.text = text;
  const size_t colon = text.find(':');
  const std::string kind = text.substr(0, colon);
  const KindInfo* info = nullptr;
  for (const KindInfo& k : kKinds)
    if (kind == k.name) info = &k;
  if (info == nullptr) {
    return Bad(text, absl::StrCat("unknown kind '", kind,
                                  "' (expected skip_collective, wrong_op, wrong_size, "
                                  "wrong_dtype, sleep or exit, then :rank=R,step=S; or "
                                  "nan_forward, nan_backward, inf_weight, lr_spike, nan_data)"));
  }
  inj.kind = info->kind;
  if (colon == std::string::npos) {
    return Bad(text, IsCommFault(inj.kind) ? std::string("missing :rank=R,step=S")
                                           : absl::StrCat("missing :", info->keys));
  }
  std::map<std::string, std::string> kv;
  for (absl::string_view part : absl::StrSplit(text.substr(colon + 1), ',')) {
    const size_t eq = part.find('=');
    if (eq == absl::string_view::npos || eq == 0) {
      return Bad(text, absl::StrCat("'", part, "' is not key=value"));
    }
    std::string key(part.substr(0, eq));
    if (!KeyAllowed(*info, key)) {
      return Bad(text, absl::StrCat("unknown key '", key, "' for ", info->name,
                                    " (keys: ", info->keys, ")"));
    }
    if (!kv.emplace(key, std::string(part.substr(eq + 1))).second) {
      return Bad(text, absl::StrCat("key '", key, "' given twice"));
    }
  }
  for (absl::string_view need : absl::StrSplit(info->required, ',')) {
    if (!kv.count(std::string(need))) return Bad(text, absl::StrCat("missing key '", need, "'"));
  }
  if (kv.count("rank")) {
    if (auto st = IntKey(text, "rank", kv["rank"], 0, 1 << 20, &inj.rank); !st.ok()) return st;
  }
  if (auto st = IntKey(text, "step", kv["step"], 1, 100000000, &inj.step); !st.ok()) return st;
  if (kv.count("layer")) {
    if (auto st = IntKey(text, "layer", kv["layer"], 0, 1 << 20, &inj.layer); !st.ok()) return st;
  }
  if (inj.kind == InjectKind::kLrSpike) {
    if (!absl::SimpleAtod(kv["factor"], &inj.factor) || !std::isfinite(inj.factor) ||
        inj.factor <= 0) {
      return Bad(text, absl::StrCat("factor=", kv["factor"], " is not a positive number"));
    }
  }
  if (inj.kind == InjectKind::kSleep) {
    if (!absl::SimpleAtod(kv["seconds"], &inj.seconds) || !std::isfinite(inj.seconds) ||
        inj.seconds < 0 || inj.seconds > 86400) {
      return Bad(text, absl::StrCat("seconds=", kv["seconds"], " is not a number in 0..86400"));
    }
  }
  if (inj.kind == InjectKind::kExit && kv.count("code")) {
    if (auto st = IntKey(text, "code", kv["code"], 0, 255, &inj.code); !st.ok()) return st;
  }
  return inj;
}

absl::StatusOr<std::vector<Injection>> ParseInjections(const std::vector<std::string>& texts) {
  std::vector<Injection> out;
  for (const std::string& t : texts) {
    absl::StatusOr<Injection> inj = ParseInjection(t);
    if (!inj.ok()) return inj.status();
    for (const Injection& o : out) {
      const bool same_rank = o.rank == inj->rank || o.rank < 0 || inj->rank < 0;
      if (same_rank && o.step == inj->step) {
        return Bad(
            t, absl::StrCat(o.rank < 0 ? std::string("every rank") : absl::StrCat("rank ", o.rank),
                            " at step ", o.step, " already has --inject '", o.text, "'"));
      }
    }
    out.push_back(*std::move(inj));
  }
  return out;
}

absl::Status CheckInjections(const std::vector<Injection>& injections, int world_size, int steps,
                             int layers) {
  for (const Injection& i : injections) {
    if (i.rank >= world_size) {
      return Bad(i.text, absl::StrCat("rank ", i.rank, " is not in this run of ", world_size,
                                      " rank", world_size == 1 ? "" : "s"));
    }
    if (i.step > steps) {
      return Bad(i.text, absl::StrCat("step ", i.step, " is after the run's last step ", steps));
    }
    if (layers > 0 && i.layer >= layers) {
      return Bad(i.text, absl::StrCat("layer ", i.layer, " is not in this model of ", layers,
                                      " layer", layers == 1 ? "" : "s", " (0..", layers - 1, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace trainscope::train
