// Private to the launcher: checking the options and planning the ranks (launch.h's
// contract) before anything is started. ReadHost gathers what the plan depends on from the
// host; PlanJob is then a pure function of the options and that view, so which ranks run,
// with which environment, CPUs and device, is testable without forking anything.
#ifndef TRAINSCOPE_SRC_LAUNCH_PLAN_H_
#define TRAINSCOPE_SRC_LAUNCH_PLAN_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "trainscope/launch/launch.h"

namespace trainscope::launch {

// The option checks that need nothing but the options: InvalidArgument naming the flag.
absl::Status ValidateOptions(const LaunchOptions& o);

// The job token every rank gets: `o.job_token`, else TRAINSCOPE_JOB_TOKEN from `o.env` or
// the launcher's environment, else (one node only) a fresh random one. InvalidArgument when
// it is too long, or missing with nnodes > 1.
absl::StatusOr<std::string> ResolveJobToken(const LaunchOptions& o);

// Node 0 of several hosts rank 0's store on exactly the master address: InvalidArgument
// when `addr` does not resolve or is not an address of this host.
absl::Status CheckMasterAddressIsLocal(const std::string& addr);

// What the plan needs to know of the host, read once by ReadHost.
struct HostView {
  LocalDevices devices;                        // DetectLocalDevices(o.dev_root)
  std::string visible_env;                     // launcher's value of devices.visible_var
  std::map<std::string, std::string> environ;  // the launcher's environment
  std::vector<std::vector<int>> numa_nodes;    // allowed CPUs per node; empty: do not bind
  int free_port = 0;                           // picked when o.master_port is 0
  std::string default_run_dir;                 // when o.run_dir is empty
  std::string cwd;                             // absolute; the base of a relative run_dir
  std::string host_name;                       // for the job id of one node
  int pid = 0;                                 // the launcher's
};

// Reads the devices, environment, CPUs and NUMA nodes (when o.bind_cpus), and picks a free
// port when o.master_port is 0 (Internal when none can be bound).
absl::StatusOr<HostView> ReadHost(const LaunchOptions& o);

// One local rank, everything it is started with.
struct RankPlan {
  int rank = 0;
  int local_rank = 0;
  std::vector<int> cpus;         // affinity (empty: not bound)
  std::string device;            // pinned device ("" when none)
  std::string log_dir;           // <run_dir>/rank<R>
  std::string stdout_log;        // <log_dir>/stdout.log
  std::string stderr_log;        // <log_dir>/stderr.log
  std::vector<std::string> env;  // "NAME=value", sorted by name: the whole environment
};

struct JobPlan {
  int nproc = 0;  // local ranks
  int world_size = 0;
  std::string master_addr;  // 127.0.0.1 with one node
  int master_port = 0;
  std::string run_dir;          // as given (or the default)
  std::string abs_run_dir;      // TRAINSCOPE_RUN_DIR
  std::string job_id;           // TRAINSCOPE_JOB_ID
  std::string visible_var;      // the variable that pins each rank's device ("" when none)
  std::vector<RankPlan> ranks;  // by local rank
};

// The ranks of this node: rank = node_rank * nproc + local rank, each with the torchrun
// environment (launch.h) over `host.environ` and `o.env`, `token`, its CPUs (PlanAffinity)
// and device (PlanRankDevices). Pure. InvalidArgument when o.rank_devices names fewer
// devices than local ranks, or there is no variable to pin them with.
absl::StatusOr<JobPlan> PlanJob(const LaunchOptions& o, const HostView& host,
                                const std::string& token);

}  // namespace trainscope::launch

#endif  // TRAINSCOPE_SRC_LAUNCH_PLAN_H_
