#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <vector>

#include "ckpt/dcp.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "trainscope/ckpt/checkpoint.h"
#include "trainscope/ckpt/inspect.h"
#include "trainscope/ckpt/resume.h"
#include "trainscope/ckpt/safetensors.h"
#include "trainscope/core/fake_os.h"

namespace trainscope::ckpt {
namespace {

namespace fs = std::filesystem;

class CkptTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() /
            ("ckpt_test." + std::to_string(::getpid()) + "." +
             ::testing::UnitTest::GetInstance()->current_test_info()->name()))
               .string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  CheckpointData Data(int64_t step) {
    CheckpointData d;
    d.step = step;
    d.world_size = 2;
    d.config_hash = "abc";
    d.model = {{"w", "F32", {2, 3}, w_.data(), w_.size() * 4},
               {"b", "I64", {2}, b_.data(), b_.size() * 8}};
    d.optimizer = {{"w.exp_avg", "F32", {2, 3}, w_.data(), w_.size() * 4}};
    d.json_files["rank0.json"] = {{"rng", 1}, {"position", 10}};
    d.json_files["rank1.json"] = {{"rng", 2}, {"position", 11}};
    return d;
  }
  WriteOptions Fast() {
    WriteOptions o;
    o.fsync = false;
    return o;
  }

  std::string dir_;
  std::vector<float> w_{1, -2, 3, 4, 5, 6};
  std::vector<int64_t> b_{7, -8};
};

TEST_F(CkptTest, WriterRoundTrip) {
  auto p = WriteCheckpoint(dir_, Data(5));
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(*p, dir_ + "/step-5");
  CheckResult c = CheckCheckpoint(*p, true);
  EXPECT_TRUE(c.ok());
  EXPECT_EQ(c.step, 5);
  auto h = ReadHeader(*p + "/model.safetensors");
  ASSERT_TRUE(h.ok()) << h.status();
  ASSERT_EQ(h->tensors.size(), 2u);
  EXPECT_EQ(h->tensors[1].name, "w");
  EXPECT_EQ(h->tensors[1].shape, (std::vector<uint64_t>{2, 3}));
  auto rep = Inspect(*p, InspectOptions{});
  ASSERT_TRUE(rep.ok()) << rep.status();
  EXPECT_EQ(rep->format, "trainscope");
  EXPECT_TRUE(rep->ok());
  ASSERT_EQ(rep->tensors.size(), 3u);
  const TensorReport& w = rep->tensors[1];  // model.safetensors:w after b
  EXPECT_EQ(w.name, "w");
  EXPECT_DOUBLE_EQ(w.stats.min, -2);
  EXPECT_DOUBLE_EQ(w.stats.max, 6);
  EXPECT_NEAR(w.stats.l2, std::sqrt(1 + 4 + 9 + 16 + 25 + 36.0), 1e-12);
  EXPECT_TRUE(absl::IsAlreadyExists(WriteCheckpoint(dir_, Data(5)).status()));
}

// Further tensor files (the trainer's per-rank compression state) are written, listed in
// the manifest, checked and inspected; a name that is not a plain .safetensors is refused.
TEST_F(CkptTest, ExtraTensorFiles) {
  CheckpointData d = Data(4);
  d.tensor_files["compression.rank1.safetensors"] = {
      {"compression.topk.0.error", "F32", {6}, w_.data(), w_.size() * 4}};
  d.tensor_files["compression.safetensors"] = {
      {"compression.powersgd.0.q", "F32", {3, 2}, w_.data(), w_.size() * 4}};
  auto p = WriteCheckpoint(dir_, d, Fast());
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(CheckCheckpoint(*p, true).ok());
  auto h = ReadHeader(*p + "/compression.rank1.safetensors");
  ASSERT_TRUE(h.ok()) << h.status();
  ASSERT_EQ(h->tensors.size(), 1u);
  EXPECT_EQ(h->tensors[0].name, "compression.topk.0.error");
  // A damaged extra file is caught by the manifest like any other.
  {
    std::fstream f(*p + "/compression.safetensors",
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-1, std::ios::end);
    f.put('\x7f');
  }
  EXPECT_FALSE(CheckCheckpoint(*p, true).ok());
  fs::remove_all(*p);
  ASSERT_TRUE(WriteCheckpoint(dir_, d, Fast()).ok());
  auto rep = Inspect(*p, InspectOptions{});
  ASSERT_TRUE(rep.ok()) << rep.status();
  EXPECT_TRUE(rep->ok());
  ASSERT_EQ(rep->tensors.size(), 5u);  // model 2, optimizer 1, then the extra files by name
  EXPECT_EQ(rep->tensors[3].file, "compression.rank1.safetensors");
  EXPECT_EQ(rep->tensors[4].name, "compression.powersgd.0.q");
  for (const char* bad : {"model.safetensors", "x/y.safetensors", "state.bin"}) {
    CheckpointData b = Data(5);
    b.tensor_files[bad] = {};
    EXPECT_TRUE(absl::IsInvalidArgument(WriteCheckpoint(dir_, b, Fast()).status())) << bad;
  }
}

