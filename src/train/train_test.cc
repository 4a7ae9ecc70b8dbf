// Unit tests of the train module: config strictness, corpus packing and sharding, the
// loader, metrics format, and short real training runs (determinism, convergence,
// non-finite loss, bf16).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "core/test_util.h"
#include "nlohmann/json.hpp"
#include "trainscope/core/fake_os.h"
#include "trainscope/core/os.h"
#include "trainscope/core/subprocess.h"
#include "trainscope/tb/tfrecord.h"
#include "trainscope/train/config.h"
#include "trainscope/train/data.h"
#include "trainscope/train/metrics.h"
#include "trainscope/train/selftest.h"
#include "trainscope/train/trainer.h"

namespace trainscope::train {
namespace {

std::string DataDir() {
  const char* src = std::getenv("TS_SOURCE_DIR");
  return std::string(src ? src : TS_SOURCE_DIR) + "/tests/data/train";
}

// This binary's scratch directory (removed at exit).
const std::string& Scratch() {
  static const std::string* dir = new std::string(test_util::TempDir("train_test"));
  return *dir;
}

// Scratch()/name, cleared: the code under test makes it.
std::string TempDir(const std::string& name) {
  std::filesystem::remove_all(Scratch() + "/" + name);
  return Scratch() + "/" + name;
}

TrainConfig TinyConfig() {
  auto c = LoadTrainConfig(DataDir() + "/tiny_config.json");
  EXPECT_TRUE(c.ok()) << c.status();
  return *c;
}

// ---- config ----

TEST(ConfigTest, ParsesBundledConfigs) {
  for (const char* name : {"default.json", kSelftestConfig, kSelftestQuickConfig}) {
    std::string path = FindBundledConfig(name);
    ASSERT_FALSE(path.empty()) << name;
    auto c = LoadTrainConfig(path);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->model.width % c->model.heads, 0);
  }
}

TEST(ConfigTest, RelativeCorpusPathsResolveAgainstTheConfigFile) {
  TrainConfig c = TinyConfig();
  ASSERT_EQ(c.data.corpus.size(), 1u);
  EXPECT_EQ(c.data.corpus[0], DataDir() + "/tiny.txt");
  EXPECT_EQ(c.model.width, 32);
  EXPECT_EQ(c.model.layers, 1);
  EXPECT_EQ(c.train.seed, 7u);
}

TEST(ConfigTest, UnknownKeyIsNamed) {
  auto c = LoadTrainConfig(DataDir() + "/bad_unknown_key.json");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("\"model.widht\""), std::string::npos) << c.status();
  EXPECT_NE(c.status().message().find("bad_unknown_key.json"), std::string::npos);
}

TEST(ConfigTest, WrongTypeIsNamed) {
  auto c = LoadTrainConfig(DataDir() + "/bad_type.json");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("\"train.steps\": expected integer, got string"),
            std::string::npos)
      << c.status();
}

TEST(ConfigTest, HeadsNotDividingWidthIsNamed) {
  auto c = LoadTrainConfig(DataDir() + "/bad_heads.json");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("\"model.heads\": 3 heads do not divide model.width 32"),
            std::string::npos)
      << c.status();
}

TEST(ConfigTest, SyntaxErrorGivesByteOffset) {
  auto c = LoadTrainConfig(DataDir() + "/bad_json.json");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("not valid JSON at byte"), std::string::npos) << c.status();
}

// Errors quote a 1M-character value or key as a short excerpt (once 1 MB on stderr).
TEST(ConfigTest, LongValuesAndKeysAreQuotedAsExcerpts) {
  const std::string big(1 << 20, 'x');
  auto value = ParseTrainConfig(R"({"model": {"layers": ")" + big + R"("}})", "x.json");
  ASSERT_FALSE(value.ok());
  EXPECT_LT(value.status().message().size(), 300u) << value.status().message().substr(0, 300);
  EXPECT_NE(value.status().message().find("... (1048578 bytes)"), std::string::npos);
  auto key = ParseTrainConfig(R"({")" + big + R"(": 1})", "x.json");
  ASSERT_FALSE(key.ok());
  EXPECT_LT(key.status().message().size(), 400u) << key.status().message().substr(0, 400);
  EXPECT_NE(key.status().message().find("... (1048576 bytes)"), std::string::npos);
}

TEST(ConfigTest, MissingFileIsNotFound) {
  auto c = LoadTrainConfig(DataDir() + "/nope.json");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
}

TEST(ConfigTest, TopLevelAndRangeChecks) {
  EXPECT_FALSE(ParseTrainConfig(R"({"modle": {}})", "x.json").ok());
  EXPECT_FALSE(ParseTrainConfig(R"({"data": {"corpus": "a"}, "version": 2})", "x.json").ok());
  auto neg = ParseTrainConfig(R"({"data": {"corpus": "a"}, "train": {"steps": 0}})", "x.json");
  ASSERT_FALSE(neg.ok());
  EXPECT_NE(neg.status().message().find("train.steps"), std::string::npos);
  auto prec = ParseTrainConfig(R"({"data": {"corpus": "a"}, "train": {"precision": "fp8"}})", "");
  ASSERT_FALSE(prec.ok());
  EXPECT_NE(prec.status().message().find("train.precision"), std::string::npos);
  // Round trip through the written form.
  auto ok = ParseTrainConfig(R"({"data": {"corpus": ["/a"]}, "model": {"tied_head": false}})", "");
  ASSERT_TRUE(ok.ok()) << ok.status();
  auto again = ParseTrainConfig(TrainConfigToJson(*ok).dump(), "");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(again->model.tied_head);
  EXPECT_EQ(TrainConfigToJson(*again), TrainConfigToJson(*ok));
}

