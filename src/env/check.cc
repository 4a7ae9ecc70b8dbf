// Check(): the compatibility matrix half, plus loading, JSON and table output.
#include "trainscope/env/check.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "env/json_doc.h"
#include "env/probes.h"
#include "env/rules.h"
#include "env/version.h"
#include "trainscope/core/table.h"

namespace trainscope::env {

using nlohmann::json;

const json* Value(const json& doc, const std::string& dotted_path) {
  const json* cur = &doc;
  for (absl::string_view step : absl::StrSplit(dotted_path, '.')) {
    if (!cur->is_object()) return nullptr;
    auto it = cur->find(std::string(step));
    if (it == cur->end()) return nullptr;
    cur = &*it;
  }
  if (cur->is_null()) return nullptr;
  if (cur->is_string()) {
    const std::string& s = cur->get_ref<const std::string&>();
    if (s == "absent" || absl::StartsWith(s, "error")) return nullptr;
  }
  return cur;
}

std::optional<std::string> StringValue(const json& doc, const std::string& path) {
  const json* v = Value(doc, path);
  if (!v || !v->is_string()) return std::nullopt;
  return v->get<std::string>();
}

std::optional<double> NumberValue(const json& doc, const std::string& path) {
  const json* v = Value(doc, path);
  if (!v || !v->is_number()) return std::nullopt;
  return v->get<double>();
}

namespace {

std::string StripLocal(const std::string& v) { return v.substr(0, v.find('+')); }

// Does an installed version belong to a published one? Equal, or the published one
// followed by a finer component ("8.0.RC2" installed as "8.0.RC2.alpha003").
bool SameRelease(const std::string& installed, const std::string& published) {
  return VersionMatches(installed, published) || VersionMatches(installed, published + ".*");
}

// torch <-> torch_npu <-> CANN.
void CheckTorchNpu(const json& fp, const json& matrix, std::vector<Finding>* out) {
  if (!fp.contains("frameworks") || !fp["frameworks"].is_array()) return;
  const json& rows = matrix["torch_npu"]["releases"];
  std::optional<std::string> cann = StringValue(fp, "toolkits.cann");
  for (const json& py : fp["frameworks"]) {
    std::string where = py.value("python", "python");
    const json& npu = py.value("torch_npu", json());
    if (!npu.is_string() || npu == "absent") continue;
    std::string v = npu.get<std::string>();
    if (absl::StartsWith(v, "error")) {
      out->push_back({Severity::kError, "framework.torch_npu_import",
                      absl::StrCat("torch_npu is installed for ", where, " but fails to import"),
                      absl::StrCat(where, ": ", v),
                      "Source the CANN environment (source /usr/local/Ascend/ascend-toolkit/"
                      "set_env.sh) and install the torch / torch_npu / CANN combination the "
                      "compatibility matrix lists together."});
      continue;
    }
    std::string base = StripLocal(v);
    const json* row = nullptr;
    for (const json& r : rows) {
      if (VersionMatches(base, r["torch_npu"].get<std::string>())) row = &r;
    }
    if (!row) {
      out->push_back({Severity::kInfo, "matrix.torch_npu_unknown",
                      absl::StrCat("torch_npu ", v, " is not in the compatibility matrix"),
                      absl::StrCat(where, ": torch_npu ", v),
                      "Check its torch and CANN requirements in Ascend/pytorch's README, and "
                      "add the row to the matrix (--matrix FILE)."});
      continue;
    }
    std::string want_torch = (*row)["torch"].get<std::string>();
    std::optional<std::string> torch;
    if (py.value("torch", json()).is_string()) torch = py["torch"].get<std::string>();
    if (torch && *torch != "absent" && !absl::StartsWith(*torch, "error") &&
        !SameRelease(StripLocal(*torch), want_torch)) {
      out->push_back({Severity::kError, "matrix.torch_npu_torch",
                      absl::StrCat("torch_npu ", v, " is built for torch ", want_torch,
                                   " but torch ", *torch, " is installed"),
                      absl::StrCat(where, ": torch ", *torch, ", torch_npu ", v),
                      absl::StrCat("pip install torch==", want_torch,
                                   " (or the torch_npu release made for torch ", *torch, ")")});
    }
    std::vector<std::string> canns;
    for (const json& c : (*row)["cann"]) canns.push_back(c.get<std::string>());
    if (cann) {
      bool ok = std::any_of(canns.begin(), canns.end(),
                            [&](const std::string& c) { return SameRelease(*cann, c); });
      if (!ok) {
        out->push_back(
            {Severity::kError, "matrix.torch_npu_cann",
             absl::StrCat("torch_npu ", v, " is published for CANN ", absl::StrJoin(canns, " / "),
                          " but CANN ", *cann, " is installed"),
             absl::StrCat(where, ": torch_npu ", v, "; toolkits.cann = ", *cann),
             absl::StrCat("Install CANN ", absl::StrJoin(canns, " or "),
                          ", or the torch_npu release published for CANN ", *cann)});
      }
    }
  }
}

// The CUDA versions something here needs: the toolkit and each torch build.
std::vector<std::pair<std::string, std::string>> CudaNeeds(const json& fp) {
  std::vector<std::pair<std::string, std::string>> needs;  // (version, who)
  if (auto tk = StringValue(fp, "toolkits.cuda_toolkit")) needs.push_back({*tk, "CUDA toolkit"});
  if (fp.contains("frameworks") && fp["frameworks"].is_array()) {
    for (const json& py : fp["frameworks"]) {
      const json& c = py.value("torch_cuda", json());
      if (c.is_string() && c != "absent" && !absl::StartsWith(c.get<std::string>(), "error")) {
        needs.push_back(
            {c.get<std::string>(),
             absl::StrCat(
                 "torch ",
                 py.value("torch", json("?")).is_string() ? py["torch"].get<std::string>() : "?",
                 " (", py.value("python", "python"), ")")});
      }
    }
  }
  return needs;
}

// CUDA <-> minimum driver. The driver must be at least the toolkit's minimum; below it,
// the same major version still runs under minor-version compatibility (no PTX JIT of
// newer PTX, some APIs fail): a warning. Otherwise an error.
void CheckCudaDriver(const json& fp, const json& matrix, std::vector<Finding>* out) {
  std::optional<std::string> driver = StringValue(fp, "accelerators.nvidia.driver_version");
  if (!driver) return;
  std::optional<std::string> driver_cuda =
      StringValue(fp, "accelerators.nvidia.cuda_driver_version");
  const json& table = matrix["cuda_driver"];
  for (const auto& [need, who] : CudaNeeds(fp)) {
    std::string mm = MajorMinor(need);
    if (mm.empty()) continue;
    std::string major = mm.substr(0, mm.find('.'));
    std::optional<std::string> min_driver;
    for (const json& r : table["toolkits"]) {
      if (r["cuda"].get<std::string>() == mm) min_driver = r["min_driver"].get<std::string>();
    }
    std::optional<std::string> compat_min;
    for (const json& r : table["minor_version_compat"]) {
      if (r["cuda_major"].get<std::string>() == major)
        compat_min = r["min_driver"].get<std::string>();
    }
    bool below_table = min_driver && CompareVersions(*driver, *min_driver) < 0;
    bool above_driver_cuda = driver_cuda && CompareVersions(mm, MajorMinor(*driver_cuda)) > 0;
    if (!below_table && !above_driver_cuda) continue;
    std::string evidence = absl::StrCat(
        "driver ", *driver, driver_cuda ? " (supports CUDA " + *driver_cuda + ")" : "", "; ", who,
        " needs CUDA ", need, min_driver ? ", minimum driver " + *min_driver : "");
    std::string fix = absl::StrCat(
        "Install NVIDIA driver >= ", min_driver ? *min_driver : "one supporting CUDA " + mm,
        ", or use a build for CUDA <= ",
        driver_cuda ? MajorMinor(*driver_cuda) : std::string("the driver's version"));
    bool compat =
        compat_min && CompareVersions(*driver, *compat_min) >= 0 &&
        (!driver_cuda || MajorMinor(*driver_cuda).substr(0, major.size() + 1) == major + ".");
    if (compat) {
      out->push_back(
          {Severity::kWarning, "matrix.cuda_driver_minor_compat",
           absl::StrCat(who, " needs CUDA ", mm, ", newer than driver ", *driver,
                        " supports; it runs only under CUDA minor-version compatibility"),
           evidence,
           fix + " (under minor-version compatibility, kernels shipped only as newer "
                 "PTX fail to load)"});
    } else {
      out->push_back({Severity::kError, "matrix.cuda_driver",
                      absl::StrCat(who, " needs CUDA ", mm, " but NVIDIA driver ", *driver,
                                   " is too old for it"),
                      evidence, fix});
    }
  }
}

// NCCL versions with known issues (the system library and each torch build's).
void CheckNccl(const json& fp, const json& matrix, std::vector<Finding>* out) {
  std::vector<std::pair<std::string, std::string>> versions;
  if (auto n = StringValue(fp, "toolkits.nccl")) versions.push_back({*n, "system NCCL"});
  if (fp.contains("frameworks") && fp["frameworks"].is_array()) {
    for (const json& py : fp["frameworks"]) {
      const json& n = py.value("torch_nccl", json());
      if (n.is_string() && n != "absent" && !absl::StartsWith(n.get<std::string>(), "error")) {
        versions.push_back({n.get<std::string>(),
                            absl::StrCat("NCCL in torch (", py.value("python", "python"), ")")});
      }
    }
  }
  std::optional<std::string> arch = StringValue(fp, "host.arch");
  for (const json& issue : matrix["nccl_known_issues"]) {
    if (issue.contains("arch") && (!arch || issue["arch"].get<std::string>() != *arch)) continue;
    std::string lo = issue["min"].get<std::string>(), hi = issue["max"].get<std::string>();
    for (const auto& [v, who] : versions) {
      if (CompareVersions(v, lo) < 0 || CompareVersions(v, hi) > 0) continue;
      std::string sev = issue.value("severity", "warning");
      out->push_back({sev == "error"  ? Severity::kError
                      : sev == "info" ? Severity::kInfo
                                      : Severity::kWarning,
                      "matrix.nccl." + issue["id"].get<std::string>(),
                      absl::StrCat(who, " ", v, ": ", issue["what"].get<std::string>()),
                      absl::StrCat(who, " = ", v, "; affected: ", lo, " to ", hi,
                                   "; source: ", issue.value("source", "")),
                      issue["fix"].get<std::string>()});
    }
  }
}

}  // namespace

void ApplyMatrix(const json& fp, const json& matrix, std::vector<Finding>* findings) {
  CheckTorchNpu(fp, matrix, findings);
  CheckCudaDriver(fp, matrix, findings);
  CheckNccl(fp, matrix, findings);
}

const json& DefaultMatrix() {
  static const json* m = new json(json::parse(kEmbeddedCompatMatrix));
  return *m;
}

absl::StatusOr<json> LoadMatrix(Os* os, const std::string& path) {
  absl::StatusOr<json> doc = ReadJsonFile(os, path);
  if (!doc.ok()) return doc.status();
  static const json* schema = new json(json::parse(kEmbeddedCompatMatrixSchema));
  absl::Status st = ValidateAgainstSchema(*doc, *schema, path);
  if (!st.ok()) return st;
  return doc;
}

CheckResult Check(const json& fingerprint, const json& matrix) {
  CheckResult r;
  ApplyMatrix(fingerprint, matrix, &r.findings);
  ApplyTrapRules(fingerprint, &r.findings);
  std::stable_sort(r.findings.begin(), r.findings.end(), [](const Finding& a, const Finding& b) {
    return static_cast<int>(a.severity) < static_cast<int>(b.severity);
  });
  for (const Finding& f : r.findings) {
    r.errors += f.severity == Severity::kError;
    r.warnings += f.severity == Severity::kWarning;
  }
  return r;
}

json CheckResultToJson(const CheckResult& result) {
  json out;
  out["format"] = kCheckFormat;
  out["version"] = 1;
  json list = json::array();
  for (const Finding& f : result.findings) {
    list.push_back({{"severity", SeverityName(f.severity)},
                    {"id", f.id},
                    {"what", f.title},
                    {"evidence", f.evidence},
                    {"fix", f.fix}});
  }
  out["findings"] = std::move(list);
  out["errors"] = result.errors;
  out["warnings"] = result.warnings;
  out["passed"] = result.passed();
  return out;
}

std::vector<Finding> FindingsFrom(const CheckResult& result) { return result.findings; }

std::string RenderCheck(const CheckResult& result) {
  std::string out;
  if (result.findings.empty()) {
    return "env check: no findings: the matrix and the trap rules found nothing to fix.\n";
  }
  Table t({"#", "severity", "check", "what"});
  for (size_t i = 0; i < result.findings.size(); ++i) {
    const Finding& f = result.findings[i];
    t.AddRow({absl::StrCat(i + 1), SeverityName(f.severity), f.id, f.title});
  }
  out = t.Render(120);
  out += "\n";
  for (size_t i = 0; i < result.findings.size(); ++i) {
    const Finding& f = result.findings[i];
    absl::StrAppend(&out, i + 1, ". ", f.title, "\n   evidence: ", f.evidence,
                    "\n   fix:      ", f.fix, "\n");
  }
  int info = static_cast<int>(result.findings.size()) - result.errors - result.warnings;
  absl::StrAppend(&out, "\n", result.errors, " error(s), ", result.warnings, " warning(s), ", info,
                  " note(s): ", result.passed() ? "passed" : "FAILED (fix the errors first)", "\n");
  return out;
}

}  // namespace trainscope::env
