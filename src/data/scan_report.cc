// `data scan` output: JSON (format trainscope.data.scan, version 1) and the readable summary.
#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "trainscope/core/formats.h"
#include "trainscope/core/table.h"
#include "trainscope/data/scan.h"

namespace trainscope::data {
namespace {

double Ratio(uint64_t a, uint64_t b) { return b ? static_cast<double>(a) / b : 0.0; }

nlohmann::json Lengths(const LengthStats& s) {
  nlohmann::json j = SummaryToJson(s.summary);
  j["histogram_log2"] = s.histogram.ToJson();
  return j;
}

nlohmann::json BatchDup(const BatchDupStats& s) {
  return {{"mean", s.mean},       {"p50", s.p50},
          {"p99", s.p99},         {"max", s.max},
          {"batches", s.batches}, {"batches_with_duplicates", s.batches_with_dups}};
}

std::vector<std::pair<std::string, uint64_t>> SortedDesc(const std::map<std::string, uint64_t>& m) {
  std::vector<std::pair<std::string, uint64_t>> v(m.begin(), m.end());
  std::stable_sort(v.begin(), v.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  return v;
}

std::string Pct(double r) { return FormatDouble(100.0 * r, 2) + "%"; }

}  // namespace

nlohmann::json ScanResultToJson(const ScanResult& r, const ScanOptions& o) {
  nlohmann::json j;
  j["format"] = formats::kDataScan;
  j["version"] = 1;
  j["problems"] = ScanProblems(r, o);
  j["fail_on"] = o.fail ? nlohmann::json{{"duplicates", o.fail_duplicates}, {"noise", o.fail_noise}}
                        : nlohmann::json("none");
  j["docs"] = r.docs;
  j["bytes"] = r.bytes;
  j["chars"] = r.chars;
  j["words"] = r.words;
  j["tokens"] = r.tokens;
  j["tokenizer"] = r.tokenizer;
  j["exact_duplicate_docs"] = r.exact_duplicate_docs;
  j["normalized_duplicate_docs"] = r.normalized_duplicate_docs;
  j["near_duplicate_docs"] = r.near_duplicate_docs;
  j["exact_duplicate_ratio"] = Ratio(r.exact_duplicate_docs, r.docs);
  j["near_duplicate_ratio"] = Ratio(r.near_duplicate_docs, r.docs);
  j["near_dup"] = {{"enabled", o.near_dup},
                   {"method", "minhash-lsh"},
                   {"ngram", o.ngram},
                   {"bands", o.bands},
                   {"rows", o.rows},
                   {"permutations", o.bands * o.rows},
                   {"threshold", o.threshold},
                   {"clusters", r.near_duplicate_clusters},
                   {"candidate_pairs", r.candidate_pairs},
                   {"verified_pairs", r.verified_pairs},
                   {"docs_without_shingles", r.docs_without_shingles},
                   {"similarity_estimate_stddev", r.near_dup_estimate_stddev}};
  j["length"] = {{"chars", Lengths(r.chars_per_doc)}, {"tokens", Lengths(r.tokens_per_doc)}};
  j["batch_duplicates"] = {{"batch_size", o.batch_size},
                           {"corpus_order", BatchDup(r.batch_dup_corpus_order)},
                           {"shuffled", BatchDup(r.batch_dup_shuffled)},
                           {"shuffle_seed", o.shuffle_seed}};
  nlohmann::json flags = nlohmann::json::object();
  for (const auto& [k, v] : r.flag_docs) flags[k] = v;
  // enabled false (--no-noise, --exact-only): no rule ran, so the zero counts say nothing;
  // invalid_utf8 and empty are still flagged.
  j["noise"] = {{"enabled", o.noise}, {"flagged_docs", r.flagged_docs}, {"flags", flags}};
  nlohmann::json langs = nlohmann::json::array();
  for (const auto& [lang, docs] : SortedDesc(r.lang_docs)) {
    langs.push_back({{"lang", lang}, {"docs", docs}, {"bytes", r.lang_bytes.at(lang)}});
  }
  j["languages"] = langs;
  nlohmann::json pad = nlohmann::json::array();
  for (const auto& p : r.padding) {
    pad.push_back({{"strategy", p.name},
                   {"sequences", p.sequences},
                   {"pad_fraction", p.pad_fraction},
                   {"truncated_tokens", p.truncated_tokens},
                   {"split_documents", p.split_documents}});
  }
  j["padding"] = {{"seq_len", o.seq_len}, {"batch_size", o.batch_size}, {"strategies", pad}};
  j["bad_records"] = r.bad.ToJson();
  j["wall_s"] = r.wall_s;
  return j;
}

std::string ScanResultToText(const ScanResult& r, const ScanOptions& o) {
  std::string out;
  Table t({"measure", "value"});
  t.AddRow({"documents", FormatCount(r.docs)});
  t.AddRow({"bytes", FormatBytes(r.bytes)});
  t.AddRow({"tokens (" + r.tokenizer + ")", FormatCount(r.tokens)});
  t.AddRow(
      {"chars/doc p50 / p99 / max", absl::StrCat(FormatCount(r.chars_per_doc.summary.p50), " / ",
                                                 FormatCount(r.chars_per_doc.summary.p99), " / ",
                                                 FormatCount(r.chars_per_doc.summary.max))});
  t.AddRow(
      {"tokens/doc p50 / p99 / max", absl::StrCat(FormatCount(r.tokens_per_doc.summary.p50), " / ",
                                                  FormatCount(r.tokens_per_doc.summary.p99), " / ",
                                                  FormatCount(r.tokens_per_doc.summary.max))});
  t.AddRow({"exact duplicates", absl::StrCat(FormatCount(r.exact_duplicate_docs), " (",
                                             Pct(Ratio(r.exact_duplicate_docs, r.docs)), ")")});
  t.AddRow({"duplicates after case/space normalisation",
            absl::StrCat(FormatCount(r.normalized_duplicate_docs), " (",
                         Pct(Ratio(r.normalized_duplicate_docs, r.docs)), ")")});
  if (o.near_dup) {
    t.AddRow({absl::StrCat("near duplicates (J>=", FormatDouble(o.threshold, 2), ")"),
              absl::StrCat(FormatCount(r.near_duplicate_docs), " (",
                           Pct(Ratio(r.near_duplicate_docs, r.docs)), ") in ",
                           FormatCount(r.near_duplicate_clusters), " clusters")});
  }
  t.AddRow({absl::StrCat("dup share per batch of ", o.batch_size, ": in order / shuffled"),
            absl::StrCat("mean ", Pct(r.batch_dup_corpus_order.mean), " max ",
                         Pct(r.batch_dup_corpus_order.max), " / mean ",
                         Pct(r.batch_dup_shuffled.mean), " max ", Pct(r.batch_dup_shuffled.max))});
  if (o.noise) {
    t.AddRow(
        {"documents with a noise flag",
         absl::StrCat(FormatCount(r.flagged_docs), " (", Pct(Ratio(r.flagged_docs, r.docs)), ")")});
  } else {
    t.AddRow({"noise rules", "not run (--no-noise / --exact-only)"});
  }
  t.AddRow({"bad records skipped", FormatCount(r.bad.total())});
  out += t.Render(80);

  if (!r.flag_docs.empty()) {
    Table f({"noise flag", "docs", "share"});
    for (const auto& [k, v] : SortedDesc(r.flag_docs))
      f.AddRow({k, FormatCount(v), Pct(Ratio(v, r.docs))});
    out += "\n" + f.Render();
  }
  if (!r.lang_docs.empty()) {
    Table l({"language", "docs", "bytes"});
    int shown = 0;
    for (const auto& [k, v] : SortedDesc(r.lang_docs)) {
      if (shown++ == 10) break;
      l.AddRow({k, FormatCount(v), FormatBytes(r.lang_bytes.at(k))});
    }
    out += "\n" + l.Render();
  }
  if (!r.padding.empty()) {
    Table p({absl::StrCat("packing at seq_len ", o.seq_len), "sequences", "padding",
             "truncated tokens", "split docs"});
    for (const auto& s : r.padding) {
      p.AddRow({s.name, FormatCount(s.sequences), Pct(s.pad_fraction),
                FormatCount(s.truncated_tokens), FormatCount(s.split_documents)});
    }
    out += "\n" + p.Render();
  }
  if (r.bad.total() > 0) {
    out += "\nbad records:";
    for (const auto& [k, v] : r.bad.counts()) out += absl::StrCat(" ", k, "=", v);
    out += "\n";
    for (const auto& e : r.bad.examples()) out += "  " + e + "\n";
  }
  // The one-sentence answer.
  const std::vector<std::string> problems = ScanProblems(r, o);
  for (const std::string& p : problems) out += "\nverdict: " + p + "\n";
  if (problems.empty()) out += "\nverdict: no major duplication or noise found.\n";
  return out;
}

namespace {

// Duplicate documents: keep-first near duplicates (which include the exact ones), or the
// exact ones when near duplicates were not computed.
uint64_t DuplicateDocs(const ScanResult& r, const ScanOptions& o) {
  return o.near_dup ? std::max(r.near_duplicate_docs, r.exact_duplicate_docs)
                    : r.exact_duplicate_docs;
}

}  // namespace

std::vector<Finding> FindingsFrom(const ScanResult& r, const ScanOptions& o) {
  std::vector<Finding> out;
  auto add = [&](const char* id, uint64_t docs, std::string title, std::string fix) {
    Finding f;
    f.severity = Severity::kError;
    f.id = id;
    f.title = std::move(title);
    f.evidence = absl::StrCat(docs, " of ", r.docs, " documents");
    f.fix = std::move(fix);
    out.push_back(std::move(f));
  };
  const double dup = Ratio(DuplicateDocs(r, o), r.docs);
  if (r.docs > 0 && dup > o.fail_duplicates) {
    add("data.duplicates", DuplicateDocs(r, o),
        absl::StrCat(Pct(dup), " of documents are duplicates (threshold ", Pct(o.fail_duplicates),
                     "): the loss will fall faster than the model improves"),
        "run `trainscope data clean`.");
  }
  const double noise = Ratio(r.flagged_docs, r.docs);
  if (r.docs > 0 && o.noise && noise > o.fail_noise) {
    add("data.noise", r.flagged_docs,
        absl::StrCat(Pct(noise), " of documents trip a noise rule (threshold ", Pct(o.fail_noise),
                     ")"),
        "review the flags above and run `trainscope data clean --rules ...`.");
  }
  return out;
}

std::vector<std::string> ScanProblems(const ScanResult& r, const ScanOptions& o) {
  std::vector<std::string> out;
  for (const Finding& f : FindingsFrom(r, o)) {
    out.push_back(absl::StrCat(f.title, "; ", f.fix));
  }
  return out;
}

absl::Status ParseFailOn(const std::string& spec, ScanOptions* o) {
  const std::string where = absl::StrCat("--fail-on '", spec, "'");
  if (spec == "none") {
    o->fail = false;
    return absl::OkStatus();
  }
  o->fail = true;
  for (absl::string_view item : absl::StrSplit(spec, ',')) {
    std::pair<std::string, std::string> kv = absl::StrSplit(item, absl::MaxSplits('=', 1));
    if (kv.first != "duplicates" && kv.first != "noise") {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": unknown condition '", kv.first, "' (duplicates, noise, or none)"));
    }
    std::string v = kv.second;
    double scale = 1;
    if (!v.empty() && v.back() == '%') {
      v.pop_back();
      scale = 0.01;
    }
    double x;
    if (v.empty() || !absl::SimpleAtod(v, &x) || !(x >= 0) || x * scale > 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": '", item, "' needs a share from 0 to 1 (or 0% to 100%), e.g. duplicates=0.1"));
    }
    (kv.first == "duplicates" ? o->fail_duplicates : o->fail_noise) = x * scale;
  }
  return absl::OkStatus();
}

}  // namespace trainscope::data
