"""`trainscope.distributed.record`: a flight recorder and a hang watchdog for torch.distributed.

After `init_process_group`, `record()` replaces the collective and point-to-point functions
of `torch.distributed` (all_reduce, all_gather, reduce_scatter, broadcast, barrier, send,
recv, isend, irecv, all_to_all, ...) with wrappers that record each call into the native
flight recorder (`trainscope._core.FlightRecorder`, the dump format of docs/formats.md
"Flight recorder dump") with its call site: the file:line of the first caller frame outside
torch and trainscope. Torch 1.13 has no Flight Recorder of its own; this one works on any
torch. DDP's bucket all-reduces are recorded when the model is passed (`model=`) or watched
by `trainscope.watch`: both register one comm hook that calls `dist.all_reduce`. FSDP2
(`fully_shard`) calls `dist.all_gather_single` / `dist.reduce_scatter_single` (torch 2.15;
`all_gather_into_tensor` / `reduce_scatter_tensor` before), recorded as they are. DTensor's
functional collectives (`torch.distributed._functional_collectives`: `full_tensor()`,
`redistribute`, the norm of sharded gradients) do not go through these functions and are not
recorded.

Per group, collectives get sequence numbers 1, 2, ... in call order, and send/recv their own;
every rank that calls the same collectives in the same order gives them the same numbers,
which is what `trainscope hang analyze` matches across ranks.

The watchdog (a daemon thread) looks at the oldest op not completed every `poll_s`. When one
is older than `timeout_s`, the rank announces the hang in the c10d store (a counter every
rank's watchdog polls), so that every rank writes `<run_dir>/hang/flight_recorder.rank<R>.json`
and `stacks.rank<R>.txt` (every Python thread's stack). Each rank prints one line naming the
op and its sequence number and ends its process with `os._exit(EXIT_CODE)`; the rank that
timed out first waits (at most `grace_s`) for the others' dumps before it goes, as it may host
the store. Then `trainscope hang analyze <run_dir>/hang` names the rank, the op and the call
site.

Every failed collective leaves evidence too (dump_on_crash=True, the default): a collective
that raises (gloo's `Connection closed by peer`, a timeout), an uncaught exception, the
std::terminate + SIGABRT gloo ends a process with when the ranks' collectives do not match
(`op.preamble.length <= op.nbytes`), and SIGUSR1 (`trainscope launch` asks a failed job's
ranks with it) write the dump and stacks with the reason; only a timeout makes the ranks
exit. Entries carry the training step: `trainscope.watch` sets it at each step, a loop
without watch calls `trainscope.distributed.set_step(step)`.

Functions imported by name before `record()` (`from torch.distributed import all_reduce`) are
not wrapped: call them as `dist.all_reduce`.
"""
import atexit
import faulthandler
import inspect
import os
import sys
import threading
import time

import torch
import torch.distributed as dist

from . import _core, _ddp, _util
from ._errors import Error

EXIT_CODE = 1
_TRIGGER_KEY = "trainscope/hang/trigger"
_WHAT_KEY = "trainscope/hang/what"
_DUMPED_KEY = "trainscope/hang/dumped"

# name -> (op recorded, index of the tensor giving the count, index of `group`, p2p?)
# Indices are positional; keyword arguments are looked up by name. reduce, gather and scatter
# are not recorded: the flight recorder's dump format has no names for them (every rank skips
# them alike, so the sequence numbers of the others still match across ranks).
_OPS = {
    "all_reduce": ("all_reduce", 0, 2, False),
    "broadcast": ("broadcast", 0, 2, False),
    "all_gather": ("all_gather", 1, 2, False),
    "all_gather_single": ("all_gather", 1, 2, False),  # torch 2.15's name; FSDP2 calls it
    "all_gather_into_tensor": ("all_gather", 1, 2, False),
    "_all_gather_base": ("all_gather", 1, 2, False),
    "reduce_scatter": ("reduce_scatter", 0, 3, False),
    "reduce_scatter_single": ("reduce_scatter", 0, 3, False),  # torch 2.15; FSDP2 calls it
    "reduce_scatter_tensor": ("reduce_scatter", 0, 3, False),
    "_reduce_scatter_base": ("reduce_scatter", 0, 3, False),
    "all_to_all": ("all_to_all", 1, 2, False),
    "all_to_all_single": ("all_to_all", 1, 4, False),
    "barrier": ("barrier", None, 0, False),
    "monitored_barrier": ("barrier", None, 0, False),
    "all_gather_object": ("all_gather", None, 2, False),
    "broadcast_object_list": ("broadcast", None, 2, False),
    "send": ("send", 0, 2, True),
    "recv": ("recv", 0, 2, True),
    "isend": ("send", 0, 2, True),
    "irecv": ("recv", 0, 2, True),
}

