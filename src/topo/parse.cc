// Reading the link matrix of `nvidia-smi topo -m` and `npu-smi info -t topo`.
//
// Both print a header row of column names (GPU0.., NPU0.. or, npu-smi on Atlas A3, Phy-ID<n>..,
// then NICs, then the attribute columns "CPU Affinity", "NUMA Affinity", "GPU NUMA ID"; Arm
// hosts print no CPU Affinity), one row per column with a link class per cell, then a legend.
// nvidia-smi separates cells with tabs (a self cell is " X ", an empty attribute is two tabs in a
// row) and underlines the header with ANSI codes when it thinks it writes to a terminal; npu-smi
// aligns with spaces. Splitting on any whitespace reads both: a link cell is never empty, and
// attribute cells are taken in order.
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
#include "trainscope/core/status.h"
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

// "GPU12" -> ("GPU", 12); false for anything else. "Phy-ID12" is an Ascend NPU named by its
// physical id (npu-smi on Atlas A3), which need not start at 0.
bool TopoDeviceName(const std::string& name, std::string* kind, int* index) {
  for (const char* k : {"GPU", "NPU", "Phy-ID"}) {
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
  // Newer npu-smi legends (Atlas A3) name HCCS links XLink, switched ones XLink_SW.
  if (cell == "XLink" || cell == "XLink_SW") {
    link->cls = cell == "XLink" ? LinkClass::kHccs : LinkClass::kHccsSw;
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

// The matrix as it is read: the lines, the header's cells, and the rows so far.
struct TopoMatrix {
  std::vector<std::string> lines;  // ANSI codes stripped up to the header
  size_t header = 0;               // index of the header line
  int header_line = 0;             // its 1-based line number
  std::vector<std::string> head;   // the header's cells
  size_t ncols = 0;                // link columns (devices, then NICs)
  int ndev = 0;
  std::vector<TopoAttr> attrs;  // the attribute columns after the links
  std::vector<std::vector<Link>> rows;
  std::vector<int> row_line;  // 1-based line of each row
  size_t next = 0;            // the line after the last one read
};

// --- Header: the first line whose first cell is GPU0, NPU0 or Phy-ID<n> ---
absl::Status TopoFindHeader(const std::string& file, TopoMatrix* m) {
  m->header = m->lines.size();
  for (size_t i = 0; i < m->lines.size(); ++i) {
    m->lines[i] = TopoStripAnsi(m->lines[i]);
    std::vector<std::string> t = TopoTokens(m->lines[i]);
    std::string kind;
    int index = 0;
    if (!t.empty() && (t[0] == "GPU0" || t[0] == "NPU0" ||
                       (TopoDeviceName(t[0], &kind, &index) && kind == "Phy-ID"))) {
      m->header = i;
      m->head = std::move(t);
      break;
    }
  }
  if (m->header == m->lines.size()) {
    return TopoError(file, 1,
                     "no topology matrix: expected a header line starting with GPU0, NPU0 or "
                     "Phy-ID<n> "
                     "(the output of `nvidia-smi topo -m` or `npu-smi info -t topo`)");
  }
  m->header_line = static_cast<int>(m->header) + 1;
  return absl::OkStatus();
}

// The header's columns: devices first (numbered in order), then NICs, then attributes.
// GPU<n> and NPU<n> are numbered 0..N-1; Phy-ID<n> (physical ids) only increase. A device's
// index is its position either way.
absl::Status TopoColumns(const std::string& file, TopoMatrix* m, Topology* topo) {
  const std::vector<std::string>& head = m->head;
  std::string kind;
  int last_id = -1;
  while (m->ncols < head.size() && head[m->ncols] != "CPU") ++m->ncols;
  for (const std::string& h : head) {
    if (!TopoPrintable(h)) {
      return TopoError(file, m->header_line, "the header holds bytes that are not ASCII text");
    }
  }
  m->attrs = TopoAttributes(head, m->ncols);
  for (size_t c = 0; c < m->ncols; ++c) {
    std::string k;
    int index;
    if (TopoDeviceName(head[c], &k, &index)) {
      const bool physical = k == "Phy-ID";
      if (c != static_cast<size_t>(m->ndev) || (m->ndev > 0 && k != kind) ||
          (physical ? index <= last_id : index != m->ndev)) {
        const std::string& kk = kind.empty() ? k : kind;
        return TopoError(file, m->header_line,
                         absl::StrCat("column '", head[c], "': devices must come first, ",
                                      kk == "Phy-ID" ? "with increasing Phy-IDs"
                                                     : absl::StrCat("numbered ", kk, "0..", kk,
                                                                    "N-1 in order")));
      }
      kind = k;
      last_id = index;
      Device d;
      d.index = m->ndev;
      d.physical_id = physical ? index : -1;
      d.name = head[c];
      topo->devices.push_back(d);
      ++m->ndev;
    } else {
      topo->nics.push_back({head[c], head[c]});
    }
  }
  topo->vendor = kind == "GPU" ? "nvidia" : "ascend";
  topo->source = kind == "GPU" ? "nvidia-smi topo -m" : "npu-smi info -t topo";
  // Servers have up to 16 devices and a few dozen NICs; the matrix is ncols^2 cells.
  if (m->ncols > 256) return TopoError(file, m->header_line, "more than 256 columns");
  return absl::OkStatus();
}

// One row of the matrix (tokens t, 1-based line ln): its link cells, and a device's
// attributes.
absl::Status TopoRow(const std::string& file, const std::vector<std::string>& t, int ln,
                     TopoMatrix* m, Topology* topo) {
  const std::vector<std::string>& head = m->head;
  const size_t ncols = m->ncols;
  const size_t r = m->rows.size();
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
                                    "HCCS, SIO, HCCS_SW, XLink, XLink_SW, NA)"));
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
  if (r < static_cast<size_t>(m->ndev)) {
    Device& d = topo->devices[r];
    for (size_t a = 0; a < m->attrs.size() && ncols + 1 + a < t.size(); ++a) {
      const std::string& v = t[ncols + 1 + a];
      if (m->attrs[a] == TopoAttr::kCpu) d.cpu_affinity = v;
      if (m->attrs[a] == TopoAttr::kNuma) d.numa_affinity = v;
    }
  }
  m->rows.push_back(std::move(row));
  m->row_line.push_back(ln);
  return absl::OkStatus();
}

// --- Rows: one per column, in the header's order, up to a blank line or the legend ---
absl::Status TopoRows(const std::string& file, TopoMatrix* m, Topology* topo) {
  const std::vector<std::string>& lines = m->lines;
  size_t i = m->header + 1;
  for (; i < lines.size() && m->rows.size() < m->ncols; ++i) {
    std::vector<std::string> t = TopoTokens(lines[i]);
    if (t.empty()) {
      if (m->rows.empty()) continue;
      break;
    }
    if (t[0] == "Legend:" || (t[0] == "NIC" && t.size() > 1 && t[1] == "Legend:")) break;
    TS_RETURN_IF_ERROR(TopoRow(file, t, static_cast<int>(i) + 1, m, topo));
  }
  m->next = i;
  if (m->rows.size() < static_cast<size_t>(m->ndev)) {
    return TopoError(file, static_cast<int>(std::min(i, lines.size())) + (i < lines.size() ? 1 : 0),
                     absl::StrCat("the matrix ends after ", m->rows.size(),
                                  " rows; expected one per ", "device (", m->ndev, ")"));
  }
  return absl::OkStatus();
}

// --- Symmetry (the tools print both halves; a difference means a damaged copy) ---
absl::Status TopoSymmetry(const std::string& file, const TopoMatrix& m) {
  const auto& rows = m.rows;
  const auto& head = m.head;
  for (size_t a = 0; a < rows.size(); ++a) {
    for (size_t b = 0; b < a; ++b) {
      if (rows[a][b].token != rows[b][a].token) {
        return TopoError(
            file, m.row_line[a],
            absl::StrCat(head[a], "-", head[b], " is ", rows[a][b].token, " but ", head[b], "-",
                         head[a], " is ", rows[b][a].token, " (line ", m.row_line[b], ")"));
      }
    }
  }
  return absl::OkStatus();
}

// --- NIC legend: "  NIC0: mlx5_0" ---
void TopoNicLegend(const TopoMatrix& m, Topology* topo) {
  for (size_t i = m.next; i < m.lines.size(); ++i) {
    std::vector<std::string> t = TopoTokens(m.lines[i]);
    if (t.size() != 2 || t[0].size() < 2 || t[0].back() != ':') continue;
    if (!TopoPrintable(t[1])) continue;
    std::string name = t[0].substr(0, t[0].size() - 1);
    for (Nic& n : topo->nics) {
      if (n.name == name) n.device = t[1];
    }
  }
}

}  // namespace

absl::StatusOr<Topology> ParseTopology(const std::string& text, const std::string& file) {
  TopoMatrix m;
  m.lines = absl::StrSplit(text, '\n');
  Topology topo;
  TS_RETURN_IF_ERROR(TopoFindHeader(file, &m));
  TS_RETURN_IF_ERROR(TopoColumns(file, &m, &topo));
  TS_RETURN_IF_ERROR(TopoRows(file, &m, &topo));
  TS_RETURN_IF_ERROR(TopoSymmetry(file, m));
  const int ndev = m.ndev;
  topo.links.assign(ndev, std::vector<Link>(ndev));
  topo.nic_links.assign(ndev, std::vector<Link>(topo.nics.size()));
  for (int a = 0; a < ndev; ++a) {
    for (int b = 0; b < ndev; ++b) topo.links[a][b] = m.rows[a][b];
    for (size_t n = 0; n < topo.nics.size(); ++n) topo.nic_links[a][n] = m.rows[a][ndev + n];
  }
  TopoNicLegend(m, &topo);
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
