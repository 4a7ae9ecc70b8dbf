// Corpus coverage: CANDIDATE's vocabulary and n-grams against REFERENCE's mass, distribution
// distances, language mix, feature PSI and the least-covered REFERENCE documents. See
// include/trainscope/data/compare.h and docs/metrics.md "Corpus coverage".
#include "trainscope/data/compare.h"

#include <xxhash.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "data/doc_analysis.h"
#include "nlohmann/json.hpp"
#include "trainscope/core/formats.h"
#include "trainscope/core/table.h"
#include "trainscope/tokenizer/tokenizer.h"

namespace trainscope::data {
namespace {

// Document features whose PSI is reported.
enum Feature {
  kBytes = 0,
  kWords,
  kTokens,
  kMeanWordLength,
  kDigitRatio,
  kUpperRatio,
  kPunctRatio,
  kNonAsciiRatio,
  kNumFeatures
};
const char* const kFeatureNames[kNumFeatures] = {
    "bytes",       "words",       "tokens",      "mean_word_length",
    "digit_ratio", "upper_ratio", "punct_ratio", "non_ascii_ratio"};

// Per-document pieces of one corpus pass: the words' hashes (ASCII lower-cased, split at ASCII
// punctuation and whitespace as MinHash's shingles are; bytes >= 0x80 belong to words).
struct DocWords {
  std::vector<uint32_t> start, len;
  std::vector<uint64_t> hash;
  std::string lower;
  std::vector<int32_t> ids;

  void Split(std::string_view text) {
    lower.assign(text.begin(), text.end());
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    FindWords(lower, WordBreak::kAsciiPunctuation, &start, &len, /*simd_level=*/1);
    hash.resize(start.size());
    for (size_t i = 0; i < start.size(); ++i)
      hash[i] = XXH3_64bits(lower.data() + start[i], len[i]);
  }
};

uint64_t Gram(const std::vector<uint64_t>& h, size_t i, int n) {
  uint64_t g = 0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(n);
  for (int k = 0; k < n; ++k) g = (g ^ h[i + k]) * 0x100000001b3ULL + (g >> 29);
  return g;
}

void Features(std::string_view text, const DocResult& r, size_t words, size_t tokens,
              std::vector<double>* out) {
  size_t digits = 0, upper = 0, punct = 0, non_ascii = 0, word_bytes = 0;
  for (unsigned char c : text) {
    if (c >= 0x80) {
      ++non_ascii;
    } else if (std::isdigit(c)) {
      ++digits;
    } else if (std::isupper(c)) {
      ++upper;
    } else if (std::ispunct(c)) {
      ++punct;
    }
    if (c >= 0x80 || std::isalnum(c)) ++word_bytes;
  }
  const double n = std::max<size_t>(1, text.size());
  double f[kNumFeatures];
  f[kBytes] = static_cast<double>(r.bytes);
  f[kWords] = static_cast<double>(words);
  f[kTokens] = static_cast<double>(tokens);
  f[kMeanWordLength] = words ? double(word_bytes) / words : 0.0;
  f[kDigitRatio] = digits / n;
  f[kUpperRatio] = upper / n;
  f[kPunctRatio] = punct / n;
  f[kNonAsciiRatio] = non_ascii / n;
  for (int i = 0; i < kNumFeatures; ++i) out[i].push_back(f[i]);
}

std::string Preview(std::string_view text) {
  std::string p(text.substr(0, 80));
  for (char& c : p) {
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  }
  return p;
}

struct Side {
  std::vector<double> features[kNumFeatures];
  absl::flat_hash_map<std::string, uint64_t> lang;
};

// Reads one corpus; `on_doc(text, location, words, ids)` per document.
template <class OnDoc>
absl::Status ReadSide(const std::vector<std::string>& args, const CompareOptions& o,
                      CorpusSide* side, Side* s, OnDoc on_doc) {
  auto inputs = ExpandInputs(args, o.reader.format);
  if (!inputs.ok()) return inputs.status();
  side->inputs = args;
  ReaderOptions ro = o.reader;
  ro.raw_jsonl_blocks = false;
  AnalyzerOptions ao;
  ao.near_dup = false;
  ao.noise = false;
  ao.language = o.language;
  ao.tokenizer = o.tokenizer;
  DocAnalyzer analyzer(ao);
  DocWords w;
  DocResult r;
  absl::Status st = ReadCorpus(
      *inputs, ro,
      [&](DocBatch&& batch) {
        for (const DocRef& d : batch.docs) {
          std::string_view text = batch.Text(d);
          analyzer.Analyze(text, d.tokens, &r, nullptr, nullptr);
          w.Split(text);
          w.ids.clear();
          if (o.tokenizer != nullptr) o.tokenizer->Encode(text, &w.ids);
          const size_t tokens = o.tokenizer != nullptr ? w.ids.size() : text.size();
          ++side->docs;
          side->bytes += text.size();
          side->words += w.hash.size();
          side->tokens += tokens;
          ++s->lang[LangCode(r.lang)];
          Features(text, r, w.hash.size(), tokens, s->features);
          on_doc(text, DocLocation(*inputs, d), w);
        }
        return true;
      },
      &side->bad);
  if (!st.ok()) return st;
  if (side->docs == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(args.empty() ? "" : args[0], ": holds no document to compare"));
  }
  for (const auto& [code, n] : s->lang) side->languages[code] = n;
  return absl::OkStatus();
}

}  // namespace

