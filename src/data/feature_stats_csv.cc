// `data stats` on CSV and TSV files: an RFC 4180 record splitter streams the file with a
// per-record byte cap, and column statistics are taken from its records.
#include <limits>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "data/feature_stats_internal.h"
#include "trainscope/core/status.h"

namespace trainscope::data::internal {
namespace {

// Receives the records of a CSV stream.
class CsvSink {
 public:
  virtual ~CsvSink() = default;
  // `cells` are views into the record's unquoted bytes; `line` is where it starts.
  virtual absl::Status OnRecord(const std::vector<absl::string_view>& cells, uint64_t line) = 0;
  virtual void OnBad(const char* kind, uint64_t line, const std::string& why) = 0;
};

// RFC 4180 record splitter over a byte stream fed in pieces. Records end at \n, \r\n or a
// lone \r (old Mac files), whichever the file uses, mixed or not; fields are separated by
// `sep` and may be quoted with '"' ('""' inside quotes is one quote; a quoted field may
// hold separators and line breaks, kept as \n). Lenient like Python's csv: a quote in the
// middle of an unquoted field is a character. A record over `max_bytes` raw bytes is
// dropped up to the next line break (quotes no longer matter then) and reported as
// oversized_record, so memory stays O(max_bytes).
class CsvSplitter {
 public:
  CsvSplitter(char sep, size_t max_bytes) : sep_(sep), max_bytes_(max_bytes) {}

  absl::Status Feed(const char* p, size_t n, CsvSink* sink) {
    for (size_t i = 0; i < n; ++i) {
      const char c = p[i];
      if (after_cr_ && c == '\n') {  // the \n of a \r\n: the \r ended the line already
        after_cr_ = false;
        continue;
      }
      const bool eol = c == '\n' || c == '\r';
      after_cr_ = c == '\r';
      if (state_ == kSkipping) {
        if (eol) {
          sink->OnBad("oversized_record", line_,
                      absl::StrCat("longer than the limit of ", max_bytes_,
                                   " bytes; skipped to the end of its line"));
          ++line_;
          Reset();
        }
        continue;
      }
      if (state_ == kQuoted) {
        if (c == '"') {
          state_ = kQuoteSeen;
        } else {
          if (eol) ++line_;
          Append(eol ? '\n' : c);
        }
        continue;
      }
      if (c == '"' && state_ == kFieldStart) {
        quoted_ = true;
        state_ = kQuoted;
        Count();
      } else if (c == '"' && state_ == kQuoteSeen) {
        state_ = kQuoted;
        Append('"');
      } else if (c == sep_) {
        state_ = kFieldStart;
        Count();  // may switch to kSkipping
        if (state_ != kSkipping) ends_.push_back(bytes_.size());
      } else if (eol) {
        ends_.push_back(bytes_.size());
        TS_RETURN_IF_ERROR(Emit(sink));
        ++line_;
        Reset();
      } else {
        state_ = kUnquoted;
        Append(c);  // may switch to kSkipping
      }
    }
    return absl::OkStatus();
  }

  // End of input: the last record may lack a line break.
  absl::Status Finish(CsvSink* sink) {
    if (state_ == kSkipping) {
      sink->OnBad("oversized_record", record_line_,
                  absl::StrCat("longer than the limit of ", max_bytes_, " bytes"));
    } else if (state_ == kQuoted) {
      sink->OnBad("unterminated_quote", record_line_,
                  "a quoted field opened in this record is still open at the end of the file");
    } else if (raw_ > 0) {
      ends_.push_back(bytes_.size());
      TS_RETURN_IF_ERROR(Emit(sink));
    }
    Reset();
    return absl::OkStatus();
  }

 private:
  enum State { kFieldStart, kUnquoted, kQuoted, kQuoteSeen, kSkipping };

  void Count() {
    if (++raw_ > max_bytes_) {
      state_ = kSkipping;
      bytes_.clear();
      ends_.clear();
    }
  }
  void Append(char c) {
    Count();
    if (state_ != kSkipping) bytes_ += c;
  }
  absl::Status Emit(CsvSink* sink) {
    // A blank or whitespace-only line is not a record.
    if (!quoted_ && ends_.size() == 1 && absl::StripAsciiWhitespace(bytes_).empty()) {
      return absl::OkStatus();
    }
    cells_.clear();
    size_t b = 0;
    for (size_t e : ends_) {
      cells_.push_back(absl::string_view(bytes_).substr(b, e - b));
      b = e;
    }
    return sink->OnRecord(cells_, record_line_);
  }
  void Reset() {
    state_ = kFieldStart;
    bytes_.clear();
    ends_.clear();
    raw_ = 0;
    quoted_ = false;
    record_line_ = line_;
  }

