"""A planted precision divergence (fc2 under bfloat16 autocast on one side), dumped by
trainscope.dump on both sides: `trainscope compare` names fc2's first op with kind "output", and
msprobe's compare of the same dumps gives the same per-entry metrics and first divergence."""
import json
import os
import subprocess

import pytest

from conftest import trainscope_binary
from test_dump import msprobe_compare, need_msprobe, run_job

METRICS = (("Cosine", "cosine"), ("EucDist", "euc_dist"), ("MaxAbsErr", "max_abs_err"),
           ("MaxRelativeErr", "max_rel_err"), ("One Thousandth Err Ratio", "one_thousandth_ratio"),
           ("Five Thousandths Err Ratio", "five_thousandths_ratio"))


def number(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def ts_compare(a, b):
    binary = trainscope_binary()
    if not os.path.exists(binary):
        pytest.skip("no trainscope binary at %s" % binary)
    h = subprocess.run([binary, "compare", "--help"], capture_output=True, text=True)
    if h.returncode != 0:
        pytest.skip("%s has no compare verb" % binary)
    p = subprocess.run([binary, "compare", str(a), str(b), "--json"], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 1, p.stdout[-2000:] + p.stderr[-2000:]
    return json.loads(p.stdout)


def test_planted_bf16_module_is_first_divergence(tmp_path):
    a = run_job(tmp_path / "npu", low_precision=True)
    b = run_job(tmp_path / "bench")
    report = ts_compare(a, b)
    first = report["first_divergence"]
    assert first is not None
    assert first["name"] == "Functional.linear.1.forward"  # fc2's first (and only) op
    assert first["kind"] == "output"
    assert first["module"] == "Module.fc2.Linear.forward.0"
    assert first["stack"]
    assert report["matched"] >= 20

    need_msprobe()
    rows = msprobe_compare(os.path.join(str(a), "step0"), os.path.join(str(b), "step0"),
                           str(tmp_path / "msprobe"))
    # msprobe's first divergence: the first row, in execution order, that is not "pass".
    bad = [r for r in rows if r["Result"] != "pass"]
    assert bad and bad[0]["NPU Name"].startswith(first["name"] + ".output.")
    assert same_metrics(rows, report) > 100


def same_metrics(rows, report, results=False):
    """Asserts msprobe's csv rows carry our per-row metrics (within 1e-6), and with `results`
    our pass/warning/error too; returns how many numbers were compared."""
    ours = {row["name"]: row for e in report["entries"] for row in e.get("rows", [])}
    compared = 0
    for r in rows:
        mine = ours.get(r["NPU Name"])
        assert mine is not None, r["NPU Name"]
        assert not results or mine["result"] == r["Result"], (r["NPU Name"], mine["result"])
        for col, key in METRICS:
            x, y = number(r[col]), number(mine.get(key))
            assert (x is None) == (y is None), (r["NPU Name"], col, r[col], mine.get(key))
            if x is not None:
                assert abs(x - y) <= 1e-6 * max(1.0, abs(x)), (r["NPU Name"], col, x, y)
                compared += 1
    return compared
