#include "env/parsers.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <set>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "env/xml.h"
#include "trainscope/core/utf8.h"

namespace trainscope::env {
namespace {

using nlohmann::json;

bool IsUnavailable(absl::string_view s) {
  return s.empty() || s == "N/A" || s == "NA" || s == "-" || s == "[N/A]" ||
         absl::StartsWith(s, "[Not Supported") || s == "Not Supported";
}

// A whole number or the string "absent".
json IntOrAbsent(absl::string_view s) {
  s = absl::StripAsciiWhitespace(s);
  long long v;
  if (!IsUnavailable(s) && absl::SimpleAtoi(s, &v)) return v;
  return kAbsent;
}

json TextOrAbsent(absl::string_view s) {
  s = absl::StripAsciiWhitespace(s);
  if (IsUnavailable(s)) return kAbsent;
  return std::string(s);
}

// "3318 / 65536" -> (3318, 65536).
bool ParsePair(absl::string_view s, json* used, json* total) {
  std::vector<std::string> parts = absl::StrSplit(s, '/');
  if (parts.size() != 2) return false;
  *used = IntOrAbsent(parts[0]);
  *total = IntOrAbsent(parts[1]);
  return true;
}

std::vector<std::string> Tokens(absl::string_view s) {
  return absl::StrSplit(s, absl::ByAnyChar(" \t"), absl::SkipEmpty());
}

// Sum of the numeric leaves below `node` whose name contains `needle`.
long long SumLeaves(const XmlNode& node, absl::string_view needle, bool* any) {
  long long sum = 0;
  for (const XmlNode& c : node.children) {
    if (!c.children.empty()) {
      sum += SumLeaves(c, needle, any);
    } else if (absl::StrContains(c.name, needle)) {
      long long v;
      if (absl::SimpleAtoi(c.text, &v)) {
        sum += v;
        *any = true;
      }
    }
  }
  return sum;
}

bool IsBusId(absl::string_view s) {
  // 0000:C1:00.0
  return s.size() >= 10 && s[4] == ':' && absl::StrContains(s, ".");
}

bool IsHealthWord(absl::string_view s) {
  static const char* kWords[] = {"OK",       "Warning",  "Alarm", "Critical", "Unknown",
                                 "NotExist", "Abnormal", "Fault", "Error"};
  for (const char* w : kWords) {
    if (absl::EqualsIgnoreCase(s, w)) return true;
  }
  return false;
}

}  // namespace

json ParseQuantity(absl::string_view text, double scale) {
  text = absl::StripAsciiWhitespace(text);
  if (IsUnavailable(text)) return kAbsent;
  std::vector<std::string> t = Tokens(text);
  if (t.empty()) return kAbsent;
  double v;
  if (!absl::SimpleAtod(t[0], &v)) return kAbsent;
  double scaled = v * scale;
  if (std::floor(scaled) == scaled && std::fabs(scaled) < 9e15) {
    return static_cast<long long>(scaled);
  }
  return scaled;
}

absl::StatusOr<json> ParseNvidiaSmiXml(absl::string_view xml) {
  absl::StatusOr<XmlNode> root = ParseXml(xml);
  if (!root.ok()) return root.status();
  if (root->name != "nvidia_smi_log") {
    return absl::InvalidArgumentError(
        absl::StrCat("root element is <", root->name, ">, expected <nvidia_smi_log>"));
  }
  json out;
  out["driver_version"] = TextOrAbsent(root->Text("driver_version"));
  out["cuda_driver_version"] = TextOrAbsent(root->Text("cuda_version"));
  json gpus = json::array();
  int index = 0;
  for (const XmlNode* g : root->Children("gpu")) {
    json gpu;
    std::string minor = g->Text("minor_number");
    long long idx;
    gpu["index"] = absl::SimpleAtoi(minor, &idx) ? idx : index;
    gpu["name"] = TextOrAbsent(g->Text("product_name"));
    gpu["uuid"] = TextOrAbsent(g->Text("uuid"));
    auto id = g->attributes.find("id");
    std::string bus = g->Text("pci/pci_bus_id");
    gpu["pci_bus_id"] = TextOrAbsent(bus.empty() && id != g->attributes.end() ? id->second : bus);
    gpu["memory_total_bytes"] = ParseQuantity(g->Text("fb_memory_usage/total"), 1048576.0);
    gpu["memory_used_bytes"] = ParseQuantity(g->Text("fb_memory_usage/used"), 1048576.0);
    gpu["temperature_c"] = ParseQuantity(g->Text("temperature/gpu_temp"), 1);
    std::string power = g->Text("gpu_power_readings/power_draw");
    if (power.empty()) power = g->Text("power_readings/power_draw");
    gpu["power_draw_w"] = ParseQuantity(power, 1);
    gpu["ecc_mode"] = TextOrAbsent(g->Text("ecc_mode/current_ecc"));
    // Uncorrected volatile ECC errors: newer drivers split SRAM/DRAM
    // ("sram_uncorrectable", "dram_uncorrectable"), older ones use double_bit/total.
    json unc = kAbsent;
    if (const XmlNode* ecc = g->Child("ecc_errors")) {
      if (const XmlNode* vol = ecc->Child("volatile")) {
        bool any = false;
        long long n = SumLeaves(*vol, "uncorrectable", &any);
        if (!any) {
          if (const XmlNode* db = vol->Child("double_bit")) {
            long long t;
            if (absl::SimpleAtoi(db->Text("total"), &t)) {
              n = t;
              any = true;
            }
          }
        }
        if (any) unc = n;
      }
    }
    gpu["ecc_uncorrected_volatile"] = unc;
    std::string pend = g->Text("retired_pages/pending_retirement");
    if (pend.empty()) pend = g->Text("retired_pages/pending_blacklist");
    gpu["pending_page_retirement"] = TextOrAbsent(pend);
    gpu["remapped_rows_pending"] = TextOrAbsent(g->Text("remapped_rows/remapped_row_pending"));
    gpu["persistence_mode"] = TextOrAbsent(g->Text("persistence_mode"));
    gpu["compute_mode"] = TextOrAbsent(g->Text("compute_mode"));
    gpu["mig_mode"] = TextOrAbsent(g->Text("mig_mode/current_mig"));
    gpu["clocks_sm_mhz"] = ParseQuantity(g->Text("clocks/sm_clock"), 1);
    gpu["clocks_mem_mhz"] = ParseQuantity(g->Text("clocks/mem_clock"), 1);
    gpu["max_clocks_sm_mhz"] = ParseQuantity(g->Text("max_clocks/sm_clock"), 1);
    gpu["max_clocks_mem_mhz"] = ParseQuantity(g->Text("max_clocks/mem_clock"), 1);
    gpus.push_back(std::move(gpu));
    ++index;
  }
  out["gpu_count"] = static_cast<int>(gpus.size());
  out["gpus"] = std::move(gpus);
  return out;
}

std::string ParseNvidiaProcVersion(absl::string_view text) {
  absl::string_view first = text.substr(0, text.find('\n'));
  for (const std::string& tok : Tokens(first)) {
    if (!tok.empty() && std::isdigit(static_cast<unsigned char>(tok[0])) &&
        absl::StrContains(tok, ".")) {
      bool ok = true;
      for (char c : tok) ok = ok && (std::isdigit(static_cast<unsigned char>(c)) || c == '.');
      if (ok) return tok;
    }
  }
  return "";
}

namespace {

// A chip row's right cell: "AICore(%)  Memory used / total  [HBM used / total]".
void FillChipUsage(const std::string& rest, bool has_hbm, json* dev) {
  std::vector<std::string> pairs;
  // Split "0  0 / 0  3318 / 65536" into the leading number and "a / b" pairs.
  // "3318/65536" and "61782/ 65536" occur too: space the slashes out first.
  std::vector<std::string> t = Tokens(absl::StrReplaceAll(rest, {{"/", " / "}}));
  (*dev)["aicore_pct"] = t.empty() ? json(kAbsent) : IntOrAbsent(t[0]);
  size_t i = 1;
  while (i < t.size()) {
    if (i + 2 < t.size() && t[i + 1] == "/") {
      pairs.push_back(t[i] + "/" + t[i + 2]);
      i += 3;
    } else {
      ++i;
    }
  }
  json used = kAbsent, total = kAbsent;
  if (!pairs.empty() && ParsePair(pairs[0], &used, &total)) {
    (*dev)["memory_used_mb"] = used;
    (*dev)["memory_total_mb"] = total;
  }
  if (has_hbm && pairs.size() >= 2 && ParsePair(pairs[1], &used, &total)) {
    (*dev)["hbm_used_mb"] = used;
    (*dev)["hbm_total_mb"] = total;
  }
}

}  // namespace

// npu-smi info prints a box table. Each device is two '|'-rows: an NPU row
// ("NPU Name | Health | Power Temp Hugepages used/total") and a chip row
// ("Chip [Phy-ID|Device] | Bus-Id | AICore Memory used/total [HBM used/total]").
// A3 repeats the NPU row per chip (Power "-" on the second); 310P may list several chip
// rows under one NPU row. A second table lists processes per (NPU, chip).
absl::StatusOr<json> ParseNpuSmiInfo(absl::string_view raw_text) {
  // Invalid UTF-8 (a garbled capture) would make the JSON unprintable: replaced.
  const std::string text = ValidUtf8(std::string_view(raw_text.data(), raw_text.size()));
  json out;
  out["npu_smi_version"] = kAbsent;
  out["driver_version"] = kAbsent;
  json npus = json::array();
  json npu_row;  // the last NPU row seen
  bool has_hbm = false, has_phy = false, has_device = false, in_processes = false;
  std::map<std::string, int> process_count;  // "npu/chip" -> processes
  json skipped = json::array();              // lines that are no part of the table
  int lineno = 0, incomplete = 0;
  bool npu_row_pending = false;  // an NPU row still waiting for its chip row
  std::vector<std::string> lines = absl::StrSplit(text, '\n');
  for (const std::string& raw : lines) {
    absl::string_view line = absl::StripAsciiWhitespace(raw);
    if (absl::StrContains(line, "npu-smi") && absl::StrContains(line, "Version:")) {
      ++lineno;
      std::vector<std::string> t = Tokens(absl::StripSuffix(absl::StripPrefix(line, "|"), "|"));
      for (size_t i = 0; i + 1 < t.size(); ++i) {
        if (t[i] == "npu-smi") out["npu_smi_version"] = t[i + 1];
        if (t[i] == "Version:") out["driver_version"] = t[i + 1];
      }
      continue;
    }
    ++lineno;
    if (!line.empty() && line[0] != '|' && line[0] != '+')  // "..." in a pasted excerpt
      skipped.push_back(
          absl::StrCat("line ", lineno, ": ", ValidUtf8(std::string(line.substr(0, 80)))));
    if (line.empty() || line[0] != '|') continue;
    std::vector<std::string> cells = absl::StrSplit(line.substr(1), '|');
    if (!cells.empty() && absl::StripAsciiWhitespace(cells.back()).empty()) cells.pop_back();
    for (std::string& c : cells) c = std::string(absl::StripAsciiWhitespace(c));
    if (cells.empty()) continue;
    if (absl::StrContains(line, "Process id") || absl::StrContains(line, "Process name")) {
      in_processes = true;
      continue;
    }
    if (cells[0].rfind("Chip", 0) == 0) {  // second header line
      has_hbm = absl::StrContains(line, "HBM");
      has_phy = absl::StrContains(cells[0], "Phy-ID");
      has_device = absl::StrContains(cells[0], "Device");
      continue;
    }
    if (cells[0].rfind("NPU", 0) == 0) continue;  // first header line
    if (in_processes) {
      // "| 0       0                 | 12345         | python  | 3000 |"
      std::vector<std::string> id = Tokens(cells[0]);
      if (id.size() >= 2 && cells.size() >= 2) {
        long long pid;
        if (absl::SimpleAtoi(cells[1], &pid)) process_count[id[0] + "/" + id[1]]++;
      }
      continue;
    }
    if (cells.size() < 3) continue;
    std::vector<std::string> id = Tokens(cells[0]);
    std::vector<std::string> right = Tokens(absl::StrReplaceAll(cells[2], {{"/", " / "}}));
    if (IsBusId(cells[1])) {
      if (npu_row.is_null() || id.empty()) continue;
      npu_row_pending = false;
      json dev = npu_row;
      long long chip;
      dev["chip"] = absl::SimpleAtoi(id[0], &chip) ? json(chip) : json(kAbsent);
      if (id.size() >= 2 && (has_phy || has_device)) {
        dev[has_phy ? "phy_id" : "device_id"] = IntOrAbsent(id[1]);
      }
      dev["bus_id"] = cells[1];
      FillChipUsage(cells[2], has_hbm, &dev);
      npus.push_back(std::move(dev));
      continue;
    }
    if (IsHealthWord(cells[1]) && !id.empty()) {
      npu_row = json::object();
      if (npu_row_pending) ++incomplete;
      npu_row_pending = true;
      long long npu;
      npu_row["npu"] = absl::SimpleAtoi(id[0], &npu) ? json(npu) : json(kAbsent);
      std::string name;
      for (size_t i = 1; i < id.size(); ++i) absl::StrAppend(&name, i > 1 ? " " : "", id[i]);
      npu_row["name"] = TextOrAbsent(name);
      npu_row["health"] = cells[1];
      npu_row["power_w"] = right.size() > 0 ? ParseQuantity(right[0], 1) : json(kAbsent);
      npu_row["temp_c"] = right.size() > 1 ? ParseQuantity(right[1], 1) : json(kAbsent);
      json hu = kAbsent, ht = kAbsent;
      if (right.size() >= 5 && right[3] == "/") {
        hu = IntOrAbsent(right[2]);
        ht = IntOrAbsent(right[4]);
      }
      npu_row["hugepages_used"] = hu;
      npu_row["hugepages_total"] = ht;
    }
  }
  if (npus.empty()) {
    return absl::InvalidArgumentError("no NPU device rows found in npu-smi output");
  }
  for (json& d : npus) {
    std::string key = absl::StrCat(d["npu"].dump(), "/", d["chip"].dump());
    auto it = process_count.find(key);
    d["processes"] = it == process_count.end() ? 0 : it->second;
  }
  // An NPU row without its chip row: a table cut short (counted, the rest kept).
  out["incomplete_npu_rows"] = incomplete + (npu_row_pending ? 1 : 0);
  out["skipped_lines"] = std::move(skipped);
  out["npus"] = std::move(npus);
  return out;
}

std::map<std::string, std::string> ParseKeyValues(absl::string_view text) {
  std::map<std::string, std::string> kv;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    size_t eq = line.find('=');
    size_t colon = line.find(':');
    size_t sep = eq != absl::string_view::npos ? eq : colon;
    if (sep == absl::string_view::npos || sep == 0) continue;
    std::string key = absl::AsciiStrToLower(absl::StripAsciiWhitespace(line.substr(0, sep)));
    absl::string_view value = absl::StripAsciiWhitespace(line.substr(sep + 1));
    if (value.size() >= 2 && (value.front() == '"' || value.front() == '\'') &&
        value.back() == value.front()) {
      value = value.substr(1, value.size() - 2);
    }
    kv.emplace(key, std::string(value));
  }
  return kv;
}

