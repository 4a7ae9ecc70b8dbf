// The trainer's checkpoint writer (sync and async), PlanResume, the loader's start position
// and metrics files with resumed segments. libtorch-free.
#include "train/checkpointer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "trainscope/ckpt/checkpoint.h"
#include "trainscope/train/data.h"
#include "trainscope/train/metrics.h"

namespace trainscope::train {
namespace {

namespace fs = std::filesystem;

std::string TmpDir(const std::string& name) {
  std::string d = absl::StrCat(::testing::TempDir(), "/ckptr_", name, "_", ::getpid());
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::unique_ptr<CheckpointSnapshot> Snap(int64_t step, float value) {
  auto s = std::make_unique<CheckpointSnapshot>();
  s->data.step = step;
  s->data.config_hash = "h";
  float v[4] = {value, value + 1, value + 2, value + 3};
  std::memcpy(s->AddTensor(false, "w", "F32", {2, 2}, sizeof(v)), v, sizeof(v));
  std::memcpy(s->AddTensor(true, "w.exp_avg", "F32", {2, 2}, sizeof(v)), v, sizeof(v));
  s->data.json_files["rank0.json"] = {{"rank", 0}};
  return s;
}

TEST(Checkpointer, AsyncSavesPrunesAndReportsEachSave) {
  const std::string dir = TmpDir("async") + "/checkpoints";
  std::vector<SaveOutcome> saved;
  std::mutex mu;
  CheckpointerOptions o;
  o.dir = dir;
  o.keep = 2;
  o.async = true;
  o.fsync = false;
  o.on_saved = [&](const SaveOutcome& s) {
    std::lock_guard<std::mutex> lock(mu);
    saved.push_back(s);
  };
  {
    Checkpointer c(o);
    double blocked = 0;
    for (int step = 1; step <= 4; ++step) {
      auto path = c.Save(Snap(step, step), /*allow_async=*/true, &blocked);
      ASSERT_TRUE(path.ok()) << path.status();
      EXPECT_EQ(*path, absl::StrCat(dir, "/step-", step));
    }
    ASSERT_TRUE(c.Wait().ok());
  }
  ASSERT_EQ(saved.size(), 4u);
  for (const SaveOutcome& s : saved) {
    EXPECT_TRUE(s.status.ok()) << s.status;
    EXPECT_TRUE(s.async);
    EXPECT_EQ(s.bytes, 32u);
  }
  EXPECT_EQ(ckpt::ListCheckpointDirs(dir),
            (std::vector<std::string>{dir + "/step-4", dir + "/step-3"}));
  EXPECT_TRUE(ckpt::CheckCheckpoint(dir + "/step-4", true).ok());
  auto model = ckpt::ReadSafetensors(dir + "/step-4/model.safetensors");
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_EQ(model->size(), 1u);
  float back[4];
  std::memcpy(back, (*model)[0].bytes.data(), sizeof(back));
  EXPECT_EQ(back[0], 4.0f);
  EXPECT_EQ(back[3], 7.0f);
}

TEST(Checkpointer, KeepsAnIntactCheckpointAndMovesADamagedOneAside) {
  const std::string dir = TmpDir("exists") + "/checkpoints";
  CheckpointerOptions o;
  o.dir = dir;
  o.fsync = false;
  Checkpointer c(o);
  ASSERT_TRUE(c.Save(Snap(5, 1), false, nullptr).ok());
  // Same step again (a resumed run): the intact one stays.
  ASSERT_TRUE(c.Save(Snap(5, 9), false, nullptr).ok());
  auto model = ckpt::ReadSafetensors(dir + "/step-5/model.safetensors");
  ASSERT_TRUE(model.ok());
  float first;
  std::memcpy(&first, (*model)[0].bytes.data(), 4);
  EXPECT_EQ(first, 1.0f);
  // Damaged: moved aside, the new save lands.
  fs::remove(dir + "/step-5/manifest.json");
  ASSERT_TRUE(c.Save(Snap(5, 9), false, nullptr).ok());
  EXPECT_TRUE(ckpt::CheckCheckpoint(dir + "/step-5", true).ok());
  EXPECT_TRUE(fs::exists(absl::StrCat(dir, "/step-5.bad-", ::getpid())));
}

TEST(Checkpointer, AFailedBackgroundSaveIsReturnedByTheNextCall) {
  const std::string root = TmpDir("fail");
  std::ofstream(root + "/checkpoints") << "a file where the folder should be";
  CheckpointerOptions o;
  o.dir = root + "/checkpoints";
  o.async = true;
  o.fsync = false;
  Checkpointer c(o);
  ASSERT_TRUE(c.Save(Snap(1, 1), true, nullptr).ok());  // queued
  EXPECT_FALSE(c.Wait().ok());
}

TEST(PlanResume, LatestFreshPathAndDamaged) {
  const std::string dir = TmpDir("plan") + "/checkpoints";
  auto fresh = PlanResume("latest", dir);
  ASSERT_TRUE(fresh.ok());
  EXPECT_EQ(fresh->path, "");
  EXPECT_NE(fresh->notice.find("starting fresh"), std::string::npos) << fresh->notice;

  CheckpointerOptions o;
  o.dir = dir;
  o.fsync = false;
  {
    Checkpointer c(o);
    for (int step : {3, 6, 9}) ASSERT_TRUE(c.Save(Snap(step, step), false, nullptr).ok());
  }
  // An unfinished save newer than all: skipped.
  fs::create_directories(dir + "/step-12.tmp-1");
  auto latest = PlanResume("latest", dir);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(latest->path, dir + "/step-9");
  EXPECT_EQ(latest->step, 9);

  auto path = PlanResume(dir + "/step-6/", dir);
  ASSERT_TRUE(path.ok()) << path.status();
  EXPECT_EQ(path->path, dir + "/step-6");

  // Truncated: refused, naming the file, the problem and the newest good checkpoint.
  fs::resize_file(dir + "/step-6/model.safetensors", 10);
  auto bad = PlanResume(dir + "/step-6", dir);
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status()));
  const std::string msg(bad.status().message());
  EXPECT_NE(msg.find("step-6/model.safetensors: truncated"), std::string::npos) << msg;
  EXPECT_NE(msg.find("the newest complete one is " + dir + "/step-9"), std::string::npos) << msg;
  EXPECT_TRUE(absl::IsNotFound(PlanResume(dir + "/step-7", dir).status()));
}

TEST(BatchLoader, StartIndexContinuesTheSameOrder) {
  PackedCorpus corpus;
  corpus.seq_len = 4;
  for (int i = 0; i < 4 * 13 + 1; ++i) corpus.tokens.push_back(i);
  corpus.num_sequences = 13;
  LoaderOptions lo;
  lo.micro_batch = 3;
  lo.seed = 5;
  lo.num_workers = 1;
  std::vector<std::vector<int64_t>> all;
  {
    BatchLoader l(&corpus, lo);
    for (int i = 0; i < 10; ++i) all.push_back(l.Next().sequence_ids);
  }
  lo.start_index = 6;
  BatchLoader resumed(&corpus, lo);
  for (int i = 6; i < 10; ++i) {
    Batch b = resumed.Next();
    EXPECT_EQ(b.index, i);
    EXPECT_EQ(b.sequence_ids, all[i]) << "micro-step " << i;
  }
}

TEST(MetricsFile, AResumedRunAppendsASegmentAndRepeatedStepsCountOnce) {
  const std::string path = TmpDir("metrics") + "/m.jsonl";
  auto step = [](int s) {
    StepRecord r;
    r.step = s;
    return r;
  };
  {
    auto w = MetricsWriter::Open(path, {{"rank", 0},
                                        {"world_size", 1},
                                        {"params", 1},
                                        {"start_unix_us", 1},
                                        {"config", nlohmann::json::object()}});
    ASSERT_TRUE(w.ok());
    for (int s = 1; s <= 5; ++s) ASSERT_TRUE((*w)->WriteStep(step(s)).ok());
  }
  // Killed mid-line: no end record, a partial last line.
  { std::ofstream(path, std::ios::app) << "{\"type\":\"st"; }
  auto w = MetricsWriter::Open(path,
                               {{"rank", 0},
                                {"world_size", 1},
                                {"params", 1},
                                {"start_unix_us", 2},
                                {"config", nlohmann::json::object()},
                                {"resumed_from_step", 3}},
                               /*append=*/true);
  ASSERT_TRUE(w.ok());
  for (int s = 4; s <= 7; ++s) ASSERT_TRUE((*w)->WriteStep(step(s)).ok());
  EndRecord e;
  e.reason = kEndDone;
  e.step = 7;
  ASSERT_TRUE((*w)->WriteEnd(e).ok());
  w->reset();
  auto info = ValidateMetricsFile(path);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->steps, 7);
  EXPECT_EQ(info->segments, 2);
  EXPECT_TRUE(info->ended);
  EXPECT_EQ(info->state, "done");
  // A second header without resumed_from_step is malformed.
  {
    std::ofstream(path, std::ios::app)
        << "{\"type\":\"header\",\"format\":\"trainscope.train_metrics\"}\n";
  }
  EXPECT_FALSE(ValidateMetricsFile(path).ok());
}

}  // namespace
}  // namespace trainscope::train
