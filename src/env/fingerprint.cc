// Fingerprint(): runs the probes (child programs concurrently), assembles the document,
// and renders its summary.
#include "trainscope/env/fingerprint.h"

#include <functional>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "env/json_doc.h"
#include "env/parsers.h"
#include "env/probes.h"
#include "trainscope/core/table.h"

namespace trainscope::env {

using nlohmann::json;

namespace {

// A probe to run, its result slot, and how long it took.
struct Task {
  std::string name;
  std::function<json()> run;
  json result;
  double ms = 0;
};

void RunTasks(Os* os, std::vector<Task>* tasks, bool parallel) {
  auto one = [os](Task* t) {
    int64_t t0 = os->MonotonicNs();
    t->result = t->run();
    t->ms = (os->MonotonicNs() - t0) / 1e6;
  };
  if (!parallel) {
    for (Task& t : *tasks) one(&t);
    return;
  }
  std::vector<std::thread> threads;
  threads.reserve(tasks->size());
  for (Task& t : *tasks) threads.emplace_back(one, &t);
  for (std::thread& th : threads) th.join();
}

}  // namespace

absl::StatusOr<json> Fingerprint(Os* os, const FingerprintOptions& options) {
  if (os == nullptr) return absl::InvalidArgumentError("Fingerprint: null Os");
  const int64_t start_ns = os->MonotonicNs();
  std::vector<std::string> pythons = options.pythons.empty() ? DefaultPythons(os) : options.pythons;

  // Child programs first (they are the slow part), in threads when allowed; the file
  // probes run on this thread meanwhile.
  std::vector<Task> tasks;
  tasks.push_back({"nvidia", [os, &options] { return ProbeNvidia(os, options.tool_timeout); }});
  tasks.push_back({"ascend", [os, &options] { return ProbeAscend(os, options.tool_timeout); }});
  tasks.push_back({"shm", [os, &options] { return ProbeShm(os, options.tool_timeout); }});
  tasks.push_back({"toolkits", [os, &options] { return ProbeToolkits(os, options.tool_timeout); }});
  for (size_t i = 0; i < pythons.size(); ++i) {
    std::string py = pythons[i];
    tasks.push_back({absl::StrCat("python", i),
                     [os, py, &options] { return ProbePython(os, py, options.python_timeout); }});
  }
  std::thread runner;
  if (options.parallel) {
    runner = std::thread([os, &tasks] { RunTasks(os, &tasks, true); });
  } else {
    RunTasks(os, &tasks, false);
  }
  int64_t t0 = os->MonotonicNs();
  json host = ProbeHost(os);
  json limits = ProbeLimits(os);
  json network = ProbeNetwork(os);
  json env_vars = ProbeEnvVars(os);
  double host_ms = (os->MonotonicNs() - t0) / 1e6;
  absl::StatusOr<std::string> hostname = os->ReadFile("/proc/sys/kernel/hostname");
  if (runner.joinable()) runner.join();

  json doc;
  doc["format"] = kFingerprintFormat;
  doc["version"] = kFingerprintVersion;
  doc["trainscope_version"] = TS_VERSION;
  doc["created_unix_us"] = os->WallUs();
  doc["hostname"] =
      hostname.ok() ? json(std::string(absl::StripAsciiWhitespace(*hostname))) : json(kAbsent);
  doc["host"] = std::move(host);
  json shm = tasks[2].result;
  limits["shm_size_bytes"] = shm["shm_size_bytes"];
  limits["shm_available_bytes"] = shm["shm_available_bytes"];
  doc["limits"] = std::move(limits);
  json acc;
  const json& nv = tasks[0].result;
  const json& as = tasks[1].result;
  std::vector<std::string> kinds;
  if (nv.is_object()) kinds.push_back("nvidia");
  if (as.is_object()) kinds.push_back("ascend");
  acc["kind"] = kinds.empty() ? "none" : absl::StrJoin(kinds, "+");
  acc["nvidia"] = nv;
  acc["ascend"] = as;
  doc["accelerators"] = std::move(acc);
  doc["toolkits"] = tasks[3].result;
  json frameworks = json::array();
  for (size_t i = 4; i < tasks.size(); ++i) frameworks.push_back(tasks[i].result);
  doc["frameworks"] = std::move(frameworks);
  doc["network"] = std::move(network);
  doc["env"] = std::move(env_vars);
  if (options.timings) {
    json ms;
    ms["host_files"] = host_ms;
    for (const Task& t : tasks) ms[t.name] = t.ms;
    ms["total"] = (os->MonotonicNs() - start_ns) / 1e6;
    doc["probe_ms"] = std::move(ms);
  }
  // Probes copy bytes from the machine (environment variables, tool output) that need not
  // be UTF-8; json::dump() would throw on them.
  SanitizeUtf8(&doc);
  return doc;
}

const json& FingerprintSchema() {
  static const json* schema = new json(json::parse(kEmbeddedFingerprintSchema));
  return *schema;
}

absl::StatusOr<json> LoadFingerprint(Os* os, const std::string& path) {
  absl::StatusOr<json> doc = ReadJsonFile(os, path);
  if (!doc.ok()) return doc.status();
  // Checked by hand before the schema, for a clearer message; find()/is_string(), as
  // value("format", "") throws type_error.302 when "format" is not a string.
  auto format = doc->is_object() ? doc->find("format") : doc->end();
  if (!doc->is_object() || format == doc->end() || !format->is_string() ||
      format->get_ref<const std::string&>() != kFingerprintFormat) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": $.format: not an environment fingerprint (expected \"format\": \"",
        kFingerprintFormat, "\"; make one with `trainscope env fingerprint -o FILE`)"));
  }
  absl::Status st = ValidateAgainstSchema(*doc, FingerprintSchema(), path);
  if (!st.ok()) return st;
  return doc;
}

