// Parsers on fixtures of the real formats (tests/data/env/), the version order, the XML
// reader and the JSON/schema helpers.
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "env/env_test_util.h"
#include "env/json_doc.h"
#include "env/parsers.h"
#include "env/version.h"
#include "env/xml.h"
#include "gtest/gtest.h"

namespace trainscope::env {
namespace {

using nlohmann::json;

TEST(Version, Order) {
  EXPECT_LT(CompareVersions("535.54.03", "535.104.05"), 0);
  EXPECT_GT(CompareVersions("550.54.15", "550.54.14"), 0);
  EXPECT_EQ(CompareVersions("12.4", "12.4"), 0);
  EXPECT_LT(CompareVersions("12.4", "12.4.1"), 0);
  EXPECT_LT(CompareVersions("8.0.RC1", "8.0.RC2"), 0);
  EXPECT_LT(CompareVersions("8.0.RC2", "8.0.0"), 0);
  EXPECT_LT(CompareVersions("2.1.0", "2.1.0.post12"), 0);
  EXPECT_LT(CompareVersions("2.1.0rc1", "2.1.0"), 0);
  EXPECT_EQ(CompareVersions("2.1.2+cu121", "2.1.2"), 0);
  EXPECT_LT(CompareVersions("2.28.2", "2.28.3"), 0);
  EXPECT_GT(CompareVersions("2.28.10", "2.28.9"), 0);
}

TEST(Version, MatchesAndMajorMinor) {
  EXPECT_TRUE(VersionMatches("12.4.1", "12.4.*"));
  EXPECT_FALSE(VersionMatches("12.41", "12.4.*"));
  EXPECT_TRUE(VersionMatches("8.0.rc2", "8.0.RC2"));
  EXPECT_FALSE(VersionMatches("2.1.0.post12", "2.1.0"));
  EXPECT_EQ(MajorMinor("12.4.127"), "12.4");
  EXPECT_EQ(MajorMinor("13"), "13");
  EXPECT_EQ(MajorMinor("v12"), "");
}

TEST(Xml, ParsesAndReportsPosition) {
  auto x = ParseXml("<?xml version=\"1.0\"?>\n<a id=\"q&amp;\"><b>1 &lt; 2</b><c/></a>");
  ASSERT_TRUE(x.ok()) << x.status();
  EXPECT_EQ(x->attributes.at("id"), "q&");
  EXPECT_EQ(x->Text("b"), "1 < 2");
  EXPECT_NE(x->Child("c"), nullptr);
  auto bad = ParseXml("<a>\n  <b></c>\n</a>");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message()).find("line 2:"), std::string::npos) << bad.status();
}