TEST_F(CkptTest, KilledWriterIsSkipped) {
  ASSERT_TRUE(WriteCheckpoint(dir_, Data(1), Fast()).ok());
  // Saves of step 2 stopped after each file in turn: none is ever taken for complete.
  for (const char* stop :
       {"model.safetensors", "optimizer.safetensors", "rank0.json", "meta.json", "manifest.json"}) {
    fs::remove_all(dir_ + "/step-2.tmp-" + std::to_string(::getpid()));
    WriteOptions o = Fast();
    o.after_file = [&](const std::string& f) {
      return f == stop ? absl::AbortedError("killed") : absl::OkStatus();
    };
    EXPECT_FALSE(WriteCheckpoint(dir_, Data(2), o).ok());
    auto latest = FindLatestComplete(dir_);
    ASSERT_TRUE(latest.ok());
    EXPECT_EQ(latest->step, 1) << stop;
    ASSERT_EQ(latest->skipped.size(), 1u);
    EXPECT_NE(latest->skipped[0].problem.find("incomplete"), std::string::npos);
    CheckResult c = CheckCheckpoint(latest->skipped[0].file, true);
    EXPECT_TRUE(c.incomplete);
  }
}

// A real crash: a forked writer SIGKILLs itself after each file in turn (fsync on).
TEST_F(CkptTest, SigkilledWriterLeavesNewestCompleteIntact) {
  ASSERT_TRUE(WriteCheckpoint(dir_, Data(1)).ok());
  int n = 0;
  for (const char* stop : {"model.safetensors", "rank1.json", "manifest.json"}) {
    const int64_t step = 10 + n++;
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      WriteOptions o;
      o.after_file = [&](const std::string& f) {
        if (f == stop) raise(SIGKILL);
        return absl::OkStatus();
      };
      (void)WriteCheckpoint(dir_, Data(step), o);
      _exit(0);
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status)) << stop;
    auto latest = FindLatestComplete(dir_);
    ASSERT_TRUE(latest.ok());
    EXPECT_EQ(latest->step, 1) << stop;
    auto reports = InspectPath(dir_, InspectOptions{});
    ASSERT_TRUE(reports.ok());
    for (const auto& r : *reports) EXPECT_TRUE(r.ok()) << r.path;  // verify passes
  }
}

TEST_F(CkptTest, HalfWrittenDirectoryWithoutManifest) {
  ASSERT_TRUE(WriteCheckpoint(dir_, Data(1), Fast()).ok());
  ASSERT_TRUE(WriteCheckpoint(dir_, Data(2), Fast()).ok());
  fs::remove(dir_ + "/step-2/manifest.json");
  CheckResult c = CheckCheckpoint(dir_ + "/step-2", true);
  EXPECT_FALSE(c.complete);
  EXPECT_TRUE(c.incomplete);
  auto latest = FindLatestComplete(dir_);
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(latest->path, dir_ + "/step-1");
}

// Flips the byte at `offset` of `file`.
void FlipByte(const std::string& file, uint64_t offset) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(offset);
  char c = 0;
  f.get(c);
  f.seekp(offset);
  f.put(static_cast<char>(c ^ 0x40));
}