_recorder = None
_recorder_lock = threading.Lock()


def _skip_prefixes():
    here = os.path.dirname(os.path.abspath(__file__))
    return (os.path.dirname(os.path.abspath(torch.__file__)), here, "<frozen", "<string>")


class Recorder:
    """The installed recorder of this process (one per process; see record()).

    Thread-safe: ops may be issued and completed from any thread.
    """

    def __init__(self, run_dir, timeout_s, capacity, poll_s, grace_s, dump_on_crash=True):
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()
        self.run_dir = run_dir
        self.timeout_s = float(timeout_s)
        self.poll_s = poll_s
        self.grace_s = grace_s
        self.dump_path = _util.hang_dump_path(run_dir, self.rank)
        self.stacks_path = _util.hang_stacks_path(run_dir, self.rank)
        self.backend = str(dist.get_backend())
        self.fr = _core.FlightRecorder(self.rank, self.world_size, capacity, self.backend,
                                       int(self.timeout_s * 1000))
        # process group (None = default) -> [name, pg_id, size, the group itself]; the
        # sequence numbers are counted by the native recorder, per pg_id.
        self._groups = {}
        self._polled = []       # (record id, Work) of async ops without a future
        self._originals = {}
        self._skip = _skip_prefixes()
        # Call sites: (id(code), f_lasti) of the first frame outside torch and trainscope ->
        # the native recorder's site id of its "file.py:line". Not (code, f_lineno): hashing
        # a code object hashes its bytecode and constants (not cached; 0.2-0.5 us), and
        # f_lineno decodes the line table at every read. The codes are kept alive in
        # _site_codes, so their ids are not reused.
        self._sites = {}
        self._site_codes = set()
        self._skipped = {}      # id(code) -> code, for frames inside torch or trainscope
        self._no_site = self.fr.site_id("")
        self._fast_start, self._fast_complete = self.fr.fast_calls()
        self._store = _util.default_store()
        self._stop = threading.Event()
        self._thread = None
        self._dumped = False
        self._dump_on_crash = dump_on_crash
        self._dump_lock = threading.Lock()
        self._previous_excepthook = None
        self._error_reason = None  # the first failed collective's, for the dumps after it

    # ---- wrapping ----
    def install(self):
        for name, spec in _OPS.items():
            fn = getattr(dist, name, None)
            if fn is None:
                continue
            self._originals[name] = fn
            setattr(dist, name, self._wrap(name, fn, *spec))
        # The watchdog must be stopped before the store goes away (a thread inside a store
        # call at interpreter exit ends the process in std::terminate).
        destroy = dist.destroy_process_group
        self._originals["destroy_process_group"] = destroy

        def destroy_process_group(*args, **kwargs):
            if not args and kwargs.get("group") is None:
                stop()
            return destroy(*args, **kwargs)

        dist.destroy_process_group = destroy_process_group
        atexit.register(stop)
        if self._dump_on_crash:
            self._arm_crash_dumps()
        self._thread = threading.Thread(target=self._watch, name="trainscope-watchdog",
                                        daemon=True)
        self._thread.start()

    def _arm_crash_dumps(self):
        """The dumps on abnormal ends (see the module's doc): std::terminate, SIGUSR1, an
        uncaught exception. Signal handlers can only be set from the main thread."""
        self.fr.arm_terminate(self.dump_path, self._crash_stacks)
        if threading.current_thread() is threading.main_thread():
            fd = _core.FlightRecorder.arm_sigusr1()
            threading.Thread(target=self._on_sigusr1, args=(fd,), name="trainscope-sigusr1",
                             daemon=True).start()
        previous = sys.excepthook
        self._previous_excepthook = previous

        def excepthook(kind, value, tb):
            if _recorder is self and not issubclass(kind, KeyboardInterrupt):
                # A collective's own error stays the dump's reason (it came first).
                self._safe_dump(self._error_reason or
                                "exception: %s: %s" % (kind.__name__, str(value)[:300]))
            previous(kind, value, tb)

        sys.excepthook = excepthook

    def _on_sigusr1(self, fd):
        while True:
            try:
                if not os.read(fd, 64):
                    return
            except OSError:
                return
            if _recorder is self:
                self._safe_dump("SIGUSR1 (asked for a dump, e.g. by trainscope launch)")

    def _crash_stacks(self, reason):
        """Called by the native terminate hook (the dump is written): the stacks."""
        self._write_stacks()
        sys.stderr.write("trainscope: rank %d: %s; flight recorder dump: %s\n"
                         % (self.rank, reason[:300], self.dump_path))
        sys.stderr.flush()

    def _on_error(self, op, error):
        """A collective raised: dump at once (the process may not live to time out)."""
        if not self._dump_on_crash:
            return
        if self._error_reason is None:
            self._error_reason = "error: %s failed: %s: %s" % (op, type(error).__name__,
                                                               str(error)[:300])
        path = self._safe_dump(self._error_reason)
        if path:
            sys.stderr.write("trainscope: rank %d: %s failed (%s); flight recorder dump: %s\n"
                             % (self.rank, op, type(error).__name__, path))
            sys.stderr.flush()

    def _safe_dump(self, reason):
        try:
            return self.dump(reason)
        except Exception as e:  # noqa: BLE001 - evidence is best effort; the error goes on
            sys.stderr.write("trainscope: rank %d: cannot write the flight recorder dump: %s\n"
                             % (self.rank, e))
            return None

    def uninstall(self):
        if self._previous_excepthook is not None:
            sys.excepthook = self._previous_excepthook
            self._previous_excepthook = None
        for name, fn in self._originals.items():
            setattr(dist, name, fn)
        self._originals = {}
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def _group(self, group):
        g = self._groups.get(group)
        if g is None:
            pg = group if group is not None else dist.distributed_c10d._get_default_group()
            g = self._groups.get(pg)
            if g is None:
                names = getattr(dist.distributed_c10d, "_pg_names", None)
                if names is None:
                    names = getattr(getattr(dist.distributed_c10d, "_world", None),
                                    "pg_names", {})
                size = dist.get_world_size(pg)
                if pg is dist.distributed_c10d._get_default_group():
                    g = ["0", self.fr.group_id("0"), size, pg]  # registered by the recorder
                else:
                    name = "%s" % names.get(pg, "pg%d" % len(self._groups))
                    pg_id = self.fr.register_group(name, _group_ranks(pg), "", self.backend,
                                                   int(self.timeout_s * 1000))
                    g = [name, pg_id, size, pg]
                self._groups[pg] = g
            self._groups[group] = g
        return g

    def site_of(self, f):
        """Site id of "file:line" of the innermost frame from f outward that is outside torch
        and trainscope (the id of "" if none). The slow path of the wrappers' cache."""
        sites, skipped, skip = self._sites, self._skipped, self._skip
        while f is not None:
            code = f.f_code
            key = (id(code), f.f_lasti)
            site = sites.get(key)
            if site is not None:
                return site
            if id(code) in skipped or code.co_filename.startswith(skip):
                if len(skipped) < 100000:
                    skipped[id(code)] = code
                f = f.f_back
                continue
            site = self.fr.site_id("%s:%d" % (os.path.basename(code.co_filename),
                                              f.f_lineno or 0))
            if len(sites) < 100000:
                self._site_codes.add(code)
                sites[key] = site
            return site
        return self._no_site

    def _wrap(self, name, fn, op, tensor_index, group_index, p2p):
        # The per-call path is kept lean (docs/PERFORMANCE.md: record's cost per call): every
        # lookup that does not depend on the call is bound here, the native recorder is
        # called through fast_calls() with integer codes, and the call site is one frame
        # lookup plus one dict lookup when the caller is not inside torch or trainscope.
        rec = self
        fr_start, fr_complete, fr_fail = self._fast_start, self._fast_complete, self.fr.complete
        groups_get, group_of = self._groups.get, self._group
        sites_get, site_of, getframe, id_ = self._sites.get, self.site_of, sys._getframe, id
        process_group, tensor_type = dist.ProcessGroup, torch.Tensor
        op_code = _core.FlightRecorder.op_code(op)
        dtype_codes = {d: _core.FlightRecorder.dtype_code(str(d)) for d in _DTYPES}
        default_dtype = _core.FlightRecorder.dtype_code("float32")
        always_async = name in ("isend", "irecv")
        # Keyword names from the signature (FSDP2 passes output=, input=): the counted tensor
        # is the parameter at tensor_index; async_op's position. The table where there is
        # no signature to read.
        params = _parameter_names(fn)
        tensor_key = params[tensor_index] if tensor_index is not None and \
            params and len(params) > tensor_index else None
        async_pos = params.index("async_op") if params and "async_op" in params else \
            _ASYNC_POSITION.get(name, 1 << 30)
        if name in ("barrier", "monitored_barrier"):
            group_index = 0
        gather, scatter = op == "all_gather", op == "reduce_scatter"
        with_peer, peer_key = p2p or op == "broadcast", _PEER_KEYS.get(name)

        def wrapper(*args, **kwargs):
            n = len(args)
            group = args[group_index] if n > group_index else \
                kwargs.get("group") if kwargs else None
            try:
                g = groups_get(group)  # None, and each ProcessGroup seen before
            except TypeError:  # not hashable: not a group
                g = None
            if g is None:
                g = group_of(group if isinstance(group, process_group) else None)
            t = None
            if tensor_index is not None:
                if n > tensor_index:
                    t = args[tensor_index]
                elif kwargs:
                    t = kwargs.get(tensor_key) if tensor_key else \
                        kwargs.get("tensor", kwargs.get("input_tensor", kwargs.get("input")))
            # A tensor first: isinstance(tensor, (list, tuple)) costs 3x isinstance(tensor,
            # Tensor).
            is_tensor = isinstance(t, tensor_type)
            if not is_tensor and isinstance(t, (list, tuple)):
                t = t[0] if t else None
                is_tensor = isinstance(t, tensor_type)
            if is_tensor:
                count = out_count = t.numel()
                dtype = dtype_codes.get(t.dtype, default_dtype)
                if gather:
                    out_count = count * g[2]
                elif scatter:  # t is the output
                    count = out_count * g[2]
            else:
                count = out_count = 0
                dtype = default_dtype
            peer = _peer(peer_key, args, kwargs, g[3]) if with_peer else -1
            f = getframe(1)
            site = sites_get((id_(f.f_code), f.f_lasti))
            if site is None:
                site = site_of(f)
            async_op = always_async or (n > async_pos and bool(args[async_pos])) or \
                (kwargs and bool(kwargs.get("async_op")))
            rid = fr_start(op_code, count, dtype, g[1], site, peer, out_count, async_op)
            try:
                work = fn(*args, **kwargs)
            except BaseException as e:
                fr_fail(rid, "%s: %s" % (type(e).__name__, e))
                if not isinstance(e, KeyboardInterrupt):
                    rec._on_error(name, e)
                raise
            if async_op and work is not None:
                rec._complete_later(rid, work)
            else:
                fr_complete(rid)
            return work

        wrapper.__wrapped__ = fn
        wrapper.__name__ = name
        wrapper.__doc__ = fn.__doc__
        return wrapper

    def _complete(self, rid):
        self._fast_complete(rid)

    def _complete_later(self, rid, work):
        try:
            work.get_future().then(lambda _f: self._complete(rid))
        except RuntimeError:  # a Work without a future (gloo send/recv in torch 1.13)
            self._polled.append((rid, work))

    # ---- watchdog ----
    def _watch(self):
        while not self._stop.wait(self.poll_s):
            try:
                if self._polled:
                    still = []
                    for rid, work in self._polled:
                        if work.is_completed():
                            self._complete(rid)
                        else:
                            still.append((rid, work))
                    self._polled = still
                age_s, op, seq, site = self.fr.oldest_pending()
                if op and age_s > self.timeout_s:
                    self._hang((op, seq, site), own=True)
                    return
                if self._store is not None and self._store.add(_TRIGGER_KEY, 0) > 0:
                    self._hang(None, own=False)
                    return
            except Exception as e:  # noqa: BLE001 - the watchdog must never die silently
                sys.stderr.write("trainscope: flight recorder watchdog: %s\n" % e)

    def _hang(self, late, own):
        what = ""
        if own:
            op, seq, site = late
            what = "%s #%d%s" % (op, seq, " at " + site if site else "")
            if self._store is not None:
                try:
                    if self._store.add(_TRIGGER_KEY, 1) == 1:
                        self._store.set(_WHAT_KEY, "rank %d: %s" % (self.rank, what))
                except Exception:  # noqa: BLE001 - a dead store: dump alone
                    pass
            line = ("trainscope: rank %d: %s not completed after %gs; flight recorder dump: %s"
                    % (self.rank, what, self.timeout_s, self.dump_path))
        else:
            try:
                what = self._store.get(_WHAT_KEY).decode()
            except Exception:  # noqa: BLE001
                what = "another rank timed out"
            line = ("trainscope: rank %d: dumping its flight recorder because %s timed out; "
                    "dump: %s" % (self.rank, what, self.dump_path))
        self.dump("timeout" if own else "peer timeout")
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
        if self._store is not None:
            try:
                self._store.add(_DUMPED_KEY, 1)
                deadline = time.monotonic() + self.grace_s
                while own and time.monotonic() < deadline and \
                        self._store.add(_DUMPED_KEY, 0) < self.world_size:
                    time.sleep(0.05)
            except Exception:  # noqa: BLE001 - peers gone with the store
                pass
        os._exit(EXIT_CODE)

    def dump(self, reason="requested"):
        """Writes this rank's dump and stacks to <run_dir>/hang/; returns the dump's path."""
        with self._dump_lock:
            os.makedirs(os.path.dirname(self.dump_path), exist_ok=True)
            self.fr.dump(self.dump_path, reason)
            self._write_stacks()
            self._dumped = True
        return self.dump_path

    def _write_stacks(self):
        try:
            with open(self.stacks_path, "w") as f:
                faulthandler.dump_traceback(f, all_threads=True)
        except OSError:
            pass