// ---- Distances ----
// PSI over REFERENCE's deciles: bin edges are the 10th..90th percentiles of the reference
// (duplicates merged, so a feature with few values gets fewer bins); shares floored at 1e-4
// so that an empty bin counts as a large shift rather than an infinity.
double PopulationStabilityIndex(std::vector<double> reference, std::vector<double> candidate) {
  if (reference.empty() || candidate.empty()) return 0;
  std::sort(reference.begin(), reference.end());
  std::vector<double> edges;
  for (int q = 1; q < 10; ++q) {
    double e = reference[std::min(reference.size() - 1, reference.size() * q / 10)];
    if (edges.empty() || e > edges.back()) edges.push_back(e);
  }
  auto shares = [&](const std::vector<double>& v) {
    std::vector<double> c(edges.size() + 1, 0.0);
    for (double x : v) {
      c[std::lower_bound(edges.begin(), edges.end(), x) - edges.begin()] += 1;  // x <= edge
    }
    for (double& x : c) x = std::max(1e-4, x / v.size());
    return c;
  };
  const std::vector<double> r = shares(reference), c = shares(candidate);
  double psi = 0;
  for (size_t i = 0; i < r.size(); ++i) psi += (c[i] - r[i]) * std::log(c[i] / r[i]);
  return psi;
}

double KsStatistic(std::vector<double> a, std::vector<double> b) {
  if (a.empty() || b.empty()) return 0;
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  size_t i = 0, j = 0;
  double d = 0;
  while (i < a.size() && j < b.size()) {
    const double x = std::min(a[i], b[j]);
    while (i < a.size() && a[i] <= x) ++i;
    while (j < b.size() && b[j] <= x) ++j;
    d = std::max(d, std::fabs(double(i) / a.size() - double(j) / b.size()));
  }
  return d;
}

// ---- The comparison ----
namespace {

// CANDIDATE's vocabulary: word and token-id sets, and its bigram and trigram sets.
struct Vocabulary {
  absl::flat_hash_set<uint64_t> words, bigrams, trigrams;
  absl::flat_hash_set<int32_t> ids;

  void Add(const DocWords& w) {
    for (size_t i = 0; i < w.hash.size(); ++i) {
      words.insert(w.hash[i]);
      if (i + 2 <= w.hash.size()) bigrams.insert(Gram(w.hash, i, 2));
      if (i + 3 <= w.hash.size()) trigrams.insert(Gram(w.hash, i, 3));
    }
    ids.insert(w.ids.begin(), w.ids.end());
  }
};

// Lower word + bigram coverage first: the ordering of the least-covered list.
bool LessCovered(const UncoveredDoc& a, const UncoveredDoc& b) {
  return a.word_coverage + a.bigram_coverage < b.word_coverage + b.bigram_coverage;
}

// REFERENCE's mass covered by CANDIDATE's vocabulary, per document too.
struct CoveragePass {
  const Vocabulary& cand;
  const CompareOptions& o;
  uint64_t words = 0, words_hit = 0, bi = 0, bi_hit = 0, tri = 0, tri_hit = 0, ids = 0, ids_hit = 0;
  absl::flat_hash_set<uint64_t> ref_words;
  absl::flat_hash_set<int32_t> ref_ids;
  std::vector<UncoveredDoc> docs;