// The damaged tensor is named (per-tensor hashes in the manifest), a damaged header is
// corrupt and not incomplete, and the report names the newest good checkpoint.
TEST_F(CkptTest, DamageIsLocatedToTheTensorOrTheHeader) {
  for (int64_t step : {1, 2, 3}) ASSERT_TRUE(WriteCheckpoint(dir_, Data(step), Fast()).ok());
  const std::string st = dir_ + "/step-3/optimizer.safetensors";
  auto header = ReadHeader(st);
  ASSERT_TRUE(header.ok());
  ASSERT_EQ(header->tensors.size(), 1u);
  FlipByte(st, header->tensors[0].begin + 5);  // inside "w.exp_avg"'s data
  CheckResult c = CheckCheckpoint(dir_ + "/step-3", true);
  EXPECT_TRUE(c.complete);
  EXPECT_FALSE(c.incomplete);
  ASSERT_EQ(c.problems.size(), 1u);
  EXPECT_EQ(c.problems[0].file, st);
  EXPECT_EQ(c.problems[0].tensor, "w.exp_avg");
  EXPECT_EQ(
      c.problems[0].problem.rfind("corrupt: tensor \"w.exp_avg\": hash mismatch of bytes [", 0), 0u)
      << c.problems[0].problem;
  auto latest = FindLatestComplete(dir_);
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(latest->path, dir_ + "/step-2");
  ASSERT_EQ(latest->skipped.size(), 1u);
  EXPECT_EQ(latest->skipped[0].file, dir_ + "/step-3");
  EXPECT_EQ(latest->skipped[0].tensor, "w.exp_avg");
  EXPECT_EQ(latest->skipped[0].problem.rfind("optimizer.safetensors: corrupt: tensor", 0), 0u);

  // The header too (its JSON no longer parses): both are named, neither as incomplete.
  FlipByte(st, 9);
  c = CheckCheckpoint(dir_ + "/step-3", true);
  ASSERT_EQ(c.problems.size(), 2u);
  EXPECT_EQ(c.problems[0].problem.rfind("corrupt: damaged safetensors header", 0), 0u)
      << c.problems[0].problem;
  EXPECT_EQ(c.problems[1].tensor, "w.exp_avg");
  auto reports = InspectPath(dir_, {});
  ASSERT_TRUE(reports.ok());
  ASSERT_EQ(reports->size(), 3u);
  EXPECT_EQ(reports->back().status(), "corrupt");
  EXPECT_EQ(reports->back().problems.size(), 2u);  // the header said once
  EXPECT_EQ((*reports)[0].status(), "ok");
  const CheckpointReport* good = NewestGood(*reports);
  ASSERT_NE(good, nullptr);
  EXPECT_EQ(good->path, dir_ + "/step-2");
  nlohmann::json j = ReportsToJson(*reports, false);
  EXPECT_EQ(j["newest_good"]["step"], 2);
  EXPECT_EQ(j["checkpoints"][2]["problems"][1]["tensor"], "w.exp_avg");
  const std::string text = FormatReportsText(*reports, false);
  EXPECT_NE(text.find("newest good checkpoint: " + dir_ + "/step-2 (step 2)"), std::string::npos);
  EXPECT_EQ(text.find("incomplete"), std::string::npos) << text;

  // An unfinished save (no manifest) is the only thing called incomplete.
  fs::remove(dir_ + "/step-2/manifest.json");
  reports = InspectPath(dir_, {});
  ASSERT_TRUE(reports.ok());
  EXPECT_EQ((*reports)[1].status(), "incomplete");
  EXPECT_EQ(NewestGood(*reports)->path, dir_ + "/step-1");
}

