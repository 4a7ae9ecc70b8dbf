// `data clean`: scan (first pass), decide, copy the kept documents (second pass).
#include "trainscope/data/clean.h"

#include <zlib.h>
#include <zstd.h>

#include <cmath>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "data/clean_internal.h"
#include "data/doc_analysis.h"
#include "data/spill.h"
#include "trainscope/core/formats.h"
#include "trainscope/core/paths.h"
#include "trainscope/core/status.h"
#include "trainscope/core/table.h"
#include "trainscope/tokenizer/tokenizer.h"

namespace trainscope::data {
namespace {

// Plain, zstd- or gzip-compressed output (by the name: .zst/.zstd, .gz, as the reader
// recognises them) on top of OutputFile (atomic rename on Commit).
class CorpusWriter {
 public:
  static absl::StatusOr<std::unique_ptr<CorpusWriter>> Open(const std::string& path) {
    TS_ASSIGN_OR_RETURN(auto file, OutputFile::Open(path));
    auto w = std::unique_ptr<CorpusWriter>(new CorpusWriter(std::move(file)));
    if (absl::EndsWith(path, ".zst") || absl::EndsWith(path, ".zstd")) {
      w->cctx_ = ZSTD_createCCtx();
      ZSTD_CCtx_setParameter(w->cctx_, ZSTD_c_compressionLevel, 3);
    } else if (absl::EndsWith(path, ".gz")) {
      // windowBits 15 + 16: a gzip header and trailer rather than a zlib stream.
      if (deflateInit2(&w->gz_, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
        return absl::InternalError(absl::StrCat(path, ": cannot start gzip compression"));
      }
      w->gzip_ = true;
    }
    return w;
  }
  ~CorpusWriter() {
    if (cctx_) ZSTD_freeCCtx(cctx_);
    if (gzip_) deflateEnd(&gz_);
  }
  absl::Status Write(std::string_view s) {
    buf_.append(s.data(), s.size());
    return buf_.size() >= (1 << 20) ? Flush(false) : absl::OkStatus();
  }
  absl::Status Commit() {
    TS_RETURN_IF_ERROR(Flush(true));
    return file_->Commit();
  }

 private:
  explicit CorpusWriter(std::unique_ptr<OutputFile> f) : file_(std::move(f)) {}
  absl::Status Flush(bool end) {
    if (gzip_) return FlushGzip(end);
    if (!cctx_) {
      auto st = file_->Write(buf_);
      buf_.clear();
      return st;
    }
    ZSTD_inBuffer in{buf_.data(), buf_.size(), 0};
    std::string out(ZSTD_CStreamOutSize(), '\0');
    for (;;) {
      ZSTD_outBuffer ob{out.data(), out.size(), 0};
      size_t left = ZSTD_compressStream2(cctx_, &ob, &in, end ? ZSTD_e_end : ZSTD_e_continue);
      if (ZSTD_isError(left)) return absl::InternalError(ZSTD_getErrorName(left));
      TS_RETURN_IF_ERROR(file_->Write(std::string_view(out.data(), ob.pos)));
      if (end ? left == 0 : in.pos == in.size) break;
    }
    buf_.clear();
    return absl::OkStatus();
  }
  absl::Status FlushGzip(bool end) {
    gz_.next_in = reinterpret_cast<Bytef*>(buf_.data());
    gz_.avail_in = static_cast<uInt>(buf_.size());
    std::string out(1 << 16, '\0');
    for (;;) {
      gz_.next_out = reinterpret_cast<Bytef*>(out.data());
      gz_.avail_out = static_cast<uInt>(out.size());
      const int rc = deflate(&gz_, end ? Z_FINISH : Z_NO_FLUSH);
      if (rc == Z_STREAM_ERROR) return absl::InternalError("gzip compression failed");
      TS_RETURN_IF_ERROR(file_->Write(std::string_view(out.data(), out.size() - gz_.avail_out)));
      if (end ? rc == Z_STREAM_END : gz_.avail_in == 0 && gz_.avail_out != 0) break;
    }
    buf_.clear();
    return absl::OkStatus();
  }
  std::unique_ptr<OutputFile> file_;
  ZSTD_CCtx* cctx_ = nullptr;
  bool gzip_ = false;
  z_stream gz_ = {};
  std::string buf_;
};

double Entropyish(double p, double m) { return p > 0 ? p * std::log2(p / m) : 0; }

}  // namespace

absl::StatusOr<uint32_t> ParseRules(const std::string& rules) {
  uint32_t mask = 0;
  for (absl::string_view r : absl::StrSplit(rules, ',', absl::SkipEmpty())) {
    std::string name(r);
    if (name == "none") continue;
    const uint32_t m = FlagGroupMask(name);
    if (m == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--rules: unknown rule \"", name,
                       "\" (groups: gopher, gopher_quality, gopher_repetition, c4, fineweb, "
                       "encoding, junk, all; or a flag name)"));
    }
    mask |= m;
  }
  return mask;
}