std::string ParseCannVersionCfg(absl::string_view text) {
  for (const auto& [key, value] : ParseKeyValues(text)) {
    if (!absl::EndsWith(key, "_running_version")) continue;
    absl::string_view v = absl::StripSuffix(absl::StripPrefix(value, "["), "]");
    size_t colon = v.rfind(':');
    if (colon != absl::string_view::npos) v = v.substr(colon + 1);
    if (!v.empty()) return std::string(v);
  }
  return "";
}

absl::StatusOr<json> ParseProcLimits(absl::string_view text) {
  json out;
  struct Want {
    const char* prefix;
    const char* soft;
    const char* hard;
  };
  static const Want kWants[] = {
      {"Max locked memory", "memlock_soft_bytes", "memlock_hard_bytes"},
      {"Max open files", "nofile_soft", "nofile_hard"},
      {"Max processes", "nproc_soft", nullptr},
      {"Max stack size", "stack_soft_bytes", nullptr},
  };
  int found = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    for (const Want& w : kWants) {
      if (!absl::StartsWith(line, w.prefix)) continue;
      std::vector<std::string> t = Tokens(line.substr(strlen(w.prefix)));
      if (t.size() < 2) continue;
      auto value = [](const std::string& s) -> json {
        if (s == "unlimited") return "unlimited";
        long long v;
        if (absl::SimpleAtoi(s, &v)) return v;
        return kAbsent;
      };
      out[w.soft] = value(t[0]);
      if (w.hard) out[w.hard] = value(t[1]);
      ++found;
    }
  }
  if (found == 0) return absl::InvalidArgumentError("no known limit lines");
  return out;
}

