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
The record and its `class`/`fix` follow docs/formats.md "Non-finite record" and the rules of
src/train/anomaly.cc ClassifyNonfinite (the subset that applies to a user's model).
"""
import math

import torch

# Thresholds of src/train/anomaly.cc.
_FP16_MAX = 65504.0
_LR_JUMP = 5.0
_GRAD_NORM_JUMP = 10.0
_DIVERGED_ACTIVATION = 1e10
_MAX_SAMPLES = 64


def _tensors(value):
    """Every tensor inside value (tensors, tuples, lists, dicts, dataclass-like outputs)."""
    if isinstance(value, torch.Tensor):
        yield value
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
        self.root_name = type(self.root).__name__
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
            name = names.get(module, type(module).__name__)
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
            g = p.grad
            if g is not None and g.is_floating_point() and not bool(torch.isfinite(g).all()):
                return (pname.rsplit(".", 1)[0] if "." in pname else self.root_name), pname
        return "", ""


def classify(ev):
    """(class, fix) for evidence ev (a dict), as src/train/anomaly.cc ClassifyNonfinite."""
    where = ev.get("module") or "the model"
    if ev.get("replayed") and not ev.get("reproducible"):
        return ("transient",
                "the same batch from the same state did not turn non-finite again, so the cause "
                "is random (hardware, a race, uninitialised memory): run `trainscope selftest "
                "device` and resume from the last checkpoint")
    if ev.get("weights_nonfinite") and ev["phase"] != "optimizer":
        return ("nonfinite_weight",
                "the weights of %s were already non-finite before this step: resume from the "
                "last good checkpoint and check what wrote them (a checkpoint load, memory "
                "errors)" % where)
    if ev["phase"] == "forward" and ev.get("embedding"):
        return ("bad_data",
                "the step's input embeddings are non-finite with finite weights: drop or repair "
                "the samples listed under \"samples\" and check the data pipeline")
    if ev.get("fp16") and ev.get("max_abs_activation", 0) > _FP16_MAX:
        return ("fp16_overflow",
                "activations of %s reach %.3g, beyond fp16's 65504: train in bf16, or keep %s "
                "in fp32" % (where, ev["max_abs_activation"], where))
    lrs = ev.get("lr_history", [])
    for i in range(len(lrs) - 1):
        if lrs[i][1] > 0 and lrs[i + 1][1] / lrs[i][1] >= _LR_JUMP:
            return ("lr_too_high",
                    "the learning rate jumped %.3gx at step %d: lower the learning rate or "
                    "lengthen the warm-up (check the LR schedule)"
                    % (lrs[i + 1][1] / lrs[i][1], lrs[i + 1][0]))
    norms = [n for n in ev.get("grad_norms", []) if n is not None and math.isfinite(n)]
    if len(norms) >= 3:
        prev = sorted(norms[:-1])
        mid = len(prev) // 2
        med = prev[mid] if len(prev) % 2 else 0.5 * (prev[mid - 1] + prev[mid])
        if med > 0 and norms[-1] / med >= _GRAD_NORM_JUMP:
            return ("exploding_gradients",
                    "the gradient norm rose %.3gx over the recent median before this step: "
                    "clip harder or lower the learning rate" % (norms[-1] / med))
    if not ev.get("fp16") and ev.get("max_abs_activation", 0) >= _DIVERGED_ACTIVATION:
        return ("lr_too_high",
                "activations reached %.3g before turning non-finite, so the weights diverged: "
                "lower the learning rate (%.3g at this step) or clip harder"
                % (ev["max_abs_activation"], ev.get("lr", 0)))
    if ev["phase"] == "optimizer":
        return ("lr_too_high",
                "finite gradients gave non-finite weights, so the update itself overflowed: "
                "lower the learning rate (and check the optimizer's eps is not tiny)")
    if ev["phase"] == "loss":
        return ("operator",
                "the model's output is finite but the loss is not: check the targets (ids "
                "outside the vocabulary) and the loss function")
    return ("operator",
            "an operation in %s turns finite %s into NaN/Inf on this batch, reproducibly: "
            "inspect it (division, log, sqrt, softmax of an all -inf row); with fp16, try bf16 "
            "or a larger initial loss scale"
            % (where, "gradients" if ev["phase"] == "backward" else "input"))


def sentence(rec):
    """One line as the trainer prints it: what turned non-finite, where, and the fix."""
    module = ("module " + rec["module"]) if rec["module"] else "an unknown module"
    phase = rec["phase"]
    if phase == "forward":
        what = "the forward output of %s turned non-finite from finite input" % module
    elif phase == "backward":
        if rec.get("from_other_rank"):
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
