// Every environment variable trainscope reads, in one place, each with what it means (c10d's
// style). Modules refer to these constants rather than spelling names inline.
#ifndef TRAINSCOPE_CORE_ENV_VARS_H_
#define TRAINSCOPE_CORE_ENV_VARS_H_

namespace trainscope::envvar {

// --- Rendezvous, torchrun conventions (set by `trainscope launch`, read by comm) ---
inline constexpr char kMasterAddr[] = "MASTER_ADDR";           // host of the rank-0 store
inline constexpr char kMasterPort[] = "MASTER_PORT";           // TCP port of the store
inline constexpr char kRank[] = "RANK";                        // global rank
inline constexpr char kWorldSize[] = "WORLD_SIZE";             // number of ranks in the job
inline constexpr char kLocalRank[] = "LOCAL_RANK";             // rank within this node
inline constexpr char kLocalWorldSize[] = "LOCAL_WORLD_SIZE";  // ranks on this node
inline constexpr char kGroupRank[] = "GROUP_RANK";             // node rank (torchrun)
// --- torchrun (torch.distributed.run's elastic agent), read by comm/join.h ---
inline constexpr char kTorchelasticRunId[] = "TORCHELASTIC_RUN_ID";  // the job's rdzv run id
// "True" when the agent's own c10d TCPStore listens on MASTER_ADDR:MASTER_PORT
inline constexpr char kTorchelasticUseAgentStore[] = "TORCHELASTIC_USE_AGENT_STORE";
inline constexpr char kTorchelasticRestartCount[] = "TORCHELASTIC_RESTART_COUNT";  // attempt
// --- mpirun conventions (OpenMPI), used when the RANK family is absent ---
inline constexpr char kOmpiRank[] = "OMPI_COMM_WORLD_RANK";
inline constexpr char kOmpiSize[] = "OMPI_COMM_WORLD_SIZE";
inline constexpr char kOmpiLocalRank[] = "OMPI_COMM_WORLD_LOCAL_RANK";
inline constexpr char kOmpiLocalSize[] = "OMPI_COMM_WORLD_LOCAL_SIZE";
inline constexpr char kPmixNamespace[] = "PMIX_NAMESPACE";       // Open MPI 4/5 job id
inline constexpr char kOmpiJobId[] = "OMPI_MCA_ess_base_jobid";  // Open MPI job id (older)
// --- PMI (MPICH / Intel MPI's hydra, srun --mpi=pmi2), after OMPI_* ---
inline constexpr char kPmiRank[] = "PMI_RANK";
inline constexpr char kPmiSize[] = "PMI_SIZE";
inline constexpr char kPmiJobId[] = "PMI_JOBID";              // when the PMI server sets one
inline constexpr char kMpiLocalRankId[] = "MPI_LOCALRANKID";  // hydra: rank on this node
inline constexpr char kMpiLocalNranks[] = "MPI_LOCALNRANKS";  // hydra: ranks on this node
// --- Slurm (srun), after the MPI families; a world only inside a job step ---
inline constexpr char kSlurmProcId[] = "SLURM_PROCID";                  // global rank
inline constexpr char kSlurmNtasks[] = "SLURM_NTASKS";                  // ranks of the job
inline constexpr char kSlurmStepNumTasks[] = "SLURM_STEP_NUM_TASKS";    // ranks of the step
inline constexpr char kSlurmLocalId[] = "SLURM_LOCALID";                // rank on this node
inline constexpr char kSlurmNodeId[] = "SLURM_NODEID";                  // node index in the step
inline constexpr char kSlurmNtasksPerNode[] = "SLURM_NTASKS_PER_NODE";  // --ntasks-per-node
inline constexpr char kSlurmStepTasksPerNode[] = "SLURM_STEP_TASKS_PER_NODE";  // "2(x3),1"
inline constexpr char kSlurmTasksPerNode[] = "SLURM_TASKS_PER_NODE";           // the job's
inline constexpr char kSlurmStepNodelist[] = "SLURM_STEP_NODELIST";  // "node[01-04]": step
inline constexpr char kSlurmJobNodelist[] = "SLURM_JOB_NODELIST";    // the job's nodes
inline constexpr char kSlurmNodelist[] = "SLURM_NODELIST";           // the same, older name
inline constexpr char kSlurmJobId[] = "SLURM_JOB_ID";      // with the step id, seeds the port
inline constexpr char kSlurmStepId[] = "SLURM_STEP_ID";    // set inside an srun step
inline constexpr char kSlurmStepIdOld[] = "SLURM_STEPID";  // the same, older name
// --- Device pinning (set per rank by launch) ---
inline constexpr char kCudaVisibleDevices[] = "CUDA_VISIBLE_DEVICES";
inline constexpr char kAscendVisibleDevices[] = "ASCEND_RT_VISIBLE_DEVICES";
// --- Collectives ---
// Network interface for the gloo backend's TCP transport (PyTorch's name for it); a comma
// list uses its first entry. Unset: the interface that routes to MASTER_ADDR.
inline constexpr char kGlooSocketIfname[] = "GLOO_SOCKET_IFNAME";
// `env fingerprint` records every NCCL_*, HCCL_*, GLOO_*, TORCH_NCCL_*, TORCH_HCCL_* variable
// and these; `env check` judges them (src/env/collective_rules.cc, docs/errors.md):
// cuBLAS workspace for deterministic torch (":4096:8" or ":16:8").
inline constexpr char kCublasWorkspaceConfig[] = "CUBLAS_WORKSPACE_CONFIG";
// --- Threads ---
inline constexpr char kOmpNumThreads[] = "OMP_NUM_THREADS";
// libgomp barrier waiting; `trainscope` sets PASSIVE when unset before exec'ing trainscope-torch
inline constexpr char kOmpWaitPolicy[] = "OMP_WAIT_POLICY";
// --- trainscope's own ---
inline constexpr char kRunDir[] = "TRAINSCOPE_RUN_DIR";  // run directory of a launch
// Per-job secret that every rank presents to rank 0's rendezvous store (comm/store.h); the
// store refuses connections without it. `trainscope launch` generates it for a single-node
// job (unless set) and passes it to its ranks; with --nnodes > 1 the user sets the same
// value on every node. Never printed or written to launch.json.
inline constexpr char kJobToken[] = "TRAINSCOPE_JOB_TOKEN";
// The job a process belongs to, for the run-directory lock (core/run_dir_lock.h): a rank
// whose job id equals the one recorded in <run dir>/LOCK joins that holder instead of being
// refused. `trainscope launch` sets a fresh one for its ranks ("launch/<host>/<pid>", or
// "launch/<master addr>:<port>" with --nnodes > 1, the same on every node).
inline constexpr char kJobId[] = "TRAINSCOPE_JOB_ID";
inline constexpr char kCommTimeoutS[] = "TRAINSCOPE_COMM_TIMEOUT_S";  // op timeout override
inline constexpr char kNoProgress[] = "TRAINSCOPE_NO_PROGRESS";       // "1": no progress lines
inline constexpr char kProgress[] =
    "TRAINSCOPE_PROGRESS";                              // "1": progress lines off a terminal too
inline constexpr char kPython[] = "TRAINSCOPE_PYTHON";  // interpreter asked for torch versions
// --- tokenizer / data ---
inline constexpr char kSpmLibrary[] =
    "TRAINSCOPE_SPM_LIBRARY";  // path of libts_spm.so (SentencePiece wrapper)
// --- env fingerprint: where toolkits are looked for (read, never set) ---
inline constexpr char kCudaHome[] =
    "CUDA_HOME";  // CUDA toolkit root (else CUDA_PATH, /usr/local/cuda)
inline constexpr char kCudaPath[] = "CUDA_PATH";               // CUDA toolkit root, second choice
inline constexpr char kAscendHomePath[] = "ASCEND_HOME_PATH";  // CANN root set by set_env.sh
inline constexpr char kAscendToolkitHome[] = "ASCEND_TOOLKIT_HOME";  // CANN root, second choice
inline constexpr char kPath[] = "PATH";      // searched for python3 when TRAINSCOPE_PYTHON is unset
inline constexpr char kTmpDir[] = "TMPDIR";  // scratch files (spills, self-test run dirs)

}  // namespace trainscope::envvar

#endif  // TRAINSCOPE_CORE_ENV_VARS_H_
