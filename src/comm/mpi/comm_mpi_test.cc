// MPI backend test, run by ctest under `mpirun -np 2` (a plain main: one verdict per rank,
// mpirun's exit code is the test's).
//   comm_mpi_test           every op and size in every dtype, exactly; async all-reduce
//   comm_mpi_test --hang    rank 1 never joins; rank 0's watchdog must report the op
//                           within the 2 s op timeout (CommHost::stuck_op: printed, as the
//                           executables do, checked by ctest's PASS_REGULAR_EXPRESSION) and
//                           the job must end through its abort_job
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "trainscope/comm/comm.h"
#include "trainscope/comm/selftest.h"

using trainscope::comm::CommOptions;
using trainscope::comm::Communicator;
using trainscope::comm::DType;

int main(int argc, char** argv) {
  bool hang = argc > 1 && std::strcmp(argv[1], "--hang") == 0;
  CommOptions defaults;
  defaults.backend = "mpi";
  defaults.timeout = std::chrono::milliseconds(hang ? 2000 : 30000);
  defaults.host.stuck_op = [](const trainscope::comm::StuckOp& op) {
    std::fprintf(stderr, "%s\n", op.line.c_str());
    std::fflush(stderr);
    op.abort_job();
  };
  auto opts = trainscope::comm::OptionsFromEnvironment(defaults);
  if (!opts.ok()) {
    std::fprintf(stderr, "options: %s\n", opts.status().ToString().c_str());
    return 1;
  }
  opts->timeout = defaults.timeout;
  auto comm = Communicator::Create(*opts);
  if (!comm.ok()) {
    std::fprintf(stderr, "create: %s\n", comm.status().ToString().c_str());
    return 1;
  }
  Communicator& c = **comm;
  if (hang) {
    if (c.rank() == 1) {
      std::this_thread::sleep_for(std::chrono::seconds(30));
      return 0;
    }
    float x = 1;
    absl::Status st = c.AllReduce(&x, 1, DType::kFloat32);
    std::fprintf(stderr, "FAIL: all_reduce returned (%s) instead of aborting\n",
                 st.ToString().c_str());
    return 1;
  }
  trainscope::comm::SelftestOptions so;
  so.sizes = {8, 4096, 1 << 20};
  so.iters = 2;
  so.warmup = 1;
  so.slow_rank_ratio = 1e300;
  auto rep = trainscope::comm::RunSelftest(c, so);
  if (!rep.ok()) {
    std::fprintf(stderr, "selftest: %s\n", rep.status().ToString().c_str());
    return 1;
  }
  if (!rep->passed || rep->rows.empty()) {
    std::fprintf(stderr, "FAIL: %s\n", rep->reason.c_str());
    return 1;
  }
  // Async all-reduce in FIFO with a sync op in between.
  std::vector<std::vector<float>> bufs(4, std::vector<float>(1000));
  std::vector<std::unique_ptr<trainscope::comm::Work>> works;
  for (size_t k = 0; k < bufs.size(); ++k) {
    std::fill(bufs[k].begin(), bufs[k].end(), static_cast<float>(k + c.rank()));
    works.push_back(c.AllReduceAsync(bufs[k].data(), bufs[k].size(), DType::kFloat32));
  }
  int64_t y = c.rank();
  if (!c.AllReduce(&y, 1, DType::kInt64, trainscope::comm::ReduceOp::kMax).ok() ||
      y != c.world_size() - 1) {
    std::fprintf(stderr, "FAIL: sync max\n");
    return 1;
  }
  float want_base = static_cast<float>(c.world_size() * (c.world_size() - 1) / 2);
  for (size_t k = 0; k < works.size(); ++k) {
    if (!works[k]->Wait().ok() || bufs[k][999] != want_base + c.world_size() * k) {
      std::fprintf(stderr, "FAIL: async all_reduce %zu\n", k);
      return 1;
    }
  }
  if (c.rank() == 0) std::printf("comm_mpi_test: %zu rows passed\n", rep->rows.size());
  return 0;
}
