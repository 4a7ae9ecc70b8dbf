// The scan pipeline: reader thread -> worker threads -> in-order merge on the caller.
#include "trainscope/data/scan.h"

#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "data/doc_analysis.h"
#include "data/scan_internal.h"
#include "data/spill.h"
#include "trainscope/core/progress.h"
#include "trainscope/core/status.h"
#include "trainscope/tokenizer/tokenizer.h"

namespace trainscope::data {
namespace {

// What a worker hands back for one batch.
struct BatchResult {
  uint64_t seq = 0;
  uint64_t input_bytes = 0;
  std::vector<DocResult> docs;
  std::vector<uint64_t> bands;   // docs * bands
  std::vector<uint16_t> sigs;    // docs * permutations
  std::vector<std::string> ids;  // verdict ids (only with verdicts)
  std::vector<uint32_t> file;    // locations (only with keep_doc_arrays)
  std::vector<uint64_t> line;
  BadRecords bad;  // bad records found up to the end of this batch, in corpus order
};

// Bounded FIFO of batches between the reader and the workers.
class BatchQueue {
 public:
  explicit BatchQueue(size_t cap) : cap_(cap) {}
  bool Push(DocBatch&& b) {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return q_.size() < cap_ || closed_; });
    if (closed_) return false;
    q_.push_back(std::move(b));
    cv_.notify_all();
    return true;
  }
  bool Pop(DocBatch* b) {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return !q_.empty() || closed_ || done_; });
    if (q_.empty()) return false;
    *b = std::move(q_.front());
    q_.pop_front();
    cv_.notify_all();
    return true;
  }
  void Finish() {
    std::lock_guard<std::mutex> l(mu_);
    done_ = true;
    cv_.notify_all();
  }
  void Close() {
    std::lock_guard<std::mutex> l(mu_);
    closed_ = true;
    cv_.notify_all();
  }

 private:
  const size_t cap_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<DocBatch> q_;
  bool done_ = false, closed_ = false;
};

// Results keyed by batch sequence number, taken out in order.
class ResultQueue {
 public:
  explicit ResultQueue(size_t cap) : cap_(cap) {}
  void Put(BatchResult&& r) {
    std::unique_lock<std::mutex> l(mu_);
    // Bounded, but the next-in-order result is always accepted (no deadlock).
    cv_.wait(l, [&] { return m_.size() < cap_ || r.seq == next_ || aborted_; });
    m_.emplace(r.seq, std::move(r));
    cv_.notify_all();
  }
  // False when the stream ended (all workers done and nothing left).
  bool Take(BatchResult* r) {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return m_.count(next_) || (workers_done_ && m_.empty()); });
    auto it = m_.find(next_);
    if (it == m_.end()) return false;
    *r = std::move(it->second);
    m_.erase(it);
    ++next_;
    cv_.notify_all();
    return true;
  }
  void WorkersDone() {
    std::lock_guard<std::mutex> l(mu_);
    workers_done_ = true;
    cv_.notify_all();
  }
  void Abort() {
    std::lock_guard<std::mutex> l(mu_);
    aborted_ = true;
    cv_.notify_all();
  }

 private:
  const size_t cap_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, BatchResult> m_;
  uint64_t next_ = 0;
  bool workers_done_ = false, aborted_ = false;
};

// Append-only per-document array in 64K-element blocks: growth never copies or doubles,
// so memory stays at the element size per document (a std::vector would briefly hold
// three times its size while it grows).
template <typename T>
class Chunked {
 public:
  static constexpr size_t kBlock = 1 << 16;
  void push_back(T v) {
    if (n_ % kBlock == 0) blocks_.emplace_back(new T[kBlock]);
    blocks_.back()[n_ % kBlock] = v;
    ++n_;
  }
  T operator[](size_t i) const { return blocks_[i / kBlock][i % kBlock]; }
  size_t size() const { return n_; }
  std::vector<T> ToVector() const {
    std::vector<T> v(n_);
    for (size_t i = 0; i < n_; ++i) v[i] = (*this)[i];
    return v;
  }
  void clear() {
    blocks_.clear();
    n_ = 0;
  }

 private:
  std::vector<std::unique_ptr<T[]>> blocks_;
  size_t n_ = 0;
};

