"""Helpers shared by watch, distributed.record and checkpoint: rank, run directory, clock."""
import os
import threading

from . import _core
from ._errors import Error

# The run directory's layout is the C++ one (include/trainscope/core/run_dir.h, through _core):
# Python spells none of its names.
TRAIN_DIR = _core.RUN_DIR_PARTS["train"]
HANG_DIR = _core.RUN_DIR_PARTS["hang"]
CHECKPOINTS_DIR = _core.RUN_DIR_PARTS["checkpoints"]
CHECKPOINT_MANIFEST = _core.RUN_DIR_FILES["checkpoint_manifest"]


def metrics_path(run_dir, rank):
    return _core.metrics_path(str(run_dir), rank)


def tensorboard_dir(run_dir, rank):
    return _core.tensorboard_dir(str(run_dir), rank)


def hang_dump_path(run_dir, rank):
    return _core.hang_dump_path(str(run_dir), rank)


def hang_stacks_path(run_dir, rank):
    return _core.hang_stacks_path(str(run_dir), rank)


def _dist():
    try:
        import torch.distributed as dist
    except ImportError:  # torch built without distributed
        return None
    if dist.is_available() and dist.is_initialized():
        return dist
    return None


def rank_and_world():
    """(rank, world_size): torch.distributed's when initialised, else RANK/WORLD_SIZE, else (0, 1)."""
    dist = _dist()
    if dist is not None:
        return dist.get_rank(), dist.get_world_size()
    try:
        return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError as e:
        raise Error("RANK/WORLD_SIZE in the environment are not integers: %s" % e) from None


def default_store():
    """The default group's c10d store, or None (not initialised, or a torch without it)."""
    dist = _dist()
    if dist is None:
        return None
    getter = getattr(dist.distributed_c10d, "_get_default_store", None)
    try:
        return getter() if getter is not None else None
    except Exception:  # noqa: BLE001 - a torch that keeps no default store
        return None


def resolve_run_dir(run_dir):
    """run_dir, else $TRAINSCOPE_RUN_DIR (set by `trainscope launch`), else
    runs/train-<UTC YYYYmmdd-HHMMSS>-<pid> as `trainscope train` names it; with
    torch.distributed initialised every rank takes rank 0's name (through the c10d store)."""
    if run_dir:
        return str(run_dir)
    env = os.environ.get("TRAINSCOPE_RUN_DIR")
    if env:
        return env
    name = _core.default_run_dir(TRAIN_DIR)
    store = default_store()
    rank, world = rank_and_world()
    if store is None or world == 1:
        return name
    key = "trainscope/run_dir"
    if rank == 0:
        store.set(key, name)
        return name
    return store.get(key).decode()


# Run directories this process writes, each held (or joined) until the process exits.
_run_dir_locks = {}
_run_dir_locks_mu = threading.Lock()


def lock_run_dir(run_dir):
    """Takes run_dir's writer lock (<run_dir>/LOCK, the C++ one: include/trainscope/core/
    run_dir_lock.h, docs/formats.md "Run directory") once per process and keeps it until the
    process exits; watch, distributed.record and checkpoint.save all call it. The ranks of one
    job share a job id (trainscope._core.job_id(): TRAINSCOPE_JOB_ID, else the rendezvous
    endpoint MASTER_ADDR:MASTER_PORT of a WORLD_SIZE > 1, ...): the first to arrive holds
    the lock, the others join it. With torch.distributed initialised but no job id in the
    environment, rank 0 holds it for the job and the other ranks take nothing.
    Raises trainscope.Error "<run_dir> is in use by pid P (COMMAND); ..." when another writer
    (another job, another `trainscope train`) holds it."""
    from . import _core

    key = os.path.realpath(run_dir)
    with _run_dir_locks_mu:
        if key in _run_dir_locks:
            return _run_dir_locks[key]
        job = _core.job_id()
        rank, world = rank_and_world()
        if not job and world > 1 and rank != 0:
            lock = None
        elif os.path.exists(run_dir) and not os.path.isdir(run_dir):
            return None  # not a directory: the writer's own error says so
        else:
            lock = _core.lock_run_dir(str(run_dir), job_id=job)
        _run_dir_locks[key] = lock
        return lock
