// Fingerprint() on a FakeOs built from fixtures, probe failure modes, schema validation of
// fake, fixture and live fingerprints, and Diff().
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "env/env_test_util.h"
#include "env/json_doc.h"
#include "env/probes.h"
#include "gtest/gtest.h"
#include "trainscope/core/fake_os.h"
#include "trainscope/env/check.h"
#include "trainscope/env/diff.h"
#include "trainscope/env/fingerprint.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TS_SANITIZER_SHADOW_MEMORY 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
#define TS_SANITIZER_SHADOW_MEMORY 1
#endif
#endif

namespace trainscope::env {
namespace {

using nlohmann::json;

std::string FixturePath(const std::string& name) {
  return std::string(TS_SOURCE_DIR) + "/tests/data/env/" + name;
}

RunResult Ok(std::string out) {
  RunResult r;
  r.exited = true;
  r.exit_code = 0;
  r.out = std::move(out);
  return r;
}

// A GPU node in a container: Docker's memlock and /dev/shm, two H100s, CUDA 12.2.
void MakeGpuNode(FakeOs* os) {
  os->AddFile("/etc/os-release", "NAME=\"Ubuntu\"\nPRETTY_NAME=\"Ubuntu 22.04.4 LTS\"\n");
  os->AddFile("/proc/sys/kernel/osrelease", "5.15.0-105-generic\n");
  os->AddFile("/proc/sys/kernel/hostname", "gpu-node-01\n");
  os->AddFile("/proc/cpuinfo", Fixture("cpuinfo_x86.txt"));
  os->AddFile("/sys/devices/system/cpu/online", "0-1\n");
  os->AddFile("/sys/devices/system/node/node0/cpulist", "0-1\n");
  os->AddFile("/sys/devices/system/node/possible", "0\n");
  os->AddFile("/proc/meminfo", Fixture("meminfo.txt"));
  os->AddFile("/sys/kernel/mm/transparent_hugepage/enabled", "always [madvise] never\n");
  os->AddFile("/proc/self/limits", Fixture("proc_limits_docker.txt"));
  os->AddFile("/dev/shm/.keep", "");
  os->AddProgram("df", Ok(Fixture("df_shm_docker.txt")));
  os->AddProgram("nvidia-smi", Ok(Fixture("nvidia_smi_h100x2.xml")));
  os->AddFile("/usr/local/cuda/version.json",
              R"({"cuda": {"name": "CUDA SDK", "version": "12.2.140"}})");
  os->AddFile("/usr/local/cuda/include/cudnn_version.h",
              "#define CUDNN_MAJOR 8\n#define CUDNN_MINOR 9\n#define CUDNN_PATCHLEVEL 7\n");
  os->AddFile("/usr/lib/x86_64-linux-gnu/libnccl.so.2.18.5", "");
  os->AddFile("/usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h",
              "#define OMPI_MAJOR_VERSION 4\n#define OMPI_MINOR_VERSION 1\n"
              "#define OMPI_RELEASE_VERSION 5\n");
  os->AddProgram("python3",
                 Ok("{\"executable\": \"/usr/bin/python3\", \"python_version\": \"3.10.12\", "
                    "\"torch\": \"2.1.2+cu121\", \"torch_cuda\": \"12.1\", \"torch_cudnn\": "
                    "\"8902\", \"torch_nccl\": \"2.18.1\", \"distributed_backends\": "
                    "\"gloo,nccl\", \"torch_npu\": \"absent\", \"complete\": true}\n"));
  os->SetEnv("PATH", "/usr/bin:/bin");
  os->AddFile("/usr/bin/python3", "");
  os->SetEnv("CUDA_VISIBLE_DEVICES", "0,1");
  os->SetEnv("NCCL_DEBUG", "WARN");
  os->SetEnv("HOME", "/root");  // not a training variable
}

FingerprintOptions Sequential() {
  FingerprintOptions o;
  o.parallel = false;
  return o;
}

TEST(Fingerprint, GpuNodeFromFixtures) {
  FakeOs os;
  MakeGpuNode(&os);
  auto fp = Fingerprint(&os, Sequential());
  ASSERT_TRUE(fp.ok()) << fp.status();
  const json& d = *fp;
  EXPECT_EQ(d["format"], kFingerprintFormat);
  EXPECT_EQ(d["hostname"], "gpu-node-01");
  EXPECT_EQ(d["host"]["os"], "Ubuntu 22.04.4 LTS");
  EXPECT_EQ(d["host"]["cpu_model"], "Intel(R) Xeon(R) Platinum 8480+");
  EXPECT_EQ(d["host"]["online_cpus"], 2);
  EXPECT_EQ(d["host"]["numa_nodes"], 1);
  EXPECT_EQ(d["host"]["transparent_hugepages"], "madvise");
  EXPECT_EQ(d["limits"]["memlock_soft_bytes"], 65536);
  EXPECT_EQ(d["limits"]["shm_size_bytes"], 67108864);
  EXPECT_EQ(d["accelerators"]["kind"], "nvidia");
  EXPECT_EQ(d["accelerators"]["nvidia"]["driver_version"], "535.104.05");
  EXPECT_EQ(d["accelerators"]["ascend"], "absent");
  EXPECT_EQ(d["toolkits"]["cuda_toolkit"], "12.2.140");
  EXPECT_EQ(d["toolkits"]["cudnn"], "8.9.7");
  EXPECT_EQ(d["toolkits"]["nccl"], "2.18.5");
  EXPECT_EQ(d["toolkits"]["mpi"], "Open MPI 4.1.5");
  EXPECT_EQ(d["toolkits"]["cann"], "absent");
  ASSERT_EQ(d["frameworks"].size(), 1u);  // /usr/bin/python3 is also the first on PATH
  EXPECT_EQ(d["frameworks"][0]["torch"], "2.1.2+cu121");
  EXPECT_EQ(d["env"]["CUDA_VISIBLE_DEVICES"], "0,1");
  EXPECT_FALSE(d["env"].contains("HOME"));
  absl::Status st = ValidateAgainstSchema(d, FingerprintSchema(), "fake");
  EXPECT_TRUE(st.ok()) << st;
}

TEST(Fingerprint, AscendNodeFromFixtures) {
  FakeOs os;
  os.AddFile("/proc/self/limits", Fixture("proc_limits_docker.txt"));
  os.AddProgram("npu-smi", Ok(Fixture("npu_smi_a3.txt")));
  os.AddFile("/usr/local/Ascend/driver/version.info", Fixture("ascend_driver_version.info"));
  os.AddFile("/usr/local/Ascend/firmware/version.info", Fixture("ascend_firmware_version.info"));
  os.SetEnv("ASCEND_HOME_PATH", "/opt/cann/latest");
  os.AddFile("/opt/cann/latest/version.cfg", Fixture("cann_version.cfg"));
  auto fp = Fingerprint(&os, Sequential());
  ASSERT_TRUE(fp.ok());
  const json& a = (*fp)["accelerators"]["ascend"];
  EXPECT_EQ((*fp)["accelerators"]["kind"], "ascend");
  EXPECT_EQ(a["driver_version"], "24.1.rc2");
  EXPECT_EQ(a["firmware_version"], "7.5.0.1.129");
  EXPECT_EQ(a["npu_smi_version"], "25.2.0");
  EXPECT_EQ(a["npu_count"], 4);
  EXPECT_EQ((*fp)["toolkits"]["cann"], "8.0.RC2");
  EXPECT_EQ((*fp)["toolkits"]["cann_path"], "/opt/cann/latest/version.cfg");
  absl::Status st = ValidateAgainstSchema(*fp, FingerprintSchema(), "fake");
  EXPECT_TRUE(st.ok()) << st;
}

TEST(Fingerprint, ProbesEndAsValueAbsentOrError) {
  FakeOs os;  // an empty machine: nothing exists
  RunResult timed_out;
  timed_out.timed_out = true;
  os.AddProgram("nvidia-smi", timed_out);
  RunResult failed;
  failed.exited = true;
  failed.exit_code = 9;
  failed.out = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n";
  os.AddProgram("npu-smi", failed);
  os.AddFile("/usr/local/Ascend/driver/version.info", "Version=23.0.0\n");
  FingerprintOptions o = Sequential();
  o.pythons = {"/nonexistent/python3"};
  auto fp = Fingerprint(&os, o);
  ASSERT_TRUE(fp.ok());
  const json& d = *fp;
  EXPECT_EQ(d["accelerators"]["nvidia"], "error: nvidia-smi timed out after 2000 ms");
  EXPECT_EQ(d["accelerators"]["ascend"]["driver_version"], "23.0.0");
  EXPECT_EQ(
      d["accelerators"]["ascend"]["npus"].get<std::string>().rfind("error: npu-smi exited 9", 0),
      0u);
  EXPECT_EQ(d["accelerators"]["kind"], "ascend");
  EXPECT_EQ(d["host"]["kernel"], "absent");
  EXPECT_EQ(d["limits"]["memlock_soft_bytes"].get<std::string>().rfind("error: ", 0), 0u);
  EXPECT_EQ(d["limits"]["shm_size_bytes"], "absent");
  EXPECT_EQ(d["frameworks"][0]["status"], "absent");
  EXPECT_EQ(d["frameworks"][0]["torch"], "absent");
  EXPECT_EQ(d["toolkits"]["cuda_toolkit"], "absent");
  absl::Status st = ValidateAgainstSchema(d, FingerprintSchema(), "fake");
  EXPECT_TRUE(st.ok()) << st;
}

TEST(Fingerprint, NvidiaDriverWithoutSmi) {
  FakeOs os;
  os.AddFile("/proc/driver/nvidia/version", Fixture("proc_driver_nvidia_version.txt"));
  auto fp = Fingerprint(&os, Sequential());
  ASSERT_TRUE(fp.ok());
  EXPECT_EQ((*fp)["accelerators"]["nvidia"]["driver_version"], "535.104.05");
  EXPECT_EQ((*fp)["accelerators"]["nvidia"]["gpus"], "absent");
  EXPECT_TRUE(ValidateAgainstSchema(*fp, FingerprintSchema(), "fake").ok());
}

TEST(Fingerprint, PythonListFromEnvironment) {
  FakeOs os;
  os.SetEnv("PATH", "/opt/venv/bin:/usr/bin");
  os.AddFile("/opt/venv/bin/python3", "");
  EXPECT_EQ(DefaultPythons(&os),
            (std::vector<std::string>{"/usr/bin/python3", "/opt/venv/bin/python3"}));
  os.SetEnv("TRAINSCOPE_PYTHON", "/x/python");
  EXPECT_EQ(DefaultPythons(&os), (std::vector<std::string>{"/x/python"}));
}

TEST(Fingerprint, PythonCutOffAfterStageOneKeepsVersions) {
  FakeOs os;
  RunResult r;
  r.timed_out = true;
  r.out =
      "{\"executable\": \"/usr/bin/python3\", \"python_version\": \"3.11.2\", \"torch\": "
      "\"1.13.0a0+gitunknown\", \"torch_cuda\": \"absent\", \"torch_npu\": \"absent\"}\n";
  os.AddProgram("python3", r);
  json p = ProbePython(&os, "/usr/bin/python3", std::chrono::milliseconds(2500));
  EXPECT_EQ(p["status"], "ok");
  EXPECT_EQ(p["torch"], "1.13.0a0+gitunknown");
  EXPECT_EQ(p["torch_nccl"], "error: importing torch took longer than 2500 ms");
  RunResult crashed;
  crashed.exited = false;
  crashed.term_signal = 11;
  crashed.out = r.out;
  os.AddProgram("python3", crashed);
  p = ProbePython(&os, "/usr/bin/python3", std::chrono::milliseconds(2500));
  EXPECT_EQ(
      p["torch_cudnn"].get<std::string>().rfind("error: /usr/bin/python3 killed by signal 11", 0),
      0u);
  RunResult nothing;
  nothing.timed_out = true;
  os.AddProgram("python3", nothing);
  p = ProbePython(&os, "/usr/bin/python3", std::chrono::milliseconds(2500));
  EXPECT_EQ(p["status"], "error: /usr/bin/python3 timed out after 2500 ms");
}

// The real machine, with real probes and time limits: the document must fit the
// documented schema whatever this machine has.
TEST(Fingerprint, LiveMachineFitsSchema) {
  auto fp = Fingerprint(Os::Default());
  ASSERT_TRUE(fp.ok());
  absl::Status st = ValidateAgainstSchema(*fp, FingerprintSchema(), "live");
  EXPECT_TRUE(st.ok()) << st << "\n" << fp->dump(2);
  EXPECT_FALSE(RenderFingerprintSummary(*fp).empty());
  // Probes honour their limits (2 s each, run side by side): nothing runs serially.
  EXPECT_LT((*fp)["probe_ms"]["total"].get<double>(), 4000.0);
}

TEST(Fingerprint, FixtureFilesLoadAndMalformedIsPositioned) {
  for (const char* f : {"fp_nvidia_a.json", "fp_nvidia_b.json", "fp_memlock_small.json",
                        "fp_ascend_mismatch.json"}) {
    auto fp = LoadFingerprint(Os::Default(), FixturePath(f));
    EXPECT_TRUE(fp.ok()) << fp.status();
  }
  auto bad = LoadFingerprint(Os::Default(), FixturePath("malformed.json"));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message()).find("malformed.json:4:"), std::string::npos);
  auto missing = LoadFingerprint(Os::Default(), FixturePath("nope.json"));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  json doc = json::parse(Fixture("fp_nvidia_a.json"));
  doc["limits"]["memlock_soft_bytes"] = -5;
  absl::Status st = ValidateAgainstSchema(doc, FingerprintSchema(), "x.json");
  EXPECT_NE(std::string(st.message()).find("x.json: $.limits.memlock_soft_bytes"),
            std::string::npos)
      << st;
}