double JensenShannonBits(const Log2Histogram& a, const Log2Histogram& b) {
  if (a.total() == 0 || b.total() == 0) return 0;
  const size_t n = std::max(a.buckets().size(), b.buckets().size());
  double js = 0;
  for (size_t i = 0; i < n; ++i) {
    const double p = i < a.buckets().size() ? static_cast<double>(a.buckets()[i]) / a.total() : 0;
    const double q = i < b.buckets().size() ? static_cast<double>(b.buckets()[i]) / b.total() : 0;
    const double m = 0.5 * (p + q);
    js += 0.5 * Entropyish(p, m) + 0.5 * Entropyish(q, m);
  }
  return js;
}

absl::Status CheckCleanInputs(const std::vector<InputFile>& inputs, const CleanOptions& options) {
  for (const auto& in : inputs) {
    if (in.format == InputFormat::kMegatron) {
      return absl::InvalidArgumentError(
          absl::StrCat(in.path, ": data clean reads JSONL or text corpora, not token datasets"));
    }
    // A pipe cannot be read a second time.
    TS_RETURN_IF_ERROR(CheckRegularFile(
        in.path, "data clean reads each input twice (scan, then copy the kept documents)"));
  }
  return CheckOutputsAgainstInputs({options.output}, inputs);
}

ScanOptions CleanScanOptions(const CleanOptions& options) {
  ScanOptions so = options.scan;
  so.keep_doc_arrays = true;
  so.near_dup = options.dedup;
  so.verdicts_path.clear();
  return so;
}

