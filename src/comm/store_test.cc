// The rendezvous store's refusals as a rank sees them, and the fuzzer's seed corpus
// (fuzz/seeds/store_message/), which is the store's own encoder output for real requests.
#include "comm/store.h"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainscope/comm/comm.h"

namespace trainscope::comm {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// A rank started by hand (no `trainscope launch`, so no TRAINSCOPE_JOB_TOKEN) or with another
// job's token is refused by a rank 0 that has a token, with one line that says which; the
// store goes on serving the job's own ranks.
TEST(StoreSecurityTest, RanksWithoutTheJobTokenAreRefusedAndTheJobGoesOn) {
  ::unsetenv("TRAINSCOPE_JOB_TOKEN");
  CommOptions o;
  o.master_addr = "127.0.0.1";
  o.master_port = 0;
  o.rank = 0;
  o.world_size = 2;
  o.timeout = std::chrono::seconds(2);
  o.job_token = "job-token-1";
  auto rank0 = JoinStore(o);
  ASSERT_TRUE(rank0.ok()) << rank0.status();
  o.master_port = (*rank0)->server->port();
  o.rank = 1;
  o.job_token.reset();  // the environment's, unset: started without `launch`
  auto by_hand = JoinStore(o);
  ASSERT_FALSE(by_hand.ok());
  EXPECT_EQ(by_hand.status().code(), absl::StatusCode::kPermissionDenied);
  const std::string none(by_hand.status().message());
  EXPECT_THAT(none, HasSubstr("requires a job token and this process has none"));
  EXPECT_THAT(none, HasSubstr("trainscope launch"));
  EXPECT_EQ(none.find('\n'), std::string::npos);
  o.job_token = "another-job";
  auto wrong = JoinStore(o);
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(wrong.status().message()), HasSubstr("refused this process's job token"));
  EXPECT_THAT(std::string(wrong.status().message()), Not(HasSubstr("job-token-1")));
  EXPECT_EQ((*rank0)->server->stats().refused_auth, 2);
  o.job_token = "job-token-1";  // the real rank 1 still gets in, and rank 1 is free for it
  auto rank1 = JoinStore(o);
  ASSERT_TRUE(rank1.ok()) << rank1.status();
  ASSERT_TRUE((*rank1)->client->Set("k", {'v'}).ok());
  auto v = (*rank0)->client->Get("k", std::chrono::seconds(1));
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(std::string(v->begin(), v->end()), "v");
}

// Seeds for fuzz/store_message_fuzzer.cc: one frame per kind of request a rank sends (as
// TcpStoreClient and JoinStore send them), plus edge values (binary and empty strings,
// extreme ranks and deltas). With TS_WRITE_FUZZ_SEEDS=1 the test (re)writes the files;
// otherwise it checks that each file is exactly EncodeStoreRequest of its request and
// decodes back to it, so the corpus cannot drift from the wire format.
std::vector<std::pair<std::string, StoreRequest>> SeedRequests() {
  auto req = [](StoreOp op, int32_t rank, int32_t world, std::string key, std::string value,
                int64_t delta) {
    StoreRequest r;
    r.op = op;
    r.rank = rank;
    r.world_size = world;
    r.key = std::move(key);
    r.value = std::move(value);
    r.delta = delta;
    return r;
  };
  return {
      {"auth_token", req(StoreOp::kAuth, 0, 0, "", "0123456789abcdef0123456789abcdef", 0)},
      {"auth_empty", req(StoreOp::kAuth, 0, 0, "", "", 0)},
      {"hello_r0_w2", req(StoreOp::kHello, 0, 2, "", "", 0)},
      {"hello_r127_w128", req(StoreOp::kHello, 127, 128, "", "", 0)},
      {"bye", req(StoreOp::kBye, 0, 0, "", "", 0)},
      {"set_barrier", req(StoreOp::kSet, 0, 0, "barrier/3/1", "1", 0)},
      {"set_binary", req(StoreOp::kSet, 0, 0, "nccl_id/0", std::string("\x00\xff\x01\x80", 4), 0)},
      {"set_empty", req(StoreOp::kSet, 0, 0, "", "", 0)},
      {"check_key", req(StoreOp::kCheck, 0, 0, "failed/12/0", "", 0)},
      {"add_one", req(StoreOp::kAdd, 0, 0, "seq", "", 1)},
      {"add_min", req(StoreOp::kAdd, 0, 0, "seq", "", INT64_MIN)},
      {"dead", req(StoreOp::kDead, 0, 0, "", "", 0)},
  };
}

TEST(StoreFuzzSeedsTest, SeedsAreTheEncodersFrames) {
  const char* src = std::getenv("TS_SOURCE_DIR");
  ASSERT_NE(src, nullptr) << "run through ctest (TS_SOURCE_DIR)";
  const std::string dir = absl::StrCat(src, "/fuzz/seeds/store_message/");
  const char* write = std::getenv("TS_WRITE_FUZZ_SEEDS");
  for (const auto& [name, request] : SeedRequests()) {
    const std::string frame = EncodeStoreRequest(request);
    if (write != nullptr && std::string(write) == "1") {
      std::ofstream(dir + name, std::ios::binary) << frame;
    }
    std::ifstream in(dir + name, std::ios::binary);
    ASSERT_TRUE(in) << dir + name << " missing (TS_WRITE_FUZZ_SEEDS=1 writes it)";
    std::stringstream bytes;
    bytes << in.rdbuf();
    EXPECT_EQ(bytes.str(), frame) << name;
    auto back = DecodeStoreRequest(bytes.str());
    ASSERT_TRUE(back.ok()) << name << ": " << back.status();
    EXPECT_EQ(back->op, request.op) << name;
    EXPECT_EQ(back->key, request.key) << name;
    EXPECT_EQ(back->value, request.value) << name;
    EXPECT_EQ(back->delta, request.delta) << name;
    EXPECT_EQ(back->rank, request.rank) << name;
  }
}

}  // namespace
}  // namespace trainscope::comm
