"""`trainscope compare` against msprobe's own compare (the venv's mindstudio-probe) on msprobe's
public sample dumps (tests/data/compare/gpu_dump: ResNet50, statistics mode, steps 0 and 1).

msprobe writes its compare_result csv; ours (`--csv`) must give every row msprobe matched the
same names, dtypes, shapes, requires_grad and statistics, the same Max/Min/Mean/L2norm diffs and
relative errors (within 1e-6), and the same Result and Err_message (msprobe's pass / warning /
error rules). The first divergence must be the API msprobe's first-difference rule names: the
first API in msprobe's order with an output row whose Max/Min/Mean/Norm relative error passes
its diff_analyze threshold (0.5). A tensor-mode dump msprobe writes on the CPU (an MLP, its
last Linear in bfloat16 on one side) must give the same tensor metrics (Cosine ... ratios).

Run: TS_BINARY=build/bin/trainscope .venv/bin/python -m pytest -q tests/real_tools/test_msprobe_compare.py
"""

import csv
import glob
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

pytest.importorskip("msprobe")

from _cli import BINARY, REPO  # noqa: E402

DATA = os.path.join(REPO, "tests", "data", "compare", "gpu_dump")
MSPROBE = os.path.join(os.path.dirname(sys.executable), "msprobe")
REL_COLS = ["MaxRelativeErr", "MinRelativeErr", "MeanRelativeErr", "NormRelativeErr"]
NUM_COLS = ["Max diff", "Min diff", "Mean diff", "L2norm diff", *REL_COLS,
            "NPU max", "NPU min", "NPU mean", "NPU l2norm",
            "Bench max", "Bench min", "Bench mean", "Bench l2norm"]
TEXT_COLS = ["Bench Name", "NPU Dtype", "Bench Dtype", "NPU Tensor Shape", "Bench Tensor Shape",
             "NPU Requires_grad", "Bench Requires_grad", "Requires_grad Consistent", "Result",
             "Err_message"]


def number(s):
    s = s.strip()
    return float(s[:-1]) / 100 if s.endswith("%") else float(s)


def msprobe_compare(tmp, a, b):
    if not os.path.exists(MSPROBE):
        pytest.skip("msprobe CLI not in the venv")
    out = os.path.join(tmp, "msprobe_out")
    os.makedirs(out)
    p = subprocess.run([MSPROBE, "compare", "-tp", a, "-gp", b, "-o", out],
                       capture_output=True, text=True, timeout=180)
    found = glob.glob(os.path.join(out, "compare_result_*.csv"))
    assert found, f"msprobe wrote no csv: {p.stdout[-2000:]}\n{p.stderr[-2000:]}"
    with open(found[0], newline="") as f:
        return list(csv.DictReader(f))