// ---- caps, integer keys, memory estimate (issue 11) ----

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string WithKey(const std::string& section, const std::string& key, const std::string& raw) {
  if (section == "data") return R"({"data": {"corpus": "a", ")" + key + R"(": )" + raw + "}}";
  return R"({"data": {"corpus": "a"}, ")" + section + R"(": {")" + key + R"(": )" + raw + "}}";
}

TEST(ConfigTest, SizeKeysOverTheirCapsAreRefusedFastNamingFileAndKey) {
  struct Case {
    const char* section;
    const char* key;
    const char* raw;
  };
  const Case cases[] = {{"train", "micro_batch", "1000000000"},
                        {"train", "threads", "100000"},
                        {"model", "layers", "1e9"},
                        {"model", "width", "1000000"},
                        {"model", "heads", "100000"},
                        {"model", "seq_len", "1e8"},
                        {"model", "vocab", "1e9"},
                        {"model", "mlp_ratio", "1000"},
                        {"train", "grad_accum", "1e9"},
                        {"train", "steps", "2e9"},
                        {"optim", "warmup_steps", "2e9"},
                        {"data", "prefetch", "1e6"},
                        {"data", "num_workers", "1000"},
                        {"data", "worker_delay_ms", "1e12"},
                        {"train", "bucket_mb", "1e12"}};
  for (const Case& k : cases) {
    const auto t0 = std::chrono::steady_clock::now();
    auto c = ParseTrainConfig(WithKey(k.section, k.key, k.raw), "caps.json");
    EXPECT_LT(SecondsSince(t0), 0.1) << k.key;
    ASSERT_FALSE(c.ok()) << k.key;
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    const std::string want = std::string("caps.json: key \"") + k.section + "." + k.key + "\": ";
    EXPECT_NE(c.status().message().find(want), std::string::npos) << c.status();
    EXPECT_NE(c.status().message().find("out of range"), std::string::npos) << c.status();
  }
  // At the caps themselves the keys parse.
  EXPECT_TRUE(ParseTrainConfig(WithKey("model", "layers", std::to_string(kMaxLayers)), "").ok());
  EXPECT_TRUE(
      ParseTrainConfig(WithKey("train", "threads", std::to_string(MaxTrainThreads())), "").ok());
  EXPECT_FALSE(
      ParseTrainConfig(WithKey("train", "threads", std::to_string(MaxTrainThreads() + 1)), "")
          .ok());
  EXPECT_LE(MaxTrainThreads(), 1024);
}

TEST(ConfigTest, IntegerKeysTakeIntegralNumbersInIntRangeOnly) {
  auto ok = ParseTrainConfig(WithKey("train", "micro_batch", "1e3"), "x.json");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->train.micro_batch, 1000);
  auto frac = ParseTrainConfig(WithKey("train", "micro_batch", "1.5"), "x.json");
  ASSERT_FALSE(frac.ok());
  EXPECT_NE(
      frac.status().message().find("x.json: key \"train.micro_batch\": expected integer, got 1.5"),
      std::string::npos)
      << frac.status();
  for (const char* raw : {"1e12", "-1e12", "1000000000000", "18446744073709551615"}) {
    auto big = ParseTrainConfig(WithKey("train", "steps", raw), "x.json");
    ASSERT_FALSE(big.ok()) << raw;
    EXPECT_NE(big.status().message().find("x.json: key \"train.steps\": "), std::string::npos);
    EXPECT_NE(big.status().message().find("does not fit an integer"), std::string::npos)
        << big.status();
  }
  // A number beyond a double is nlohmann's out_of_range, not a parse_error: still one
  // InvalidArgument naming the file and the byte.
  const std::string text = WithKey("optim", "lr", "1e309");
  auto inf = ParseTrainConfig(text, "x.json");
  ASSERT_FALSE(inf.ok());
  EXPECT_EQ(inf.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(inf.status().message().find("x.json: not valid JSON at byte " +
                                        std::to_string(text.find("1e309"))),
            std::string::npos)
      << inf.status();
}

TEST(MemoryTest, EstimateFollowsTheDocumentedFormula) {
  TrainConfig c = TinyConfig();  // layers 1, heads 2, width 32, seq 32, micro_batch 4
  const MemoryEstimate e = EstimateTrainMemory(c, 257);
  EXPECT_EQ(e.params, static_cast<double>(CountParams(c.model, 257)));
  EXPECT_DOUBLE_EQ(e.state_bytes, 16.0 * e.params);
  EXPECT_DOUBLE_EQ(e.activation_bytes, 4.0 * 1 * 4 * 32 * ((12 + 2 * 4) * 32 + 3 * 2 * 32));
  EXPECT_DOUBLE_EQ(e.logits_bytes, 12.0 * 4 * 32 * 257);
  EXPECT_DOUBLE_EQ(e.mask_bytes, 32.0 * 32);
  EXPECT_DOUBLE_EQ(e.loader_bytes, (4 + 1 + 1) * 4.0 * 32 * 16);
  EXPECT_DOUBLE_EQ(e.total_bytes, e.state_bytes + e.activation_bytes + e.logits_bytes +
                                      e.mask_bytes + e.loader_bytes);
  EXPECT_DOUBLE_EQ(e.total_bytes, 1186304);  // docs/metrics.md's worked check
  EXPECT_EQ(CountParams(c.model, 257), 22016);
  c.train.precision = "bf16";
  EXPECT_DOUBLE_EQ(EstimateTrainMemory(c, 257).state_bytes, 18.0 * e.params);
}

