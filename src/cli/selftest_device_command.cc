// `trainscope selftest device [--json] [--quick] [--no-per-core]`: health, temperature,
// memory, utilisation and throttling of every device, and matmul / memory-bandwidth
// micro-benchmarks against the device's own limits. Exit 1 when a check fails.
#include <cstdio>
#include <iostream>

#include "cli/command.h"
#include "cli/exit.h"
#include "trainscope/core/os.h"
#include "trainscope/device/device.h"

namespace trainscope::cli {

void RegisterSelftestDeviceCommand(CLI::App& parent, CommandContext& ctx) {
  CLI::App* cmd = parent.add_subcommand("device", "device health and throughput");
  struct Args {
    bool json = false;
    bool quick = false;
    bool no_per_core = false;
    double seconds = 0.5;
    double tool_timeout_s = 10;
  };
  auto args = std::make_shared<Args>();
  cmd->add_flag("--json", args->json, "print the report as JSON");
  cmd->add_flag("--quick", args->quick, "smaller benchmarks (about 5 s)");
  cmd->add_flag("--no-per-core", args->no_per_core, "skip the per-core pinned benchmarks");
  cmd->add_option("--seconds", args->seconds, "timing window per measurement")
      ->check(CLI::Range(0.01, 60.0));
  cmd->add_option("--tool-timeout", args->tool_timeout_s,
                  "seconds to wait for nvidia-smi / npu-smi")
      ->check(CLI::Range(0.1, 600.0));
  cmd->callback([&ctx, args] {
    device::SelftestOptions opt;
    opt.quick = args->quick;
    opt.per_core = !args->no_per_core;
    opt.min_bench_s = args->seconds;
    opt.tool_timeout = std::chrono::milliseconds(static_cast<int64_t>(args->tool_timeout_s * 1000));
    if (!args->json) std::fprintf(stderr, "selftest device: probing devices and benchmarking...\n");
    absl::StatusOr<nlohmann::json> report = device::RunDeviceSelftest(*Os::Default(), opt);
    if (!report.ok()) {
      ctx.exit_code = ReportAndExitCode("selftest device", report.status());
      return;
    }
    if (args->json) {
      std::cout << report->dump(2) << "\n";
    } else {
      std::cout << device::RenderDeviceReport(*report);
    }
    ctx.exit_code = report->value("passed", false) ? kExitOk : kExitProblems;
  });
}

}  // namespace trainscope::cli