LengthStats MakeLengthStats(const std::vector<uint32_t>& v) {
  LengthStats s;
  s.summary = Summarize(v);
  for (uint32_t x : v) s.histogram.Add(x);
  return s;
}

class UnionFind {
 public:
  // Adopts a forest: parent[i] <= i for every i (a root points at itself).
  explicit UnionFind(std::vector<uint32_t> parent) : parent_(std::move(parent)) {}
  uint32_t Find(uint32_t x) {
    uint32_t r = x;
    while (parent_[r] != r) r = parent_[r];
    while (parent_[x] != r) {
      uint32_t next = parent_[x];
      parent_[x] = r;
      x = next;
    }
    return r;
  }
  // Keep-first: the root of a cluster is its smallest (earliest) document.
  void Union(uint32_t a, uint32_t b) {
    a = Find(a);
    b = Find(b);
    if (a == b) return;
    if (a < b) std::swap(a, b);
    parent_[a] = b;
  }
  std::vector<uint32_t>& parent() { return parent_; }

 private:
  std::vector<uint32_t> parent_;
};

BatchDupStats BatchDuplicates(const std::vector<uint32_t>& cluster,
                              const std::vector<uint32_t>* order, int64_t batch) {
  BatchDupStats s;
  const size_t n = cluster.size();
  if (n == 0 || batch <= 0) return s;
  std::vector<double> ratios;
  absl::flat_hash_set<uint32_t> seen;
  for (size_t start = 0; start < n; start += batch) {
    const size_t end = std::min(n, start + static_cast<size_t>(batch));
    seen.clear();
    size_t dups = 0;
    for (size_t i = start; i < end; ++i) {
      const uint32_t doc = order ? (*order)[i] : static_cast<uint32_t>(i);
      if (!seen.insert(cluster[doc]).second) ++dups;
    }
    ratios.push_back(static_cast<double>(dups) / (end - start));
    s.batches_with_dups += dups > 0;
  }
  s.batches = ratios.size();
  Summary sum = Summarize(ratios);
  s.mean = sum.mean;
  s.p50 = sum.p50;
  s.p99 = sum.p99;
  s.max = sum.max;
  return s;
}

absl::Status CheckScanOptions(const ScanOptions& opt) {
  if (opt.threads < 1) return absl::InvalidArgumentError("--threads must be >= 1");
  if (opt.bands < 1 || opt.rows < 1 || opt.ngram < 1) {
    return absl::InvalidArgumentError("--bands, --rows and --ngram must be >= 1");
  }
  if (opt.threshold <= 0 || opt.threshold > 1) {
    return absl::InvalidArgumentError("--threshold must be in (0, 1]");
  }
  return absl::OkStatus();
}

// The analyzers' options, and the exact-duplicate result cache they share: exact duplicates
// are analysed once (while they stay in the cache): 2^16 slots, ~26 MB with the default
// bands and rows; on the short real-text bench corpus (63% exact duplicates) 61% of
// documents are answered from it.
AnalyzerOptions MakeAnalyzerOptions(const ScanOptions& opt,
                                    std::unique_ptr<DocResultCache>* cache) {
  AnalyzerOptions aopt;
  aopt.ngram = opt.ngram;
  aopt.bands = opt.bands;
  aopt.rows = opt.rows;
  aopt.seed = opt.minhash_seed;
  aopt.near_dup = opt.near_dup;
  aopt.noise = opt.noise;
  aopt.language = opt.language;
  aopt.tokenizer = opt.tokenizer;
  aopt.c4_min_sentences = opt.c4_min_sentences;
  if (opt.near_dup || opt.noise || opt.language) {
    *cache = std::make_unique<DocResultCache>(size_t{1} << 16, opt.bands, opt.bands * opt.rows);
    aopt.result_cache = cache->get();
  }
  return aopt;
}