  void Add(std::string_view text, const std::string& where, const DocWords& w) {
    uint64_t dw = 0, db = 0, db_n = 0;
    for (size_t i = 0; i < w.hash.size(); ++i) {
      ref_words.insert(w.hash[i]);
      dw += cand.words.contains(w.hash[i]);
      if (i + 2 <= w.hash.size()) {
        ++db_n;
        db += cand.bigrams.contains(Gram(w.hash, i, 2));
      }
      if (i + 3 <= w.hash.size()) {
        ++tri;
        tri_hit += cand.trigrams.contains(Gram(w.hash, i, 3));
      }
    }
    for (int32_t id : w.ids) {
      ref_ids.insert(id);
      ids_hit += cand.ids.contains(id);
    }
    ids += w.ids.size();
    words += w.hash.size();
    words_hit += dw;
    bi += db_n;
    bi_hit += db;
    if (o.least_covered > 0 && !w.hash.empty()) {
      UncoveredDoc u;
      u.location = where;
      u.words = w.hash.size();
      u.word_coverage = double(dw) / w.hash.size();
      u.bigram_coverage = db_n ? double(db) / db_n : u.word_coverage;
      u.preview = Preview(text);
      docs.push_back(std::move(u));
      // Keep the list bounded: the least covered 4x the asked number.
      if (docs.size() >= 8u * o.least_covered) {
        std::nth_element(docs.begin(), docs.begin() + o.least_covered, docs.end(), LessCovered);
        docs.resize(o.least_covered);
      }
    }
  }

  // The coverage figures and the least covered documents into `rep`.
  void Report(CompareReport* rep) {
    rep->reference.distinct_words = ref_words.size();
    rep->reference.distinct_tokens = ref_ids.size();
    auto ratio = [](uint64_t a, uint64_t b) { return b ? double(a) / b : 1.0; };
    rep->word_coverage = ratio(words_hit, words);
    rep->bigram_coverage = ratio(bi_hit, bi);
    rep->trigram_coverage = ratio(tri_hit, tri);
    if (o.tokenizer != nullptr) rep->token_coverage = ratio(ids_hit, ids);
    std::sort(docs.begin(), docs.end(), [](const UncoveredDoc& a, const UncoveredDoc& b) {
      const double ka = a.word_coverage + a.bigram_coverage,
                   kb = b.word_coverage + b.bigram_coverage;
      if (ka != kb) return ka < kb;
      return a.location < b.location;
    });
    if (docs.size() > static_cast<size_t>(std::max(0, o.least_covered)))
      docs.resize(o.least_covered);
    rep->least_covered = std::move(docs);
  }
};

// The length and token-count KS statistics, each feature's PSI and means, and the language
// mix: total variation distance of the document shares, and REFERENCE's languages (>= 1% of
// its documents) that CANDIDATE lacks.
void AddDistances(const Side& rs, const Side& cs, CompareReport* rep) {
  rep->ks_length = KsStatistic(rs.features[kBytes], cs.features[kBytes]);
  rep->ks_tokens = KsStatistic(rs.features[kTokens], cs.features[kTokens]);
  auto mean = [](const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x;
    return v.empty() ? 0.0 : s / v.size();
  };
  for (int f = 0; f < kNumFeatures; ++f) {
    FeatureShift shift;
    shift.name = kFeatureNames[f];
    shift.psi = PopulationStabilityIndex(rs.features[f], cs.features[f]);
    shift.reference_mean = mean(rs.features[f]);
    shift.candidate_mean = mean(cs.features[f]);
    rep->features.push_back(shift);
  }
  std::set<std::string> codes;
  for (const auto& entry : rep->reference.languages) codes.insert(entry.first);
  for (const auto& entry : rep->candidate.languages) codes.insert(entry.first);
  double tvd = 0;
  for (const std::string& c : codes) {
    auto share = [&](const CorpusSide& s) {
      auto it = s.languages.find(c);
      return it == s.languages.end() ? 0.0 : double(it->second) / s.docs;
    };
    tvd += std::fabs(share(rep->reference) - share(rep->candidate));
    if (share(rep->reference) >= 0.01 && share(rep->candidate) == 0.0 && c != "un") {
      rep->missing_languages.push_back(c);
    }
  }
  rep->language_tvd = tvd / 2;
}

// The verdict: every threshold crossed is a reason CANDIDATE does not cover REFERENCE.
void AddVerdict(const CompareOptions& o, CompareReport* rep) {
  const CompareThresholds& t = o.thresholds;
  auto fail = [&](std::string why) {
    rep->covers = false;
    rep->reasons.push_back(std::move(why));
  };
  if (rep->word_coverage < t.min_word_coverage) {
    fail(
        absl::StrFormat("word coverage %.3f < %.2f: %.1f%% of REFERENCE's words never occur in "
                        "CANDIDATE",
                        rep->word_coverage, t.min_word_coverage, 100 * (1 - rep->word_coverage)));
  }
  if (rep->token_coverage >= 0 && rep->token_coverage < t.min_token_coverage) {
    fail(absl::StrFormat("token coverage %.3f < %.2f", rep->token_coverage, t.min_token_coverage));
  }
  if (rep->bigram_coverage < t.min_bigram_coverage) {
    fail(absl::StrFormat("bigram coverage %.3f < %.2f", rep->bigram_coverage,
                         t.min_bigram_coverage));
  }
  if (rep->ks_length > t.max_ks) {
    fail(absl::StrFormat("length distribution differs: KS %.3f > %.2f", rep->ks_length, t.max_ks));
  }
  if (rep->ks_tokens > t.max_ks && o.tokenizer != nullptr) {
    fail(absl::StrFormat("token-count distribution differs: KS %.3f > %.2f", rep->ks_tokens,
                         t.max_ks));
  }
  if (rep->language_tvd > t.max_language_tvd) {
    fail(absl::StrFormat("language mix differs: total variation %.3f > %.2f", rep->language_tvd,
                         t.max_language_tvd));
  }
  if (!rep->missing_languages.empty()) {
    fail("REFERENCE languages absent from CANDIDATE: " +
         absl::StrJoin(rep->missing_languages, ", "));
  }
  for (const FeatureShift& f : rep->features) {
    if (f.psi > t.max_psi) {
      fail(absl::StrFormat("feature %s shifted: PSI %.3f > %.2f (mean %.4g vs %.4g)", f.name, f.psi,
                           t.max_psi, f.reference_mean, f.candidate_mean));
    } else if (f.psi > 0.10) {
      rep->warnings.push_back(
          absl::StrFormat("feature %s: moderate shift, PSI %.3f", f.name, f.psi));
    }
  }
  if (rep->covers) {
    rep->reasons.push_back(absl::StrFormat(
        "word coverage %.3f, bigram coverage %.3f, KS length %.3f, language TVD %.3f, max PSI "
        "within %.2f",
        rep->word_coverage, rep->bigram_coverage, rep->ks_length, rep->language_tvd, t.max_psi));
  }
}

}  // namespace

