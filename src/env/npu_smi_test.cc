// npu-smi's "Key : Value" outputs and the nvidia-smi-like fields (npu_smi.cc), on the public
// samples of tests/data/env/npu_smi_*_2305.txt.
#include <string>

#include "env/env_test_util.h"
#include "env/parsers.h"
#include "gtest/gtest.h"

namespace trainscope::env {
namespace {

using nlohmann::json;

TEST(NpuSmiFields, CardBoard) {
  auto r = ParseNpuSmiFields(Fixture("npu_smi_board_2305.txt"), "board");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ((*r)["records"].size(), 1u);
  const json& b = (*r)["records"][0];
  EXPECT_EQ(b["npu"], 0);
  EXPECT_EQ(b["software_version"], "23.0.5");
  EXPECT_EQ(b["firmware_version"], "7.1.0.7.220");
  EXPECT_EQ(b["bus_id"], "0000:61:00.0");  // the key ends at the first colon only
  EXPECT_EQ(b["pci_device_id"], "0xD801");
  EXPECT_EQ(b["class_id"], kAbsent);  // "NA"
  EXPECT_EQ(b["chip_count"], 1);
  EXPECT_TRUE((*r)["unknown_keys"].empty());
  EXPECT_TRUE((*r)["skipped_lines"].empty());
}

TEST(NpuSmiFields, ChipBoardAndHealth) {
  auto c = ParseNpuSmiFields(Fixture("npu_smi_board_chip_2305.txt"), "board -c");
  ASSERT_TRUE(c.ok());
  const json& b = (*c)["records"][0];
  EXPECT_EQ(b["chip"], 0);
  EXPECT_EQ(b["chip_type"], "Ascend");
  EXPECT_EQ(b["vdie_id"], "42C711D4 20B03704 4A10C8D4 14CC040A D2102003");
  EXPECT_EQ(b["pcb_id"], kAbsent);
  auto h = ParseNpuSmiFields(Fixture("npu_smi_health_2305.txt"), "health");
  ASSERT_TRUE(h.ok());
  EXPECT_EQ((*h)["records"][0]["health"], "OK");
  EXPECT_EQ((*h)["records"][0]["error_code"], kAbsent);
}

TEST(NpuSmiFields, RepeatedKeysSplitChipsUnknownKeysListed) {
  auto r = ParseNpuSmiFields(
      "NPU ID : 4\nChip Count : 2\n\nHealth Status : Warning\nError Code : 80E01801\n"
      "Fan Mode : auto\nChip ID : 0\nHealth Status : OK\nError Code : NA\nChip ID : 1\n"
      "garbage without a colon\n",
      "health");
  ASSERT_TRUE(r.ok());
  const json& rec = (*r)["records"];
  ASSERT_EQ(rec.size(), 2u);
  EXPECT_EQ(rec[0]["health"], "Warning");
  EXPECT_EQ(rec[0]["error_code"], "80E01801");
  EXPECT_EQ(rec[0]["chip"], 0);
  EXPECT_EQ(rec[0]["other"]["Fan Mode"], "auto");
  EXPECT_EQ(rec[1]["health"], "OK");
  EXPECT_EQ(rec[1]["chip"], 1);
  EXPECT_EQ((*r)["unknown_keys"], json::array({"Fan Mode"}));
  ASSERT_EQ((*r)["skipped_lines"].size(), 1u);
  EXPECT_EQ((*r)["skipped_lines"][0], "line 11: garbage without a colon");
}

TEST(NpuSmiFields, NothingReadableIsAnError) {
  auto r = ParseNpuSmiFields("+------+\n| junk |\n", "npu-smi info -t board -i 0");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("npu-smi info -t board -i 0"), std::string::npos);
}

TEST(NpuSmiFields, MergedAndGpuLikeFields) {
  auto info = ParseNpuSmiInfo(Fixture("npu_smi_info_2305.txt"));
  ASSERT_TRUE(info.ok());
  // The pasted "..." lines are counted; both devices kept.
  EXPECT_EQ((*info)["skipped_lines"].size(), 2u);
  EXPECT_EQ((*info)["incomplete_npu_rows"], 0);
  json npus = (*info)["npus"];
  auto board = ParseNpuSmiFields(Fixture("npu_smi_board_2305.txt"), "board");
  MergeNpuSmiRecord((*board)["records"][0], 7, -1, "", &npus);
  AddGpuLikeFields(&npus);
  EXPECT_EQ(npus[1]["firmware_version"], "7.1.0.7.220");
  EXPECT_EQ(npus[1]["bus_id"], "0000:3D:00.0");  // npu-smi info's, not the board's
  EXPECT_FALSE(npus[0].contains("firmware_version"));
  EXPECT_EQ(npus[1]["index"], 1);
  EXPECT_EQ(npus[1]["memory_total_bytes"], 32768LL * 1048576);  // HBM
  EXPECT_EQ(npus[1]["temperature_c"], 38);
  EXPECT_EQ(npus[0]["power_draw_w"], 73.1);
  // 310P: no HBM column, so the DDR memory is the device memory.
  auto p = ParseNpuSmiInfo(Fixture("npu_smi_310p.txt"));
  ASSERT_TRUE(p.ok());
  json q = (*p)["npus"];
  AddGpuLikeFields(&q);
  EXPECT_EQ(q[0]["memory_total_bytes"], 44280LL * 1048576);
}

TEST(NpuSmiInfo, TruncatedTableKeepsWhatIsComplete) {
  std::string t = Fixture("npu_smi_910b.txt");
  t = t.substr(
      0, t.find("| 0                         | 0000:82:00.0"));  // cut before NPU 3's chip row
  auto r = ParseNpuSmiInfo(t);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)["npus"].size(), 3u);
  EXPECT_EQ((*r)["incomplete_npu_rows"], 1);
}

}  // namespace
}  // namespace trainscope::env
