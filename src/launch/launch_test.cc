// launch tests: real fork/exec of /bin/sh ranks, failures, signals, placement.
#include "trainscope/launch/launch.h"

#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launch/plan.h"
#include "trainscope/core/fake_os.h"
#include "trainscope/core/os.h"
#include "trainscope/launch/topo_placement.h"

namespace trainscope::launch {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string TempDir() { return test_util::TempDir("launch"); }
using test_util::ReadFile;

LaunchOptions Sh(const std::string& script, int n) {
  LaunchOptions o;
  o.argv = {"/bin/sh", "-c", script};
  o.nproc_per_node = n;
  o.run_dir = TempDir();
  o.live_output = false;
  o.stop_grace = std::chrono::milliseconds(1000);
  o.dev_root = o.run_dir;  // no devices
  return o;
}

TEST(PlacementTest, ParseCpuList) {
  EXPECT_EQ(ParseCpuList("0-3,8,10-11").value(), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(ParseCpuList("5\n").value(), (std::vector<int>{5}));
  EXPECT_FALSE(ParseCpuList("3-1").ok());
  EXPECT_FALSE(ParseCpuList("a").ok());
}

TEST(PlacementTest, PlanKeepsRanksInsideNumaNodes) {
  std::vector<std::vector<int>> nodes{{0, 1, 2, 3}, {4, 5, 6, 7}};
  auto p = PlanAffinity(nodes, 4);
  EXPECT_EQ(p[0], (std::vector<int>{0, 1}));
  EXPECT_EQ(p[1], (std::vector<int>{2, 3}));
  EXPECT_EQ(p[2], (std::vector<int>{4, 5}));
  EXPECT_EQ(p[3], (std::vector<int>{6, 7}));
  p = PlanAffinity(nodes, 1);
  EXPECT_EQ(p[0], (std::vector<int>{0, 1, 2, 3}));
  p = PlanAffinity({{0, 1}}, 3);  // more ranks than CPUs: share
  EXPECT_EQ(p[0], (std::vector<int>{0}));
  EXPECT_EQ(p[1], (std::vector<int>{1}));
  EXPECT_EQ(p[2], (std::vector<int>{0}));
  p = PlanAffinity({{0, 1, 2}}, 2);  // uneven split
  EXPECT_EQ(p[0], (std::vector<int>{0, 1}));
  EXPECT_EQ(p[1], (std::vector<int>{2}));
}

TEST(PlacementTest, ReadsNumaNodesAndDevicesFromFakeTrees) {
  std::string root = TempDir();
  for (auto [node, list] : {std::pair{"node0", "0-1"}, std::pair{"node1", "2-3"}}) {
    std::filesystem::create_directories(root + "/devices/system/node/" + node);
    std::ofstream(root + "/devices/system/node/" + node + "/cpulist") << list << "\n";
  }
  auto nodes = ReadNumaNodes(root, {0, 1, 2, 3, 9});
  ASSERT_EQ(nodes.size(), 3u);  // cpu 9 in no node: its own group
  EXPECT_EQ(nodes[1], (std::vector<int>{2, 3}));
  EXPECT_EQ(nodes[2], (std::vector<int>{9}));
  EXPECT_EQ(ReadNumaNodes("/nonexistent", {0, 1}).size(), 1u);

  std::string dev = TempDir();
  for (const char* f : {"nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm"})
    std::ofstream(dev + "/" + f);
  LocalDevices d = DetectLocalDevices(dev);
  EXPECT_EQ(d.count, 2);
  EXPECT_EQ(d.visible_var, "CUDA_VISIBLE_DEVICES");
  std::string npu = TempDir();
  std::ofstream(npu + "/davinci0");
  std::ofstream(npu + "/davinci_manager");
  EXPECT_EQ(DetectLocalDevices(npu).visible_var, "ASCEND_RT_VISIBLE_DEVICES");
  EXPECT_EQ(DetectLocalDevices(root).count, 0);
}

// The same reads through a FakeOs: the sysfs and /dev trees exist only in memory.
TEST(PlacementTest, ReadsNumaNodesAndDevicesFromAFakeOs) {
  FakeOs os;
  os.AddFile("/sys/devices/system/node/node0/cpulist", "0-1\n");
  os.AddFile("/sys/devices/system/node/node1/cpulist", "2-3\n");
  os.AddFile("/sys/devices/system/node/possible", "0-1\n");
  auto nodes = ReadNumaNodes("/sys", {0, 1, 2, 3, 9}, &os);
  ASSERT_EQ(nodes.size(), 3u);
  EXPECT_EQ(nodes[0], (std::vector<int>{0, 1}));
  EXPECT_EQ(nodes[2], (std::vector<int>{9}));
  for (const char* f : {"/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl", "/dev/davinci0"})
    os.AddFile(f, "");
  LocalDevices d = DetectLocalDevices("/dev", &os);
  EXPECT_EQ(d.count, 2);
  EXPECT_EQ(d.visible_var, "CUDA_VISIBLE_DEVICES");
  EXPECT_EQ(DetectLocalDevices("/none", &os).count, 0);
}

TEST(LaunchTest, FourRanksGetTheTorchrunEnvironment) {
  LaunchOptions o =
      Sh("echo rank=$RANK world=$WORLD_SIZE local=$LOCAL_RANK lws=$LOCAL_WORLD_SIZE "
         "addr=$MASTER_ADDR port=$MASTER_PORT dir=$TRAINSCOPE_RUN_DIR; "
         "grep Cpus_allowed_list /proc/self/status; echo oops >&2",
         4);
  auto r = Launch(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->ok());
  EXPECT_EQ(r->world_size, 4);
  EXPECT_GT(r->master_port, 0);
  ASSERT_EQ(r->ranks.size(), 4u);
  const std::string abs_dir = std::filesystem::absolute(o.run_dir).string();
  for (int i = 0; i < 4; ++i) {
    const RankStatus& s = r->ranks[i];
    EXPECT_EQ(s.exit_code, 0);
    std::string out = ReadFile(s.stdout_log);
    EXPECT_THAT(out, HasSubstr("rank=" + std::to_string(i) + " world=4 local=" + std::to_string(i) +
                               " lws=4 addr=127.0.0.1 port=" + std::to_string(r->master_port) +
                               " dir=" + abs_dir));
    EXPECT_EQ(ReadFile(s.stderr_log), "oops\n");
    ASSERT_FALSE(s.cpus.empty());
    EXPECT_THAT(out, HasSubstr("Cpus_allowed_list:\t" + std::to_string(s.cpus.front())));
  }
  std::string json = ReadFile(o.run_dir + "/launch.json");
  EXPECT_THAT(json, HasSubstr("\"format\": \"trainscope.launch\""));
  EXPECT_LT(r->all_running_s, 1.0);
}

TEST(LaunchTest, FailingRankStopsTheOthersAndIsNamed) {
  LaunchOptions o = Sh("if [ $RANK = 2 ]; then echo dying >&2; exit 3; fi; exec sleep 30", 4);
  auto r = Launch(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->ok());
  EXPECT_EQ(r->first_failed_rank, 2);
  EXPECT_THAT(r->failure, HasSubstr("rank 2"));
  EXPECT_THAT(r->failure, HasSubstr("exited with code 3"));
  EXPECT_LT(r->total_s, 5.0);
  EXPECT_EQ(r->ranks[2].tail, std::vector<std::string>{"dying"});
  for (int i : {0, 1, 3}) {
    EXPECT_TRUE(r->ranks[i].stopped_by_us);
    EXPECT_EQ(r->ranks[i].term_signal, SIGTERM);
  }
}

// Every rank hits the same error (a broken script): none of them was stopped by the
// launcher, and the text says so instead of "the others were stopped by the launcher".
TEST(LaunchTest, EveryRankFailingOnItsOwnIsNotCalledStopped) {
  LaunchOptions o = Sh("echo broken >&2; exit 3", 2);
  auto r = Launch(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->ok());
  for (const RankStatus& s : r->ranks) {
    EXPECT_FALSE(s.stopped_by_us) << "rank " << s.rank;
    EXPECT_EQ(s.exit_code, 3);
  }
  const Finding t = DescribeFailure(*r);
  EXPECT_THAT(t.title, HasSubstr("the other rank failed on its own too"));
  EXPECT_THAT(t.fix, HasSubstr("all 2 ranks failed on their own (exit code 3)"));
  EXPECT_THAT(t.fix, Not(HasSubstr("stopped")));
}

RankStatus Rank(int rank, int exit_code, bool stopped) {
  RankStatus s;
  s.rank = rank;
  s.exited = !stopped;
  s.exit_code = stopped ? -1 : exit_code;
  s.term_signal = stopped ? SIGTERM : 0;
  s.stopped_by_us = stopped;
  return s;
}

TEST(FailureTextTest, SaysWhatBecameOfTheOtherRanks) {
  LaunchResult r;
  r.first_failed_rank = 1;
  r.failure = "rank 1 (pid 9) exited with code 3 after 0.10 s";
  r.ranks = {Rank(0, 0, true), Rank(1, 3, false), Rank(2, 0, true)};
  Finding t = DescribeFailure(r);  // one failed, the launcher stopped the others
  EXPECT_EQ(t.title, r.failure + "; stopped the other 2 ranks");
  EXPECT_EQ(t.severity, Severity::kError);
  EXPECT_EQ(t.id, "launch.rank_failed");
  EXPECT_EQ(t.rank, 1);
  EXPECT_THAT(t.fix, HasSubstr("the others were stopped by the launcher"));

  r.ranks = {Rank(0, 3, false), Rank(1, 3, false), Rank(2, 3, false)};
  t = DescribeFailure(r);  // all alike, on their own
  EXPECT_EQ(t.title, r.failure + "; the other 2 ranks failed on their own too");
  EXPECT_THAT(t.fix, HasSubstr("all 3 ranks failed on their own (exit code 3): the same error"));

  r.ranks = {Rank(0, 1, false), Rank(1, 3, false), Rank(2, 3, false)};
  t = DescribeFailure(r);  // all on their own, not alike
  EXPECT_THAT(t.fix, HasSubstr("not all alike"));

  r.ranks = {Rank(0, 0, false), Rank(1, 3, false), Rank(2, 3, false), Rank(3, 0, true)};
  t = DescribeFailure(r);  // two alike, one finished, one stopped
  EXPECT_EQ(t.title, r.failure +
                         "; rank 2 failed on its own too; stopped the other 1 rank; 1 rank "
                         "finished OK");
  EXPECT_THAT(t.fix, HasSubstr("the same exit code 3 on 2 ranks"));
  EXPECT_THAT(t.fix, HasSubstr("1 rank was stopped by the launcher"));

  r.ranks = {Rank(0, 3, false)};
  t = DescribeFailure(r);  // one rank: no others to speak of
  EXPECT_EQ(t.title, r.failure);
  EXPECT_THAT(t.fix, Not(HasSubstr("stopped")));

  r.timed_out_ranks = {0};
  t = DescribeFailure(r);  // did not exit in time
  EXPECT_EQ(t.id, "launch.rank_timed_out");
  EXPECT_THAT(t.fix, HasSubstr("did not exit in time"));
}

TEST(LaunchTest, RankIgnoringSigtermIsKilledAfterGrace) {
  LaunchOptions o = Sh("if [ $RANK = 0 ]; then sleep 0.2; exit 1; fi; trap '' TERM; sleep 30", 2);
  o.stop_grace = std::chrono::milliseconds(500);
  auto r = Launch(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->first_failed_rank, 0);
  EXPECT_EQ(r->ranks[1].term_signal, SIGKILL);
  EXPECT_LT(r->total_s, 3.0);
}

TEST(LaunchTest, RankKilledBySignalAndItsChildrenAreReaped) {
  std::string pidfile = TempDir() + "/grandchild.pid";
  LaunchOptions o = Sh("if [ $RANK = 1 ]; then sleep 60 & echo $! > " + pidfile +
                           "; sleep 0.2; kill -9 $$; fi; exec sleep 30",
                       2);
  auto r = Launch(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->first_failed_rank, 1);
  EXPECT_THAT(r->failure, HasSubstr("killed by SIGKILL"));
  int gc = std::stoi(ReadFile(pidfile));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  // No stray: the grandchild (same process group) is gone or a zombie being reaped by init.
  std::string stat = ReadFile("/proc/" + std::to_string(gc) + "/stat");
  EXPECT_TRUE(stat.empty() || stat.find(") Z") != std::string::npos) << stat;
}

TEST(LaunchTest, SignalsAreForwarded) {
  LaunchOptions o = Sh("trap 'echo got TERM; exit 7' TERM; sleep 30 & wait", 2);
  std::thread sender([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    ::kill(::getpid(), SIGTERM);
  });
  auto r = Launch(o);
  sender.join();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->interrupted_by, SIGTERM);
  EXPECT_FALSE(r->ok());
  for (const auto& s : r->ranks) {
    EXPECT_EQ(s.exit_code, 7);
    EXPECT_EQ(s.tail, std::vector<std::string>{"got TERM"});
  }
}

TEST(LaunchTest, MissingProgramIsNotFound) {
  LaunchOptions o = Sh("", 2);
  o.argv = {"/no/such/program", "x"};
  auto r = Launch(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("/no/such/program"));
}

TEST(LaunchTest, BadOptions) {
  LaunchOptions o = Sh("true", 1);
  o.nnodes = 2;
  EXPECT_THAT(std::string(Launch(o).status().message()), HasSubstr("--master-port is required"));
  o.master_port = 29500;
  o.node_rank = 2;
  EXPECT_EQ(Launch(o).status().code(), absl::StatusCode::kInvalidArgument);
}

// True when /proc/<pid> is gone (or only a zombie that is not ours to reap).
bool Gone(int pid) {
  std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  return stat.empty() || stat.find(") Z") != std::string::npos;
}

TEST(LaunchTest, TimeoutStopsARankThatNeverExitsAndNamesIt) {
  LaunchOptions o = Sh("if [ $RANK = 1 ]; then exec sleep 1000; fi; exit 0", 2);
  o.exit_timeout = std::chrono::milliseconds(1000);
  o.stop_grace = std::chrono::milliseconds(500);
  auto r = Launch(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->ok());
  EXPECT_EQ(r->first_failed_rank, 1);
  EXPECT_EQ(r->timed_out_ranks, std::vector<int>{1});
  EXPECT_THAT(r->failure, HasSubstr("rank 1 (pid "));
  EXPECT_THAT(r->failure, HasSubstr("still running 1 s after rank 0 exited OK (--timeout 1 s)"));
  EXPECT_EQ(r->ranks[1].term_signal, SIGTERM);
  EXPECT_EQ(r->ranks[0].exit_code, 0);
  EXPECT_LT(r->total_s, 1.0 + 0.5 + 2.0);
  EXPECT_THAT(ReadFile(o.run_dir + "/launch.json"),
              HasSubstr("\"timed_out_ranks\": [\n    1\n  ]"));
}

TEST(LaunchTest, JobTimeoutStopsEveryRankStillRunning) {
  LaunchOptions o = Sh("trap '' TERM; sleep 1000", 2);
  o.job_timeout = std::chrono::milliseconds(600);
  o.stop_grace = std::chrono::milliseconds(300);
  auto r = Launch(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->timed_out_ranks, (std::vector<int>{0, 1}));
  EXPECT_THAT(r->failure, HasSubstr("ranks 0 (pid "));
  EXPECT_THAT(r->failure, HasSubstr("were still running when the job timeout expired"));
  for (const auto& s : r->ranks) EXPECT_EQ(s.term_signal, SIGKILL);  // ignored SIGTERM
  EXPECT_LT(r->total_s, 0.6 + 0.3 + 2.0);
}

TEST(LaunchTest, NoTimeoutWhenEveryRankExitsInTime) {
  LaunchOptions o = Sh("if [ $RANK = 1 ]; then sleep 0.3; fi; exit 0", 2);
  o.exit_timeout = std::chrono::milliseconds(3000);
  auto r = Launch(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->ok()) << r->failure;
  EXPECT_TRUE(r->timed_out_ranks.empty());
}

TEST(LaunchTest, ChildThatSetsidsOutOfTheGroupIsGoneAfterTheJob) {
  ASSERT_TRUE(BecomeChildSubreaper().ok());
  const std::string dir = TempDir();
  // Rank 1 starts a process in its own session (out of reach of process-group signals),
  // with and without holding the rank's output pipe, then both ranks exit normally.
  // w PID: wait until PID leads its own session (setsid done), so the rank's exit cannot
  // take it down with the group signal first.
  LaunchOptions o = Sh(
      "w() { while [ \"$(cut -d' ' -f6 /proc/$1/stat)\" != $1 ]; do sleep 0.01; "
      "done; }; if [ $RANK = 1 ]; then setsid sleep 1000 >/dev/null 2>&1 & "
      "echo $! > " +
          dir + "/a.pid; w $!; setsid sleep 1000 & echo $! > " + dir + "/b.pid; w $!; fi; exit 0",
      2);
  auto start = std::chrono::steady_clock::now();
  auto r = Launch(o);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->ok()) << r->failure;
  EXPECT_EQ(r->strays_killed, 2);
  for (const char* f : {"/a.pid", "/b.pid"}) {
    int pid = std::stoi(ReadFile(dir + f));
    // Really in another session: the event loop's group signals could not have reached it.
    EXPECT_TRUE(Gone(pid)) << "pid " << pid << " from " << f << " outlived the job";
  }
  EXPECT_LT(s, 3.0);
}

