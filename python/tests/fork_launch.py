"""Multi-process jobs forked from one Python that imported torch once (what conftest.launch
does with one `python script` per rank, less a torch import per rank: about 2 s of CPU each,
most of a short job's time on 2 cores).

    with ForkLauncher("/path/to/job.py", preload=["torch._dynamo"]) as fl:
        results = fl.launch(["train", "ddp", run_dir], timeout_s=60)  # [(rc, out, err)]

The parent process (this file run as a script) imports the job's module once, and the
modules torch imports lazily that the job will need (preload: DDP's first construction imports
torch._dynamo, about 2.5 s; a preload that is not there is left out), and, for each
launch, forks one child per rank with the launch's environment (RANK, WORLD_SIZE,
MASTER_ADDR/PORT as conftest.launch sets them), sys.argv = [job.py] + args, and calls the
module's main(); a SystemExit's code, or 1 after an uncaught exception, is the rank's exit
code, as for `python job.py`. The job's module must leave torch's thread pools unused at
import (no tensor operations at module level), so that fork() is safe.
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time


class ForkLauncher:
    """Starts the parent at the first launch; a launch past its timeout kills the parent and
    every rank (one process group), and the next launch starts a new parent."""

    def __init__(self, script, preload=()):
        self.script = os.path.abspath(script)
        self.preload = list(preload)
        self.proc = None
        self.tmp = tempfile.mkdtemp(prefix="ts-fork-launch-")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _start(self):
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), self.script] + self.preload,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True, start_new_session=True,
            env=dict(os.environ, OMP_NUM_THREADS="1"))

    def _kill(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        self.proc = None

    def launch(self, args, world_size=2, timeout_s=60, extra_env=None):
        import pytest  # only in the test's process: the parent needs neither
        from conftest import free_port
        if self.proc is None:
            self._start()
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
                   WORLD_SIZE=str(world_size), OMP_NUM_THREADS="1")
        env.update(extra_env or {})
        out_dir = tempfile.mkdtemp(dir=self.tmp)
        self.proc.stdin.write(json.dumps({"args": list(args), "env": env, "world": world_size,
                                          "out": out_dir}) + "\n")
        self.proc.stdin.flush()
        line = self._read_line(timeout_s)
        if line is None:
            self._kill()
            pytest.fail("%s %s: rank did not end within %d s" % (self.script, args, timeout_s))
        rcs = json.loads(line)["rc"]
        results = []
        for rank, rc in enumerate(rcs):
            with open(os.path.join(out_dir, "out.%d" % rank)) as f:
                out = f.read()
            with open(os.path.join(out_dir, "err.%d" % rank)) as f:
                err = f.read()
            results.append((rc, out, err))
        return results

    def _read_line(self, timeout_s):
        """The parent's next stdout line, or None after timeout_s (or when it died)."""
        import selectors
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout_s
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(timeout=left):
                    return None
                line = self.proc.stdout.readline()
                return line if line else None
        finally:
            sel.close()

    def close(self):
        if self.proc is not None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._kill()
            self.proc = None
        import shutil
        shutil.rmtree(self.tmp, ignore_errors=True)


def _run_rank(module, script, job):
    """In a forked child: one rank of `job`; never returns."""
    status = 1
    try:
        rank = int(job["env"]["RANK"])
        for fd, name in ((1, "out"), (2, "err")):
            f = os.open(os.path.join(job["out"], "%s.%d" % (name, rank)),
                        os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(f, fd)
            os.close(f)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.environ.clear()
        os.environ.update(job["env"])
        sys.argv = [script] + job["args"]
        module.main()
        status = 0
    except SystemExit as e:
        status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:
        import traceback
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)


def _parent(script, preload):
    import importlib
    sys.path.insert(0, os.path.dirname(script))
    module = importlib.import_module(os.path.splitext(os.path.basename(script))[0])
    for name in preload:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    for line in sys.stdin:
        job = json.loads(line)
        pids = {}
        for rank in range(job["world"]):
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                job["env"]["RANK"] = str(rank)
                _run_rank(module, script, job)
            pids[pid] = rank
        rcs = [None] * job["world"]
        while pids:
            pid, status = os.wait()
            if pid in pids:
                rcs[pids.pop(pid)] = os.waitstatus_to_exitcode(status)
        print(json.dumps({"rc": rcs}), flush=True)


if __name__ == "__main__":
    _parent(sys.argv[1], sys.argv[2:])
