// The collective-settings rules (collective_rules.cc) on small fake fingerprints: each rule
// firing on the value it is about and staying silent on a good one; and the network probe on
// a fake sysfs.
#include <optional>
#include <string>

#include "env/json_doc.h"
#include "gtest/gtest.h"
#include "trainscope/core/fake_os.h"
#include "trainscope/env/check.h"
#include "trainscope/env/fingerprint.h"

namespace trainscope::env {
namespace {

using nlohmann::json;

// A fingerprint with only the facts the rules read: env, and network interfaces lo, eth0
// (up), ib0 (down, InfiniBand) and the RDMA device mlx5_0.
json CollFp(const json& env) {
  json fp;
  fp["env"] = env;
  fp["network"] = {{"interfaces",
                    {{{"name", "eth0"}, {"operstate", "up"}, {"type", 1}},
                     {{"name", "ib0"}, {"operstate", "down"}, {"type", 32}},
                     {{"name", "lo"}, {"operstate", "unknown"}, {"type", 772}}}},
                   {"ib_devices", {"mlx5_0"}}};
  return fp;
}

// A copy, so that it can be taken from a temporary CheckResult.
std::optional<Finding> CollFind(const CheckResult& r, const std::string& id) {
  for (const Finding& f : r.findings) {
    if (f.id == id) return f;
  }
  return std::nullopt;
}

CheckResult CollCheck(const json& env) { return Check(CollFp(env), DefaultMatrix()); }

TEST(CollectiveRules, NothingSetNothingFound) {
  CheckResult r = CollCheck(json::object());
  EXPECT_TRUE(r.findings.empty()) << CheckResultToJson(r).dump(2);
}

TEST(CollectiveRules, GoodValuesAreSilent) {
  CheckResult r = CollCheck({{"NCCL_SOCKET_IFNAME", "eth"},
                             {"GLOO_SOCKET_IFNAME", "eth0"},
                             {"NCCL_IB_HCA", "mlx5_0:1"},
                             {"NCCL_BUFFSIZE", "8388608"},
                             {"NCCL_DEBUG", "WARN"},
                             {"HCCL_BUFFSIZE", "200"},
                             {"HCCL_EXEC_TIMEOUT", "1836"},
                             {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "3"},
                             {"CUBLAS_WORKSPACE_CONFIG", ":4096:8"},
                             {"NCCL_IB_TIMEOUT", "22"}});
  EXPECT_TRUE(r.findings.empty()) << CheckResultToJson(r).dump(2);
}

TEST(CollectiveRules, DeprecatedNamesAndConflicts) {
  CheckResult r = CollCheck({{"NCCL_ASYNC_ERROR_HANDLING", "1"}});
  std::optional<Finding> f = CollFind(r, "env.deprecated_name");
  ASSERT_NE(f, std::nullopt);
  EXPECT_EQ(f->severity, Severity::kWarning);
  EXPECT_EQ(f->evidence, "NCCL_ASYNC_ERROR_HANDLING=1");
  EXPECT_NE(f->fix.find("TORCH_NCCL_ASYNC_ERROR_HANDLING=1"), std::string::npos) << f->fix;
  r = CollCheck({{"NCCL_BLOCKING_WAIT", "0"}, {"TORCH_NCCL_BLOCKING_WAIT", "1"}});
  ASSERT_NE(CollFind(r, "env.deprecated_conflict"), std::nullopt);
  EXPECT_EQ(CollFind(r, "env.deprecated_conflict")->severity, Severity::kError);
  EXPECT_EQ(CollFind(r, "env.deprecated_name"), std::nullopt);
}

TEST(CollectiveRules, UnknownAlgorithmAndProtocol) {
  CheckResult r = CollCheck({{"NCCL_ALGO", "Ring,Treee"}});
  std::optional<Finding> f = CollFind(r, "nccl_algo.unknown_value");
  ASSERT_NE(f, std::nullopt);
  EXPECT_EQ(f->severity, Severity::kError);
  EXPECT_NE(f->title.find("\"Treee\""), std::string::npos) << f->title;
  EXPECT_EQ(f->title.find("\"Ring\""), std::string::npos) << f->title;
  ASSERT_NE(CollFind(r, "nccl.algo_pinned"), std::nullopt);  // pinned at all: measured?
  // NCCL's list syntax: exclusion and per-collective groups, any case.
  r = CollCheck({{"NCCL_ALGO", "allreduce:tree,ring;broadcast:^ring"}, {"NCCL_PROTO", "^ll128"}});
  EXPECT_EQ(CollFind(r, "nccl_algo.unknown_value"), std::nullopt);
  EXPECT_EQ(CollFind(r, "nccl_proto.unknown_value"), std::nullopt);
  ASSERT_NE(CollFind(r, "nccl.proto_pinned"), std::nullopt);
  EXPECT_EQ(CollFind(r, "nccl.proto_ll128"), std::nullopt);
  r = CollCheck({{"NCCL_PROTO", "LL128"}});
  ASSERT_NE(CollFind(r, "nccl.proto_ll128"), std::nullopt);
  r = CollCheck({{"NCCL_PROTO", "fast"}});
  ASSERT_NE(CollFind(r, "nccl_proto.unknown_value"), std::nullopt);
}

TEST(CollectiveRules, ChoicesOfOtherVariables) {
  CheckResult r = CollCheck({{"HCCL_DETERMINISTIC", "yes"},
                             {"NCCL_NTHREADS", "100"},
                             {"CUBLAS_WORKSPACE_CONFIG", ":4096:2"},
                             {"TORCH_DISTRIBUTED_DEBUG", "detail"}});
  ASSERT_NE(CollFind(r, "hccl_deterministic.unknown_value"), std::nullopt);
  ASSERT_NE(CollFind(r, "nccl_nthreads.unknown_value"), std::nullopt);
  ASSERT_NE(CollFind(r, "cublas_workspace_config.unknown_value"), std::nullopt);
  EXPECT_EQ(CollFind(r, "torch_distributed_debug.unknown_value"),
            std::nullopt);  // case-insensitive
  ASSERT_NE(CollFind(r, "torch.distributed_debug_detail"), std::nullopt);
  r = CollCheck({{"HCCL_DETERMINISTIC", "TRUE"}, {"HCCL_OP_EXPANSION_MODE", "CCU_MS"}});
  EXPECT_EQ(CollFind(r, "hccl_deterministic.unknown_value"), std::nullopt);
  EXPECT_EQ(CollFind(r, "hccl_op_expansion_mode.unknown_value"), std::nullopt);
  ASSERT_NE(CollFind(r, "hccl.deterministic"), std::nullopt);
  EXPECT_EQ(CollFind(r, "hccl.deterministic")->severity, Severity::kInfo);
}

TEST(CollectiveRules, IntegerRanges) {
  CheckResult r = CollCheck({{"NCCL_IB_TIMEOUT", "40"},
                             {"HCCL_RDMA_RETRY_CNT", "0"},
                             {"HCCL_EXEC_TIMEOUT", "ten"},
                             {"HCCL_IF_BASE_PORT", "65520"}});
  std::optional<Finding> f = CollFind(r, "nccl_ib_timeout.invalid");
  ASSERT_NE(f, std::nullopt);
  EXPECT_NE(f->title.find("[1, 31]"), std::string::npos) << f->title;
  ASSERT_NE(CollFind(r, "hccl_rdma_retry_cnt.invalid"), std::nullopt);
  f = CollFind(r, "hccl_exec_timeout.invalid");
  ASSERT_NE(f, std::nullopt);
  EXPECT_NE(f->title.find("not an integer"), std::string::npos) << f->title;
  EXPECT_EQ(CollFind(r, "hccl_if_base_port.invalid"), std::nullopt);  // the bound itself is fine
}

TEST(CollectiveRules, P2pDisableIsAnErrorOnlyWithNvlink) {
  json fp = CollFp({{"NCCL_P2P_DISABLE", "1"}});
  std::optional<Finding> f = CollFind(Check(fp, DefaultMatrix()), "nccl.p2p_disabled");
  ASSERT_NE(f, std::nullopt);
  EXPECT_EQ(f->severity, Severity::kWarning);
  fp["accelerators"]["nvidia"]["topology"]["summary"]["pairs_by_class"] = {{"NV18", 28}};
  CheckResult r = Check(fp, DefaultMatrix());
  f = CollFind(r, "nccl.p2p_disabled");
  ASSERT_NE(f, std::nullopt);
  EXPECT_EQ(f->severity, Severity::kError);
  EXPECT_NE(f->evidence.find("NVLink"), std::string::npos);
  fp["env"]["NCCL_P2P_DISABLE"] = "0";
  EXPECT_EQ(CollFind(Check(fp, DefaultMatrix()), "nccl.p2p_disabled"), std::nullopt);
}

TEST(CollectiveRules, IbDisableWithRdmaDevicesPresent) {
  json fp = CollFp({{"NCCL_IB_DISABLE", "1"}});
  std::optional<Finding> f = CollFind(Check(fp, DefaultMatrix()), "nccl.ib_disabled");
  ASSERT_NE(f, std::nullopt);
  EXPECT_EQ(f->severity, Severity::kError);
  EXPECT_NE(f->evidence.find("mlx5_0"), std::string::npos);
  fp["network"]["ib_devices"] = "absent";
  EXPECT_EQ(CollFind(Check(fp, DefaultMatrix()), "nccl.ib_disabled"), std::nullopt);
}

TEST(CollectiveRules, DebugLevels) {
  EXPECT_EQ(CollFind(CollCheck({{"NCCL_DEBUG", "TRACE"}}), "nccl.debug_trace")->severity,
            Severity::kWarning);
  EXPECT_EQ(CollFind(CollCheck({{"NCCL_DEBUG", "info"}}), "nccl.debug_info")->severity,
            Severity::kInfo);
  EXPECT_TRUE(CollCheck({{"NCCL_DEBUG", "WARN"}}).findings.empty());
}

TEST(CollectiveRules, TorchErrorHandlingAndBlockingWait) {
  CheckResult r =
      CollCheck({{"TORCH_NCCL_ASYNC_ERROR_HANDLING", "0"}, {"TORCH_NCCL_BLOCKING_WAIT", "1"}});
  ASSERT_NE(CollFind(r, "torch.nccl_async_error_handling_off"), std::nullopt);
  ASSERT_NE(CollFind(r, "torch.nccl_blocking_wait"), std::nullopt);
  EXPECT_EQ(CollFind(r, "torch.nccl_async_error_handling_off")->evidence,
            "TORCH_NCCL_ASYNC_ERROR_HANDLING=0");
}

TEST(CollectiveRules, NcclTimeoutIsNotAVariable) {
  std::optional<Finding> f =
      CollFind(CollCheck({{"NCCL_TIMEOUT", "1800"}}), "nccl.timeout_not_a_variable");
  ASSERT_NE(f, std::nullopt);
  EXPECT_NE(f->fix.find("init_process_group"), std::string::npos);
}

TEST(CollectiveRules, NcclBufferSize) {
  CheckResult r = CollCheck({{"NCCL_BUFFSIZE", "65536"}});
  ASSERT_NE(CollFind(r, "nccl.buffsize_small"), std::nullopt);
  EXPECT_EQ(CollFind(r, "nccl.buffsize_not_pow2"), std::nullopt);
  r = CollCheck({{"NCCL_BUFFSIZE", "5000000"}});
  EXPECT_EQ(CollFind(r, "nccl.buffsize_small"), std::nullopt);
  ASSERT_NE(CollFind(r, "nccl.buffsize_not_pow2"), std::nullopt);
  r = CollCheck({{"NCCL_BUFFSIZE", "4M"}});
  ASSERT_NE(CollFind(r, "nccl_buffsize.invalid"), std::nullopt);
  EXPECT_EQ(CollFind(r, "nccl_buffsize.invalid")->severity, Severity::kError);
}

TEST(CollectiveRules, HcclBufferSize) {
  EXPECT_NE(CollFind(CollCheck({{"HCCL_BUFFSIZE", "50"}}), "hccl.buffsize_small"), std::nullopt);
  std::optional<Finding> f =
      CollFind(CollCheck({{"HCCL_BUFFSIZE", "4096"}}), "hccl.buffsize_large");
  ASSERT_NE(f, std::nullopt);
  EXPECT_NE(f->title.find("8192 MB"), std::string::npos) << f->title;
  EXPECT_NE(CollFind(CollCheck({{"HCCL_BUFFSIZE", "0"}}), "hccl_buffsize.invalid"), std::nullopt);
}

TEST(CollectiveRules, HcclTimeouts) {
  CheckResult r = CollCheck({{"HCCL_EXEC_TIMEOUT", "60"}});
  ASSERT_NE(CollFind(r, "hccl.exec_timeout_short"), std::nullopt);
  EXPECT_EQ(CollFind(CollCheck({{"HCCL_EXEC_TIMEOUT", "0"}}), "hccl.exec_timeout_short"),
            std::nullopt);  // 0 = never
  r = CollCheck({{"HCCL_EXEC_TIMEOUT", "3600"}, {"HCCL_OP_EXPANSION_MODE", "AIV"}});
  ASSERT_NE(CollFind(r, "hccl.exec_timeout_aiv_cap"), std::nullopt);
  r = CollCheck({{"HCCL_CONNECT_TIMEOUT", "120"}, {"WORLD_SIZE", "256"}});
  ASSERT_NE(CollFind(r, "hccl.connect_timeout_big_job"), std::nullopt);
  r = CollCheck({{"HCCL_CONNECT_TIMEOUT", "1200"}, {"WORLD_SIZE", "256"}});
  EXPECT_EQ(CollFind(r, "hccl.connect_timeout_big_job"), std::nullopt);
  r = CollCheck({{"HCCL_CONNECT_TIMEOUT", "120"}, {"WORLD_SIZE", "8"}});
  EXPECT_EQ(CollFind(r, "hccl.connect_timeout_big_job"), std::nullopt);
}

TEST(CollectiveRules, SocketInterfaceMustExist) {
  CheckResult r = CollCheck({{"NCCL_SOCKET_IFNAME", "enp"}});
  std::optional<Finding> f = CollFind(r, "nccl_socket_ifname.missing");
  ASSERT_NE(f, std::nullopt);
  EXPECT_EQ(f->severity, Severity::kError);
  EXPECT_EQ(f->evidence, "NCCL_SOCKET_IFNAME=enp; present: eth0, ib0, lo");
  // Some entries exist: a warning naming the others.
  r = CollCheck({{"NCCL_SOCKET_IFNAME", "eth,bond"}});
  f = CollFind(r, "nccl_socket_ifname.missing");
  ASSERT_NE(f, std::nullopt);
  EXPECT_EQ(f->severity, Severity::kWarning);
  EXPECT_NE(f->title.find("(bond)"), std::string::npos) << f->title;
  // "=" means an exact name: "=eth" matches nothing, "=eth0" does.
  EXPECT_NE(CollFind(CollCheck({{"NCCL_SOCKET_IFNAME", "=eth"}}), "nccl_socket_ifname.missing"),
            std::nullopt);
  EXPECT_TRUE(CollCheck({{"NCCL_SOCKET_IFNAME", "=eth0"}}).findings.empty());
  EXPECT_TRUE(CollCheck({{"NCCL_SOCKET_IFNAME", "^docker,lo"}}).findings.empty());
  // gloo takes exact names: a prefix does not match.
  EXPECT_NE(CollFind(CollCheck({{"GLOO_SOCKET_IFNAME", "eth"}}), "gloo_socket_ifname.missing"),
            std::nullopt);
  EXPECT_NE(CollFind(CollCheck({{"HCCL_SOCKET_IFNAME", "bond0"}}), "hccl_socket_ifname.missing"),
            std::nullopt);
}

TEST(CollectiveRules, InterfaceDownAndRdmaDevice) {
  CheckResult r = CollCheck({{"NCCL_SOCKET_IFNAME", "ib0"}});
  ASSERT_NE(CollFind(r, "nccl_socket_ifname.down"), std::nullopt);
  r = CollCheck({{"NCCL_IB_HCA", "mlx5_1:1,mlx5_2:1"}});
  ASSERT_NE(CollFind(r, "nccl_ib_hca.missing"), std::nullopt);
  EXPECT_EQ(CollFind(r, "nccl_ib_hca.missing")->severity, Severity::kError);
  json fp = CollFp({{"NCCL_IB_HCA", "mlx5"}});
  fp["network"]["ib_devices"] = "absent";
  std::optional<Finding> f = CollFind(Check(fp, DefaultMatrix()), "nccl_ib_hca.missing");
  ASSERT_NE(f, std::nullopt);
  EXPECT_EQ(f->severity, Severity::kWarning);
}

TEST(CollectiveRules, LoopbackOnMultiNodeJob) {
  CheckResult r =
      CollCheck({{"NCCL_SOCKET_IFNAME", "lo"}, {"WORLD_SIZE", "16"}, {"LOCAL_WORLD_SIZE", "8"}});
  std::optional<Finding> f = CollFind(r, "nccl_socket_ifname.loopback");
  ASSERT_NE(f, std::nullopt);
  EXPECT_EQ(f->severity, Severity::kError);
  EXPECT_NE(f->evidence.find("WORLD_SIZE=16 > LOCAL_WORLD_SIZE=8"), std::string::npos);
  // One node: loopback is fine.
  r = CollCheck({{"NCCL_SOCKET_IFNAME", "lo"}, {"WORLD_SIZE", "8"}, {"LOCAL_WORLD_SIZE", "8"}});
  EXPECT_EQ(CollFind(r, "nccl_socket_ifname.loopback"), std::nullopt);
  EXPECT_EQ(CollFind(r, "nccl_socket_ifname.missing"), std::nullopt);
}

TEST(CollectiveRules, WithoutCapturedInterfacesOnlyTheNameIsJudged) {
  json fp = CollFp({{"GLOO_SOCKET_IFNAME", "nosuch0"}});
  fp.erase("network");  // an older fingerprint
  EXPECT_EQ(CollFind(Check(fp, DefaultMatrix()), "gloo_socket_ifname.missing"), std::nullopt);
}

TEST(CollectiveRules, FingerprintCapturesInterfacesAndCollectiveVariables) {
  FakeOs os;
  os.AddFile("/sys/class/net/eth0/operstate", "up\n");
  os.AddFile("/sys/class/net/eth0/type", "1\n");
  os.AddFile("/sys/class/net/lo/operstate", "unknown\n");
  os.AddFile("/sys/class/net/lo/type", "772\n");
  os.AddFile("/sys/class/infiniband/mlx5_0/ports/1/state", "4: ACTIVE\n");
  os.SetEnv("NCCL_SOCKET_IFNAME", "eth0");
  os.SetEnv("CUBLAS_WORKSPACE_CONFIG", ":4096:8");
  os.SetEnv("TORCH_NCCL_BLOCKING_WAIT", "1");
  os.SetEnv("HOME", "/root");
  FingerprintOptions o;
  o.parallel = false;
  o.pythons = {"/nonexistent/python3"};
  auto fp = Fingerprint(&os, o);
  ASSERT_TRUE(fp.ok()) << fp.status();
  const json& net = (*fp)["network"];
  ASSERT_TRUE(net["interfaces"].is_array()) << net.dump();
  ASSERT_EQ(net["interfaces"].size(), 2u);
  EXPECT_EQ(net["interfaces"][0]["name"], "eth0");
  EXPECT_EQ(net["interfaces"][0]["operstate"], "up");
  EXPECT_EQ(net["interfaces"][1]["type"], 772);
  EXPECT_EQ(net["ib_devices"], json({"mlx5_0"}));
  EXPECT_EQ((*fp)["env"]["CUBLAS_WORKSPACE_CONFIG"], ":4096:8");
  EXPECT_EQ((*fp)["env"]["TORCH_NCCL_BLOCKING_WAIT"], "1");
  EXPECT_FALSE((*fp)["env"].contains("HOME"));
  EXPECT_TRUE(ValidateAgainstSchema(*fp, FingerprintSchema(), "fp").ok());
  // An empty machine records "absent", which the schema accepts too.
  FakeOs bare;
  auto fp2 = Fingerprint(&bare, o);
  ASSERT_TRUE(fp2.ok());
  absl::Status st = ValidateAgainstSchema(*fp2, FingerprintSchema(), "fp2");
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_EQ((*fp2)["network"]["interfaces"], "absent");
  EXPECT_EQ((*fp2)["network"]["ib_devices"], "absent");
}

}  // namespace
}  // namespace trainscope::env
