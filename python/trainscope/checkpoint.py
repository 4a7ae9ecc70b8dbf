"""`trainscope.checkpoint`: atomic, hashed checkpoints of a user's training state.

    trainscope.checkpoint.save(run_dir, {"model": model.state_dict(),
                                         "optimizer": opt.state_dict()}, step=s, keep=3)
    ck = trainscope.checkpoint.load(run_dir)        # the latest complete, intact one; newer
                                                    # damaged or unfinished ones are warned
                                                    # about and listed in ck.skipped
    model.load_state_dict(ck.state["model"]); opt.load_state_dict(ck.state["optimizer"])

The folders are the trainer's (`<run_dir>/checkpoints/step-<N>/`, docs/formats.md
"Checkpoint"): written to a temporary folder, fsynced, with a manifest of xxh3 hashes written
last and renamed into place by the native writer, so `trainscope ckpt verify|inspect|diff`
read them and a crash mid-save leaves the previous checkpoint as the latest.

Layout of the state: every tensor of the nested state (dicts, lists, tuples) is stored in
model.safetensors under its dotted path ("model.layer1.weight", "optimizer.state.0.exp_avg";
bfloat16 as dtype BF16), everything else (ints, floats, strings, None, bools) in meta.json's
"extra" as a skeleton that load() fills back in, so dict keys keep their types (the
optimizer's integer parameter ids) and tuples stay tuples. The RNG states of torch (CPU and
every CUDA device), numpy and Python's random are saved with it and restored by load().

Distributed: only rank 0 writes; every rank waits at a barrier until it has, so a load right
after a save sees it. Plain tensors are taken as replicated (DDP). DTensor values (FSDP2's
`fully_shard`, tensor parallel: `model.state_dict()`, `opt.state_dict()`) are gathered to
full tensors first, so every rank passes its own shards of the same state: the ranks first
compare where their DTensors are (one all_gather_object; a difference is a trainscope.Error
on every rank naming the first such key, not a hang), then each DTensor is gathered in turn
(`full_tensor()`, a collective over its mesh) and rank 0 keeps a CPU copy. The checkpoint
holds full tensors; load() returns them as plain tensors (into an FSDP2 model:
torch.distributed.checkpoint.state_dict.set_model_state_dict with full_state_dict=True). A
state already full (get_model_state_dict(full_state_dict=True, cpu_offload=True), which
leaves the other ranks an empty dict) is written as it is.
"""
import collections
import os
import random
import warnings

import numpy as np
import torch

from . import _api, _core, _dtensor as _dt, _util
from ._errors import Error

FORMAT = _core.FORMATS["python_state"]
VERSION = _core.FORMAT_VERSIONS[FORMAT]

_TO_ST = {torch.float32: "F32", torch.float64: "F64", torch.float16: "F16",
          torch.bfloat16: "BF16", torch.int64: "I64", torch.int32: "I32", torch.int16: "I16",
          torch.int8: "I8", torch.uint8: "U8", torch.bool: "BOOL"}
_FROM_ST = {"F32": (np.float32, None), "F64": (np.float64, None), "F16": (np.float16, None),
            "BF16": (np.int16, torch.bfloat16), "I64": (np.int64, None),
            "I32": (np.int32, None), "I16": (np.int16, None), "I8": (np.int8, None),
            "U8": (np.uint8, None), "BOOL": (np.bool_, None)}

Loaded = collections.namedtuple("Loaded", ["state", "step", "path", "skipped"], defaults=((),))
Loaded.__doc__ = """What load() read: state, step, path, and skipped: the newer checkpoints it
passed over (a list of Skipped, newest first; empty when it took the newest)."""
Skipped = collections.namedtuple("Skipped", ["path", "reason", "tensor"])
Skipped.__doc__ = """A checkpoint load() passed over: its folder, why (the first problem
`ckpt verify` finds: "model.safetensors: corrupt: tensor ...", "manifest.json: incomplete:
..."), and the damaged tensor's name (None when not one tensor's)."""