CleanReport DecideClean(const ScanResult& scan, const CleanOptions& options,
                        std::vector<uint8_t>* keep_out) {
  CleanReport rep;
  rep.output = options.output;
  rep.bad = scan.bad;
  rep.tokenizer = scan.tokenizer;
  const ScanOptions& so = options.scan;
  const uint32_t eos = so.tokenizer ? (so.tokenizer->eos_id() >= 0 ? 1 : 0) : 1;

  // Decide, attributing each removal to its first reason: exact, near, then flags in order.
  const size_t n = scan.doc_flags.size();
  std::vector<uint8_t>& keep = *keep_out;
  keep.assign(n, 1);
  std::vector<RuleRemoval> removed(2 + kNumFlags);
  removed[0].rule = "exact_duplicate";
  removed[1].rule = "near_duplicate";
  for (int f = 0; f < kNumFlags; ++f) removed[2 + f].rule = FlagName(f);
  std::vector<uint32_t> tokens_before, tokens_after, chars_before, chars_after;
  for (size_t g = 0; g < n; ++g) {
    const uint32_t t = scan.doc_tokens[g] - std::min(eos, scan.doc_tokens[g]);
    const bool exact = options.dedup && scan.doc_exact_of[g] != ScanResult::kNoDoc;
    const bool near = options.dedup && scan.doc_near_of[g] != ScanResult::kNoDoc;
    const uint32_t fl = scan.doc_flags[g] & options.drop_flags;
    if (exact) ++removed[0].flagged_docs;
    if (near) ++removed[1].flagged_docs;
    for (int f = 0; f < kNumFlags; ++f) removed[2 + f].flagged_docs += (fl >> f) & 1;
    int reason = -1;
    if (exact) {
      reason = 0;
    } else if (near) {
      reason = 1;
    } else if (fl) {
      reason = 2 + __builtin_ctz(fl);
    }
    tokens_before.push_back(t);
    chars_before.push_back(scan.doc_chars[g]);
    if (reason >= 0) {
      keep[g] = 0;
      ++removed[reason].docs;
      removed[reason].tokens += t;
    } else {
      tokens_after.push_back(t);
      chars_after.push_back(scan.doc_chars[g]);
    }
  }
  for (auto& r : removed) {
    if (r.flagged_docs || r.docs) rep.removed.push_back(r);
  }
  rep.docs_before = n;
  rep.docs_after = tokens_after.size();
  for (uint32_t t : tokens_before) rep.tokens_before += t;
  for (uint32_t t : tokens_after) rep.tokens_after += t;
  auto stats = [](const std::vector<uint32_t>& v) {
    LengthStats s;
    s.summary = Summarize(std::vector<double>(v.begin(), v.end()));
    for (uint32_t x : v) s.histogram.Add(x);
    return s;
  };
  rep.tokens_before_dist = stats(tokens_before);
  rep.tokens_after_dist = stats(tokens_after);
  rep.chars_before = stats(chars_before);
  rep.chars_after = stats(chars_after);
  rep.js_divergence_tokens =
      JensenShannonBits(rep.tokens_before_dist.histogram, rep.tokens_after_dist.histogram);
  rep.js_divergence_chars =
      JensenShannonBits(rep.chars_before.histogram, rep.chars_after.histogram);
  return rep;
}

absl::Status CopyKeptDocuments(const std::vector<InputFile>& inputs, const ScanResult& scan,
                               const std::vector<uint8_t>& keep, const ReaderOptions& reader,
                               const std::string& output) {
  // Second pass: copy kept records verbatim. Documents of a file are contiguous and in
  // line order, so one cursor per file finds them.
  const size_t n = keep.size();
  TS_ASSIGN_OR_RETURN(auto out, CorpusWriter::Open(output));
  size_t g = 0;
  absl::Status write_status;
  BadRecords ignored;  // already counted by the scan
  std::string block;
  uint64_t block_start = 0;
  for (uint32_t f = 0; f < inputs.size(); ++f) {
    const InputFile& in = inputs[f];
    const bool blocks = in.format == InputFormat::kText && reader.text_blocks;
    auto emit = [&](std::string_view text, uint64_t line) {
      while (g < n && scan.doc_file[g] == f && scan.doc_line[g] < line) ++g;
      if (g < n && scan.doc_file[g] == f && scan.doc_line[g] == line) {
        if (keep[g] && write_status.ok()) {
          write_status = out->Write(text);
          if (write_status.ok()) write_status = out->Write(blocks ? "\n\n" : "\n");
        }
        ++g;
      }
    };
    TS_RETURN_IF_ERROR(
        ForEachLine(in, reader.max_doc_bytes, &ignored, [&](std::string_view l, uint64_t line) {
          if (!blocks) {
            emit(l, line);
            return;
          }
          if (l.find_first_not_of(" \t\r") == std::string_view::npos) {
            if (!block.empty()) emit(block, block_start);
            block.clear();
            return;
          }
          if (block.empty()) block_start = line;
          if (!block.empty()) block.push_back('\n');
          block.append(l);
        }));
    if (blocks && !block.empty()) emit(block, block_start);
    block.clear();
    while (g < n && scan.doc_file[g] == f) ++g;
    TS_RETURN_IF_ERROR(write_status);
  }
  return out->Commit();
}

