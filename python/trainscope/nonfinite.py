"""The NaN tracer: finds where a loss, an activation or a gradient turned non-finite.

Design (the trainer's, src/train/nonfinite.cc, adapted to a user's own loop):
- Always on, cheap: `Monitor` checks the loss the user logs and the global gradient norm it
  computes anyway (one fused `torch._foreach_norm` over the gradients, before the optimizer
  step); a non-finite norm means some gradient is non-finite. One forward pre-hook on the
  model keeps a reference to the last forward's inputs and the RNG state (no copy).
- Detailed mode, only once a check fails, still at that step: the optimizer has not stepped
  (the check runs in front of `optimizer.step()`), so the weights are those the step ran
  with. The forward pass is replayed twice from the same inputs and RNG state, under
  `torch.no_grad()`, with a hook on every module checking `isfinite(output).all()`: the first
  module, in completion order, whose output is non-finite while its inputs were finite is
  the culprit (a leaf completes before its container). If the forward is finite, a
  non-finite loss is the loss function's (phase "loss"), and non-finite gradients are
  localised from the `.grad` tensors in the order backward produces them (the reverse of
  the modules' forward order): the first parameter whose gradient is non-finite.
  Buffers (BatchNorm's running statistics) and the RNG state are restored after replaying.
The record follows docs/formats.md "Non-finite record"; its `class`/`fix` come from the
trainer's own rules (src/diagnose/nonfinite.cc ClassifyNonfinite, through
`trainscope._core.classify_nonfinite`), worded for a user's loop.
"""
import math
import time

import torch

from . import _core, _dtensor as _dt

_MAX_SAMPLES = 64


def _tensors(value):
    """Every tensor inside value (tensors, tuples, lists, dicts, dataclass-like outputs); of a
    DTensor, this rank's part (testing a DTensor itself would communicate)."""
    if isinstance(value, torch.Tensor):
        yield _dt.local(value)
    elif isinstance(value, (tuple, list)):
        for v in value:
            yield from _tensors(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v)


def _all_finite(value):
    for t in _tensors(value):
        if (t.is_floating_point() or t.is_complex()) and t.numel() and \
                not bool(torch.isfinite(t).all()):
            return False
    return True


def _probably_finite(value):
    """A cheap pre-test for every step: the sum of each floating-point tensor is finite (one
    reduction and one read, a fraction of isfinite().all()'s several kernels). A
    NaN or Inf anywhere makes the sum non-finite, so this never misses one; a sum that
    overflows from finite values is a false alarm that _all_finite then clears."""
    for t in _tensors(value):
        if t.is_floating_point() and t.numel() and not math.isfinite(float(t.detach().sum())):
            return False
        if t.is_complex() and t.numel() and not bool(torch.isfinite(t).all()):
            return False
    return True


def _any_nan(value):
    return any((t.is_floating_point() or t.is_complex()) and t.numel() and
               bool(torch.isnan(t).any()) for t in _tensors(value))


def _max_abs(value):
    m = 0.0
    for t in _tensors(value):
        if t.is_floating_point() and t.numel():
            m = max(m, float(t.detach().abs().max()))
    return m


def _nonfinite_inputs(args, kwargs, ids, limit=_MAX_SAMPLES):
    """Where the model's own inputs hold NaN/Inf: [{"input", "sample", "sample_id",
    "features", "value"}], one entry per (input tensor, sample), at most `limit`.

    A tensor's first dimension is the batch: "sample" is the index in it, "sample_id" the
    id given to `mon.step(sample_ids=...)` at that index (None without), "features" the
    positions inside the sample (ints for a (B, F) input, index lists for (B, T, C)), at
    most 8; a 0-dim or 1-dim input has no features ([]). "value": "nan" or "inf" (the first).
    """
    found = []
    named = [("args[%d]" % i, a) for i, a in enumerate(args or ())] + \
        [("%s" % k, v) for k, v in (kwargs or {}).items()]
    for where, value in named:
        for t in _tensors(value):
            if not (t.is_floating_point() or t.is_complex()) or not t.numel():
                continue
            bad = ~torch.isfinite(t.detach())
            if not bool(bad.any()):
                continue
            idx = torch.nonzero(bad.reshape(t.shape if t.dim() else (1,)))
            by_sample = {}
            for row in idx.tolist():
                by_sample.setdefault(row[0], []).append(row[1:])
            for sample, positions in sorted(by_sample.items()):
                if len(found) >= limit:
                    return found
                first = t.detach().reshape(-1)[0] if t.dim() == 0 else t.detach()[sample]
                if first.dim():
                    first = first[tuple(positions[0])]
                feats = [p[0] if len(p) == 1 else p for p in positions[:8] if p]
                found.append({"input": where, "sample": sample,
                              "sample_id": ids[sample] if ids and sample < len(ids) else None,
                              "features": feats,
                              "value": "nan" if bool(torch.isnan(first)) else "inf"})
    return found