TEST(CkptFindings, EveryProblemIsAFindingOfItsKind) {
  CheckpointReport ok, bad, unfinished;
  bad.problems = {{"/c/step-3/optimizer.safetensors", "corrupt: tensor \"w\": hash mismatch", "w"},
                  {"/c/step-3/model.safetensors", "non-finite: tensor \"b\" has 2 NaN", ""},
                  {"/c/step-4", "incomplete: a chunk's .distcp file is missing", ""}};
  unfinished.incomplete = true;  // an unfinished save without a problem: nothing to say
  const std::vector<Finding> f = FindingsFrom({ok, bad, unfinished});
  ASSERT_EQ(f.size(), 3u);
  EXPECT_EQ(f[0].id, "ckpt.corrupt");
  EXPECT_EQ(f[0].severity, Severity::kError);
  EXPECT_EQ(f[0].title, bad.problems[0].problem);
  EXPECT_EQ(f[0].where, "/c/step-3/optimizer.safetensors");
  EXPECT_EQ(f[0].evidence, "tensor \"w\"");
  EXPECT_NE(f[0].fix.find("newest good checkpoint"), std::string::npos);
  EXPECT_EQ(f[1].id, "ckpt.non_finite");
  EXPECT_EQ(f[1].severity, Severity::kError);
  EXPECT_EQ(f[1].evidence, "");
  EXPECT_EQ(f[2].id, "ckpt.incomplete");
  EXPECT_EQ(f[2].severity, Severity::kWarning);
}

