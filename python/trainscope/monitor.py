"""`trainscope.watch`: step and phase timers, metrics and the NaN tracer in a user's own loop.

Writes `<run_dir>/train/metrics.rank<R>.jsonl` in the trainer's format (docs/formats.md,
"Run directory": format trainscope.train_metrics v1; header, step, layer_norms, nonfinite,
end records), so `trainscope diagnose`, `report` and `trace` read a user's run as they read
`trainscope train`'s.
"""
import contextlib
import hashlib
import json
import math
import os
import socket
import struct
import sys
import time
import types
import warnings

import torch

from . import _core, _ddp, _dtensor as _dt, _util
from ._errors import Error, NonFiniteError
from . import nonfinite as _nf

FORMAT = _core.FORMATS["train_metrics"]
VERSION = _core.FORMAT_VERSIONS[FORMAT]
_PHASES = ("data_wait", "h2d", "forward", "backward", "comm_wait", "optimizer")
_PHASE_ALIASES = {"data": "data_wait"}
_GRAD_NORM_HISTORY = 16
_DATA_ORDER_TAG = b"trainscope.python.data_order.v1"


def _precision(params):
    dtypes = {p.dtype for p in params}
    if torch.bfloat16 in dtypes:
        return "bf16"
    if torch.float16 in dtypes:
        return "fp16"
    return "fp32"


def _host_rss_bytes():
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _union_ms(intervals):
    """Total length of the union of (start, end) intervals, in ms."""
    total, end = 0.0, None
    for a, b in sorted(intervals):
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total * 1e3


def _drop_cut_last_line(path):
    """Truncates a last line a kill cut short (no newline), so an appended header starts a line."""
    try:
        with open(path, "rb+") as f:
            data = f.read()
            keep = data.rfind(b"\n") + 1
            if keep != len(data):
                f.truncate(keep)
    except FileNotFoundError:
        pass