def ours(tmp, a, b):
    path = os.path.join(tmp, "ours.csv")
    p = subprocess.run([BINARY, "compare", a, b, "--json", "--csv", path],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode in (0, 1), p.stderr
    import json
    with open(path, newline="") as f:
        return p.returncode, json.loads(p.stdout), list(csv.DictReader(f))


def msprobe_first_diff(rows):
    """msprobe's first-difference rule (core/compare/diff_analyze) over its csv rows."""
    for r in rows:
        if r["Bench Name"] == "N/A" or ".output." not in r["NPU Name"]:
            continue
        for c in REL_COLS:
            v = r[c].strip()
            if v.endswith("%") and float(v[:-1]) / 100 > 0.5:
                return r["NPU Name"].split(".output.")[0]
    return None


@pytest.fixture(scope="module")
def dumps():
    tmp = tempfile.mkdtemp(prefix="ts_msprobe_")
    for step in ("step0", "step1"):
        shutil.copytree(os.path.join(DATA, step), os.path.join(tmp, step))
    yield tmp
    shutil.rmtree(tmp, ignore_errors=True)


def test_rows_and_first_divergence_agree_with_msprobe(dumps, b_step="step1"):
    # (a dump against itself: tests/golden/compare/gpu_self; msprobe is slow to start)
    tmp = tempfile.mkdtemp(dir=dumps)
    a, b = os.path.join(dumps, "step0"), os.path.join(dumps, b_step)
    theirs = msprobe_compare(tmp, a, b)
    rc, report, mine = ours(tmp, a, b)
    assert [h for h in theirs[0] if h not in mine[0]] == [], "msprobe's columns missing"
    by_name = {r["NPU Name"]: r for r in mine}
    compared = 0
    for r in theirs:
        if r["Bench Name"] == "N/A":
            continue  # msprobe left it unmatched (we may match it by structure)
        o = by_name[r["NPU Name"]]
        for c in TEXT_COLS:
            assert o[c] == r[c], (r["NPU Name"], c, o[c], r[c])
        for c in NUM_COLS:
            if o[c] == r[c]:
                continue
            x, y = number(r[c]), number(o[c])
            assert abs(x - y) <= 1e-6 * max(1.0, abs(x)), (r["NPU Name"], c, r[c], o[c])
        compared += 1
    assert compared > 2500
    first = msprobe_first_diff(theirs)
    if b_step == "step0":
        assert first is None and rc == 0 and report["first_divergence"] is None
        assert all(r["Result"] == "pass" for r in theirs)
    else:
        assert rc == 1
        assert report["first_divergence"]["name"] == first == "Functional.conv2d.0.forward"
        assert report["first_divergence"]["kind"] == "input"


# A tensor-mode dump written by msprobe itself on the CPU: a 3-layer MLP, forward and backward;
# argv[2] == "1" runs the last Linear in bfloat16 (a planted precision change).
DUMP_SCRIPT = """
import json, sys, torch
from msprobe.pytorch import PrecisionDebugger
out, low = sys.argv[1], sys.argv[2] == "1"
json.dump({"task": "tensor", "dump_path": out, "rank": [], "step": [], "level": "mix",
           "tensor": {"scope": [], "list": [], "data_mode": ["all"]}}, open(out + ".json", "w"))
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
x = torch.randn(5, 8)
if low:
    m[2].to(torch.bfloat16)
    f = m[2].forward
    m[2].forward = lambda t: f(t.to(torch.bfloat16)).float()
dbg = PrecisionDebugger(config_path=out + ".json")
dbg.start(m)
m(x).sum().backward()
dbg.stop()
"""

TENSOR_COLS = ["Cosine", "EucDist", "MaxAbsErr", "MaxRelativeErr", "One Thousandth Err Ratio",
               "Five Thousandths Err Ratio", "NPU max", "Bench max"]


def test_tensor_mode_metrics_agree_with_msprobe():
    tmp = tempfile.mkdtemp(prefix="ts_msprobe_tensor_")
    try:
        script = os.path.join(tmp, "dump.py")
        with open(script, "w") as f:
            f.write(DUMP_SCRIPT)
        for side, low in (("a", "0"), ("b", "1")):
            p = subprocess.run([sys.executable, script, os.path.join(tmp, side), low],
                               capture_output=True, text=True, timeout=120)
            assert p.returncode == 0, p.stderr[-3000:]
        a, b = os.path.join(tmp, "a", "step0"), os.path.join(tmp, "b", "step0")
        theirs = msprobe_compare(tmp, a, b)
        rc, report, mine = ours(tmp, a, b)
        assert report["mode"] == "tensor" and report["matched"] > 10
        by_name = {r["NPU Name"]: r for r in mine}
        for r in theirs:
            o = by_name[r["NPU Name"]]
            for c in TEXT_COLS + ["Data_name"]:
                assert o[c] == r[c], (r["NPU Name"], c, o[c], r[c])
            for c in TENSOR_COLS:
                if o[c] == r[c]:
                    continue
                x, y = float(r[c]), float(o[c])
                assert abs(x - y) <= 1e-6 * max(1.0, abs(x)), (r["NPU Name"], c, r[c], o[c])
        # The planted change: the last Linear's first op, its inputs agreeing within bfloat16's
        # rounding (the cast itself is not dumped) and its output off by more.
        assert rc == 1
        assert report["first_divergence"]["name"] == "Functional.linear.1.forward"
        assert report["first_divergence"]["kind"] == "output"
        assert "bfloat16" in report["first_divergence"]["meaning"]
        assert report["first_divergence"]["module"] == "Module.2.Linear.forward.0"
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
