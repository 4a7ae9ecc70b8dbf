"""DTensor, torch 2.x's sharded tensor (FSDP2's `fully_shard` parameters and gradients, tensor
parallel), as watch, the NaN tracer and checkpoint.save need it.

A DTensor exists only once its module has been imported, so `is_dtensor` looks the class up
in sys.modules and never imports it; on a torch without DTensor (1.13) every function here
leaves its tensors alone.

Two kinds of calls: `local` reads this rank's shard and never communicates; `norms` and
`ranks_flagged` are collectives over the DTensors' device mesh, which every rank of that mesh
must make with the same tensors in the same order, as DTensor's own `full_tensor()` is.
"""
import sys

import torch
import torch.distributed as dist

_MODULES = ("torch.distributed.tensor", "torch.distributed._tensor")  # public; older torch


def dtensor_type(load=False):
    """The DTensor class if its module is imported (load: import it), else None."""
    for name in _MODULES:
        cls = getattr(sys.modules.get(name), "DTensor", None)
        if cls is not None:
            return cls
    if load:
        for name in _MODULES:
            try:
                __import__(name)
            except ImportError:
                continue
            return getattr(sys.modules[name], "DTensor", None)
    return None


def is_dtensor(t):
    cls = dtensor_type()
    return cls is not None and isinstance(t, cls)


def local(t):
    """This rank's part of DTensor t (its shard), else t itself. No communication."""
    return t.to_local() if is_dtensor(t) else t


def _mesh_key(mesh):
    try:
        hash(mesh)
        return mesh
    except TypeError:
        return id(mesh)


def norms(tensors):
    """The L2 norm of each tensor, as plain 0-dim tensors. A DTensor's is its full value's
    norm: torch._foreach_norm over the shards gives partial norms, reduced in one collective
    per device mesh (the way torch.nn.utils.clip_grad_norm_ reduces them)."""
    cls = dtensor_type()
    groups = {}  # mesh (None: plain tensors) -> indices, in first-seen order on every rank
    for i, t in enumerate(tensors):
        key = _mesh_key(t.device_mesh) if cls is not None and isinstance(t, cls) else None
        groups.setdefault(key, []).append(i)
    out = [None] * len(tensors)
    for key, idx in groups.items():
        values = torch._foreach_norm([tensors[i] for i in idx])
        if key is not None:
            values = torch.stack(values).full_tensor().unbind(0)
        for i, v in zip(idx, values):
            out[i] = v
    return out


def mesh_of(tensors):
    """The device mesh of the first DTensor among tensors, or None."""
    cls = dtensor_type()
    if cls is not None:
        for t in tensors:
            if isinstance(t, cls):
                return t.device_mesh
    return None


def ranks_flagged(flag, mesh):
    """The global ranks of mesh that pass a true flag: one all-reduce per mesh dimension,
    through torch.distributed (so `distributed.record` records them)."""
    device = torch.device(mesh.device_type)
    if device.type == "cuda":
        device = torch.device("cuda", torch.cuda.current_device())
    flags = torch.zeros(dist.get_world_size(), dtype=torch.int32, device=device)
    flags[dist.get_rank()] = int(bool(flag))
    get = getattr(mesh, "get_group", None)
    groups = [get(d) for d in range(mesh.ndim)] if get is not None else \
        mesh.get_dim_groups()  # torch 2.0, 2.1
    for group in groups:
        dist.all_reduce(flags, group=group)
    return [r for r, f in enumerate(flags.tolist()) if f]