TEST(LaunchTest, RanksGetAJobTokenThatIsNotLogged) {
  LaunchOptions o =
      Sh("echo ${#TRAINSCOPE_JOB_TOKEN} > $TRAINSCOPE_RUN_DIR/len$RANK; "
         "echo $TRAINSCOPE_JOB_TOKEN > $TRAINSCOPE_RUN_DIR/tok$RANK",
         2);
  o.master_addr = "10.1.2.3";  // ignored with one node: the store stays on loopback
  auto r = Launch(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->master_addr, "127.0.0.1");
  EXPECT_EQ(ReadFile(o.run_dir + "/len0"), "32\n");
  const std::string token = ReadFile(o.run_dir + "/tok0");
  EXPECT_EQ(ReadFile(o.run_dir + "/tok1"), token);
  EXPECT_THAT(ReadFile(o.run_dir + "/launch.json"), Not(HasSubstr(token.substr(0, 32))));
  // A second job gets another token; a given one is passed through.
  o.run_dir = TempDir();
  o.job_token = "given-token";
  ASSERT_TRUE(Launch(o).ok());
  EXPECT_EQ(ReadFile(o.run_dir + "/tok0"), "given-token\n");
  EXPECT_NE(RandomHexToken().value(), RandomHexToken().value());
}