class Monitor:
    """Times steps and phases of a training loop and writes its metrics (see `watch`).

    Not thread-safe: use it from the training thread. Every method raises `trainscope.Error`
    once the monitor is closed; `close()` may be called again.
    """

    def __init__(self, model, optimizer=None, run_dir=None, every=1, layer_norms_every=50,
                 nonfinite=True, config=None, start_step=0, tensorboard=True, checksum_every=0,
                 checksum_group=None):
        if not isinstance(model, torch.nn.Module):
            raise Error("trainscope.watch: model is a %s, not a torch.nn.Module."
                        % type(model).__name__)
        self._model = model
        inner = _nf.unwrap(model)
        self._named = [(n, p) for n, p in inner.named_parameters() if p.requires_grad]
        if not self._named:
            raise Error("trainscope.watch: the model (%s) has no trainable parameters, so there "
                        "are no gradients to watch." % _nf.class_name(inner))
        if int(every) < 1:
            raise Error("trainscope.watch: every must be a positive number of steps, not %r."
                        % (every,))
        self._every = int(every)
        self._layer_norms_every = int(layer_norms_every)
        self._optimizer = optimizer
        self.rank, self.world_size = _util.rank_and_world()
        self.run_dir = _util.resolve_run_dir(run_dir)
        _util.lock_run_dir(self.run_dir)  # one writer per run directory
        self.metrics_path = _util.metrics_path(self.run_dir, self.rank)
        self._params = [p for _, p in self._named]
        self._sharded = _dt.mesh_of(self._params) is not None  # DTensor parameters: FSDP2
        if int(checksum_every) < 0:
            raise Error("trainscope.watch: checksum_every must be >= 0 steps, not %r."
                        % (checksum_every,))
        # Replicas only: FSDP2's shards differ across ranks by design.
        self._replicas = None
        if int(checksum_every) > 0 and self.world_size > 1 and not self._sharded:
            from .replicas import ReplicaCheck
            self._replicas = ReplicaCheck(self._named, checksum_every, checksum_group)
        self._device = self._params[0].device
        self._start_s = time.time()
        self._closed = False
        if int(start_step) < 0:
            raise Error("trainscope.watch: start_step must be >= 0, not %r." % (start_step,))
        self._start_step = int(start_step)
        self._step = self._start_step  # steps completed (a resumed run counts from its checkpoint)
        self._in_step = False
        self._hook_state = _ddp.install(model)
        self._tracer = _nf.Tracer(model) if nonfinite else None
        if self._hook_state is not None and nonfinite:
            self._hook_state.check_finite = True
        if self._tracer is not None and self._hook_state is None and not self._sharded and \
                self._device.type == "cpu":
            # On CPU, testing the model's output costs no device sync: a non-finite forward
            # raises from the forward itself (where the traceback shows it), not from
            # optimizer.step(). With DDP/FSDP2 the ranks must reach the gradient check together;
            # on a GPU the test would sync every step: there the gradient check finds it.
            self._tracer.check_outputs(self._forward_nonfinite)
        self._check_s = 0.0        # the gradient check's own time (norms, non-finite test)
        self._loop_s = 0.0         # the steps' time
        self._grad_norms = []      # recent finite global grad norms
        self._lrs = []             # (step, lr) recent
        self._data_hash = hashlib.blake2b(_DATA_ORDER_TAG, digest_size=8)
        self._opt_handle = None
        self._opt_patched = False
        self._tb = None  # the TensorBoard writer (tensorboard=True)
        if optimizer is not None:
            self._wrap_optimizer(optimizer)
        os.makedirs(os.path.dirname(self.metrics_path), exist_ok=True)
        if self._start_step > 0:  # a resumed run appends a segment, as `train --resume` does
            _drop_cut_last_line(self.metrics_path)
            self._file = open(self.metrics_path, "a", encoding="utf-8")
        else:
            self._file = open(self.metrics_path, "w", encoding="utf-8")
        header = self._header(config)
        if self._start_step > 0:
            header["resumed_from_step"] = self._start_step
            header["resumed_from"] = ""
        self._write(header)
        if tensorboard:  # train/tb/rank<R>/, as `trainscope train` writes (a new file each run)
            try:
                self._tb = _core.TensorBoardWriter(
                    _util.tensorboard_dir(self.run_dir, self.rank))
            except Error as e:
                self._file.close()
                self._release()
                raise Error("trainscope.watch: cannot write the TensorBoard files: %s "
                            "(tensorboard=False turns them off)" % e) from None

    # ---- public API ----
    @contextlib.contextmanager
    def step(self, tokens=0, sample_ids=None):
        """Times one optimizer step: `with mon.step(tokens=N):`. tokens: this rank's tokens in
        the step (the record holds all ranks': N x world size). sample_ids: the ids of the
        step's samples on this rank (ints, a tensor or a list), folded into the rank's
        data-order hash and kept for a non-finite record."""
        self._check_open("step")
        if self._in_step:
            raise Error("trainscope: Monitor.step() entered again inside a step; steps do not "
                        "nest.")
        self._begin_step(tokens, sample_ids)
        try:
            yield self
        except BaseException as e:
            self._in_step = False
            self._fail(e)
            raise
        self._end_step()

    @contextlib.contextmanager
    def phase(self, name):
        """Times a phase of the current step: "data" (= data_wait), "h2d", "forward",
        "backward", "optimizer", or any other name (kept under phases_ms too)."""
        self._check_open("phase")
        key = _PHASE_ALIASES.get(name, name)
        t0 = time.perf_counter()
        try:
            yield
        finally:
            if self._in_step:
                self._phases[key] = self._phases.get(key, 0.0) + (time.perf_counter() - t0) * 1e3

    def log(self, loss=None, step=None, **scalars):
        """Records scalars: floats, ints, 0-dim tensors or numpy scalars (a non-finite one is
        written as null); anything else is kept as it is but not drawn.

        Inside `with mon.step():` (step= omitted, or the current step's number): the step's
        loss (checked for NaN/Inf) and other scalars, written with its step record under
        "scalars" (`lr=` overrides the optimizer's). After or between steps, or with step= of
        another step: the scalars are written at once as a `scalars` record of that step
        (default: the last completed one), e.g. an evaluation: mon.log(step=s, val_loss=v).
        Raises trainscope.Error for loss= outside its step, and for a negative step."""
        self._check_open("log")
        values = {k: _scalar_value(v) for k, v in scalars.items()}
        if not self._in_step or (step is not None and int(step) != self._step + 1):
            self._log_between_steps(loss, step, values)
            return
        self._scalars.update(values)
        if loss is not None:
            value = float(loss.detach()) if isinstance(loss, torch.Tensor) else float(loss)
            self._loss = value
            if self._tracer is not None and not math.isfinite(value):
                self._nonfinite("loss")

    def _log_between_steps(self, loss, step, values):
        """mon.log outside its step: a `scalars` record (and TensorBoard event) at once."""
        if loss is not None:
            raise Error("trainscope: Monitor.log(loss=...) was called outside `with "
                        "mon.step():` (or with step= of another step); log the training loss "
                        "inside the step it belongs to, other values with step=, e.g. "
                        "mon.log(step=s, val_loss=v).")
        step = self._step if step is None else int(step)
        if step < 0:
            raise Error("trainscope: Monitor.log(step=%d): steps are numbered from 1." % step)
        if not values:
            return
        self._write({"type": "scalars", "step": step, "scalars": values})
        self._tb_write(step, _drawable(values))

    def _tb_write(self, step, pairs):
        if self._tb is not None and pairs:
            self._tb.add_scalars(step, int(time.time() * 1e6), pairs)

    def close(self, reason="done"):
        """Ends the metrics file (an `end` record) and removes the hooks. Idempotent."""
        if self._closed:
            return
        if self._tracer is not None and not self._file.closed:
            # The per-step checks' own time over the steps' (the trainer's record): the
            # gradient norms and the non-finite test, which the grad_norm field needs anyway.
            # tracer_ms: the tracer's own hooks (what nonfinite=False saves).
            tracer_s = self._tracer.hook_s
            self._write({"type": "nonfinite_checks", "check_ms": self._check_s * 1e3,
                         "loop_ms": self._loop_s * 1e3,
                         "fraction": self._check_s / self._loop_s if self._loop_s > 0 else 0.0,
                         "tracer_ms": tracer_s * 1e3,
                         "tracer_fraction": tracer_s / self._loop_s if self._loop_s > 0 else 0.0})
        self._end_record(reason)
        self._release()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if not self._closed:
            self._fail(exc) if exc is not None else self.close()
        return False

    @property
    def closed(self):
        return self._closed

    # ---- steps ----
    def _begin_step(self, tokens, sample_ids):
        self._in_step = True
        self._t0 = time.perf_counter()
        self._phases = {}
        self._tokens = int(tokens)
        self._loss = None
        self._scalars = {}
        self._grads_checked = False
        self._grad_norm = None
        self._layers = None
        self._samples = []
        recorder = sys.modules.get("trainscope.distributed")  # loaded: record() may be on
        if recorder is not None:
            recorder.set_step(self._step + 1)  # the flight recorder's entries carry the step
        if self._hook_state is not None:
            self._hook_state.take()
        if sample_ids is not None:
            ids = sample_ids.tolist() if isinstance(sample_ids, torch.Tensor) else list(sample_ids)
            ids = [int(i) for i in ids]
            self._data_hash.update(struct.pack("<%dq" % len(ids), *ids))
            self._samples = ids[:_nf._MAX_SAMPLES]

    def _end_step(self):
        step = self._step + 1
        if not self._grads_checked:
            self._check_grads()
        self._in_step = False
        step_ms = (time.perf_counter() - self._t0) * 1e3
        self._loop_s += step_ms / 1e3
        comm_ms = comm_wait = 0.0
        if self._hook_state is not None:
            intervals, _ = self._hook_state.take()
            if intervals:
                comm_ms = _union_ms(intervals)
                comm_wait = max(0.0, max(b for _, b in intervals) - max(a for a, _ in intervals)) * 1e3
        phases = {k: 0.0 for k in _PHASES}
        phases.update(self._phases)
        if comm_wait > 0:  # DDP blocks in backward until the last bucket is reduced
            phases["comm_wait"] += comm_wait
            phases["backward"] = max(0.0, phases["backward"] - comm_wait)
        lr = self._scalars.get("lr")
        if not isinstance(lr, (int, float)) or isinstance(lr, bool):
            lr = self._optimizer_lr()  # not given, or not finite (null)
        self._lrs = (self._lrs + [(step, float(lr))])[-_GRAD_NORM_HISTORY:]
        self._step = step
        tokens = self._tokens * self.world_size
        if step % self._every == 0 or step == 1:
            rec = {"type": "step", "step": step,
                   "loss": self._loss if self._loss is not None and math.isfinite(self._loss) else None,
                   "lr": float(lr),
                   "grad_norm": self._grad_norm if self._grad_norm is not None and
                   math.isfinite(self._grad_norm) else None,
                   "tokens": tokens, "step_ms": step_ms,
                   "tokens_per_s": tokens / (step_ms / 1e3) if step_ms > 0 else 0.0,
                   "phases_ms": phases, "comm_ms": comm_ms,
                   "host_rss_bytes": _host_rss_bytes()}
            rec.update(self._device_memory())
            if self._samples:
                rec["data_order_hash"] = self._data_hash.hexdigest()
            if self._scalars:
                rec["scalars"] = {k: v for k, v in self._scalars.items() if k != "lr"}
            self._write(rec)
            self._tb_write(step, _step_tags(rec))
        if self._layers is not None:
            self._write({"type": "layer_norms", "step": step, "layers": self._layers})
        if self._replicas is not None and self._replicas.due(step):
            diverged = self._replicas.check(step)
            if diverged is not None:
                self._write(diverged)
                warnings.warn("trainscope: " + self._replicas.sentence(diverged), RuntimeWarning,
                              stacklevel=4)  # the user's `with mon.step()` line

    @property
    def replica_divergence(self):
        """The first `replica_divergence` record (watch(checksum_every=N)), or None."""
        return self._replicas.first_divergence if self._replicas is not None else None

    def _optimizer_lr(self):
        if self._optimizer is None or not self._optimizer.param_groups:
            return 0.0
        return float(self._optimizer.param_groups[0].get("lr", 0.0))

    def _device_memory(self):
        if self._device.type == "cuda":
            return {"device_mem_allocated_bytes": torch.cuda.memory_allocated(self._device),
                    "device_mem_peak_bytes": torch.cuda.max_memory_allocated(self._device)}
        return {"device_mem_allocated_bytes": None, "device_mem_peak_bytes": None}

    # ---- gradients: norm, per-layer norms, the cheap non-finite check ----
    def _wrap_optimizer(self, opt):
        pre = getattr(opt, "register_step_pre_hook", None)
        if pre is not None:  # torch >= 2.0
            self._opt_handle = pre(lambda o, a, k: self._before_optimizer_step())
            return
        previous = opt.step  # the class's bound method, or a scheduler's wrapper
        self._opt_previous = opt.__dict__.get("step")
        monitor = self

        def step(self_opt, *args, **kwargs):
            monitor._before_optimizer_step()
            return previous(*args, **kwargs)

        if getattr(previous, "_with_counter", False):
            step._with_counter = True  # an LR scheduler's wrapper: keep its mark (no warning)
        opt.step = types.MethodType(step, opt)  # a bound method, so LR schedulers can wrap it
        self._opt_patched = True

    def _before_optimizer_step(self):
        if self._closed or not self._in_step or self._grads_checked:
            return
        self._check_grads()

    def _check_grads(self):
        t0 = time.perf_counter()
        try:
            self._measure_grads()
        finally:
            self._check_s += time.perf_counter() - t0

    def _measure_grads(self):
        self._grads_checked = True
        step = self._step + 1
        pairs = [(n, p) for n, p in self._named if p.grad is not None]
        if not pairs:
            return
        # With sharded (DTensor) gradients, as FSDP2's, the norms are of the full gradients:
        # one all-reduce over the mesh, the same value on every rank, so every rank enters
        # the detailed mode below together (its replays communicate).
        grads = [p.grad.detach() for _, p in pairs]
        norms = _dt.norms(grads)
        dev = norms[0].device
        stacked = torch.stack([n if n.device == dev else n.to(dev) for n in norms]).float()
        total = float(torch.linalg.vector_norm(stacked))
        self._grad_norm = total
        due = self._layer_norms_every > 0 and (step == 1 or step % self._layer_norms_every == 0)
        if due:
            wn = _dt.norms([p.detach() for _, p in pairs])
            wl = torch.stack([n.to(dev) for n in wn]).float().tolist()
            gl = stacked.tolist()
            fin = lambda v: v if math.isfinite(v) else None  # noqa: E731
            self._layers = [{"name": n, "weight_norm": fin(w), "grad_norm": fin(g)}
                            for (n, _), w, g in zip(pairs, wl, gl)]
        if math.isfinite(total):
            self._grad_norms = (self._grad_norms + [total])[-_GRAD_NORM_HISTORY:]
        elif self._tracer is not None:
            self._nonfinite("grads")

    # ---- detailed mode ----
    def _forward_nonfinite(self, output):
        """The tracer's forward hook saw a non-finite model output inside a step."""
        if self._in_step and not self._closed:
            self._nonfinite("forward")

    def _nonfinite(self, event):
        """Localises a non-finite model output ("forward"), loss ("loss") or gradient
        ("grads"), writes the `nonfinite` record and the `end` record, closes the monitor and
        raises NonFiniteError.

        By data flow: a module whose output is non-finite from finite input is the culprit
        (phase forward, class by the rules); else, if the model's own inputs are non-finite,
        it is the data (class bad_data, the samples and features named); else the loss, then
        the backward's first non-finite gradient."""
        step = self._step + 1
        tr = self._tracer
        weights_bad = tr.nonfinite_weights()
        bad_inputs = tr.nonfinite_inputs(self._samples)
        # With sharded parameters (FSDP2) a replay all-gathers them, which needs every rank
        # of the mesh: a gradient check brings them all here at once, a loss logged by this
        # rank alone does not, so that is reported without a replay.
        replay = event != "loss" or not self._sharded
        runs = [tr.replay(), tr.replay()] if replay else [_nf.not_replayed()] * 2
        first = runs[0]
        ev = {"step": step, "rank": self.rank, "parameter": "", "module": "",
              "replayed": replay, "reproducible": None,
              "fp16": _precision(self._params) == "fp16",
              "max_abs_activation": first["max_abs"], "lr": self._optimizer_lr(),
              "grad_norms": list(self._grad_norms), "lr_history": list(self._lrs),
              "weights_nonfinite": bool(weights_bad), "embedding": first["embedding"]}
        from_other_rank = False
        sources = self._ranks_with_culprit(first["culprit"] is not None) \
            if event == "grads" else []
        if first["culprit"] is not None:
            ev.update(phase="forward", module=first["culprit"])
            ev["reproducible"] = runs[1]["culprit"] == first["culprit"]
        elif bad_inputs:
            ev["bad_inputs"] = bad_inputs
            ev.update(phase="forward" if first["first_bad"] or event == "forward" else
                      "loss" if event == "loss" else "backward",
                      module=first["first_bad"] or "")
            if replay and first["first_bad"]:
                ev["reproducible"] = runs[1]["first_bad"] == first["first_bad"]
            elif ev["phase"] == "backward":
                ev["module"], ev["parameter"] = tr.first_nonfinite_grad(first["order"])
        elif event == "forward":
            # The output was non-finite, but neither replay's was: not reproducible.
            ev.update(phase="forward", reproducible=False if first["error"] is None else None)
        elif event == "loss":
            ev.update(phase="loss", reproducible=True if first["error"] is None else None)
        else:
            ev.update(phase="backward")  # the forward was replayed (finite), not the backward
            local = self._hook_state.take()[1] if self._hook_state is not None else []
            if (local and all(bool(f) for f in local)) or sources:
                from_other_rank = True
            else:
                ev["module"], ev["parameter"] = tr.first_nonfinite_grad(first["order"])
        if weights_bad and not ev["module"]:
            ev["module"] = weights_bad.rsplit(".", 1)[0] if "." in weights_bad else ""
        cls, fix = _nf.classify(ev)
        rec = {"type": "nonfinite", "step": step, "rank": self.rank, "ranks": [self.rank],
               "phase": ev["phase"], "module": ev["module"], "parameter": ev["parameter"],
               "class": cls, "reproducible": ev["reproducible"] if ev["replayed"] else None,
               "replayed": ev["replayed"], "fix": fix,
               "samples": self._samples_of(bad_inputs),
               "max_abs_activation": ev["max_abs_activation"], "lr": ev["lr"],
               "grad_norms": ev["grad_norms"]}
        if from_other_rank:
            rec["from_other_rank"] = True
        if sources and first["culprit"] is None:
            rec["source_ranks"] = sources
        if bad_inputs:
            rec["bad_inputs"] = bad_inputs
        if first.get("positions") and ev["phase"] == "forward":
            rec["embedding_positions"] = first["positions"]
            ids = self._samples  # the samples whose rows are non-finite: ids, else indices
            rec["samples"] = list(dict.fromkeys(
                ids[p["sample"]] if p["sample"] < len(ids) else p["sample"]
                for p in first["positions"]))
        if first["error"]:
            rec["replay_error"] = first["error"]
        message = _nf.sentence(rec)
        self._write(rec)
        self._write({"type": "error", "step": step, "rank": self.rank, "message": message})
        self._in_step = False
        self._end_record("error", error=message)
        self._release()
        raise NonFiniteError(message, step, self.rank, rec["phase"], rec["module"],
                             rec["parameter"], rec)

    def _samples_of(self, bad_inputs):
        """The record's `samples`: with non-finite inputs, those samples (their ids from
        mon.step(sample_ids=...), else their index in the batch); else the step's ids."""
        if not bad_inputs:
            return self._samples
        out = []
        for b in bad_inputs:
            s = b["sample"] if b["sample_id"] is None else b["sample_id"]
            if s not in out:
                out.append(s)
        return out

    def _ranks_with_culprit(self, found):
        """With sharded (DTensor) gradients: the ranks whose forward replay found a culprit
        module, exchanged over the gradients' mesh; [] without DTensor gradients. Every rank
        of the mesh comes here at the same step, as the gradient norm that sent it here is
        the same on all of them. With sharded gradients a rank's own gradients are gone
        once reduced; whether its forward was finite is what tells that they came from
        another rank (DDP's comm hook checks the gradients themselves, before the
        all-reduce)."""
        mesh = _dt.mesh_of(p.grad for _, p in self._named if p.grad is not None)
        if mesh is None:
            return []
        return _dt.ranks_flagged(found, mesh)

    # ---- file and teardown ----
    def _header(self, config):
        cfg = {"source": "trainscope.watch", "torch": torch.__version__,
               "every": self._every, "layer_norms_every": self._layer_norms_every,
               "checksum_every": self._replicas.every if self._replicas is not None else 0,
               "nonfinite_checks": self._tracer is not None,
               "model": _nf.class_name(_nf.unwrap(self._model)),
               "optimizer": type(self._optimizer).__name__ if self._optimizer else ""}
        if config:
            cfg["user"] = config
        dev = self._device
        name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
        return {"type": "header", "format": FORMAT, "version": VERSION, "rank": self.rank,
                "world_size": self.world_size,
                "params": int(sum(p.numel() for p in self._params)),
                "start_unix_us": int(self._start_s * 1e6), "host": socket.gethostname(),
                "pid": os.getpid(), "device": str(dev) if dev.type == "cuda" else "cpu",
                "device_name": name, "threads": torch.get_num_threads(),
                "precision": _precision(self._params), "tokenizer": "", "vocab": 0,
                "tokens_per_step": 0, "config": cfg}

    def _write(self, record):
        self._file.write(json.dumps(record, allow_nan=False, default=str) + "\n")
        self._file.flush()

    def _end_record(self, reason, error=""):
        if self._file.closed:
            return
        rec = {"type": "end", "reason": reason, "step": self._step, "rank": self.rank,
               "time_unix_us": int(time.time() * 1e6), "elapsed_s": time.time() - self._start_s}
        if error:
            rec["error"] = error.splitlines()[0] if error.strip() else error
        self._write(rec)
        self._file.close()

    def _fail(self, exc):
        if self._closed:
            return
        interrupted = isinstance(exc, KeyboardInterrupt)
        self._end_record("interrupted" if interrupted else "error",
                         error="" if interrupted else "%s: %s" % (type(exc).__name__, exc))
        self._release()

    def _release(self):
        self._closed = True
        if self._tracer is not None:
            self._tracer.close()
        if self._hook_state is not None:
            self._hook_state.check_finite = False
        if self._opt_handle is not None:
            self._opt_handle.remove()
        if self._opt_patched:
            if self._opt_previous is not None:
                self._optimizer.step = self._opt_previous
            else:
                self._optimizer.__dict__.pop("step", None)  # back to the class's method
            self._opt_patched = False
        if self._tb is not None:  # last: a failing flush leaves no hook behind
            tb, self._tb = self._tb, None
            tb.close()

    def _check_open(self, what):
        if self._closed:
            raise Error("trainscope: Monitor.%s() on a closed Monitor (it was closed by close() "
                        "or by an error in a step); create a new one with trainscope.watch()."
                        % what)


