// The distributed scan against the single-process scan: share planning, and 1, 2 and 3 ranks
// (threads with one gloo communicator each, on loopback) on a corpus with planted exact,
// normalised and near duplicates, split by byte ranges and whole files.
#include "trainscope/data/distributed.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "trainscope/comm/comm.h"

static const bool kDistTestIgnoresSigpipe = [] {
  signal(SIGPIPE, SIG_IGN);
  return true;
}();

namespace trainscope::data {
namespace {

InputFile Jsonl(uint64_t size) {
  InputFile f;
  f.format = InputFormat::kJsonl;
  f.size_bytes = size;
  return f;
}

TEST(PlanSharesTest, ContiguousSharesOnLineStarts) {
  std::vector<InputFile> in = {Jsonl(1000), Jsonl(10), Jsonl(500)};
  in[1].compression = InputFile::kGzip;  // not splittable
  // Lines of 7 bytes everywhere: the next line start after offset o is the multiple of 7 >= o.
  auto next = [&](uint32_t f, uint64_t off) -> absl::StatusOr<uint64_t> {
    return std::min<uint64_t>((off + 6) / 7 * 7, in[f].size_bytes);
  };
  for (int world = 1; world <= 5; ++world) {
    auto plan = PlanShares(in, world, next);
    ASSERT_TRUE(plan.ok());
    ASSERT_EQ(plan->size(), static_cast<size_t>(world));
    // Concatenated in rank order the pieces cover every input exactly once, in order.
    uint32_t f = 0;
    uint64_t at = 0;
    for (const auto& share : *plan) {
      for (const auto& p : share) {
        if (at == in[f].size_bytes) {
          ++f;
          at = 0;
        }
        ASSERT_EQ(p.input, f);
        ASSERT_EQ(p.begin, at);
        EXPECT_TRUE(p.begin % 7 == 0) << p.begin;
        if (p.input == 1) {
          EXPECT_TRUE(p.whole);
        }
        at = p.end;
      }
    }
    EXPECT_EQ(f, 2u);
    EXPECT_EQ(at, 500u);
  }
  auto two = PlanShares(in, 2, next);
  ASSERT_TRUE(two.ok());
  // Half of 1510 bytes is 755, inside the first file: cut at the next line start, 756.
  ASSERT_FALSE((*two)[0].empty());
  EXPECT_EQ((*two)[0].back().end, 756u);
  EXPECT_EQ((*two)[1].front().begin, 756u);
}

TEST(RankOutputPathTest, RankBeforeTheExtensions) {
  EXPECT_EQ(RankOutputPath("out.jsonl.zst", 3), "out.rank3.jsonl.zst");
  EXPECT_EQ(RankOutputPath("/a.b/c/out.jsonl", 0), "/a.b/c/out.rank0.jsonl");
  EXPECT_EQ(RankOutputPath("out", 1), "out.rank1");
  EXPECT_EQ(RankOutputPath("dir/.hidden.txt", 2), "dir/.hidden.rank2.txt");
  EXPECT_EQ(RankOutputPath("x/clean.v2.jsonl.gz", 4), "x/clean.v2.rank4.jsonl.gz");
}

int DistFreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

std::string ReadFile(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

class DistributedScanTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           absl::StrCat("ts_dist_test_", ::getpid(), "_", reinterpret_cast<uintptr_t>(this));
    std::filesystem::create_directories(dir_);
    // Fresh documents of random words, then exact copies, case/space variants and copies
    // with one word changed, spread over two JSONL files and one text file.
    std::mt19937 rng(11);
    auto word = [&] { return absl::StrCat("w", rng() % 2000); };
    std::vector<std::string> docs;
    for (int i = 0; i < 600; ++i) {
      const uint32_t r = rng() % 100;
      if (!docs.empty() && r < 10) {
        docs.push_back(docs[rng() % docs.size()]);
      } else if (!docs.empty() && r < 14) {
        std::string t = docs[rng() % docs.size()];
        for (char& c : t) c = static_cast<char>(std::toupper(c));
        docs.push_back("  " + t);
      } else if (!docs.empty() && r < 24) {
        std::string t = docs[rng() % docs.size()];
        const size_t sp = t.find(' ', t.size() / 2);
        if (sp != std::string::npos) t.insert(sp, " changed");
        docs.push_back(t);
      } else {
        std::string t;
        const int n = 40 + rng() % 80;
        for (int k = 0; k < n; ++k)
          absl::StrAppend(&t, k ? " " : "", word(), k % 10 == 9 ? "." : "");
        docs.push_back(t + ".");
      }
    }
    auto write = [&](const std::string& name, size_t from, size_t to, bool jsonl) {
      std::ofstream f(dir_ / name);
      for (size_t i = from; i < to; ++i) {
        if (jsonl) {
          f << "{\"text\": \"" << docs[i] << "\""
            << (i % 3 == 0 ? absl::StrCat(", \"id\": \"d", i, "\"") : "") << "}\n";
          if (i == from + 50) f << "{broken\n";
        } else {
          f << docs[i] << "\n";
        }
      }
    };
    write("a.jsonl", 0, 350, true);
    write("b.txt", 350, 420, false);
    write("c.jsonl", 420, 600, true);
    auto in = ExpandInputs(
        {(dir_ / "a.jsonl").string(), (dir_ / "b.txt").string(), (dir_ / "c.jsonl").string()},
        InputFormat::kAuto);
    ASSERT_TRUE(in.ok()) << in.status();
    inputs_ = *in;
    opt_.threads = 2;
    opt_.progress = false;
    opt_.tmp_dir = dir_.string();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::filesystem::path dir_;
  std::vector<InputFile> inputs_;
  ScanOptions opt_;
};

TEST_F(DistributedScanTest, SameReportAndVerdictsAsOneProcess) {
  ScanOptions single = opt_;
  single.verdicts_path = (dir_ / "single.verdicts").string();
  auto ref = RunScan(inputs_, single);
  ASSERT_TRUE(ref.ok()) << ref.status();
  ASSERT_GT(ref->exact_duplicate_docs, 20u);
  ASSERT_GT(ref->near_duplicate_docs, ref->exact_duplicate_docs + 20);
  ASSERT_GT(ref->bad.total(), 0u);
  nlohmann::json want = ScanResultToJson(*ref, single);
  want.erase("wall_s");
  const std::string want_verdicts = ReadFile(single.verdicts_path);
  for (int world = 1; world <= 3; ++world) {
    SCOPED_TRACE(absl::StrCat(world, " ranks"));
    const int port = DistFreePort();
    std::vector<absl::StatusOr<ScanResult>> got(world, absl::UnknownError("not run"));
    ScanOptions o = opt_;
    o.verdicts_path = (dir_ / absl::StrCat("dist", world, ".verdicts")).string();
    std::vector<std::thread> ranks;
    for (int r = 0; r < world; ++r) {
      ranks.emplace_back([&, r] {
        comm::CommOptions co;
        co.rank = r;
        co.world_size = world;
        co.master_port = port;
        co.timeout = std::chrono::milliseconds(30000);
        auto c = comm::Communicator::Create(co);
        if (!c.ok()) {
          got[r] = c.status();
          return;
        }
        got[r] = RunDistributedScan(inputs_, o, c->get());
      });
    }
    for (auto& t : ranks) t.join();
    for (int r = 0; r < world; ++r)
      ASSERT_TRUE(got[r].ok()) << "rank " << r << ": " << got[r].status();
    nlohmann::json have = ScanResultToJson(*got[0], o);
    have.erase("wall_s");
    EXPECT_EQ(have.dump(1), want.dump(1));
    EXPECT_EQ(ReadFile(o.verdicts_path), want_verdicts);
    // Every rank read a part: the shares are not empty, and the others' add up to less.
    uint64_t others = 0;
    for (int r = 1; r < world; ++r) {
      EXPECT_GT(got[r]->docs, 0u) << "rank " << r;
      others += got[r]->docs;
    }
    EXPECT_LT(others, ref->docs);
  }
}

// --resume: the first run saves each rank's share, the second loads them instead of
// analysing the inputs again; other analysis options rescan.
TEST_F(DistributedScanTest, ResumeLoadsTheSavedShares) {
  const std::string state = (dir_ / "state").string();
  auto run = [&](const ScanOptions& o, std::vector<DistributedStats>* stats) {
    const int world = 2, port = DistFreePort();
    std::vector<absl::StatusOr<ScanResult>> got(world, absl::UnknownError("not run"));
    stats->assign(world, {});
    std::vector<std::thread> ranks;
    for (int r = 0; r < world; ++r) {
      ranks.emplace_back([&, r] {
        comm::CommOptions co;
        co.rank = r;
        co.world_size = world;
        co.master_port = port;
        co.timeout = std::chrono::milliseconds(30000);
        auto c = comm::Communicator::Create(co);
        if (!c.ok()) {
          got[r] = c.status();
          return;
        }
        DistributedOptions dopt;
        dopt.resume_dir = state;
        got[r] = RunDistributedScan(inputs_, o, c->get(), nullptr, &(*stats)[r], dopt);
      });
    }
    for (auto& t : ranks) t.join();
    for (int r = 0; r < world; ++r) EXPECT_TRUE(got[r].ok()) << r << ": " << got[r].status();
    nlohmann::json j = got[0].ok() ? ScanResultToJson(*got[0], o) : nlohmann::json();
    j.erase("wall_s");
    return j;
  };
  auto ref = RunScan(inputs_, opt_);
  ASSERT_TRUE(ref.ok());
  nlohmann::json want = ScanResultToJson(*ref, opt_);
  want.erase("wall_s");
  std::vector<DistributedStats> st;
  EXPECT_EQ(run(opt_, &st).dump(1), want.dump(1));
  EXPECT_FALSE(st[0].resumed || st[1].resumed);
  EXPECT_TRUE(std::filesystem::exists(dir_ / "state" / "share.rank1.meta"));
  // The same bytes changed in a.jsonl (its size and line starts kept, so the same job):
  // a resumed share does not analyse its inputs again, so the report stays the first one's.
  {
    std::string a = ReadFile((dir_ / "a.jsonl").string());
    for (size_t i = 0; i < a.size() / 2; ++i) a[i] = a[i] == '1' ? '2' : a[i];
    std::ofstream((dir_ / "a.jsonl").string(), std::ios::binary) << a;
  }
  auto changed = RunScan(inputs_, opt_);  // what a rescan would report
  ASSERT_TRUE(changed.ok());
  nlohmann::json changed_j = ScanResultToJson(*changed, opt_);
  changed_j.erase("wall_s");
  ASSERT_NE(changed_j.dump(1), want.dump(1));
  EXPECT_EQ(run(opt_, &st).dump(1), want.dump(1));
  EXPECT_TRUE(st[0].resumed && st[1].resumed);
  ScanOptions other = opt_;
  other.ngram = 4;
  run(other, &st);
  EXPECT_FALSE(st[0].resumed || st[1].resumed);
}

}  // namespace
}  // namespace trainscope::data
