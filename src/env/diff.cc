#include "trainscope/env/diff.h"

#include <algorithm>
#include <unordered_map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "trainscope/core/formats.h"
#include "trainscope/core/table.h"

namespace trainscope::env {

using nlohmann::json;

namespace {

constexpr char kMissing[] = "(missing)";

// Fields that are identity or a momentary reading, not configuration.
bool IsVolatile(const std::string& path) {
  static const char* kTop[] = {"format",          "version",  "trainscope_version",
                               "created_unix_us", "hostname", "probe_ms"};
  for (const char* t : kTop) {
    if (path == t || absl::StartsWith(path, std::string(t) + ".")) return true;
  }
  static const char* kLeaves[] = {"mem_available_bytes",
                                  "hugepages_free",
                                  "shm_available_bytes",
                                  "memory_used_bytes",
                                  "temperature_c",
                                  "power_draw_w",
                                  "clocks_sm_mhz",
                                  "clocks_mem_mhz",
                                  "power_w",
                                  "temp_c",
                                  "aicore_pct",
                                  "memory_used_mb",
                                  "hbm_used_mb",
                                  "hugepages_used",
                                  "processes",
                                  "executable"};
  std::string leaf = path.substr(path.find_last_of(".]") + 1);
  for (const char* l : kLeaves) {
    if (leaf == l) return true;
  }
  return false;
}

// Importance of a field: rank, category and whether it is a version.
void Classify(const std::string& path, Difference* d) {
  std::string leaf = path.substr(path.find_last_of(".]") + 1);
  auto set = [d](int rank, const char* cat, bool version) {
    d->rank = rank;
    d->category = cat;
    d->is_version = version;
  };
  if (path == "accelerators.nvidia" || path == "accelerators.ascend" ||
      ((absl::StartsWith(path, "accelerators.nvidia.") ||
        absl::StartsWith(path, "accelerators.ascend.")) &&
       (leaf == "driver_version" || leaf == "cuda_driver_version" || leaf == "firmware_version" ||
        leaf == "npu_smi_version"))) {
    return set(0, "driver", true);
  }
  if (path == "toolkits.cuda_toolkit" || path == "toolkits.cann") {
    return set(1, "toolkit", true);
  }
  if (path == "toolkits.cuda_toolkit_path" || path == "toolkits.cann_path") {
    return set(1, "toolkit", false);
  }
  if (absl::StartsWith(path, "frameworks")) {
    bool version = leaf == "torch" || leaf == "torch_cuda" || leaf == "torch_npu" ||
                   leaf == "python_version" || leaf == "torch_cudnn" || leaf == "torch_nccl" ||
                   path == "frameworks" || absl::EndsWith(path, "]");
    return set(2, "framework", version);
  }
  if (absl::StartsWith(path, "toolkits.")) {
    return set(3, "library", !absl::EndsWith(path, "_path"));
  }
  if (absl::StartsWith(path, "accelerators.") || path == "host.cpu_model" ||
      path == "host.logical_cpus" || path == "host.online_cpus" || path == "host.numa_nodes" ||
      path == "host.mem_total_bytes" || path == "host.arch") {
    return set(4, "hardware", false);
  }
  if (absl::StartsWith(path, "limits.")) return set(5, "limits", false);
  if (absl::StartsWith(path, "env.") || path == "env") return set(7, "env", false);
  return set(6, "host", false);
}

std::string Show(const json& v) {
  if (v.is_null()) return kMissing;
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object()) return "(present)";
  if (v.is_array()) return absl::StrCat("(", v.size(), " entries)");
  return v.dump();
}

// Arrays of records are matched by a key rather than position where one exists:
// frameworks by interpreter path, GPUs by index, NPUs by npu/chip.
std::string ElementKey(const json& e, size_t i) {
  if (e.is_object()) {
    if (e.contains("python")) return e["python"].is_string() ? e["python"].get<std::string>() : "";
    if (e.contains("npu") && e.contains("chip")) {
      return absl::StrCat(Show(e["npu"]), "/", Show(e["chip"]));
    }
    if (e.contains("index")) return Show(e["index"]);
  }
  return absl::StrCat(i);
}

void Compare(const json& a, const json& b, const std::string& path, DiffResult* out) {
  if (!path.empty() && IsVolatile(path)) return;
  if (a.is_object() && b.is_object()) {
    std::vector<std::string> keys;
    for (auto it = a.begin(); it != a.end(); ++it) keys.push_back(it.key());
    for (auto it = b.begin(); it != b.end(); ++it) {
      if (!a.contains(it.key())) keys.push_back(it.key());
    }
    for (const std::string& k : keys) {
      static const json kNull;
      Compare(a.contains(k) ? a[k] : kNull, b.contains(k) ? b[k] : kNull,
              path.empty() ? k : path + "." + k, out);
    }
    return;
  }
  if (a.is_array() && b.is_array()) {
    // Keyed lookup (the first element with a key wins), so that a file with 100k GPUs
    // costs linear time, not quadratic.
    std::vector<std::pair<std::string, const json*>> ka, kb;
    std::unordered_map<std::string, const json*> index_a, index_b;
    for (size_t i = 0; i < a.size(); ++i) {
      ka.emplace_back(ElementKey(a[i], i), &a[i]);
      index_a.emplace(ka.back().first, &a[i]);
    }
    for (size_t i = 0; i < b.size(); ++i) {
      kb.emplace_back(ElementKey(b[i], i), &b[i]);
      index_b.emplace(kb.back().first, &b[i]);
    }
    static const json kNull;
    for (const auto& [k, v] : ka) {
      auto it = index_b.find(k);
      Compare(*v, it == index_b.end() ? kNull : *it->second, absl::StrCat(path, "[", k, "]"), out);
    }
    for (const auto& [k, v] : kb) {
      if (!index_a.count(k)) Compare(kNull, *v, absl::StrCat(path, "[", k, "]"), out);
    }
    return;
  }
  if (a == b) return;
  Difference d;
  d.field = path;
  d.a = Show(a);
  d.b = Show(b);
  Classify(path, &d);
  out->differences.push_back(std::move(d));
}

}  // namespace