// The reader thread and the worker threads. `on_result` gets each batch's results in corpus
// order on the calling thread; returning false stops the scan. Bad records found after the
// last batch go to `reader_bad`. Returns the reader's status.
absl::Status RunPipeline(const std::vector<InputFile>& inputs, const ScanOptions& opt,
                         const AnalyzerOptions& aopt,
                         const std::function<bool(BatchResult&)>& on_result,
                         BadRecords* reader_bad) {
  const int perms = opt.bands * opt.rows;
  const bool want_ids = !opt.verdicts_path.empty();
  BatchQueue batches(opt.threads * 2 + 1);
  ResultQueue results(opt.threads * 2 + 2);
  absl::Status read_status;
  ReaderOptions ropt = opt.reader;
  ropt.tokenizer = opt.tokenizer;
  BufferPool text_pool(opt.threads * 3 + 4);  // batches in flight, so none is refaulted
  ropt.text_pool = &text_pool;
  // Uncompressed JSONL goes to the workers as raw blocks: they split and decode lines, so
  // the reader thread only reads. Bad records travel with the batches and are merged in
  // corpus order; `reader_bad` gets those after the last batch.
  ropt.raw_jsonl_blocks = true;
  std::thread reader([&] {
    read_status = ReadCorpus(
        inputs, ropt, [&](DocBatch&& b) { return batches.Push(std::move(b)); }, reader_bad);
    batches.Finish();
  });
  std::vector<std::thread> workers;
  std::atomic<int> live_workers{opt.threads};
  for (int t = 0; t < opt.threads; ++t) {
    workers.emplace_back([&] {
      DocAnalyzer analyzer(aopt);
      JsonlBlockDecoder decoder(ropt);
      DocBatch b;
      size_t docs_hint = 0;  // documents in the last batch: capacity for the next
      while (batches.Pop(&b)) {
        BatchResult r;
        r.seq = b.seq;
        r.input_bytes = b.input_bytes;
        const size_t hint = std::max(b.docs.size(), docs_hint);
        r.docs.reserve(hint);
        if (opt.near_dup) {
          r.bands.reserve(hint * opt.bands);
          r.sigs.reserve(hint * perms);
        }
        if (want_ids) r.ids.reserve(hint);
        // One document: analysed where its text lies (in the batch, or for a raw JSONL
        // block in the line or the JSON parser's buffer), so nothing is copied.
        auto analyze = [&](std::string_view text, int64_t tokens, bool utf8_valid, const DocRef& d,
                           std::string_view id) {
          const size_t i = r.docs.size();
          r.docs.emplace_back();
          if (opt.near_dup) {
            r.bands.resize((i + 1) * opt.bands);
            r.sigs.resize((i + 1) * perms);
          }
          analyzer.Analyze(text, tokens, &r.docs[i],
                           opt.near_dup ? &r.bands[i * opt.bands] : nullptr,
                           opt.near_dup ? &r.sigs[i * perms] : nullptr, utf8_valid);
          if (opt.keep_doc_arrays) {
            r.file.push_back(d.file);
            r.line.push_back(d.line);
          }
          if (want_ids) r.ids.push_back(!id.empty() ? std::string(id) : DocLocation(inputs, d));
        };
        if (b.raw) {
          DocRef d;
          d.file = b.raw_file;
          decoder.ForEachDoc(inputs[b.raw_file], &b,
                             [&](std::string_view text, std::string_view id, uint64_t line) {
                               d.line = line;
                               analyze(text, -1, /*utf8_valid=*/true, d, id);
                             });
        } else {
          for (const DocRef& d : b.docs) analyze(b.Text(d), d.tokens, false, d, b.Id(d));
        }
        docs_hint = r.docs.size();
        r.bad = std::move(b.bad);
        b.raw_pages.reset();  // a mapped block's pages leave the process
        text_pool.Put(std::move(b.text));
        results.Put(std::move(r));
      }
      if (--live_workers == 0) results.WorkersDone();
    });
  }

  BatchResult r;
  while (results.Take(&r)) {
    if (!on_result(r)) {
      batches.Close();
      results.Abort();
      break;
    }
  }
  reader.join();
  for (auto& w : workers) w.join();
  text_pool.Clear();
  return read_status;
}

