"""Shared helpers of trainscope's Python tests: paths of the build and 2-rank launches."""
import os
import socket
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def trainscope_binary():
    """$TS_BINARY (ctest passes the built one), else build/bin/trainscope."""
    return os.environ.get("TS_BINARY", os.path.join(REPO, "build", "bin", "trainscope"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(script, args, world_size=2, timeout_s=60, extra_env=None):
    """Runs `script args` as world_size ranks (gloo on loopback); returns [(rc, out, err)]."""
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
               WORLD_SIZE=str(world_size), OMP_NUM_THREADS="1")
    env.update(extra_env or {})
    procs = []
    for rank in range(world_size):
        procs.append(subprocess.Popen([sys.executable, script] + list(args),
                                      env=dict(env, RANK=str(rank)), stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    # timeout_s bounds the whole launch; ranks still running then (or at any error here) are
    # killed and reaped.
    deadline = time.monotonic() + timeout_s
    results = []
    try:
        for p in procs:
            try:
                out, err = p.communicate(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pytest.fail("%s %s: rank did not end within %d s" % (script, args, timeout_s))
            results.append((p.returncode, out, err))
    finally:
        for q in procs:
            if q.poll() is None:
                q.kill()
                q.communicate()
    return results


@pytest.fixture
def run_dir(tmp_path):
    return str(tmp_path / "run")
