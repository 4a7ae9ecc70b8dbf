// The validation split (config "eval"): held-out documents deterministic, disjoint from the
// training ones and of the asked-for share; whole documents moved, in order; the eval
// batches of every rank covering the same sequences once; the config keys and their
// errors; val_loss in the step record only when an evaluation ran.
#include "train/validation.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "trainscope/tokenizer/tokenizer.h"
#include "trainscope/train/config.h"
#include "trainscope/train/data.h"
#include "trainscope/train/metrics.h"

namespace trainscope::train {
namespace {

namespace fs = std::filesystem;

TEST(HeldOutDocumentsTest, DeterministicSortedAndOfTheAskedShare) {
  for (int64_t n : {2, 3, 10, 97, 1000, 12345}) {
    for (double f : {0.001, 0.05, 0.1, 0.25, 0.5}) {
      const std::vector<int64_t> a = HeldOutDocuments(n, f);
      EXPECT_EQ(a, HeldOutDocuments(n, f)) << n << " " << f;
      const int64_t want = std::clamp<int64_t>(std::llround(f * static_cast<double>(n)), 1, n - 1);
      ASSERT_EQ(static_cast<int64_t>(a.size()), want) << n << " " << f;
      EXPECT_TRUE(std::is_sorted(a.begin(), a.end()));
      EXPECT_EQ(std::set<int64_t>(a.begin(), a.end()).size(), a.size());  // no repeats
      EXPECT_GE(a.front(), 0);
      EXPECT_LT(a.back(), n);
    }
  }
  EXPECT_TRUE(HeldOutDocuments(1, 0.5).empty());
  EXPECT_TRUE(HeldOutDocuments(100, 0).empty());
  // Not the first documents of the corpus: a permutation picks them.
  const std::vector<int64_t> tenth = HeldOutDocuments(1000, 0.1);
  EXPECT_NE(tenth.back(), 99);
  // A larger share holds out a different, larger set (not a prefix order artefact).
  EXPECT_EQ(HeldOutDocuments(1000, 0.2).size(), 200u);
}

// A corpus of `n` documents; document d is (3 + d % 5) tokens, all equal to d + 1.
PackedCorpus Documents(int n, int seq_len) {
  PackedCorpus c;
  c.seq_len = seq_len;
  for (int d = 0; d < n; ++d) {
    for (int k = 0; k < 3 + d % 5; ++k) c.tokens.push_back(d + 1);
    c.document_ends.push_back(static_cast<int64_t>(c.tokens.size()));
  }
  c.stats.documents = n;
  c.stats.files = 1;
  c.stats.tokens = static_cast<int64_t>(c.tokens.size());
  c.num_sequences = (static_cast<int64_t>(c.tokens.size()) - 1) / seq_len;
  return c;
}

// The documents of a token stream made by Documents(), in order, with their lengths.
std::vector<std::pair<int, int>> Runs(const std::vector<int32_t>& t) {
  std::vector<std::pair<int, int>> out;
  for (int32_t v : t) {
    if (out.empty() || out.back().first != v) out.push_back({v, 0});
    ++out.back().second;
  }
  return out;
}

TEST(SplitHeldOutTest, MovesWholeDocumentsDisjointInOrder) {
  const int n = 200, seq_len = 4;
  PackedCorpus train = Documents(n, seq_len);
  const std::vector<int32_t> all = train.tokens;
  absl::StatusOr<PackedCorpus> val = SplitHeldOut(&train, 0.1, "c.json");
  ASSERT_TRUE(val.ok()) << val.status();
  const std::vector<int64_t> held = HeldOutDocuments(n, 0.1);
  ASSERT_EQ(held.size(), 20u);
  // The held-out stream is exactly the held-out documents, whole and in order; the training
  // stream is every other document, whole and in order.
  std::vector<std::pair<int, int>> want_val, want_train;
  for (int d = 0; d < n; ++d) {
    const bool is_held = std::binary_search(held.begin(), held.end(), d);
    (is_held ? want_val : want_train).push_back({d + 1, 3 + d % 5});
  }
  EXPECT_EQ(Runs(val->tokens), want_val);
  EXPECT_EQ(Runs(train.tokens), want_train);
  EXPECT_EQ(train.tokens.size() + val->tokens.size(), all.size());
  // Stats and packing of each part.
  EXPECT_EQ(val->stats.documents, 20);
  EXPECT_EQ(train.stats.documents, 180);
  EXPECT_EQ(val->stats.tokens, static_cast<int64_t>(val->tokens.size()));
  EXPECT_EQ(train.stats.tokens, static_cast<int64_t>(train.tokens.size()));
  EXPECT_EQ(train.num_sequences, (static_cast<int64_t>(train.tokens.size()) - 1) / seq_len);
  EXPECT_EQ(val->num_sequences, (static_cast<int64_t>(val->tokens.size()) - 1) / seq_len);
  EXPECT_EQ(val->stats.sequences, val->num_sequences);
  EXPECT_TRUE(train.document_ends.empty());
  // The same split again.
  PackedCorpus again = Documents(n, seq_len);
  absl::StatusOr<PackedCorpus> val2 = SplitHeldOut(&again, 0.1, "c.json");
  ASSERT_TRUE(val2.ok());
  EXPECT_EQ(val2->tokens, val->tokens);
  EXPECT_EQ(again.tokens, train.tokens);
}

TEST(SplitHeldOutTest, RefusesTooFewDocumentsOrTokens) {
  PackedCorpus one = Documents(1, 2);
  absl::StatusOr<PackedCorpus> v = SplitHeldOut(&one, 0.1, "c.json");
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(v.status().message().find("c.json: key \"eval.fraction\": the corpus has 1 document"),
            std::string::npos)
      << v.status();
  // 10 short documents, seq_len 16: one held-out document has fewer than 17 tokens.
  PackedCorpus small = Documents(10, 16);
  v = SplitHeldOut(&small, 0.1, "c.json");
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("held-out part"), std::string::npos) << v.status();
}

TEST(SplitHeldOutTest, JsonlCorpusThroughLoadValidationCorpus) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/train_val_", ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  {
    std::ofstream f(dir + "/c.jsonl");
    for (int d = 0; d < 40; ++d) f << "{\"text\": \"document number " << d << " says hello\"}\n";
  }
  TrainConfig c;
  c.data.corpus = {dir + "/c.jsonl"};
  c.model.seq_len = 8;
  c.eval.fraction = 0.25;
  auto tok = tokenizer::NewByteTokenizer();
  absl::StatusOr<PackedCorpus> train = LoadCorpus(c.data, *tok, 8, /*keep_document_ends=*/true);
  ASSERT_TRUE(train.ok()) << train.status();
  ASSERT_EQ(train->document_ends.size(), 40u);
  const int64_t tokens = train->stats.tokens;
  absl::StatusOr<PackedCorpus> val = LoadValidationCorpus(c, *tok, &*train);
  ASSERT_TRUE(val.ok()) << val.status();
  EXPECT_EQ(val->stats.documents, 10);
  EXPECT_EQ(train->stats.documents, 30);
  EXPECT_EQ(val->stats.tokens + train->stats.tokens, tokens);
  // Decoded, the two parts share no document.
  auto docs = [](const std::vector<int32_t>& t) {
    std::set<std::string> out;
    std::string cur;
    for (int32_t id : t) {
      if (id == 256) {  // the byte tokenizer's end of document
        out.insert(cur);
        cur.clear();
      } else {
        cur.push_back(static_cast<char>(id));
      }
    }
    return out;
  };
  const std::set<std::string> a = docs(train->tokens), b = docs(val->tokens);
  EXPECT_EQ(a.size(), 30u);
  EXPECT_EQ(b.size(), 10u);
  for (const std::string& d : b) EXPECT_EQ(a.count(d), 0u) << d;
  // Without keep_document_ends nothing is recorded (the default path is unchanged).
  absl::StatusOr<PackedCorpus> plain = LoadCorpus(c.data, *tok, 8);
  ASSERT_TRUE(plain.ok());
  EXPECT_TRUE(plain->document_ends.empty());
  EXPECT_EQ(plain->stats.tokens, tokens);
  // eval.corpus: a separate corpus, its errors under the key's name.
  TrainConfig e = c;
  e.eval.fraction = 0;
  e.eval.corpus = {dir + "/missing.jsonl"};
  absl::StatusOr<PackedCorpus> missing = LoadValidationCorpus(e, *tok, &*plain);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("key \"eval.corpus\": "), std::string::npos)
      << missing.status();
  fs::remove_all(dir);
}

