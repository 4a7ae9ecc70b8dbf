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


def _max_abs(value):
    m = 0.0
    for t in _tensors(value):
        if t.is_floating_point() and t.numel():
            m = max(m, float(t.detach().abs().max()))
    return m


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
        self._uses_cuda = any(p.is_cuda for p in self.root.parameters())
        try:
            self._handle = self.root.register_forward_pre_hook(self._capture_kw, with_kwargs=True)
        except TypeError:  # torch < 2.0: positional inputs only
            self._handle = self.root.register_forward_pre_hook(self._capture)

    def close(self):
        self._handle.remove()
        self.args = None
        self.kwargs = {}

    def _capture(self, module, args):
        self.args = args
        self.cpu_rng = torch.get_rng_state()
        if self._uses_cuda:
            self.cuda_rng = torch.cuda.get_rng_state()

    def _capture_kw(self, module, args, kwargs):
        self._capture(module, args)
        self.kwargs = kwargs

    # ---- detailed mode ----
    def replay(self):
        """One forward pass from the captured inputs with a finiteness probe on every module.

        Returns dict(culprit=name or None, order=[module names in completion order],
        max_abs=largest finite activation before the culprit, error=str or None).
        """
        names = {m: (n or self.root_name) for n, m in self.root.named_modules()}
        found = {"culprit": None, "order": [], "max_abs": 0.0, "error": None,
                 "embedding": False}

        def probe(module, inputs, output):
            name = names.get(module, class_name(module))
            found["order"].append(name)
            if found["culprit"] is not None:
                return
            if not _all_finite(output):
                if _all_finite(inputs):
                    found["culprit"] = name
                    found["embedding"] = isinstance(module, torch.nn.Embedding)
            else:
                found["max_abs"] = max(found["max_abs"], _max_abs(output))

        if self.args is None:
            found["error"] = "no forward pass was seen"
            return found
        handles = [m.register_forward_hook(probe) for m in names]
        buffers = [(b, b.detach().clone()) for b in self.root.buffers()]
        cpu_rng = torch.get_rng_state()
        cuda_rng = torch.cuda.get_rng_state() if self.cuda_rng is not None else None
        try:
            torch.set_rng_state(self.cpu_rng)
            if self.cuda_rng is not None:
                torch.cuda.set_rng_state(self.cuda_rng)
            with torch.no_grad():
                self.root(*self.args, **self.kwargs)
        except Exception as e:  # noqa: BLE001 - a replay that fails says so in the record
            found["error"] = "%s: %s" % (type(e).__name__, e)
        finally:
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
    return {"culprit": None, "order": [], "max_abs": 0.0, "error": None, "embedding": False}


def classify(ev):
    """(class, fix) for evidence ev (the tracer's dict) by the trainer's rules.

    ev["lr_history"] holds (step, lr) of the steps before ev["step"]; this step's ev["lr"] is
    appended, as the trainer does, so an LR jump at this step counts.
    """
    history = [(int(s), float(lr)) for s, lr in ev.get("lr_history", [])]
    history.append((int(ev["step"]), float(ev.get("lr", 0.0))))
    return _core.classify_nonfinite(
        phase=ev["phase"], module=ev.get("module") or "",
        replayed=bool(ev.get("replayed")), reproducible=bool(ev.get("reproducible")),
        embedding_output=bool(ev.get("embedding")),
        weights_nonfinite=bool(ev.get("weights_nonfinite")), fp16=bool(ev.get("fp16")),
        max_abs_activation=float(ev.get("max_abs_activation", 0.0)),
        lr=float(ev.get("lr", 0.0)), lr_history=history,
        grad_norms=[float(n) for n in ev.get("grad_norms", []) if n is not None])


def sentence(rec):
    """One line as the trainer prints it: what turned non-finite, where, and the fix."""
    module = ("module " + rec["module"]) if rec["module"] else "an unknown module"
    phase = rec["phase"]
    if phase == "forward":
        what = "the forward output of %s turned non-finite from finite input" % module
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
    repro = {None: "not replayed", True: "reproducible", False: "not reproducible"}[
        rec["reproducible"]]
    return "non-finite values at step %d on rank %d: %s (phase %s, %s, class %s); fix: %s" % (
        rec["step"], rec["rank"], what, phase, repro, rec["class"], rec["fix"])