TEST(MemoryTest, OverTheAvailableMemoryNamesTheKeysThatDriveIt) {
  TrainConfig c = TinyConfig();
  c.source = "big.json";
  c.model.layers = kMaxLayers;
  c.model.width = kMaxWidth;
  c.model.heads = 16;
  absl::Status st = CheckTrainMemory(c, 257, 1, int64_t{16} << 30, "MemAvailable");
  ASSERT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << st;
  EXPECT_NE(st.message().find("big.json: model.layers=1024, model.width=65536: needs ~"),
            std::string::npos)
      << st;
  EXPECT_NE(st.message().find("16.0 GiB available (MemAvailable)"), std::string::npos) << st;
  // Activations dominate: a huge micro-batch is named.
  c = TinyConfig();
  c.train.micro_batch = kMaxMicroBatch;
  c.model.seq_len = 1024;
  st = CheckTrainMemory(c, 257, 1, int64_t{16} << 30, "MemAvailable");
  ASSERT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << st;
  EXPECT_NE(st.message().find("train.micro_batch=1048576"), std::string::npos) << st;
  // The tiny config fits in 16 GiB, but not in 8 local ranks x 1 MB; unknown memory: no check.
  c = TinyConfig();
  EXPECT_TRUE(CheckTrainMemory(c, 257, 1, int64_t{16} << 30, "MemAvailable").ok());
  const double one = EstimateTrainMemory(c, 257).total_bytes;
  EXPECT_TRUE(CheckTrainMemory(c, 257, 1, static_cast<int64_t>(one) + 1, "x").ok());
  st = CheckTrainMemory(c, 257, 8, static_cast<int64_t>(one) + 1, "x");
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(st.message().find("per rank x 8 local ranks"), std::string::npos) << st;
  EXPECT_TRUE(CheckTrainMemory(c, 257, 1, -1, "x").ok());
}

TEST(MemoryTest, MemAvailableComesFromProcMeminfo) {
  FakeOs os;
  EXPECT_EQ(AvailableHostMemoryBytes(&os), -1);  // no /proc/meminfo
  os.AddFile("/proc/meminfo",
             "MemTotal:       32000000 kB\nMemFree:         1000000 kB\n"
             "MemAvailable:   21402340 kB\nBuffers:          100 kB\n");
  EXPECT_EQ(AvailableHostMemoryBytes(&os), int64_t{21402340} * 1024);
  FakeOs bad;
  bad.AddFile("/proc/meminfo", "MemAvailable:   lots\n");
  EXPECT_EQ(AvailableHostMemoryBytes(&bad), -1);
  EXPECT_GT(AvailableHostMemoryBytes(Os::Default()), 0);
}

// ---- LR schedule ----

TEST(ScheduleTest, WarmupThenCosine) {
  OptimConfig o;
  o.lr = 1.0;
  o.min_lr = 0.1;
  o.warmup_steps = 10;
  EXPECT_DOUBLE_EQ(LearningRate(o, 1, 110), 0.1);
  EXPECT_DOUBLE_EQ(LearningRate(o, 10, 110), 1.0);
  EXPECT_NEAR(LearningRate(o, 60, 110), 0.55, 1e-12);  // half way: mean of lr and min_lr
  EXPECT_NEAR(LearningRate(o, 110, 110), 0.1, 1e-12);
  EXPECT_GT(LearningRate(o, 30, 110), LearningRate(o, 31, 110));
}

// ---- data ----

TEST(DataTest, PacksTextIntoFixedSequences) {
  auto tok = tokenizer::NewByteTokenizer();
  DataConfig d;
  d.corpus = {DataDir() + "/tiny.txt"};
  auto p = LoadCorpus(d, *tok, 32);
  ASSERT_TRUE(p.ok()) << p.status();
  const int64_t bytes = std::filesystem::file_size(DataDir() + "/tiny.txt");
  EXPECT_EQ(p->stats.files, 1);
  EXPECT_EQ(p->stats.documents, 1);
  EXPECT_EQ(p->stats.bytes, bytes);
  EXPECT_EQ(p->stats.tokens, bytes + 1);  // + end of document
  EXPECT_EQ(p->tokens.back(), tok->eos_id());
  EXPECT_EQ(p->num_sequences, (bytes + 1 - 1) / 32);
}

TEST(DataTest, JsonlBadRecordsAreCountedNotFatal) {
  auto tok = tokenizer::NewByteTokenizer();
  DataConfig d;
  d.corpus = {DataDir() + "/tiny.jsonl"};
  auto p = LoadCorpus(d, *tok, 16);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->stats.documents, 3);
  EXPECT_EQ(p->stats.bad_records, 1);
  EXPECT_EQ(p->stats.missing_text_field, 1);
  EXPECT_NE(p->stats.first_bad_record.find("tiny.jsonl:2"), std::string::npos)
      << p->stats.first_bad_record;
}

TEST(DataTest, EmptyAndMissingCorpusNameTheFile) {
  auto tok = tokenizer::NewByteTokenizer();
  DataConfig d;
  d.corpus = {DataDir() + "/empty.txt"};
  auto p = LoadCorpus(d, *tok, 16);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("empty.txt: empty corpus"), std::string::npos) << p.status();
  d.corpus = {DataDir() + "/missing.txt"};
  p = LoadCorpus(d, *tok, 16);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(p.status().message().find("missing.txt"), std::string::npos);
  d.corpus = {DataDir() + "/tiny.txt"};
  p = LoadCorpus(d, *tok, 1 << 20);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("corpus too small"), std::string::npos);
}

