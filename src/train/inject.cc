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
  const char* keys;  // accepted keys, for messages
};
constexpr KindInfo kKinds[] = {
    {InjectKind::kSkipCollective, "skip_collective", "rank, step"},
    {InjectKind::kWrongOp, "wrong_op", "rank, step"},
    {InjectKind::kWrongSize, "wrong_size", "rank, step"},
    {InjectKind::kWrongDtype, "wrong_dtype", "rank, step"},
    {InjectKind::kSleep, "sleep", "rank, step, seconds"},
    {InjectKind::kExit, "exit", "rank, step, code"},
};

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
                                  "wrong_dtype, sleep or exit, then :rank=R,step=S)"));
  }
  inj.kind = info->kind;
  if (colon == std::string::npos) return Bad(text, "missing :rank=R,step=S");
  std::map<std::string, std::string> kv;
  for (absl::string_view part : absl::StrSplit(text.substr(colon + 1), ',')) {
    const size_t eq = part.find('=');
    if (eq == absl::string_view::npos || eq == 0) {
      return Bad(text, absl::StrCat("'", part, "' is not key=value"));
    }
    std::string key(part.substr(0, eq));
    const bool allowed = key == "rank" || key == "step" ||
                         (key == "seconds" && inj.kind == InjectKind::kSleep) ||
                         (key == "code" && inj.kind == InjectKind::kExit);
    if (!allowed) {
      return Bad(text, absl::StrCat("unknown key '", key, "' for ", info->name,
                                    " (keys: ", info->keys, ")"));
    }
    if (!kv.emplace(key, std::string(part.substr(eq + 1))).second) {
      return Bad(text, absl::StrCat("key '", key, "' given twice"));
    }
  }
  for (const char* need : {"rank", "step"}) {
    if (!kv.count(need)) return Bad(text, absl::StrCat("missing key '", need, "'"));
  }
  if (auto st = IntKey(text, "rank", kv["rank"], 0, 1 << 20, &inj.rank); !st.ok()) return st;
  if (auto st = IntKey(text, "step", kv["step"], 1, 100000000, &inj.step); !st.ok()) return st;
  if (inj.kind == InjectKind::kSleep) {
    if (!kv.count("seconds")) return Bad(text, "missing key 'seconds'");
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
      if (o.rank == inj->rank && o.step == inj->step) {
        return Bad(t, absl::StrCat("rank ", o.rank, " step ", o.step, " already has --inject '",
                                   o.text, "'"));
      }
    }
    out.push_back(*std::move(inj));
  }
  return out;
}

absl::Status CheckInjections(const std::vector<Injection>& injections, int world_size, int steps) {
  for (const Injection& i : injections) {
    if (i.rank >= world_size) {
      return Bad(i.text, absl::StrCat("rank ", i.rank, " is not in this run of ", world_size,
                                      " rank", world_size == 1 ? "" : "s"));
    }
    if (i.step > steps) {
      return Bad(i.text, absl::StrCat("step ", i.step, " is after the run's last step ", steps));
    }
  }
  return absl::OkStatus();
}

}  // namespace trainscope::train