// RunPipeline with the batch bookkeeping that RunScan and ScanLocal share: each batch's input
// bytes go to `progress` and res->input_bytes and its bad records to res->bad, then
// `merge_docs` takes its documents (and counts them in res->docs); the scan stops once the
// corpus passes CheckCorpusDocs's limit. Returns the reader's error, else that limit's.
absl::Status MergeBatches(const std::vector<InputFile>& inputs, const ScanOptions& opt,
                          const AnalyzerOptions& aopt, Progress* progress,
                          const std::function<void(BatchResult&)>& merge_docs, ScanResult* res) {
  absl::Status limit_status;
  auto merge = [&](BatchResult& r) {
    progress->Add(r.input_bytes);
    res->input_bytes += r.input_bytes;
    res->bad.Merge(r.bad);
    merge_docs(r);
    limit_status = CheckCorpusDocs(res->docs);
    return limit_status.ok();
  };
  BadRecords reader_bad;
  const absl::Status read_status = RunPipeline(inputs, opt, aopt, merge, &reader_bad);
  res->bad.Merge(reader_bad);
  TS_RETURN_IF_ERROR(read_status);
  return limit_status;
}

// The per-flag and per-language document counts of a merge, into the report's maps.
void AddFlagAndLangCounts(const uint64_t (&flag_counts)[kNumFlags],
                          const std::map<uint16_t, std::pair<uint64_t, uint64_t>>& lang_counts,
                          ScanResult* res) {
  for (int f = 0; f < kNumFlags; ++f) {
    if (flag_counts[f]) res->flag_docs[FlagName(f)] = flag_counts[f];
  }
  for (const auto& [l, c] : lang_counts) {
    res->lang_docs[LangCode(l)] += c.first;
    res->lang_bytes[LangCode(l)] += c.second;
  }
}

// RunScan's in-order merge: each document's totals and per-document arrays, the exact-
// duplicate tables (first document per raw and normalised key), its LSH band records and
// MinHash fingerprints (spill files; near_dup) and its verdict id (spill file; verdicts).
struct ScanMerge {
  ScanMerge(const ScanOptions& o, ScanResult* r) : opt(o), res(r) {}

  absl::Status OpenSpill(SpillDir* spill) {
    if (opt.near_dup) {
      for (int b = 0; b < opt.bands; ++b) {
        TS_ASSIGN_OR_RETURN(auto w, spill->Writer(absl::StrCat("band", b)));
        band_files.push_back(std::move(w));
      }
      TS_ASSIGN_OR_RETURN(sig_file, spill->Writer("sigs"));
    }
    if (want_ids) {
      TS_ASSIGN_OR_RETURN(id_file, spill->Writer("ids"));
    }
    return absl::OkStatus();
  }

  void Add(BatchResult& r) {
    for (size_t i = 0; i < r.docs.size(); ++i) {
      const DocResult& d = r.docs[i];
      const uint32_t g = static_cast<uint32_t>(res->docs++);
      res->bytes += d.bytes;
      res->chars += d.chars;
      res->words += d.words;
      res->tokens += d.tokens;
      tokens_c.push_back(static_cast<uint32_t>(std::min<uint64_t>(d.tokens + eos, UINT32_MAX)));
      chars_c.push_back(d.chars);
      flags.push_back(d.flags);
      langs.push_back(d.lang);
      if (opt.language) {  // without language id no language is reported (not "un")
        auto& lc = lang_counts[d.lang];
        ++lc.first;
        lc.second += d.bytes;
      }
      if (d.flags) {
        ++res->flagged_docs;
        for (uint32_t m = d.flags; m != 0; m &= m - 1) ++flag_counts[__builtin_ctz(m)];
      }
      uint32_t ex = ScanResult::kNoDoc, parent = g;
      auto raw_it = raw_first.try_emplace(d.raw_hash, g);
      if (!raw_it.second) {
        ex = raw_it.first->second;
        parent = ex;
        ++res->exact_duplicate_docs;
      }
      auto norm_it = norm_first.try_emplace(d.norm_hash, g);
      if (!norm_it.second) {
        ++res->normalized_duplicate_docs;
        if (parent == g) parent = norm_it.first->second;
      }
      exact_of.push_back(ex);
      if (opt.keep_doc_arrays) {
        res->doc_file.push_back(r.file[i]);
        res->doc_line.push_back(r.line[i]);
      }
      dup_parent.push_back(parent);
      if (opt.near_dup) {
        const bool index = d.has_signature && parent == g;
        if (!d.has_signature) ++res->docs_without_shingles;
        if (index) {
          for (int b = 0; b < opt.bands; ++b) {
            BandRecord rec{r.bands[i * opt.bands + b], g};
            band_files[b]->Append(&rec, sizeof(rec));
          }
        }
        sig_file->Append(index ? &r.sigs[i * perms] : zero_sig.data(), perms * sizeof(uint16_t));
      }
      if (want_ids) {
        const std::string& id = r.ids[i];
        const uint32_t len = static_cast<uint32_t>(id.size());
        id_file->Append(&len, sizeof(len));
        id_file->Append(id.data(), len);
      }
    }
  }

