// EvaluatePart: from a part's exit status and --json output to summary checks. Each
// part's schema is the one its verb documents (docs/formats.md); fields that are absent
// are left out of the value rather than guessed.
#include <algorithm>
#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "trainscope/core/json_text.h"
#include "trainscope/core/table.h"
#include "trainscope/doctor/doctor.h"

namespace trainscope::doctor {
namespace {

using nlohmann::json;

Check Make(const PartOutcome& o, std::string name, std::string verdict, std::string value,
           std::string expected, std::string advice = "") {
  return Check{MakeCheck(std::move(name), std::move(verdict), std::move(value), std::move(expected),
                         std::move(advice)),
               o.name};
}

// The last non-empty line of a stream, for "why" messages.
std::string LastLine(const std::string& text) {
  std::string t(absl::StripTrailingAsciiWhitespace(text));
  size_t nl = t.rfind('\n');
  std::string line = nl == std::string::npos ? t : t.substr(nl + 1);
  line = std::string(absl::StripAsciiWhitespace(line));
  if (line.size() > 200) line = line.substr(0, 197) + "...";
  return line;
}

// Parses stdout as JSON; tolerates text before the document (a stray log line).
bool ParseJson(const std::string& out, json* j) {
  if (ParseJsonText(out, kJsonMaxDepth, j, nullptr) && j->is_object()) return true;
  size_t brace = out.find("\n{");
  if (brace == std::string::npos) return false;
  return ParseJsonText(std::string_view(out).substr(brace + 1), kJsonMaxDepth, j, nullptr) &&
         j->is_object();
}

double Num(const json& j, const char* key, double fallback = NAN) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : fallback;
}

std::string Str(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

std::vector<Check> Fingerprint(const PartOutcome& o, const json& j) {
  std::vector<std::string> keys;
  for (const auto& [k, v] : j.items())
    if (v.is_object() || v.is_array()) keys.push_back(k);
  std::string value = absl::StrCat("captured: ", keys.size(), " sections");
  if (!keys.empty()) absl::StrAppend(&value, " (", absl::StrJoin(keys, ", "), ")");
  return {Make(o, "env.fingerprint", "pass", value, "a fingerprint document",
               "saved as fingerprint.json in the run dir; compare two machines with "
               "`trainscope env diff A.json B.json`")};
}

// env check: one summary check plus one check per error or warning finding.
std::vector<Check> EnvCheck(const PartOutcome& o, const json& j) {
  std::vector<Check> out;
  const json findings = j.value("findings", json::array());
  int errors = 0, warnings = 0, infos = 0;
  std::vector<Check> per;
  for (const json& f : findings) {
    std::string sev = Str(f, "severity");
    if (sev == "error")
      ++errors;
    else if (sev == "warning")
      ++warnings;
    else
      ++infos;
    if (sev != "error" && sev != "warning") continue;
    std::string value = Str(f, "what");
    if (!Str(f, "evidence").empty()) absl::StrAppend(&value, " (", Str(f, "evidence"), ")");
    per.push_back(Make(o, absl::StrCat("env.", Str(f, "id")), sev == "error" ? "fail" : "warn",
                       value, "no finding", Str(f, "fix")));
  }
  errors = static_cast<int>(Num(j, "errors", errors));
  warnings = static_cast<int>(Num(j, "warnings", warnings));
  bool passed = j.value("passed", errors == 0);
  std::string verdict = (!passed || errors > 0) ? "fail" : (warnings > 0 ? "warn" : "pass");
  std::string advice;
  for (const Check& c : per) {
    if (!c.finding.fix.empty()) {
      advice = absl::StrCat(c.name, ": ", c.finding.fix);
      break;
    }
  }
  out.push_back(Make(o, "env.check", verdict,
                     absl::StrCat(errors, " errors, ", warnings, " warnings, ", infos, " notes"),
                     "0 errors", advice));
  out.insert(out.end(), per.begin(), per.end());
  return out;
}

// selftest device publishes its own checks; doctor takes them as they are.
std::vector<Check> Device(const PartOutcome& o, const json& j) {
  std::vector<Check> out;
  for (const json& c : j.value("checks", json::array())) out.push_back({CheckFromJson(c), o.name});
  if (out.empty()) {
    bool passed = j.value("passed", o.exit_code == 0);
    out.push_back(Make(o, "device", passed ? "pass" : "fail", Str(j, "reason"), "passed",
                       passed ? "" : "run `trainscope selftest device` for details"));
  }
  return out;
}

// The figure shown: busbw of all_reduce (else of the first op) at its largest size, in the
// timed dtype. "wrong" results make a fail whatever "passed" says.
std::vector<Check> Comm(const PartOutcome& o, const json& j) {
  const json results = j.value("results", json::array());
  int wrong = 0;
  const json* shown = nullptr;
  auto is_allreduce = [](const json& r) {
    return Str(r, "op") == "all_reduce" || Str(r, "op") == "allreduce";
  };
  for (const json& r : results) {
    if (!r.value("correct", true)) ++wrong;
    if (shown == nullptr) {
      shown = &r;
      continue;
    }
    bool better_op = is_allreduce(r) && !is_allreduce(*shown);
    bool same_op = Str(r, "op") == Str(*shown, "op");
    if (better_op || (same_op && Num(r, "bytes", 0) > Num(*shown, "bytes", 0))) shown = &r;
  }
  std::string value = absl::StrCat(Str(j, "backend"), " x ", j.value("world_size", 0), " ranks");
  if (shown != nullptr) {
    absl::StrAppend(&value, ", ", Str(*shown, "op"), " ", FormatBytes(Num(*shown, "bytes", 0)),
                    ": busbw ", FormatDouble(Num(*shown, "busbw_gbps", 0), 2), " GB/s");
  }
  absl::StrAppend(&value, ", ", results.size() - wrong, "/", results.size(), " sizes correct");
  bool passed = j.value("passed", o.exit_code == 0) && wrong == 0;
  std::string advice;
  std::string verdict = passed ? "pass" : "fail";
  if (!passed) {
    std::string reason = Str(j, "reason");
    advice = wrong > 0 ? "collectives return wrong results: do not train on this machine; rerun "
                         "`trainscope selftest comm` per backend and check the interconnect and "
                         "library versions (env check)"
                       : "the collective test did not pass: rerun `trainscope selftest comm` and "
                         "check the rendezvous (MASTER_ADDR/PORT, firewall) and timeouts";
    if (!reason.empty()) value = absl::StrCat(reason, " (", value, ")");
  } else if (!j.value("slow_ranks", json::array()).empty()) {
    verdict = "warn";
    absl::StrAppend(&value, "; slow ranks: ", j["slow_ranks"].dump());
    advice =
        "a rank is far slower than the others (memcpy probe): one slow rank makes the "
        "whole job slow; check its core binding and other processes there";
  }
  return {Make(o, "comm", verdict, value, "every size correct", advice)};
}

// "166 GFLOP/s", "989.0 TFLOP/s".
std::string FormatFlops(double flops) {
  if (flops >= 1e12) return absl::StrCat(FormatDouble(flops / 1e12, 1), " TFLOP/s");
  return absl::StrCat(FormatDouble(flops / 1e9, 0), " GFLOP/s");
}

std::vector<Check> Train(const PartOutcome& o, const json& j, const json& device) {
  std::vector<std::string> parts;
  double l0 = Num(j, "loss_start"), l1 = Num(j, "loss_end");
  if (!std::isnan(l0) && !std::isnan(l1)) {
    parts.push_back(absl::StrCat("loss ", FormatDouble(l0, 3), " -> ", FormatDouble(l1, 3)));
  }
  if (!std::isnan(Num(j, "steps"))) parts.push_back(absl::StrCat(Num(j, "steps"), " steps"));
  if (!std::isnan(Num(j, "tokens_per_s"))) {
    parts.push_back(
        absl::StrCat(FormatCount(static_cast<long long>(Num(j, "tokens_per_s"))), " tokens/s"));
  }
  // MFU against the device part's matmul peak when it has one for this device and
  // precision (one peak for both checks), else the train part's own (table or measured).
  const MfuPeak peak = MfuPeakFromDeviceReport(device, Str(j, "device"), Str(j, "precision"));
  const double model_flops = Num(j, "model_flops_per_s");
  std::string mfu_note;
  if (peak.flops > 0 && model_flops > 0) {
    parts.push_back(absl::StrCat("MFU ", FormatDouble(100 * model_flops / peak.flops, 1), "% of ",
                                 FormatFlops(peak.flops)));
    mfu_note = absl::StrCat("; MFU against ", peak.check, "'s peak",
                            peak.formula.empty() ? "" : absl::StrCat(" (", peak.formula, ")"));
  } else if (!std::isnan(Num(j, "mfu"))) {
    parts.push_back(absl::StrCat("MFU ", FormatDouble(100 * Num(j, "mfu"), 1), "%"));
  }
  bool passed = j.value("passed", o.exit_code == 0);
  std::string advice;
  if (!passed) {
    std::string reason = Str(j, "reason");
    advice =
        "the baseline run did not converge as expected: rerun `trainscope selftest train` "
        "and check the learning rate, data and numerics (NaN, loss scale) before real "
        "training";
    if (!reason.empty()) parts.insert(parts.begin(), reason);
  }
  double target = Num(j, "target_loss");
  std::string expected = !std::isnan(target) && target > 0
                             ? absl::StrCat("loss < ", FormatDouble(target, 2), ", run completes")
                             : "loss falls, run completes";
  return {Make(o, "train", passed ? "pass" : "fail", absl::StrJoin(parts, ", "),
               expected + mfu_note, advice)};
}

}  // namespace

MfuPeak MfuPeakFromDeviceReport(const json& report, const std::string& train_device,
                                const std::string& precision) {
  MfuPeak out;
  if (!report.is_object() || precision.empty()) return out;
  std::vector<std::string> names;
  if (train_device == "cpu") {
    names = {"cpu"};
  } else if (absl::StartsWith(train_device, "cuda")) {
    std::string index = train_device.size() > 5 ? train_device.substr(5) : "0";
    names = {absl::StrCat("nvidia", index), absl::StrCat("cuda", index)};
  }
  for (const json& b : report.value("benchmarks", json::array())) {
    if (!b.is_object() || Str(b, "name") != "matmul_" + precision) continue;
    if (std::find(names.begin(), names.end(), Str(b, "device")) == names.end()) continue;
    const double peak = Num(b, "peak", 0);
    const std::string unit = Str(b, "unit");
    const double scale = unit == "TFLOP/s" ? 1e12 : unit == "GFLOP/s" ? 1e9 : 0;
    if (!(peak > 0) || scale == 0) continue;
    out.flops = peak * scale;
    out.check = absl::StrCat("device.", Str(b, "device"), ".", Str(b, "name"));
    out.formula = Str(b, "peak_formula");
    return out;
  }
  return out;
}

std::vector<Check> EvaluatePart(const PartOutcome& o, const PartOutcome* device) {
  const std::string name = o.name == "env"           ? "env.check"
                           : o.name == "fingerprint" ? "env.fingerprint"
                                                     : o.name;
  if (!o.started) {
    return {Make(o, name, "skip", o.skip_reason, "runs", "")};
  }
  if (o.timed_out) {
    return {Make(
        o, name, "skip",
        absl::StrCat("timed out after ", FormatDouble(o.budget_s, 0), " s (its budget)"),
        "finishes within the budget",
        absl::StrCat("run `",
                     absl::StrJoin(o.argv.begin() + (o.argv.empty() ? 0 : 1), o.argv.end(), " "),
                     "` alone to see where it hangs"))};
  }
  if (o.term_signal != 0) {
    return {Make(o, name, "fail", absl::StrCat("crashed with signal ", o.term_signal),
                 "exits normally",
                 absl::StrCat("the part crashed: rerun it alone; stderr: ", LastLine(o.err)))};
  }
  json j;
  bool has_json = ParseJson(o.out, &j);
  if (!has_json) {
    std::string why = LastLine(o.err.empty() ? o.out : o.err);
    // Exit 2: the verb could not run here (not built, bad usage, missing input).
    if (o.exit_code == 2 || absl::StrContains(o.err, "not built yet")) {
      return {Make(o, name, "skip", absl::StrCat("cannot run: ", why), "runs", "")};
    }
    if (o.exit_code == 0) {
      return {Make(o, name, "skip", "ran but printed no JSON report", "a --json report", why)};
    }
    return {Make(o, name, "fail", absl::StrCat("exit ", o.exit_code, ": ", why), "exit 0",
                 "rerun the part alone for details")};
  }
  if (o.name == "fingerprint") return Fingerprint(o, j);
  if (o.name == "env") return EnvCheck(o, j);
  if (o.name == "device") return Device(o, j);
  if (o.name == "comm") return Comm(o, j);
  if (o.name == "train") {
    json device_report = json::object();
    if (device != nullptr && device->started && !device->timed_out) {
      if (!ParseJson(device->out, &device_report)) device_report = json::object();
    }
    return Train(o, j, device_report);
  }
  // Unknown part: its "passed" field, or its exit status.
  bool passed = j.value("passed", o.exit_code == 0);
  return {Make(o, name, passed ? "pass" : "fail", Str(j, "reason"), "passed",
               passed ? "" : "rerun the part alone for details")};
}

}  // namespace trainscope::doctor