TEST(LaunchTest, MultiNodeNeedsATokenAndALocalMasterAddress) {
  LaunchOptions o = Sh("true", 1);
  o.nnodes = 2;
  o.master_port = 29500;
  o.master_addr = "127.0.0.1";
  auto r = Launch(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("TRAINSCOPE_JOB_TOKEN on every node"));
  o.job_token = "shared";
  o.master_addr = "192.0.2.1";  // TEST-NET-1: not ours
  r = Launch(o);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("is not an address of this host"));
}

TEST(LaunchTest, DevicePinningFollowsTheVisibleList) {
  LaunchOptions o = Sh("echo dev=$CUDA_VISIBLE_DEVICES", 2);
  o.dev_root = TempDir();
  for (const char* f : {"nvidia0", "nvidia1", "nvidia2"}) std::ofstream(o.dev_root + "/" + f);
  o.env["CUDA_VISIBLE_DEVICES"] = "2,0";
  auto r = Launch(o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->ranks[0].tail, std::vector<std::string>{"dev=2"});
  EXPECT_EQ(r->ranks[1].tail, std::vector<std::string>{"dev=0"});
}

TEST(LaunchTest, PlanRankDevicesPlacedOrRoundRobin) {
  EXPECT_EQ(PlanRankDevices({"2", "0"}, {}, 3), (std::vector<std::string>{"2", "0", "2"}));
  EXPECT_EQ(PlanRankDevices({"0", "1", "2", "3"}, {"0", "3", "1", "2"}, 4),
            (std::vector<std::string>{"0", "3", "1", "2"}));
  EXPECT_TRUE(PlanRankDevices({}, {}, 2).empty());
}