def _scalar_value(v):
    """A logged value as JSON: tensors and numpy scalars as Python numbers, NaN/Inf as None."""
    if isinstance(v, torch.Tensor):
        v = float(v.detach())
    elif not isinstance(v, (bool, int, float, str)) and hasattr(v, "item"):
        try:
            v = v.item()  # a numpy scalar
        except (TypeError, ValueError):
            pass
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def _drawable(values):
    """(tag, float) pairs of the numbers among logged values; None (non-finite) as NaN."""
    return [(k, float("nan") if v is None else float(v)) for k, v in values.items()
            if v is None or (isinstance(v, (int, float)) and not isinstance(v, bool))]


def _step_tags(rec):
    """A step record's TensorBoard scalars: the trainer's tags (docs/formats.md, "TensorBoard
    scalars"), then the user's scalars under their own names."""
    nan = float("nan")
    ph = rec["phases_ms"]
    pairs = [("train/loss", nan if rec["loss"] is None else rec["loss"]),
             ("train/lr", rec["lr"]),
             ("train/grad_norm", nan if rec["grad_norm"] is None else rec["grad_norm"]),
             ("train/tokens_per_s", rec["tokens_per_s"]), ("train/step_ms", rec["step_ms"])]
    pairs += [("phase/%s_ms" % k, ph.get(k, 0.0)) for k in _PHASES]
    pairs += [("comm/ms", rec["comm_ms"]), ("memory/rss_bytes", rec["host_rss_bytes"])]
    for key, tag in (("device_mem_allocated_bytes", "memory/device_bytes"),
                     ("device_mem_peak_bytes", "memory/device_peak_bytes")):
        if rec.get(key) is not None:
            pairs.append((tag, rec[key]))
    return [(t, float(v)) for t, v in pairs] + _drawable(rec.get("scalars", {}))