TEST(DataTest, ShuffleIsAPermutationFixedBySeed) {
  std::vector<int64_t> a = ShuffledOrder(1000, 42, 0);
  EXPECT_EQ(a, ShuffledOrder(1000, 42, 0));
  EXPECT_NE(a, ShuffledOrder(1000, 42, 1));
  EXPECT_NE(a, ShuffledOrder(1000, 43, 0));
  std::set<int64_t> s(a.begin(), a.end());
  EXPECT_EQ(s.size(), 1000u);
  EXPECT_EQ(*s.begin(), 0);
  EXPECT_EQ(*s.rbegin(), 999);
  // Pinned values: bench/train/peer.py reimplements this generator.
  uint64_t state = 0;
  EXPECT_EQ(SplitMix64(&state), 0xE220A8397B1DCDAFULL);
}

TEST(DataTest, RanksReadDisjointShardsOfTheSameGlobalOrder) {
  const int64_t n = 50;
  LoaderOptions one;
  one.micro_batch = 4;
  one.seed = 9;
  LoaderOptions two = one;
  two.world_size = 2;
  two.micro_batch = 2;
  for (int64_t step = 0; step < 20; ++step) {  // crosses epoch boundaries
    std::vector<int64_t> global = SequencesForMicroStep(n, one, step);
    two.rank = 0;
    std::vector<int64_t> r0 = SequencesForMicroStep(n, two, step);
    two.rank = 1;
    std::vector<int64_t> r1 = SequencesForMicroStep(n, two, step);
    std::vector<int64_t> joined = r0;
    joined.insert(joined.end(), r1.begin(), r1.end());
    EXPECT_EQ(joined, global) << "step " << step;
  }
}

TEST(DataTest, PrefetchingLoaderMatchesSynchronousOrder) {
  auto tok = tokenizer::NewByteTokenizer();
  DataConfig d;
  d.corpus = {DataDir() + "/tiny.txt"};
  auto p = LoadCorpus(d, *tok, 16);
  ASSERT_TRUE(p.ok());
  LoaderOptions o;
  o.micro_batch = 3;
  o.seed = 5;
  o.num_workers = 0;
  BatchLoader sync(&*p, o);
  o.num_workers = 3;
  o.prefetch = 2;
  BatchLoader async(&*p, o);
  for (int i = 0; i < 40; ++i) {
    Batch a = sync.Next(), b = async.Next();
    ASSERT_EQ(a.index, i);
    ASSERT_EQ(b.index, i);
    ASSERT_EQ(a.inputs, b.inputs);
    ASSERT_EQ(a.targets, b.targets);
    EXPECT_EQ(a.sequence_ids, SequencesForMicroStep(p->num_sequences, o, i));
    // Targets are inputs shifted by one token.
    for (int r = 0; r < a.rows; ++r) {
      for (int t = 0; t + 1 < a.cols; ++t) {
        ASSERT_EQ(a.targets[r * a.cols + t], a.inputs[r * a.cols + t + 1]);
      }
    }
  }
}

// ---- metrics ----

// A metrics writer of DIR/m.jsonl with a minimal header (10 params, no config).
absl::StatusOr<std::unique_ptr<MetricsWriter>> OpenTestMetrics(const std::string& dir, int rank,
                                                               int world_size) {
  return MetricsWriter::Open(dir + "/m.jsonl", {{"rank", rank},
                                                {"world_size", world_size},
                                                {"params", 10},
                                                {"start_unix_us", 1},
                                                {"config", nlohmann::json::object()}});
}

TEST(MetricsTest, WriterOutputValidates) {
  std::string dir = TempDir("metrics");
  auto w = OpenTestMetrics(dir, 0, 1);
  ASSERT_TRUE(w.ok()) << w.status();
  StepRecord r;
  r.step = 1;
  r.loss = 2.5;
  r.phases.forward_ms = 3;
  ASSERT_TRUE((*w)->WriteStep(r).ok());
  ASSERT_TRUE((*w)->WriteLayerNorms(1, {{"wte.weight", 1.0, 0.5}}).ok());
  r.step = 2;
  r.loss = NAN;  // written as null
  ASSERT_TRUE((*w)->WriteStep(r).ok());
  w->reset();
  auto steps = ValidateMetricsFile(dir + "/m.jsonl");
  ASSERT_TRUE(steps.ok()) << steps.status();
  EXPECT_EQ(steps->steps, 2);
  EXPECT_FALSE(steps->ended);  // no end record: still running or killed
  EXPECT_EQ(steps->state, "running_or_killed");
  {
    std::ofstream out(dir + "/m.jsonl", std::ios::app);
    out << R"({"type": "step", "step": 3, "loss": 1.0})"
        << "\n";
  }
  auto bad = ValidateMetricsFile(dir + "/m.jsonl");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("m.jsonl:5: missing key \"lr\""), std::string::npos)
      << bad.status();
}

// trainscope.watch's `scalars` record (mon.log(step=s, val_loss=v) after a step) is valid;
// one without its "scalars" object is not.
TEST(MetricsTest, ScalarsRecordValidates) {
  std::string dir = TempDir("metrics_scalars");
  auto w = OpenTestMetrics(dir, 0, 1);
  ASSERT_TRUE(w.ok()) << w.status();
  StepRecord r;
  r.step = 1;
  ASSERT_TRUE((*w)->WriteStep(r).ok());
  w->reset();
  {
    std::ofstream out(dir + "/m.jsonl", std::ios::app);
    out << R"({"type": "scalars", "step": 1, "scalars": {"v": 0.5}})"
        << "\n"
        << R"({"type": "scalars", "step": 1})"
        << "\n";
  }
  auto info = ValidateMetricsFile(dir + "/m.jsonl");
  ASSERT_FALSE(info.ok());
  EXPECT_NE(info.status().message().find("m.jsonl:4: missing key \"scalars\""), std::string::npos)
      << info.status();
}