absl::StatusOr<CleanReport> RunClean(const std::vector<InputFile>& inputs,
                                     const CleanOptions& options) {
  TS_RETURN_IF_ERROR(CheckCleanInputs(inputs, options));
  const ScanOptions so = CleanScanOptions(options);
  TS_ASSIGN_OR_RETURN(ScanResult scan, RunScan(inputs, so));
  if (options.strict && scan.bad.total() > 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--strict: ", scan.bad.total(), " bad record(s); first: ", scan.bad.examples().front()));
  }
  std::vector<uint8_t> keep;
  CleanReport rep = DecideClean(scan, options, &keep);
  TS_RETURN_IF_ERROR(CopyKeptDocuments(inputs, scan, keep, so.reader, options.output));
  return rep;
}

nlohmann::json CleanReportToJson(const CleanReport& r) {
  auto dist = [](const LengthStats& s) {
    nlohmann::json j = SummaryToJson(s.summary);
    j["histogram_log2"] = s.histogram.ToJson();
    return j;
  };
  nlohmann::json removed = nlohmann::json::array();
  for (const auto& x : r.removed) {
    removed.push_back({{"rule", x.rule},
                       {"docs", x.docs},
                       {"tokens", x.tokens},
                       {"flagged_docs", x.flagged_docs}});
  }
  return {{"format", formats::kDataClean},
          {"version", 1},
          {"output", r.output},
          {"tokenizer", r.tokenizer},
          {"docs_before", r.docs_before},
          {"docs_after", r.docs_after},
          {"docs_removed", r.docs_before - r.docs_after},
          {"tokens_before", r.tokens_before},
          {"tokens_after", r.tokens_after},
          {"tokens_removed", r.tokens_before - r.tokens_after},
          {"removed_by_rule", removed},
          {"length",
           {{"chars_before", dist(r.chars_before)},
            {"chars_after", dist(r.chars_after)},
            {"tokens_before", dist(r.tokens_before_dist)},
            {"tokens_after", dist(r.tokens_after_dist)}}},
          {"js_divergence_bits",
           {{"chars", r.js_divergence_chars}, {"tokens", r.js_divergence_tokens}}},
          {"bad_records", r.bad.ToJson()}};
}

std::string CleanReportToText(const CleanReport& r) {
  auto pct = [](uint64_t a, uint64_t b) {
    return b ? FormatDouble(100.0 * a / b, 2) + "%" : std::string("0%");
  };
  Table t({"", "before", "after", "removed"});
  t.AddRow({"documents", FormatCount(r.docs_before), FormatCount(r.docs_after),
            absl::StrCat(FormatCount(r.docs_before - r.docs_after), " (",
                         pct(r.docs_before - r.docs_after, r.docs_before), ")")});
  t.AddRow({"tokens (" + r.tokenizer + ")", FormatCount(r.tokens_before),
            FormatCount(r.tokens_after),
            absl::StrCat(FormatCount(r.tokens_before - r.tokens_after), " (",
                         pct(r.tokens_before - r.tokens_after, r.tokens_before), ")")});
  t.AddRow({"tokens/doc p50", FormatCount(r.tokens_before_dist.summary.p50),
            FormatCount(r.tokens_after_dist.summary.p50), ""});
  t.AddRow({"tokens/doc p99", FormatCount(r.tokens_before_dist.summary.p99),
            FormatCount(r.tokens_after_dist.summary.p99), ""});
  t.AddRow({"chars/doc mean", FormatDouble(r.chars_before.summary.mean, 1),
            FormatDouble(r.chars_after.summary.mean, 1), ""});
  std::string out = t.Render();
  Table rules({"removed because", "docs", "tokens", "docs matching"});
  for (const auto& x : r.removed) {
    rules.AddRow({x.rule, FormatCount(x.docs), FormatCount(x.tokens), FormatCount(x.flagged_docs)});
  }
  out += "\n" + rules.Render();
  out += absl::StrCat("\nlength distribution shift (Jensen-Shannon, bits): tokens ",
                      FormatDouble(r.js_divergence_tokens, 4), ", chars ",
                      FormatDouble(r.js_divergence_chars, 4), "\n");
  if (r.bad.total()) out += absl::StrCat("bad records skipped: ", r.bad.total(), "\n");
  out += absl::StrCat("wrote ", r.output, "\n");
  return out;
}

}  // namespace trainscope::data
