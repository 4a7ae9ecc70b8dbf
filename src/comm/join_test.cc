// Launcher detection: each launcher's variables (on a fake Os) -> JoinOptions; Slurm's
// compact node and task lists.
#include "trainscope/comm/join.h"

#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainscope/core/fake_os.h"

namespace trainscope::comm {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

FakeOs Env(const std::vector<std::pair<std::string, std::string>>& vars) {
  FakeOs os;
  for (const auto& [k, v] : vars) os.SetEnv(k, v);
  return os;
}

absl::StatusOr<JoinOptions> Parse(const std::vector<std::pair<std::string, std::string>>& vars,
                                  const std::string& backend = "gloo") {
  FakeOs os = Env(vars);
  CommOptions defaults;
  defaults.backend = backend;
  return JoinOptionsFromEnvironment(defaults, &os);
}

TEST(JoinEnvTest, NoLauncherIsAWorldOfOne) {
  auto jo = Parse({});
  ASSERT_TRUE(jo.ok()) << jo.status();
  EXPECT_EQ(jo->launcher, Launcher::kNone);
  EXPECT_EQ(jo->rendezvous, Rendezvous::kNone);
  EXPECT_EQ(jo->comm.rank, 0);
  EXPECT_EQ(jo->comm.world_size, 1);
}

TEST(JoinEnvTest, TrainscopeLaunch) {
  auto jo = Parse({{"RANK", "1"},
                   {"WORLD_SIZE", "4"},
                   {"LOCAL_RANK", "1"},
                   {"LOCAL_WORLD_SIZE", "2"},
                   {"GROUP_RANK", "0"},
                   {"MASTER_ADDR", "10.0.0.1"},
                   {"MASTER_PORT", "1234"},
                   {"TRAINSCOPE_JOB_TOKEN", "t"},
                   {"TRAINSCOPE_COMM_TIMEOUT_S", "2.5"},
                   {"GLOO_SOCKET_IFNAME", "eth1,eth2"}});
  ASSERT_TRUE(jo.ok()) << jo.status();
  EXPECT_EQ(jo->launcher, Launcher::kTrainscope);
  EXPECT_EQ(jo->rendezvous, Rendezvous::kStore);
  EXPECT_EQ(jo->comm.rank, 1);
  EXPECT_EQ(jo->comm.world_size, 4);
  EXPECT_EQ(jo->comm.local_rank, 1);
  EXPECT_EQ(jo->comm.local_world_size, 2);
  EXPECT_EQ(jo->comm.master_addr, "10.0.0.1");
  EXPECT_EQ(jo->comm.master_port, 1234);
  EXPECT_EQ(jo->comm.timeout.count(), 2500);
  EXPECT_EQ(jo->comm.iface, "eth1");
  EXPECT_FALSE(jo->comm.job_token.has_value());  // the store reads TRAINSCOPE_JOB_TOKEN
}

const std::vector<std::pair<std::string, std::string>> kTorchrun = {
    {"RANK", "1"},
    {"WORLD_SIZE", "2"},
    {"LOCAL_RANK", "1"},
    {"LOCAL_WORLD_SIZE", "2"},
    {"GROUP_RANK", "0"},
    {"MASTER_ADDR", "127.0.0.1"},
    {"MASTER_PORT", "29731"},
    {"TORCHELASTIC_RUN_ID", "job7"},
    {"TORCHELASTIC_RESTART_COUNT", "2"},
    {"TORCHELASTIC_USE_AGENT_STORE", "True"}};

TEST(JoinEnvTest, TorchrunWithTheAgentStore) {
  auto jo = Parse(kTorchrun);
  ASSERT_TRUE(jo.ok()) << jo.status();
  EXPECT_EQ(jo->launcher, Launcher::kTorchrun);
  EXPECT_EQ(jo->rendezvous, Rendezvous::kAgentStore);
  EXPECT_EQ(jo->agent_store_key, "trainscope/job7/2/store");
  EXPECT_EQ(jo->comm.rank, 1);
  EXPECT_EQ(jo->comm.world_size, 2);
  EXPECT_EQ(jo->comm.local_rank, 1);
  EXPECT_EQ(jo->comm.master_addr, "127.0.0.1");
  EXPECT_EQ(jo->comm.master_port, 29731);
  EXPECT_EQ(jo->job_id, "job7");
}

TEST(JoinEnvTest, TorchrunWithoutTheAgentStoreMeetsLikeLaunch) {
  auto vars = kTorchrun;
  vars.back().second = "False";
  auto jo = Parse(vars);
  ASSERT_TRUE(jo.ok()) << jo.status();
  EXPECT_EQ(jo->launcher, Launcher::kTorchrun);
  EXPECT_EQ(jo->rendezvous, Rendezvous::kStore);
}

TEST(JoinEnvTest, MpiBackendAndWorldOfOneNeedNoStore) {
  auto jo = Parse(kTorchrun, "mpi");
  ASSERT_TRUE(jo.ok());
  EXPECT_EQ(jo->rendezvous, Rendezvous::kMpi);
  auto one = Parse({{"RANK", "0"},
                    {"WORLD_SIZE", "1"},
                    {"TORCHELASTIC_RUN_ID", "x"},
                    {"TORCHELASTIC_USE_AGENT_STORE", "True"}});
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->launcher, Launcher::kTorchrun);
  EXPECT_EQ(one->rendezvous, Rendezvous::kNone);
}