TEST_F(CkptTest, HashMismatchAndTruncation) {
  auto p = WriteCheckpoint(dir_, Data(3), Fast());
  ASSERT_TRUE(p.ok());
  {
    std::fstream f(*p + "/rank0.json", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(2);
    f.put('X');
  }
  CheckResult c = CheckCheckpoint(*p, true);
  EXPECT_TRUE(c.complete);
  ASSERT_EQ(c.problems.size(), 1u);
  EXPECT_EQ(c.problems[0].file, *p + "/rank0.json");
  EXPECT_NE(c.problems[0].problem.find("hash mismatch"), std::string::npos);
  fs::resize_file(*p + "/model.safetensors", 20);
  c = CheckCheckpoint(*p, true);
  EXPECT_FALSE(c.complete);
  EXPECT_FALSE(c.incomplete);
  EXPECT_NE(c.problems[0].problem.find("truncated"), std::string::npos);
  auto latest = FindLatestComplete(dir_);
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(latest->path, "");
  EXPECT_EQ(latest->skipped.size(), 1u);
}

// The readers go through Os: checkpoints copied into a FakeOs are checked in memory, and
// damage done there (not on disk) is what they find.
TEST_F(CkptTest, ReadersRunOnAFakeOs) {
  ASSERT_TRUE(WriteCheckpoint(dir_, Data(3), Fast()).ok());
  ASSERT_TRUE(WriteCheckpoint(dir_, Data(5), Fast()).ok());
  FakeOs os;
  for (const auto& e : fs::recursive_directory_iterator(dir_)) {
    if (!e.is_regular_file()) continue;
    const std::string rel = fs::relative(e.path(), dir_).string();
    os.AddFile("/run/" + rel, *Os::Default()->ReadFile(e.path().string()));
  }
  auto latest = FindLatestComplete("/run", true, &os);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(latest->path, "/run/step-5");
  EXPECT_EQ(latest->step, 5);
  EXPECT_TRUE(LooksLikeCheckpoint("/run/step-5", &os));
  EXPECT_EQ(ListCheckpointDirs("/run", &os),
            (std::vector<std::string>{"/run/step-5", "/run/step-3"}));
  auto tensors = ReadSafetensors("/run/step-5/model.safetensors", &os);
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  ASSERT_EQ(tensors->size(), 2u);
  // Truncate step-5's model in memory only: latest falls back to step-3.
  std::string model = *os.ReadFile("/run/step-5/model.safetensors");
  os.AddFile("/run/step-5/model.safetensors", model.substr(0, 20));
  CheckResult c = CheckCheckpoint("/run/step-5", true, {}, &os);
  EXPECT_FALSE(c.complete);
  ASSERT_FALSE(c.problems.empty());
  EXPECT_NE(c.problems[0].problem.find("truncated: 20 bytes"), std::string::npos);
  latest = FindLatestComplete("/run", true, &os);
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(latest->path, "/run/step-3");
  ASSERT_EQ(latest->skipped.size(), 1u);
  EXPECT_TRUE(CheckCheckpoint(dir_ + "/step-5", true).ok());  // the disk is untouched
  InspectOptions o;
  o.os = &os;
  auto reports = InspectPath("/run", o);
  ASSERT_TRUE(reports.ok()) << reports.status();
  ASSERT_EQ(reports->size(), 2u);
  EXPECT_EQ((*reports)[0].path, "/run/step-3");
  EXPECT_TRUE((*reports)[0].ok());
  EXPECT_FALSE((*reports)[1].ok());
  EXPECT_FALSE((*reports)[0].tensors.empty());
  EXPECT_EQ(PlanResume("latest", "/run", &os)->path, "/run/step-3");
}

TEST_F(CkptTest, KeepPruning) {
  for (int s = 1; s <= 5; ++s) {
    CheckpointData d = Data(s);
    d.anomaly = s == 2;
    ASSERT_TRUE(WriteCheckpoint(dir_, d, Fast()).ok());
  }
  fs::create_directories(dir_ + "/step-6.tmp-1");
  auto removed = Prune(dir_, 2);
  ASSERT_TRUE(removed.ok());
  EXPECT_EQ(*removed, (std::vector<std::string>{dir_ + "/step-3", dir_ + "/step-1"}));
  EXPECT_TRUE(fs::exists(dir_ + "/anomaly-step-2"));
  EXPECT_TRUE(fs::exists(dir_ + "/step-4"));
  EXPECT_TRUE(fs::exists(dir_ + "/step-5"));
  EXPECT_TRUE(fs::exists(dir_ + "/step-6.tmp-1"));
}

TEST_F(CkptTest, AnomalyCheckpointsAreKeptAndListedButNeverLatest) {
  auto anomaly = [&](int64_t step) {
    CheckpointData d = Data(step);
    d.anomaly = true;
    return WriteCheckpoint(dir_, d, Fast());
  };
  ASSERT_TRUE(WriteCheckpoint(dir_, Data(2), Fast()).ok());
  ASSERT_TRUE(WriteCheckpoint(dir_, Data(3), Fast()).ok());
  auto a3 = anomaly(3);  // same step as a periodic one: no clash of names
  ASSERT_TRUE(a3.ok()) << a3.status();
  EXPECT_EQ(*a3, dir_ + "/anomaly-step-3");
  ASSERT_TRUE(anomaly(4).ok());
  // An anomaly checkpoint under a plain step-<N> name (meta.json "anomaly": true).
  ASSERT_TRUE(anomaly(5).ok());
  fs::rename(dir_ + "/anomaly-step-5", dir_ + "/step-5");
  EXPECT_TRUE(CheckCheckpoint(dir_ + "/anomaly-step-4", true).anomaly);
  EXPECT_TRUE(LooksLikeCheckpoint(dir_ + "/anomaly-step-4"));

  auto latest = FindLatestComplete(dir_);
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(latest->path, dir_ + "/step-3");
  EXPECT_EQ(latest->step, 3);
  EXPECT_TRUE(latest->skipped.empty());

  // inspect/verify still see every one of them, and they verify.
  std::vector<std::string> listed = ListCheckpointDirs(dir_);
  EXPECT_EQ(listed, (std::vector<std::string>{dir_ + "/step-5", dir_ + "/anomaly-step-4",
                                              dir_ + "/anomaly-step-3", dir_ + "/step-3",
                                              dir_ + "/step-2"}));
  auto reports = InspectPath(dir_, InspectOptions{});
  ASSERT_TRUE(reports.ok()) << reports.status();
  EXPECT_EQ(reports->size(), 5u);
  for (const auto& r : *reports) EXPECT_TRUE(r.ok()) << r.path;

  // keep 1: only step-2 goes; the anomaly ones stay whatever their name.
  auto removed = Prune(dir_, 1);
  ASSERT_TRUE(removed.ok());
  EXPECT_EQ(*removed, (std::vector<std::string>{dir_ + "/step-2"}));
  for (const char* kept : {"/step-3", "/anomaly-step-3", "/anomaly-step-4", "/step-5"}) {
    EXPECT_TRUE(fs::exists(dir_ + kept)) << kept;
  }
}

std::string CkptSourcePath(const std::string& rel) {
  const char* src = std::getenv("TS_SOURCE_DIR");
  return std::string(src ? src : TS_SOURCE_DIR) + "/" + rel;
}

// A torch 1.13 DCP folder (tests/data/pickle/make_fixtures.py): what Inspect lists must be
// what Python's own unpickling of .metadata says (dcp.expected.json).
TEST(DcpTest, MatchesPythonsReading) {
  std::ifstream in(CkptSourcePath("tests/data/pickle/dcp.expected.json"));
  const nlohmann::json expected = nlohmann::json::parse(in);
  auto meta = ReadDcpMetadata(CkptSourcePath("tests/data/pickle/dcp/.metadata"));
  ASSERT_TRUE(meta.ok()) << meta.status();
  EXPECT_TRUE(meta->has_storage_data);
  ASSERT_EQ(meta->entries.size(), expected.size());
  for (const DcpEntry& e : meta->entries) {
    ASSERT_TRUE(expected.contains(e.name)) << e.name;
    const nlohmann::json& x = expected[e.name];
    EXPECT_EQ(e.is_tensor, x["kind"] == "tensor") << e.name;
    if (e.is_tensor) {
      EXPECT_EQ(e.dtype, x["dtype"].get<std::string>()) << e.name;
      EXPECT_EQ(nlohmann::json(e.shape), x["size"]) << e.name;
      EXPECT_EQ(e.chunks, x["chunks"].get<int>()) << e.name;
    }
    nlohmann::json storage = nlohmann::json::array();
    for (const DcpStorage& s : e.storage) storage.push_back({s.file, s.offset, s.length});
    EXPECT_EQ(storage, x["storage"]) << e.name;
  }
  auto r = Inspect(CkptSourcePath("tests/data/pickle/dcp"), InspectOptions{});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->format, "dcp");
  EXPECT_TRUE(r->ok()) << r->problems[0].problem;
  EXPECT_EQ(r->tensors.size(), expected.size());
}

