// Table: the readable, column-aligned text every command prints. Numbers are formatted
// by the caller; the table only aligns (text left, cells that parse as numbers right).
#ifndef TRAINSCOPE_CORE_TABLE_H_
#define TRAINSCOPE_CORE_TABLE_H_

#include <string>
#include <string_view>
#include <vector>

namespace trainscope {

class Table {
 public:
  explicit Table(std::vector<std::string> header) : header_(std::move(header)) {}
  // Rows shorter than the header are padded with empty cells.
  void AddRow(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  size_t num_rows() const { return rows_.size(); }
  // Renders header, a rule, and the rows; each line ends in '\n'. Cells wider than
  // `max_cell_width` are cut with "...".
  std::string Render(size_t max_cell_width = 60) const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

// "%.*f" without trailing noise; FormatBytes(1536) == "1.5 KiB"; FormatCount(12345) == "12,345".
std::string FormatDouble(double v, int precision = 2);
std::string FormatBytes(double bytes);
std::string FormatCount(long long n);

// `text` broken at spaces into lines of at most `width` columns (a longer word stands alone):
// the first line starts with `lead`, the others with `indent`; a '\n' in `text` starts a new
// line. Every line ends in '\n'. For prose under a table (120 columns).
std::string WrapText(std::string_view text, size_t width, std::string_view lead = "",
                     std::string_view indent = "");

}  // namespace trainscope

#endif  // TRAINSCOPE_CORE_TABLE_H_
