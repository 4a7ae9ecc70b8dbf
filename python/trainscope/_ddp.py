"""One DDP communication hook shared by `watch` (comm timing, the NaN tracer's local check)
and `distributed.record` (the bucket all-reduce goes through `dist.all_reduce`, which
`record` wraps). DDP takes one hook per model; this module registers it once and calls the
observers registered with `observe`.

The hook does what DDP's default does (divide by the group size, all-reduce asynchronously)
and times each bucket from its issue to its future's completion.
"""
import threading
import time
import weakref

import torch
import torch.distributed as dist

_states = weakref.WeakKeyDictionary()  # DDP model -> _HookState
_lock = threading.Lock()


class _HookState:
    def __init__(self, process_group):
        self.process_group = process_group
        self.intervals = []         # (issued_s, completed_s) per bucket, perf_counter clock
        self.local_finite = []      # per bucket: 0-dim bool tensor, before the all-reduce
        self.check_finite = False   # set by the NaN tracer
        self.bucket = 0

    def take(self):
        """The intervals and local finiteness flags since the last take()."""
        iv, self.intervals = self.intervals, []
        fin, self.local_finite = self.local_finite, []
        self.bucket = 0
        return iv, fin


def _bucket_tensor(bucket):
    get = getattr(bucket, "buffer", None) or getattr(bucket, "get_tensor")
    return get()


def _hook(state, bucket):
    tensor = _bucket_tensor(bucket)
    if state.check_finite:
        state.local_finite.append(torch.isfinite(tensor).all())
    group = state.process_group
    tensor.div_(dist.get_world_size(group))
    state.bucket += 1
    issued = time.perf_counter()
    fut = dist.all_reduce(tensor, group=group, async_op=True).get_future()

    def done(f):
        state.intervals.append((issued, time.perf_counter()))
        return f.value()[0]

    return fut.then(done)


def is_ddp(model):
    return isinstance(model, torch.nn.parallel.DistributedDataParallel)


def install(model):
    """The hook state of DDP `model`, registering the hook on first use; None when `model` is
    not DDP or already has a hook of someone else (DDP refuses a second one)."""
    if not is_ddp(model):
        return None
    with _lock:
        state = _states.get(model)
        if state is not None:
            return state
        state = _HookState(getattr(model, "process_group", None))
        try:
            model.register_comm_hook(state, _hook)
        except RuntimeError:
            return None
        _states[model] = state
        return state