// Probed bytes need not be UTF-8 (an environment variable, tool output): the document
// must still dump() and fit the schema.
TEST(Fingerprint, InvalidUtf8FromTheMachineIsReplaced) {
  FakeOs os;
  MakeGpuNode(&os);
  os.SetEnv("NCCL_DEBUG", "WARN\xff\xfe");
  auto fp = Fingerprint(&os, Sequential());
  ASSERT_TRUE(fp.ok());
  std::string text;
  ASSERT_NO_THROW(text = fp->dump());
  EXPECT_EQ((*fp)["env"]["NCCL_DEBUG"], "WARN\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_TRUE(ValidateAgainstSchema(*fp, FingerprintSchema(), "fp").ok());
}

// A fingerprint whose "format" is not a string: a clear error, not type_error.302.
TEST(Fingerprint, FormatOfTheWrongTypeIsNotAFingerprint) {
  for (const char* doc : {R"({"format": 5})", R"({"format": null, "version": 1})", "[1]", "7"}) {
    FakeOs os;
    os.AddFile("/fp.json", doc);
    absl::StatusOr<json> fp;
    ASSERT_NO_THROW(fp = LoadFingerprint(&os, "/fp.json")) << doc;
    ASSERT_FALSE(fp.ok());
    EXPECT_EQ(fp.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(std::string(fp.status().message())
                  .rfind("/fp.json: $.format: not an environment "
                         "fingerprint",
                         0),
              0u)
        << fp.status();
  }
}

// 1e309 does not fit a double: nlohmann throws out_of_range.406, which is no parse_error.
TEST(Fingerprint, NumberOverflowIsPositionedNotThrown) {
  std::string text = Fixture("fp_nvidia_a.json");
  const size_t at = text.find("\"created_unix_us\": ") + 19;
  const size_t end = text.find_first_of(",\n", at);
  text.replace(at, end - at, "1e309");
  FakeOs os;
  os.AddFile("/fp.json", text);
  absl::StatusOr<json> fp;
  ASSERT_NO_THROW(fp = LoadFingerprint(&os, "/fp.json"));
  ASSERT_FALSE(fp.ok());
  EXPECT_EQ(fp.status().code(), absl::StatusCode::kInvalidArgument);
  int line = 1 + std::count(text.begin(), text.begin() + at, '\n');
  const std::string msg(fp.status().message());
  EXPECT_EQ(msg.rfind(absl::StrCat("/fp.json:", line, ":"), 0), 0u) << msg;
  EXPECT_NE(msg.find(absl::StrCat("number overflow parsing '1e309' (byte ", at, ")")),
            std::string::npos)
      << msg;
}

// Runs `check` in a child with a wall-clock limit and (outside sanitizer builds) a 2 GiB
// address-space limit: a regression that reads /dev/zero forever or blocks on a FIFO
// fails the test instead of hanging it or exhausting the machine. True when it passed.
bool InChild(const std::function<bool()>& check, unsigned seconds) {
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    alarm(seconds);
#if !defined(TS_SANITIZER_SHADOW_MEMORY)  // ASan/TSan/MSan reserve terabytes of address space
    rlimit lim{rlim_t{2} << 30, rlim_t{2} << 30};
    setrlimit(RLIMIT_AS, &lim);
#endif
    _exit(check() ? 0 : 1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

TEST(Fingerprint, OnlyRegularFilesOfBoundedSizeAreRead) {
  // A directory (`env diff DIR B` exited 1, "a version differs").
  auto dir = LoadFingerprint(Os::Default(), std::string(TS_SOURCE_DIR) + "/tests/data/env");
  EXPECT_EQ(dir.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(dir.status().message()).find("/tests/data/env: is a directory"),
            std::string::npos)
      << dir.status();
  // /dev/zero and a FIFO without a writer: refused at once, nothing read.
  const std::string fifo = ::testing::TempDir() + "/env_fifo.json";
  unlink(fifo.c_str());
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_TRUE(InChild(
      [&] {
        auto zero = LoadFingerprint(Os::Default(), "/dev/zero");
        auto matrix = LoadMatrix(Os::Default(), "/dev/zero");
        auto f = LoadFingerprint(Os::Default(), fifo);
        return !zero.ok() && !matrix.ok() && !f.ok() &&
               zero.status().code() == absl::StatusCode::kInvalidArgument &&
               zero.status().message() ==
                   "/dev/zero: not a regular file (a character device); give the path of a "
                   "JSON file" &&
               matrix.status().message() == zero.status().message() &&
               std::string(f.status().message()).find("not a regular file (a FIFO or pipe)") !=
                   std::string::npos;
      },
      20));
  // Over the size limit, on disk and through an Os.
  const std::string big = ::testing::TempDir() + "/env_big.json";
  {
    std::ofstream f(big);
    f << std::string(kMaxJsonDocumentBytes + 1, ' ');
  }
  auto too_big = LoadFingerprint(Os::Default(), big);
  EXPECT_NE(std::string(too_big.status().message()).find("over the 16 MiB limit"),
            std::string::npos)
      << too_big.status();
  FakeOs os;
  os.AddFile("/big.json", std::string(kMaxJsonDocumentBytes + 1, ' '));
  auto fake_big = LoadFingerprint(&os, "/big.json");
  EXPECT_NE(std::string(fake_big.status().message()).find("over the 16 MiB limit"),
            std::string::npos)
      << fake_big.status();
}

TEST(Diff, DriverOnlyDifferenceIsVersionAndFirst) {
  json a = json::parse(Fixture("fp_nvidia_a.json"));
  json b = json::parse(Fixture("fp_nvidia_b.json"));
  DiffResult d = Diff(a, b);
  ASSERT_EQ(d.differences.size(), 1u);  // hostname, time and temperatures are not compared
  EXPECT_EQ(d.differences[0].field, "accelerators.nvidia.driver_version");
  EXPECT_EQ(d.differences[0].category, "driver");
  EXPECT_TRUE(d.differences[0].is_version);
  EXPECT_EQ(d.version_differences, 1);
  EXPECT_TRUE(Diff(a, a).identical());
}

TEST(Diff, OrdersByImportance) {
  json a = json::parse(Fixture("fp_nvidia_a.json"));
  json b = a;
  b["env"]["NCCL_DEBUG"] = "INFO";
  b["limits"]["nofile_soft"] = 1024;
  b["toolkits"]["nccl"] = "2.19.3";
  b["frameworks"][0]["torch"] = "2.2.0+cu121";
  b["toolkits"]["cuda_toolkit"] = "12.4.131";
  b["accelerators"]["nvidia"]["gpus"][1]["name"] = "NVIDIA H100 PCIe";
  DiffResult d = Diff(a, b);
  std::vector<std::string> cats;
  for (const Difference& x : d.differences) cats.push_back(x.category);
  EXPECT_EQ(cats, (std::vector<std::string>{"toolkit", "framework", "library", "hardware", "limits",
                                            "env"}));
  EXPECT_EQ(d.differences[1].field, "frameworks[/usr/bin/python3].torch");
  EXPECT_EQ(d.differences[3].field, "accelerators.nvidia.gpus[1].name");
  EXPECT_EQ(d.version_differences, 3);
  json j = DiffToJson(d, "a", "b");
  EXPECT_EQ(j["other_differences"], 3);
  EXPECT_NE(RenderDiff(d, "a", "b").find("cuda_toolkit"), std::string::npos);
}

TEST(Diff, WholeSectionPresentVersusAbsent) {
  json a = json::parse(Fixture("fp_nvidia_a.json"));
  json b = a;
  b["accelerators"]["nvidia"] = "absent";
  DiffResult d = Diff(a, b);
  ASSERT_GE(d.differences.size(), 1u);
  EXPECT_EQ(d.differences[0].field, "accelerators.nvidia");
  EXPECT_EQ(d.differences[0].a, "(present)");
  EXPECT_EQ(d.differences[0].b, "absent");
}

}  // namespace
}  // namespace trainscope::env
