"""What every real_tools test needs of trainscope: the binary ($TS_BINARY, set by ctest; else
build/bin/trainscope of this checkout) and a run of it that must not crash (exit 0 or 1)."""
import json
import os
import subprocess

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BINARY = os.environ.get("TS_BINARY", os.path.join(REPO, "build", "bin", "trainscope"))


def run(*args, timeout=60):
    p = subprocess.run([BINARY, *args], capture_output=True, text=True, timeout=timeout)
    assert p.returncode in (0, 1), f"{args}: exit {p.returncode}\n{p.stdout}\n{p.stderr}"
    return p


def run_json(*args):
    p = run(*args, "--json")
    return p.returncode, json.loads(p.stdout)
