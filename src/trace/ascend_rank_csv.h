// CSV helpers of the torch_npu readers (ascend_rank*.cc, readers.cc): quoted cells, columns by
// header name, numbers that must be times.
#ifndef TRAINSCOPE_SRC_TRACE_ASCEND_RANK_CSV_H_
#define TRAINSCOPE_SRC_TRACE_ASCEND_RANK_CSV_H_

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainscope/core/os.h"
#include "trainscope/trace/trace.h"

namespace trainscope::trace::internal {

// CSV with quotes ("" escapes) and cells trimmed of spaces and tabs (torch_npu writes
// "1736413971558972.912\t"). A last line without a newline is a row.
std::vector<std::vector<std::string>> ParseCsv(const std::string& text);
// The whole file, read through `os`. NotFound "<path>: cannot open".
absl::StatusOr<std::string> SlurpFile(const std::string& path, Os* os = Os::Default());
// Index of the first of `names` in `header`, -1 if none.
int CsvCol(const std::vector<std::string>& header, std::initializer_list<const char*> names);
// Cell `col` of `row`, "" when absent.
std::string CsvCell(const std::vector<std::string>& row, int col);
// Cell `col` as a time or count. *ok = false when absent, empty, "N/A" or not a number;
// *bad = true when it is a number out of range (negative, non-finite, > 7 days in us).
double CsvNum(const std::vector<std::string>& row, int col, bool* ok, bool* bad);
// A time in us: finite, >= 0 and at most 7 days.
bool ValidUs(double us);
// A step number: an integer in [0, 2^53].
bool ValidStep(double v);
// Counts one bad row under `counter` and keeps a warning naming the file and line.
void CsvBadRow(RankTrace* t, int64_t* counter, const std::string& path, int64_t line,
               const char* why);

}  // namespace trainscope::trace::internal

#endif  // TRAINSCOPE_SRC_TRACE_ASCEND_RANK_CSV_H_
