// trainscope: from a fresh machine to a converged, fast training run.
// This executable carries every libtorch-free verb; the verbs that need libtorch (train,
// selftest train, selftest device) run in `trainscope-torch`, which this one execs into.
#include <malloc.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "CLI/CLI.hpp"
#include "cli/ckpt_command.h"
#include "cli/comm_host.h"
#include "cli/command.h"
#include "cli/compare_command.h"
#include "cli/diagnose_command.h"
#include "cli/exit.h"
#include "cli/hang_command.h"
#include "cli/plan_command.h"
#include "cli/report_command.h"
#include "cli/serve_command.h"
#include "cli/topo_command.h"
#include "trainscope/core/env_vars.h"
#include "trainscope/core/progress.h"
#include "trainscope/core/subprocess.h"
#include "trainscope/data/reader.h"

namespace {

// Replaces this process with trainscope-torch (same argv, same pid, so launchers, doctor
// and signal handling see one process). Only returns on failure.
int ExecTorchBinary(const std::string& self, char** argv) {
  std::string dir = self.substr(0, self.rfind('/') + 1);
  std::string torch_exe = dir + "trainscope-torch";
  // libtorch's OpenMP (libgomp) threads spin at every barrier by default; on shared CPUs
  // (other jobs, several ranks per node) they burn the time slices the working threads need:
  // a 2-thread CPU training step was measured 10x slower than with OMP_WAIT_POLICY=PASSIVE
  // (docs/PERFORMANCE.md). libgomp reads the variable once, when it loads, so it is set here,
  // before the exec, for every libtorch verb; a value the user set is kept.
  if (!std::getenv(trainscope::envvar::kOmpWaitPolicy)) {
    setenv(trainscope::envvar::kOmpWaitPolicy, "PASSIVE", 1);
  }
  execv(torch_exe.c_str(), argv);
  std::fprintf(stderr, "trainscope: error: cannot start %s: %s\n", torch_exe.c_str(),
               std::strerror(errno));
  std::fprintf(stderr, "hint: build it with scripts/build (it is built with libtorch)\n");
  return trainscope::cli::kExitUsage;
}

// Help-only entries for the verbs that trainscope-torch runs.
void RegisterForwarded(CLI::App& parent, const char* name, const char* description) {
  CLI::App* cmd = parent.add_subcommand(name, description);
  cmd->allow_extras();
  cmd->prefix_command();
}

// Allocator policy of the process (the library leaves it alone; STYLE.md). glibc's defaults
// return a worker arena's free top to the kernel (madvise(MADV_DONTNEED)) whenever it passes
// 128 KiB, and CLD2 allocates and frees ~100 KiB buffers per call: on a corpus of short
// documents that was one madvise and a TLB shootdown per document, a third of the scan's
// cycles (issue 12). Keeping up to 128 MiB free per arena and serving blocks up to 32 MiB
// (mallopt's maximum) from the arenas removes them; peak RSS is unchanged on the data bench.
void SetAllocatorPolicy() {
  mallopt(M_TRIM_THRESHOLD, 128 << 20);
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
}

}  // namespace

int main(int argc, char** argv) {
  SetAllocatorPolicy();
  // The executable owns the terminal and the signals (the library leaves them alone): a peer
  // that died is a comm op error naming it, not a SIGPIPE death (inherited by the
  // trainscope-torch exec), long work shows progress on stderr, and a mapped corpus that
  // shrinks mid-scan is a one-line error naming it (exit 2) instead of a bare "Bus error".
  trainscope::cli::IgnoreSigpipe();
  trainscope::SetProgressSink(stderr);
  trainscope::data::InstallMappedInputSigbusHandler();
  using trainscope::cli::CommandContext;
  CommandContext ctx;
  ctx.argv0 = trainscope::SelfExecutablePath();
  if (ctx.argv0.empty()) ctx.argv0 = argv[0];
  if (trainscope::cli::IsTorchVerb(argc, argv)) return ExecTorchBinary(ctx.argv0, argv);

  CLI::App app{
      "trainscope: environment, device, communication, data, training and profile checks "
      "for large-model training"};
  trainscope::cli::ConfigureRoot(app);

  trainscope::cli::RegisterEnvCommand(app, ctx);
  trainscope::cli::RegisterDoctorCommand(app, ctx);
  CLI::App* selftest =
      app.add_subcommand("selftest", "device, communication and training self-checks");
  selftest->require_subcommand(1);
  RegisterForwarded(*selftest, "device", "device health, matmul throughput, memory bandwidth");
  trainscope::cli::RegisterSelftestCommCommand(*selftest, ctx);
  RegisterForwarded(*selftest, "train", "baseline training run that must converge");
  trainscope::cli::RegisterLaunchCommand(app, ctx);
  RegisterForwarded(app, "train", "the reference GPT trainer (--config FILE)");
  trainscope::cli::RegisterDataCommand(app, ctx);
  trainscope::cli::RegisterTraceCommand(app, ctx);
  trainscope::cli::RegisterDiagnoseCommand(app, ctx);
  trainscope::cli::RegisterReportCommand(app, ctx);
  trainscope::cli::RegisterServeCommand(app, ctx);
  trainscope::cli::RegisterPlanCommand(app, ctx);
  trainscope::cli::RegisterTopoCommand(app, ctx);
  trainscope::cli::RegisterHangCommand(app, ctx);
  trainscope::cli::RegisterCkptCommand(app, ctx);
  trainscope::cli::RegisterCompareCommand(app, ctx);
  return trainscope::cli::ParseAndRun(app, ctx, argc, argv);
}