// With a TensorBoard file attached, every step record is also one event in it (after the
// file_version event); the end record flushes it, and nothing follows the end record.
TEST(MetricsTest, TensorBoardMirrorsEveryStep) {
  std::string dir = TempDir("metrics_tb");
  auto w = OpenTestMetrics(dir, 0, 1);
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_TRUE((*w)->AttachTensorBoard(dir + "/tb").ok());
  StepRecord r;
  for (int s = 1; s <= 5; ++s) {
    r.step = s;
    r.loss = 3.0 / s;
    ASSERT_TRUE((*w)->WriteStep(r).ok());
  }
  EndRecord e;
  e.reason = kEndDone;
  e.step = 5;
  ASSERT_TRUE((*w)->WriteEnd(e).ok());
  r.step = 6;
  ASSERT_TRUE((*w)->WriteStep(r).ok());  // dropped: the end record stays last

  std::vector<std::string> files;
  for (const auto& f : std::filesystem::directory_iterator(dir + "/tb"))
    files.push_back(f.path().string());
  ASSERT_EQ(files.size(), 1u);
  EXPECT_NE(files[0].find("/events.out.tfevents."), std::string::npos) << files[0];
  std::ifstream in(files[0], std::ios::binary);  // the writer is still open: flushed by the end
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  tb::TfRecordReader reader(bytes);
  std::string_view rec;
  int records = 0;
  while (reader.Next(&rec)) ++records;
  EXPECT_EQ(records, 6);
  EXPECT_EQ(reader.bad_records(), 0);
  EXPECT_EQ(reader.truncated_bytes(), 0);

  // The scalars of a step: the device's memory only where it reports it.
  auto tags = [](const StepRecord& x) {
    std::set<std::string> t;
    for (const auto& [tag, value] : StepScalars(x)) t.insert(tag);
    return t;
  };
  EXPECT_EQ(tags(r).count("train/loss"), 1u);
  EXPECT_EQ(tags(r).count("phase/forward_ms"), 1u);
  EXPECT_EQ(tags(r).count("memory/device_bytes"), 0u);
  r.device_mem_allocated_bytes = 1000;
  r.device_mem_peak_bytes = 2000;
  EXPECT_EQ(tags(r).count("memory/device_bytes"), 1u);
  EXPECT_EQ(tags(r).count("memory/device_peak_bytes"), 1u);
}

std::vector<nlohmann::json> ReadLines(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line));
  return out;
}

TEST(MetricsTest, EndRecordIsTheLastLineAndReadersSeeHowTheRunEnded) {
  std::string dir = TempDir("metrics_end");
  auto w = OpenTestMetrics(dir, 1, 2);
  ASSERT_TRUE(w.ok()) << w.status();
  StepRecord r;
  r.step = 1;
  ASSERT_TRUE((*w)->WriteStep(r).ok());
  EndRecord e;
  e.reason = kEndInterrupted;
  e.step = 1;
  e.rank = 1;
  e.signal = "SIGTERM";
  e.time_unix_us = 1700000000000000;
  e.elapsed_s = 2.5;
  ASSERT_TRUE((*w)->WriteEnd(e).ok());
  EXPECT_TRUE((*w)->ended());
  // The first end record wins; later lines of any kind are dropped.
  EndRecord again = e;
  again.reason = kEndDone;
  ASSERT_TRUE((*w)->WriteEnd(again).ok());
  r.step = 2;
  ASSERT_TRUE((*w)->WriteStep(r).ok());
  w->reset();
  auto lines = ReadLines(dir + "/m.jsonl");
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines.back()["type"], "end");
  EXPECT_EQ(lines.back()["reason"], "interrupted");
  EXPECT_EQ(lines.back()["signal"], "SIGTERM");
  EXPECT_FALSE(lines.back().contains("error"));
  auto info = ValidateMetricsFile(dir + "/m.jsonl");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_TRUE(info->ended);
  EXPECT_EQ(info->state, "interrupted");
  EXPECT_EQ(info->end.step, 1);
  EXPECT_EQ(info->end.rank, 1);
  EXPECT_EQ(info->end.signal, "SIGTERM");
  EXPECT_DOUBLE_EQ(info->end.elapsed_s, 2.5);
  // Nothing may follow the end record; an unknown reason is malformed.
  {
    std::ofstream out(dir + "/m.jsonl", std::ios::app);
    out << R"({"type": "event"})"
        << "\n";
  }
  auto after = ValidateMetricsFile(dir + "/m.jsonl");
  ASSERT_FALSE(after.ok());
  EXPECT_NE(after.status().message().find("m.jsonl:4: a line after the end record"),
            std::string::npos)
      << after.status();
  {
    std::ofstream out(dir + "/bad_reason.jsonl");
    out << lines[0].dump() << "\n"
        << R"({"type": "end", "reason": "crashed", "step": 0, "rank": 0, "time_unix_us": 1,)"
        << R"( "elapsed_s": 0})"
        << "\n";
  }
  auto reason = ValidateMetricsFile(dir + "/bad_reason.jsonl");
  ASSERT_FALSE(reason.ok());
  EXPECT_NE(reason.status().message().find(":2: end reason \"crashed\""), std::string::npos)
      << reason.status();
  // A last line cut short by a kill: the run is "running_or_killed", the file still valid.
  {
    std::ofstream out(dir + "/cut.jsonl");
    out << lines[0].dump() << "\n"
        << lines[1].dump() << "\n"
        << R"({"type": "step", "st)";
  }
  auto cut = ValidateMetricsFile(dir + "/cut.jsonl");
  ASSERT_TRUE(cut.ok()) << cut.status();
  EXPECT_TRUE(cut->truncated_last_line);
  EXPECT_EQ(cut->steps, 1);
  EXPECT_EQ(cut->state, "running_or_killed");
}