absl::StatusOr<json> ParseMeminfo(absl::string_view text) {
  std::map<std::string, long long> kb;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    size_t colon = line.find(':');
    if (colon == absl::string_view::npos) continue;
    std::vector<std::string> t = Tokens(line.substr(colon + 1));
    long long v;
    if (!t.empty() && absl::SimpleAtoi(t[0], &v)) kb[std::string(line.substr(0, colon))] = v;
  }
  if (!kb.count("MemTotal")) return absl::InvalidArgumentError("no MemTotal line");
  json out;
  auto bytes = [&](const char* k) -> json {
    auto it = kb.find(k);
    return it == kb.end() ? json(kAbsent) : json(it->second * 1024);
  };
  auto count = [&](const char* k) -> json {
    auto it = kb.find(k);
    return it == kb.end() ? json(kAbsent) : json(it->second);
  };
  out["mem_total_bytes"] = bytes("MemTotal");
  out["mem_available_bytes"] = bytes("MemAvailable");
  out["swap_total_bytes"] = bytes("SwapTotal");
  out["hugepages_total"] = count("HugePages_Total");
  out["hugepages_free"] = count("HugePages_Free");
  out["hugepage_size_bytes"] = bytes("Hugepagesize");
  return out;
}

json ParseCpuinfo(absl::string_view text) {
  std::string model, implementer, part;
  int cpus = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    size_t colon = line.find(':');
    if (colon == absl::string_view::npos) continue;
    absl::string_view key = absl::StripAsciiWhitespace(line.substr(0, colon));
    std::string value(absl::StripAsciiWhitespace(line.substr(colon + 1)));
    if (key == "processor")
      ++cpus;
    else if (key == "model name" && model.empty())
      model = value;
    else if (key == "CPU implementer" && implementer.empty())
      implementer = value;
    else if (key == "CPU part" && part.empty())
      part = value;
  }
  if (model.empty() && !implementer.empty()) {
    // Arm implementer/part ids (Linux arch/arm64 cputype.h).
    static const struct {
      const char* impl;
      const char* part;
      const char* name;
    } kArm[] = {
        {"0x48", "0xd01", "HiSilicon Kunpeng-920"}, {"0x48", "0xd02", "HiSilicon Kunpeng-930"},
        {"0x41", "0xd0c", "Arm Neoverse-N1"},       {"0x41", "0xd40", "Arm Neoverse-V1"},
        {"0x41", "0xd4f", "Arm Neoverse-V2"},       {"0x41", "0xd49", "Arm Neoverse-N2"},
    };
    for (const auto& a : kArm) {
      if (implementer == a.impl && part == a.part) model = a.name;
    }
    if (model.empty()) model = absl::StrCat("arm implementer ", implementer, " part ", part);
  }
  json out;
  out["cpu_model"] = model.empty() ? json(kAbsent) : json(model);
  out["logical_cpus"] = cpus > 0 ? json(cpus) : json(kAbsent);
  return out;
}