  const ScanOptions& opt;
  ScanResult* const res;
  const int perms = opt.bands * opt.rows;
  const bool want_ids = !opt.verdicts_path.empty();
  const uint64_t eos = opt.tokenizer ? (opt.tokenizer->eos_id() >= 0 ? 1 : 0) : 1;
  const std::vector<uint16_t> zero_sig = std::vector<uint16_t>(perms, 0);
  std::vector<std::unique_ptr<SpillWriter>> band_files;
  std::unique_ptr<SpillWriter> sig_file, id_file;
  absl::flat_hash_map<uint64_t, uint32_t> raw_first, norm_first;
  Chunked<uint32_t> tokens_c, chars_c, flags, exact_of, dup_parent;
  Chunked<uint16_t> langs;
  std::map<uint16_t, std::pair<uint64_t, uint64_t>> lang_counts;
  uint64_t flag_counts[kNumFlags] = {0};
};

// One band's sorted (hash, doc) records: in a run of equal hashes every later document is a
// candidate pair with the run's first (and, failing that, with the one before it), unless
// union-find already joined them; `similar` verifies a pair.
template <typename Similar>
absl::Status VerifyBand(const std::vector<BandRecord>& recs, Similar& similar, UnionFind* uf,
                        ScanResult* res) {
  for (size_t i = 0; i < recs.size();) {
    size_t j = i + 1;
    while (j < recs.size() && recs[j].hash == recs[i].hash) ++j;
    for (size_t k = i + 1; k < j; ++k) {
      const uint32_t first = recs[i].doc, cur = recs[k].doc;
      if (uf->Find(first) == uf->Find(cur)) continue;
      ++res->candidate_pairs;
      TS_ASSIGN_OR_RETURN(bool ok, similar(first, cur));
      if (!ok && k > i + 1 && uf->Find(recs[k - 1].doc) != uf->Find(cur)) {
        ++res->candidate_pairs;
        TS_ASSIGN_OR_RETURN(ok, similar(recs[k - 1].doc, cur));
      }
      if (ok) {
        ++res->verified_pairs;
        uf->Union(first, cur);
      }
    }
    i = j;
  }
  return absl::OkStatus();
}

// --- near duplicates: per band, sort (hash, doc) records; equal hashes are candidate
// pairs, verified by the share of agreeing MinHash fingerprints; union-find, keep-first.
absl::Status FindNearDuplicates(const ScanOptions& opt, SpillDir* spill, ScanMerge* m,
                                UnionFind* uf, ScanResult* res) {
  const int perms = opt.bands * opt.rows;
  TS_RETURN_IF_ERROR(m->sig_file->Close());
  TS_ASSIGN_OR_RETURN(auto sigs, spill->Reader("sigs"));
  std::vector<uint16_t> sa(perms), sb(perms);
  const int need = static_cast<int>(std::ceil(opt.threshold * perms - 1e-9));
  auto similar = [&](uint32_t a, uint32_t b) -> absl::StatusOr<bool> {
    TS_RETURN_IF_ERROR(sigs->ReadAt(static_cast<uint64_t>(a) * perms * 2, sa.data(), perms * 2));
    TS_RETURN_IF_ERROR(sigs->ReadAt(static_cast<uint64_t>(b) * perms * 2, sb.data(), perms * 2));
    int agree = 0;
    for (int i = 0; i < perms; ++i) agree += sa[i] == sb[i];
    return agree >= need;
  };
  std::vector<BandRecord> recs;
  for (int b = 0; b < opt.bands; ++b) {
    TS_RETURN_IF_ERROR(m->band_files[b]->Close());
    TS_RETURN_IF_ERROR(spill->ReadAll(absl::StrCat("band", b), &recs));
    spill->Remove(absl::StrCat("band", b));
    SortBandRecords(&recs);
    TS_RETURN_IF_ERROR(VerifyBand(recs, similar, uf, res));
    recs = {};
    malloc_trim(0);
  }
  return absl::OkStatus();
}