def _embedding_positions(inputs, output, limit=8):
    """Of an embedding whose output is non-finite: [{"sample", "position", "index"}] of the
    rows that are (sample = the index in the first dimension, position = in the second, or
    None for a (B,) input; index = the embedding's index there), at most `limit`."""
    idx = inputs[0] if inputs and isinstance(inputs[0], torch.Tensor) else None
    if idx is None or not isinstance(output, torch.Tensor) or output.dim() != idx.dim() + 1:
        return []
    rows = torch.nonzero(~torch.isfinite(output.detach()).all(-1))[:limit].tolist()
    return [{"sample": r[0], "position": r[1] if len(r) > 1 else None,
             "index": int(idx[tuple(r)])} for r in rows if r]


def class_name(module):
    """The name of module's own class: FSDP2's fully_shard (and replicate) give a module a
    class made on the fly, FSDP<Name> with bases (FSDPModule, <Name>); that is looked through.
    """
    cls = type(module)
    while len(cls.__bases__) == 2 and cls.__bases__[0].__module__.startswith(
            "torch.distributed") and cls.__name__.endswith(cls.__bases__[1].__name__) and \
            cls.__name__ != cls.__bases__[1].__name__:
        cls = cls.__bases__[1]
    return cls.__name__


def unwrap(model):
    """The module a DistributedDataParallel (or DataParallel) wrapper holds, else model."""
    inner = getattr(model, "module", None)
    return inner if isinstance(inner, torch.nn.Module) else model