def _checkpoints_dir(path):
    return os.path.join(str(path), _util.CHECKPOINTS_DIR)


def _buffer(t, name):
    """(dtype name, shape, C-contiguous CPU buffer) of tensor t, saved under name."""
    t = t.detach()
    if _dt.is_dtensor(t):  # not gathered: save() without torch.distributed initialised
        raise Error("trainscope.checkpoint.save: '%s' is a DTensor (a shard of a sharded "
                    "tensor) and torch.distributed is not initialised to gather it; save "
                    "full tensors (t.full_tensor())." % name)
    if t.dtype not in _TO_ST:
        raise Error("trainscope.checkpoint.save: tensor dtype %s is not supported (float64/32/16, "
                    "bfloat16, int64/32/16/8, uint8, bool are)." % t.dtype)
    t = t.cpu().contiguous()
    if t.dtype == torch.bfloat16:
        return "BF16", list(t.shape), t.view(torch.int16).numpy()
    return _TO_ST[t.dtype], list(t.shape), t.numpy()


def _flatten(value, path, tensors, gathered=None):
    """The JSON skeleton of value; tensors appended as (name, dtype, shape, buffer). gathered:
    id(DTensor) -> its full CPU tensor, saved in its place."""
    if isinstance(value, torch.Tensor):
        name = ".".join(path) or "tensor"
        if gathered:
            value = gathered.get(id(value), value)
        tensors.append((name,) + _buffer(value, name))
        return {"__tensor__": name}
    if isinstance(value, np.ndarray):
        return {"__ndarray__": _flatten(torch.from_numpy(np.ascontiguousarray(value)), path,
                                        tensors)}
    if isinstance(value, dict):
        items = [[_flatten(k, path + ["key"], tensors, gathered)
                  if not isinstance(k, (str, int, float))
                  else k, _flatten(v, path + [str(k)], tensors, gathered)]
                 for k, v in value.items()]
        if all(isinstance(k, str) and not k.startswith("__") for k in value):
            return {k: v for k, v in items}
        return {"__dict__": items}
    if isinstance(value, tuple):
        return {"__tuple__": [_flatten(v, path + [str(i)], tensors, gathered)
                              for i, v in enumerate(value)]}
    if isinstance(value, list):
        return [_flatten(v, path + [str(i)], tensors, gathered) for i, v in enumerate(value)]
    if isinstance(value, (np.generic,)):
        return value.item()
    if value is None or isinstance(value, (bool, int, float, str)):
        if isinstance(value, float) and value != value:
            return {"__float__": "nan"}
        if isinstance(value, float) and value in (float("inf"), float("-inf")):
            return {"__float__": "inf" if value > 0 else "-inf"}
        return value
    if isinstance(value, torch.dtype):
        return {"__dtype__": str(value)}
    raise Error("trainscope.checkpoint.save: %s at '%s' cannot be saved (tensors, dicts, lists, "
                "tuples, numbers, strings and None can)." % (type(value).__name__,
                                                             ".".join(path) or "the top"))


def _unflatten(skel, tensors):
    if isinstance(skel, list):
        return [_unflatten(v, tensors) for v in skel]
    if not isinstance(skel, dict):
        return skel
    if "__tensor__" in skel:
        return tensors[skel["__tensor__"]]
    if "__ndarray__" in skel:
        return _unflatten(skel["__ndarray__"], tensors).numpy()
    if "__tuple__" in skel:
        return tuple(_unflatten(v, tensors) for v in skel["__tuple__"])
    if "__dict__" in skel:
        return {_unflatten(k, tensors): _unflatten(v, tensors) for k, v in skel["__dict__"]}
    if "__float__" in skel:
        return float(skel["__float__"])
    if "__dtype__" in skel:
        return getattr(torch, skel["__dtype__"].split(".", 1)[1])
    return {k: _unflatten(v, tensors) for k, v in skel.items()}