TEST(MetricsTest, LoaderVerdict) {
  LoaderVerdict ok = JudgeDataLoader(10, 100, 2);
  EXPECT_FALSE(ok.data_bound);
  LoaderVerdict slow = JudgeDataLoader(60, 100, 1);
  EXPECT_TRUE(slow.data_bound);
  // One worker needs 100 ms per batch; compute is 40 ms: 3 workers keep up.
  EXPECT_EQ(slow.suggested_workers, 3);
  EXPECT_NE(slow.message.find("data.num_workers to 3"), std::string::npos) << slow.message;
  LoaderVerdict none = JudgeDataLoader(50, 60, 0);
  EXPECT_TRUE(none.data_bound);
  EXPECT_EQ(none.suggested_workers, 5);
}

TEST(MetricsTest, HostRssIsReported) { EXPECT_GT(HostRssBytes(), 1 << 20); }

// ---- training ----

// The run directory RunTiny(c, name) used (without clearing it, as TempDir does).
std::string RunDirOf(const std::string& name) { return Scratch() + "/" + name; }

absl::StatusOr<TrainResult> RunTiny(const TrainConfig& c, const std::string& name,
                                    TrainOptions o = {}) {
  o.run_dir = TempDir(name);
  o.distributed_from_env = false;
  return Train(c, o);
}

TEST(TrainTest, SameSeedSameLossesAndWeights) {
  TrainConfig c = TinyConfig();
  c.train.grad_accum = 2;
  auto a = RunTiny(c, "det_a");
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = RunTiny(c, "det_b");
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(a->losses.size(), 8u);
  EXPECT_EQ(a->losses, b->losses);  // bit-identical
  EXPECT_EQ(a->weights_checksum, b->weights_checksum);
  c.train.seed = 8;
  auto other = RunTiny(c, "det_c");
  ASSERT_TRUE(other.ok());
  EXPECT_NE(other->losses, a->losses);
}

TEST(TrainTest, LossFallsAndMetricsValidate) {
  TrainConfig c = TinyConfig();
  c.train.steps = 40;
  c.optim.warmup_steps = 5;
  auto r = RunTiny(c, "converge");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NEAR(r->loss_start, std::log(257.0), 0.3);  // uniform over the byte vocabulary
  EXPECT_LT(r->loss_end, r->loss_start - 1.5);
  EXPECT_EQ(r->params, CountParams(c.model, 257));
  auto steps = ValidateMetricsFile(r->metrics_path);
  ASSERT_TRUE(steps.ok()) << steps.status();
  EXPECT_EQ(steps->steps, 40);
  // A finished run: summary, then the end record, last.
  EXPECT_EQ(steps->state, "done");
  EXPECT_EQ(steps->end.step, 40);
  EXPECT_TRUE(steps->end.error.empty());
  auto all = ReadLines(r->metrics_path);
  ASSERT_GE(all.size(), 2u);
  EXPECT_EQ(all[all.size() - 2]["type"], "summary");
  EXPECT_EQ(all.back()["type"], "end");
  // Every step line carries the phases; layer norms every 4 steps (and step 1).
  std::ifstream in(r->metrics_path);
  std::string line;
  int layer_lines = 0;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    if (j["type"] == "layer_norms") {
      ++layer_lines;
      EXPECT_GT(j["layers"].size(), 5u);
    }
    if (j["type"] == "step") {
      EXPECT_GT(j["phases_ms"]["forward"].get<double>(), 0);
      EXPECT_GT(j["phases_ms"]["backward"].get<double>(), 0);
      EXPECT_GT(j["host_rss_bytes"].get<int64_t>(), 0);
      EXPECT_TRUE(j["device_mem_allocated_bytes"].is_null());
    }
  }
  EXPECT_EQ(layer_lines, 11);
  EXPECT_TRUE(std::filesystem::exists(std::filesystem::path(r->metrics_path).parent_path() /
                                      "weights.rank0.json"));
}

TEST(TrainTest, NonFiniteLossStopsWithStepAndRank) {
  auto c = LoadTrainConfig(DataDir() + "/nan_lr.json");
  ASSERT_TRUE(c.ok()) << c.status();
  auto r = RunTiny(*c, "nan");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kAborted);
  // One sentence naming step, rank, module and phase (anomaly.h NonfiniteSentence).
  EXPECT_NE(r.status().message().find("non-finite values at step 2 on rank 0"), std::string::npos)
      << r.status();
  EXPECT_NE(r.status().message().find("module blocks.0.ln1"), std::string::npos);
  EXPECT_NE(r.status().message().find("phase forward"), std::string::npos);
  EXPECT_TRUE(r.status().GetPayload(kNonfinitePayload).has_value()) << r.status().ToString();
  // The metrics file holds the nonfinite record, then the end record naming the error.
  const std::string metrics = RunDirOf("nan") + "/train/metrics.rank0.jsonl";
  auto info = ValidateMetricsFile(metrics);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->state, "error");
  EXPECT_NE(info->end.error.find("non-finite values"), std::string::npos) << info->end.error;
  int found = 0;
  for (const auto& line : ReadLines(metrics)) {
    if (line["type"] != "nonfinite") continue;
    ++found;
    EXPECT_EQ(line["step"], 2);
    EXPECT_EQ(line["phase"], "forward");
    EXPECT_EQ(line["class"], "lr_too_high") << line.dump();  // lr 1e30 diverged the weights
    EXPECT_EQ(line["reproducible"], true);
  }
  EXPECT_EQ(found, 1);
}