// A host with four GPUs on two NUMA nodes, as ReadHost would see it.
HostView FourGpuHost() {
  HostView h;
  h.devices.count = 4;
  h.devices.visible_var = "CUDA_VISIBLE_DEVICES";
  h.environ = {{"PATH", "/bin"}, {"HOME", "/root"}};
  h.numa_nodes = {{0, 1, 2, 3}, {4, 5, 6, 7}};
  h.free_port = 29511;
  h.default_run_dir = "runs/launch-x";
  h.cwd = "/work";
  h.host_name = "h";
  h.pid = 42;
  return h;
}

TEST(PlanTest, OneRankPerDeviceWithTheTorchrunEnvironment) {
  LaunchOptions o;
  o.argv = {"train.py"};
  o.master_addr = "10.0.0.1";  // one node: loopback whatever it says
  o.env = {{"HOME", "/home/u"}};
  HostView host = FourGpuHost();
  host.visible_env = "3,1";
  absl::StatusOr<JobPlan> p = PlanJob(o, host, "tok");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->nproc, 4);
  EXPECT_EQ(p->world_size, 4);
  EXPECT_EQ(p->master_addr, "127.0.0.1");
  EXPECT_EQ(p->master_port, 29511);
  EXPECT_EQ(p->run_dir, "runs/launch-x");
  EXPECT_EQ(p->abs_run_dir, "/work/runs/launch-x");
  EXPECT_EQ(p->job_id, "launch/h/42");
  ASSERT_EQ(p->ranks.size(), 4u);
  const RankPlan& r = p->ranks[2];
  EXPECT_EQ(r.rank, 2);
  EXPECT_EQ(r.local_rank, 2);
  EXPECT_EQ(r.device, "3");  // the visible list round-robin
  EXPECT_EQ(p->ranks[3].device, "1");
  EXPECT_EQ(r.cpus, (std::vector<int>{4, 5}));  // ranks 2 and 3 on the second node
  EXPECT_EQ(r.stdout_log, "runs/launch-x/rank2/stdout.log");
  EXPECT_EQ(r.env, (std::vector<std::string>{
                       "CUDA_VISIBLE_DEVICES=3", "GROUP_RANK=0", "HOME=/home/u", "LOCAL_RANK=2",
                       "LOCAL_WORLD_SIZE=4", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=29511",
                       "OMP_NUM_THREADS=2", "PATH=/bin", "PYTHONUNBUFFERED=1", "RANK=2",
                       "TRAINSCOPE_JOB_ID=launch/h/42", "TRAINSCOPE_JOB_TOKEN=tok",
                       "TRAINSCOPE_RUN_DIR=/work/runs/launch-x", "WORLD_SIZE=4"}));
}

