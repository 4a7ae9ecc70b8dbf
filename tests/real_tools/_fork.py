"""Python processes forked from one that imported torch once, in place of
`subprocess.Popen([sys.executable, ...])`: a torch import is about 2 s of CPU, most of what a
short gloo job or a `python -m torch...` tool costs on 2 cores.

    server = ForkServer(tmp)                       # started at the first spawn
    p = server.spawn([worker_py, "0", "2"], env, cwd, log_path)   # a Popen-like handle
    rc, output = server.run(["-m", "torch.distributed.flight_recorder.fr_trace", ...], 90)
    server.close()

Each process is what `python ARGV...` gives, started from a fork of the server: its own
session (os.killpg(p.pid, ...) reaches it), the given environment and working directory,
stdin from /dev/null, stdout and stderr appended to log_path, sys.argv and sys.path[0] set as
Python sets them for a script or for -m; a SystemExit's code, or 1 after an uncaught
exception (its traceback printed), is the exit code. The server imports only torch and
torch.distributed and runs nothing, so no thread pool is live at the fork.
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time


class ForkedProc:
    """The part of subprocess.Popen the tests use: pid, returncode, poll(), wait()."""

    def __init__(self, pid, status_path):
        self.pid, self._status, self.returncode = pid, status_path, None

    def poll(self):
        if self.returncode is None and os.path.exists(self._status):
            with open(self._status) as f:
                self.returncode = int(f.read())
        return self.returncode

    def wait(self, timeout=None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(str(self.pid), timeout)
            time.sleep(0.02)
        return self.returncode


class ForkServer:
    def __init__(self, tmp):
        self.dir = tempfile.mkdtemp(prefix="fork-", dir=tmp)
        self.proc, self.count = None, 0

    def spawn(self, argv, env, cwd, log_path):
        if self.proc is None:
            # The first job's environment: what torch reads at import (TORCH_FR_*, threads).
            self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__)],
                                         stdin=subprocess.PIPE, text=True, cwd=self.dir,
                                         env=dict(env), start_new_session=True)
        self.count += 1
        base = os.path.join(self.dir, str(self.count))
        self.proc.stdin.write(json.dumps({"argv": list(argv), "env": dict(env), "cwd": cwd,
                                          "log": log_path, "base": base}) + "\n")
        self.proc.stdin.flush()
        deadline = time.monotonic() + 120  # the server's own torch import, on a busy machine
        while not os.path.exists(base + ".pid"):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the fork server did not start {argv} "
                                   f"(server exit {self.proc.poll()})")
            time.sleep(0.01)
        with open(base + ".pid") as f:
            return ForkedProc(int(f.read()), base + ".rc")

    def run(self, argv, timeout_s, env=None, cwd=None):
        """(exit code, stdout + stderr) of `python ARGV` run to its end; killed after timeout_s."""
        log = os.path.join(self.dir, f"run{self.count + 1}.log")
        p = self.spawn(argv, dict(os.environ) if env is None else env, cwd or os.getcwd(), log)
        try:
            p.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(10)
            raise
        with open(log) as f:
            return p.returncode, f.read()

    def close(self):
        if self.proc is not None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
            self.proc = None


def _write(path, text):
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def _child(job):
    """In the forked child: `python ARGV` as ForkServer.spawn describes; never returns."""
    import runpy
    import traceback
    status = 1
    try:
        os.setsid()
        os.chdir(job["cwd"])
        os.environ.clear()
        os.environ.update(job["env"])
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        log = os.open(job["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(null)
        os.close(log)
        argv = job["argv"]
        if argv[0] == "-m":
            sys.argv = [argv[1]] + argv[2:]
            sys.path.insert(0, job["cwd"])
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = list(argv)
            sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))
            runpy.run_path(argv[0], run_name="__main__")
        status = 0
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            status = e.code or 0
        else:
            print(e.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)


def _serve():
    """Reads jobs (JSON lines) on stdin, forks each at once, reaps the children."""
    import selectors
    import torch  # noqa: F401  (the import every child would repeat)
    import torch.distributed  # noqa: F401
    sel = selectors.DefaultSelector()
    sel.register(0, selectors.EVENT_READ)
    children, buf, open_ = {}, b"", True
    while open_ or children:
        if open_ and sel.select(timeout=0.02):
            data = os.read(0, 65536)
            open_ = bool(data)
            buf += data
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                job = json.loads(line)
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    _child(job)
                children[pid] = job["base"]
                _write(job["base"] + ".pid", str(pid))
        elif not open_:
            time.sleep(0.02)
        while children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            base = children.pop(pid, None)
            if base:
                _write(base + ".rc", str(os.waitstatus_to_exitcode(status)))


if __name__ == "__main__":
    _serve()