// fp16 emulation with the dynamic loss scaler: a scale far too large overflows fp16's range
// in backward, so the first steps are skipped and the scale backs off until it fits; then
// the run trains. The skips and scale changes are "loss_scale" records.
TEST(TrainTest, Fp16LossScalerSkipsOverflowsThenTrains) {
  TrainConfig c = TinyConfig();
  c.train.precision = "fp16";
  c.train.steps = 20;
  c.fp16.initial_scale = 1e12;
  c.fp16.backoff_factor = 1e-3;
  auto r = RunTiny(c, "fp16");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->precision, "fp16");
  int skipped = 0, changes = 0;
  double last_scale = 0;
  for (const auto& line : ReadLines(RunDirOf("fp16") + "/train/metrics.rank0.jsonl")) {
    if (line["type"] != "loss_scale") continue;
    skipped += line["skipped"].get<bool>() ? 1 : 0;
    changes += line["scale"] != line["next_scale"] ? 1 : 0;
    last_scale = line["next_scale"].get<double>();
  }
  EXPECT_GE(skipped, 1);
  EXPECT_GE(changes, 1);
  EXPECT_LT(last_scale, 1e12);
  EXPECT_LT(r->loss_end, r->loss_start - 0.3) << "trained after the skips";
}

TEST(TrainTest, Bf16AutocastTrains) {
  TrainConfig c = TinyConfig();
  c.train.precision = "bf16";
  c.train.steps = 20;
  auto r = RunTiny(c, "bf16");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->precision, "bf16");
  EXPECT_LT(r->loss_end, r->loss_start - 0.5);
  // Autocast really ran the matmuls in bf16: the first loss differs from fp32's in the
  // low digits (same weights, same batch), but only slightly.
  c.train.precision = "fp32";
  auto f = RunTiny(c, "fp32");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_NE(r->losses[0], f->losses[0]);
  EXPECT_NEAR(r->losses[0], f->losses[0], 0.05);
}

TEST(TrainTest, SlowLoaderIsCalledDataBound) {
  TrainConfig c = TinyConfig();
  c.data.worker_delay_ms = 40;
  c.data.num_workers = 1;
  c.train.steps = 6;
  auto r = RunTiny(c, "slow");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->loader.data_bound) << r->loader.message;
  EXPECT_GT(r->loader.suggested_workers, 1);
}

// SentencePiece is dlopen()ed into this libtorch process (the protobuf clash the tokenizer
// module works around): a model trained on the spot must load and train.
TEST(TrainTest, SentencePieceTokenizerTrains) {
  const std::string spm_train = FindInPath("spm_train");
  if (spm_train.empty()) GTEST_SKIP() << "spm_train not installed";
  const std::string dir = TempDir("spm");
  ASSERT_TRUE(MakeDirs(dir).ok());
  RunOptions ro;
  ro.timeout = std::chrono::seconds(60);
  auto run =
      RunProcess({spm_train, "--input=" + DataDir() + "/tiny.txt", "--model_prefix=" + dir + "/spm",
                  "--vocab_size=60", "--hard_vocab_limit=false", "--model_type=unigram",
                  "--minloglevel=2", "--bos_id=-1", "--eos_id=1", "--unk_id=0", "--pad_id=-1"},
                 ro);
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_TRUE(run->ok()) << run->err;
  TrainConfig c = TinyConfig();
  c.data.tokenizer = dir + "/spm.model";
  c.model.seq_len = 8;
  c.train.steps = 4;
  auto r = RunTiny(c, "spm_run");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_LT(r->params, CountParams(c.model, 257));  // vocab 60, not 257
  EXPECT_NEAR(r->loss_start, std::log(60.0), 0.5);
}

// ---- stop, errors and exceptions end the metrics file (issue 11) ----

TEST(TrainTest, StopTokenEndsTheFileWithInterrupted) {
  TrainConfig c = TinyConfig();
  c.train.steps = 50;
  std::atomic<int> stop{0};
  TrainOptions o;
  o.stop = &stop;
  o.on_step = [&](const StepRecord& s) {
    if (s.step == 3) stop = SIGTERM;
  };
  auto r = RunTiny(c, "stop", o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kCancelled) << r.status();
  EXPECT_NE(r.status().message().find("interrupted by SIGTERM after step 3 on rank 0"),
            std::string::npos)
      << r.status();
  auto info = ValidateMetricsFile(RunDirOf("stop") + "/train/metrics.rank0.jsonl");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->steps, 3);
  EXPECT_EQ(info->state, "interrupted");
  EXPECT_EQ(info->end.step, 3);
  EXPECT_EQ(info->end.signal, "SIGTERM");
  EXPECT_TRUE(info->end.error.empty());
}

TEST(TrainTest, ExceptionsBecomeStatusesAndEndTheFileWithError) {
  TrainConfig c = TinyConfig();
  TrainOptions o;
  o.on_step = [](const StepRecord& s) {
    if (s.step == 2) throw std::runtime_error("injected failure\nsecond line");
  };
  auto r = RunTiny(c, "throw", o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInternal);
  EXPECT_NE(r.status().message().find("trainer error after step 2 on rank 0: injected failure; "
                                      "second line"),
            std::string::npos)
      << r.status();
  auto info = ValidateMetricsFile(RunDirOf("throw") + "/train/metrics.rank0.jsonl");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->state, "error");
  EXPECT_EQ(info->end.step, 2);
  EXPECT_NE(info->end.error.find("injected failure"), std::string::npos);

  o.on_step = [](const StepRecord& s) {
    if (s.step == 1) throw std::bad_alloc();
  };
  r = RunTiny(c, "oom", o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(r.status().message().find("out of host memory (std::bad_alloc) after step 1 on rank 0"),
            std::string::npos)
      << r.status();
  info = ValidateMetricsFile(RunDirOf("oom") + "/train/metrics.rank0.jsonl");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->state, "error");
}