absl::StatusOr<CompareReport> CompareCorpora(const std::vector<std::string>& reference,
                                             const std::vector<std::string>& candidate,
                                             const CompareOptions& o) {
  CompareReport rep;
  rep.thresholds = o.thresholds;
  if (o.tokenizer != nullptr) rep.tokenizer = o.tokenizer->name();

  // CANDIDATE: its vocabulary (words, token ids) and n-gram sets.
  Vocabulary cand;
  Side cs;
  absl::Status st =
      ReadSide(candidate, o, &rep.candidate, &cs,
               [&](std::string_view, const std::string&, const DocWords& w) { cand.Add(w); });
  if (!st.ok()) return st;
  rep.candidate.distinct_words = cand.words.size();
  rep.candidate.distinct_tokens = cand.ids.size();

  // REFERENCE: mass covered, per document too.
  CoveragePass pass{cand, o};
  Side rs;
  st = ReadSide(reference, o, &rep.reference, &rs,
                [&](std::string_view text, const std::string& where, const DocWords& w) {
                  pass.Add(text, where, w);
                });
  if (!st.ok()) return st;
  pass.Report(&rep);

  AddDistances(rs, cs, &rep);
  AddVerdict(o, &rep);
  return rep;
}

// ---- Reports ----
namespace {

nlohmann::json SideJson(const CorpusSide& s) {
  return {{"inputs", s.inputs},
          {"docs", s.docs},
          {"bytes", s.bytes},
          {"words", s.words},
          {"tokens", s.tokens},
          {"distinct_words", s.distinct_words},
          {"distinct_tokens", s.distinct_tokens},
          {"languages", s.languages},
          {"bad_records", s.bad.ToJson()}};
}

double R4(double v) { return std::round(v * 1e4) / 1e4; }

}  // namespace