TEST(EvalBatchesTest, RanksShareTheSameSequencesOnce) {
  for (int world : {1, 2, 3, 5}) {
    for (int64_t n : {3, 20, 1000}) {
      std::vector<int64_t> seen;
      for (int r = 0; r < world; ++r) {
        for (const EvalBatch& b : EvalBatchesForRank(n, 4, 6, r, world)) {
          EXPECT_GT(b.rows, 0);
          EXPECT_LE(b.rows, 6);
          for (int k = 0; k < b.rows; ++k) seen.push_back(b.first + k);
        }
      }
      std::sort(seen.begin(), seen.end());
      std::vector<int64_t> want;
      for (int64_t s = 0; s < std::min<int64_t>(24 * world, n); ++s) want.push_back(s);
      EXPECT_EQ(seen, want) << world << " " << n;
    }
  }
  // 20 sequences, batches of 6: 6, 6, 6, 2.
  const std::vector<EvalBatch> b = EvalBatchesForRank(20, 4, 6, 0, 1);
  ASSERT_EQ(b.size(), 4u);
  EXPECT_EQ(b[3].first, 18);
  EXPECT_EQ(b[3].rows, 2);
  PackedCorpus val = Documents(30, 4);
  Batch batch = BuildEvalBatch(val, {2, 3});
  ASSERT_EQ(batch.inputs.size(), 12u);
  for (int i = 0; i < 12; ++i) {
    EXPECT_EQ(batch.inputs[i], val.tokens[8 + i]);
    EXPECT_EQ(batch.targets[i], val.tokens[8 + i + 1]);
  }
}

