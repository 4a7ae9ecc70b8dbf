// Check(): each matrix check and trap rule on a fixture fingerprint, firing and not firing.
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"
#include "trainscope/core/fake_os.h"
#include "trainscope/env/check.h"

namespace trainscope::env {
namespace {

using nlohmann::json;

json FixtureJson(const std::string& name) {
  std::ifstream f(std::string(TS_SOURCE_DIR) + "/tests/data/env/" + name);
  EXPECT_TRUE(f.good()) << name;
  std::stringstream ss;
  ss << f.rdbuf();
  return json::parse(ss.str());
}

const Finding* Find(const CheckResult& r, const std::string& id) {
  for (const Finding& f : r.findings) {
    if (f.id == id) return &f;
  }
  return nullptr;
}

TEST(Check, CleanGpuNodePasses) {
  CheckResult r = Check(FixtureJson("fp_nvidia_a.json"), DefaultMatrix());
  EXPECT_TRUE(r.passed());
  EXPECT_EQ(r.errors, 0);
  EXPECT_EQ(r.warnings, 0) << CheckResultToJson(r).dump(2);
}

TEST(Check, SmallMemlockIsAnErrorOnAcceleratorNodes) {
  CheckResult r = Check(FixtureJson("fp_memlock_small.json"), DefaultMatrix());
  const Finding* f = Find(r, "limits.memlock");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->severity, Severity::kError);
  EXPECT_NE(f->title.find("64.0 KiB"), std::string::npos) << f->title;
  EXPECT_NE(f->fix.find("ulimit -l unlimited"), std::string::npos);
  EXPECT_FALSE(r.passed());
  json fp = FixtureJson("fp_memlock_small.json");
  fp["accelerators"]["nvidia"] = "absent";
  fp["accelerators"]["kind"] = "none";
  EXPECT_EQ(Find(Check(fp, DefaultMatrix()), "limits.memlock")->severity, Severity::kWarning);
}

TEST(Check, ShmNofileAndHostMemory) {
  json fp = FixtureJson("fp_nvidia_a.json");
  fp["limits"]["shm_size_bytes"] = 67108864;
  fp["limits"]["nofile_soft"] = 1024;
  fp["host"]["mem_available_bytes"] = 1000;
  CheckResult r = Check(fp, DefaultMatrix());
  ASSERT_NE(Find(r, "limits.shm"), nullptr);
  EXPECT_EQ(Find(r, "limits.shm")->severity, Severity::kError);
  ASSERT_NE(Find(r, "limits.nofile"), nullptr);
  EXPECT_NE(Find(r, "limits.nofile")->fix.find("ulimit -n 1048576"), std::string::npos);
  ASSERT_NE(Find(r, "host.memory_low"), nullptr);
  fp["limits"]["shm_size_bytes"] = "absent";
  EXPECT_NE(Find(Check(fp, DefaultMatrix()), "limits.shm"), nullptr);
  fp["limits"]["shm_size_bytes"] = 8LL << 30;
  fp["limits"]["shm_available_bytes"] = 1LL << 20;
  EXPECT_NE(Find(Check(fp, DefaultMatrix()), "limits.shm_full"), nullptr);
}

TEST(Check, AscendMatrixAndMultiNodeTimeouts) {
  CheckResult r = Check(FixtureJson("fp_ascend_mismatch.json"), DefaultMatrix());
  // torch_npu 2.5.1 is published for CANN 8.1.RC1; 8.0.RC2 is installed.
  const Finding* cann = Find(r, "matrix.torch_npu_cann");
  ASSERT_NE(cann, nullptr) << CheckResultToJson(r).dump(2);
  EXPECT_EQ(cann->severity, Severity::kError);
  EXPECT_NE(cann->title.find("8.1.RC1"), std::string::npos);
  EXPECT_EQ(Find(r, "matrix.torch_npu_torch"), nullptr);  // torch 2.5.1 is right
  EXPECT_NE(Find(r, "limits.shm"), nullptr);              // 64 MiB, Docker default
  // WORLD_SIZE 16 > LOCAL_WORLD_SIZE 8 and no HCCL timeouts set.
  ASSERT_NE(Find(r, "hccl.connect_timeout_default"), nullptr);
  EXPECT_NE(Find(r, "hccl.exec_timeout_default"), nullptr);
  // ASCEND_RT_VISIBLE_DEVICES=0,1,2,3 but two NPUs.
  const Finding* vis = Find(r, "devices.ascend_rt_visible_devices");
  ASSERT_NE(vis, nullptr);
  EXPECT_NE(vis->title.find("names device 2"), std::string::npos) << vis->title;
  EXPECT_FALSE(r.passed());
  // Errors come first.
  EXPECT_EQ(r.findings[0].severity, Severity::kError);
  EXPECT_EQ(r.findings.back().severity, Severity::kInfo);
}

TEST(Check, TorchNpuTorchMismatchAndImportError) {
  json fp = FixtureJson("fp_ascend_mismatch.json");
  fp["frameworks"][0]["torch"] = "2.4.0";
  fp["toolkits"]["cann"] = "8.1.RC1";
  CheckResult r = Check(fp, DefaultMatrix());
  EXPECT_NE(Find(r, "matrix.torch_npu_torch"), nullptr);
  EXPECT_EQ(Find(r, "matrix.torch_npu_cann"), nullptr);
  fp["frameworks"][0]["torch_npu"] =
      "error: ImportError: libhccl.so: cannot open shared object file";
  EXPECT_NE(Find(Check(fp, DefaultMatrix()), "framework.torch_npu_import"), nullptr);
  fp["frameworks"][0]["torch_npu"] = "9.9.9";
  EXPECT_NE(Find(Check(fp, DefaultMatrix()), "matrix.torch_npu_unknown"), nullptr);
}

TEST(Check, HcclTimeoutSettings) {
  json fp = FixtureJson("fp_ascend_mismatch.json");
  fp["env"]["HCCL_CONNECT_TIMEOUT"] = "1200";
  fp["env"]["HCCL_EXEC_TIMEOUT"] = "900";
  fp["env"]["HCCL_EVENT_TIMEOUT"] = "600";
  CheckResult r = Check(fp, DefaultMatrix());
  EXPECT_EQ(Find(r, "hccl.connect_timeout_default"), nullptr);
  EXPECT_NE(Find(r, "hccl.connect_ge_exec"), nullptr);
  EXPECT_NE(Find(r, "hccl.event_le_exec"), nullptr);
  fp["env"]["HCCL_CONNECT_TIMEOUT"] = "60";
  EXPECT_NE(Find(Check(fp, DefaultMatrix()), "hccl.connect_timeout_range"), nullptr);
  fp["env"].erase("WORLD_SIZE");
  fp["env"]["MASTER_ADDR"] = "127.0.0.1";
  fp["env"].erase("HCCL_CONNECT_TIMEOUT");
  EXPECT_EQ(Find(Check(fp, DefaultMatrix()), "hccl.connect_timeout_default"), nullptr);
}

TEST(Check, NcclMultiNodeFlightRecorder) {
  json fp = FixtureJson("fp_nvidia_a.json");
  fp["env"]["MASTER_ADDR"] = "10.1.2.3";
  CheckResult r = Check(fp, DefaultMatrix());
  EXPECT_NE(Find(r, "nccl.flight_recorder_off"), nullptr);
  EXPECT_NE(Find(r, "nccl.ifname_unset"), nullptr);
  fp["env"]["TORCH_NCCL_TRACE_BUFFER_SIZE"] = "20000";
  fp["env"]["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = "1";
  r = Check(fp, DefaultMatrix());
  EXPECT_EQ(Find(r, "nccl.flight_recorder_off"), nullptr);
  EXPECT_NE(Find(r, "nccl.async_error_handling"), nullptr);
}

TEST(Check, CudaDriverMatrix) {
  json fp = FixtureJson("fp_nvidia_a.json");
  // torch built for CUDA 12.4 on a 535 driver (CUDA 12.2): minor-version compatibility.
  fp["frameworks"][0]["torch_cuda"] = "12.4";
  CheckResult r = Check(fp, DefaultMatrix());
  const Finding* f = Find(r, "matrix.cuda_driver_minor_compat");
  ASSERT_NE(f, nullptr) << CheckResultToJson(r).dump(2);
  EXPECT_EQ(f->severity, Severity::kWarning);
  EXPECT_NE(f->fix.find("550.54.14"), std::string::npos);
  // CUDA 13 toolkit on the same driver: a different major version, an error.
  fp["toolkits"]["cuda_toolkit"] = "13.0.88";
  r = Check(fp, DefaultMatrix());
  f = Find(r, "matrix.cuda_driver");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->severity, Severity::kError);
  EXPECT_NE(f->evidence.find("580.65.06"), std::string::npos);
  // CUDA 11.8 torch on the 535 driver is fine.
  fp["toolkits"]["cuda_toolkit"] = "12.2.140";
  fp["frameworks"][0]["torch_cuda"] = "11.8";
  EXPECT_TRUE(Check(fp, DefaultMatrix()).passed());
}

TEST(Check, NcclKnownIssues) {
  json fp = FixtureJson("fp_nvidia_a.json");
  fp["toolkits"]["nccl"] = "2.28.5";
  CheckResult r = Check(fp, DefaultMatrix());
  EXPECT_NE(Find(r, "matrix.nccl.inprocess_restart"), nullptr);
  EXPECT_EQ(Find(r, "matrix.nccl.arm_proxy_cas_hang"), nullptr);  // x86_64
  fp["host"]["arch"] = "aarch64";
  EXPECT_NE(Find(Check(fp, DefaultMatrix()), "matrix.nccl.arm_proxy_cas_hang"), nullptr);
  fp["toolkits"]["nccl"] = "2.29.3";
  fp["host"]["arch"] = "x86_64";
  EXPECT_EQ(Check(fp, DefaultMatrix()).warnings, 0);
}

TEST(Check, VisibleDevicesAgainstGpus) {
  json fp = FixtureJson("fp_nvidia_a.json");
  fp["env"]["CUDA_VISIBLE_DEVICES"] = "0,1,2";
  EXPECT_NE(Find(Check(fp, DefaultMatrix()), "devices.cuda_visible_devices"), nullptr);
  fp["env"]["CUDA_VISIBLE_DEVICES"] = "";
  EXPECT_NE(Find(Check(fp, DefaultMatrix()), "devices.cuda_visible_devices"), nullptr);
  fp["env"]["CUDA_VISIBLE_DEVICES"] = "1,1";
  EXPECT_NE(Find(Check(fp, DefaultMatrix()), "devices.cuda_visible_devices"), nullptr);
  fp["env"]["CUDA_VISIBLE_DEVICES"] = "GPU-8d0c2b61";
  EXPECT_EQ(Find(Check(fp, DefaultMatrix()), "devices.cuda_visible_devices"), nullptr);
  fp["env"]["CUDA_VISIBLE_DEVICES"] = "GPU-ffff";
  EXPECT_NE(Find(Check(fp, DefaultMatrix()), "devices.cuda_visible_devices"), nullptr);
}

TEST(Check, DeviceHealthAndSettings) {
  json fp = FixtureJson("fp_nvidia_a.json");
  fp["accelerators"]["nvidia"]["gpus"][0]["ecc_uncorrected_volatile"] = 3;
  fp["accelerators"]["nvidia"]["gpus"][1]["remapped_rows_pending"] = "Yes";
  fp["accelerators"]["nvidia"]["gpus"][1]["persistence_mode"] = "Disabled";
  fp["env"]["CUDA_LAUNCH_BLOCKING"] = "1";
  fp["env"]["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True,max_split_size_mb:128";
  CheckResult r = Check(fp, DefaultMatrix());
  EXPECT_NE(Find(r, "nvidia.ecc_uncorrected"), nullptr);
  EXPECT_NE(Find(r, "nvidia.pending_retirement"), nullptr);
  EXPECT_NE(Find(r, "nvidia.persistence_mode"), nullptr);
  EXPECT_NE(Find(r, "env.cuda_launch_blocking"), nullptr);
  EXPECT_NE(Find(r, "env.pytorch_cuda_alloc_conf"), nullptr);
  json asc = FixtureJson("fp_ascend_mismatch.json");
  asc["accelerators"]["ascend"]["npus"][1]["health"] = "Alarm";
  asc["env"]["HCCL_INTRA_PCIE_ENABLE"] = "1";
  asc["env"]["HCCL_INTRA_ROCE_ENABLE"] = "1";
  asc["env"]["ASCEND_GLOBAL_LOG_LEVEL"] = "1";
  r = Check(asc, DefaultMatrix());
  ASSERT_NE(Find(r, "ascend.health"), nullptr);
  EXPECT_EQ(Find(r, "ascend.health")->severity, Severity::kError);
  EXPECT_NE(Find(r, "hccl.intra_links"), nullptr);
  EXPECT_NE(Find(r, "env.ascend_log_level"), nullptr);
  json torch_broken = FixtureJson("fp_nvidia_a.json");
  torch_broken["frameworks"][0]["torch"] =
      "error: OSError: libcudnn.so.8: cannot open shared object file";
  EXPECT_NE(Find(Check(torch_broken, DefaultMatrix()), "framework.torch_import"), nullptr);
  json broken = FixtureJson("fp_nvidia_a.json");
  broken["accelerators"]["nvidia"] =
      "error: nvidia-smi exited 9: NVIDIA-SMI has failed because it couldn't communicate";
  r = Check(broken, DefaultMatrix());
  EXPECT_NE(Find(r, "nvidia.driver"), nullptr);
  EXPECT_NE(Find(r, "probe.errors"), nullptr);
}

TEST(Check, JsonContractAndTable) {
  CheckResult r = Check(FixtureJson("fp_memlock_small.json"), DefaultMatrix());
  json j = CheckResultToJson(r);
  EXPECT_EQ(j["format"], "trainscope.env.check");
  EXPECT_EQ(j["version"], 1);
  EXPECT_EQ(j["passed"], false);
  EXPECT_EQ(j["errors"], 1);
  for (const json& f : j["findings"]) {
    for (const char* k : {"severity", "id", "what", "evidence", "fix"}) EXPECT_TRUE(f.contains(k));
  }
  std::string table = RenderCheck(r);
  EXPECT_NE(table.find("limits.memlock"), std::string::npos);
  EXPECT_NE(table.find("fix:"), std::string::npos);
}

TEST(Matrix, ShippedMatrixLoadsAndBadOnesArePositioned) {
  auto m = LoadMatrix(Os::Default(), std::string(TS_SOURCE_DIR) + "/data/compat_matrix.json");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(*m, DefaultMatrix());  // the compiled-in copy is current
  auto bad = LoadMatrix(Os::Default(),
                        std::string(TS_SOURCE_DIR) + "/tests/data/env/matrix_bad_type.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message())
                .find("$.cuda_driver.toolkits[0].min_driver: expected string"),
            std::string::npos)
      << bad.status();
  FakeOs os;
  os.AddFile("/m.json", "{\"format\": \"trainscope.env.compat_matrix\",\n  \"version\": 1,,}");
  auto syntax = LoadMatrix(&os, "/m.json");
  ASSERT_FALSE(syntax.ok());
  EXPECT_EQ(std::string(syntax.status().message()).rfind("/m.json:2:", 0), 0u) << syntax.status();
}

// A user's matrix: overflowing numbers and directories are one-line errors (exit 2), and a
// wrong type is caught by the schema before Check() reads it (matrix_bad_type.json).
TEST(Matrix, HostileMatrixFilesAreCleanErrors) {
  FakeOs os;
  os.AddFile("/m.json", "{\"format\": \"trainscope.env.compat_matrix\",\n \"version\": 1e309}");
  absl::StatusOr<json> m;
  ASSERT_NO_THROW(m = LoadMatrix(&os, "/m.json"));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(std::string(m.status().message()),
            "/m.json:2:13: number overflow parsing '1e309' (byte 55)");
  auto dir = LoadMatrix(Os::Default(), std::string(TS_SOURCE_DIR) + "/tests/data/env");
  EXPECT_EQ(dir.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(dir.status().message()).find("is a directory"), std::string::npos);
  json bad = DefaultMatrix();
  bad["torch_npu"]["releases"][0]["cann"] = "9.1.0";  // a string where a list belongs
  os.AddFile("/bad.json", bad.dump());
  auto schema = LoadMatrix(&os, "/bad.json");
  EXPECT_EQ(std::string(schema.status().message()),
            "/bad.json: $.torch_npu.releases[0].cann: expected array, found string \"9.1.0\"");
}

}  // namespace
}  // namespace trainscope::env