def _parameter_names(fn):
    """The names of fn's parameters in order, or None where its signature cannot be read."""
    try:
        return list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return None


def _group_ranks(pg):
    get = getattr(dist, "get_process_group_ranks", None)
    if get is not None:
        return list(get(pg))
    return sorted(dist.distributed_c10d._pg_group_ranks[pg].keys())  # torch < 2.0


def _peer(key, args, kwargs, pg):
    """Group rank of a send/recv peer or a broadcast root (keyword `key` or the second
    positional argument), -1 when not given."""
    peer = kwargs.get(key, args[1] if len(args) > 1 else None)
    if peer is None:
        return -1
    if pg is dist.distributed_c10d._get_default_group():
        return int(peer)
    try:
        return int(dist.distributed_c10d._get_group_rank(pg, peer))
    except Exception:  # noqa: BLE001 - not a member: record the global rank
        return int(peer)


# async_op's position among the positional parameters of the calls that take it, where
# their signatures cannot be read.
_ASYNC_POSITION = {"all_reduce": 3, "broadcast": 3, "all_gather": 3, "all_gather_single": 3,
                   "all_gather_into_tensor": 3, "_all_gather_base": 3, "reduce_scatter": 4,
                   "reduce_scatter_single": 4, "reduce_scatter_tensor": 4,
                   "_reduce_scatter_base": 4, "all_to_all": 3, "all_to_all_single": 5,
                   "barrier": 1}