TEST(EvalDueTest, EveryNAndTheLastStep) {
  EvalConfig e;
  e.every_steps = 10;
  EXPECT_FALSE(EvalDue(e, 1, 35, false));
  EXPECT_TRUE(EvalDue(e, 10, 35, false));
  EXPECT_TRUE(EvalDue(e, 35, 35, false));
  EXPECT_TRUE(EvalDue(e, 7, 35, true));  // the run stops here (train.max_seconds)
  e.every_steps = 0;
  EXPECT_FALSE(EvalDue(e, 10, 35, false));
  EXPECT_TRUE(EvalDue(e, 35, 35, false));
}

TEST(EvalConfigTest, KeysParseAndBadValuesNameTheKey) {
  absl::StatusOr<TrainConfig> c = ParseTrainConfig(
      R"({"data": {"corpus": "c.txt"}, "eval": {"fraction": 0.1, "every_steps": 5, "batches": 2}})",
      "/x/cfg.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->eval.enabled());
  EXPECT_DOUBLE_EQ(c->eval.fraction, 0.1);
  EXPECT_EQ(c->eval.every_steps, 5);
  EXPECT_EQ(c->eval.batches, 2);
  c = ParseTrainConfig(R"({"data": {"corpus": "c.txt"}, "eval": {"corpus": ["v.txt"]}})",
                       "/x/cfg.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->eval.corpus, std::vector<std::string>{"/x/v.txt"});  // relative to the config
  EXPECT_EQ(TrainConfigToJson(*c)["eval"]["corpus"][0], "/x/v.txt");
  c = ParseTrainConfig(R"({"data": {"corpus": "c.txt"}})", "/x/cfg.json");
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->eval.enabled());
  struct Bad {
    const char* eval;
    const char* message;
  };
  const Bad bad[] = {
      {R"({"fraction": 0.7})", "key \"eval.fraction\": 0.7 is out of range: must be in 0..0.5"},
      {R"({"fraction": -1})", "key \"eval.fraction\": -1 is out of range"},
      {R"({"fraction": 0.1, "corpus": "v.txt"})",
       "key \"eval.corpus\": set eval.fraction or eval.corpus, not both"},
      {R"({"every_steps": -2})", "key \"eval.every_steps\": -2 is out of range: must be in 0.."},
      {R"({"batches": 0})", "key \"eval.batches\": 0 is out of range: must be in 1..1048576"},
      {R"({"fraction": "0.1"})", "key \"eval.fraction\": expected number, got string"},
      {R"({"every": 5})",
       "key \"eval.every\": unknown key (known keys of eval: batches, corpus, "
       "every_steps, fraction)"},
  };
  for (const Bad& b : bad) {
    c = ParseTrainConfig(absl::StrCat(R"({"data": {"corpus": "c.txt"}, "eval": )", b.eval, "}"),
                         "cfg.json");
    ASSERT_FALSE(c.ok()) << b.eval;
    EXPECT_NE(c.status().message().find(absl::StrCat("cfg.json: ", b.message)), std::string::npos)
        << c.status();
  }
}

TEST(EvalMetricsTest, ValLossOnlyOnEvaluatedSteps) {
  StepRecord r;
  r.step = 3;
  r.loss = 2.5;
  nlohmann::json j = StepRecordToJson(r);
  EXPECT_FALSE(j.contains("val_loss"));  // runs without eval: the records as before
  EXPECT_FALSE(j.contains("eval_ms"));
  for (const auto& [tag, v] : StepScalars(r)) EXPECT_NE(tag, "val/loss");
  r.has_val = true;
  r.val_loss = 3.25;
  r.eval_ms = 12;
  j = StepRecordToJson(r);
  EXPECT_EQ(j["val_loss"], 3.25);
  EXPECT_EQ(j["eval_ms"], 12.0);
  bool tagged = false;
  for (const auto& [tag, v] : StepScalars(r)) tagged |= tag == "val/loss" && v == 3.25;
  EXPECT_TRUE(tagged);
  r.val_loss = std::nan("");
  EXPECT_TRUE(StepRecordToJson(r)["val_loss"].is_null());
}

}  // namespace
}  // namespace trainscope::train