TEST(PlanTest, SecondNodeOfTwoNumbersItsRanksAfterTheFirst) {
  LaunchOptions o;
  o.argv = {"train.py"};
  o.nproc_per_node = 2;
  o.nnodes = 2;
  o.node_rank = 1;
  o.master_addr = "10.0.0.1";
  o.master_port = 29400;
  o.run_dir = "/runs/a";
  o.env = {{"OMP_NUM_THREADS", "8"}, {"PYTHONUNBUFFERED", "0"}};
  HostView host = FourGpuHost();
  host.devices = {};     // no devices: nothing pinned
  host.numa_nodes = {};  // not bound
  absl::StatusOr<JobPlan> p = PlanJob(o, host, "tok");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->world_size, 4);
  EXPECT_EQ(p->master_port, 29400);
  EXPECT_EQ(p->abs_run_dir, "/runs/a");
  EXPECT_EQ(p->job_id, "launch/10.0.0.1:29400");  // the same on every node
  EXPECT_TRUE(p->visible_var.empty());
  ASSERT_EQ(p->ranks.size(), 2u);
  EXPECT_EQ(p->ranks[0].rank, 2);
  EXPECT_EQ(p->ranks[1].rank, 3);
  EXPECT_TRUE(p->ranks[1].cpus.empty());
  EXPECT_TRUE(p->ranks[1].device.empty());
  const std::vector<std::string>& env = p->ranks[1].env;
  for (const char* kv : {"RANK=3", "LOCAL_RANK=1", "GROUP_RANK=1", "MASTER_ADDR=10.0.0.1",
                         "OMP_NUM_THREADS=8", "PYTHONUNBUFFERED=0"}) {
    EXPECT_THAT(env, ::testing::Contains(kv));
  }
  EXPECT_THAT(env, Not(::testing::Contains(HasSubstr("VISIBLE_DEVICES"))));
}