// The merge's per-document arrays as the final stage takes them, each freed once copied.
ResolvedDocs ResolveScanDocs(ScanMerge* m, UnionFind* uf, uint64_t n) {
  ResolvedDocs docs;
  docs.exact_of = m->exact_of.ToVector();
  m->exact_of.clear();
  docs.cluster.resize(n);
  for (uint32_t g = 0; g < n; ++g) docs.cluster[g] = uf->Find(g);
  uf->parent() = {};
  docs.flags = m->flags.ToVector();
  m->flags.clear();
  docs.langs = m->langs.ToVector();
  m->langs.clear();
  docs.tokens = m->tokens_c.ToVector();
  m->tokens_c.clear();
  docs.chars = m->chars_c.ToVector();
  m->chars_c.clear();
  return docs;
}

}  // namespace

absl::Status CheckCorpusDocs(uint64_t docs) {
  if (docs >= 0xFFFFFFF0ull) {
    return absl::OutOfRangeError("more than 4 billion documents: split the corpus");
  }
  return absl::OkStatus();
}

int DefaultScanThreads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 2 : static_cast<int>(std::min(n, 16u));
}

absl::StatusOr<ScanResult> RunScan(const std::vector<InputFile>& inputs, const ScanOptions& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  TS_RETURN_IF_ERROR(CheckScanOptions(opt));
  if (!opt.verdicts_path.empty()) {
    TS_RETURN_IF_ERROR(CheckOutputsAgainstInputs({opt.verdicts_path}, inputs));
  }
  std::unique_ptr<DocResultCache> result_cache;
  const AnalyzerOptions aopt = MakeAnalyzerOptions(opt, &result_cache);
  ScanResult res;
  if (opt.tokenizer) res.tokenizer = opt.tokenizer->name();
  TS_ASSIGN_OR_RETURN(auto spill, SpillDir::Create(opt.tmp_dir));
  ScanMerge m(opt, &res);
  TS_RETURN_IF_ERROR(m.OpenSpill(spill.get()));
  uint64_t total_in = 0;
  for (const auto& f : inputs) total_in += f.size_bytes;
  Progress progress("scan", total_in, true);

  // --- in-order merge
  TS_RETURN_IF_ERROR(MergeBatches(
      inputs, opt, aopt, &progress, [&](BatchResult& r) { m.Add(r); }, &res));
  m.raw_first = {};
  m.norm_first = {};
  malloc_trim(0);  // hand the tables' pages back before the near-duplicate phase
  AddFlagAndLangCounts(m.flag_counts, m.lang_counts, &res);

  // --- near duplicates, then the final stage
  UnionFind uf(m.dup_parent.ToVector());  // exact and normalised copies point at the first
  m.dup_parent.clear();
  if (opt.near_dup && res.docs > 0) {
    TS_RETURN_IF_ERROR(FindNearDuplicates(opt, spill.get(), &m, &uf, &res));
  }
  ResolvedDocs docs = ResolveScanDocs(&m, &uf, res.docs);
  std::unique_ptr<SpillReader> ids;
  if (m.want_ids) {
    TS_RETURN_IF_ERROR(m.id_file->Close());
    TS_ASSIGN_OR_RETURN(ids, spill->Reader("ids"));
  }
  uint64_t id_off = 0;
  auto next_id = [&](std::string* id) -> absl::Status {
    uint32_t len = 0;
    TS_RETURN_IF_ERROR(ids->ReadAt(id_off, &len, sizeof(len)));
    id->resize(len);
    TS_RETURN_IF_ERROR(ids->ReadAt(id_off + sizeof(len), id->data(), len));
    id_off += sizeof(len) + len;
    return absl::OkStatus();
  };
  TS_RETURN_IF_ERROR(FinishScan(opt, std::move(docs), next_id, &res));
  res.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

absl::Status FinishScan(const ScanOptions& opt, ResolvedDocs docs,
                        const std::function<absl::Status(std::string*)>& next_id, ScanResult* res) {
  const int perms = opt.bands * opt.rows;
  const uint32_t n = static_cast<uint32_t>(docs.cluster.size());
  const std::vector<uint32_t>& exact_of = docs.exact_of;
  const std::vector<uint32_t>& cluster = docs.cluster;
  const double jt = opt.threshold;
  res->near_dup_estimate_stddev = std::sqrt(jt * (1 - jt) / perms);
  res->near_duplicate_docs = 0;
  {
    absl::flat_hash_set<uint32_t> roots;
    for (uint32_t g = 0; g < n; ++g) {
      if (cluster[g] != g) {
        ++res->near_duplicate_docs;
        roots.insert(cluster[g]);
      }
    }
    res->near_duplicate_clusters = roots.size();
  }

  // --- per-batch duplicate ratios, padding, length distributions
  res->batch_dup_corpus_order = BatchDuplicates(cluster, nullptr, opt.batch_size);
  {
    std::vector<uint32_t> order(n);
    for (uint32_t g = 0; g < n; ++g) order[g] = g;
    std::mt19937_64 rng(opt.shuffle_seed);
    for (size_t i = order.size(); i > 1; --i) {
      std::swap(order[i - 1], order[rng() % i]);
    }
    res->batch_dup_shuffled = BatchDuplicates(cluster, &order, opt.batch_size);
  }
  res->padding = PaddingWaste(docs.tokens, opt.seq_len, opt.batch_size);
  res->tokens_per_doc = MakeLengthStats(docs.tokens);
  res->chars_per_doc = MakeLengthStats(docs.chars);

  // --- verdicts
  if (!opt.verdicts_path.empty()) {
    TS_ASSIGN_OR_RETURN(auto out, OutputFile::Open(opt.verdicts_path));
    // The ids of documents others point at, kept as the sequential read passes them (a
    // kept document always comes before its copies: keep-first) and dropped after their
    // last copy, so only the clusters still open are held.
    std::vector<uint32_t> last_use(n, 0);  // 1 + the last document pointing here
    for (uint32_t g = 0; g < n; ++g) {
      if (exact_of[g] != ScanResult::kNoDoc) last_use[exact_of[g]] = g + 1;
      if (cluster[g] != g) last_use[cluster[g]] = g + 1;
    }
    absl::flat_hash_map<uint32_t, std::string> kept_ids;
    std::string id, line;
    for (uint32_t g = 0; g < n; ++g) {
      TS_RETURN_IF_ERROR(next_id(&id));
      if (last_use[g] != 0) kept_ids[g] = id;
      auto ref = [&](uint32_t doc, bool none, bool as_id) {
        if (none) return nlohmann::json(nullptr);
        return as_id ? nlohmann::json(kept_ids.at(doc)) : nlohmann::json(doc);
      };
      const bool exact_none = exact_of[g] == ScanResult::kNoDoc, near_none = cluster[g] == g;
      nlohmann::json j;
      j["doc"] = g;
      j["id"] = nlohmann::json(id);
      j["exact_dup_of"] = ref(exact_of[g], exact_none, false);
      j["exact_dup_of_id"] = ref(exact_of[g], exact_none, true);
      j["near_dup_of"] = ref(cluster[g], near_none, false);
      j["near_dup_of_id"] = ref(cluster[g], near_none, true);
      if (!exact_none && last_use[exact_of[g]] == g + 1) kept_ids.erase(exact_of[g]);
      if (!near_none && last_use[cluster[g]] == g + 1) kept_ids.erase(cluster[g]);
      nlohmann::json fl = nlohmann::json::array();
      for (int f = 0; f < kNumFlags; ++f) {
        if ((docs.flags[g] >> f) & 1) fl.push_back(FlagName(f));
      }
      j["flags"] = std::move(fl);
      j["lang"] = LangCode(docs.langs[g]);
      line = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      line.push_back('\n');
      TS_RETURN_IF_ERROR(out->Write(line));
    }
    TS_RETURN_IF_ERROR(out->Commit());
  }
  if (opt.keep_doc_arrays) {
    res->doc_near_of.resize(n);
    for (uint32_t g = 0; g < n; ++g) {
      res->doc_near_of[g] = cluster[g] == g ? ScanResult::kNoDoc : cluster[g];
    }
    res->doc_flags = std::move(docs.flags);
    res->doc_tokens = std::move(docs.tokens);
    res->doc_chars = std::move(docs.chars);
    res->doc_exact_of = std::move(docs.exact_of);
  }
  return absl::OkStatus();
}

absl::StatusOr<ScanShare> ScanLocal(const std::vector<InputFile>& inputs, const ScanOptions& opt) {
  TS_RETURN_IF_ERROR(CheckScanOptions(opt));
  std::unique_ptr<DocResultCache> result_cache;
  const AnalyzerOptions aopt = MakeAnalyzerOptions(opt, &result_cache);
  const int perms = opt.bands * opt.rows;
  ScanShare share;
  ScanResult& res = share.res;
  if (opt.tokenizer) res.tokenizer = opt.tokenizer->name();
  uint64_t total_in = 0;
  for (const auto& f : inputs) {
    total_in += f.range_end > f.range_begin ? f.range_end - f.range_begin : f.size_bytes;
  }
  Progress progress("scan", total_in, true);
  std::map<uint16_t, std::pair<uint64_t, uint64_t>> lang_counts;
  uint64_t flag_counts[kNumFlags] = {0};
  const uint64_t eos = opt.tokenizer ? (opt.tokenizer->eos_id() >= 0 ? 1 : 0) : 1;
  std::vector<std::unique_ptr<SpillWriter>> band_w;
  std::unique_ptr<SpillWriter> sig_w;
  if (opt.near_dup) {
    TS_ASSIGN_OR_RETURN(share.spill, SpillDir::Create(opt.tmp_dir));
    for (int b = 0; b < opt.bands; ++b) {
      TS_ASSIGN_OR_RETURN(auto w, share.spill->Writer(absl::StrCat("band", b)));
      band_w.push_back(std::move(w));
    }
    TS_ASSIGN_OR_RETURN(sig_w, share.spill->Writer("sigs"));
  }
  const std::vector<uint16_t> zero_sig(perms, 0);
  const uint64_t zero_band = 0;
  // The in-order merge of RunScan without the duplicate tables: every document's keys,
  // band hashes and fingerprints are kept for the ranks' exchanges.
  auto merge = [&](BatchResult& r) {
    for (size_t i = 0; i < r.docs.size(); ++i) {
      const DocResult& d = r.docs[i];
      ++res.docs;
      res.bytes += d.bytes;
      res.chars += d.chars;
      res.words += d.words;
      res.tokens += d.tokens;
      share.tokens.push_back(static_cast<uint32_t>(std::min<uint64_t>(d.tokens + eos, UINT32_MAX)));
      share.chars.push_back(d.chars);
      share.flags.push_back(d.flags);
      share.langs.push_back(d.lang);
      share.raw_hash.push_back(d.raw_hash);
      share.norm_hash.push_back(d.norm_hash);
      share.has_signature.push_back(d.has_signature);
      if (opt.language) {
        auto& lc = lang_counts[d.lang];
        ++lc.first;
        lc.second += d.bytes;
      }
      if (d.flags) {
        ++res.flagged_docs;
        for (uint32_t m = d.flags; m != 0; m &= m - 1) ++flag_counts[__builtin_ctz(m)];
      }
      if (opt.near_dup) {
        if (!d.has_signature) ++res.docs_without_shingles;
        for (int b = 0; b < opt.bands; ++b) {
          band_w[b]->Append(d.has_signature ? &r.bands[i * opt.bands + b] : &zero_band, 8);
        }
        sig_w->Append(d.has_signature ? &r.sigs[i * perms] : zero_sig.data(), perms * 2);
      }
      if (!opt.verdicts_path.empty()) share.ids.push_back(std::move(r.ids[i]));
      if (opt.keep_doc_arrays) {
        share.file.push_back(r.file[i]);
        share.line.push_back(r.line[i]);
      }
    }
  };
  TS_RETURN_IF_ERROR(MergeBatches(inputs, opt, aopt, &progress, merge, &res));
  AddFlagAndLangCounts(flag_counts, lang_counts, &res);
  if (opt.near_dup) {
    for (int b = 0; b < opt.bands; ++b) {
      TS_RETURN_IF_ERROR(band_w[b]->Close());
      TS_ASSIGN_OR_RETURN(auto rd, share.spill->Reader(absl::StrCat("band", b)));
      share.band_files.push_back(std::move(rd));
    }
    TS_RETURN_IF_ERROR(sig_w->Close());
    TS_ASSIGN_OR_RETURN(share.sig_file, share.spill->Reader("sigs"));
  }
  return share;
}

}  // namespace trainscope::data