TEST(NvidiaSmi, H100NewLayout) {
  auto r = ParseNvidiaSmiXml(Fixture("nvidia_smi_h100x2.xml"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)["driver_version"], "535.104.05");
  EXPECT_EQ((*r)["cuda_driver_version"], "12.2");
  ASSERT_EQ((*r)["gpu_count"], 2);
  const json& g = (*r)["gpus"][1];
  EXPECT_EQ(g["index"], 1);
  EXPECT_EQ(g["name"], "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(g["pci_bus_id"], "00000000:2A:00.0");
  EXPECT_EQ(g["memory_total_bytes"], 81559LL * 1048576);
  EXPECT_EQ(g["temperature_c"], 33);
  EXPECT_DOUBLE_EQ(g["power_draw_w"].get<double>(), 71.2);
  EXPECT_EQ(g["ecc_uncorrected_volatile"], 0);
  EXPECT_EQ(g["pending_page_retirement"], "absent");  // N/A on Hopper (row remapping)
  EXPECT_EQ(g["remapped_rows_pending"], "No");
  EXPECT_EQ(g["max_clocks_sm_mhz"], 1980);
  EXPECT_EQ(g["uuid"], "GPU-8d0c2b61-1f3e-77a4-b5c2-93e0d4a1c6f8");
}

TEST(NvidiaSmi, A100LegacyLayout) {
  auto r = ParseNvidiaSmiXml(Fixture("nvidia_smi_a100_legacy.xml"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)["driver_version"], "470.82.01");
  const json& g = (*r)["gpus"][0];
  EXPECT_EQ(g["ecc_uncorrected_volatile"], 2);  // double_bit/total
  EXPECT_EQ(g["pending_page_retirement"], "Yes");
  EXPECT_EQ(g["persistence_mode"], "Disabled");
  EXPECT_DOUBLE_EQ(g["power_draw_w"].get<double>(), 54.12);  // power_readings
}

TEST(NvidiaSmi, RejectsOtherDocuments) {
  EXPECT_FALSE(ParseNvidiaSmiXml("<html></html>").ok());
  EXPECT_FALSE(ParseNvidiaSmiXml("NVIDIA-SMI has failed").ok());
  EXPECT_EQ(ParseNvidiaProcVersion(Fixture("proc_driver_nvidia_version.txt")), "535.104.05");
}

TEST(NpuSmi, Atlas910B) {
  auto r = ParseNpuSmiInfo(Fixture("npu_smi_910b.txt"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)["npu_smi_version"], "24.1.rc1.b030");
  EXPECT_EQ((*r)["driver_version"], "24.1.rc1.b030");
  ASSERT_EQ((*r)["npus"].size(), 4u);
  const json& d0 = (*r)["npus"][0];
  EXPECT_EQ(d0["npu"], 0);
  EXPECT_EQ(d0["chip"], 0);
  EXPECT_EQ(d0["name"], "910B3");
  EXPECT_EQ(d0["health"], "OK");
  EXPECT_DOUBLE_EQ(d0["power_w"].get<double>(), 101.8);
  EXPECT_EQ(d0["temp_c"], 43);
  EXPECT_EQ(d0["bus_id"], "0000:C1:00.0");
  EXPECT_EQ(d0["hbm_used_mb"], 3318);
  EXPECT_EQ(d0["hbm_total_mb"], 65536);
  EXPECT_EQ(d0["processes"], 0);
  EXPECT_EQ((*r)["npus"][3]["health"], "Warning");
}

TEST(NpuSmi, A3TwoChipsPerNpu) {
  auto r = ParseNpuSmiInfo(Fixture("npu_smi_a3.txt"));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ((*r)["npus"].size(), 4u);
  const json& c1 = (*r)["npus"][1];
  EXPECT_EQ(c1["npu"], 0);
  EXPECT_EQ(c1["chip"], 1);
  EXPECT_EQ(c1["phy_id"], 1);
  EXPECT_EQ(c1["power_w"], "absent");  // "-" on the second chip
  EXPECT_EQ(c1["name"], "Ascend910");
  const json& c0 = (*r)["npus"][0];
  EXPECT_EQ(c0["hbm_used_mb"], 61782);  // "61782/ 65536"
  EXPECT_EQ(c0["processes"], 1);
  EXPECT_EQ((*r)["npus"][3]["phy_id"], 3);
  EXPECT_EQ((*r)["npus"][3]["npu"], 1);
}

TEST(NpuSmi, Atlas310PNoHbm) {
  auto r = ParseNpuSmiInfo(Fixture("npu_smi_310p.txt"));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ((*r)["npus"].size(), 2u);
  const json& c1 = (*r)["npus"][1];
  EXPECT_EQ(c1["npu"], 8);
  EXPECT_EQ(c1["chip"], 1);
  EXPECT_EQ(c1["device_id"], 1);
  EXPECT_EQ(c1["memory_used_mb"], 1449);
  EXPECT_EQ(c1["memory_total_mb"], 44280);
  EXPECT_FALSE(c1.contains("hbm_total_mb"));
  EXPECT_EQ(c1["power_w"], "absent");  // NA
  EXPECT_FALSE(ParseNpuSmiInfo("dcmi module initialize failed. ret is -8005").ok());
}

TEST(VersionFiles, AscendDriverToolkitAndCfg) {
  auto drv = ParseKeyValues(Fixture("ascend_driver_version.info"));
  EXPECT_EQ(drv["version"], "24.1.rc2");
  auto fw = ParseKeyValues(Fixture("ascend_firmware_version.info"));
  EXPECT_EQ(fw["version"], "7.5.0.1.129");
  auto tk = ParseKeyValues(Fixture("ascend_toolkit_install.info"));
  EXPECT_EQ(tk["version"], "8.0.RC2");
  EXPECT_EQ(tk["package_name"], "Ascend-cann-toolkit");
  EXPECT_EQ(ParseCannVersionCfg(Fixture("cann_version.cfg")), "8.0.RC2");
  EXPECT_EQ(ParseCannVersionCfg("nothing=here"), "");
  auto osr =
      ParseKeyValues("NAME=\"Debian GNU/Linux\"\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n");
  EXPECT_EQ(osr["pretty_name"], "Debian GNU/Linux 12 (bookworm)");
}

TEST(ProcFiles, LimitsMeminfoCpuinfoDf) {
  auto l = ParseProcLimits(Fixture("proc_limits_docker.txt"));
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ((*l)["memlock_soft_bytes"], 65536);
  EXPECT_EQ((*l)["nofile_soft"], 1048576);
  EXPECT_EQ((*l)["nproc_soft"], "unlimited");
  EXPECT_EQ((*l)["stack_soft_bytes"], 8388608);
  EXPECT_FALSE(ParseProcLimits("garbage").ok());
  auto m = ParseMeminfo(Fixture("meminfo.txt"));
  ASSERT_TRUE(m.ok());
  EXPECT_EQ((*m)["mem_total_bytes"], 2113454664LL * 1024);
  EXPECT_EQ((*m)["hugepage_size_bytes"], 2048 * 1024);
  EXPECT_EQ((*m)["hugepages_total"], 0);
  json x86 = ParseCpuinfo(Fixture("cpuinfo_x86.txt"));
  EXPECT_EQ(x86["cpu_model"], "Intel(R) Xeon(R) Platinum 8480+");
  EXPECT_EQ(x86["logical_cpus"], 2);
  json arm = ParseCpuinfo(Fixture("cpuinfo_kunpeng.txt"));
  EXPECT_EQ(arm["cpu_model"], "HiSilicon Kunpeng-920");
  EXPECT_EQ(CountCpuList("0-3,8,10-11"), 7);
  EXPECT_EQ(CountCpuList("x"), -1);
  auto df = ParseDf(Fixture("df_shm_docker.txt"));
  ASSERT_TRUE(df.ok());
  EXPECT_EQ((*df)["size_bytes"], 67108864);
  auto d = ParseDefines("#define NCCL_MAJOR 2\n#  define NCCL_MINOR 28\n#define NCCL_SUFFIX \"\"\n",
                        {"NCCL_MAJOR", "NCCL_MINOR", "NCCL_SUFFIX"});
  EXPECT_EQ(d["NCCL_MAJOR"], "2");
  EXPECT_EQ(d["NCCL_MINOR"], "28");
  EXPECT_EQ(d["NCCL_SUFFIX"], "");
}

TEST(JsonDoc, SyntaxErrorNamesLineAndColumn) {
  auto r = ParseJsonText(Fixture("malformed.json"), "malformed.json");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(r.status().message()).rfind("malformed.json:4:", 0), 0u) << r.status();
}