def _rng_state(tensors):
    np_state = np.random.get_state()
    py_state = random.getstate()
    rng = {"torch": _flatten(torch.get_rng_state(), ["rng", "torch"], tensors),
           "numpy": [np_state[0], _flatten(np_state[1].astype(np.int64), ["rng", "numpy"], tensors),
                     int(np_state[2]), int(np_state[3]), float(np_state[4])],
           "python": [py_state[0], list(py_state[1]), py_state[2]]}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        rng["cuda"] = [_flatten(s, ["rng", "cuda", str(i)], tensors)
                       for i, s in enumerate(torch.cuda.get_rng_state_all())]
    return rng


def _restore_rng(rng, tensors):
    torch.set_rng_state(_unflatten(rng["torch"], tensors))
    n = rng["numpy"]
    np.random.set_state((n[0], _unflatten(n[1], tensors).astype(np.uint32), n[2], n[3], n[4]))
    p = rng["python"]
    random.setstate((p[0], tuple(p[1]), p[2]))
    if "cuda" in rng and torch.cuda.is_available():
        states = [_unflatten(s, tensors) for s in rng["cuda"]]
        if len(states) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(states)


def _dist():
    import torch.distributed as dist
    return dist if dist.is_available() and dist.is_initialized() else None


def _dtensors(value, path, found):
    """Appends (dotted path, DTensor) for every DTensor in value, in _flatten's order."""
    if isinstance(value, torch.Tensor):
        if _dt.is_dtensor(value):
            found.append((".".join(path) or "tensor", value))
    elif isinstance(value, dict):
        for k, v in value.items():
            _dtensors(v, path + [str(k)], found)
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _dtensors(v, path + [str(i)], found)
    return found


def _gather_dtensors(dist, state):
    """id(DTensor) -> full CPU tensor on rank 0 ({} elsewhere), gathering every DTensor of
    state on every rank. Collective: each rank must pass its shards of the same state; the
    ranks compare their DTensors' paths first and all raise if they differ."""
    if _dt.dtensor_type(load=True) is None:  # a torch without DTensor: no rank has one
        return {}
    found = _dtensors(state, [], [])
    paths = [p for p, _ in found]
    every = [None] * dist.get_world_size()
    dist.all_gather_object(every, paths)
    for rank, theirs in enumerate(every):
        if theirs != paths:
            i = next(i for i, (p, q) in enumerate(zip(paths + [None], theirs + [None]))
                     if p != q)
            key = paths[i] if i < len(paths) else theirs[i]
            raise Error("trainscope.checkpoint.save: the ranks' states differ in their DTensors "
                        "(at '%s', rank %d and rank %d differ): DTensors (FSDP2, tensor "
                        "parallel) are gathered to full tensors, so every rank passes its own "
                        "shards of the same state, e.g. {\"model\": model.state_dict()}; or "
                        "pass full tensors (torch.distributed.checkpoint.state_dict."
                        "get_model_state_dict(model, options=StateDictOptions("
                        "full_state_dict=True, cpu_offload=True)))."
                        % (key, dist.get_rank(), rank))
    keep = dist.get_rank() == 0
    gathered = {}
    for _, t in found:
        value = t.full_tensor()  # a collective over t's mesh
        if keep:
            gathered[id(t)] = value.cpu()
    return gathered


def save(path, state, step, keep=0, rng=True):
    """Writes `state` as <path>/checkpoints/step-<step>/ and returns that folder (None on the
    ranks other than 0, which do not write). path: the run directory. keep: then removes all
    but the newest `keep` complete checkpoints (0 keeps all). rng: save the RNG states.
    Distributed: call on every rank; DTensor values are gathered (see the module's doc).
    Raises trainscope.Error: the run directory is in use by another writer (_util.lock_run_dir),
    the checkpoint exists, a value that cannot be saved, the ranks'
    DTensors differ, I/O."""
    if not isinstance(step, int) or step < 0:
        raise Error("trainscope.checkpoint.save: step must be a non-negative int, not %r."
                    % (step,))
    dist = _dist()
    written = None
    gathered = _gather_dtensors(dist, state) if dist is not None else {}
    if dist is None or dist.get_rank() == 0:
        _util.lock_run_dir(str(path))  # one writer per run directory (rank 0 writes)
        tensors = []
        meta = {"format": FORMAT, "version": VERSION, "step": step,
                "state": _flatten(state, [], tensors, gathered), "torch": torch.__version__}
        if rng:
            meta["rng"] = _rng_state(tensors)
        written = _core.ckpt_write(_checkpoints_dir(path), step, tensors, meta,
                                   world_size=dist.get_world_size() if dist else 1)
        if keep and keep > 0:
            _core.ckpt_prune(_checkpoints_dir(path), int(keep))
    if dist is not None:
        dist.barrier()
    return written