// tests/data/pickle/dcp_bad: torch's own metadata objects, damaged and pickled again.
TEST(DcpTest, DamagedMetadataIsNamed) {
  const std::string dir = CkptSourcePath("tests/data/pickle/dcp_bad");
  auto r = Inspect(dir, InspectOptions{});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->complete);
  std::vector<std::string> problems;
  for (const Problem& p : r->problems) {
    EXPECT_EQ(p.file, dir + "/.metadata");
    problems.push_back(p.problem);
  }
  EXPECT_EQ(problems,
            (std::vector<std::string>{
                "incomplete: the chunks of tensor \"model.0.weight\" cover 8 of its 12 elements",
                "corrupt: entry \"model.0.bias\" is stored in \"../outside.distcp\", outside the "
                "folder",
                "missing: entry \"optim.param_groups\" is not in storage_data",
                "missing: tensor \"half\" has 1 chunks, 0 of them in storage_data"}));
}

// verify: a .metadata whose dtype is not one of torch's (torch.float16 -> torch.flaot16, the
// same length, so the pickle stays well formed) is named, not passed.
TEST_F(CkptTest, DcpUnknownDtypeIsNamed) {
  fs::copy(CkptSourcePath("tests/data/pickle/dcp"), dir_);
  std::string bytes;
  {
    std::ifstream in(dir_ + "/.metadata", std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const size_t at = bytes.find("float16");
  ASSERT_NE(at, std::string::npos);
  bytes.replace(at, 7, "flaot16");
  std::ofstream(dir_ + "/.metadata", std::ios::binary | std::ios::trunc) << bytes;
  auto r = Inspect(dir_, InspectOptions{});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->ok());
  ASSERT_EQ(r->problems.size(), 1u);
  EXPECT_EQ(r->problems[0].file, dir_ + "/.metadata");
  EXPECT_EQ(r->problems[0].problem,
            "corrupt: tensor \"half\" has dtype \"flaot16\", which is not a torch dtype");
  EXPECT_TRUE(IsTorchDtypeName("bfloat16"));
  EXPECT_TRUE(IsTorchDtypeName("float8_e4m3fn"));
  EXPECT_FALSE(IsTorchDtypeName("unknown"));
}

// A trainscope checkpoint whose rank<R>.json matches the manifest but is not a JSON object
// (resume would refuse it) is reported, hash or no hash.
TEST_F(CkptTest, RankJsonNotJsonIsReported) {
  const std::string dir = CkptSourcePath("tests/data/ckpt/bad_json/step-20");
  for (bool hash : {true, false}) {
    CheckResult c = CheckCheckpoint(dir, hash);
    EXPECT_TRUE(c.complete);
    ASSERT_EQ(c.problems.size(), 2u);
    EXPECT_EQ(c.problems[0].file, dir + "/rank0.json");
    EXPECT_EQ(c.problems[0].problem.rfind("corrupt: not valid JSON at byte 1: ", 0), 0u)
        << c.problems[0].problem;
    EXPECT_EQ(c.problems[1].file, dir + "/rank1.json");
    EXPECT_EQ(c.problems[1].problem, "corrupt: not a JSON object");
  }
}

// verify: a chunk's file missing or cut short, a .metadata that is no pickle.
TEST_F(CkptTest, DcpMissingAndTruncatedChunks) {
  fs::copy(CkptSourcePath("tests/data/pickle/dcp"), dir_);
  auto ok = Inspect(dir_, InspectOptions{});
  ASSERT_TRUE(ok.ok()) << ok.status();
  ASSERT_TRUE(ok->ok());
  fs::remove(dir_ + "/__0_0.distcp");            // model.0.weight
  fs::resize_file(dir_ + "/__0_1.distcp", 100);  // model.0.bias
  auto r = Inspect(dir_, InspectOptions{});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->complete);
  ASSERT_EQ(r->problems.size(), 2u);
  EXPECT_EQ(r->problems[0].file, dir_ + "/__0_0.distcp");
  EXPECT_EQ(r->problems[0].problem,
            "missing: holds chunks of \"model.0.weight\" (named by .metadata) but is absent");
  EXPECT_EQ(r->problems[1].problem,
            "truncated: 100 bytes, but \"model.0.bias\" is stored up to byte 747");
  {
    std::ofstream out(dir_ + "/.metadata", std::ios::binary | std::ios::trunc);
    out << std::string("\x80\x04\x95", 3);
  }
  auto bad = Inspect(dir_, InspectOptions{});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            dir_ + "/.metadata: byte 2: FRAME: needs 8 bytes, 0 left (truncated)");
}

