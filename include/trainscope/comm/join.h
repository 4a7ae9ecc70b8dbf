// Joining the job a launcher started: which launcher started this process, which rank it is,
// and how the ranks meet. The one place where `trainscope train`, `selftest comm`,
// `data scan|clean --distributed` (and so doctor's comm part) become ranks of a world.
//
// Launchers, in the order they are recognised (the first that matches wins, so that e.g. a
// torchrun or mpirun started inside a Slurm allocation is taken for what it is):
//   torchrun    TORCHELASTIC_RUN_ID with RANK/WORLD_SIZE. With TORCHELASTIC_USE_AGENT_STORE=True
//               the elastic agent's c10d TCPStore already listens on MASTER_ADDR:MASTER_PORT:
//               rendezvous kAgentStore (below). Otherwise as trainscope launch.
//   trainscope  RANK/WORLD_SIZE (trainscope launch, which also sets TRAINSCOPE_JOB_TOKEN and
//               TRAINSCOPE_RUN_DIR, or any launcher following the torchrun conventions):
//               rank 0 hosts trainscope's store on MASTER_ADDR:MASTER_PORT (comm/store.h).
//   openmpi     OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK/LOCAL_SIZE (mpirun, Open MPI).
//   pmi         PMI_RANK/PMI_SIZE, MPI_LOCALRANKID/MPI_LOCALNRANKS (MPICH / Intel MPI's hydra,
//               srun --mpi=pmi2).
//   slurm       SLURM_PROCID/SLURM_NTASKS (SLURM_STEP_NUM_TASKS when set)/SLURM_LOCALID inside
//               a job step (SLURM_STEP_ID or SLURM_STEP_NODELIST set: srun) of more than one
//               task. The batch script itself, which also carries SLURM_PROCID=0, and a
//               one-task step (srun -n 1: what it runs may start its own ranks) are no world.
// Under openmpi, pmi and slurm the ranks meet like under trainscope launch, at MASTER_ADDR /
// MASTER_PORT when given. Otherwise the address is derived: slurm takes the first host of
// SLURM_STEP_NODELIST (else SLURM_JOB_NODELIST, SLURM_NODELIST; the compact form
// "node[01-04,07]" expanded), where rank 0 runs under srun's default block distribution;
// mpirun and PMI on one node (every rank local) take 127.0.0.1, on several nodes they need
// MASTER_ADDR (InvalidArgument saying so). The port is derived from the launcher's job id
// (SLURM_JOB_ID + SLURM_STEP_ID; Open MPI's PMIX_NAMESPACE or OMPI_MCA_ess_base_jobid) into
// [kDerivedPortBase, kDerivedPortBase + kDerivedPortSpan), the same on every rank of one job
// step and unlikely to clash between concurrent steps; 29500 when there is no job id. The
// mpi backend needs none of this (MPI's own bootstrap: rendezvous kMpi).
//
// The torchrun agent store (kAgentStore): rank 0 starts trainscope's store on a free port of
// the address that routes to MASTER_ADDR, with a fresh job token, and publishes
// "host port token" under agent_store_key in the agent's store (through a libtorch-free
// client of PyTorch's TCPStore protocol); the other ranks wait for that key (up to the
// comm timeout), then everything goes on as under trainscope launch. The agent's store has
// no authentication: whoever can reach it can read the token, as they could join torch's
// own process groups.
#ifndef TRAINSCOPE_COMM_JOIN_H_
#define TRAINSCOPE_COMM_JOIN_H_

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "trainscope/comm/comm.h"
#include "trainscope/core/os.h"