// A stop that comes while the training thread is busy (here: inside on_step, standing in
// for a collective blocked on a dead peer) is recorded by the watchdog within stop_grace.
TEST(TrainTest, WatchdogEndsTheFileWhileTheLoopIsBlocked) {
  TrainConfig c = TinyConfig();
  c.train.steps = 50;
  std::atomic<int> stop{0};
  TrainOptions o;
  o.stop = &stop;
  o.stop_grace = std::chrono::milliseconds(100);
  const std::string metrics = RunDirOf("watchdog") + "/train/metrics.rank0.jsonl";
  std::string last_type_while_blocked;
  std::string error_while_blocked;
  o.on_step = [&](const StepRecord& s) {
    if (s.step != 2) return;
    stop = SIGINT;
    std::this_thread::sleep_for(std::chrono::milliseconds(800));
    auto lines = ReadLines(metrics);
    last_type_while_blocked = lines.back()["type"];
    error_while_blocked = lines.back().value("error", "");
  };
  auto r = RunTiny(c, "watchdog", o);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kCancelled) << r.status();
  EXPECT_EQ(last_type_while_blocked, "end");
  EXPECT_NE(error_while_blocked.find("still busy"), std::string::npos) << error_while_blocked;
  auto info = ValidateMetricsFile(metrics);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->state, "interrupted");
  EXPECT_EQ(info->end.signal, "SIGINT");
}

TEST(TrainTest, MemoryEstimateRefusesBeforeAllocating) {
  // The real machine: a config that needs petabytes fails in well under a second.
  TrainConfig big = TinyConfig();
  big.model.layers = kMaxLayers;
  big.model.width = kMaxWidth;
  big.model.heads = 16;
  const int64_t rss_before = HostRssBytes();
  auto t0 = std::chrono::steady_clock::now();
  auto r = RunTiny(big, "mem_big");
  EXPECT_LT(SecondsSince(t0), 1.0);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted) << r.status();
  EXPECT_NE(r.status().message().find("model.layers=1024, model.width=65536: needs ~"),
            std::string::npos)
      << r.status();
  EXPECT_NE(r.status().message().find("MemAvailable"), std::string::npos);
  EXPECT_LT(HostRssBytes() - rss_before, int64_t{64} << 20);
  // An injected figure: even the tiny config does not fit in 1 MB; no metrics file is made.
  TrainOptions o;
  o.available_memory_bytes = [] { return int64_t{1} << 20; };
  r = RunTiny(TinyConfig(), "mem_small", o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted) << r.status();
  EXPECT_NE(r.status().message().find("1.0 MiB available (given)"), std::string::npos)
      << r.status();
  EXPECT_FALSE(std::filesystem::exists(RunDirOf("mem_small") + "/train/metrics.rank0.jsonl"));
}

// ---- the CLI under SIGINT / SIGTERM ----

// Runs `trainscope train` on the tiny config for up to 60 s, sends `sig` once the first step
// record is in the metrics file, and returns the exit status and the metrics file's lines.
void InterruptCli(int sig, const std::string& name, int* exit_code,
                  std::vector<nlohmann::json>* lines) {
  const std::string run = TempDir(name);
  const std::string metrics = run + "/train/metrics.rank0.jsonl";
  const std::string config = DataDir() + "/tiny_config.json";
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    int devnull = open("/dev/null", O_WRONLY);
    dup2(devnull, 1);
    execl(TS_CLI_BINARY, TS_CLI_BINARY, "train", "--config", config.c_str(), "--run-dir",
          run.c_str(), "--steps", "1000000", "--max-seconds", "60", static_cast<char*>(nullptr));
    _exit(127);
  }
  const auto t0 = std::chrono::steady_clock::now();
  bool stepped = false;
  while (!stepped && SecondsSince(t0) < 60) {
    std::ifstream in(metrics);
    std::string line;
    while (std::getline(in, line)) {
      if (line.find("\"type\":\"step\"") != std::string::npos) stepped = true;
    }
    int status = 0;
    if (!stepped && waitpid(pid, &status, WNOHANG) == pid) {
      FAIL() << "trainscope train exited early with status " << status;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!stepped) kill(pid, SIGKILL);
  ASSERT_TRUE(stepped) << "no step record in " << metrics;
  kill(pid, sig);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_LT(SecondsSince(t0), 60);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status);
  *exit_code = WEXITSTATUS(status);
  *lines = ReadLines(metrics);
}

TEST(CliTest, SigintAndSigtermEndTheMetricsFileWithInterrupted) {
  for (int sig : {SIGINT, SIGTERM}) {
    int code = -1;
    std::vector<nlohmann::json> lines;
    InterruptCli(sig, "cli_sig" + std::to_string(sig), &code, &lines);
    EXPECT_EQ(code, 128 + sig);
    ASSERT_GE(lines.size(), 3u);
    const nlohmann::json& end = lines.back();
    EXPECT_EQ(end["type"], "end") << end;
    EXPECT_EQ(end["reason"], "interrupted") << end;
    EXPECT_EQ(end["signal"], sig == SIGINT ? "SIGINT" : "SIGTERM") << end;
    EXPECT_GE(end["step"].get<int>(), 1);
    EXPECT_LT(end["step"].get<int>(), 1000000);
    EXPECT_FALSE(end.contains("error")) << end;
    // No summary for an interrupted run; the end names the last step the file has.
    int last_step = 0;
    for (const auto& l : lines) {
      EXPECT_NE(l["type"], "summary");
      if (l["type"] == "step") last_step = l["step"];
    }
    EXPECT_EQ(end["step"].get<int>(), last_step);
  }
}

TEST(TrainTest, VocabSmallerThanTokenizerIsNamed) {
  TrainConfig c = TinyConfig();
  c.model.vocab = 100;
  auto r = RunTiny(c, "vocab");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("model.vocab"), std::string::npos) << r.status();
}

}  // namespace
}  // namespace trainscope::train