TEST(PlanTest, PlacementNamesTheDevicesAndTheirVariable) {
  LaunchOptions o;
  o.argv = {"train.py"};
  o.nproc_per_node = 2;
  o.rank_devices = {"6", "2"};
  o.rank_devices_var = "ASCEND_RT_VISIBLE_DEVICES";
  absl::StatusOr<JobPlan> p = PlanJob(o, FourGpuHost(), "tok");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->visible_var, "ASCEND_RT_VISIBLE_DEVICES");
  EXPECT_EQ(p->ranks[1].device, "2");
  EXPECT_THAT(p->ranks[1].env, ::testing::Contains("ASCEND_RT_VISIBLE_DEVICES=2"));
  EXPECT_THAT(p->ranks[1].env, Not(::testing::Contains(HasSubstr("CUDA_VISIBLE_DEVICES"))));
  // Too few devices; a placement with no variable and no devices to take it from.
  o.rank_devices = {"6"};
  EXPECT_THAT(std::string(PlanJob(o, FourGpuHost(), "tok").status().message()),
              HasSubstr("names 1 devices for 2 local ranks"));
  o.rank_devices = {"6", "2"};
  o.rank_devices_var.clear();
  HostView bare = FourGpuHost();
  bare.devices = {};
  EXPECT_THAT(std::string(PlanJob(o, bare, "tok").status().message()),
              HasSubstr("needs the visible-devices variable"));
}

