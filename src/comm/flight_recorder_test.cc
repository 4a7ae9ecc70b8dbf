// Flight recorder tests: the ring on its own (wrap, states, timestamps, tags, threads,
// the dump), and filled by real communicators (gloo over loopback, ranks as threads):
// sequence numbers that agree across ranks whatever p2p traffic each rank had, caller
// tags, observers, and failed ops.
#include "trainscope/comm/flight_recorder.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "trainscope/comm/comm.h"

namespace trainscope::comm {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Json = nlohmann::json;

std::shared_ptr<FlightRecorder> NewRecorder(size_t capacity, int rank = 0, int world = 1) {
  FlightRecorderOptions o;
  o.capacity = capacity;
  o.rank = rank;
  o.world_size = world;
  auto r = FlightRecorder::Create(o);
  EXPECT_TRUE(r.ok()) << r.status();
  return *r;
}

int AddGroup(FlightRecorder& fr, std::vector<int> ranks, const std::string& name = "0",
             const std::string& backend = "gloo") {
  ProcessGroupInfo pg;
  pg.name = name;
  pg.ranks = std::move(ranks);
  pg.backend = backend;
  pg.timeout_ms = 5000;
  auto id = fr.RegisterProcessGroup(pg);
  EXPECT_TRUE(id.ok()) << id.status();
  return id.ok() ? *id : -1;
}

FlightOp Collective(int pg, int64_t seq, int64_t numel = 16, int64_t t = 1000) {
  FlightOp op;
  op.pg_id = pg;
  op.collective_seq_id = seq;
  op.op_id = seq;
  op.op = OpType::kAllReduce;
  op.input_numel = op.output_numel = numel;
  op.enqueue_mono_ns = t;
  return op;
}

// ---------------------------------------------------------------- the ring on its own

TEST(FlightRecorder, RejectsBadOptions) {
  FlightRecorderOptions o;
  o.capacity = 0;
  EXPECT_EQ(FlightRecorder::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  o.capacity = FlightRecorder::kMaxCapacity + 1;
  EXPECT_EQ(FlightRecorder::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  o.capacity = 4;
  o.rank = 2;
  o.world_size = 2;
  EXPECT_EQ(FlightRecorder::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  auto fr = NewRecorder(4);
  AddGroup(*fr, {0});
  ProcessGroupInfo dup;
  dup.name = "0";
  dup.ranks = {0};
  EXPECT_EQ(fr->RegisterProcessGroup(dup).status().code(), absl::StatusCode::kAlreadyExists);
  dup.name = "";
  EXPECT_EQ(fr->RegisterProcessGroup(dup).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(FlightRecorder, RingWrapKeepsTheNewestInOrder) {
  auto fr = NewRecorder(5);
  int pg = AddGroup(*fr, {0});
  std::vector<int64_t> ids;
  for (int k = 1; k <= 12; ++k) ids.push_back(fr->RecordScheduled(Collective(pg, k, k, 100 * k)));
  EXPECT_EQ(ids.front(), 0);
  EXPECT_EQ(ids.back(), 11);
  EXPECT_EQ(fr->recorded(), 12);
  // id 2 lived in the slot that id 7 now holds: late news about it changes nothing.
  fr->RecordStarted(2, 5000);
  fr->RecordCompleted(2, 6000, absl::OkStatus());
  std::vector<FlightEntry> s = fr->Snapshot();
  ASSERT_EQ(s.size(), 5u);
  for (size_t i = 0; i < s.size(); ++i) {
    EXPECT_EQ(s[i].record_id, static_cast<int64_t>(7 + i));
    EXPECT_EQ(s[i].collective_seq_id, static_cast<int64_t>(8 + i));
    EXPECT_EQ(s[i].input_numel, static_cast<int64_t>(8 + i));
    EXPECT_EQ(s[i].state(), FlightState::kScheduled);
  }
  // Before the ring fills, the snapshot is just what was recorded.
  auto small = NewRecorder(5);
  AddGroup(*small, {0});
  small->RecordScheduled(Collective(0, 1));
  small->RecordScheduled(Collective(0, 2));
  s = small->Snapshot();
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].record_id, 0);
  EXPECT_EQ(s[1].record_id, 1);
}

TEST(FlightRecorder, StatesAndTimestampsAreMonotone) {
  auto fr = NewRecorder(8);
  int pg = AddGroup(*fr, {0});
  int64_t id = fr->RecordScheduled(Collective(pg, 1, 16, 1'000'000));
  FlightEntry e = fr->Snapshot().at(0);
  EXPECT_EQ(e.state(), FlightState::kScheduled);
  EXPECT_GT(e.time_created_ns, 1'500'000'000LL * 1'000'000'000LL);  // Unix epoch ns (after 2017)
  EXPECT_EQ(e.time_discovered_started_ns, 0);
  fr->RecordStarted(id, 1'000'500);
  e = fr->Snapshot().at(0);
  EXPECT_EQ(e.state(), FlightState::kStarted);
  EXPECT_EQ(e.time_discovered_started_ns - e.time_created_ns, 500);  // same clock, shifted
  fr->RecordStarted(id, 9'000'000);                                  // the first start stays
  EXPECT_EQ(fr->Snapshot().at(0).time_discovered_started_ns, e.time_discovered_started_ns);
  fr->RecordCompleted(id, 1'002'500, absl::OkStatus());
  e = fr->Snapshot().at(0);
  EXPECT_EQ(e.state(), FlightState::kCompleted);
  EXPECT_TRUE(e.retired);
  EXPECT_EQ(e.time_discovered_completed_ns - e.time_discovered_started_ns, 2000);
  // A completion reported without a start (or with an earlier clock reading) never makes
  // time run backwards.
  int64_t id2 = fr->RecordScheduled(Collective(pg, 2, 16, 2'000'000));
  fr->RecordCompleted(id2, 1'999'000, absl::OkStatus());
  FlightEntry e2 = fr->Snapshot().at(1);
  EXPECT_EQ(e2.state(), FlightState::kCompleted);
  EXPECT_LE(e2.time_created_ns, e2.time_discovered_started_ns);
  EXPECT_LE(e2.time_discovered_started_ns, e2.time_discovered_completed_ns);
}

TEST(FlightRecorder, FailedOpIsRetiredButNotCompleted) {
  auto fr = NewRecorder(4);
  int pg = AddGroup(*fr, {0, 1});
  int64_t id = fr->RecordScheduled(Collective(pg, 1));
  fr->RecordStarted(id, 2000);
  fr->RecordCompleted(id, 3000, absl::DeadlineExceededError("all_reduce #1 did not finish"));
  FlightEntry e = fr->Snapshot().at(0);
  EXPECT_EQ(e.state(), FlightState::kStarted);
  EXPECT_TRUE(e.retired);
  EXPECT_EQ(e.time_discovered_completed_ns, 0);
  EXPECT_THAT(std::string(e.error), HasSubstr("all_reduce #1 did not finish"));
  Json j = Json::parse(fr->DumpJsonString());
  EXPECT_EQ(j["entries"][0]["state"], "started");
  EXPECT_EQ(j["entries"][0]["retired"], true);
  EXPECT_EQ(j["entries"][0]["time_discovered_completed_ns"], 0);
  EXPECT_FALSE(j["entries"][0].contains("duration_ms"));
  EXPECT_THAT(j["entries"][0]["error"].get<std::string>(), HasSubstr("DEADLINE_EXCEEDED"));
  EXPECT_EQ(j["pg_status"]["0"]["last_started_collective"], "1");
  EXPECT_EQ(j["pg_status"]["0"]["last_completed_collective"], "-1");
}

TEST(FlightRecorder, CallerTagsNestAndAreCut) {
  EXPECT_EQ(CurrentCallerTag(), "");
  {
    ScopedCallerTag outer("step 17");
    EXPECT_EQ(CurrentCallerTag(), "step 17");
    {
      ScopedCallerTag inner("step 17 backward bucket 3");
      EXPECT_EQ(CurrentCallerTag(), "step 17 backward bucket 3");
    }
    EXPECT_EQ(CurrentCallerTag(), "step 17");
    std::thread([] { EXPECT_EQ(CurrentCallerTag(), ""); }).join();  // per thread
  }
  EXPECT_EQ(CurrentCallerTag(), "");
  // Long tags are cut at kMaxCallerTagBytes, never inside a UTF-8 sequence.
  std::string tag(kMaxCallerTagBytes - 1, 'x');
  tag += "\xc3\xa9\xc3\xa9";  // "éé": the first one straddles the limit
  ScopedCallerTag cut(tag);
  EXPECT_EQ(CurrentCallerTag().size(), kMaxCallerTagBytes - 1);
  ScopedCallerTag exact(std::string(kMaxCallerTagBytes + 10, 'y'));
  EXPECT_EQ(CurrentCallerTag(), std::string(kMaxCallerTagBytes, 'y'));
}

TEST(FlightRecorder, EntriesCarryTheIssuingThreadAndItsTag) {
  auto fr = NewRecorder(16);
  int pg = AddGroup(*fr, {0});
  {
    ScopedCallerTag tag("step 3 forward");
    fr->RecordScheduled(Collective(pg, 1));
  }
  fr->RecordScheduled(Collective(pg, 2));
  std::thread([&] {
    pthread_setname_np(pthread_self(), "fr-test-worker");
    ScopedCallerTag tag("worker");
    fr->RecordScheduled(Collective(pg, 3));
  }).join();
  auto s = fr->Snapshot();
  ASSERT_EQ(s.size(), 3u);
  EXPECT_STREQ(s[0].caller, "step 3 forward");
  EXPECT_STREQ(s[1].caller, "");
  EXPECT_STREQ(s[2].caller, "worker");
  EXPECT_EQ(s[0].thread_id, static_cast<int64_t>(::syscall(SYS_gettid)));
  EXPECT_NE(s[2].thread_id, s[0].thread_id);
  EXPECT_STREQ(s[2].thread_name, "fr-test-worker");
}

// Two threads record while a third dumps: every entry is whole (its fields agree with
// each other), ids are consecutive, and ASan/TSan builds see no race.
TEST(FlightRecorder, ConcurrentRecordingKeepsEntriesWhole) {
  auto fr = NewRecorder(1000);
  int pg = AddGroup(*fr, {0});
  constexpr int kOps = 20000;
  std::atomic<bool> done{false};
  auto worker = [&](int t) {
    std::string tag = "thread " + std::to_string(t);
    ScopedCallerTag scoped(tag);
    for (int k = 1; k <= kOps; ++k) {
      // numel encodes (thread, k) so that a torn entry would show.
      FlightOp op = Collective(pg, k, t * 1'000'000 + k, k);
      int64_t id = fr->RecordScheduled(op);
      fr->RecordStarted(id, k + 1);
      fr->RecordCompleted(id, k + 2, absl::OkStatus());
    }
  };
  std::thread dumper([&] {
    while (!done.load()) {
      Json j = Json::parse(fr->DumpJsonString());
      ASSERT_TRUE(j["entries"].is_array());
    }
  });
  std::thread a(worker, 1), b(worker, 2);
  a.join();
  b.join();
  done = true;
  dumper.join();
  EXPECT_EQ(fr->recorded(), 2 * kOps);
  auto s = fr->Snapshot();
  ASSERT_EQ(s.size(), 1000u);
  for (size_t i = 0; i < s.size(); ++i) {
    const FlightEntry& e = s[i];
    EXPECT_EQ(e.record_id, 2 * kOps - 1000 + static_cast<int64_t>(i));
    int t = static_cast<int>(e.input_numel / 1'000'000);
    ASSERT_TRUE(t == 1 || t == 2) << e.input_numel;
    EXPECT_EQ(e.input_numel % 1'000'000, e.collective_seq_id);
    EXPECT_EQ(std::string(e.caller), "thread " + std::to_string(t));
    EXPECT_EQ(e.state(), FlightState::kCompleted);
  }
}

// ---------------------------------------------------------------- the dump

TEST(FlightRecorderDump, HasPyTorchKeysAndParsesBack) {
  auto fr = NewRecorder(8, /*rank=*/0, /*world=*/2);
  int pg = AddGroup(*fr, {0, 1});
  int64_t a = fr->RecordScheduled(Collective(pg, 1, 12));
  fr->RecordStarted(a, 2000);
  fr->RecordCompleted(a, 3000, absl::OkStatus());
  FlightOp send;
  send.pg_id = pg;
  send.collective_seq_id = 1;
  send.p2p_seq_id = 1;
  send.op_id = 2;
  send.op = OpType::kSend;
  send.dtype = DType::kBFloat16;
  send.input_numel = send.output_numel = 5;
  send.peer = 1;
  fr->RecordScheduled(send);
  FlightOp gather = Collective(pg, 2, 4);
  gather.op = OpType::kAllGather;
  gather.output_numel = 8;
  gather.p2p_seq_id = 1;
  gather.op_id = 3;
  fr->RecordScheduled(gather);
  FlightOp barrier = Collective(pg, 3, 0);
  barrier.op = OpType::kBarrier;
  fr->RecordScheduled(barrier);

  Json j = Json::parse(fr->DumpJsonString());
  EXPECT_EQ(j["version"], "2.10");
  EXPECT_TRUE(j.contains("comm_lib_version"));
  EXPECT_EQ(j["pg_config"]["0"]["name"], "0");
  EXPECT_EQ(j["pg_config"]["0"]["desc"], "default_pg");
  EXPECT_EQ(j["pg_config"]["0"]["ranks"], "[0, 1]");
  EXPECT_EQ(j["pg_status"]["0"]["last_enqueued_collective"], "3");
  EXPECT_EQ(j["pg_status"]["0"]["last_started_collective"], "1");
  EXPECT_EQ(j["pg_status"]["0"]["last_completed_collective"], "1");
  EXPECT_EQ(j["rank"], 0);
  EXPECT_EQ(j["world_size"], 2);
  EXPECT_EQ(j["backend"], "gloo");
  EXPECT_EQ(j["trainscope"]["format"], "trainscope.flight_recorder");
  EXPECT_EQ(j["trainscope"]["version"], 1);
  EXPECT_EQ(j["trainscope"]["recorded"], 4);
  ASSERT_EQ(j["entries"].size(), 4u);

  const Json& e0 = j["entries"][0];
  for (const char* key : {"record_id",
                          "pg_id",
                          "process_group",
                          "thread_name",
                          "thread_id",
                          "collective_seq_id",
                          "p2p_seq_id",
                          "op_id",
                          "profiling_name",
                          "time_created_ns",
                          "duration_ms",
                          "input_sizes",
                          "input_dtypes",
                          "output_sizes",
                          "output_dtypes",
                          "state",
                          "time_discovered_started_ns",
                          "time_discovered_completed_ns",
                          "retired",
                          "timeout_ms",
                          "is_p2p",
                          "frames",
                          "caller"}) {
    EXPECT_TRUE(e0.contains(key)) << key;
  }
  EXPECT_EQ(e0["process_group"], Json::array({"0", "default_pg"}));
  EXPECT_EQ(e0["profiling_name"], "gloo:all_reduce");
  EXPECT_EQ(e0["input_sizes"], Json::parse("[[12]]"));
  EXPECT_EQ(e0["output_sizes"], Json::parse("[[12]]"));
  EXPECT_EQ(e0["input_dtypes"], Json::array({"Float"}));
  EXPECT_EQ(e0["state"], "completed");
  EXPECT_EQ(e0["retired"], true);
  EXPECT_EQ(e0["timeout_ms"], 5000);
  EXPECT_EQ(e0["is_p2p"], false);
  EXPECT_TRUE(e0["thread_id"].is_string());  // as PyTorch writes it
  EXPECT_DOUBLE_EQ(e0["duration_ms"].get<double>(), 0.001);

  const Json& e1 = j["entries"][1];
  EXPECT_EQ(e1["profiling_name"], "gloo:send 0->1");
  EXPECT_EQ(e1["is_p2p"], true);
  EXPECT_EQ(e1["p2p_seq_id"], 1);
  EXPECT_EQ(e1["peer"], 1);
  EXPECT_EQ(e1["input_dtypes"], Json::array({"BFloat16"}));
  EXPECT_EQ(e1["state"], "scheduled");
  EXPECT_EQ(e1["time_discovered_started_ns"], 0);
  EXPECT_FALSE(e1.contains("duration_ms"));
  const Json& e2 = j["entries"][2];
  EXPECT_EQ(e2["input_sizes"], Json::parse("[[4]]"));
  EXPECT_EQ(e2["output_sizes"], Json::parse("[[8]]"));
  const Json& e3 = j["entries"][3];
  EXPECT_EQ(e3["profiling_name"], "gloo:barrier");
  EXPECT_EQ(e3["input_sizes"], Json::array());

  // PyTorch's analyser only takes nccl/xccl names; the option rewrites the prefix.
  FlightDumpOptions nccl;
  nccl.nccl_profiling_names = true;
  Json n = Json::parse(fr->DumpJsonString(nccl));
  EXPECT_EQ(n["entries"][1]["profiling_name"], "nccl:send 0->1");
  EXPECT_EQ(n["pg_config"]["0"]["backend"], "gloo");
  FlightDumpOptions active;
  active.only_active = true;
  EXPECT_EQ(Json::parse(fr->DumpJsonString(active))["entries"].size(), 3u);
}

TEST(FlightRecorderDump, WritesAtomicallyAndKeepsWrappedOrder) {
  auto fr = NewRecorder(3);
  AddGroup(*fr, {0});
  for (int k = 1; k <= 7; ++k) fr->RecordScheduled(Collective(0, k));
  std::string dir = ::testing::TempDir() + "/fr_dump_" + std::to_string(::getpid());
  std::string path = dir + "/sub/rank_0.json";
  ASSERT_TRUE(fr->DumpJson(path).ok());
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  Json j = Json::parse(text.str());
  ASSERT_EQ(j["entries"].size(), 3u);
  std::vector<int64_t> ids, seqs;
  for (const Json& e : j["entries"]) {
    ids.push_back(e["record_id"]);
    seqs.push_back(e["collective_seq_id"]);
  }
  EXPECT_THAT(ids, ElementsAre(4, 5, 6));
  EXPECT_THAT(seqs, ElementsAre(5, 6, 7));
  EXPECT_EQ(j["trainscope"]["overwritten"], 4);
  // Only the dump is left in the directory (no temporary file).
  std::vector<std::string> names;
  for (const auto& f : std::filesystem::directory_iterator(dir + "/sub")) {
    names.push_back(f.path().filename().string());
  }
  EXPECT_THAT(names, ElementsAre("rank_0.json"));
  // A path that cannot be written is an error naming it.
  absl::Status bad = fr->DumpJson("/proc/trainscope_no_such_dir/x.json");
  EXPECT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.message()), HasSubstr("/proc/trainscope_no_such_dir"));
  std::filesystem::remove_all(dir);
}

// ---------------------------------------------------------------- filled by communicators

int FreePort() {
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

CommOptions Options(int rank, int world, int port, int timeout_ms = 5000) {
  CommOptions o;
  o.backend = "gloo";
  o.rank = rank;
  o.world_size = world;
  o.master_addr = "127.0.0.1";
  o.master_port = port;
  o.timeout = std::chrono::milliseconds(timeout_ms);
  return o;
}

// Runs fn on `world` threads, each with its own gloo communicator; per-rank statuses.
std::vector<absl::Status> OnRanks(int world, const std::function<absl::Status(Communicator&)>& fn,
                                  int timeout_ms = 5000) {
  int port = FreePort();
  std::vector<absl::Status> out(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      auto comm = Communicator::Create(Options(r, world, port, timeout_ms));
      out[r] = comm.ok() ? fn(**comm) : comm.status();
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

void ExpectAllOk(const std::vector<absl::Status>& st) {
  for (size_t r = 0; r < st.size(); ++r) EXPECT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r];
}

std::unique_ptr<Communicator> SingleRank(CommOptions o = Options(0, 1, 0)) {
  auto c = Communicator::Create(o);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? std::move(*c) : nullptr;
}

// Records what observers see, in order.
struct Log : OpObserver {
  std::string name;
  std::vector<std::string>* events;
  std::vector<OpRecord> ended;
  std::vector<int64_t> enqueue_tids;
  Log(std::string n, std::vector<std::string>* e) : name(std::move(n)), events(e) {}
  void OnEnqueue(const OpRecord& r) override {
    events->push_back(name + " enqueue " + std::to_string(r.seq));
    enqueue_tids.push_back(::syscall(SYS_gettid));
  }
  void OnStart(const OpRecord& r) override {
    events->push_back(name + " start " + std::to_string(r.seq));
  }
  void OnEnd(const OpRecord& r) override {
    events->push_back(name + " end " + std::to_string(r.seq));
    ended.push_back(r);
  }
};

// Rank 0 sends 3 messages to rank 1 (which receives them); any other rank has no p2p
// traffic at all; then everyone all-reduces. Before the counters were split, a rank's
// collective tag counted its sends and receives too, so with 3 ranks the all-reduce tags
// disagreed and it timed out.
class AsymmetricP2P : public ::testing::TestWithParam<int> {};

TEST_P(AsymmetricP2P, CollectiveSeqIdsAgreeAcrossRanks) {
  const int world = GetParam();
  std::mutex mu;
  std::vector<std::vector<FlightEntry>> per_rank(world);
  std::vector<std::vector<OpRecord>> observed(world);
  auto st = OnRanks(world, [&](Communicator& c) -> absl::Status {
    std::vector<std::string> events;
    Log log("log", &events);
    c.AddObserver(&log);
    std::vector<int32_t> msg(64);
    for (int k = 0; k < 3; ++k) {
      if (c.rank() == 0) {
        std::fill(msg.begin(), msg.end(), 100 + k);
        if (auto s = c.Send(msg.data(), msg.size(), DType::kInt32, 1); !s.ok()) return s;
      } else if (c.rank() == 1) {
        if (auto s = c.Recv(msg.data(), msg.size(), DType::kInt32, 0); !s.ok()) return s;
        if (msg[63] != 100 + k) return absl::InternalError("recv got the wrong message");
      }
    }
    std::vector<float> x(1000, static_cast<float>(c.rank() + 1));
    if (auto s = c.AllReduce(x.data(), x.size(), DType::kFloat32); !s.ok()) return s;
    const float want = world * (world + 1) / 2.0f;
    if (x[0] != want || x[999] != want) return absl::InternalError("all_reduce result wrong");
    if (auto s = c.Barrier(); !s.ok()) return s;
    c.RemoveObserver(&log);
    std::lock_guard<std::mutex> lock(mu);
    per_rank[c.rank()] = c.flight_recorder()->Snapshot();
    observed[c.rank()] = log.ended;
    return absl::OkStatus();
  });
  ExpectAllOk(st);
  for (int r = 0; r < world; ++r) {
    // The all-reduce and the barrier are collectives 1 and 2 on every rank.
    std::vector<int64_t> coll;
    for (const FlightEntry& e : per_rank[r])
      if (!e.is_p2p) coll.push_back(e.collective_seq_id);
    EXPECT_THAT(coll, ElementsAre(1, 2)) << "rank " << r;
    std::vector<int64_t> seen;
    for (const OpRecord& o : observed[r])
      if (!IsP2P(o.op)) seen.push_back(o.collective_seq);
    EXPECT_THAT(seen, ElementsAre(1, 2)) << "rank " << r;
    // p2p numbering is each rank's own: 1..3 on ranks 0 and 1, none elsewhere.
    int p2p = 0;
    for (const FlightEntry& e : per_rank[r]) {
      if (!e.is_p2p) {
        EXPECT_EQ(e.p2p_seq_id, r <= 1 ? 3 : 0) << "collective carries the last p2p number";
        continue;
      }
      EXPECT_EQ(e.p2p_seq_id, ++p2p);
      EXPECT_EQ(e.collective_seq_id, 0);
      EXPECT_EQ(e.peer, r == 0 ? 1 : 0);
      EXPECT_EQ(e.op, r == 0 ? OpType::kSend : OpType::kRecv);
    }
    EXPECT_EQ(p2p, r <= 1 ? 3 : 0) << "rank " << r;
    for (const FlightEntry& e : per_rank[r]) EXPECT_EQ(e.state(), FlightState::kCompleted);
  }
}

INSTANTIATE_TEST_SUITE_P(Gloo, AsymmetricP2P, ::testing::Values(2, 3));

TEST(CommunicatorRecorder, DumpOfTwoRanksMatchesByCollectiveSeqId) {
  std::mutex mu;
  std::vector<Json> dumps(2);
  auto st = OnRanks(2, [&](Communicator& c) -> absl::Status {
    std::vector<int64_t> v(10, c.rank());
    for (int step = 0; step < 3; ++step) {
      ScopedCallerTag tag("step " + std::to_string(step) + " backward bucket 0");
      if (auto s = c.AllReduce(v.data(), v.size(), DType::kInt64); !s.ok()) return s;
    }
    std::vector<float> in(4, 1.0f), out(8);
    if (auto s = c.AllGather(in.data(), out.data(), 4, DType::kFloat32); !s.ok()) return s;
    std::lock_guard<std::mutex> lock(mu);
    dumps[c.rank()] = Json::parse(c.flight_recorder()->DumpJsonString());
    return absl::OkStatus();
  });
  ExpectAllOk(st);
  for (int r = 0; r < 2; ++r) {
    const Json& d = dumps[r];
    EXPECT_EQ(d["rank"], r);
    EXPECT_EQ(d["world_size"], 2);
    EXPECT_EQ(d["pg_config"]["0"]["ranks"], "[0, 1]");
    EXPECT_EQ(d["pg_status"]["0"]["last_completed_collective"], "4");
    ASSERT_EQ(d["entries"].size(), 4u);
    for (int k = 0; k < 4; ++k) {
      const Json& e = d["entries"][k];
      EXPECT_EQ(e["collective_seq_id"], k + 1);
      EXPECT_EQ(e["op_id"], k + 1);
      EXPECT_EQ(e["state"], "completed");
      EXPECT_EQ(e["timeout_ms"], 5000);
      EXPECT_EQ(e["caller"], k < 3 ? "step " + std::to_string(k) + " backward bucket 0" : "");
    }
    EXPECT_EQ(d["entries"][0]["profiling_name"], "gloo:all_reduce");
    EXPECT_EQ(d["entries"][0]["input_dtypes"], Json::array({"Long"}));
    EXPECT_EQ(d["entries"][3]["profiling_name"], "gloo:all_gather");
    EXPECT_EQ(d["entries"][3]["output_sizes"], Json::parse("[[8]]"));
  }
}

TEST(CommunicatorRecorder, AsyncOpsAreStampedWhenIssued) {
  auto c = SingleRank();
  ASSERT_NE(c, nullptr);
  std::vector<std::string> events;
  Log log("log", &events);
  c->AddObserver(&log);
  const int64_t me = ::syscall(SYS_gettid);
  std::vector<std::vector<float>> bufs(4, std::vector<float>(256, 1.0f));
  std::vector<std::unique_ptr<Work>> works;
  {
    ScopedCallerTag tag("step 5 backward");
    for (auto& b : bufs) works.push_back(c->AllReduceAsync(b.data(), b.size(), DType::kFloat32));
  }
  for (auto& w : works) ASSERT_TRUE(w->Wait().ok());
  ASSERT_EQ(log.ended.size(), 4u);
  for (size_t k = 0; k < log.ended.size(); ++k) {
    const OpRecord& r = log.ended[k];
    EXPECT_TRUE(r.async);
    EXPECT_EQ(r.collective_seq, static_cast<int64_t>(k + 1));
    EXPECT_GT(r.enqueue_ns, 0);
    EXPECT_LE(r.enqueue_ns, r.start_ns);
    EXPECT_LE(r.start_ns, r.end_ns);
    EXPECT_EQ(log.enqueue_tids[k], me);  // OnEnqueue ran on the issuing thread
  }
  auto s = c->flight_recorder()->Snapshot();
  ASSERT_EQ(s.size(), 4u);
  for (const FlightEntry& e : s) {
    EXPECT_TRUE(e.async);
    EXPECT_STREQ(e.caller, "step 5 backward");  // the tag of the issuing thread
    EXPECT_EQ(e.thread_id, me);
    EXPECT_EQ(e.state(), FlightState::kCompleted);
    EXPECT_LE(e.time_created_ns, e.time_discovered_started_ns);
    EXPECT_LE(e.time_discovered_started_ns, e.time_discovered_completed_ns);
  }
  for (size_t k = 1; k < s.size(); ++k) EXPECT_LE(s[k - 1].time_created_ns, s[k].time_created_ns);
  c->RemoveObserver(&log);
}

TEST(CommunicatorRecorder, ObserversRunInOrderAndCanBeRemoved) {
  auto c = SingleRank();
  ASSERT_NE(c, nullptr);
  std::vector<std::string> events;
  Log a("a", &events), b("b", &events), other("other", &events);
  c->AddObserver(&a);
  c->AddObserver(&b);
  int32_t x = 1;
  ASSERT_TRUE(c->AllReduce(&x, 1, DType::kInt32).ok());
  EXPECT_THAT(events, ElementsAre("a enqueue 0", "b enqueue 0", "a start 0", "b start 0", "a end 0",
                                  "b end 0"));
  events.clear();
  c->RemoveObserver(&a);
  c->AddObserver(&other);
  ASSERT_TRUE(c->Barrier().ok());
  EXPECT_THAT(events, ElementsAre("b enqueue 1", "other enqueue 1", "b start 1", "other start 1",
                                  "b end 1", "other end 1"));
  events.clear();
  c->RemoveObserver(&other);
  c->RemoveObserver(&b);
  c->RemoveObserver(&b);  // not there: nothing happens
  ASSERT_TRUE(c->Barrier().ok());
  EXPECT_TRUE(events.empty());
}

// Observers may be added and removed from another thread while ops run; once
// RemoveObserver has returned, the observer is never called again.
TEST(CommunicatorRecorder, AddAndRemoveObserversWhileOpsRun) {
  auto c = SingleRank();
  ASSERT_NE(c, nullptr);
  struct Watch : OpObserver {
    std::atomic<bool> attached{false};
    std::atomic<int> calls{0}, after_removal{0};
    void Seen() {
      ++calls;
      if (!attached.load()) ++after_removal;
    }
    void OnEnqueue(const OpRecord&) override { Seen(); }
    void OnStart(const OpRecord&) override { Seen(); }
    void OnEnd(const OpRecord&) override { Seen(); }
  } watches[4];
  std::atomic<bool> stop{false};
  std::atomic<int> cycles{0};
  std::thread churn([&] {
    while (!stop.load()) {
      for (auto& w : watches) {
        w.attached = true;
        c->AddObserver(&w);
      }
      for (auto& w : watches) {
        c->RemoveObserver(&w);
        w.attached = false;
      }
      ++cycles;
    }
  });
  auto total_calls = [&] {
    int n = 0;
    for (auto& w : watches) n += w.calls.load();
    return n;
  };
  // Run ops until the churn has overlapped them for a while (2 shared cores may not
  // schedule the churn thread at once), at most 20 s.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  int32_t x = 0;
  int ops = 0;
  while ((ops < 3000 || cycles.load() < 200 || total_calls() < 100) &&
         std::chrono::steady_clock::now() < deadline) {
    ASSERT_TRUE(c->AllReduce(&x, 1, DType::kInt32).ok());
    ++ops;
  }
  stop = true;
  churn.join();
  for (auto& w : watches) EXPECT_EQ(w.after_removal.load(), 0);
  EXPECT_GE(total_calls(), 100) << "the churn never overlapped the ops";
}

TEST(CommunicatorRecorder, OptionsControlTheRecorder) {
  CommOptions off = Options(0, 1, 0);
  off.flight_recorder_entries = 0;
  auto c = SingleRank(off);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->flight_recorder(), nullptr);
  int32_t x = 1;
  EXPECT_TRUE(c->AllReduce(&x, 1, DType::kInt32).ok());

  CommOptions bad = Options(0, 1, 0);
  bad.flight_recorder_entries = -1;
  EXPECT_EQ(Communicator::Create(bad).status().code(), absl::StatusCode::kInvalidArgument);

  CommOptions small = Options(0, 1, 0);
  small.flight_recorder_entries = 3;
  auto d = SingleRank(small);
  ASSERT_NE(d, nullptr);
  ASSERT_NE(d->flight_recorder(), nullptr);
  EXPECT_EQ(d->flight_recorder()->capacity(), 3u);
  EXPECT_EQ(SingleRank()->flight_recorder()->capacity(), 2000u);  // the default

  // Two communicators sharing one recorder need distinct group names.
  auto shared = NewRecorder(16);
  CommOptions first = Options(0, 1, 0);
  first.flight_recorder = shared;
  auto e = SingleRank(first);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->flight_recorder(), shared);
  EXPECT_EQ(Communicator::Create(first).status().code(), absl::StatusCode::kAlreadyExists);
  CommOptions second = first;
  second.group_name = "1";
  second.group_desc = "tp_group";
  auto f = SingleRank(second);
  ASSERT_NE(f, nullptr);
  ASSERT_TRUE(e->AllReduce(&x, 1, DType::kInt32).ok());
  ASSERT_TRUE(f->AllReduce(&x, 1, DType::kInt32).ok());
  Json j = Json::parse(shared->DumpJsonString());
  EXPECT_EQ(j["pg_config"]["1"]["desc"], "tp_group");
  ASSERT_EQ(j["entries"].size(), 2u);
  EXPECT_EQ(j["entries"][0]["pg_id"], 0);
  EXPECT_EQ(j["entries"][1]["pg_id"], 1);
  EXPECT_EQ(j["entries"][1]["process_group"], Json::array({"1", "tp_group"}));
  EXPECT_EQ(j["entries"][1]["collective_seq_id"], 1);  // each group counts its own
}

// A rank that leaves mid-job: the survivor's entry for the op that failed is retired but
// not completed and keeps the error; a later op is refused and recorded as such.
TEST(CommunicatorRecorder, FailedOpIsRecordedWithItsError) {
  std::mutex mu;
  std::vector<FlightEntry> rank0;
  auto st = OnRanks(
      2,
      [&](Communicator& c) -> absl::Status {
        if (auto s = c.Barrier(); !s.ok()) return s;
        if (c.rank() == 1) return absl::OkStatus();  // leaves: its communicator closes
        std::vector<float> x(1024, 1.0f);
        absl::Status failed = c.AllReduce(x.data(), x.size(), DType::kFloat32);
        if (failed.ok()) return absl::InternalError("all_reduce without rank 1 succeeded");
        absl::Status refused = c.AllReduce(x.data(), x.size(), DType::kFloat32);
        if (refused.code() != absl::StatusCode::kFailedPrecondition) {
          return absl::InternalError("op on a broken communicator not refused: " +
                                     refused.ToString());
        }
        std::lock_guard<std::mutex> lock(mu);
        rank0 = c.flight_recorder()->Snapshot();
        return absl::OkStatus();
      },
      /*timeout_ms=*/2000);
  ExpectAllOk(st);
  ASSERT_EQ(rank0.size(), 3u);
  EXPECT_EQ(rank0[0].state(), FlightState::kCompleted);  // the barrier
  EXPECT_EQ(rank0[1].state(), FlightState::kStarted);
  EXPECT_TRUE(rank0[1].retired);
  EXPECT_THAT(std::string(rank0[1].error), HasSubstr("all_reduce #2"));
  EXPECT_EQ(rank0[2].state(), FlightState::kScheduled);  // refused: never started
  EXPECT_TRUE(rank0[2].retired);
  EXPECT_THAT(std::string(rank0[2].error), HasSubstr("broken"));
}

}  // namespace
}  // namespace trainscope::comm