def watch(model, optimizer=None, run_dir=None, every=1, layer_norms_every=50, nonfinite=True,
          config=None, start_step=0, tensorboard=True, checksum_every=0, checksum_group=None):
    """Starts watching `model`'s training; returns a `Monitor`.

    model: a torch.nn.Module (DistributedDataParallel too: its all-reduces are timed through
      a comm hook). optimizer: read for the learning rate, and its step() is where gradients
      are checked (before the update). run_dir: see _util.resolve_run_dir. every: a step
      record every N steps. layer_norms_every: per-layer weight/grad norms at step 1 and every
      K steps (0 = never). nonfinite: the NaN tracer (on by default). config: a dict kept in
      the header. start_step: the step a resumed run starts after (its checkpoint's): steps
      are numbered from start_step + 1 and the metrics file is appended to, with a header
      carrying resumed_from_step, as `trainscope train --resume` does. tensorboard: also
      write the step records' scalars (and the user's) as TensorBoard event files in
      <run_dir>/train/tb/rank<R>/, as `trainscope train` does (no tensorboard package needed).
      checksum_every: every N steps (0 = never, the default) the data-parallel ranks compare
      exact float64 sums of every parameter (one small all_gather on checksum_group, default
      the world); the first divergence is a `replica_divergence` record (step, the last
      agreeing check, ranks, parameters), a RuntimeWarning, and `mon.replica_divergence`.
      Every rank of the group must run the same steps (replicas.py).
    Raises trainscope.Error: not a module, no trainable parameters, an unwritable run_dir, a
    run_dir another writer holds ("... is in use by pid P (COMMAND); ...", _util.lock_run_dir).
    """
    try:
        return Monitor(model, optimizer, run_dir, every, layer_norms_every, nonfinite, config,
                       start_step, tensorboard, checksum_every, checksum_group)
    except OSError as e:
        raise Error("trainscope.watch: cannot write the metrics file: %s" % e) from None