  const char sep_;
  const size_t max_bytes_;
  State state_ = kFieldStart;
  bool after_cr_ = false, quoted_ = false;
  std::string bytes_;         // the current record's field bytes, unquoted
  std::vector<size_t> ends_;  // end of each field in bytes_
  std::vector<absl::string_view> cells_;
  size_t raw_ = 0;  // raw bytes of the current record so far
  uint64_t line_ = 1, record_line_ = 1;
};

// Column statistics from CSV records: the first record is a header when one of its
// cells is not a number; a row with another field count is an error.
class CsvStats : public CsvSink {
 public:
  CsvStats(const std::string& path, const FeatureStatsOptions& o) : path_(path), o_(o) {}

  absl::Status OnRecord(const std::vector<absl::string_view>& cells, uint64_t line) override {
    if (names_.empty()) {
      if (cells.size() > o_.max_features) {
        return absl::InvalidArgumentError(absl::StrCat(path_, ":", line, ": ", cells.size(),
                                                       " columns, more than the limit of ",
                                                       o_.max_features));
      }
      bool header = false;
      for (auto c : cells) {
        double d;
        auto s = absl::StripAsciiWhitespace(c);
        if (!s.empty() && !absl::SimpleAtod(s, &d)) header = true;
      }
      for (size_t i = 0; i < cells.size(); ++i) {
        names_.push_back(header ? std::string(absl::StripAsciiWhitespace(cells[i]))
                                : absl::StrCat("col", i));
      }
      acc_.resize(names_.size());
      non_numeric_.resize(names_.size());
      if (header) return absl::OkStatus();
    }
    if (cells.size() != names_.size()) {
      return absl::InvalidArgumentError(absl::StrCat(path_, ":", line, ": ", cells.size(),
                                                     " fields, header has ", names_.size()));
    }
    ++rows_;
    for (size_t i = 0; i < cells.size(); ++i) {
      auto s = absl::StripAsciiWhitespace(cells[i]);
      double d;
      if (s.empty() || s == "NA" || s == "NaN" || s == "nan" || s == "null") {
        acc_[i].Add(std::numeric_limits<double>::quiet_NaN());
      } else if (absl::SimpleAtod(s, &d)) {
        acc_[i].Add(d);
      } else {
        ++non_numeric_[i];
      }
    }
    return absl::OkStatus();
  }

  void OnBad(const char* kind, uint64_t line, const std::string& why) override {
    ++bad_[kind];
    if (examples_.size() < 20)
      examples_.push_back(absl::StrCat(path_, ":", line, ": ", kind, ": ", why));
  }

  absl::StatusOr<FeatureReport> Finish() {
    FeatureReport r;
    r.path = path_;
    r.format = "csv";
    r.bad_records = {{"oversized_record", 0}, {"unterminated_quote", 0}};
    uint64_t bad = 0;
    for (const auto& [k, v] : bad_) {
      r.bad_records[k] = v;
      bad += v;
    }
    r.bad_record_examples = examples_;
    if (names_.empty()) {
      if (bad > 0) {
        return absl::InvalidArgumentError(absl::StrCat(path_, ": no usable record: ", bad,
                                                       " skipped, the first: ", examples_[0]));
      }
      return absl::InvalidArgumentError(absl::StrCat(path_, ": empty CSV file"));
    }
    if (bad > 0) {
      std::vector<std::string> parts;
      for (const auto& [k, v] : bad_) parts.push_back(absl::StrCat(k, ": ", v));
      r.findings.push_back(absl::StrCat(bad, " CSV record(s) skipped (", absl::StrJoin(parts, ", "),
                                        "); the first: ", examples_[0]));
    }
    ArrayStats a;
    a.dtype = "float64 (text)";
    a.shape = {rows_, names_.size()};
    for (size_t i = 0; i < names_.size(); ++i) {
      FeatureStats f = acc_[i].Finish(names_[i]);
      f.count += non_numeric_[i];
      f.non_numeric = non_numeric_[i];
      if (non_numeric_[i] * 2 > rows_) f.suggest = "categorical";
      a.features.push_back(f);
    }
    r.arrays.push_back(std::move(a));
    return r;
  }

 private:
  const std::string path_;
  const FeatureStatsOptions o_;
  std::vector<std::string> names_;
  std::vector<Acc> acc_;
  std::vector<uint64_t> non_numeric_;
  uint64_t rows_ = 0;
  std::map<std::string, uint64_t> bad_;
  std::vector<std::string> examples_;
};

}  // namespace

absl::StatusOr<FeatureReport> Csv(StatsInput& in, const FeatureStatsOptions& o) {
  CsvStats stats(in.path(), o);
  CsvSplitter splitter(absl::EndsWith(in.path(), ".tsv") ? '\t' : ',', o.max_record_bytes);
  std::vector<char> buf(size_t{1} << 16);
  while (true) {
    TS_ASSIGN_OR_RETURN(size_t n, in.Read(buf.data(), buf.size(), o.stall_timeout));
    if (n == 0) break;
    TS_RETURN_IF_ERROR(splitter.Feed(buf.data(), n, &stats));
  }
  TS_RETURN_IF_ERROR(splitter.Finish(&stats));
  return stats.Finish();
}

}  // namespace trainscope::data::internal