class Tracer:
    """Keeps the last forward's inputs of `model` and localises a non-finite value.

    Not thread-safe: call it from the training thread.
    """

    def __init__(self, model):
        self.root = unwrap(model)
        self.root_name = class_name(self.root)
        self.args = None
        self.kwargs = {}
        self.cpu_rng = None
        self.cuda_rng = None
        self.on_output = None  # callable(output) -> None, called after each forward of root
        self.hook_s = 0.0      # time spent in the hooks (the tracer's per-step cost)
        self._replaying = False
        self._uses_cuda = any(p.is_cuda for p in self.root.parameters())
        try:
            self._handle = self.root.register_forward_pre_hook(self._capture_kw, with_kwargs=True)
        except TypeError:  # torch < 2.0: positional inputs only
            self._handle = self.root.register_forward_pre_hook(self._capture)
        self._out_handle = None

    def check_outputs(self, callback):
        """Calls callback(output) after a forward of the root (not a replay) whose output holds
        a NaN."""
        self.on_output = callback
        self._out_handle = self.root.register_forward_hook(self._output)

    def close(self):
        self._handle.remove()
        if self._out_handle is not None:
            self._out_handle.remove()
        self.args = None
        self.kwargs = {}

    def _capture(self, module, args):
        if self._replaying:
            return
        t0 = time.perf_counter()
        self.args = args
        self.cpu_rng = torch.get_rng_state()
        if self._uses_cuda:
            self.cuda_rng = torch.cuda.get_rng_state()
        self.hook_s += time.perf_counter() - t0

    def _capture_kw(self, module, args, kwargs):
        self._capture(module, args)
        if not self._replaying:
            self.kwargs = kwargs

    def _output(self, module, args, output):
        if self._replaying or self.on_output is None:
            return
        t0 = time.perf_counter()
        # NaN only: an output may hold -inf by design (log-probabilities of masked classes)
        # with a finite loss; Inf is left to the loss and gradient checks.
        finite = _probably_finite(output) or not _any_nan(output)
        self.hook_s += time.perf_counter() - t0
        if not finite:
            self.on_output(output)

    def nonfinite_inputs(self, ids):
        """The captured inputs' NaN/Inf per sample (see _nonfinite_inputs); [] when finite."""
        if self.args is None:
            return []
        return _nonfinite_inputs(self.args, self.kwargs, ids)

    # ---- detailed mode ----
    def replay(self):
        """One forward pass from the captured inputs with a finiteness probe on every module.

        Returns dict(culprit=name or None, order=[module names in completion order],
        max_abs=largest finite activation before the culprit, error=str or None,
        first_bad=the first module, in completion order, whose output is non-finite, whatever
        its input, or None).
        """
        names = {m: (n or self.root_name) for n, m in self.root.named_modules()}
        found = {"culprit": None, "order": [], "max_abs": 0.0, "error": None,
                 "embedding": False, "first_bad": None}

        def probe(module, inputs, output):
            name = names.get(module, class_name(module))
            found["order"].append(name)
            if found["culprit"] is not None:
                return
            if not _all_finite(output):
                if found["first_bad"] is None:
                    found["first_bad"] = name
                if _all_finite(inputs):
                    found["culprit"] = name
                    found["embedding"] = isinstance(module, torch.nn.Embedding)
                    if found["embedding"]:
                        found["positions"] = _embedding_positions(inputs, output)
            else:
                found["max_abs"] = max(found["max_abs"], _max_abs(output))

        if self.args is None:
            found["error"] = "no forward pass was seen"
            return found
        handles = [m.register_forward_hook(probe) for m in names]
        buffers = [(b, b.detach().clone()) for b in self.root.buffers()]
        cpu_rng = torch.get_rng_state()
        cuda_rng = torch.cuda.get_rng_state() if self.cuda_rng is not None else None
        self._replaying = True
        try:
            torch.set_rng_state(self.cpu_rng)
            if self.cuda_rng is not None:
                torch.cuda.set_rng_state(self.cuda_rng)
            with torch.no_grad():
                self.root(*self.args, **self.kwargs)
        except Exception as e:  # noqa: BLE001 - a replay that fails says so in the record
            found["error"] = "%s: %s" % (type(e).__name__, e)
        finally:
            self._replaying = False
            for h in handles:
                h.remove()
            with torch.no_grad():
                for b, saved in buffers:
                    b.copy_(saved)
            torch.set_rng_state(cpu_rng)
            if cuda_rng is not None:
                torch.cuda.set_rng_state(cuda_rng)
        return found

    def nonfinite_weights(self):
        """Name of the first parameter (registration order) whose value is non-finite, or ""."""
        for name, p in self.root.named_parameters():
            p = _dt.local(p)  # FSDP2: this rank's shard
            if p.is_floating_point() and not bool(torch.isfinite(p).all()):
                return name
        return ""

    def first_nonfinite_grad(self, order):
        """(module, parameter) of the first non-finite gradient in backward order, or ("", "")."""
        modules = dict(self.root.named_modules())
        seen = set()
        ranked = []
        for name in reversed(order):  # backward runs the forward's modules in reverse
            m = modules.get(name if name != self.root_name else "")
            if m is None or name in seen:
                continue
            seen.add(name)
            for pname, p in m.named_parameters(recurse=False):
                ranked.append(((name + "." if name != self.root_name else "") + pname, p))
        listed = {id(p) for _, p in ranked}
        ranked += [(n, p) for n, p in reversed(list(self.root.named_parameters()))
                   if id(p) not in listed]
        for pname, p in ranked:
            g = _dt.local(p.grad) if p.grad is not None else None  # FSDP2: this rank's shard
            if g is not None and g.is_floating_point() and not bool(torch.isfinite(g).all()):
                return (pname.rsplit(".", 1)[0] if "." in pname else self.root_name), pname
        return "", ""


def not_replayed():
    """What Tracer.replay returns, for a step that is not replayed."""
    return {"culprit": None, "order": [], "max_abs": 0.0, "error": None, "embedding": False,
            "first_bad": None}


