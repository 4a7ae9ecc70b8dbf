// npu-smi's "Key : Value" outputs (`npu-smi info -t board -i N [-c C]`, `-t health`), and
// the fields the fingerprint shares with nvidia-smi's GPUs.
//
// These outputs are one "Key<spaces>: Value" line per field, indented or not, with blank lines
// between sections. `-t board -i N` describes the card (Software Version, Firmware Version,
// Board ID, PCIe Bus Info, PCI ids, Chip Count), `-t board -i N -c C` one chip (Chip ID, Chip
// Name, VDie ID, ...), `-t health` the health status with its error code. Some outputs hold
// several chips, each block ending or starting with "Chip ID": a key that repeats starts the
// next record. Keys are matched case-insensitively with spaces removed ("PCIe Bus Info" and
// "PCIeBusInfo" are both seen); unknown keys are kept under "other" and listed, lines that are
// not "Key : Value" are counted.
#include <cctype>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "env/parsers.h"
#include "env/probes.h"
#include "trainscope/core/utf8.h"

namespace trainscope::env {
namespace {

using nlohmann::json;

struct NpuSmiField {
  const char* key;   // lower case, no spaces
  const char* name;  // our name
  bool integer;
};

// Both outputs' keys (board and health), as npu-smi prints them on Atlas A2/A3 and 310P.
constexpr NpuSmiField kNpuSmiFields[] = {
    {"npuid", "npu", true},
    {"chipid", "chip", true},
    {"chipcount", "chip_count", true},
    {"productname", "product_name", false},
    {"model", "model", false},
    {"manufacturer", "manufacturer", false},
    {"serialnumber", "serial_number", false},
    {"softwareversion", "software_version", false},
    {"firmwareversion", "firmware_version", false},
    {"compatibility", "compatibility", false},
    {"boardid", "board_id", false},
    {"pcbid", "pcb_id", false},
    {"bomid", "bom_id", false},
    {"pciebusinfo", "bus_id", false},
    {"slotid", "slot_id", true},
    {"classid", "class_id", false},
    {"pcivendorid", "pci_vendor_id", false},
    {"pcideviceid", "pci_device_id", false},
    {"subsystemvendorid", "subsystem_vendor_id", false},
    {"subsystemdeviceid", "subsystem_device_id", false},
    {"chiptype", "chip_type", false},
    {"chipname", "chip_name", false},
    {"chipversion", "chip_version", false},
    {"vdieid", "vdie_id", false},
    {"ndieid", "ndie_id", false},
    {"chippositionid", "chip_position_id", true},
    {"healthstatus", "health", false},
    {"health", "health", false},
    {"errorcode", "error_code", false},
    {"errorinformation", "error_information", false},
};

std::string NpuSmiKey(absl::string_view key) {
  std::string out;
  for (char c : key)
    if (!std::isspace(static_cast<unsigned char>(c)))
      out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

json NpuSmiValue(absl::string_view v, bool integer) {
  v = absl::StripAsciiWhitespace(v);
  if (v.empty() || v == "NA" || v == "N/A" || v == "-") return kAbsent;
  long long x;
  if (integer && absl::SimpleAtoi(v, &x)) return x;
  return std::string(v);
}

}  // namespace

absl::StatusOr<json> ParseNpuSmiFields(absl::string_view raw_text, absl::string_view what) {
  // Invalid UTF-8 (a garbled terminal capture) would make the JSON unprintable: replaced.
  const std::string text = ValidUtf8(std::string_view(raw_text.data(), raw_text.size()));
  json records = json::array();
  json cur = json::object();
  json unknown = json::array();
  json skipped = json::array();
  int lineno = 0, fields = 0;
  for (absl::string_view raw : absl::StrSplit(text, '\n')) {
    ++lineno;
    absl::string_view line = absl::StripAsciiWhitespace(raw);
    if (line.empty()) continue;
    size_t colon = line.find(':');
    // "PCIe Bus Info : 0000:61:00.0": the key ends at the first colon.
    if (colon == absl::string_view::npos || colon == 0) {
      skipped.push_back(
          absl::StrCat("line ", lineno, ": ", ValidUtf8(std::string(line.substr(0, 80)))));
      continue;
    }
    std::string key = NpuSmiKey(line.substr(0, colon));
    absl::string_view value = line.substr(colon + 1);
    const NpuSmiField* f = nullptr;
    for (const NpuSmiField& k : kNpuSmiFields)
      if (key == k.key) f = &k;
    std::string name = f ? f->name : "";
    if (f == nullptr) {
      std::string label(absl::StripAsciiWhitespace(line.substr(0, colon)));
      if (!cur.contains("other")) cur["other"] = json::object();
      if (cur["other"].contains(label)) {  // a repeated key starts the next record
        records.push_back(std::move(cur));
        cur = json::object({{"other", json::object()}});
      }
      cur["other"][label] = std::string(absl::StripAsciiWhitespace(value));
      bool listed = false;
      for (const json& u : unknown) listed = listed || u == label;
      if (!listed) unknown.push_back(label);
      ++fields;
      continue;
    }
    if (cur.contains(name)) {
      records.push_back(std::move(cur));
      cur = json::object();
    }
    cur[name] = NpuSmiValue(value, f->integer);
    ++fields;
  }
  if (!cur.empty()) records.push_back(std::move(cur));
  if (fields == 0)
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": no \"Key : Value\" line (", skipped.size(), " other lines)"));
  json out = {{"records", records}, {"unknown_keys", unknown}, {"skipped_lines", skipped}};
  return out;
}

