#!/usr/bin/env python3
"""`trainscope compare` against msprobe's compare on the same two tensor-mode dumps (issue 30 part 7).

    bench/compare/bench_compare.py [--size-mb 1000] [--binary build/bin/trainscope] [-o out.json]

Makes two dumps of about --size-mb each with trainscope.dump (a stack of 1024x1024 Linear layers,
level mix, mode tensor; the second run's input differs slightly so every metric is computed),
then times both compares side by side in one run and prints/writes the ratio as JSON.
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import time


def du_bytes(path):
    return sum(os.path.getsize(f) for f in glob.glob(os.path.join(path, "**"), recursive=True)
               if os.path.isfile(f))


def make_dump(out, layers, noise):
    import torch
    import trainscope
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024) for _ in range(layers)])
    x = torch.randn(1024, 1024) + noise * torch.randn(1024, 1024)
    with trainscope.dump(model, out, level="mix", mode="tensor"):
        model(x).sum().backward()


def timed(cmd):
    t = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True)
    return time.monotonic() - t, p.returncode


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mb", type=float, default=1000)
    ap.add_argument("--binary", default=os.environ.get("TS_BINARY", "build/bin/trainscope"))
    ap.add_argument("-o", "--output")
    args = ap.parse_args()
    layers = max(1, int(round(args.size_mb / 40)))  # ~40 MB of tensors per layer
    work = tempfile.mkdtemp(prefix="bench_compare.")
    a, b = os.path.join(work, "a"), os.path.join(work, "b")
    make_dump(a, layers, 0.0)
    make_dump(b, layers, 1e-3)
    msprobe = os.path.join(os.path.dirname(sys.executable), "msprobe")
    ts_s, ts_rc = timed([args.binary, "compare", a, b, "--json"])
    ms_s, ms_rc = timed([msprobe, "compare", "-tp", a + "/step0", "-gp", b + "/step0",
                         "-o", os.path.join(work, "msprobe_out")])
    result = {"argv": sys.argv, "layers": layers, "dump_bytes": [du_bytes(a), du_bytes(b)],
              "trainscope_s": ts_s, "trainscope_rc": ts_rc, "msprobe_s": ms_s,
              "msprobe_rc": ms_rc, "speedup": ms_s / ts_s, "work_dir": work}
    print(json.dumps(result, indent=1))
    if args.output:
        with open(args.output, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
