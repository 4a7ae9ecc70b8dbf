// Validation loss (config section "eval"; docs/metrics.md, "Validation loss"): the held-out
// corpus and the batches one evaluation reads. Private to the train module and libtorch-free
// (the evaluation itself is Trainer::Evaluate, trainer_eval.cc), so the split is unit-tested
// without a model.
//
// The held-out slice is made of whole documents: a document is either trained on or held
// out, never cut in two, so the validation loss measures text the model has not seen — as
// far as the corpus itself has no copies of a training document among the held-out ones
// (duplicate-heavy data leaks through any split by document; `trainscope data scan` finds
// the copies).
#ifndef TRAINSCOPE_SRC_TRAIN_VALIDATION_H_
#define TRAINSCOPE_SRC_TRAIN_VALIDATION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainscope/tokenizer/tokenizer.h"
#include "trainscope/train/config.h"
#include "trainscope/train/data.h"

namespace trainscope::train {

// The seed of the held-out permutation: a constant, so that the held-out documents of a
// corpus do not change with train.seed (runs with different seeds compare on the same text).
inline constexpr uint64_t kHeldOutSeed = 0x7472736376616c31ULL;  // "trscval1"

// The documents eval.fraction holds out of `num_documents`: k = round(fraction x n), at least
// 1 and at most n - 1, the first k of ShuffledOrder(n, kHeldOutSeed, 0), ascending. The same
// on every rank and run. Empty when n < 2 or fraction <= 0.
std::vector<int64_t> HeldOutDocuments(int64_t num_documents, double fraction);

// Moves the documents HeldOutDocuments picks out of *corpus (loaded with
// keep_document_ends) into the returned corpus; the others stay in *corpus in their order.
// Both are re-packed into seq_len sequences and their stats say what each holds (documents,
// tokens, sequences; `files`, `bytes` and the bad-record counts stay those of the whole
// corpus read, in *corpus). In place: no second copy of the token stream.
// Errors (InvalidArgument naming `source` and key eval.fraction): fewer than 2 documents,
// or a part with fewer than seq_len + 1 tokens.
absl::StatusOr<PackedCorpus> SplitHeldOut(PackedCorpus* corpus, double fraction,
                                          const std::string& source);

// The validation corpus of `config` (config.eval.enabled()): SplitHeldOut of *train for
// eval.fraction (*train then loaded with keep_document_ends), or eval.corpus read like
// data.corpus (LoadCorpus; its errors, prefixed with key "eval.corpus").
absl::StatusOr<PackedCorpus> LoadValidationCorpus(const TrainConfig& config,
                                                  const tokenizer::Tokenizer& tokenizer,
                                                  PackedCorpus* train);

// One evaluation batch: validation sequences [first, first + rows).
struct EvalBatch {
  int64_t first = 0;
  int rows = 0;
};
// The batches of one evaluation that `rank` computes: the first
// min(batches x micro_batch x world_size, num_sequences) validation sequences (`batches`
// global batches, so 2 ranks x micro_batch M read what 1 rank x 2M does), in order, cut into
// batches of micro_batch (the last may be shorter); batch k is rank k % world_size's. Every
// evaluation reads the same sequences, so its losses form one curve.
std::vector<EvalBatch> EvalBatchesForRank(int64_t num_sequences, int batches, int micro_batch,
                                          int rank, int world_size);

// The inputs and next-token targets of `b` (rows x seq_len), as BatchLoader builds them.
Batch BuildEvalBatch(const PackedCorpus& val, const EvalBatch& b);

// True when an evaluation follows optimizer step `step`: eval.every_steps divides it, or it
// is the run's last step (`total_steps`, or an earlier one where the run stops: `last`).
bool EvalDue(const EvalConfig& eval, int step, int total_steps, bool last);

}  // namespace trainscope::train

#endif  // TRAINSCOPE_SRC_TRAIN_VALIDATION_H_
