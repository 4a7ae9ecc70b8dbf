"""trainscope inside a user's own PyTorch job.

    import trainscope
    mon = trainscope.watch(model, optimizer)          # metrics, phase timers, NaN tracer
    trainscope.distributed.record(timeout_s=600)      # flight recorder + hang watchdog
    trainscope.checkpoint.save(run_dir, state, step=s, keep=3)
    trainscope.diagnose([run_dir])                    # the CLI's analyses, as dicts

Everything writes the run-directory formats of `trainscope train` (docs/formats.md), so
`trainscope diagnose`, `report`, `serve`, `hang analyze` and `ckpt` read a user's run
unchanged. docs/python.md is the guide. torch is imported only by the modules that need it
(watch, distributed, checkpoint), on first use.
"""
import types as _types

from ._core import Error
from ._errors import NonFiniteError
from . import _api

__all__ = ["Error", "NonFiniteError", "Monitor", "watch", "distributed", "checkpoint",
           "trace", "data", "diagnose", "env", "hang", "dump", "Dump"]

# The analyses of the CLI, as the same dicts as its --json (native, in _api).
trace = _types.SimpleNamespace(analyze=_api.trace_analyze)
data = _types.SimpleNamespace(scan=_api.data_scan)
env = _types.SimpleNamespace(fingerprint=_api.env_fingerprint)
hang = _types.SimpleNamespace(analyze=_api.hang_analyze)
diagnose = _api.diagnose


def __getattr__(name):
    # torch-dependent parts load on first use, so `import trainscope` alone needs no torch.
    import importlib
    if name in ("Monitor", "watch"):
        return getattr(importlib.import_module(".monitor", __name__), name)
    if name in ("dump", "Dump"):
        # The submodule's import binds trainscope.dump to the module: rebind it to the function.
        mod = importlib.import_module(".dump", __name__)
        globals().update(dump=mod.dump, Dump=mod.Dump)
        return globals()[name]
    if name in ("distributed", "checkpoint"):
        return importlib.import_module("." + name, __name__)
    raise AttributeError("module 'trainscope' has no attribute %r" % name)