TEST(JoinEnvTest, OpenMpiOnOneNode) {
  std::vector<std::pair<std::string, std::string>> vars = {{"OMPI_COMM_WORLD_RANK", "1"},
                                                           {"OMPI_COMM_WORLD_SIZE", "2"},
                                                           {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                                           {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                                                           {"PMIX_NAMESPACE", "prterun-h-77@1"}};
  auto jo = Parse(vars);
  ASSERT_TRUE(jo.ok()) << jo.status();
  EXPECT_EQ(jo->launcher, Launcher::kOpenMpi);
  EXPECT_EQ(jo->rendezvous, Rendezvous::kStore);
  EXPECT_EQ(jo->comm.rank, 1);
  EXPECT_EQ(jo->comm.world_size, 2);
  EXPECT_EQ(jo->comm.local_rank, 1);
  EXPECT_EQ(jo->comm.local_world_size, 2);
  EXPECT_EQ(jo->comm.master_addr, "127.0.0.1");
  EXPECT_GE(jo->comm.master_port, kDerivedPortBase);
  EXPECT_LT(jo->comm.master_port, kDerivedPortBase + kDerivedPortSpan);
  // Every rank of the job derives the same port.
  vars[0].second = "0";
  vars[2].second = "0";
  EXPECT_EQ(Parse(vars)->comm.master_port, jo->comm.master_port);
  vars.push_back({"MASTER_PORT", "4444"});
  EXPECT_EQ(Parse(vars)->comm.master_port, 4444);
}

TEST(JoinEnvTest, OpenMpiOnSeveralNodesNeedsMasterAddr) {
  std::vector<std::pair<std::string, std::string>> vars = {{"OMPI_COMM_WORLD_RANK", "3"},
                                                           {"OMPI_COMM_WORLD_SIZE", "4"},
                                                           {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                                           {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}};
  auto jo = Parse(vars);
  EXPECT_EQ(jo.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(jo.status().message()), HasSubstr("MASTER_ADDR"));
  EXPECT_EQ(Parse(vars, "mpi")->rendezvous, Rendezvous::kMpi);  // MPI's own bootstrap
  vars.push_back({"MASTER_ADDR", "node0"});
  jo = Parse(vars);
  ASSERT_TRUE(jo.ok()) << jo.status();
  EXPECT_EQ(jo->comm.master_addr, "node0");
  EXPECT_EQ(jo->comm.master_port, 29500);  // no job id to derive one from
}

TEST(JoinEnvTest, Pmi) {
  auto jo = Parse(
      {{"PMI_RANK", "3"}, {"PMI_SIZE", "4"}, {"MPI_LOCALRANKID", "3"}, {"MPI_LOCALNRANKS", "4"}});
  ASSERT_TRUE(jo.ok()) << jo.status();
  EXPECT_EQ(jo->launcher, Launcher::kPmi);
  EXPECT_EQ(jo->comm.rank, 3);
  EXPECT_EQ(jo->comm.world_size, 4);
  EXPECT_EQ(jo->comm.local_rank, 3);
  EXPECT_EQ(jo->comm.master_addr, "127.0.0.1");
  // Without the local counts the ranks may be anywhere.
  EXPECT_FALSE(Parse({{"PMI_RANK", "0"}, {"PMI_SIZE", "2"}}).ok());
}

const std::vector<std::pair<std::string, std::string>> kSlurmStep = {
    {"SLURM_PROCID", "3"},
    {"SLURM_NTASKS", "4"},
    {"SLURM_LOCALID", "1"},
    {"SLURM_NODEID", "1"},
    {"SLURM_JOB_ID", "123456"},
    {"SLURM_STEP_ID", "0"},
    {"SLURM_STEP_NODELIST", "gpu[07-08]"},
    {"SLURM_STEP_TASKS_PER_NODE", "2(x2)"},
    {"SLURM_JOB_NODELIST", "gpu[01-08]"}};

TEST(JoinEnvTest, SlurmStep) {
  auto jo = Parse(kSlurmStep);
  ASSERT_TRUE(jo.ok()) << jo.status();
  EXPECT_EQ(jo->launcher, Launcher::kSlurm);
  EXPECT_EQ(jo->rendezvous, Rendezvous::kStore);
  EXPECT_EQ(jo->comm.rank, 3);
  EXPECT_EQ(jo->comm.world_size, 4);
  EXPECT_EQ(jo->comm.local_rank, 1);
  EXPECT_EQ(jo->comm.local_world_size, 2);
  EXPECT_EQ(jo->comm.master_addr, "gpu07");  // the step's first node, not the job's
  EXPECT_EQ(jo->master_addr_from, "SLURM_STEP_NODELIST (first host)");
  EXPECT_EQ(jo->job_id, "123456.0");
  EXPECT_GE(jo->comm.master_port, kDerivedPortBase);
  EXPECT_LT(jo->comm.master_port, kDerivedPortBase + kDerivedPortSpan);
  // Rank 0 of the same step derives the same port; the next step of the job another one.
  auto rank0 = kSlurmStep;
  rank0[0].second = "0";
  rank0[2].second = "0";
  rank0[3].second = "0";
  EXPECT_EQ(Parse(rank0)->comm.master_port, jo->comm.master_port);
  auto step1 = kSlurmStep;
  step1[5].second = "1";
  EXPECT_NE(Parse(step1)->comm.master_port, jo->comm.master_port);
}

TEST(JoinEnvTest, SlurmGivenMasterWinsAndOlderNames) {
  auto vars = kSlurmStep;
  vars.push_back({"MASTER_ADDR", "10.1.1.1"});
  vars.push_back({"MASTER_PORT", "29600"});
  auto jo = Parse(vars);
  ASSERT_TRUE(jo.ok()) << jo.status();
  EXPECT_EQ(jo->comm.master_addr, "10.1.1.1");
  EXPECT_EQ(jo->comm.master_port, 29600);
  // SLURM_STEPID and SLURM_NODELIST (older names); SLURM_NTASKS_PER_NODE.
  jo = Parse({{"SLURM_PROCID", "0"},
              {"SLURM_NTASKS", "2"},
              {"SLURM_STEPID", "3"},
              {"SLURM_NTASKS_PER_NODE", "2"},
              {"SLURM_NODELIST", "localhost"}});
  ASSERT_TRUE(jo.ok()) << jo.status();
  EXPECT_EQ(jo->launcher, Launcher::kSlurm);
  EXPECT_EQ(jo->comm.master_addr, "localhost");
  EXPECT_EQ(jo->comm.local_world_size, 2);
  EXPECT_EQ(jo->comm.master_port, 29500);  // no SLURM_JOB_ID
}

TEST(JoinEnvTest, SlurmBatchScriptIsNoWorld) {
  // sbatch's script carries SLURM_PROCID=0 and the job's task count, but is one process.
  auto jo = Parse({{"SLURM_PROCID", "0"},
                   {"SLURM_NTASKS", "8"},
                   {"SLURM_LOCALID", "0"},
                   {"SLURM_JOB_ID", "9"},
                   {"SLURM_JOB_NODELIST", "n[1-2]"}});
  ASSERT_TRUE(jo.ok()) << jo.status();
  EXPECT_EQ(jo->launcher, Launcher::kNone);
  EXPECT_EQ(jo->comm.world_size, 1);
}

TEST(JoinEnvTest, SlurmOneTaskStepIsNoWorld) {
  // srun -n 1 trainscope selftest comm -n 2: the self-test starts its own two ranks.
  auto jo = Parse({{"SLURM_PROCID", "0"},
                   {"SLURM_NTASKS", "1"},
                   {"SLURM_STEP_ID", "0"},
                   {"SLURM_STEP_NODELIST", "n1"}});
  ASSERT_TRUE(jo.ok()) << jo.status();
  EXPECT_EQ(jo->launcher, Launcher::kNone);
}

TEST(JoinEnvTest, TheLauncherInsideAnAllocationWins) {
  auto vars = kSlurmStep;
  vars.insert(vars.end(), kTorchrun.begin(), kTorchrun.end());
  auto jo = Parse(vars);
  ASSERT_TRUE(jo.ok()) << jo.status();
  EXPECT_EQ(jo->launcher, Launcher::kTorchrun);
  EXPECT_EQ(jo->comm.world_size, 2);
  vars = kSlurmStep;
  vars.insert(vars.end(), {{"OMPI_COMM_WORLD_RANK", "0"},
                           {"OMPI_COMM_WORLD_SIZE", "2"},
                           {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}});
  jo = Parse(vars);
  ASSERT_TRUE(jo.ok()) << jo.status();
  EXPECT_EQ(jo->launcher, Launcher::kOpenMpi);
  EXPECT_EQ(jo->comm.rank, 0);
}

TEST(JoinEnvTest, ErrorsNameTheVariable) {
  auto jo = Parse({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "2"}, {"SLURM_STEP_ID", "0"}});
  EXPECT_THAT(std::string(jo.status().message()), HasSubstr("SLURM_PROCID=5"));
  EXPECT_THAT(std::string(jo.status().message()), HasSubstr("SLURM_NTASKS=2"));
  jo = Parse({{"RANK", "7"}, {"WORLD_SIZE", "4"}});
  EXPECT_THAT(std::string(jo.status().message()), HasSubstr("RANK=7"));
  jo = Parse({{"RANK", "x"}, {"WORLD_SIZE", "4"}});
  EXPECT_THAT(std::string(jo.status().message()), HasSubstr("RANK='x'"));
  jo = Parse({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "70000"}});
  EXPECT_THAT(std::string(jo.status().message()), HasSubstr("MASTER_PORT=70000"));
  auto vars = kSlurmStep;
  vars[6].second = "gpu[07-";
  jo = Parse(vars);
  EXPECT_EQ(jo.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(jo.status().message()), HasSubstr("SLURM_STEP_NODELIST"));
  jo = Parse({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"TRAINSCOPE_COMM_TIMEOUT_S", "-1"}});
  EXPECT_THAT(std::string(jo.status().message()), HasSubstr("TRAINSCOPE_COMM_TIMEOUT_S"));
}