TEST(PlanTest, ValidateOptionsNamesTheFlag) {
  LaunchOptions o;
  EXPECT_THAT(std::string(ValidateOptions(o).message()), HasSubstr("no program"));
  o.argv = {"true"};
  EXPECT_TRUE(ValidateOptions(o).ok());
  o.nnodes = 2;
  EXPECT_THAT(std::string(ValidateOptions(o).message()), HasSubstr("--master-port is required"));
  o.master_port = 70000;
  EXPECT_THAT(std::string(ValidateOptions(o).message()), HasSubstr("is not a TCP port"));
  o.master_port = 29500;
  o.node_rank = 2;
  EXPECT_THAT(std::string(ValidateOptions(o).message()),
              HasSubstr("--node-rank 2 is out of range"));
  o.node_rank = 1;
  o.job_timeout = std::chrono::milliseconds(-1);
  EXPECT_EQ(ValidateOptions(o).code(), absl::StatusCode::kInvalidArgument);
}

TEST(TopoPlacementTest, PairsOnTheFastLinksAndFillsTheOptions) {
  FakeOs os;
  os.AddFile("/topo.txt",
             "\tGPU0\tGPU1\tGPU2\tGPU3\n"
             "GPU0\t X \tSYS\tNV2\tSYS\n"
             "GPU1\tSYS\t X \tSYS\tNV2\n"
             "GPU2\tNV2\tSYS\t X \tSYS\n"
             "GPU3\tSYS\tNV2\tSYS\t X \n");
  TopologyPlacementOptions t;
  t.tp = 2;
  t.topo_from = "/topo.txt";
  LaunchOptions o;
  absl::StatusOr<TopologyPlacement> p = PlaceByTopology(t, &os, &o);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->var, "CUDA_VISIBLE_DEVICES");
  EXPECT_EQ(p->devices, (std::vector<std::string>{"0", "2", "1", "3"}));
  EXPECT_DOUBLE_EQ(p->slowest_tp_gbps, 50);  // NV2
  EXPECT_LT(p->naive_slowest_tp_gbps, p->slowest_tp_gbps);
  EXPECT_EQ(o.rank_devices, p->devices);
  EXPECT_EQ(o.rank_devices_var, "CUDA_VISIBLE_DEVICES");
  EXPECT_EQ(o.nproc_per_node, 4);  // was 0: one per device
  // The launcher's environment already pins the devices.
  os.SetEnv("CUDA_VISIBLE_DEVICES", "1");
  LaunchOptions pinned;
  EXPECT_THAT(std::string(PlaceByTopology(t, &os, &pinned).status().message()),
              HasSubstr("unset CUDA_VISIBLE_DEVICES (1)"));
  EXPECT_TRUE(pinned.rank_devices.empty());
  // No saved topology and no tool to run.
  t.topo_from.clear();
  EXPECT_THAT(std::string(PlaceByTopology(t, &os, &pinned).status().message()),
              HasSubstr("--placement topo: "));
}

TEST(LaunchTest, PlacementPinsEachRankToItsDevice) {
  LaunchOptions o = Sh("echo dev=$CUDA_VISIBLE_DEVICES", 2);
  o.dev_root = TempDir();
  for (const char* f : {"nvidia0", "nvidia1", "nvidia2", "nvidia3"})
    std::ofstream(o.dev_root + "/" + f);
  o.rank_devices = {"3", "1"};
  auto r = Launch(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->ranks[0].tail, std::vector<std::string>{"dev=3"});
  EXPECT_EQ(r->ranks[1].tail, std::vector<std::string>{"dev=1"});
  EXPECT_EQ(r->ranks[1].device, "1");
  // No device nodes: the placement names its variable.
  LaunchOptions npu = Sh("echo dev=$ASCEND_RT_VISIBLE_DEVICES", 2);
  npu.rank_devices = {"4", "5"};
  npu.rank_devices_var = "ASCEND_RT_VISIBLE_DEVICES";
  r = Launch(npu);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->ranks[1].tail, std::vector<std::string>{"dev=5"});
  // Fewer devices than ranks.
  o.rank_devices = {"3"};
  r = Launch(o);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("names 1 devices for 2 local ranks"));
}

}  // namespace
}  // namespace trainscope::launch

