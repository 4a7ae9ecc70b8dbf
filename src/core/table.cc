#include "trainscope/core/table.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace trainscope {
namespace {

bool LooksNumeric(const std::string& s) {
  if (s.empty()) return false;
  char* end = nullptr;
  std::strtod(s.c_str(), &end);
  // Allow a unit or percent sign after the number ("12.5%", "3.1 GB/s" stays left).
  return end != s.c_str() && (*end == '\0' || (*end == '%' && end[1] == '\0'));
}

// Display width in code points (UTF-8 continuation bytes do not count).
size_t Width(const std::string& s) {
  size_t w = 0;
  for (unsigned char c : s) w += (c & 0xC0) != 0x80;
  return w;
}

std::string Cut(const std::string& s, size_t max) {
  if (Width(s) <= max || max < 4) return s;
  size_t w = 0, i = 0;
  for (; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) {
      if (w == max - 3) break;
      ++w;
    }
  }
  return s.substr(0, i) + "...";
}

}  // namespace

std::string Table::Render(size_t max_cell_width) const {
  size_t ncol = header_.size();
  for (const auto& r : rows_) ncol = std::max(ncol, r.size());
  std::vector<std::vector<std::string>> cells;
  cells.push_back(header_);
  for (const auto& r : rows_) cells.push_back(r);
  std::vector<size_t> width(ncol, 0);
  for (auto& row : cells) {
    row.resize(ncol);
    for (size_t c = 0; c < ncol; ++c) {
      row[c] = Cut(row[c], max_cell_width);
      width[c] = std::max(width[c], Width(row[c]));
    }
  }
  std::string out;
  auto emit = [&](const std::vector<std::string>& row, bool header) {
    std::string line;
    for (size_t c = 0; c < ncol; ++c) {
      size_t pad = width[c] - Width(row[c]);
      bool right = !header && LooksNumeric(row[c]);
      if (c) line += "  ";
      if (right) line.append(pad, ' ');
      line += row[c];
      if (!right && c + 1 < ncol) line.append(pad, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  };
  emit(cells[0], true);
  size_t total = 0;
  for (size_t c = 0; c < ncol; ++c) total += width[c] + (c ? 2 : 0);
  out += std::string(total, '-') + "\n";
  for (size_t i = 1; i < cells.size(); ++i) emit(cells[i], false);
  return out;
}

std::string FormatDouble(double v, int precision) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", precision, v);
  return buf;
}

std::string FormatBytes(double bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  while (std::fabs(bytes) >= 1024 && u < 5) {
    bytes /= 1024;
    ++u;
  }
  if (u == 0) return FormatDouble(bytes, 0) + " B";
  return FormatDouble(bytes, 1) + " " + kUnits[u];
}

std::string FormatCount(long long n) {
  std::string digits = std::to_string(n < 0 ? -n : n);
  std::string out;
  int k = 0;
  for (auto it = digits.rbegin(); it != digits.rend(); ++it) {
    if (k && k % 3 == 0) out += ',';
    out += *it;
    ++k;
  }
  if (n < 0) out += '-';
  std::reverse(out.begin(), out.end());
  return out;
}

std::string WrapText(std::string_view text, size_t width, std::string_view lead,
                     std::string_view indent) {
  std::string out;
  std::string line(lead);
  size_t prefix = line.size();
  auto end_line = [&] {
    out += line;
    out += '\n';
    line.assign(indent);
    prefix = line.size();
  };
  size_t pos = 0;
  while (true) {
    const size_t stop = std::min(text.find_first_of(" \n", pos), text.size());
    const std::string_view word = text.substr(pos, stop - pos);
    const bool has_words = line.size() > prefix;
    if (has_words && line.size() + 1 + word.size() > width) end_line();
    if (line.size() > prefix) line += ' ';
    line += word;
    if (stop == text.size()) break;
    if (text[stop] == '\n') end_line();
    pos = stop + 1;
  }
  end_line();
  return out;
}

}  // namespace trainscope
