#!/usr/bin/env python3
"""The executables ignore SIGPIPE (a dead peer's socket must be a comm error, not a death), so
a closed stdout is only a failed write: `trainscope ... | head` must still end as a SIGPIPE
death (what a shell and `set -o pipefail` expect), an open pipe must give the verb's own exit
code and output, and a full disk (/dev/full) must be named on stderr with exit 2."""
import argparse
import os
import signal
import subprocess
import sys


def run(binary, args, stdout):
    return subprocess.run([binary, *args], stdout=stdout, stderr=subprocess.PIPE, text=True,
                          timeout=60)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--data", required=True)
    a = ap.parse_args()
    args = ["hang", "analyze", os.path.join(a.data, "hang", "skipped"), "--json"]

    ok = subprocess.run([a.binary, *args], capture_output=True, text=True, timeout=60)
    assert ok.returncode == 1 and '"problem": true' in ok.stdout, (ok.returncode, ok.stderr)

    r, w = os.pipe()
    os.close(r)  # the reader went away before the verb wrote
    closed = run(a.binary, args, w)
    os.close(w)
    assert closed.returncode == -signal.SIGPIPE, (closed.returncode, closed.stderr)
    assert closed.stderr == "", closed.stderr

    with open("/dev/full", "w") as full:
        disk = run(a.binary, args, full)
    assert disk.returncode == 2, (disk.returncode, disk.stderr)
    assert "standard output" in disk.stderr, disk.stderr

    helped = run(a.binary, ["--help"], subprocess.DEVNULL)
    assert helped.returncode == 0, helped.stderr
    print("closed stdout: SIGPIPE; /dev/full: exit 2; open pipe: the verb's exit 1")


if __name__ == "__main__":
    sys.exit(main())