# Dtypes given their native code once per wrapper (others are recorded as float32, as the
# native recorder records any dtype it has no name for).
_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32, torch.int64,
           torch.int8, torch.uint8, torch.bool)
_PEER_KEYS = {"send": "dst", "isend": "dst", "recv": "src", "irecv": "src", "broadcast": "src"}


def record(run_dir=None, timeout_s=600, capacity=2000, model=None, poll_s=None, grace_s=10.0,
           dump_on_crash=True):
    """Starts recording torch.distributed ops of this process; returns the `Recorder`.

    Call after `torch.distributed.init_process_group` on every rank. run_dir: where hang/
    goes (default: as trainscope.watch picks it). timeout_s: an op not completed after this
    long makes every rank dump and exit. capacity: ops kept (a ring). model: a
    DistributedDataParallel model whose bucket all-reduces are to be recorded (through a
    comm hook). dump_on_crash: also dump on a failed collective, an uncaught exception,
    std::terminate/SIGABRT and SIGUSR1 (the module's doc; it sets a terminate handler, a
    SIGUSR1 handler and sys.excepthook, each chained to the one before).
    A second call returns the recorder already installed.
    Raises trainscope.Error when torch.distributed is not initialised, timeout_s <= 0, or the run
    directory is in use by another writer (_util.lock_run_dir).
    """
    global _recorder
    if not (dist.is_available() and dist.is_initialized()):
        raise Error("trainscope.distributed.record() needs torch.distributed initialised: call "
                    "torch.distributed.init_process_group() first.")
    if not float(timeout_s) > 0:
        raise Error("trainscope.distributed.record(): timeout_s must be a positive number of "
                    "seconds, not %r." % (timeout_s,))
    with _recorder_lock:
        if _recorder is None:
            poll = poll_s if poll_s is not None else min(1.0, max(0.05, float(timeout_s) / 20))
            resolved = _util.resolve_run_dir(run_dir)
            _util.lock_run_dir(resolved)  # one writer per run directory
            _recorder = Recorder(resolved, timeout_s, int(capacity), poll, float(grace_s),
                                 bool(dump_on_crash))
            _recorder.install()
    if model is not None:
        _ddp.install(model)
    return _recorder


def set_step(step):
    """The training step the next ops are recorded with (the dumps' `step`); trainscope.watch
    calls it at each step. No-op without record()."""
    rec = _recorder
    if rec is not None:
        rec.fr.step = int(step)


def stop():
    """Restores torch.distributed's functions and stops the watchdog (tests, shutdown)."""
    global _recorder
    with _recorder_lock:
        if _recorder is not None:
            _recorder.uninstall()
            _recorder = None