namespace trainscope::launch {
namespace {

TEST(HangDumpTest, CatchesSignalReadsSigCgt) {
  // SIGUSR1 = 10: bit 9 (0x200); SIGTERM = 15: bit 14 (0x4000).
  const std::string status = "Name:\tx\nSigBlk:\t0000000000000000\nSigCgt:\t0000000000004200\n";
  EXPECT_TRUE(CatchesSignal(status, SIGUSR1));
  EXPECT_TRUE(CatchesSignal(status, SIGTERM));
  EXPECT_FALSE(CatchesSignal(status, SIGUSR2));
  EXPECT_FALSE(CatchesSignal("Name:\tx\n", SIGUSR1));
  EXPECT_FALSE(CatchesSignal("SigCgt:\tzz\n", SIGUSR1));
  EXPECT_FALSE(CatchesSignal(status, 0));
}

TEST(HangDumpTest, DumpWrittenNeedsBothFilesChangedSinceTheAsk) {
  const std::string dir = TempDir();
  const std::string dump = dir + "/hang/flight_recorder.rank1.json";
  const std::string stacks = dir + "/hang/stacks.rank1.txt";
  const HangDumpFiles none = StatHangDump(dir, 1);
  EXPECT_TRUE(none.dump.empty() && none.stacks.empty());
  EXPECT_FALSE(HangDumpWritten(dir, 1, none));
  std::filesystem::create_directories(dir + "/hang");
  std::ofstream(dump) << "{}";
  EXPECT_FALSE(HangDumpWritten(dir, 1, none));
  std::ofstream(stacks) << "x";
  EXPECT_TRUE(HangDumpWritten(dir, 1, none));
  // Files left by an earlier ask are no answer to this one, until both are written again.
  const HangDumpFiles old = StatHangDump(dir, 1);
  EXPECT_FALSE(HangDumpWritten(dir, 1, old));
  std::ofstream(stacks) << "stacks";
  EXPECT_FALSE(HangDumpWritten(dir, 1, old));
  // A file time behind the asker's clock (the kernel's coarse clock, another host's) counts.
  std::ofstream(dump) << "{\"entries\": []}";
  std::filesystem::last_write_time(dump,
                                   std::filesystem::last_write_time(dump) - std::chrono::hours(24));
  EXPECT_TRUE(HangDumpWritten(dir, 1, old));
  std::filesystem::remove_all(dir);
}

// A rank that catches SIGUSR1 is asked for a dump when another fails, and stopped as soon as
// it wrote it (not after dump_wait); one that does not catch it is not asked (it would die).
TEST(LaunchTest, RanksThatCatchSigusr1AreAskedForADumpBeforeTheStop) {
  LaunchOptions o =
      Sh("d=$TRAINSCOPE_RUN_DIR/hang; if [ $RANK = 0 ]; then sleep 0.3; exit 1; fi; "
         "if [ $RANK = 1 ]; then trap 'mkdir -p $d; echo {} > $d/flight_recorder.rank1.json; "
         "echo s > $d/stacks.rank1.txt' USR1; fi; "
         "i=0; while [ $i -lt 300 ]; do sleep 0.05; i=$((i+1)); done",
         3);
  o.dump_wait = std::chrono::seconds(8);
  auto r = Launch(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->first_failed_rank, 0);
  EXPECT_EQ(r->hang.asked_ranks, std::vector<int>{1});
  EXPECT_LT(r->total_s, 5.0);
  EXPECT_TRUE(std::filesystem::exists(o.run_dir + "/hang/stacks.rank1.txt"));
  // "{}" is no dump: the analysis ran and said so, or found nothing to analyse.
  EXPECT_TRUE(r->hang.analyzed || !r->hang.error.empty());
  EXPECT_THAT(ReadFile(o.run_dir + "/launch.json"), HasSubstr("\"asked_ranks\""));
  std::filesystem::remove_all(o.run_dir);
}

}  // namespace
}  // namespace trainscope::launch