TEST(SlurmNodelistTest, Expands) {
  EXPECT_THAT(*ExpandSlurmNodelist("node[01-04,07]"),
              ElementsAre("node01", "node02", "node03", "node04", "node07"));
  EXPECT_THAT(*ExpandSlurmNodelist("login1,gpu[9-11],cpu"),
              ElementsAre("login1", "gpu9", "gpu10", "gpu11", "cpu"));
  EXPECT_THAT(*ExpandSlurmNodelist("rack[1-2]-gpu[01,03]"),
              ElementsAre("rack1-gpu01", "rack1-gpu03", "rack2-gpu01", "rack2-gpu03"));
  EXPECT_THAT(*ExpandSlurmNodelist("x[010-012]"), ElementsAre("x010", "x011", "x012"));
  EXPECT_THAT(*ExpandSlurmNodelist("127.0.0.1"), ElementsAre("127.0.0.1"));
  EXPECT_THAT(*ExpandSlurmNodelist("n[5]"), ElementsAre("n5"));
  EXPECT_THAT(*ExpandSlurmNodelist("node[01-99999],b", 1), ElementsAre("node01"));
  EXPECT_EQ(ExpandSlurmNodelist("node[1-1000]")->size(), 1000u);
}

TEST(SlurmNodelistTest, RefusesMalformedLists) {
  for (const char* bad :
       {"n[1-", "n]", "n[3-1]", "n[a-b]", "", "a,,b", "n[1-2", "n[-2]", "n[1,]", "[1-2]]"}) {
    EXPECT_EQ(ExpandSlurmNodelist(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(SlurmTasksPerNodeTest, Expands) {
  EXPECT_THAT(*ExpandSlurmTasksPerNode("2(x3),1"), ElementsAre(2, 2, 2, 1));
  EXPECT_THAT(*ExpandSlurmTasksPerNode("4"), ElementsAre(4));
  for (const char* bad : {"2(x", "x", "2(x0)", "", "2,"}) {
    EXPECT_FALSE(ExpandSlurmTasksPerNode(bad).ok()) << bad;
  }
}

}  // namespace
}  // namespace trainscope::comm