def classify(ev):
    """(class, fix) for evidence ev (the tracer's dict) by the trainer's rules.

    ev["lr_history"] holds (step, lr) of the steps before ev["step"]; this step's ev["lr"] is
    appended, as the trainer does, so an LR jump at this step counts.
    """
    history = [(int(s), float(lr)) for s, lr in ev.get("lr_history", [])]
    history.append((int(ev["step"]), float(ev.get("lr", 0.0))))
    return _core.classify_nonfinite(
        phase=ev["phase"], module=ev.get("module") or "",
        # Only a replay that compared two runs says "reproducible" or not (the backward is
        # never replayed: reproducible None).
        replayed=bool(ev.get("replayed")) and ev.get("reproducible") is not None,
        reproducible=bool(ev.get("reproducible")),
        embedding_output=bool(ev.get("embedding")),
        input_nonfinite=bool(ev.get("bad_inputs")),
        weights_nonfinite=bool(ev.get("weights_nonfinite")), fp16=bool(ev.get("fp16")),
        max_abs_activation=float(ev.get("max_abs_activation", 0.0)),
        lr=float(ev.get("lr", 0.0)), lr_history=history,
        grad_norms=[float(n) for n in ev.get("grad_norms", []) if n is not None])


def _where_inputs(bad):
    """"sample 3 (id 17), features [5] of args[0] is NaN; 2 more samples": the first entry
    of a record's bad_inputs, and how many more samples there are."""
    b = bad[0]
    who = "sample %d%s" % (b["sample"], "" if b.get("sample_id") is None
                           else " (id %s)" % b["sample_id"])
    feats = ", %s %s" % ("feature" if len(b["features"]) == 1 else "features",
                         ", ".join(str(f) for f in b["features"])) if b["features"] else ""
    more = len({(x["input"], x["sample"]) for x in bad}) - 1
    return "%s%s of input %s is %s%s" % (
        who, feats, b["input"], "NaN" if b["value"] == "nan" else "Inf",
        "; %d more sample%s" % (more, "s" if more > 1 else "") if more > 0 else "")


def _replay_words(rec):
    """What was replayed, in words that cannot contradict the fix: "replayed twice,
    reproducible", "replayed twice, not reproducible", "forward replayed and finite, backward
    not replayed" or "not replayed"."""
    if rec["reproducible"] is True:
        return "replayed twice, reproducible"
    if rec["reproducible"] is False:
        return "replayed twice, not reproducible"
    if rec.get("replayed") and rec["phase"] == "backward":
        return "forward replayed and finite, backward not replayed"
    return "not replayed"


def sentence(rec):
    """One line as the trainer prints it: what turned non-finite, where, and the fix."""
    module = ("module " + rec["module"]) if rec["module"] else "an unknown module"
    phase = rec["phase"]
    if rec.get("bad_inputs"):
        what = "the model's input was already non-finite: %s%s" % (
            _where_inputs(rec["bad_inputs"]),
            " (%s is the first to output it)" % module if rec["module"] else "")
    elif phase == "forward":
        what = "the forward output of %s turned non-finite from finite input" % module
        pos = rec.get("embedding_positions")
        if pos:
            what += " at sample %d%s, index %d%s" % (
                pos[0]["sample"], "" if pos[0]["position"] is None else
                ", position %d" % pos[0]["position"], pos[0]["index"],
                " (and %d more)" % (len(pos) - 1) if len(pos) > 1 else "")
    elif phase == "backward":
        if rec.get("source_ranks"):
            what = ("the forward was finite on this rank and the gradients non-finite after "
                    "their reduction: they came from rank %s, whose forward turned non-finite"
                    % ", ".join(str(r) for r in rec["source_ranks"]))
        elif rec.get("from_other_rank"):
            what = ("the gradients were finite on this rank before the all-reduce and "
                    "non-finite after it (another rank's gradients)")
        else:
            what = "the backward gradient of %s%s turned non-finite" % (
                module, " (parameter %s)" % rec["parameter"] if rec["parameter"] else "")
    elif phase == "loss":
        what = "the loss turned non-finite from finite model output"
    else:
        what = "the optimizer step made %s non-finite" % module
    return "non-finite values at step %d on rank %d: %s (phase %s, %s, class %s); fix: %s" % (
        rec["step"], rec["rank"], what, phase, _replay_words(rec), rec["class"], rec["fix"])
