// The fingerprint's topology capture (ProbeTopology, and its place in the nvidia and ascend
// probes): parsed summary with the raw text, raw text with the error when it does not parse.
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "env/env_test_util.h"
#include "env/json_doc.h"
#include "env/probes.h"
#include "gtest/gtest.h"
#include "trainscope/core/fake_os.h"
#include "trainscope/env/fingerprint.h"

namespace trainscope::env {
namespace {

using nlohmann::json;

std::string TopoFixture(const std::string& name) {
  std::ifstream f(std::string(TS_SOURCE_DIR) + "/tests/data/topo/" + name);
  EXPECT_TRUE(f.good()) << name;
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

RunResult TopoOk(std::string out) {
  RunResult r;
  r.exited = true;
  r.exit_code = 0;
  r.out = std::move(out);
  return r;
}

// FakeOs answers by program name only; the probes run one program with two argument lists.
class ArgvFakeOs : public FakeOs {
 public:
  void AddCommand(const std::vector<std::string>& argv, RunResult r) { by_argv_[argv] = r; }
  absl::StatusOr<RunResult> Run(const std::vector<std::string>& argv,
                                const RunOptions& options) override {
    if (auto it = by_argv_.find(argv); it != by_argv_.end()) return it->second;
    return FakeOs::Run(argv, options);
  }

 private:
  std::map<std::vector<std::string>, RunResult> by_argv_;
};

// The schema of one part of the fingerprint, by its $defs name.
json PartSchema(const std::string& def) {
  json s = FingerprintSchema();
  s["$ref"] = "#/$defs/" + def;
  s.erase("properties");
  s.erase("required");
  s.erase("type");
  s.erase("additionalProperties");
  return s;
}

TEST(FingerprintTopology, ParsedWithSummary) {
  ArgvFakeOs os;
  os.AddCommand({"nvidia-smi", "topo", "-m"}, TopoOk(TopoFixture("dgx1_v100_nvlink.txt")));
  json t = ProbeTopology(&os, {"nvidia-smi", "topo", "-m"}, std::chrono::milliseconds(100));
  EXPECT_EQ(t["source"], "nvidia-smi topo -m");
  EXPECT_EQ(t["raw"], TopoFixture("dgx1_v100_nvlink.txt"));
  EXPECT_FALSE(t.contains("error"));
  EXPECT_EQ(t["summary"]["devices"], 8);
  EXPECT_EQ(t["summary"]["pairs_by_class"]["SYS"], 12);
  EXPECT_EQ(t["summary"]["fastest_gbps"], 50.0);
  absl::Status st = ValidateAgainstSchema(t, PartSchema("topology"), "topology");
  EXPECT_TRUE(st.ok()) << st;
}

TEST(FingerprintTopology, UnparsableKeptRaw) {
  ArgvFakeOs os;
  const std::string bad = TopoFixture("malformed_truncated_row.txt");
  os.AddCommand({"nvidia-smi", "topo", "-m"}, TopoOk(bad));
  json t = ProbeTopology(&os, {"nvidia-smi", "topo", "-m"}, std::chrono::milliseconds(100));
  EXPECT_EQ(t["raw"], bad);
  EXPECT_FALSE(t.contains("summary"));
  EXPECT_NE(t["error"].get<std::string>().find("nvidia-smi topo -m:7: row GPU5"), std::string::npos)
      << t;
  absl::Status st = ValidateAgainstSchema(t, PartSchema("topology"), "topology");
  EXPECT_TRUE(st.ok()) << st;
  // No tool: the probe failure string.
  FakeOs none;
  EXPECT_EQ(ProbeTopology(&none, {"npu-smi", "info", "-t", "topo"}, std::chrono::milliseconds(1)),
            "absent");
}

TEST(FingerprintTopology, AscendProbeCarriesIt) {
  ArgvFakeOs os;
  os.AddCommand({"npu-smi", "info"}, TopoOk(Fixture("npu_smi_a3.txt")));
  os.AddCommand({"npu-smi", "info", "-t", "topo"}, TopoOk(TopoFixture("ascend_910_8npu.txt")));
  json a = ProbeAscend(&os, std::chrono::milliseconds(100));
  ASSERT_TRUE(a.is_object()) << a;
  EXPECT_EQ(a["topology"]["summary"]["pairs_by_class"]["HCCS"], 12);
  absl::Status st = ValidateAgainstSchema(a, PartSchema("ascend"), "ascend");
  EXPECT_TRUE(st.ok()) << st;
}

}  // namespace
}  // namespace trainscope::env