def _find_latest(path):
    """(newest complete, intact, non-anomaly checkpoint folder or None, [Skipped newer ones])
    under run dir or checkpoints folder `path`."""
    p = str(path)
    for d in (_checkpoints_dir(p), p):
        if os.path.isdir(d):
            found = _core.ckpt_find_latest(d)
            skipped = [Skipped(s["path"], s["reason"], s["tensor"]) for s in found["skipped"]]
            if found["path"] or skipped:
                return found["path"], skipped
    return None, []


def latest(path):
    """The newest complete, intact checkpoint folder under run dir or checkpoints folder
    `path`, or None."""
    return _find_latest(path)[0]


def load(path, restore_rng=True, map_location=None, strict=False):
    """Reads a checkpoint: `path` is a step-<N> folder, or a run directory / checkpoints folder
    (its latest complete, intact checkpoint). Returns Loaded(state, step, path, skipped): the
    state as saved, tensors on the CPU (or map_location); skipped lists the newer checkpoints
    passed over (damaged or unfinished), each also told with a warnings.warn naming its folder
    and why. strict: raise instead of passing over any. restore_rng: restores the saved RNG
    states. Raises trainscope.Error: no checkpoint there, a hash mismatch (naming the file and
    the damaged tensor), not ours, strict and a newer checkpoint is damaged or unfinished."""
    p = str(path)
    skipped = []
    if not os.path.exists(os.path.join(p, _util.CHECKPOINT_MANIFEST)):
        found, skipped = _find_latest(p)
        why = "; ".join("%s: %s" % (s.path, s.reason) for s in skipped)
        if skipped and strict:
            raise Error("%s: the newest checkpoint%s cannot be loaded (strict=True): %s%s"
                        % (p, "s" if len(skipped) > 1 else "", why,
                           "; the newest good one is %s" % found if found else ""))
        if found is None:
            raise Error("%s: no complete checkpoint there (a step-<N> folder, or a run directory "
                        "with checkpoints/)%s." % (p, "; passed over: " + why if why else ""))
        for s in skipped:
            warnings.warn("trainscope.checkpoint.load: skipped %s: %s; loading %s instead "
                          "(strict=True raises)" % (s.path, s.reason, found), stacklevel=2)
        p = found
    listed, meta = _core.ckpt_read(p)
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise Error("%s: not a trainscope.checkpoint.save checkpoint (a trainer checkpoint? "
                    "read it with `trainscope ckpt inspect`)." % p)
    tensors = {}
    for name, dtype, shape, data in listed:
        np_type, view = _FROM_ST[dtype]
        t = torch.from_numpy(np.frombuffer(data, dtype=np_type).copy()).reshape(list(shape))
        if view is not None:
            t = t.view(view)
        if map_location is not None and not name.startswith("rng."):
            t = t.to(map_location)
        tensors[name] = t
    if restore_rng and "rng" in meta:
        _restore_rng(meta["rng"], tensors)
    return Loaded(_unflatten(meta["state"], tensors), int(meta["step"]), p, skipped)


def verify(path):
    """`trainscope ckpt verify --json`'s dict for checkpoint folder `path` (latest one of a run
    directory); its "ok" says whether every file matches the manifest."""
    p = str(path)
    if not os.path.exists(os.path.join(p, _util.CHECKPOINT_MANIFEST)):
        p = latest(p) or p
    return _api.ckpt_verify(p)