void AddGpuLikeFields(json* npus) {
  int index = 0;
  for (json& d : *npus) {
    d["index"] = index++;  // the logical order ASCEND_RT_VISIBLE_DEVICES counts in
    if (d.contains("bus_id")) d["pci_bus_id"] = d["bus_id"];
    // HBM where the card has it (A2/A3), else its DDR (310P); npu-smi's MB are MiB.
    const char* used = d.contains("hbm_total_mb") ? "hbm_used_mb" : "memory_used_mb";
    const char* total = d.contains("hbm_total_mb") ? "hbm_total_mb" : "memory_total_mb";
    for (auto [from, to] : {std::pair{used, "memory_used_bytes"}, {total, "memory_total_bytes"}}) {
      const json& v = d.value(from, json());
      d[to] = v.is_number_integer() ? json(v.get<long long>() * 1048576LL) : json(kAbsent);
    }
    d["temperature_c"] = d.value("temp_c", json(kAbsent));
    d["power_draw_w"] = d.value("power_w", json(kAbsent));
  }
}

void MergeNpuSmiRecord(const json& record, long long npu, long long chip, const char* prefix,
                       json* npus) {
  for (json& d : *npus) {
    if (d.value("npu", json()) != json(npu)) continue;
    if (chip >= 0 && d.value("chip", json()) != json(chip)) continue;
    for (auto it = record.begin(); it != record.end(); ++it) {
      const std::string& k = it.key();
      // Ids are the query's; npu-smi info's own bus id and health stay.
      if (k == "npu" || k == "chip" || k == "other" || k == "chip_count" || k == "bus_id" ||
          k == "health")
        continue;
      if (it->is_string() && it->get<std::string>() == kAbsent) continue;
      d[absl::StrCat(prefix, k)] = *it;
    }
  }
}

void ProbeNpuSmiDetails(Os* os, std::chrono::milliseconds timeout, json* ascend) {
  json& npus = (*ascend)["npus"];
  if (!npus.is_array()) return;
  json errors = ascend->value("npu_smi_errors", json::array()), unknown = json::array();
  auto run = [&](const std::vector<std::string>& argv) -> json {
    std::string out, what = absl::StrJoin(argv, " ");
    json failure;
    if (!RunTool(os, argv, timeout, &out, &failure)) {
      errors.push_back(absl::StrCat(
          what, ": ", failure.is_string() ? failure.get<std::string>() : failure.dump()));
      return json();
    }
    absl::StatusOr<json> p = ParseNpuSmiFields(out, what);
    if (!p.ok()) {
      errors.push_back(std::string(p.status().message()));
      return json();
    }
    for (const json& k : (*p)["unknown_keys"])
      unknown.push_back(what + ": " + k.get<std::string>());
    for (const json& l : (*p)["skipped_lines"])
      errors.push_back(what + ": skipped " + l.get<std::string>());
    return (*p)["records"];
  };
  // Bounded: a 16-card A3 node takes 16 board and 32 health queries.
  constexpr int kMaxQueries = 96;
  int queries = 0;
  std::set<long long> cards;
  for (const json& d : npus) {
    const json& n = d.value("npu", json());
    if (!n.is_number_integer() || queries >= kMaxQueries) continue;
    long long npu = n.get<long long>();
    if (cards.insert(npu).second) {
      ++queries;
      json records = run({"npu-smi", "info", "-t", "board", "-i", std::to_string(npu)});
      if (records.is_array() && !records.empty()) MergeNpuSmiRecord(records[0], npu, -1, "", &npus);
    }
    const json& c = d.value("chip", json());
    if (!c.is_number_integer()) continue;
    ++queries;
    json records = run({"npu-smi", "info", "-t", "health", "-i", std::to_string(npu), "-c",
                        std::to_string(c.get<long long>())});
    if (records.is_array() && !records.empty())
      MergeNpuSmiRecord(records[0], npu, c.get<long long>(), "health_", &npus);
  }
  // The card's own versions when the version.info files are not readable (a container).
  for (const json& d : npus) {
    for (auto [from, to] : {std::pair{"firmware_version", "firmware_version"},
                            {"software_version", "driver_version"}}) {
      const json& v = d.value(from, json());
      if (v.is_string() && (*ascend).value(to, json()) == json(kAbsent)) (*ascend)[to] = v;
    }
  }
  AddGpuLikeFields(&npus);
  if (!errors.empty()) (*ascend)["npu_smi_errors"] = errors;
  if (!unknown.empty()) (*ascend)["npu_smi_unknown_keys"] = unknown;
}

}  // namespace trainscope::env