DiffResult Diff(const json& a, const json& b) {
  DiffResult r;
  Compare(a, b, "", &r);
  std::stable_sort(r.differences.begin(), r.differences.end(),
                   [](const Difference& x, const Difference& y) {
                     if (x.rank != y.rank) return x.rank < y.rank;
                     return x.field < y.field;
                   });
  for (const Difference& d : r.differences) r.version_differences += d.is_version;
  return r;
}

json DiffToJson(const DiffResult& diff, const std::string& a_name, const std::string& b_name) {
  json out;
  out["format"] = formats::kEnvDiff;
  out["version"] = 1;
  out["a"] = a_name;
  out["b"] = b_name;
  json list = json::array();
  for (const Difference& d : diff.differences) {
    list.push_back({{"category", d.category},
                    {"field", d.field},
                    {"a", d.a},
                    {"b", d.b},
                    {"is_version", d.is_version}});
  }
  out["differences"] = std::move(list);
  out["version_differences"] = diff.version_differences;
  out["other_differences"] = static_cast<int>(diff.differences.size()) - diff.version_differences;
  out["identical"] = diff.identical();
  return out;
}

std::string RenderDiff(const DiffResult& diff, const std::string& a_name,
                       const std::string& b_name) {
  if (diff.identical()) {
    return absl::StrCat("No differences between ", a_name, " and ", b_name,
                        " (volatile readings such as temperatures are not compared).\n");
  }
  Table t({"category", "field", "A", "B"});
  for (const Difference& d : diff.differences) {
    t.AddRow({d.category + (d.is_version ? " (version)" : ""), d.field, d.a, d.b});
  }
  std::string out = absl::StrCat("A = ", a_name, "\nB = ", b_name, "\n", t.Render(70));
  int other = static_cast<int>(diff.differences.size()) - diff.version_differences;
  absl::StrAppend(&out, diff.version_differences, " version difference(s), ", other,
                  " other difference(s).");
  if (diff.version_differences > 0) {
    absl::StrAppend(&out,
                    " Align the versions first: the top row is the most likely cause of "
                    "behaviour that differs between the two machines.");
  }
  out += "\n";
  return out;
}

}  // namespace trainscope::env