namespace {

std::string Text(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_null()) return "";
  return v.dump();
}

std::string Bytes(const json& v) {
  if (v.is_number()) return FormatBytes(v.get<double>());
  return Text(v);
}

}  // namespace

std::string RenderFingerprintSummary(const json& fp) {
  Table t({"item", "value"});
  const json& h = fp.value("host", json::object());
  t.AddRow(
      {"host", absl::StrCat(Text(h.value("os", json())), ", kernel ",
                            Text(h.value("kernel", json())), ", ", Text(h.value("arch", json())))});
  t.AddRow({"cpu", absl::StrCat(Text(h.value("cpu_model", json())), ", ",
                                Text(h.value("logical_cpus", json())), " logical CPUs, ",
                                Text(h.value("numa_nodes", json())), " NUMA node(s)")});
  t.AddRow({"memory", absl::StrCat(Bytes(h.value("mem_total_bytes", json())), " total, ",
                                   Bytes(h.value("mem_available_bytes", json())), " available, ",
                                   Text(h.value("hugepages_total", json())), " huge pages")});
  const json& l = fp.value("limits", json::object());
  t.AddRow({"limits", absl::StrCat("memlock ", Bytes(l.value("memlock_soft_bytes", json())),
                                   ", open files ", Text(l.value("nofile_soft", json())),
                                   ", /dev/shm ", Bytes(l.value("shm_size_bytes", json())), " (",
                                   Bytes(l.value("shm_available_bytes", json())), " free)")});
  const json& acc = fp.value("accelerators", json::object());
  const json& nv = acc.value("nvidia", json());
  if (nv.is_object()) {
    std::string gpus;
    if (nv.value("gpus", json()).is_array()) {
      std::map<std::string, int> names;
      for (const json& g : nv["gpus"]) names[Text(g.value("name", json()))]++;
      for (const auto& [n, c] : names) absl::StrAppend(&gpus, gpus.empty() ? "" : ", ", c, "x ", n);
    } else {
      gpus = Text(nv.value("gpus", json()));
    }
    t.AddRow({"nvidia", absl::StrCat("driver ", Text(nv.value("driver_version", json())), ", CUDA ",
                                     Text(nv.value("cuda_driver_version", json())), "; ", gpus)});
  } else {
    t.AddRow({"nvidia", Text(nv)});
  }
  const json& as = acc.value("ascend", json());
  if (as.is_object()) {
    std::string npus;
    if (as.value("npus", json()).is_array()) {
      std::map<std::string, int> names;
      for (const json& d : as["npus"]) {
        names[absl::StrCat(Text(d.value("name", json())), " (", Text(d.value("health", json())),
                           ")")]++;
      }
      for (const auto& [n, c] : names) absl::StrAppend(&npus, npus.empty() ? "" : ", ", c, "x ", n);
    } else {
      npus = Text(as.value("npus", json()));
    }
    t.AddRow(
        {"ascend", absl::StrCat("driver ", Text(as.value("driver_version", json())), ", firmware ",
                                Text(as.value("firmware_version", json())), "; ", npus)});
  } else {
    t.AddRow({"ascend", Text(as)});
  }
  const json& tk = fp.value("toolkits", json::object());
  for (const char* k : {"cuda_toolkit", "cudnn", "nccl", "mpi", "gloo", "libtorch", "cann"}) {
    std::string v = Text(tk.value(k, json()));
    // Where it was found, for the two that have a root (also keeps "13.0" from being
    // aligned as a number).
    const char* where = std::string(k) == "cuda_toolkit" ? "cuda_toolkit_path"
                        : std::string(k) == "cann"       ? "cann_path"
                                                         : nullptr;
    if (where && tk.value(where, json()).is_string() && tk[where] != "absent") {
      absl::StrAppend(&v, " (", Text(tk[where]), ")");
    }
    t.AddRow({k, v});
  }
  for (const json& py : fp.value("frameworks", json::array())) {
    std::string status = Text(py.value("status", json()));
    std::string v = status == "ok"
                        ? absl::StrCat("python ", Text(py.value("python_version", json())),
                                       ", torch ", Text(py.value("torch", json())), " (cuda ",
                                       Text(py.value("torch_cuda", json())), "), torch_npu ",
                                       Text(py.value("torch_npu", json())))
                        : status;
    t.AddRow({Text(py.value("python", json())), v});
  }
  const json& env = fp.value("env", json::object());
  std::vector<std::string> names;
  for (auto it = env.begin(); it != env.end(); ++it) names.push_back(it.key());
  t.AddRow({"env", names.empty() ? "(no training variables set)" : absl::StrJoin(names, " ")});
  std::string out = t.Render(100);
  if (fp.contains("probe_ms") && fp["probe_ms"].contains("total")) {
    absl::StrAppend(&out, "probed in ", FormatDouble(fp["probe_ms"]["total"].get<double>(), 0),
                    " ms\n");
  }
  return out;
}

}  // namespace trainscope::env