namespace trainscope::comm {

enum class Launcher { kNone, kTorchrun, kTrainscope, kOpenMpi, kPmi, kSlurm };
// "none", "torchrun", "trainscope", "openmpi", "pmi", "slurm".
const char* LauncherName(Launcher launcher);

enum class Rendezvous {
  kNone,        // a world of one rank: nothing to join
  kStore,       // rank 0 hosts trainscope's store at comm.master_addr:master_port
  kAgentStore,  // torchrun's agent store at comm.master_addr:master_port; ours announced there
  kMpi,         // backend "mpi": MPI's own bootstrap, no store
};
const char* RendezvousName(Rendezvous rendezvous);  // "none", "store", "agent_store", "mpi"

// Ports derived from a job id fall in [kDerivedPortBase, kDerivedPortBase + kDerivedPortSpan):
// below Linux's ephemeral range (32768-60999), so no outgoing connection holds them.
inline constexpr int kDerivedPortBase = 17000;
inline constexpr int kDerivedPortSpan = 15000;

// What JoinOptionsFromEnvironment found. Plain data.
struct JoinOptions {
  Launcher launcher = Launcher::kNone;
  Rendezvous rendezvous = Rendezvous::kNone;
  // rank, world_size, local_rank, local_world_size, master_addr, master_port, timeout, iface
  // read from the environment over the defaults given.
  CommOptions comm;
  std::string job_id;           // the launcher's job id, "" when it has none
  std::string agent_store_key;  // kAgentStore: "trainscope/<run id>/<restart count>/store"
  // The variables the rank and the master address came from, for messages ("SLURM_PROCID",
  // "SLURM_STEP_NODELIST (first host)", "MASTER_ADDR", "default").
  std::string rank_var = "RANK";
  std::string world_size_var = "WORLD_SIZE";
  std::string master_addr_from = "default";
  std::string master_port_from = "default";
};

// Recognises the launcher from `os`'s environment (see the top of this file) and fills the
// options; `defaults` supplies what the environment does not (backend, timeout, the master
// address of a world of one). Pure: reads variables, opens nothing. InvalidArgument naming
// the variable: a value that is not an integer, a rank out of range, a port beyond 65535, a
// malformed Slurm node list, or (backend not "mpi") a several-node mpirun/PMI world without
// MASTER_ADDR.
absl::StatusOr<JoinOptions> JoinOptionsFromEnvironment(const CommOptions& defaults = {},
                                                       Os* os = Os::Default());

// Joins the world `options` describe and returns its communicator (Communicator::Create after
// the launcher's rendezvous: for kAgentStore, the announcement described above). Blocks up to
// options.comm.timeout for the rendezvous (the agent store's key included) and as
// Communicator::Create says. Errors: Communicator::Create's; Unavailable when torchrun's agent
// store cannot be reached or is no TCPStore; DeadlineExceeded when rank 0's announcement does
// not come within the timeout (naming the key and the agent store); InvalidArgument for a
// malformed announcement. A world of one is created on a free loopback port (whatever
// MASTER_PORT says: torchrun's agent store may hold it).
absl::StatusOr<std::unique_ptr<Communicator>> JoinWorld(const JoinOptions& options);

// How a command that runs as one rank (trainscope train, selftest comm, data --distributed)
// joins the world it was started in: JoinFromEnvironment's request. Plain data.
struct JoinRequest {
  // What the environment does not say (backend, timeout, ...): JoinOptionsFromEnvironment's
  // defaults.
  CommOptions defaults;
  // Set: every op's timeout, whatever TRAINSCOPE_COMM_TIMEOUT_S says (a command-line flag
  // that wins over the environment).
  std::optional<std::chrono::milliseconds> timeout;
  // false: a world of one gets no communicator (JoinedWorld::comm stays null), for a
  // command that needs none when it runs alone.
  bool join_alone = true;
  // true: JoinWorld's errors read "rank R: joining the N-rank job failed: <error>".
  bool name_rank_in_errors = true;
  // Called once the options are known, before anything connects: the caller's checks (an
  // error ends the join with it, unchanged) and the executable's process settings, such as
  // ignoring SIGPIPE so that a peer that died is an op error naming it rather than the end
  // of this process (the comm library leaves signals alone). May be empty.
  std::function<absl::Status(const JoinOptions& options)> before_connect;
};

struct JoinedWorld {
  JoinOptions options;                 // what the environment said, with the request's timeout
  std::unique_ptr<Communicator> comm;  // null for a world of one when !join_alone
};

// JoinOptionsFromEnvironment(request.defaults, os), the request's timeout, before_connect,
// then JoinWorld. Blocks as JoinWorld does. Errors: JoinOptionsFromEnvironment's and
// before_connect's unchanged; JoinWorld's, named as name_rank_in_errors says.
absl::StatusOr<JoinedWorld> JoinFromEnvironment(const JoinRequest& request, Os* os = Os::Default());

// Expands a Slurm host list ("node[01-04,07],login1,rack[1-2]-gpu[1-2]") in order, keeping
// each range's zero padding; stops after `max_hosts` names. InvalidArgument for unbalanced
// brackets, an empty name, or a range that is not "a-b" with a <= b.
absl::StatusOr<std::vector<std::string>> ExpandSlurmNodelist(std::string_view list,
                                                             size_t max_hosts = 1 << 20);
// Tasks on each node from SLURM_TASKS_PER_NODE's form ("2(x3),1" = 2,2,2,1).
// InvalidArgument when malformed.
absl::StatusOr<std::vector<int>> ExpandSlurmTasksPerNode(std::string_view spec);

}  // namespace trainscope::comm

#endif  // TRAINSCOPE_COMM_JOIN_H_
