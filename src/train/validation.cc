// The held-out split and the evaluation batches (validation.h). libtorch-free.
#include "train/validation.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "trainscope/core/status.h"

namespace trainscope::train {
namespace {

absl::Status FractionError(const std::string& source, const std::string& what) {
  return absl::InvalidArgumentError(
      absl::StrCat(source.empty() ? "config" : source, ": key \"eval.fraction\": ", what));
}

void Repack(PackedCorpus* c) {
  c->num_sequences = (static_cast<int64_t>(c->tokens.size()) - 1) / c->seq_len;
  c->stats.tokens = static_cast<int64_t>(c->tokens.size());
  c->stats.sequences = c->num_sequences;
}

}  // namespace

std::vector<int64_t> HeldOutDocuments(int64_t num_documents, double fraction) {
  if (num_documents < 2 || !(fraction > 0)) return {};
  const int64_t k = std::clamp<int64_t>(std::llround(fraction * static_cast<double>(num_documents)),
                                        1, num_documents - 1);
  std::vector<int64_t> order = ShuffledOrder(num_documents, kHeldOutSeed, 0);
  order.resize(static_cast<size_t>(k));
  std::sort(order.begin(), order.end());
  return order;
}

absl::StatusOr<PackedCorpus> SplitHeldOut(PackedCorpus* corpus, double fraction,
                                          const std::string& source) {
  const std::vector<int64_t>& ends = corpus->document_ends;
  const int64_t n = static_cast<int64_t>(ends.size());
  TS_CHECK(n == corpus->stats.documents);  // LoadCorpus(..., keep_document_ends)
  if (n < 2) {
    return FractionError(source, absl::StrCat("the corpus has ", n,
                                              " document; holding out a share of it needs at "
                                              "least 2 (a text file is one document: use "
                                              "JSONL, one document per line, or eval.corpus)"));
  }
  const std::vector<int64_t> held = HeldOutDocuments(n, fraction);
  PackedCorpus val;
  val.seq_len = corpus->seq_len;
  std::vector<int32_t>& t = corpus->tokens;
  // One pass in document order: a held-out document is appended to the validation stream,
  // a kept one moved down over the gap the held-out ones left (its destination is never
  // past its source, so the move is safe in place).
  size_t write = 0, h = 0;
  int64_t begin = 0;
  for (int64_t d = 0; d < n; ++d) {
    const int64_t end = ends[d];
    if (h < held.size() && held[h] == d) {
      val.tokens.insert(val.tokens.end(), t.begin() + begin, t.begin() + end);
      ++h;
    } else {
      if (static_cast<int64_t>(write) != begin) {
        std::copy(t.begin() + begin, t.begin() + end, t.begin() + write);
      }
      write += static_cast<size_t>(end - begin);
    }
    begin = end;
  }
  TS_CHECK(begin == static_cast<int64_t>(t.size()));
  t.resize(write);
  corpus->document_ends = std::vector<int64_t>();
  const int64_t need = int64_t{corpus->seq_len} + 1;
  for (const PackedCorpus* part : {corpus, &val}) {
    if (static_cast<int64_t>(part->tokens.size()) >= need) continue;
    return FractionError(source, absl::StrCat(fraction, " of ", n, " documents leaves the ",
                                              part == corpus ? "training part" : "held-out part",
                                              " ", part->tokens.size(),
                                              " tokens, fewer than model.seq_len + 1 = ", need));
  }
  val.stats.documents = static_cast<int64_t>(held.size());
  corpus->stats.documents = n - val.stats.documents;
  Repack(corpus);
  Repack(&val);
  return val;
}

absl::StatusOr<PackedCorpus> LoadValidationCorpus(const TrainConfig& config,
                                                  const tokenizer::Tokenizer& tokenizer,
                                                  PackedCorpus* train) {
  if (config.eval.fraction > 0) return SplitHeldOut(train, config.eval.fraction, config.source);
  DataConfig d = config.data;
  d.corpus = config.eval.corpus;
  absl::StatusOr<PackedCorpus> val = LoadCorpus(d, tokenizer, config.model.seq_len);
  if (!val.ok()) {
    return absl::Status(val.status().code(),
                        absl::StrCat("key \"eval.corpus\": ", val.status().message()));
  }
  return val;
}

std::vector<EvalBatch> EvalBatchesForRank(int64_t num_sequences, int batches, int micro_batch,
                                          int rank, int world_size) {
  std::vector<EvalBatch> out;
  const int64_t total =
      std::min<int64_t>(int64_t{batches} * micro_batch * world_size, num_sequences);
  int64_t k = 0;
  for (int64_t first = 0; first < total; first += micro_batch, ++k) {
    if (k % world_size != rank) continue;
    out.push_back({first, static_cast<int>(std::min<int64_t>(micro_batch, total - first))});
  }
  return out;
}

Batch BuildEvalBatch(const PackedCorpus& val, const EvalBatch& b) {
  const int t = val.seq_len;
  Batch out;
  out.index = b.first;
  out.rows = b.rows;
  out.cols = t;
  out.inputs.resize(static_cast<size_t>(b.rows) * t);
  out.targets.resize(static_cast<size_t>(b.rows) * t);
  for (int r = 0; r < b.rows; ++r) {
    const int64_t seq = b.first + r;
    out.sequence_ids.push_back(seq);
    const int32_t* src = val.tokens.data() + seq * t;
    for (int i = 0; i < t; ++i) {
      out.inputs[static_cast<size_t>(r) * t + i] = src[i];
      out.targets[static_cast<size_t>(r) * t + i] = src[i + 1];
    }
  }
  return out;
}

bool EvalDue(const EvalConfig& eval, int step, int total_steps, bool last) {
  return last || step == total_steps || (eval.every_steps > 0 && step % eval.every_steps == 0);
}

}  // namespace trainscope::train