// diff of DCP folders compares values: each chunk's torch.save archive (torch 1.13's here;
// tests/real_tools/test_dcp.py does the same with torch 2.x saves, sharded ones too).
TEST_F(CkptTest, DcpDiffComparesValues) {
  const std::string src = CkptSourcePath("tests/data/pickle/dcp");
  fs::copy(src, dir_);
  auto same = Diff(src, dir_, InspectOptions{});
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_TRUE(same->same());
  for (const TensorDiff& t : same->tensors) EXPECT_EQ(t.change, "") << t.name;  // all read

  auto meta = ReadDcpMetadata(dir_ + "/.metadata");
  ASSERT_TRUE(meta.ok()) << meta.status();
  auto e = std::find_if(meta->entries.begin(), meta->entries.end(),
                        [](const DcpEntry& x) { return x.name == "model.0.weight"; });
  ASSERT_NE(e, meta->entries.end());
  ASSERT_EQ(e->storage.size(), 1u);
  EXPECT_EQ(e->storage[0].chunk_offsets, (std::vector<uint64_t>{0, 0}));
  auto chunk = ReadDcpChunk(dir_, e->storage[0]);
  ASSERT_TRUE(chunk.ok()) << chunk.status();
  EXPECT_EQ(chunk->dtype, "F32");
  EXPECT_EQ(chunk->shape, (std::vector<uint64_t>{3, 4}));
  EXPECT_EQ(chunk->bytes, 48u);
  // Element [1, 1] + 0.5, written in place.
  std::fstream f(chunk->file, std::ios::in | std::ios::out | std::ios::binary);
  float x;
  f.seekg(chunk->offset + 5 * 4);
  f.read(reinterpret_cast<char*>(&x), 4);
  x += 0.5f;
  f.seekp(chunk->offset + 5 * 4);
  f.write(reinterpret_cast<const char*>(&x), 4);
  f.close();
  auto d = Diff(src, dir_, InspectOptions{});
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_FALSE(d->same());
  EXPECT_EQ(d->first_different, "model.0.weight");
  for (const TensorDiff& t : d->tensors) {
    EXPECT_EQ(t.differs, t.name == "model.0.weight") << t.name;
    if (t.differs) {
      EXPECT_NEAR(t.max_abs, 0.5, 1e-6);
    }
  }
}

