// Reading the link matrix of `nvidia-smi topo -m` and `npu-smi info -t topo`.
//
// Both print a header row of column names (GPU0.. or NPU0.., then NICs, then the attribute
// columns "CPU Affinity", "NUMA Affinity", "GPU NUMA ID"), one row per column with a link
// class per cell, then a legend. nvidia-smi separates cells with tabs (a self cell is " X ",
// an empty attribute is two tabs in a row) and underlines the header with ANSI codes when it
// thinks it writes to a terminal; npu-smi aligns with spaces. Splitting on any whitespace
// reads both: a link cell is never empty, and attribute cells are taken in order.
#include <cctype>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "trainscope/core/os.h"
#include "trainscope/topo/topo.h"

namespace trainscope::topo {
namespace {

// Drops ANSI escape sequences (ESC '[' parameters final-byte) and carriage returns.
std::string TopoStripAnsi(const std::string& line) {
  std::string out;
  out.reserve(line.size());
  for (size_t i = 0; i < line.size(); ++i) {
    if (line[i] == '\x1b' && i + 1 < line.size() && line[i + 1] == '[') {
      i += 2;
      while (i < line.size() && !(line[i] >= '@' && line[i] <= '~')) ++i;
      continue;
    }
    if (line[i] == '\r') continue;
    out.push_back(line[i]);
  }
  return out;
}

std::vector<std::string> TopoTokens(const std::string& line) {
  return absl::StrSplit(line, absl::ByAnyChar(" \t\v\f"), absl::SkipEmpty());
}

// "GPU12" -> ("GPU", 12); false for anything else.
bool TopoDeviceName(const std::string& name, std::string* kind, int* index) {
  for (const char* k : {"GPU", "NPU"}) {
    absl::string_view rest(name);
    if (absl::ConsumePrefix(&rest, k) && !rest.empty() && rest.size() <= 4 &&
        std::isdigit(static_cast<unsigned char>(rest[0])) && absl::SimpleAtoi(rest, index)) {
      *kind = k;
      return true;
    }
  }
  return false;
}

absl::Status TopoError(const std::string& file, int line, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(file, ":", line, ": ", why));
}

// One cell: a known class, NV<count>, or an uppercase word kept as unknown. False when the
// cell is not a link class at all.
bool TopoParseCell(const std::string& cell, Link* link) {
  static const std::map<std::string, LinkClass>* known = new std::map<std::string, LinkClass>{
      {"X", LinkClass::kSelf},     {"PIX", LinkClass::kPix},    {"PXB", LinkClass::kPxb},
      {"PHB", LinkClass::kPhb},    {"NODE", LinkClass::kNode},  {"SYS", LinkClass::kSys},
      {"SOC", LinkClass::kSys},  // drivers before R384 called SYS "SOC"
      {"HCCS", LinkClass::kHccs},  {"SIO", LinkClass::kSio},    {"HCCS_SW", LinkClass::kHccsSw},
      {"NA", LinkClass::kUnknown}, {"N/A", LinkClass::kUnknown}};
  link->token = cell;
  link->nvlinks = 0;
  if (auto it = known->find(cell); it != known->end()) {
    link->cls = it->second;
    return true;
  }
  absl::string_view rest(cell);
  int count = 0;
  if (absl::ConsumePrefix(&rest, "NV") && !rest.empty() && rest.size() <= 3 &&
      std::isdigit(static_cast<unsigned char>(rest[0])) && absl::SimpleAtoi(rest, &count) &&
      count > 0) {
    link->cls = LinkClass::kNvLink;
    link->nvlinks = count;
    return true;
  }
  if (cell.empty() || cell.size() > 16 || !std::isupper(static_cast<unsigned char>(cell[0])))
    return false;
  for (char c : cell) {
    if (!std::isupper(static_cast<unsigned char>(c)) &&
        !std::isdigit(static_cast<unsigned char>(c)) && c != '_') {
      return false;
    }
  }
  link->cls = LinkClass::kUnknown;
  return true;
}

// Whether every byte is printable ASCII: the tools print nothing else, and what we keep
// (names, affinities) goes into JSON, which needs valid UTF-8.
bool TopoPrintable(const std::string& token) {
  for (char c : token) {
    if (c < 0x21 || c > 0x7e) return false;
  }
  return true;
}

// The attribute columns after the matrix, recognised by their (multi-word) labels.
enum class TopoAttr { kCpu, kNuma, kGpuNuma, kOther };

std::vector<TopoAttr> TopoAttributes(const std::vector<std::string>& t, size_t from) {
  std::vector<TopoAttr> out;
  for (size_t i = from; i < t.size();) {
    auto at = [&](size_t k, const char* w) { return i + k < t.size() && t[i + k] == w; };
    if (at(0, "CPU") && at(1, "Affinity")) {
      out.push_back(TopoAttr::kCpu);
      i += 2;
    } else if (at(0, "NUMA") && at(1, "Affinity")) {
      out.push_back(TopoAttr::kNuma);
      i += 2;
    } else if (at(0, "GPU") && at(1, "NUMA") && at(2, "ID")) {
      out.push_back(TopoAttr::kGpuNuma);
      i += 3;
    } else {
      out.push_back(TopoAttr::kOther);
      ++i;
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<Topology> ParseTopology(const std::string& text, const std::string& file) {
  std::vector<std::string> lines = absl::StrSplit(text, '\n');
  // --- Header: the first line whose first cell is GPU0 or NPU0 ---
  size_t header = lines.size();
  std::vector<std::string> head;
  for (size_t i = 0; i < lines.size(); ++i) {
    lines[i] = TopoStripAnsi(lines[i]);
    std::vector<std::string> t = TopoTokens(lines[i]);
    if (!t.empty() && (t[0] == "GPU0" || t[0] == "NPU0")) {
      header = i;
      head = std::move(t);
      break;
    }
  }
  if (header == lines.size()) {
    return TopoError(file, 1,
                     "no topology matrix: expected a header line starting with GPU0 or NPU0 "
                     "(the output of `nvidia-smi topo -m` or `npu-smi info -t topo`)");
  }
  const int header_line = static_cast<int>(header) + 1;
  Topology topo;
  std::string kind;
  size_t ncols = 0;
  while (ncols < head.size() && head[ncols] != "CPU") ++ncols;
  for (const std::string& h : head) {
    if (!TopoPrintable(h)) {
      return TopoError(file, header_line, "the header holds bytes that are not ASCII text");
    }
  }
  std::vector<TopoAttr> attrs = TopoAttributes(head, ncols);
  int ndev = 0;
  for (size_t c = 0; c < ncols; ++c) {
    std::string k;
    int index;
    if (TopoDeviceName(head[c], &k, &index)) {
      if (c != static_cast<size_t>(ndev) || index != ndev || (ndev > 0 && k != kind)) {
        return TopoError(
            file, header_line,
            absl::StrCat("column '", head[c], "': devices must come first, numbered ",
                         kind.empty() ? k : kind, "0..", kind.empty() ? k : kind, "N-1 in order"));
      }
      kind = k;
      Device d;
      d.index = index;
      d.name = head[c];
      topo.devices.push_back(d);
      ++ndev;
    } else {
      topo.nics.push_back({head[c], head[c]});
    }
  }
  topo.vendor = kind == "GPU" ? "nvidia" : "ascend";
  topo.source = kind == "GPU" ? "nvidia-smi topo -m" : "npu-smi info -t topo";
  // Servers have up to 16 devices and a few dozen NICs; the matrix is ncols^2 cells.
  if (ncols > 256) return TopoError(file, header_line, "more than 256 columns");

  // --- Rows: one per column, in the header's order ---
  std::vector<std::vector<Link>> rows;
  std::vector<int> row_line;
  size_t i = header + 1;
  for (; i < lines.size() && rows.size() < ncols; ++i) {
    std::vector<std::string> t = TopoTokens(lines[i]);
    const int ln = static_cast<int>(i) + 1;
    if (t.empty()) {
      if (rows.empty()) continue;
      break;
    }
    if (t[0] == "Legend:" || (t[0] == "NIC" && t.size() > 1 && t[1] == "Legend:")) break;
    const size_t r = rows.size();
    if (t[0] != head[r]) {
      return TopoError(file, ln,
                       absl::StrCat("expected the row of ", head[r], ", got '", t[0],
                                    "' (rows follow the header's columns)"));
    }
    if (t.size() - 1 < ncols) {
      return TopoError(file, ln,
                       absl::StrCat("row ", t[0], " has ", t.size() - 1, " link cells, expected ",
                                    ncols, " (", head.front(), "..", head[ncols - 1], ")"));
    }
    std::vector<Link> row(ncols);
    for (size_t c = 0; c < ncols; ++c) {
      if (!TopoParseCell(t[c + 1], &row[c])) {
        return TopoError(file, ln,
                         absl::StrCat("row ", t[0], ", column ", head[c], ": '", t[c + 1],
                                      "' is not a link class (X, NV#, PIX, PXB, PHB, NODE, SYS, "
                                      "HCCS, SIO, HCCS_SW, NA)"));
      }
      if ((c == r) != (row[c].cls == LinkClass::kSelf)) {
        return TopoError(file, ln,
                         absl::StrCat("row ", t[0], ", column ", head[c], ": '", t[c + 1], "' ",
                                      c == r ? "on the diagonal, expected X" : "off the diagonal"));
      }
    }
    for (size_t c = ncols + 1; c < t.size(); ++c) {
      if (!TopoPrintable(t[c])) {
        return TopoError(file, ln, absl::StrCat("row ", t[0], ": bytes that are not ASCII text"));
      }
    }
    if (r < static_cast<size_t>(ndev)) {
      Device& d = topo.devices[r];
      for (size_t a = 0; a < attrs.size() && ncols + 1 + a < t.size(); ++a) {
        const std::string& v = t[ncols + 1 + a];
        if (attrs[a] == TopoAttr::kCpu) d.cpu_affinity = v;
        if (attrs[a] == TopoAttr::kNuma) d.numa_affinity = v;
      }
    }
    rows.push_back(std::move(row));
    row_line.push_back(ln);
  }
  if (rows.size() < static_cast<size_t>(ndev)) {
    return TopoError(file, static_cast<int>(std::min(i, lines.size())) + (i < lines.size() ? 1 : 0),
                     absl::StrCat("the matrix ends after ", rows.size(), " rows; expected one per ",
                                  "device (", ndev, ")"));
  }
  // --- Symmetry (the tools print both halves; a difference means a damaged copy) ---
  for (size_t a = 0; a < rows.size(); ++a) {
    for (size_t b = 0; b < a; ++b) {
      if (rows[a][b].token != rows[b][a].token) {
        return TopoError(
            file, row_line[a],
            absl::StrCat(head[a], "-", head[b], " is ", rows[a][b].token, " but ", head[b], "-",
                         head[a], " is ", rows[b][a].token, " (line ", row_line[b], ")"));
      }
    }
  }
  topo.links.assign(ndev, std::vector<Link>(ndev));
  topo.nic_links.assign(ndev, std::vector<Link>(topo.nics.size()));
  for (int a = 0; a < ndev; ++a) {
    for (int b = 0; b < ndev; ++b) topo.links[a][b] = rows[a][b];
    for (size_t n = 0; n < topo.nics.size(); ++n) topo.nic_links[a][n] = rows[a][ndev + n];
  }
  // --- NIC legend: "  NIC0: mlx5_0" ---
  for (; i < lines.size(); ++i) {
    std::vector<std::string> t = TopoTokens(lines[i]);
    if (t.size() != 2 || t[0].size() < 2 || t[0].back() != ':') continue;
    if (!TopoPrintable(t[1])) continue;
    std::string name = t[0].substr(0, t[0].size() - 1);
    for (Nic& n : topo.nics) {
      if (n.name == name) n.device = t[1];
    }
  }
  return topo;
}

absl::StatusOr<std::string> CaptureTopology(Os* os, std::chrono::milliseconds timeout,
                                            std::string* source) {
  const std::vector<std::vector<std::string>> tools = {{"nvidia-smi", "topo", "-m"},
                                                       {"npu-smi", "info", "-t", "topo"}};
  for (const auto& argv : tools) {
    RunOptions ro;
    ro.timeout = timeout;
    absl::StatusOr<RunResult> r = os->Run(argv, ro);
    if (absl::IsNotFound(r.status())) continue;
    *source = absl::StrJoin(argv, " ");
    if (!r.ok()) return absl::UnavailableError(absl::StrCat(*source, ": ", r.status().message()));
    if (r->timed_out) {
      return absl::UnavailableError(
          absl::StrCat(*source, ": no answer within ", timeout.count(), " ms"));
    }
    if (!r->ok()) {
      std::string err(absl::StripAsciiWhitespace(r->err.empty() ? r->out : r->err));
      return absl::UnavailableError(absl::StrCat(*source, ": exit ",
                                                 r->exited ? r->exit_code : 128 + r->term_signal,
                                                 ": ", err.substr(0, 200)));
    }
    return r->out;
  }
  return absl::NotFoundError("no nvidia-smi or npu-smi here; pass --from FILE");
}

}  // namespace trainscope::topo
