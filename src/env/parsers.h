// Parsers for what the machine's tools and files say, each a pure function from text to
// a fragment of the fingerprint (nlohmann::json), so each is unit-tested on a fixture of
// the real format (tests/data/env/). Values the source marks unavailable ("N/A", "NA",
// "-") become the string "absent"; a whole unparseable input is an InvalidArgument.
#ifndef TRAINSCOPE_SRC_ENV_PARSERS_H_
#define TRAINSCOPE_SRC_ENV_PARSERS_H_

#include <map>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace trainscope::env {

inline constexpr char kAbsent[] = "absent";

// `nvidia-smi -q -x`: {"driver_version", "cuda_driver_version", "gpu_count", "gpus": [
// {"index", "name", "uuid", "pci_bus_id", "memory_total_bytes", "memory_used_bytes",
// "temperature_c", "power_draw_w", "ecc_mode", "ecc_uncorrected_volatile",
// "pending_page_retirement", "remapped_rows_pending", "persistence_mode", "compute_mode",
// "mig_mode", "clocks_sm_mhz", "clocks_mem_mhz", "max_clocks_sm_mhz",
// "max_clocks_mem_mhz"}]}. Handles the older (single_bit/double_bit, power_readings) and
// newer (sram/dram, gpu_power_readings) layouts.
absl::StatusOr<nlohmann::json> ParseNvidiaSmiXml(absl::string_view xml);

// /proc/driver/nvidia/version ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05
// ..."): the driver version, or "" when none is found.
std::string ParseNvidiaProcVersion(absl::string_view text);

// `npu-smi info` (Atlas A2 910B, A3 two-chip, 310P layouts): {"npu_smi_version",
// "driver_version", "npus": [{"npu", "chip", "name", "health", "power_w", "temp_c",
// "hugepages_used", "hugepages_total", "aicore_pct", "memory_used_mb", "memory_total_mb",
// "hbm_used_mb", "hbm_total_mb", "bus_id", "phy_id" or "device_id", "processes"}]}.
// One entry per chip. InvalidArgument when no device row is found.
absl::StatusOr<nlohmann::json> ParseNpuSmiInfo(absl::string_view text);

// npu-smi's "Key : Value" outputs (`npu-smi info -t board -i N [-c C]`, `-t health -i N
// [-c C]`; npu_smi.cc): {"records": [{"npu", "chip", "software_version", "firmware_version",
// "board_id", "bus_id", "pci_device_id", ..., "health", "error_code", "error_information",
// "other": {unknown key: value}}], "unknown_keys": [...], "skipped_lines": ["line N: ..."]}.
// A key that repeats starts the next record (one per chip). "NA" values are "absent".
// InvalidArgument naming `what` when no "Key : Value" line is found.
absl::StatusOr<nlohmann::json> ParseNpuSmiFields(absl::string_view text, absl::string_view what);

// Copies a board or health record's fields (not its ids, bus id or health word) into the
// entries of `npus` of that npu (and chip, when >= 0), each name prefixed by `prefix`.
void MergeNpuSmiRecord(const nlohmann::json& record, long long npu, long long chip,
                       const char* prefix, nlohmann::json* npus);

// The fields npu-smi info's entries share with nvidia-smi's GPUs: "index", "pci_bus_id",
// "memory_used_bytes" / "memory_total_bytes" (HBM, else DDR; MiB), "temperature_c",
// "power_draw_w".
void AddGpuLikeFields(nlohmann::json* npus);

// "key=value" / "key: value" lines (Ascend version.info, ascend_toolkit_install.info,
// /etc/os-release). Keys are lower-cased; values unquoted and trimmed.
std::map<std::string, std::string> ParseKeyValues(absl::string_view text);

// CANN version.cfg: "runtime_running_version=[7.3.0.1.231:8.0.RC2]" -> "8.0.RC2" (the
// first *_running_version entry); "" when absent.
std::string ParseCannVersionCfg(absl::string_view text);

// /proc/<pid>/limits: {"memlock_soft_bytes", "memlock_hard_bytes", "nofile_soft",
// "nofile_hard", "nproc_soft", "stack_soft_bytes"}; "unlimited" stays a string.
absl::StatusOr<nlohmann::json> ParseProcLimits(absl::string_view text);

// /proc/meminfo: {"mem_total_bytes", "mem_available_bytes", "swap_total_bytes",
// "hugepages_total", "hugepages_free", "hugepage_size_bytes"}.
absl::StatusOr<nlohmann::json> ParseMeminfo(absl::string_view text);

// /proc/cpuinfo: {"cpu_model", "logical_cpus"}. On aarch64 (no "model name") the model
// comes from the implementer/part ids (0x48/0xd01 -> "HiSilicon Kunpeng-920").
nlohmann::json ParseCpuinfo(absl::string_view text);

// A Linux CPU list ("0-3,8,10-11") -> number of CPUs; -1 when malformed.
int CountCpuList(absl::string_view list);

// `df -P -B1 PATH` -> {"size_bytes", "available_bytes"}.
absl::StatusOr<nlohmann::json> ParseDf(absl::string_view text);

// "#define NAME value" lines of a C header -> {NAME: value} for the names asked for.
std::map<std::string, std::string> ParseDefines(absl::string_view header,
                                                std::initializer_list<const char*> names);

// "81559 MiB" -> bytes; "33 C" -> 33; "69.83 W" -> 69.83. Returns "absent" for N/A.
nlohmann::json ParseQuantity(absl::string_view text, double scale);

}  // namespace trainscope::env

#endif  // TRAINSCOPE_SRC_ENV_PARSERS_H_