// An archive whose end record defers to zip64 (as one over 4 GiB does) is read through the
// zip64 record; without its locator it is an error naming the file and the byte range.
TEST_F(CkptTest, DcpChunkThroughZip64) {
  fs::copy(CkptSourcePath("tests/data/pickle/dcp"), dir_);
  const std::string file = dir_ + "/__0_0.distcp";  // model.0.weight, 747 bytes
  std::string bytes;
  {
    std::ifstream in(file, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  const size_t end = bytes.size() - 22;
  ASSERT_EQ(bytes.compare(end, 4, "PK\x05\x06"), 0);
  auto write = [&] { std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes; };
  bytes.replace(end + 16, 4, "\xff\xff\xff\xff");  // central directory offset: see zip64
  write();
  const DcpStorage s{"__0_0.distcp", 0, bytes.size()};
  auto chunk = ReadDcpChunk(dir_, s);
  ASSERT_TRUE(chunk.ok()) << chunk.status();
  EXPECT_EQ(chunk->shape, (std::vector<uint64_t>{3, 4}));
  bytes.replace(bytes.find("PK\x06\x07"), 4, "XXXX");
  write();
  chunk = ReadDcpChunk(dir_, s);
  EXPECT_EQ(chunk.status().message(),
            file + ": bytes [0, 747): zip64 end record without its locator");
}

TEST(SafetensorsTest, HeaderRules) {
  // data section of 8 bytes: two F32 tensors, then bad variants
  auto parse = [](const std::string& h) { return ParseHeader("x", h, 8 + h.size() + 8); };
  EXPECT_TRUE(parse(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                    R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})")
                  .ok());
  EXPECT_FALSE(parse(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                     R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})")
                   .ok());  // overlap
  EXPECT_FALSE(parse(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})").ok());
  EXPECT_FALSE(parse(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})").ok());  // gap
  EXPECT_FALSE(parse(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,80]}})").ok());
  EXPECT_FALSE(parse("[1]").ok());
  EXPECT_FALSE(parse("{").ok());
}

TEST(SafetensorsTest, HalfAndBFloat16) {
  const uint16_t h[] = {0x3c00, 0xc000, 0x7c00, 0x7e00};  // 1, -2, inf, nan
  StatsAccumulator a("F16");
  a.Add(reinterpret_cast<const char*>(h), sizeof(h));
  TensorStats s = a.Finish();
  EXPECT_EQ(s.count, 4u);
  EXPECT_EQ(s.nonfinite, 2u);
  EXPECT_DOUBLE_EQ(s.min, -2);
  EXPECT_DOUBLE_EQ(s.max, 1);
  const uint16_t b[] = {0x3f80, 0x4040};  // 1, 3
  StatsAccumulator c("BF16");
  c.Add(reinterpret_cast<const char*>(b), sizeof(b));
  EXPECT_DOUBLE_EQ(c.Finish().max, 3);
}

// The shared JSON policy in the safetensors header reader: a number out of range or deep
// nesting is one line naming the file and the byte (8 + the offset in the header).
TEST(Safetensors, HeaderNumbersOutOfRangeAndDeepNestingAreOneLine) {
  const std::pair<std::string, std::string> cases[] = {
      {R"({"w":{"dtype":"F32","shape":[1e309],"data_offsets":[0,4]}})",
       "m.safetensors: byte 37: the safetensors header is not valid JSON: "
       "[json.exception.out_of_range.406] number overflow parsing '1e309'"},
      {R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,18446744073709551616]}})",
       "m.safetensors: byte 58: the safetensors header is not valid JSON: number out of range: "
       "integer '18446744073709551616' does not fit in 64 bits"},
      {"{\"w\":" + std::string(100000, '[') + std::string(100000, ']') + "}",
       "m.safetensors: byte 76: the safetensors header is nested deeper than 64 levels"},
  };
  for (const auto& [header, want] : cases) {
    auto h = ParseHeader("m.safetensors", header, 8 + header.size() + 4);
    ASSERT_FALSE(h.ok()) << header.substr(0, 60);
    EXPECT_EQ(h.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(h.status().message(), want);
  }
}

}  // namespace
}  // namespace trainscope::ckpt