TEST(JsonDoc, NothingThrowsAndEveryErrorHasAPosition) {
  struct Case {
    std::string text, expect;
  };
  const std::vector<Case> cases = {
      {"{\n  \"a\": 1e309\n}", "f.json:2:"},  // out_of_range.406 in nlohmann
      {"[-1e400]", "f.json:1:"},
      {"{\"a\": \"\xff\"}", "f.json:1:"},  // invalid UTF-8 inside a string
      {"{\"a\": 1} x", "f.json:1:"},
      {std::string(100000, '[') + std::string(100000, ']'),
       "f.json:1:65: nested deeper than 64 levels (byte 64)"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<json> r;
    ASSERT_NO_THROW(r = ParseJsonText(c.text, "f.json")) << c.text.substr(0, 40);
    ASSERT_FALSE(r.ok()) << c.text.substr(0, 40);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    const std::string msg(r.status().message());
    EXPECT_EQ(msg.rfind(c.expect, 0), 0u) << msg;
    EXPECT_NE(msg.find(" (byte "), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
  auto r = ParseJsonText("{\n  \"a\": 1e309\n}", "f.json");
  EXPECT_EQ(std::string(r.status().message()),
            "f.json:2:8: number overflow parsing '1e309' (byte 9)");
  // An integer beyond 64 bits (nlohmann would round it to a double): the shared policy.
  r = ParseJsonText("{\n  \"memlock\": 18446744073709551616\n}", "f.json");
  EXPECT_EQ(std::string(r.status().message()),
            "f.json:2:14: number out of range: integer '18446744073709551616' does not fit in 64 "
            "bits (byte 15)");
  EXPECT_TRUE(ParseJsonText("{\"memlock\": 18446744073709551615}", "f.json").ok());
}

// std::regex recurses per character (a 100 KB string overflowed the stack): a string over
// kMaxPatternInputBytes is refused before matching.
TEST(JsonDoc, PatternOnAHugeStringIsAnErrorNotAStackOverflow) {
  json schema = json::parse(R"({"type": "string", "pattern": "^(absent|error: .*)$"})");
  EXPECT_TRUE(ValidateAgainstSchema(json("error: " + std::string(200, 'x')), schema, "f").ok());
  auto st = ValidateAgainstSchema(json("error: " + std::string(1 << 20, 'x')), schema, "f");
  EXPECT_EQ(std::string(st.message()),
            "f: $: a string of 1048583 bytes, too long to match /^(absent|error: .*)$/ (limit "
            "4096)");
}

TEST(JsonDoc, ValidUtf8) {
  EXPECT_EQ(ValidUtf8("plain \xc3\xa9 \xf0\x9f\x98\x80"), "plain \xc3\xa9 \xf0\x9f\x98\x80");
  EXPECT_EQ(ValidUtf8("a\xff"
                      "b"),
            "a\xEF\xBF\xBD"
            "b");
  EXPECT_EQ(ValidUtf8("\xc0\xaf"), "\xEF\xBF\xBD\xEF\xBF\xBD");                  // overlong
  EXPECT_EQ(ValidUtf8("\xed\xa0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
  EXPECT_EQ(ValidUtf8("\xe2\x82"), "\xEF\xBF\xBD\xEF\xBF\xBD");                  // cut short
  json doc = {{"k\xff", {"v\xfe", 1}}};
  SanitizeUtf8(&doc);
  EXPECT_NO_THROW(doc.dump());
  EXPECT_EQ(doc["k\xEF\xBF\xBD"][0], "v\xEF\xBF\xBD");
}

TEST(JsonDoc, SchemaSubset) {
  json schema = json::parse(R"({
    "type": "object", "required": ["a"], "additionalProperties": false,
    "properties": {"a": {"$ref": "#/$defs/n"}, "b": {"type": "array", "items": {"enum": ["x", "y"]}},
                   "c": {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "string", "pattern": "^error: "}]}},
    "$defs": {"n": {"type": "integer", "minimum": 1}}})");
  EXPECT_TRUE(
      ValidateAgainstSchema(json::parse(R"({"a": 2, "b": ["x"], "c": "error: x"})"), schema, "f")
          .ok());
  auto e = ValidateAgainstSchema(json::parse(R"({"a": 2, "b": ["x", "z"]})"), schema, "f");
  EXPECT_NE(std::string(e.message()).find("f: $.b[1]:"), std::string::npos) << e;
  EXPECT_FALSE(ValidateAgainstSchema(json::parse(R"({"a": 0})"), schema, "f").ok());
  EXPECT_FALSE(ValidateAgainstSchema(json::parse(R"({"b": []})"), schema, "f").ok());
  EXPECT_FALSE(ValidateAgainstSchema(json::parse(R"({"a": 1, "q": 1})"), schema, "f").ok());
  EXPECT_FALSE(ValidateAgainstSchema(json::parse(R"({"a": 1, "c": -1})"), schema, "f").ok());
}

}  // namespace
}  // namespace trainscope::env