nlohmann::json CompareReportToJson(const CompareReport& r) {
  nlohmann::json j;
  j["format"] = formats::kDataCompare;
  j["version"] = 1;
  j["reference"] = SideJson(r.reference);
  j["candidate"] = SideJson(r.candidate);
  j["tokenizer"] = r.tokenizer.empty() ? nlohmann::json() : nlohmann::json(r.tokenizer);
  j["coverage"] = {
      {"words", R4(r.word_coverage)},
      {"tokens", r.token_coverage < 0 ? nlohmann::json() : nlohmann::json(R4(r.token_coverage))},
      {"bigrams", R4(r.bigram_coverage)},
      {"trigrams", R4(r.trigram_coverage)}};
  j["distance"] = {{"ks_length", R4(r.ks_length)},
                   {"ks_tokens", R4(r.ks_tokens)},
                   {"language_tvd", R4(r.language_tvd)}};
  j["missing_languages"] = r.missing_languages;
  nlohmann::json f = nlohmann::json::array();
  for (const FeatureShift& s : r.features) {
    f.push_back({{"name", s.name},
                 {"psi", R4(s.psi)},
                 {"reference_mean", s.reference_mean},
                 {"candidate_mean", s.candidate_mean}});
  }
  j["features"] = std::move(f);
  nlohmann::json l = nlohmann::json::array();
  for (const UncoveredDoc& d : r.least_covered) {
    l.push_back({{"location", d.location},
                 {"words", d.words},
                 {"word_coverage", R4(d.word_coverage)},
                 {"bigram_coverage", R4(d.bigram_coverage)},
                 {"preview", d.preview}});
  }
  j["least_covered"] = std::move(l);
  const CompareThresholds& t = r.thresholds;
  j["thresholds"] = {{"min_word_coverage", t.min_word_coverage},
                     {"min_token_coverage", t.min_token_coverage},
                     {"min_bigram_coverage", t.min_bigram_coverage},
                     {"max_psi", t.max_psi},
                     {"max_ks", t.max_ks},
                     {"max_language_tvd", t.max_language_tvd}};
  j["verdict"] = r.covers ? "covers" : "does_not_cover";
  j["reasons"] = r.reasons;
  j["warnings"] = r.warnings;
  return j;
}

std::string CompareReportToText(const CompareReport& r) {
  auto side = [](const char* what, const CorpusSide& s) {
    return absl::StrFormat("%-9s %s docs, %s words (%s distinct), %s tokens, %s\n", what,
                           FormatCount(s.docs), FormatCount(s.words), FormatCount(s.distinct_words),
                           FormatCount(s.tokens), FormatBytes(double(s.bytes)));
  };
  std::string out = side("reference", r.reference) + side("candidate", r.candidate);
  absl::StrAppend(&out,
                  absl::StrFormat("\ncoverage of REFERENCE by CANDIDATE: words %.3f, bigrams %.3f, "
                                  "trigrams %.3f",
                                  r.word_coverage, r.bigram_coverage, r.trigram_coverage));
  if (r.token_coverage >= 0)
    absl::StrAppend(&out, absl::StrFormat(", tokens %.3f", r.token_coverage));
  absl::StrAppend(
      &out, absl::StrFormat("\ndistances: KS length %.3f, KS tokens %.3f, language TVD %.3f\n\n",
                            r.ks_length, r.ks_tokens, r.language_tvd));
  Table ft({"feature", "PSI", "reference mean", "candidate mean"});
  for (const FeatureShift& f : r.features) {
    ft.AddRow({f.name, FormatDouble(f.psi, 3), FormatDouble(f.reference_mean, 4),
               FormatDouble(f.candidate_mean, 4)});
  }
  absl::StrAppend(&out, ft.Render());
  if (!r.least_covered.empty()) {
    Table lt({"least covered REFERENCE document", "words", "word cov", "bigram cov", "text"});
    for (const UncoveredDoc& d : r.least_covered) {
      lt.AddRow({d.location, FormatCount(d.words), FormatDouble(d.word_coverage, 3),
                 FormatDouble(d.bigram_coverage, 3), d.preview});
    }
    absl::StrAppend(&out, "\n", lt.Render(44));
  }
  for (const std::string& w : r.warnings) absl::StrAppend(&out, "warning: ", w, "\n");
  absl::StrAppend(&out, "\nverdict: ",
                  r.covers ? "CANDIDATE covers REFERENCE" : "CANDIDATE does NOT cover REFERENCE",
                  "\n");
  for (const std::string& why : r.reasons) absl::StrAppend(&out, "  - ", why, "\n");
  return out;
}

}  // namespace trainscope::data
