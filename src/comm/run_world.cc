// A rank of a launched run: joining the world from the environment (JoinFromEnvironment,
// join.h) and the options of its watchdog (WatchdogOptionsForRun, watchdog.h). What
// `trainscope train`, `selftest comm` and `data --distributed` share before their own work.
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "trainscope/comm/comm.h"
#include "trainscope/comm/join.h"
#include "trainscope/comm/watchdog.h"
#include "trainscope/core/run_dir.h"

namespace trainscope::comm {

absl::StatusOr<JoinedWorld> JoinFromEnvironment(const JoinRequest& request, Os* os) {
  auto jo = JoinOptionsFromEnvironment(request.defaults, os);
  if (!jo.ok()) return jo.status();
  JoinedWorld world;
  world.options = *std::move(jo);
  CommOptions& co = world.options.comm;
  if (request.timeout.has_value()) co.timeout = *request.timeout;
  if (request.before_connect) {
    if (absl::Status st = request.before_connect(world.options); !st.ok()) return st;
  }
  if (co.world_size == 1 && !request.join_alone) return world;
  auto c = JoinWorld(world.options);
  if (!c.ok()) {
    if (!request.name_rank_in_errors) return c.status();
    return absl::Status(c.status().code(),
                        absl::StrCat("rank ", co.rank, ": joining the ", co.world_size,
                                     "-rank job failed: ", c.status().message()));
  }
  world.comm = *std::move(c);
  return world;
}

std::optional<WatchdogOptions> WatchdogOptionsForRun(const Communicator& comm,
                                                     const std::string& run_dir) {
  if (run_dir.empty() || comm.flight_recorder() == nullptr) return std::nullopt;
  WatchdogOptions wo;
  wo.recorder = comm.flight_recorder();
  wo.rank = comm.rank();
  wo.timeout = comm.options().timeout;
  wo.dump_path = run_dir::HangDumpPath(run_dir, comm.rank());
  wo.stacks_path = run_dir::HangStacksPath(run_dir, comm.rank());
  return wo;
}

}  // namespace trainscope::comm