int CountCpuList(absl::string_view list) {
  list = absl::StripAsciiWhitespace(list);
  if (list.empty()) return -1;
  int n = 0;
  for (absl::string_view range : absl::StrSplit(list, ',')) {
    std::vector<std::string> ends = absl::StrSplit(range, '-');
    int a, b;
    if (ends.size() == 1 && absl::SimpleAtoi(ends[0], &a)) {
      ++n;
    } else if (ends.size() == 2 && absl::SimpleAtoi(ends[0], &a) && absl::SimpleAtoi(ends[1], &b) &&
               b >= a) {
      n += b - a + 1;
    } else {
      return -1;
    }
  }
  return n;
}

absl::StatusOr<json> ParseDf(absl::string_view text) {
  std::vector<std::string> lines = absl::StrSplit(text, '\n', absl::SkipWhitespace());
  if (lines.size() < 2) return absl::InvalidArgumentError("df printed no data line");
  // Filesystem 1-blocks Used Available Capacity Mounted-on
  std::vector<std::string> t = Tokens(lines[1]);
  long long size, avail;
  if (t.size() < 6 || !absl::SimpleAtoi(t[1], &size) || !absl::SimpleAtoi(t[3], &avail)) {
    return absl::InvalidArgumentError(absl::StrCat("unexpected df line: ", lines[1]));
  }
  return json{{"size_bytes", size}, {"available_bytes", avail}};
}

std::map<std::string, std::string> ParseDefines(absl::string_view header,
                                                std::initializer_list<const char*> names) {
  std::map<std::string, std::string> out;
  for (absl::string_view line : absl::StrSplit(header, '\n')) {
    line = absl::StripLeadingAsciiWhitespace(line);
    if (!absl::ConsumePrefix(&line, "#")) continue;
    line = absl::StripLeadingAsciiWhitespace(line);
    if (!absl::ConsumePrefix(&line, "define")) continue;
    std::vector<std::string> t = Tokens(line);
    if (t.size() < 2) continue;
    for (const char* n : names) {
      if (t[0] == n && !out.count(n)) {
        std::string v = t[1];
        if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
        out[n] = v;
      }
    }
  }
  return out;
}

}  // namespace trainscope::env
